"""VEDJE: train the cached joint reranker, index the caches, rerank stage 1 in both directions.

`run(config, workdir)`:
  1. data: the dataset's test and training annotations through their readers and a feature store (kinds
     `tokens`, `clip`, `text`); the `world` variant first writes the embedded SYNTHETIC moving-object world as the
     dataset's release files and store under `<workdir>/world` (`vidjax.worlds.moving_objects.write_world`) and
     reads them the same way (`vidjax.methods.vedje.Session`);
  2. stage 1: cosine R@K in both directions (the foundation's protocol, method `stage1`);
  3. training (the one loop, `vidjax.train.fit`): a batch is B query-video pairs grouped in
     stage-1 neighbourhoods (an anchor query, then captions of its best-ranked stage-1 negatives),
     so every video of a batch is some query's positive; each query's candidates are its positive,
     the rest of its neighbourhood and other videos of the batch (VTM); VTC against the frozen
     stage-1 video embeddings; MLM with the cache in context;
     L_delta on the batch's B positive videos (eq. 6, A.3: the batch is B query-video pairs);
  4. offline indexing: the compressor writes every corpus video's cache into the run's store `<workdir>/features`
     (kind `cache`, `cache.precision` storage; resumable);
  5. online: `TwoStage(DenseIndex, K, VedjeScorer)` reranks the stage-1 top K, T2V (captions
     against cached videos) and V2T (a cached video against captions); R@1/5/10 with ties
     counted against the model (`metrics.candidate_ranks`);
  6. the ablations of `config.ablations` (one model trained per distinct variant, reused across
     tables), the A.7 K sweep, the A.10 dynamics stratification and the A.11 MaxSim probe;
  7. `<workdir>/results.json`: methods `stage1` and `vedje`, "ablations", "cache_bytes", "cost" (Table 2); "table17"
     (Table 17's rows, each with its "init": both random, so they differ only in capacity) when the backbone table
     runs; "tables_needing_all": the paper's ablation tables this run did not train, with why.

Every trained variant lives in `<workdir>/models/<variant>/` (checkpoints: a killed run resumes). What a run needs
of the method (the variants, `Session`, the report's sections, `suite`) is `vidjax.methods.vedje`.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from vidjax import evaluate
from vidjax.data.retrieval import DATASETS
from vidjax.defaults.common import check_choice
from vidjax.experiments import common
from vidjax.methods.vedje import (FULL, KEYS, Session, ablation_report, cache_bytes_report, check_config, cost_report,
                                  diagnostics_report, k_sweep_report, online_param_count, prior_split_report,
                                  stage1_report, tables_needing_all)
from vidjax.worlds import moving_objects

# Besides `common.is_resumable`'s rule: which ablation tables and diagnostics to report (each variant trains in its
# own directory on first use).
RESUMABLE = ("ablations", "diagnostics")


def validate(config) -> None:
  check_choice(config, "dataset", tuple(DATASETS))
  common.check_data_source(config, bool(config.data.features), f"configs/vedje_{config.dataset}.py")
  check_config(config)


@common.precision_policy
def run(config, workdir: str | Path) -> dict:
  """Trains VEDJE (and its ablations), indexes the caches, reranks; returns (and writes) the results."""
  workdir = common.start_run(config, workdir, validate, RESUMABLE)
  start = time.time()
  # Data: annotations + a store (a user's, or those the `world` variant's world writes first).
  config = common.world_data(config, workdir, moving_objects.write_world)
  sess = Session(config, workdir, train_context=lambda: common.precision(config, "train"))
  config = sess.config  # its sizes fitted to the data (`clipped`)
  test, mc, synthetic = sess.test, sess.mc, sess.synthetic

  # Fit and evaluate: stage 1 over the full corpus (the foundation's protocol), then the main model.
  stage1 = stage1_report(sess)
  main_metrics, main_info = sess.evaluate_variant(FULL, config.cache.precision)
  results = {
      "experiment": config.name, "dataset": sess.dataset, "synthetic": synthetic,
      **common.with_precision_record(config, sess.path),
      "metrics": {"stage1": stage1, "vedje": main_metrics},
      "clipped": sess.clipped, "variants": list(config.get("variants", ())),
      "stage1_over_candidates": main_info["stage1"],
      "latency_ms_per_query": main_info["latency_ms"],
      "benchmark": {**sess.test_bench.stats(), "k": config.eval.k,  # clipped to the gallery (`clipped`)
                    "k_requested": sess.clipped.get("eval.k", [config.eval.k])[0],
                    "train_queries": len(sess.train_split.query_ids),
                    "max_text_len": mc.max_text_len,
                    "truncated_queries": {"train": sess.train_split.truncated, "test": test.truncated}},
      "reranker": {"init": mc.init, "num_layers": mc.num_layers, "hidden_size": mc.hidden_size,
                   "online_params": online_param_count(sess.trained[FULL.name])},
      # the paper's ablation tables this run did not train (`:all` does), each with why
      "tables_needing_all": tables_needing_all(config),
  }
  title = f"VEDJE on {sess.dataset}: stage-1 top {config.eval.k} reranked, {len(test.query_ids)} queries x " \
          f"{len(test.video_ids)} videos"
  gains = {f"gain_{key}": round(main_metrics[key] - stage1[key], 2) for key in KEYS}
  tables = [evaluate.format_table({"stage1": stage1, "vedje": {**main_metrics, **gains}}, title, synthetic,
                                  columns=list(KEYS) + [f"gain_{k}" for k in ("t2v_r1", "v2t_r1")])]

  # The paper's other tables: cache bytes (A.4), cost (Table 2), ablations, the K sweep (A.7), diagnostics (A.10-11).
  for part, more in (cache_bytes_report(sess), cost_report(sess), ablation_report(sess, stage1),
                     k_sweep_report(sess), prior_split_report(sess), diagnostics_report(sess, main_info)):
    results.update(part)
    tables += more

  # Write.
  results["seconds"] = round(time.time() - start, 1)
  results["config"] = json.loads(config.to_json_best_effort())
  common.write_results(workdir, results, tables)
  return results
