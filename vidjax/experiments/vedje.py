"""VEDJE: train the cached joint reranker, index the caches, rerank stage 1 in both directions.

`run(config, workdir)`:
  1. data: the dataset's test and training annotations through their readers and a feature store
     (kinds `tokens`, `clip`, `text`), or, with the `world` variant, the embedded SYNTHETIC
     moving-object world (its store is written to `<workdir>/features`);
  2. stage 1: cosine R@K in both directions (the foundation's protocol, method `stage1`);
  3. training (the one loop, `vidjax.train.fit`): a batch is B query-video pairs grouped in
     stage-1 neighbourhoods (an anchor query, then captions of its best-ranked stage-1 negatives),
     so every video of a batch is some query's positive; each query's candidates are its positive,
     the rest of its neighbourhood and other videos of the batch (VTM); VTC against the frozen
     stage-1 video embeddings; MLM with the cache in context;
     L_delta on the batch's B positive videos (eq. 6, A.3: the batch is B query-video pairs);
  4. offline indexing: the compressor writes every corpus video's cache into the store (kind
     `cache`, `cache.precision` storage; resumable, `vidjax.extract.transform_kind`);
  5. online: `TwoStage(DenseIndex, K, VedjeScorer)` reranks the stage-1 top K, T2V (captions
     against cached videos) and V2T (a cached video against captions); R@1/5/10 with ties
     counted against the model (`metrics.candidate_ranks`);
  6. the ablations of `config.ablations` (one model trained per distinct variant, reused across
     tables), the A.7 K sweep, the A.10 dynamics stratification and the A.11 MaxSim probe;
  7. `<workdir>/results.json`: methods `stage1` and `vedje`, "ablations", "cache_bytes", "cost" (Table 2).

Every trained variant lives in `<workdir>/models/<variant>/` (checkpoints: a killed run resumes).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import time
from pathlib import Path
from typing import Any

import jax

from vidjax import checkpoints, evaluate, ops, train
from vidjax.data import pipeline
from vidjax.data.features import FeatureStore, STORAGE_DTYPES
from vidjax.data.retrieval import PROTOCOLS, build_benchmark, read_dataset
from vidjax.defaults.retrieval import DATASETS as RETRIEVAL_DATASETS
from vidjax.defaults.vedje import ABLATIONS, FULL, NO_DELTA, PRECISIONS, Variant, ablation_plan  # noqa: F401
from vidjax.experiments import common
from vidjax.methods.vedje import (KEYS, PairBatches, VedjeScorer, cache_probe, cost_profile, dynamics, dynamics_bins,
                                  hard_negatives, index_caches, load_split, measured_bytes, model_config,
                                  online_param_count, read_train, rerank_metrics, stage1_indices, stage1_negatives, stratified_r1, train_variant)
from vidjax.models import vedje as V
from vidjax.tokenizers.wordpiece import WordPieceTokenizer
from vidjax.worlds import moving_objects

# Besides `common.is_resumable`'s rule: which ablation tables and diagnostics to report (each variant trains in its
# own directory on first use).
RESUMABLE = ("ablations", "diagnostics")


# ----------------------------------------------------------------------------------------------
# Config checks.


def validate(config) -> None:
  common.check_choice(config, "dataset", tuple(RETRIEVAL_DATASETS))
  common.check_data_source(config, bool(config.data.features), f"configs/vedje_{config.dataset}.py")
  common.check_choice(config, "data.protocol", PROTOCOLS)
  common.check_index(config)
  common.check_choice(config, "data.source", ("store",))
  common.check_positive_int(config, ("eval.query_chunk", "eval.gallery_chunk"))
  if config.data.features and not config.data.annotations:
    common.bad_value("data.annotations", config.data.annotations, "the dataset's annotation file when data.features is set")
  mc = config.model
  common.check_choice(config, "model.init", ("minilm", "random"))
  common.check_choice(config, "cache.precision", STORAGE_DTYPES)
  for section in ("model",):
    common.check_positive_int(config, [f"{section}.{k}" for k in (
        "frames", "tokens_per_frame", "hidden_size", "num_layers", "num_heads", "intermediate_size", "max_text_len")])
    common.compute_dtype(config, f"{section}.dtype")
  for section in ("train",):
    common.check_positive_int(config, [f"{section}.{k}" for k in ("batch_size", "epochs", "checkpoint_every",
                                                                  "log_every", "hard_negatives", "candidate_pool")])
    common.check_positive(config, [f"{section}.lr", f"{section}.tau_vtm", f"{section}.vtc_logit_scale"])
    common.check_fraction(config, f"{section}.mlm_prob")
    tcs = common.get_key(config, section)
    if len(tcs.loss_weights) != 4 or min(tcs.loss_weights) < 0:
      common.bad_value(f"{section}.loss_weights", tcs.loss_weights, "four weights >= 0 (vtm, vtc, mlm, delta)")
    common.check_choice(config, f"{section}.vtm_candidates", ("in_batch", "stage1"))
    if tcs.in_batch_negatives < 0 or 1 + hard_negatives(tcs) + tcs.in_batch_negatives > tcs.batch_size:
      used = f"{section}.hard_negatives + " if tcs.vtm_candidates == "stage1" else ""
      common.bad_value(f"{section}.in_batch_negatives", tcs.in_batch_negatives,
                       f">= 0 with 1 + {used}in_batch_negatives <= {section}.batch_size "
                       "(the candidates of a query are videos of its batch)")
  if mc.control.num_layers < 1 or mc.control.hidden_size % mc.control.num_heads:
    common.bad_value("model.control", dict(mc.control), "an encoder shape (Table 17) with hidden_size divisible by "
                     "num_heads and num_layers >= 1")
  common.check_positive_int(config, ["eval.k", "eval.pair_block", "eval.cost_k"])
  if not all(common.is_positive_int(k) for k in config.eval.k_sweep):
    common.bad_value("eval.k_sweep", tuple(config.eval.k_sweep), "positive integers (candidates reranked; () = skip)")
  if not (common.is_positive_int(config.eval.scan_pairs) or config.eval.scan_pairs == 0):
    common.bad_value("eval.scan_pairs", config.eval.scan_pairs, "an integer >= 0 (0 = every pair in one pass)")
  bad = [a for a in config.ablations if a not in ABLATIONS]
  if bad:
    common.bad_value("ablations", config.ablations, f"a subset of {ABLATIONS}")
  if config.data.features and mc.init == "minilm" and mc.num_layers != 6:
    common.bad_value("model.num_layers", mc.num_layers, "6 with model.init='minilm' (all-MiniLM-L6-v2), or "
                     "model.init='random' for another depth")


# ----------------------------------------------------------------------------------------------
# The run.


class Session:
  """A run's data, stage 1 and (trained on first use, restored from `workdir` after) VEDJE variants."""

  def __init__(self, config, workdir: Path, restore: bool = False):
    self.config, self.workdir, self.restore = config, workdir, restore
    self.synthetic_world = not config.data.features
    if self.synthetic_world:
      world = moving_objects.make_moving_object_world(moving_objects.world_config_from(config.world), seed=config.seed)
      common.on_writer("vidjax_vedje_store", lambda: moving_objects.write_store(
          world, workdir / "features", seed=config.seed, world_fields=config.world))
      store = FeatureStore(workdir / "features")
      test_bench = build_benchmark(world.data, protocol="captions", split="test",
                                   name=f"moving-object world test groups (synthetic, seed {config.seed})")
      train_bench = build_benchmark(world.data, protocol="captions", split="train",
                                    name=f"moving-object world training groups (synthetic, seed {config.seed})")
      self.path = common.WORLD_PATH
    else:
      store = FeatureStore(config.data.features)
      test_bench = build_benchmark(read_dataset(config.dataset, config.data.annotations, config.data.video_list),
                                   protocol=config.data.protocol, split=config.data.split or None)
      train_bench = read_train(config)
      kinds = [config.data.clip_kind, config.data.tokens_kind]
      common.check_store(workdir, store, kinds + [config.data.text_kind])
      kept, skipped = common.present_videos(config, store, kinds, test_bench.corpus, "test videos")
      kept_train, skipped_train = common.present_videos(config, store, kinds, train_bench.corpus, "training videos")
      test_bench, train_bench = test_bench.restrict(kept), train_bench.restrict(kept_train)
      self.path = common.real_path(workdir, store, skipped + skipped_train)
    self.mc, self.tc = config.model, config.train
    mc = self.mc
    self.store, self.test_bench = store, test_bench
    self.synthetic = self.synthetic_world or bool(store.metadata.get("synthetic", False))
    folder = mc.minilm_dir or checkpoints.default_minilm_dir()
    self.tokenizer = WordPieceTokenizer.from_vocab(Path(folder) / "vocab.txt")
    self.train_split = load_split(train_bench, store, config, self.tokenizer, mc.max_text_len)
    self.test = load_split(test_bench, store, config, self.tokenizer, mc.max_text_len)
    print(("SYNTHETIC DATA: " if self.synthetic else "") + f"VEDJE: {len(self.train_split.query_ids)} training "
          f"queries over {len(self.train_split.video_ids)} videos; test {len(self.test.query_ids)} queries x "
          f"{len(self.test.video_ids)} videos; queries cut at {mc.max_text_len} tokens: "
          f"{self.train_split.truncated} training, {self.test.truncated} test", flush=True)
    token_shape = store.item_shape(config.data.tokens_kind)
    if len(token_shape) != 3:
      raise ValueError(f"store kind {config.data.tokens_kind!r} must hold per-frame patch tokens [T, P, d_v], "
                       f"got item shape {token_shape}")
    frames, self.patches, self.visual_dim = token_shape
    if frames != mc.frames:
      raise ValueError(f"store kind {config.data.tokens_kind!r} has {frames} frames per video, the model expects "
                       f"model.frames={mc.frames}")
    self.negatives = stage1_negatives(self.train_split, self.tc)
    # The caches go to the run's own store (<workdir>/features: the world's store, or next to a user's), never into
    # the user's feature store: the store a run reads stays as it was prepared.
    self.cache_store = FeatureStore.create(config.data.cache_store or workdir / "features")
    self.trained: dict[str, Any] = {}
    self.indices = stage1_indices(self.test, config.index)
    self.evaluated: dict[tuple[str, str, int], tuple[dict, dict]] = {}

  @functools.cached_property
  def patch_table(self) -> pipeline.FeatureTable:
    """The training videos' patch tokens (in memory within the budget, else streamed from the store)."""
    return pipeline.FeatureTable(self.store, self.config.data.tokens_kind, self.train_split.video_ids)

  def cfg_of(self, variant: Variant) -> V.VedjeConfig:
    return model_config(self.mc, variant, self.visual_dim, self.patches, self.train_split.clip.shape[1],
                        len(self.tokenizer.vocab))

  def params_of(self, variant: Variant):
    if variant.name not in self.trained and self.restore:  # a finished run: its final checkpoint, nothing trains
      self.trained[variant.name] = train.load_params(self.workdir / "models" / variant.name)
    if variant.name not in self.trained:
      with common.precision(self.config, "train"):
        self.trained[variant.name] = train_variant(variant, self.cfg_of(variant), self.train_split, self.patch_table,
                                                   self.negatives, self.tc, self.mc, self.tokenizer,
                                                   self.config.seed, self.workdir / "models" / variant.name)
    return self.trained[variant.name]

  def kind_of(self, variant: Variant, precision: str) -> str:
    base = self.config.data.cache_kind
    return base if (variant, precision) == (FULL, self.config.cache.precision) else f"{base}.{variant.name}.{precision}"

  def scorer(self, variant: Variant, precision: str) -> tuple[VedjeScorer, PairBatches]:
    """The variant's reranker over the test videos' caches (indexed on first use)."""
    cfg, params = dataclasses.replace(self.cfg_of(variant), scan_pairs=self.config.eval.scan_pairs), self.params_of(variant)
    kind = self.kind_of(variant, precision)
    index_caches(params, cfg, self.store, self.cache_store, self.config.data.tokens_kind, kind, precision,
                 self.test.video_ids, self.tc.progress)
    pairs = PairBatches(self.cache_store, kind, self.test.query_ids, self.test.input_ids, self.test.attention_mask,
                        self.test.video_ids)
    return VedjeScorer(cfg, params["reranker"], pair_block=self.config.eval.pair_block), pairs

  def evaluate_variant(self, variant: Variant, precision: str, k: int | None = None) -> tuple[dict, dict]:
    k = self.config.eval.k if k is None else k
    key = (variant.name, precision, k)
    if key not in self.evaluated:
      scorer, pairs = self.scorer(variant, precision)
      self.evaluated[key] = rerank_metrics(scorer, pairs, self.test, k, self.indices)
    return self.evaluated[key]

  @property
  def space(self) -> str:
    c = self.config
    return (f"the moving-object world of {c.name} (synthetic, seed {c.seed})" if self.synthetic_world else
            f"the feature store {c.data.features}")


