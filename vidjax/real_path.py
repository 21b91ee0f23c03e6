"""The real path's summary: what `launch/real_path.sh OUT ...` measured, in one table.

    python -m vidjax.real_path OUT        # writes OUT/summary.json and OUT/summary.md, prints the table

It reads the backbone's `corpus_summary.json`, the corpus's own (`OUT/corpus/corpus_summary.json`: per mechanism,
the share of its queries only that mechanism decides, `vidjax.worlds.release.corpus_summary`), each method's
`results.json` under `OUT/runs/` and the script's `OUT/times.tsv`, and checks each method's line of the
rendered-corpus issues (README, "Real data"; the lines are the methods' `real_path` entries in
`vidjax.methods.METHODS`): CAST >= zero-shot + 10 Acc; on MSR-VTT's ordered-event queries VEDJE's rerank >= stage 1
+ 3 T2V R@1 and its joint pass alone above chance; on MSR-VTT's facet queries X-Pool > CLIP4Clip meanP >= the
backbone's cosine, GRDR (<= 150 candidates) + X-Pool within 2 R@1 of X-Pool and GRDR's candidate recall >= 80%;
VideoComp's contrastive fine-tune > zero-shot on temp-reorder; GenState's trained VidCLIP > the zero-shot of the same
features on Acc_tri (stricter than the issue's comparator, the pixel-statistics stand-in, which needs a run of its
own: `configs/genstate_rendered.py`); the stack with VEDJE as its rerank stage >= the stack with the pair reranker
on R@1. A run that is missing (not in the script's SCOPE, or failed) is listed as such. The corpus's pixels are
rendered: everything here is SYNTHETIC.

summary.json: {"synthetic": true, "path": "real", "out", "backbone": {"step_t2v_r1", "video_t2v_r1", "chance_step",
"chance_video", "frame_t2f_r1", "chance_frame"} | null, "mechanisms": {kind: {"queries", "frame_mean_r1",
"aligned_r1", "share"}} | null, "lines": [{"method", "dataset", "claim", "value", "reference", "holds"}] (holds
null: not run), "seconds": {step: s}, "total_minutes"}.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from vidjax import io
from vidjax.methods import METHODS


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


STACK = ("stack", "youcook2", "stack with VEDJE R@1 >= stack with the pair reranker R@1", "metrics.full_stack.r1")


def summarize(out: str | Path) -> dict:
  """The summary dict of `OUT` (module docstring); raises ValueError on a results file it cannot read."""
  out = Path(out)
  runs = out / "runs"
  lines = []
  for m in METHODS.values():  # each method's lines (`vidjax.methods.Line`), in the table's order
    for line in m.real_path:
      where = runs / line.folder / "results.json"
      results = _read(where)
      value = reference = holds = None
      if results is not None:
        value = _metric(results, line.value, where)
        reference = (line.factor * _metric(results, line.reference, where) if line.reference else 0.0) + \
            line.offset
        holds = value > reference if line.strict else value >= reference
      lines.append(dict(method=m.label, dataset=line.dataset, claim=line.claim, value=value, reference=reference,
                        holds=holds))
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
                "chance_video": _metric(corpus, "retrieval.trained.video.chance_t2v_r1", where),
                # single frames against their step's caption (the backbone's per-frame term); None: a backbone summary
                # written before the term had no such numbers
                "frame_t2f_r1": corpus["retrieval"]["trained"]["step"].get("t2f_r1"),
                "chance_frame": corpus["retrieval"]["trained"]["step"].get("chance_t2f_r1")}
  shares = _read(out / "corpus" / "corpus_summary.json")
  mechanisms = None if shares is None else {
      kind: {k: shares[kind][k] for k in ("queries", "frame_mean_r1", "aligned_r1", "share")}
      for kind in ("order", "facets", "states") if kind in shares}
  seconds = {}
  times = out / "times.tsv"
  if times.exists():
    for n, row in enumerate(times.read_text().splitlines(), 1):
      fields = row.split("\t")
      if len(fields) < 2 or not fields[1].isdigit():
        raise ValueError(f"{times}: line {n}: expected 'step<TAB>seconds...', got {row!r}")
      seconds[fields[0]] = int(fields[1])  # a re-run step: its last time
  return {"synthetic": True, "path": "real", "out": str(out), "backbone": backbone, "mechanisms": mechanisms,
          "lines": lines,
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
             f" video T2V R@1 {num(b['video_t2v_r1'])} (chance {num(b['chance_video'])}), frame-level T2F R@1 "
             f"{num(b.get('frame_t2f_r1'))} (chance {num(b.get('chance_frame'))})."]
  if summary.get("mechanisms"):
    rows += ["", "The corpus's queries (`corpus/corpus_summary.json`): R@1 of two pixel oracles, and the share only the "
             "mechanism decides", "", "| queries | n | frame-mean oracle R@1 | aligned / order-aware oracle R@1 | share |",
             "|---|---:|---:|---:|---:|"]
    rows += [f"| {kind} | {m['queries']} | {num(m['frame_mean_r1'])} | {num(m['aligned_r1'])} | {num(m['share'])} |"
             for kind, m in summary["mechanisms"].items()]
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
