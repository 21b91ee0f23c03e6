"""The real path's summary: what `launch/real_path.sh OUT ...` measured, in one table.

    python -m vidjax.real_path OUT        # writes OUT/summary.json and OUT/summary.md, prints the table

It reads the backbone's `corpus_summary.json`, each method's `results.json` under `OUT/runs/` and the script's
`OUT/times.tsv`, and checks each method's line of the rendered-corpus issue (README, "Real data"): CAST >= zero-shot
+ 10 Acc; VEDJE's rerank >= stage 1 on T2V R@1; GRDR's candidate recall >= 80% of dense's at the same budget;
VideoComp's contrastive fine-tune > zero-shot on temp-reorder; GenState's trained VidCLIP > the zero-shot of the
same features on Acc_tri (stricter than the issue's comparator, the pixel-statistics stand-in, which needs a run of
its own: `configs/genstate_rendered.py`); the stack with VEDJE as its rerank stage >= the stack with the pair
reranker on R@1. A run that is missing (not in the script's SCOPE, or failed) is listed as such. The corpus's pixels
are rendered: everything here is SYNTHETIC.

summary.json: {"synthetic": true, "path": "real", "out", "backbone": {"step_t2v_r1", "video_t2v_r1", "chance_step",
"chance_video"} | null, "lines": [{"method", "dataset", "claim", "value", "reference", "holds"}] (holds null: not
run), "seconds": {step: s}, "total_minutes"}.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from vidjax import io


def _read(path: Path) -> dict | None:
  """A run's results (None: the run is not there); a malformed file is `io.read_json`'s one clear error."""
  return io.read_json(path, "results file") if path.exists() else None


def _metric(results: dict, path: str, where: Path) -> float:
  value = results
  for key in path.split("."):
    if not isinstance(value, dict) or key not in value:
      raise ValueError(f"{where}: results have no {path!r} (at {key!r}); was it written by another vidjax version?")
    value = value[key]
  return float(value)


# (method, dataset, run folder, claim, value key, reference key, the reference's factor / offset, strict)
LINES = (
    *(("cast", d, f"cast_{d}", "CAST Acc >= zero-shot Acc + 10", "metrics.cast.acc", "metrics.zero_shot.acc",
       1.0, 10.0, False) for d in ("youcook2", "coin", "crosstask")),
    ("vedje", "msrvtt", "vedje_msrvtt", "VEDJE T2V R@1 >= stage 1 T2V R@1", "metrics.vedje.t2v_r1",
     "metrics.stage1.t2v_r1", 1.0, 0.0, False),
    ("grdr", "msrvtt", "grdr_msrvtt", "GRDR candidate recall >= 0.8 x dense's (inductive pool, same budget)",
     "metrics.inductive.grdr.candidate_recall", "metrics.inductive.dense.candidate_recall", 0.8, 0.0, False),
    ("grdr", "msrvtt (full corpus)", "grdr_msrvtt", "GRDR candidate recall >= 0.8 x dense's (full corpus)",
     "metrics.full_corpus.grdr.candidate_recall", "metrics.full_corpus.dense.candidate_recall", 0.8, 0.0, False),
    ("videocomp", "activitynet", "comp_activitynet", "contrastive fine-tune > zero-shot on temp-reorder",
     "metrics.contrastive.temp_reorder", "metrics.zero_shot.temp_reorder", 1.0, 0.0, True),
    ("genstate", "genstate", "genstate", "trained VidCLIP Acc_tri > the backbone's zero-shot Acc_tri (same triplets)",
     "metrics.vidclip.acc_tri", "metrics.zero_shot.acc_tri", 1.0, 0.0, True),
)
STACK = ("stack", "youcook2", "stack with VEDJE R@1 >= stack with the pair reranker R@1", "metrics.full_stack.r1")


def summarize(out: str | Path) -> dict:
  """The summary dict of `OUT` (module docstring); raises ValueError on a results file it cannot read."""
  out = Path(out)
  runs = out / "runs"
  lines = []
  for method, dataset, folder, claim, value_key, ref_key, factor, offset, strict in LINES:
    where = runs / folder / "results.json"
    results = _read(where)
    value = reference = holds = None
    if results is not None:
      value = _metric(results, value_key, where)
      reference = factor * _metric(results, ref_key, where) + offset
      holds = value > reference if strict else value >= reference
    lines.append(dict(method=method, dataset=dataset, claim=claim, value=value, reference=reference, holds=holds))
  method, dataset, claim, key = STACK
  pair, vedje = (_read(runs / f"stack_youcook2_{r}" / "results.json") for r in ("pair", "vedje"))
  value = reference = holds = None
  if pair is not None and vedje is not None:
    value = _metric(vedje, key, runs / "stack_youcook2_vedje")
    reference = _metric(pair, key, runs / "stack_youcook2_pair")
    holds = value >= reference
  lines.append(dict(method=method, dataset=dataset, claim=claim, value=value, reference=reference, holds=holds))

  backbone = None
  corpus = _read(out / "backbone" / "corpus_summary.json")
  if corpus is not None:
    where = out / "backbone" / "corpus_summary.json"
    backbone = {"step_t2v_r1": _metric(corpus, "retrieval.trained.step.t2v_r1", where),
                "video_t2v_r1": _metric(corpus, "retrieval.trained.video.t2v_r1", where),
                "chance_step": _metric(corpus, "retrieval.trained.step.chance_t2v_r1", where),
                "chance_video": _metric(corpus, "retrieval.trained.video.chance_t2v_r1", where)}
  seconds = {}
  times = out / "times.tsv"
  if times.exists():
    for n, row in enumerate(times.read_text().splitlines(), 1):
      fields = row.split("\t")
      if len(fields) < 2 or not fields[1].isdigit():
        raise ValueError(f"{times}: line {n}: expected 'step<TAB>seconds...', got {row!r}")
      seconds[fields[0]] = int(fields[1])  # a re-run step: its last time
  return {"synthetic": True, "path": "real", "out": str(out), "backbone": backbone, "lines": lines,
          "seconds": seconds, "total_minutes": round(sum(seconds.values()) / 60, 1)}


def markdown(summary: dict) -> str:
  """The summary as Markdown tables (SYNTHETIC-labelled)."""
  def num(x):
    return "-" if x is None else f"{x:.2f}"
  rows = ["SYNTHETIC (rendered pixels): the real path's lines on the rendered corpus", "",
          "| method | dataset | line | value | reference | holds |", "|---|---|---|---:|---:|---|"]
  for line in summary["lines"]:
    holds = "not run" if line["holds"] is None else ("yes" if line["holds"] else "**no**")
    rows.append(f"| {line['method']} | {line['dataset']} | {line['claim']} | {num(line['value'])} | "
                f"{num(line['reference'])} | {holds} |")
  if summary["backbone"]:
    b = summary["backbone"]
    rows += ["", f"Backbone on the held-out split: step T2V R@1 {num(b['step_t2v_r1'])} (chance {num(b['chance_step'])}),"
             f" video T2V R@1 {num(b['video_t2v_r1'])} (chance {num(b['chance_video'])})."]
  if summary["seconds"]:
    rows += ["", "| step | minutes |", "|---|---:|"]
    rows += [f"| {name} | {s / 60:.1f} |" for name, s in summary["seconds"].items()]
    rows.append(f"| **total** | **{summary['total_minutes']:.1f}** |")
  return "\n".join(rows) + "\n"


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("out", help="the folder launch/real_path.sh wrote")
  args = parser.parse_args(argv)
  summary = summarize(args.out)
  io.atomic_write_json(Path(args.out) / "summary.json", summary)
  text = markdown(summary)
  io.atomic_write_text(Path(args.out) / "summary.md", text)
  print(text, end="")


if __name__ == "__main__":
  main()
