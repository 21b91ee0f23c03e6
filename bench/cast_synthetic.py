"""CAST on the embedded SYNTHETIC world with the default configs: results, margins and wall time.

    python bench/cast_synthetic.py [--configs cast_coin cast_youcook2 cast_crosstask] [--seeds 0 1 2]
                                   [--world first_order|history|history_control] [--out /tmp/vidjax_cast_synthetic]

On a world with carried objects (history, history_control) it prints a second table: every adapter's
prediction alone (C only) on all, reuse and non-reuse queries, CAST at L = 1 and L = 5, and the history
margins (CAST C-only >= EF + residual C-only + 3; CAST L = 5 >= L = 1 + 3; the gap mostly on reuse queries;
on the control world: CAST and EF + residual within 1.5 points, no L = 5 gain of 3).

Runs each default config (the paper's hyperparameters) for each seed with `vidjax.experiments.cast.run`
and prints one row per run: zero-shot, late-fusion heuristic, early fusion (direct / residual) and CAST
Acc, the context sweep's L = 0 and L = 1 points, wall time, and whether the issue's margins hold
(CAST >= zero-shot + 15 and >= heuristic + 5; EF + residual >= EF; L = 1 >= L = 0 + 10).
SYNTHETIC: these numbers demonstrate mechanisms, they are not the paper's.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine  # noqa: E402  (bench/machine.py)

from vidjax.experiments import cast  # noqa: E402
from vidjax.experiments.common import load_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def margins(r: dict) -> dict[str, bool]:
  m, sweep = r["metrics"], r["context_sweep"]
  return {
      "cast>=zs+15": m["cast"]["acc"] >= m["zero_shot"]["acc"] + 15,
      "cast>=heur+5": m["cast"]["acc"] >= m["late_fusion_heuristic"]["acc"] + 5,
      "efres>=ef": m["early_fusion_residual"]["acc"] >= m["early_fusion"]["acc"],
      "L1>=L0+10": sweep["1"]["acc"] >= sweep["0"]["acc"] + 10,
  }


def history_margins(r: dict) -> dict[str, bool]:
  f, sub, sweep = r["fair_comparison"]["prediction_only"], r["subsets"], r["context_sweep"]
  gain = lambda m: m["cast"]["acc"] - m["early_fusion_residual"]["acc"]  # noqa: E731
  if r["config"]["data"]["world"] == "history_control":  # v_{t-1} shows the variant: nothing to find
    return {"C:tie(+-1.5)": abs(gain(f)) <= 1.5, "no L gain(<3)": sweep["5"]["acc"] < sweep["1"]["acc"] + 3}
  return {
      "C:cast>=efres+3": gain(f) >= 3,
      "L5>=L1+3": sweep["5"]["acc"] >= sweep["1"]["acc"] + 3,
      "gain on reuse": gain(sub["reuse"]["prediction_only"]) > gain(sub["non_reuse"]["prediction_only"]),
  }


def history_row(name: str, seed: int, r: dict) -> str:
  f, sub, sweep = r["fair_comparison"]["prediction_only"], r["subsets"], r["context_sweep"]
  ok = history_margins(r)
  cells = [f["early_fusion_residual"]["acc"], f["cast"]["acc"]]
  for part in ("reuse", "non_reuse"):
    cells += [sub[part]["prediction_only"]["early_fusion_residual"]["acc"], sub[part]["prediction_only"]["cast"]["acc"]]
  cells += [sweep["1"]["acc"], sweep["5"]["acc"], r["inference_ablation"]["B_visual_continuity"]["ident_acc"],
            100.0 * sub["reuse"]["n"] / (sub["reuse"]["n"] + sub["non_reuse"]["n"])]
  return (f"{name:<16}{seed:>5}" + "".join(f"{c:>9.1f}" for c in cells) + "  " +
          ("all hold" if all(ok.values()) else "FAIL: " + ", ".join(k for k, v in ok.items() if not v)))


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--configs", nargs="+", default=["cast_coin", "cast_youcook2", "cast_crosstask"])
  ap.add_argument("--seeds", nargs="+", type=int, default=[0])
  ap.add_argument("--world", default="first_order", help="config.data.world")
  ap.add_argument("--out", default="/tmp/vidjax_cast_synthetic")
  args = ap.parse_args()
  # Accuracy and wall time only (no FLOP count), so no "% of peak": the device line says what ran.
  print(f"SYNTHETIC procedural world ({args.world}), default configs; {machine.describe()}")
  history_head = (f"{'config':<16}{'seed':>5}" + "".join(f"{h:>9}" for h in (
      "C:EF+res", "C:CAST", "reuse:EF", "reuse:C", "other:EF", "other:C", "CAST L=1", "CAST L=5", "B Ident", "reuse%")))
  history_rows = []
  head = (f"{'config':<16}{'seed':>5}{'zs':>7}{'heur':>7}{'EF':>7}{'EF+res':>8}{'CAST':>7}{'St.':>7}{'Id.':>7}"
          f"{'L=0':>7}{'L=1':>7}{'min':>6}  margins")
  rows = []
  for name in args.configs:
    for seed in args.seeds:
      config = load_config(ROOT / "configs" / f"{name}.py")
      config.seed = seed
      config.data.world = args.world
      config.train.progress = False
      start = time.time()
      r = cast.run(config, Path(args.out) / f"{name}_{args.world}_seed{seed}")
      minutes = (time.time() - start) / 60
      m, sweep, ok = r["metrics"], r["context_sweep"], margins(r)
      rows.append(f"{name:<16}{seed:>5}{m['zero_shot']['acc']:>7.1f}{m['late_fusion_heuristic']['acc']:>7.1f}"
                  f"{m['early_fusion']['acc']:>7.1f}{m['early_fusion_residual']['acc']:>8.1f}{m['cast']['acc']:>7.1f}"
                  f"{m['cast']['state_acc']:>7.1f}{m['cast']['ident_acc']:>7.1f}{sweep['0']['acc']:>7.1f}"
                  f"{sweep['1']['acc']:>7.1f}{minutes:>6.1f}  " + ("all hold" if all(ok.values()) else
                                                                    "FAIL: " + ", ".join(k for k, v in ok.items() if not v)))
      print("\n".join([head] + rows), flush=True)
      if "subsets" in r:
        history_rows.append(history_row(name, seed, r))
        print("\nC = prediction alone (Table 5's C row), Acc %; reuse / other = reuse / non-reuse queries")
        print("\n".join([history_head] + history_rows), flush=True)


if __name__ == "__main__":
  main()
