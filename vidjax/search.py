"""Search a built stack index from the command line.

    python -m vidjax.search --index DIR "a query" [--context CLIP_ID ...] [--k 10] [--json]

DIR is `<workdir>/index` of a `configs/stack_<dataset>.py` run (its format: `vidjax.retrieval.index`): the
corpus, the query encoder and the stages named in its manifest, each stage kind built by `KINDS` here. The query goes through the stages the index keeps (recall -> rerank, and
CAST consistency when `--context` names the clips the user has already seen, oldest first; they are never
returned); the first output line names the stages it ran and any stage of the run the index does not keep (a
VEDJE rerank stage: "stages: dense recall -> cast (the index keeps no vedje stage: ...)"). Prints the ranked clips with each stage's score and the time each stage took, or one JSON
object with `--json`. It computes at the evaluation phase's default precision ("highest": full float32 matmuls on a
GPU too, README "Precision"), so its ranks do not move with the backend. Every bad input (index directory, query, context
clip, --k) is one line on stderr (a long query or clip id quoted by its first 80 characters and its length) and
exit status 2. Opening the index checks its manifest and every file it names against what the manifest recorded
(`StackIndex`): a damaged or edited index is one line naming the file.

Importing this module imports no method (nor any experiment): the format lives in `vidjax.retrieval.index`, and a
stage kind is built from its model and scorer (`KINDS`). Method code is imported only when an index needs it: a GRDR
recall stage (the GRDR model and the stack's GRDR recall), a store's text tower (the extraction's model loading).
"""
from __future__ import annotations

import argparse
import json
import sys

import ml_collections

from vidjax.defaults.common import PRECISION_DEFAULTS
from vidjax.models import cast as cast_models
from vidjax.models.pair import PairReranker
from vidjax.retrieval.index import Kinds, StackIndex
from vidjax.scorers import cast as cast_scorers
from vidjax.scorers.pair import PairScorer

# The precision `python -m vidjax.search` computes at: the evaluation phase's default, as a run's evaluation does.
SEARCH_PRECISION = PRECISION_DEFAULTS["eval"]


def _pair_reranker(section, params, dim):  # pylint: disable=unused-argument
  return PairScorer(PairReranker(), params)


def _cast_ensemble(section, params, dim):
  """CAST's Full Ensemble S = A + w_v B + w_p C (eq. 13) with the trained predictor."""
  model = cast_models.CAST(dim, num_heads=section["num_heads"])
  predictor = cast_scorers.PredictorScorer(lambda p, *a: model.apply({"params": p}, *a), params)
  return cast_scorers.EnsembleScorer(predictor, section["w_v"], section["w_p"])


def _grdr_recall(section, params, vectors, ids, dim):
  """GRDR's generative recall over the corpus then its dense rerank (the stack's `grdr_recall`), with room for the
  context clips the stack drops."""
  # A GRDR index only: the GRDR model and the stack's GRDR recall stage.
  from vidjax.methods import grdr, stack  # pylint: disable=g-import-not-at-top
  model = grdr.build_model(ml_collections.ConfigDict(dict(section["model"], query_dim=dim)), dim)
  return stack.grdr_recall(model, params, vectors, list(ids), int(section["k"]) + int(section["context_len"]))


def _text_tower(tower):
  from vidjax import extract  # pylint: disable=g-import-not-at-top  (a store's text tower only)
  return extract.make_query_encoder(tower)


# What each kind an index's manifest names is built with.
KINDS = Kinds(recalls={"grdr": _grdr_recall}, stages={"pair_reranker": _pair_reranker, "cast_ensemble": _cast_ensemble},
              text_tower=_text_tower)


def open_index(path) -> StackIndex:
  """The built index at `path`, checked (`StackIndex`), its stages built by `KINDS`."""
  return StackIndex(path, KINDS)


def parse(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m vidjax.search", description=__doc__.split("\n\n")[0])
  p.add_argument("query", help="the query text")
  p.add_argument("--index", required=True, help="a built index directory (<workdir>/index of a stack run)")
  p.add_argument("--context", nargs="*", default=[], metavar="CLIP_ID", help="clips already seen, oldest first")
  p.add_argument("--k", type=int, default=10, help="results to return (default 10)")
  p.add_argument("--json", action="store_true", help="print one JSON object")
  return p.parse_args(argv)


def search(args: argparse.Namespace) -> dict:
  """The ranked results of one query as a JSON-able dict."""
  index = open_index(args.index)
  result, stages = index.search(args.query, args.context, args.k)
  rows = []
  for rank, (clip, score) in enumerate(zip(result.ids[0], result.scores[0]), 1):
    row = index.row[clip]
    rows.append({"rank": rank, "id": str(clip), "video": str(index.videos[row]), "caption": str(index.captions[row]),
                 "score": float(score),
                 "scores": {stage: round(result.score_of(stage, 0, clip), 6) for stage in ["recall", *stages]}})
  return {"query": args.query, "context": list(args.context), "stages": ["recall", *stages],
          "stages_line": index.stages_line(stages), "omitted_stages": index.omitted,
          "synthetic": index.synthetic, "backbone": index.manifest["backbone"], "results": rows,
          "latency_ms": {k: round(v, 4) for k, v in result.latency_ms.items()}}


def render(out: dict) -> str:
  stages = out["stages"]
  query = out['query'] if len(out['query']) <= 80 else f"{out['query'][:80]}... ({len(out['query']):,} characters)"
  lines = [out["stages_line"], ("SYNTHETIC index: " if out["synthetic"] else "") + repr(query)
           + (f" after {', '.join(out['context'])}" if out["context"] else " (no context: CAST consistency skipped)")]
  head = f"{'rank':>4}  {'clip':<16} {'caption':<28} " + " ".join(f"{s:>9}" for s in stages)
  lines += [head, "-" * len(head)]
  for r in out["results"]:
    lines.append(f"{r['rank']:>4}  {r['id']:<16} {r['caption'][:28]:<28} "
                 + " ".join(f"{r['scores'][s]:>9.4f}" for s in stages))
  lines.append("ms: " + ", ".join(f"{k} {v:.2f}" for k, v in out["latency_ms"].items())
               + " (one query in a fresh process: includes compilation; bench/stack_latency.py has the warm numbers)")
  return "\n".join(lines)


# What an error line quotes at most (a 120k-character query is not echoed back whole).
MAX_ERROR_CHARS = 600


def error_line(e: BaseException) -> str:
  """`e` as one line of at most `MAX_ERROR_CHARS` characters (a longer one: its start and its length)."""
  text = " ".join((e.args[0] if isinstance(e, KeyError) and len(e.args) == 1 and isinstance(e.args[0], str)
                   else str(e)).split())
  if len(text) > MAX_ERROR_CHARS:
    text = f"{text[:MAX_ERROR_CHARS]}... ({len(text):,} characters)"
  return f"vidjax.search: {text}"


def main(argv=None) -> int:
  args = parse(argv)
  import jax  # pylint: disable=g-import-not-at-top
  try:
    with jax.default_matmul_precision(SEARCH_PRECISION):
      out = search(args)
  except (ValueError, OSError, KeyError, ImportError) as e:  # OSError: FileNotFoundError, an unreadable file
    print(error_line(e), file=sys.stderr)
    return 2
  print(json.dumps(out, indent=1) if args.json else render(out))
  return 0


if __name__ == "__main__":
  sys.exit(main())
