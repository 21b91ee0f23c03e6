"""The composed retrieval stack: corpus-scale Consistent Video Retrieval (`configs/stack_<dataset>.py`).

CAST's benchmark (../shared/papers/cast.txt §2.2) picks the next clip among 10 candidates. Here the pool is
the whole evaluation corpus (every clip of every evaluation video) and the answer comes from a composed stack
(`vidjax.retrieval.Stack`):

    recall     dense index of the corpus clips, queried with the instruction's text embedding (top k_recall)
    rerank     a pair reranker (`vidjax.models.pair`) over (text, clip) with the recall score as residual prior,
               trained on the recall stage's candidates of training queries (keeps rerank_k); or
               (`stack.reranker`) VEDJE over the clips' frame caches, or X-Pool (GRDR's reranker,
               `vidjax.methods.dense`) over the clips' frame features, each trained on the training clips' captions
    cast       the CAST Full Ensemble S = A + w_v B + w_p C (eq. 13) with the query's context clips, CAST
               trained and its (w_v, w_p) selected on held-out training queries exactly as `configs/cast_*.py`
               does (keeps k)

and three rows are reported (results.json `metrics`): `recall` (the recall stage alone), `recall_rerank`
and `full_stack`, each with R@1/5/10 of the ground-truth next clip, `state_confusion` / `ident_confusion`
(% of the top-10 slots holding a clip of the query's own video at another step / the query's step in another
video; without step labels, as in YouCook2, another video of the same task) and `latency_ms` per stage
(queries one at a time, after a warm-up); `rerank_k_sweep` has the full stack with the rerank keeping fewer
candidates. A query's
context clips are never returned (the user has seen them; `Stack.search(exclude=...)`): in the corpus they
would be the clips most continuous with v_{t-1}.

The run writes `<workdir>/index/` (`write_index`; the format: `vidjax.retrieval.index`), which `python -m vidjax.search`
loads.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from vidjax import evaluate, sharding
from vidjax.data import provenance
from vidjax.defaults.common import (bad_value, check_choice, check_index, check_positive, check_positive_int,
                                    clip_to_data)
from vidjax.sharding import is_writer
from vidjax.experiments import common
from vidjax.extract import text_tower
from vidjax.methods import cast
from vidjax.methods.stack import (RECALLS, ROWS, Corpus, budgets, check_rerank_inputs, grdr_recall, latency,
                                  row_metrics, split_videos, stacks, table, train_grdr, train_reranker, vedje_stage,
                                  write_index, xpool_stage)
from vidjax.retrieval import DenseIndex, Stack, Stage
from vidjax.scorers import cast as cast_scorers
from vidjax.scorers.pair import PairScorer
from vidjax.worlds import procedural

# Besides `common.is_resumable`'s rule: more CAST epochs resume training, and nothing written depends on the
# stack's stages (CAST and the reranker are trained on dense candidates, so a workdir can switch between dense and
# GRDR recall and keep them; the index is rewritten).
RESUMABLE = ("train.epochs", "stack")


def validate(config) -> None:
  cast.validate(config)
  check_index(config)
  if config.data.source == "tfds":
    bad_value("data.source", config.data.source, "'store': the corpus needs every clip of the evaluation "
                     "videos, which a VidjaxCvr TFDS dataset does not carry")
  check_positive_int(config, ("stack.k_recall", "stack.rerank_k", "stack.k", "stack.query_batch",
                                     "stack.latency_queries", "rerank.candidates",
                                     "rerank.epochs", "rerank.batch_size", "rerank.log_every",
                                     "rerank.checkpoint_every"))
  check_positive(config, ("rerank.tau", "rerank.lr", "vedje.train.memory_gb"))
  check_choice(config, "stack.recall", RECALLS)
  check_choice(config, "stack.reranker", ("pair", "vedje", "xpool"))
  s = config.stack
  if not 10 <= s.k <= s.rerank_k <= s.k_recall:
    bad_value("stack.k / stack.rerank_k / stack.k_recall", (s.k, s.rerank_k, s.k_recall),
                     "10 <= k <= rerank_k <= k_recall (no stage keeps more than it receives; R@10 needs 10)")
  for k in s.rerank_k_sweep:
    if not (isinstance(k, int) and s.k <= k <= s.k_recall):
      bad_value("stack.rerank_k_sweep", tuple(s.rerank_k_sweep), f"integers in [k={s.k}, k_recall={s.k_recall}]")
  if config.rerank.candidates < 2:
    bad_value("rerank.candidates", config.rerank.candidates, "at least 2 (a positive and a negative)")


def limits(num_clips: int) -> dict[str, tuple]:
  """What must fit the corpus (`clip_to_data`): no stage keeps more clips than the evaluation corpus holds, and
  R@10 needs 10 (a smaller corpus is refused)."""
  why = f"the {num_clips} clips of the evaluation corpus"
  return {"stack.k_recall": (num_clips, why, 10), "stack.rerank_k": (num_clips, why, 10),
          "stack.rerank_k_sweep": (num_clips, why, 10), "stack.k": (num_clips, why, 10)}


def plot(results: dict, path: Path, title: str, synthetic: bool) -> Path:
  """R@1/5/10 per row, and the per-stage latency (batch 1) as stacked bars."""
  plt = common.pyplot()
  rows = list(results)
  fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6), dpi=120)
  x = np.arange(len(rows))
  for i, key in enumerate(("r1", "r5", "r10")):
    ax.bar(x + (i - 1) * 0.27, [results[r][key] for r in rows], width=0.27, label=key.upper().replace("R", "R@"))
  ax.set_xticks(x, rows, fontsize=8)
  ax.set_ylabel("% of queries")
  ax.legend(fontsize=8)
  ax.set_title(("SYNTHETIC: " if synthetic else "") + f"corpus-scale CVR, {title}", fontsize=9)
  left = np.zeros(len(rows))
  for stage in ("recall", "rerank", "cast"):
    ms = np.array([results[r]["latency_ms"].get(stage, 0.0) for r in rows])
    bx.barh(rows, ms, left=left, label=stage)
    left += ms
  bx.set_xlabel("ms per query (batch 1)")
  bx.invert_yaxis()
  bx.legend(fontsize=8)
  bx.set_title("latency per stage", fontsize=9)
  return common.save_figure(fig, path)


@common.precision_policy
def run(config, workdir: str | Path) -> dict:
  """Trains (or restores) CAST and the reranker, evaluates the stacks, writes results.json and the index."""
  workdir = common.start_run(config, workdir, validate, RESUMABLE)
  start = time.time()
  data_config = common.world_data(config, workdir, procedural.write_world)  # a world is written as files, once
  data, _, texts, bench, heldout, source = cast.setup(data_config, workdir)
  check_rerank_inputs(config, data.store)  # before any training
  config, clipped = cast.fit_to_data(config, data)  # sizes fit the data
  train_videos, eval_videos = split_videos(data)
  corpus = Corpus(eval_videos)
  config, fitted = clip_to_data(config, limits(len(corpus.ids)))  # the stages' k: the headers show what ran
  clipped = {**clipped, **fitted}
  mesh = sharding.make_mesh()
  model = cast.build_models(config, texts.dim)["cast"]
  with common.precision(config, "train"):
    cast_params = cast.train_method("cast", model, source, config, workdir, mesh)
  cast_scorer, _ = cast.ensemble(model, cast_params, heldout, config)
  queries = {key: bench[key] for key in cast_scorers.QUERY_KEYS}
  rerank_parts = None
  if config.stack.reranker == "vedje":
    caption = {c.clip_id: c.text for v in data.videos for c in v.clips}
    rerank = vedje_stage(config, workdir, data, train_videos, corpus.ids, [caption[r["target"]] for r in data.benchmark])
    queries["row"] = np.arange(len(data.benchmark))  # each query's caption row in the VEDJE stage's table
  elif config.stack.reranker == "xpool":
    rerank = xpool_stage(config, workdir, data, train_videos, corpus.ids)
  else:
    with common.precision(config, "train"):
      rerank_parts = train_reranker(config, workdir, data, train_videos, texts, mesh)
    rerank = Stage("rerank", PairScorer(*rerank_parts), config.stack.rerank_k)

  clips = table(data, config, config.data.clip_kind, corpus.ids)
  vectors = clips.gather(np.arange(len(corpus.ids)))
  grdr_parts = None
  if config.stack.recall == "grdr":
    with common.precision(config, "train"):
      grdr_parts = train_grdr(config, workdir, data, Corpus(train_videos))
    # k_recall + L: room for the context clips the stack drops
    recall = grdr_recall(*grdr_parts, vectors, corpus.ids, config.stack.k_recall + config.model.context_len)
  else:
    recall = DenseIndex.from_config(corpus.ids, vectors, config.index, query_batch=config.stack.query_batch)
  targets = [r["target"] for r in data.benchmark]
  context = [r["context"] for r in data.benchmark]  # what the user already saw is never an answer
  results_rows, sweep, candidate_recall = {}, {}, {}
  k_recall, rerank_k, k = budgets(config, len(corpus.ids))
  for name, stack in stacks(recall, rerank, cast_scorer, config, len(corpus.ids)).items():
    result = stack.search(queries, k, exclude=context)
    if name in ROWS:
      results_rows[name] = dict(row_metrics(result, corpus, targets), latency_ms=latency(
          stack, queries, context, min(config.stack.latency_queries, len(targets))))
    else:
      sweep[name] = row_metrics(result, corpus, targets)
    candidate_recall[name] = {k: round(v, 4) for k, v in Stack.candidate_recall(result, np.asarray(targets)).items()}

  dataset = cast.names(data_config, data)["dataset"]
  backbone = data.features.get("backbone") or "unknown"
  results = common.results_dict(
      config, dataset=dataset, synthetic=data.synthetic, metrics=results_rows, clipped=clipped,
      rerank_k_sweep={str(k): sweep[f"full_stack (rerank keeps {k})"] for k in config.stack.rerank_k_sweep},
      candidate_recall=candidate_recall,
      corpus={"recall": config.stack.recall, "clips": len(corpus.ids), "videos": len(eval_videos),
              "queries": len(targets), "k_recall": k_recall, "rerank_k": rerank_k, "k": k,
              "reranker": config.stack.reranker},
      ensemble={"w_v": cast_scorer.w_v, "w_p": cast_scorer.w_p, "selected_on": "heldout subset of train"},
      features={"backbone": provenance.backbone_as_built(data.features)},
      **cast.result_path(data_config, workdir, data),
      seconds=round(time.time() - start, 1))
  shown = {name: {k: v for k, v in m.items() if k != "latency_ms"} | {
      f"ms_{stage}": ms for stage, ms in m.get("latency_ms", {}).items()} for name, m in {**results_rows, **sweep}.items()}
  tables = [evaluate.format_table(shown, f"Corpus-scale CVR ({dataset}): {len(targets)} queries against all "
                                  f"{len(corpus.ids)} evaluation clips; latency ms/query at batch 1", data.synthetic,
                                  columns=["r1", "r5", "r10", "state_confusion", "ident_confusion", "ms_recall",
                                           "ms_rerank", "ms_cast", "ms_total"])]
  plot(results_rows, workdir / "stack.png", dataset, data.synthetic)
  if is_writer():
    all_texts = table(data, config, config.data.text_kind, [c.clip_id for v in data.videos for c in v.clips])
    write_index(workdir / "index", corpus=corpus, vectors=vectors, texts=all_texts, videos=data.videos,
                config=config, backbone=backbone, synthetic=data.synthetic, rerank=rerank_parts,
                cast_parts=(model, cast_params, cast_scorer), grdr_parts=grdr_parts,
                text_tower=text_tower(data.features))
  common.write_results(workdir, results, tables)
  return results