def suite(config, workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """Stage 1 (the store's dual-encoder embeddings) and VEDJE (stage-1 top `eval.k` reranked) on the test split's
  caption-to-video R@K (`configs/evaluate_all.py`). Texts are keyed by caption id, videos by video id."""
  sess = Session(config, Path(workdir), restore=True)
  test, space = sess.test, sess.space
  text_row, video_row = {q: i for i, q in enumerate(test.query_ids)}, {v: i for i, v in enumerate(test.video_ids)}
  stage1 = evaluate.dual_encoder("vedje_stage1", space, lambda ids: test.text[[text_row[i] for i in ids]],
                                 lambda ids: test.clip[[video_row[i] for i in ids]])

  def reranked(data):
    queries, videos, relevant = data
    if list(queries) != test.query_ids or list(videos) != test.video_ids:
      raise ValueError("VEDJE reranks its own test split's stage-1 candidates; this gallery is another one")
    return sess.evaluate_variant(FULL, config.cache.precision)[0]

  why = "VEDJE's reranker is wired to its own split's caches and stage-1 candidates (R@K)"
  return ([stage1, evaluate.Model("vedje", space, {"gallery": reranked}, {k: why for k in evaluate.BENCHMARK_KINDS})],
          [evaluate.Benchmark(f"R@K ({config.name})", "gallery", space,
                              (test.query_ids, test.video_ids, test.query_video), sess.synthetic)])


@common.precision_policy
def run(config, workdir: str | Path) -> dict:
  """Trains VEDJE (and its ablations), indexes the caches, reranks; returns (and writes) the results."""
  workdir = common.start_run(config, workdir, validate, RESUMABLE)
  start = time.time()
  sess = Session(config, workdir)
  test, store, cache_store, mc, tokenizer = sess.test, sess.store, sess.cache_store, sess.mc, sess.tokenizer
  synthetic, synthetic_world, test_bench, train_split = sess.synthetic, sess.synthetic_world, sess.test_bench, \
      sess.train_split
  evaluate_variant, params_of, cfg_of, kind_of = sess.evaluate_variant, sess.params_of, sess.cfg_of, sess.kind_of

  # Stage 1 over the full corpus (the foundation's protocol) and the main model.
  full_stage1 = evaluate.evaluate_gallery(evaluate.CosineScorer(), {"text": test.text}, {"candidates": test.clip},
                                          test.query_video, query_chunk=config.eval.query_chunk,
                                          gallery_chunk=config.eval.gallery_chunk)
  stage1 = {k: round(float(v), 2) for k, v in full_stage1.items() if k != "v2t_videos"}
  main_metrics, main_info = evaluate_variant(FULL, config.cache.precision)
  dataset = config.dataset + (" (synthetic moving-object world)" if synthetic_world else
                              " (synthetic rendered videos)" if synthetic else "")
  results = {
      "experiment": config.name, "dataset": dataset, "synthetic": synthetic,
      **common.with_precision_record(config, sess.path),
      "metrics": {"stage1": stage1, "vedje": main_metrics},
      "stage1_over_candidates": main_info["stage1"],
      "latency_ms_per_query": main_info["latency_ms"],
      "benchmark": {**test_bench.stats(), "k": min(config.eval.k, len(test.video_ids)), "k_requested": config.eval.k,
                    "train_queries": len(train_split.query_ids), "max_text_len": mc.max_text_len,
                    "truncated_queries": {"train": train_split.truncated, "test": test.truncated}},
      "reranker": {"init": mc.init, "num_layers": mc.num_layers, "hidden_size": mc.hidden_size,
                   "online_params": online_param_count(sess.trained[FULL.name])},
  }
  title = f"VEDJE on {dataset}: stage-1 top {config.eval.k} reranked, {len(test.query_ids)} queries x " \
          f"{len(test.video_ids)} videos"
  gains = {f"gain_{key}": round(main_metrics[key] - stage1[key], 2) for key in KEYS}
  tables = [evaluate.format_table({"stage1": stage1, "vedje": {**main_metrics, **gains}}, title, synthetic,
                                  columns=list(KEYS) + [f"gain_{k}" for k in ("t2v_r1", "v2t_r1")])]

  # Cache bytes per video (A.4; on-disk, before container overhead) for both budgets.
  small_m = 1 if mc.tokens_per_frame > 1 else mc.tokens_per_frame
  results["cache_bytes"] = {f"{short}_{mc.frames * m}": ops.storage_bytes(mc.frames * m * mc.hidden_size, p)
                            for m in (mc.tokens_per_frame, small_m)
                            for p, short in zip(PRECISIONS, ("bf16", "fp8", "fp4"))}
  results["cache_bytes"]["measured_main_kind"] = measured_bytes(cache_store, config.data.cache_kind)
  results["cache_bytes"]["d_l"] = mc.hidden_size
  # The paper's cache (A.2/A.4: T = 16, d_l = 384), whatever this run's width.
  results["cache_bytes_paper_shape"] = {f"{short}_{16 * m}": ops.storage_bytes(16 * m * 384, p)
                                        for m in (4, 1) for p, short in zip(PRECISIONS, ("bf16", "fp8", "fp4"))}
  tables.append(evaluate.format_table(
      {"this run": {k: v for k, v in results["cache_bytes"].items() if k != "measured_main_kind"},
       "paper shape (d_l 384)": results["cache_bytes_paper_shape"]},
      f"Cache bytes per video (A.4; measured on disk for the main cache: "
      f"{results['cache_bytes']['measured_main_kind']} B)", synthetic,
      columns=list(results["cache_bytes_paper_shape"])))

  # Table 2: the cost profile of both cache budgets at K = eval.cost_k, batch 1, on this machine.
  results["cost"] = {}
  for m in dict.fromkeys((mc.tokens_per_frame, small_m)):
    variant = FULL if m == mc.tokens_per_frame else Variant(tokens_per_frame=m)
    cfg = dataclasses.replace(cfg_of(variant), scan_pairs=config.eval.scan_pairs)
    params = sess.trained.get(variant.name) or jax.jit(lambda k, c=cfg: V.init_params(V.Vedje(c), k))(
        jax.random.PRNGKey(config.seed))  # cost does not depend on the values: an untrained 16-token model will do
    results["cost"][f"{mc.frames * m}_tokens"] = cost_profile(params, cfg, store, config.data.tokens_kind, test,
                                                              config.eval.cost_k)
  tables.append(evaluate.format_table(results["cost"], f"Cost profile (Table 2; K = {config.eval.cost_k} clipped to the "
                                      f"gallery, batch 1, {jax.devices()[0].device_kind})", synthetic,
                                      columns=[c for c in next(iter(results["cost"].values())) if c != "k"]))

  plan = ablation_plan(mc.frames, mc.tokens_per_frame, config.cache.precision, tuple(mc.horizons))
  results["ablations"] = {}
  for table in config.ablations:
    rows = {name: evaluate_variant(variant, precision)[0] for name, (variant, precision) in plan[table].items()}
    if table == "loss_stack":  # Table 15's first row: the stage-1 retriever before reranking
      rows = {"stage1_only": {k: stage1[k] for k in KEYS}, **rows}
    if table == "backbone":  # Table 17 reports each encoder's online parameters
      rows = {name: {**row, "online_params": online_param_count(params_of(plan[table][name][0]))}
              for name, row in rows.items()}
    results["ablations"][table] = rows
    tables.append(evaluate.format_table(rows, f"Ablation: {table.replace('_', ' ')}", synthetic,
                                        columns=list(KEYS) + (["online_params"] if table == "backbone" else [])))
    print(tables[-1] + "\n", flush=True)

  if config.eval.k_sweep:
    sweep = {}  # keyed by the K actually reranked: a requested K past the gallery reranks all of it
    for k in sorted({min(int(k), len(test.video_ids)) for k in config.eval.k_sweep}):
      row, info = evaluate_variant(FULL, config.cache.precision, k)
      sweep[str(k)] = {**row, "latency_ms_per_query": info["latency_ms"]["t2v_rerank"],
                       "requested": sorted(int(r) for r in config.eval.k_sweep if min(int(r), len(test.video_ids)) == k)}
    results["k_sweep"] = sweep
    tables.append(evaluate.format_table({f"K={k}": v for k, v in sweep.items()}, "Candidate-pool size (A.7)",
                                        synthetic, columns=list(KEYS) + ["latency_ms_per_query"]))

  if config.diagnostics:
    bins = dynamics_bins(dynamics(store, config.data.tokens_kind, test.video_ids))
    strat = {"with_delta": stratified_r1(main_info, test, bins),
             "without_delta": stratified_r1(evaluate_variant(NO_DELTA, config.cache.precision)[1], test, bins)}
    results["dynamics"] = strat
    tables.append(evaluate.format_table(
        {f"{name} {b}": v for name, rows in strat.items() for b, v in rows.items()},
        "R@1 by visual dynamics (A.10: quartile bins of adjacent-frame change)", synthetic,
        columns=["t2v_r1", "v2t_r1", "n_videos"]))
    probe = {}
    for name, variant in (("with_delta", FULL), ("without_delta", NO_DELTA)):
      evaluate_variant(variant, config.cache.precision)
      probe[name] = cache_probe(params_of(variant), cfg_of(variant), cache_store,
                                kind_of(variant, config.cache.precision), test, tokenizer)
    results["cache_probe"] = probe
    tables.append(evaluate.format_table(probe, "Token-cache MaxSim probe (A.11)", synthetic,
                                        columns=[k for k in probe["with_delta"] if not k.startswith("pairs")]))

  results["seconds"] = round(time.time() - start, 1)
  results["config"] = json.loads(config.to_json_best_effort())
  common.write_results(workdir, results, tables)
  return results
