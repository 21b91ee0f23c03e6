"""The composed stack's latency per stage at batch 1: dense recall (K = 100) -> rerank (K = 100) -> CAST.

    python bench/stack_latency.py [--sizes 10000,100000,1000000] [--dim 768] [--k-recall 100]
                                  [--context 5] [--queries 50] [--json PATH]
                                  [--index-backend jax|approx|faiss|scann] [--index-dtype float32|bfloat16]
                                  [--index-param KEY=VALUE ...]

WEIGHTS AND VECTORS ARE RANDOM (timing only). For every corpus size N it builds, in one process:
  * `DenseIndex` over N random unit vectors of width `--dim` (768 = VideoPrism LvT-B), built from the stack
    configs' `index` section (`DenseIndex.from_config`; exact "jax" float32 by default, or the backend and params
    given on the command line, as `--config.index.*` would give them to `configs/stack_*.py`);
  * the rerank stage: `PairReranker` (s = w_rho rho + t^T W v) with random W, scoring all K candidates;
  * the CAST stage: a `CAST` predictor (8 heads, random init) inside the Full Ensemble (eq. 13), reading
    `--context` context clips, keeping the top 10;
and runs `Stack.search` one query at a time (batch 1): one warm-up query (compilation), then `--queries`
queries, each with its context clips excluded from the results (as the experiment does). Reported: ms per
query of each stage (the stack's own per-stage timers), queries/s, and for the recall stage its achieved
FLOP/s (2 N D per query) as a fraction of the device's peak (a large matmul in the index's dtype, float32 at jax's
default precision) and the corpus bytes it streams per second (N D x 4 or 2 bytes per query) as a fraction of a
memory copy, both measured in the same process (`machine.limits_line`): one query is a matrix-vector product,
bound by memory bandwidth, not by the matmul rate.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import machine  # noqa: E402  (bench/machine.py)
import ml_collections  # noqa: E402
from dense_index import unit_rows  # noqa: E402
from vidjax.defaults import common  # noqa: E402
from vidjax.models import cast as cast_models  # noqa: E402
from vidjax.models.pair import PairReranker  # noqa: E402
from vidjax.retrieval import DenseIndex, Stack, Stage  # noqa: E402
from vidjax.scorers import cast as cast_scorers  # noqa: E402
from vidjax.scorers.pair import PairScorer  # noqa: E402


def stages(dim: int, k_recall: int, context: int, seed: int = 0) -> list[Stage]:
  rng = np.random.default_rng(seed)
  text = np.zeros((1, dim), np.float32)
  pair = PairReranker()
  params = pair.init(jax.random.PRNGKey(seed), text, np.zeros((1, k_recall, dim), np.float32), np.zeros((1, k_recall)))
  params = {"params": {**params["params"], "bilinear": rng.normal(size=(dim, dim)).astype(np.float32) / dim}}
  model = cast_models.CAST(dim, num_heads=8)
  cast_params = model.init(jax.random.PRNGKey(seed + 1), text, np.zeros((1, context, dim), np.float32),
                           np.ones((1, context), np.float32))["params"]
  predictor = cast_scorers.PredictorScorer(lambda p, *a: model.apply({"params": p}, *a), cast_params)
  return [Stage("rerank", PairScorer(pair, params["params"]), k_recall),
          Stage("cast", cast_scorers.EnsembleScorer(predictor, 0.3, 1.0), 10)]


def index_config(backend: str, dtype: str, params: list[str]) -> ml_collections.ConfigDict:
  """The stack configs' `index` section (`vidjax.defaults.common.index_section`) with these values, checked."""
  config = ml_collections.ConfigDict({"index": common.index_section()})
  config.index.backend, config.index.dtype = backend, dtype
  for item in params:
    key, _, value = item.partition("=")
    if key not in config.index.params:
      common.bad_value(f"index.params.{key}", value, f"one of {sorted(config.index.params)}")
    config.index.params[key] = value if key == "factory" else float(value) if "." in value else int(value)
  common.check_index(config)
  return config.index


def measure(n: int, dim: int, k_recall: int, context: int, queries: int, rate: float,
            index_section: ml_collections.ConfigDict) -> dict:
  rng = np.random.default_rng(n)
  corpus = unit_rows(rng, n, dim)
  ids = [f"c{i:07d}" for i in range(n)]
  start = time.perf_counter()
  index = DenseIndex.from_config(ids, corpus, index_section, query_batch=1)
  build = time.perf_counter() - start
  stack = Stack(index, k_recall, stages(dim, k_recall, context), query_batch=1)
  q = queries + 1
  rows = rng.integers(0, n, size=(q, context))
  batch = {"text": unit_rows(rng, q, dim), "history": corpus[rows], "history_mask": np.ones((q, context), np.float32)}
  exclude = [[ids[r] for r in row] for row in rows]
  stack.search({k: v[:1] for k, v in batch.items()}, 10, exclude[:1])  # warm-up: compiles every stage
  result = stack.search({k: v[1:] for k, v in batch.items()}, 10, exclude[1:])
  ms, params = result.latency_ms, index.params
  del corpus, index
  return {"clips": n, "dim": dim, "index": index_section.backend, "index_params": params,
          "build_s": round(build, 1), **{f"ms_{k}": round(v, 3) for k, v in ms.items()},
          "queries_per_s": round(1e3 / ms["total"], 1),
          "recall_matmul_fraction": round(2 * n * dim / (ms["recall"] / 1e3) / rate, 3),
          "recall_gb_per_s": round((2 if index_section.dtype == "bfloat16" else 4) * n * dim / (ms["recall"] / 1e3) / 1e9,
                                   2)}


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--sizes", default="10000,100000,1000000")
  p.add_argument("--dim", type=int, default=768)
  p.add_argument("--k-recall", type=int, default=100)
  p.add_argument("--context", type=int, default=5)
  p.add_argument("--queries", type=int, default=50)
  p.add_argument("--json", default="")
  p.add_argument("--index-backend", default="jax", help="the stack config's index.backend (jax, approx, faiss, scann)")
  p.add_argument("--index-dtype", default="float32")
  p.add_argument("--index-param", action="append", default=[], metavar="KEY=VALUE",
                 help="an index.params value, e.g. factory=HNSW32 (repeat for more)")
  args = p.parse_args(argv)
  section = index_config(args.index_backend, args.index_dtype, args.index_param)
  print(machine.describe(), flush=True)
  dtype = "bfloat16" if args.index_dtype == "bfloat16" else "float32"
  line, limits = machine.limits_line((dtype,))
  rate = limits[f"matmul_{dtype}"]
  print(line + f"; peak = the {dtype} matmul", flush=True)
  rows = []
  head = (f"{'clips':>9} {'recall ms':>10} {'rerank ms':>10} {'cast ms':>8} {'total ms':>9} {'q/s':>7} "
          f"{'recall/peak':>12} {'recall GB/s':>12} {'of copy':>8}")
  print("random weights and vectors (timing only); batch 1, K = %d, context %d; index %s %s %s" % (
      args.k_recall, args.context, section.backend, section.dtype,
      {k: v for k, v in section.params.items() if v is not None}))
  print(head + "\n" + "-" * len(head), flush=True)
  for n in [int(s) for s in args.sizes.split(",")]:
    r = measure(n, args.dim, args.k_recall, args.context, args.queries, rate, section)
    r["recall_copy_fraction"] = round(r["recall_gb_per_s"] * 1e9 / limits["copy"], 3)
    rows.append(r)
    print(f"{n:>9} {r['ms_recall']:>10.3f} {r['ms_rerank']:>10.3f} {r['ms_cast']:>8.3f} {r['ms_total']:>9.3f} "
          f"{r['queries_per_s']:>7.1f} {r['recall_matmul_fraction']:>12.1%} {r['recall_gb_per_s']:>12.1f} "
          f"{r['recall_copy_fraction']:>8.1%}", flush=True)
  if args.json:
    Path(args.json).write_text(json.dumps({"machine": machine.describe(), "limits": limits, "peak_dtype": dtype,
                                           "rows": rows},
                                          indent=1))


if __name__ == "__main__":
  main()
