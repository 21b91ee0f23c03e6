"""VEDJE: train the cached joint reranker, index the caches, rerank stage 1 in both directions.

`run(config, workdir)`:
  1. data: the dataset's test and training annotations through their readers and a feature store
     (kinds `tokens`, `clip`, `text`), or, when `config.data.features` is empty, the embedded
     SYNTHETIC moving-object world (its store is written to `<workdir>/features`);
  2. stage 1: cosine R@K in both directions (`vidjax.experiments.retrieval`, method `stage1`);
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
  7. `<workdir>/results.json`: methods `stage1` and `vedje`, "ablations", "cache_bytes".

Every trained variant lives in `<workdir>/models/<variant>/` (checkpoints: a killed run resumes).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import time
from pathlib import Path
from typing import Any, Mapping, Optional

import jax
import numpy as np

from vidjax import checkpoints, evaluate, extract, losses, metrics, ops, train
from vidjax.data import pipeline
from vidjax.data.features import FeatureStore, MissingFeatureError, STORAGE_DTYPES
from vidjax.data.retrieval import PROTOCOLS, build_benchmark, embeddings, read_dataset
from vidjax.defaults.retrieval import DATASETS as RETRIEVAL_DATASETS
from vidjax.defaults.vedje import ABLATIONS, PRECISIONS
from vidjax.experiments import common
from vidjax.worlds import moving_objects
from vidjax.models import vedje as V
from vidjax.retrieval import DenseIndex, TwoStage
from vidjax.scorers.vedje import VedjeScorer
from vidjax.tokenizers.wordpiece import WordPieceTokenizer

# Besides `common.is_resumable`'s rule: which ablation tables and diagnostics to report (each variant trains in its
# own directory on first use).
RESUMABLE = ("ablations", "diagnostics")
KEYS = ("t2v_r1", "t2v_r5", "t2v_r10", "v2t_r1", "v2t_r5", "v2t_r10")


# ----------------------------------------------------------------------------------------------
# Variants: what one trained model changes from the config.


@dataclasses.dataclass(frozen=True)
class Variant:
  """One trained VEDJE model (the defaults are the full model of the config)."""
  tokens_per_frame: Optional[int] = None    # None = the config's M
  cache_structure: str = "ordered"
  use_prior: bool = True
  use_joint: bool = True
  weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)  # multiplies train.loss_weights (vtm, vtc, mlm, delta)
  horizons: Optional[tuple[int, ...]] = None
  absolute_delta: bool = False

  @property
  def name(self) -> str:
    parts = [f"m{self.tokens_per_frame}" if self.tokens_per_frame else "", self.cache_structure,
             "" if self.use_prior else "noprior", "" if self.use_joint else "nojoint",
             "" if self.weights == (1.0, 1.0, 1.0, 1.0) else "w" + "-".join(f"{w:g}" for w in self.weights),
             "h" + "-".join(map(str, self.horizons)) if self.horizons else "", "abs" if self.absolute_delta else ""]
    return "_".join(p for p in parts if p)


FULL = Variant()
NO_DELTA = Variant(weights=(1.0, 1.0, 1.0, 0.0))


def ablation_plan(frames: int, tokens_per_frame: int, precision: str) -> dict[str, dict[str, tuple[Variant, str]]]:
  """{table: {row: (variant, cache precision)}}: the paper's ablations (§3.3-3.6, A.13, A.14)."""
  compact = 1 if tokens_per_frame > 1 else tokens_per_frame
  big, small = frames * tokens_per_frame, frames * compact
  unordered = dict(weights=NO_DELTA.weights)  # Table 4: the unordered caches have no future-delta target
  return {
      "cache_structure": {"ordered": (FULL, precision),
                          "frame_mean": (Variant(cache_structure="frame_mean", **unordered), precision),
                          "frame_attention": (Variant(cache_structure="frame_attention", **unordered), precision),
                          "middle_frame": (Variant(cache_structure="middle_frame", **unordered), precision)},
      "prior": {"prior_only": (Variant(use_joint=False), precision),
                "joint_only": (Variant(use_prior=False), precision),
                "prior_joint": (FULL, precision)},
      "cache_budget": {f"{p}_{n}": (FULL if m == tokens_per_frame else Variant(tokens_per_frame=m), p)
                       for n, m in ((big, tokens_per_frame), (small, compact)) for p in PRECISIONS},
      "delta": {"with_delta": (FULL, precision), "without_delta": (NO_DELTA, precision),
                "absolute_target": (Variant(absolute_delta=True), precision),
                "horizons_2_3_4": (Variant(horizons=(2, 3, 4)), precision),
                f"with_delta_{small}": (Variant(tokens_per_frame=compact), precision),
                f"without_delta_{small}": (Variant(tokens_per_frame=compact, weights=NO_DELTA.weights), precision)},
      "loss_stack": {"full": (FULL, precision),
                     **{f"without_{name}": (Variant(weights=tuple(0.0 if j == i else 1.0 for j in range(4))), precision)
                        for i, name in enumerate(("vtm", "vtc", "mlm", "delta"))}},
  }


def model_config(mc, variant: Variant, visual_dim: int, patches: int, vtc_dim: int, vocab_size: int) -> V.VedjeConfig:
  return V.VedjeConfig(
      frames=mc.frames, tokens_per_frame=variant.tokens_per_frame or mc.tokens_per_frame, patches=patches,
      visual_dim=visual_dim, vocab_size=vocab_size, hidden_size=mc.hidden_size, num_layers=mc.num_layers,
      num_heads=mc.num_heads, intermediate_size=mc.intermediate_size, dropout_rate=mc.dropout_rate,
      attention_dropout_rate=mc.dropout_rate, max_text_len=mc.max_text_len,
      compressor_layers=mc.compressor_layers, compressor_heads=mc.compressor_heads, compressor_mlp=mc.compressor_mlp,
      predictor_layers=mc.predictor_layers, predictor_heads=mc.predictor_heads, predictor_mlp=mc.predictor_mlp,
      horizons=variant.horizons or tuple(mc.horizons), decoder_dropout=mc.dropout_rate, prior_hidden=mc.prior_hidden, prior_scale=mc.prior_scale,
      vtc_dim=vtc_dim, dtype=mc.dtype, cache_structure=variant.cache_structure, use_prior=variant.use_prior,
      use_joint=variant.use_joint)


# ----------------------------------------------------------------------------------------------
# Config checks.


def validate(config) -> None:
  common.check_choice(config, "dataset", tuple(RETRIEVAL_DATASETS))
  common.check_data_source(config, bool(config.data.features), f"configs/vedje_{config.dataset}.py")
  common.check_choice(config, "data.protocol", PROTOCOLS)
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
    if tcs.in_batch_negatives < 0 or 1 + tcs.hard_negatives + tcs.in_batch_negatives > tcs.batch_size:
      common.bad_value(f"{section}.in_batch_negatives", tcs.in_batch_negatives,
                       f">= 0 with 1 + {section}.hard_negatives + in_batch_negatives <= {section}.batch_size "
                       "(the candidates of a query are videos of its batch)")
  common.check_positive_int(config, ["eval.k", "eval.pair_block"])
  if not (common.is_positive_int(config.eval.scan_pairs) or config.eval.scan_pairs == 0):
    common.bad_value("eval.scan_pairs", config.eval.scan_pairs, "an integer >= 0 (0 = every pair in one pass)")
  bad = [a for a in config.ablations if a not in ABLATIONS]
  if bad:
    common.bad_value("ablations", config.ablations, f"a subset of {ABLATIONS}")
  if config.data.features and mc.init == "minilm" and mc.num_layers != 6:
    common.bad_value("model.num_layers", mc.num_layers, "6 with model.init='minilm' (all-MiniLM-L6-v2), or "
                     "model.init='random' for another depth")


# ----------------------------------------------------------------------------------------------
# Data.


@dataclasses.dataclass
class Split:
  """Queries (caption ids, tokens, stage-1 text embeddings) and videos (ids, stage-1 embeddings)."""
  query_ids: list[str]
  query_video: np.ndarray     # int [Q], row into video_ids
  input_ids: np.ndarray       # [Q, S]
  attention_mask: np.ndarray  # [Q, S]
  text: np.ndarray            # [Q, D] stage-1 text embeddings
  video_ids: list[str]
  clip: np.ndarray            # [N, D] stage-1 video embeddings

  @functools.cached_property
  def captions_of_video(self) -> list[np.ndarray]:
    """Per video row: the rows of its captions."""
    order = np.argsort(self.query_video, kind="stable")
    bounds = np.searchsorted(self.query_video[order], np.arange(len(self.video_ids) + 1))
    return [order[bounds[v]:bounds[v + 1]] for v in range(len(self.video_ids))]


def load_split(bench, store: FeatureStore, config, tokenizer, max_len: int) -> Split:
  get = embeddings
  video_ids = list(bench.corpus)
  tokens = pipeline.text_token_batch(tokenizer, [q.text for q in bench.queries], max_len)
  return Split(bench.query_ids, bench.relevant(), tokens["input_ids"], tokens["attention_mask"],
               get(store, config.data.text_kind, bench.query_ids, "query texts"), video_ids,
               get(store, config.data.clip_kind, video_ids, "corpus videos"))


def read_train(config):
  """The training split's records (real data)."""
  if not config.data.train_annotations:
    common.bad_value("data.train_annotations", "", "the training split's annotation file when data.features is set")
  return build_benchmark(read_dataset(config.dataset, config.data.train_annotations, config.data.train_video_list),
                         protocol="captions", split=config.data.train_split or None)


def stage1_negatives(split: Split, count: int, chunk: int = 4096) -> np.ndarray:
  """int [Q, count]: each training query's best-ranked stage-1 videos other than its own."""
  text, clip = ops.l2_normalize(split.text), ops.l2_normalize(split.clip)
  count = min(count, len(split.video_ids) - 1)
  out = np.empty((len(text), count), np.int64)
  for start in range(0, len(text), chunk):
    s = text[start:start + chunk] @ clip.T
    s[np.arange(len(s)), split.query_video[start:start + chunk]] = -np.inf
    top = np.argpartition(-s, count - 1, axis=1)[:, :count]
    order = np.argsort(-np.take_along_axis(s, top, 1), axis=1, kind="stable")
    out[start:start + chunk] = np.take_along_axis(top, order, 1)
  return out


# ----------------------------------------------------------------------------------------------
# Training.


def neighbourhood_rows(split: Split, negatives: np.ndarray, idx: np.ndarray, tc, rng: np.random.Generator) \
    -> tuple[np.ndarray, list[np.ndarray]]:
  """The batch's B query rows, built as stage-1 neighbourhoods, and each row's neighbourhood (rows into the batch).

  Each anchor query (the loop's `idx`, in order) brings `hard_negatives` of its stage-1 top `candidate_pool`
  videos (the `always_top` best-ranked first, the rest drawn at random) *with one of their own captions*: every
  video of the batch is some query's positive. A hard negative drawn as a bare extra video (the earlier design)
  is a negative for others but never a positive, so stage-1 hubs were negatives far more often than positives
  and the reranker learned a text-blind score of the video that ranks hubs last (measured: near-identical
  scores for a video's forward and reversed captions, test R@1 below stage 1). Videos are distinct within a
  batch; a neighbour without a training caption is skipped."""
  b, h = len(idx), tc.hard_negatives
  top = min(tc.always_top, h, negatives.shape[1])
  captions = split.captions_of_video
  rows: list[int] = []
  taken: set[int] = set()
  hoods: list[list[int]] = []
  for anchor in idx:
    if len(rows) >= b:
      break
    if split.query_video[anchor] in taken:
      continue
    hood = [len(rows)]
    rows.append(int(anchor))
    taken.add(int(split.query_video[anchor]))
    pool = negatives[anchor]
    order = np.concatenate([pool[:top], rng.permutation(pool[top:])])
    for video in order:
      if len(hood) > h or len(rows) >= b:
        break
      if video in taken or len(captions[video]) == 0:
        continue
      hood.append(len(rows))
      rows.append(int(rng.choice(captions[video])))
      taken.add(int(video))
    hoods.append(hood)
  rows_arr = np.asarray(rows, np.int64)
  if len(rows_arr) < b:  # a batch whose queries share videos: top it up with any other training caption
    free = np.flatnonzero(~np.isin(split.query_video, list(taken)))
    extra = rng.choice(free, b - len(rows_arr), replace=False)
    hoods += [[len(rows_arr) + i] for i in range(len(extra))]
    rows_arr = np.concatenate([rows_arr, extra])
  of_row = [np.empty(0, np.int64)] * b
  for hood in hoods:
    for r in hood:
      of_row[r] = np.asarray([o for o in hood if o != r], np.int64)
  return rows_arr, of_row


def make_batch_fn(split: Split, patches_of, negatives: np.ndarray, tc, cfg: V.VedjeConfig, variant: Variant,
                  tokenizer, seed: int):
  """index batch -> the `Vedje` training batch: B query-video pairs (stage-1 neighbourhoods, see
  `neighbourhood_rows`); each query is scored against its positive, the other videos of its neighbourhood
  (its hard negatives) and `in_batch_negatives` other videos of the batch, C = 1 + hard_negatives +
  in_batch_negatives candidates (topped up with in-batch videos where a neighbourhood is smaller)."""
  text_n, clip_n = ops.l2_normalize(split.text), ops.l2_normalize(split.clip)
  special = [tokenizer.vocab[t] for t in ("[PAD]", "[CLS]", "[SEP]")]
  c = 1 + tc.hard_negatives + tc.in_batch_negatives

  def batch_fn(idx: np.ndarray) -> dict:
    idx = np.asarray(idx)
    b = len(idx)
    rng = np.random.default_rng([seed, int(idx[0]), b])
    rows, hoods = neighbourhood_rows(split, negatives, idx, tc, rng)
    pos = split.query_video[rows]
    cand = np.empty((b, c), np.int32)
    for i in range(b):
      near = hoods[i][:c - 1]
      others = np.setdiff1d(np.arange(b), np.concatenate([[i], near]))
      cand[i] = np.concatenate([[i], near, rng.choice(others, c - 1 - len(near), replace=False)])
    mask = (pos[cand] != pos[:, None]).astype(np.float32)  # a top-up caption may share a video: not a negative
    mask[:, 0] = 1.0
    ids, attn = split.input_ids[rows], split.attention_mask[rows]
    masked, chosen = pipeline.mlm_mask(ids, attn, rng, mask_id=tokenizer.vocab["[MASK]"], vocab_size=cfg.vocab_size,
                                       special_ids=special, prob=tc.mlm_prob)
    patches = patches_of(pos)
    targets, valid = losses.future_delta_targets(patches, cfg.horizons, absolute=variant.absolute_delta)
    return {"patches": patches, "input_ids": ids, "attention_mask": attn, "mlm_input_ids": masked, "mlm_mask": chosen,
            "candidates": cand, "candidate_mask": mask, "positive": np.zeros(b, np.int32),
            "priors": np.einsum("bd,bkd->bk", text_n[rows], clip_n[pos[cand]]).astype(np.float32),
            "stage1_video": split.clip[pos], "delta_targets": np.asarray(targets),
            "delta_valid": np.broadcast_to(np.asarray(valid), (b,) + valid.shape)}

  return batch_fn


def train_variant(variant: Variant, cfg: V.VedjeConfig, split: Split, patches_of, negatives, tc, mc, tokenizer,
                  seed: int, workdir: Path) -> Any:
  """Trains one variant through the one loop; returns its (host) parameter tree."""
  model = V.Vedje(cfg)
  weights = tuple(float(a) * float(b) for a, b in zip(tc.loss_weights, variant.weights))
  bert = checkpoints.load_bert_dir(mc.minilm_dir) if mc.init == "minilm" else None

  def init_fn(rng):
    params = V.init_params(model, rng)
    return V.init_from_minilm(params, bert) if bert is not None else params

  def loss_fn(params, batch, rng):
    batch = {**batch, "delta_valid": batch["delta_valid"][0]}
    out = model.apply({"params": params}, batch["patches"], batch["input_ids"], batch["attention_mask"],
                      batch["candidates"], batch["priors"], batch["mlm_input_ids"], deterministic=False,
                      rngs={"dropout": rng})
    return losses.vedje_loss(out, batch, tau_vtm=tc.tau_vtm, logit_scale=tc.vtc_logit_scale, weights=weights)

  steps_per_epoch = len(split.query_ids) // tc.batch_size
  optimizer = train.adamw(tc.lr, tc.weight_decay, tc.warmup_steps, warmup_init=tc.warmup_init,
                          decay_every=max(steps_per_epoch, 1), decay_rate=tc.epoch_decay)
  state = train.fit_epochs(
      name=f"VEDJE {variant.name}", init_fn=init_fn, loss_fn=loss_fn, num_examples=len(split.query_ids),
      batch_fn=make_batch_fn(split, patches_of, negatives, tc, cfg, variant, tokenizer, seed),
      tcfg=tc, seed=seed, workdir=workdir, optimizer=optimizer, description=f"vedje {variant.name}")
  return jax.device_get(state.params)


# ----------------------------------------------------------------------------------------------
# Indexing and reranking.


def index_caches(params, cfg: V.VedjeConfig, store: FeatureStore, cache_store: FeatureStore, tokens_kind: str,
                 kind: str, precision: str, video_ids, progress: bool) -> int:
  """Offline indexing: the compressor writes `kind` for every video id not yet there (resumable)."""
  compressor = V.FrameCompressor(cfg)
  fn = jax.jit(lambda x: compressor.apply({"params": params["compressor"]}, x))
  if cache_store.root != store.root:  # the caches go to their own store: read tokens from the source one
    todo = [v for v in video_ids if not cache_store.has(kind, v)]
    with cache_store.writer(kind, dtype=precision) as w:
      for start in range(0, len(todo), 64):
        ids = todo[start:start + 64]
        for i, z in zip(ids, np.asarray(fn(store.get(tokens_kind, ids)))):
          w.add(i, z)
    return len(todo)
  return extract.transform_kind(store, tokens_kind, kind, fn, batch_size=64, ids=list(video_ids), dtype=precision,
                                progress=progress)


class PairBatches:
  """`TwoStage` batch functions for VEDJE: texts (tokenized) x videos (cached in a store).

  Args:
    store: the feature store holding the caches; cache_kind: their kind.
    text_ids: the caption ids, in the order of `input_ids` rows; input_ids, attention_mask: [Nq, S].
  Queries handed to `TwoStage.search` carry a `row` field: the row of each query in its own table
  (caption rows for `text_to_video`, video ids' positions in `video_ids` for `video_to_text`).
  """

  def __init__(self, store: FeatureStore, cache_kind: str, text_ids, input_ids: np.ndarray,
               attention_mask: np.ndarray, video_ids=None):
    self.store, self.cache_kind = store, cache_kind
    self.text_row = {t: i for i, t in enumerate(text_ids)}
    self.input_ids, self.attention_mask = np.asarray(input_ids), np.asarray(attention_mask)
    self.video_ids = None if video_ids is None else np.asarray(video_ids)

  def caches(self, video_ids: np.ndarray) -> np.ndarray:
    flat = [str(v) for v in np.ravel(video_ids)]
    try:
      out = self.store.get(self.cache_kind, flat)
    except MissingFeatureError as e:
      raise MissingFeatureError(f"VEDJE rerank: a candidate video has no cache: {e}") from None
    return out.reshape(np.shape(video_ids) + out.shape[1:])

  def text_to_video(self, queries: Mapping[str, np.ndarray], candidate_ids: np.ndarray, s1: np.ndarray) -> dict:
    rows = np.asarray(queries["row"])
    k = candidate_ids.shape[1]
    return {"input_ids": np.repeat(self.input_ids[rows][:, None], k, 1),
            "attention_mask": np.repeat(self.attention_mask[rows][:, None], k, 1),
            "cache": self.caches(candidate_ids), "prior": s1}

  def video_to_text(self, queries: Mapping[str, np.ndarray], candidate_ids: np.ndarray, s1: np.ndarray) -> dict:
    videos = self.video_ids[np.asarray(queries["row"])]
    k = candidate_ids.shape[1]
    rows = np.vectorize(self.text_row.__getitem__, otypes=[np.int64])(candidate_ids)
    return {"input_ids": self.input_ids[rows], "attention_mask": self.attention_mask[rows],
            "cache": np.repeat(self.caches(videos)[:, None], k, 1), "prior": s1}


def stage1_indices(test: Split) -> tuple[DenseIndex, DenseIndex]:
  """The test split's stage-1 indices (videos for T2V, captions for V2T), built once per run."""
  return DenseIndex(test.video_ids, test.clip), DenseIndex(test.query_ids, test.text)


def rerank_metrics(scorer: VedjeScorer, pairs: PairBatches, test: Split, k: int,
                   indices: tuple[DenseIndex, DenseIndex]) -> tuple[dict, dict]:
  """T2V and V2T R@1/5/10 of the reranked stage-1 top k, and the stage-1 rows over the same candidates."""
  k_t2v, k_v2t = min(k, len(test.video_ids)), min(k, len(test.query_ids))
  video_index, text_index = indices
  q_video = np.asarray(test.video_ids)[test.query_video]
  t2v = TwoStage(video_index, k_t2v, scorer, batch_fn=pairs.text_to_video).search(
      {"text": test.text, "row": np.arange(len(test.query_ids))}, k_t2v)
  t2v_rel = t2v.ids == q_video[:, None]
  captioned = np.unique(test.query_video)
  v2t = TwoStage(text_index, k_v2t, scorer, batch_fn=pairs.video_to_text).search(
      {"text": test.clip[captioned], "row": captioned}, k_v2t)
  caption_video = dict(zip(test.query_ids, q_video))
  v2t_rel = np.vectorize(caption_video.__getitem__)(v2t.ids) == np.asarray(test.video_ids)[captioned][:, None]
  s1_t2v_rel = t2v.recall_ids == q_video[:, None]
  s1_v2t_rel = np.vectorize(caption_video.__getitem__)(v2t.recall_ids) == np.asarray(test.video_ids)[captioned][:, None]

  def both(t_scores, t_rel, v_scores, v_rel):
    out = metrics.retrieval_metrics(metrics.candidate_ranks(t_scores, t_rel), "t2v_")
    out.update(metrics.retrieval_metrics(metrics.candidate_ranks(v_scores, v_rel), "v2t_"))
    return {key: round(out[key], 2) for key in KEYS}

  reranked = both(t2v.scores, t2v_rel, v2t.scores, v2t_rel)
  stage1 = both(t2v.recall_scores, s1_t2v_rel, v2t.recall_scores, s1_v2t_rel)
  return reranked, {"stage1": stage1, "latency_ms": {"t2v_rerank": round(t2v.latency_ms["rerank"], 3),
                                                     "v2t_rerank": round(v2t.latency_ms["rerank"], 3)}, "t2v_ranks": metrics.candidate_ranks(t2v.scores, t2v_rel),
                    "v2t_ranks": metrics.candidate_ranks(v2t.scores, v2t_rel), "v2t_videos": captioned}


# ----------------------------------------------------------------------------------------------
# Diagnostics.


def dynamics(store: FeatureStore, tokens_kind: str, video_ids) -> np.ndarray:
  """A.10 eq. 7-8: D(v) = mean_t (1 - u_t . u_{t+1}), u_t the L2-normalised mean patch token of frame t."""
  out = []
  for start in range(0, len(video_ids), 256):
    u = ops.l2_normalize(store.get(tokens_kind, list(video_ids[start:start + 256])).mean(axis=2))
    out.append(np.mean(1.0 - np.sum(u[:, 1:] * u[:, :-1], axis=-1), axis=1))
  return np.concatenate(out)


def dynamics_bins(d: np.ndarray) -> np.ndarray:
  """A.10: 0 = Low (bottom quartile), 1 = Medium (middle 50%), 2 = High (top quartile)."""
  lo, hi = np.quantile(d, [0.25, 0.75])
  return np.where(d <= lo, 0, np.where(d >= hi, 2, 1))


def stratified_r1(info: dict, test: Split, bins: np.ndarray) -> dict:
  out = {}
  for b, name in enumerate(("low", "medium", "high")):
    t = info["t2v_ranks"][bins[test.query_video] == b]
    v = info["v2t_ranks"][bins[info["v2t_videos"]] == b]
    out[name] = {"t2v_r1": round(100.0 * float(np.mean(t <= 1)), 2) if t.size else float("nan"),
                 "v2t_r1": round(100.0 * float(np.mean(v <= 1)), 2) if v.size else float("nan"),
                 "n_videos": int(np.sum(bins == b))}
  return out


def cache_probe(params, cfg: V.VedjeConfig, cache_store: FeatureStore, kind: str, test: Split, tokenizer,
                num_masked: int = 4, limit: int = 256) -> dict:
  """A.11: query-directed MaxSim alignment of content tokens to the ground-truth cache, and the score drop
  when the num_masked most / least query-supported or random cached tokens are zeroed.

  Query-token embeddings are the reranker's text-only final hidden states (its text space); content
  tokens exclude [CLS]/[SEP]/[PAD] and the function words of the moving-object world / English.
  """
  from vidjax.worlds.moving_objects import DIRECTIONS, FUNCTION_WORDS  # the probe's lexical classes  # noqa
  reranker = V.JointReranker(cfg)
  p = {"params": params["reranker"]}
  n = min(limit, len(test.query_ids))
  ids, attn = test.input_ids[:n], test.attention_mask[:n]
  vids = [test.video_ids[i] for i in test.query_video[:n]]
  cache = cache_store.get(kind, vids)
  prior = np.sum(ops.l2_normalize(test.text[:n]) * ops.l2_normalize(test.clip[test.query_video[:n]]), -1)
  hidden = np.asarray(reranker.apply(p, ids, attn, None, method=V.JointReranker.encode))
  e, z = ops.l2_normalize(hidden), ops.l2_normalize(cache)
  sims = np.einsum("bsd,bnd->bsn", e, z)  # [B, S, N]
  words = {tokenizer.vocab[w] for w in FUNCTION_WORDS if w in tokenizer.vocab}
  special = {tokenizer.vocab[t] for t in ("[PAD]", "[CLS]", "[SEP]")} | {tokenizer.vocab.get(",", -1)}
  content = (attn > 0) & ~np.isin(ids, list(words | special))
  direction = np.isin(ids, [tokenizer.vocab[w] for w in DIRECTIONS])
  a = sims.max(axis=2)  # a_j

  def mean_over(sel):
    per = np.sum(a * sel, 1) / np.maximum(sel.sum(1), 1)
    return round(float(np.mean(per[sel.any(1)])), 4)

  support = np.where(content[:, :, None], sims, -np.inf).max(axis=1)  # r_{t,m} [B, N]
  score = jax.jit(lambda c: reranker.apply(p, ids, attn, c, prior))
  base = np.asarray(score(cache))
  rng = np.random.default_rng(0)
  order = np.argsort(-support, axis=1, kind="stable")
  masks = {"top_token": order[:, :num_masked], "low_attribution": order[:, -num_masked:],
           "random": np.stack([rng.choice(cache.shape[1], num_masked, replace=False) for _ in range(n)])}
  out = {"mean_alignment": mean_over(content), "direction_word_alignment": mean_over(content & direction),
         "object_word_alignment": mean_over(content & ~direction)}
  for name, pos in masks.items():
    masked = cache.copy()
    np.put_along_axis(masked, pos[:, :, None], 0.0, axis=1)
    out[f"{name}_masking_score_drop"] = round(float(np.mean(base - np.asarray(score(masked)))), 4)
  out["pairs"] = n
  return out


# ----------------------------------------------------------------------------------------------
# The run.


class Session:
  """A run's data, stage 1 and (trained on first use, restored from `workdir` after) VEDJE variants."""

  def __init__(self, config, workdir: Path):
    self.config, self.workdir = config, workdir
    self.synthetic_world = not config.data.features
    if self.synthetic_world:
      world = moving_objects.make_moving_object_world(moving_objects.world_config_from(config.world), seed=config.seed)
      if common.is_writer():
        moving_objects.write_store(world, workdir / "features", seed=config.seed, world_fields=config.world)
      common.barrier("vidjax_vedje_store")
      store = FeatureStore(workdir / "features")
      test_bench = build_benchmark(world.data, protocol="captions", split="test",
                                   name=f"moving-object world test groups (synthetic, seed {config.seed})")
      train_bench = build_benchmark(world.data, protocol="captions", split="train",
                                    name=f"moving-object world training groups (synthetic, seed {config.seed})")
    else:
      store = FeatureStore(config.data.features)
      test_bench = build_benchmark(read_dataset(config.dataset, config.data.annotations, config.data.video_list),
                                   protocol=config.data.protocol, split=config.data.split or None)
      train_bench = read_train(config)
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
          f"{len(self.test.video_ids)} videos", flush=True)
    token_shape = store.item_shape(config.data.tokens_kind)
    if len(token_shape) != 3:
      raise ValueError(f"store kind {config.data.tokens_kind!r} must hold per-frame patch tokens [T, P, d_v], "
                       f"got item shape {token_shape}")
    frames, self.patches, self.visual_dim = token_shape
    if frames != mc.frames:
      raise ValueError(f"store kind {config.data.tokens_kind!r} has {frames} frames per video, the model expects "
                       f"model.frames={mc.frames}")
    self.negatives = stage1_negatives(self.train_split, max(self.tc.candidate_pool - 1, self.tc.hard_negatives))
    self.cache_store = FeatureStore.create(config.data.cache_store) if config.data.cache_store else store
    self.trained: dict[str, Any] = {}
    self.indices = stage1_indices(self.test)
    self.evaluated: dict[tuple[str, str, int], tuple[dict, dict]] = {}

  def patches_of(self, rows):
    return self.store.get(self.config.data.tokens_kind, [self.train_split.video_ids[r] for r in rows])

  def cfg_of(self, variant: Variant) -> V.VedjeConfig:
    return model_config(self.mc, variant, self.visual_dim, self.patches, self.train_split.clip.shape[1],
                        len(self.tokenizer.vocab))

  def params_of(self, variant: Variant):
    if variant.name not in self.trained:
      self.trained[variant.name] = train_variant(variant, self.cfg_of(variant), self.train_split, self.patches_of,
                                                 self.negatives, self.tc, self.mc, self.tokenizer, self.config.seed,
                                                 self.workdir / "models" / variant.name)
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
    key = (variant.name, precision, k or self.config.eval.k)
    if key not in self.evaluated:
      scorer, pairs = self.scorer(variant, precision)
      self.evaluated[key] = rerank_metrics(scorer, pairs, self.test, k or self.config.eval.k, self.indices)
    return self.evaluated[key]

  @property
  def space(self) -> str:
    c = self.config
    return (f"the moving-object world of {c.name} (synthetic, seed {c.seed})" if self.synthetic_world else
            f"the feature store {c.data.features}")


def suite(config, workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """Stage 1 (the store's dual-encoder embeddings) and VEDJE (stage-1 top `eval.k` reranked) on the test split's
  caption-to-video R@K (`configs/evaluate_all.py`). Texts are keyed by caption id, videos by video id."""
  sess = Session(config, Path(workdir))
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
  dataset = config.dataset + (" (synthetic moving-object world)" if synthetic_world else "")
  results = {
      "experiment": config.name, "dataset": dataset, "synthetic": synthetic,
      "metrics": {"stage1": stage1, "vedje": main_metrics},
      "stage1_over_candidates": main_info["stage1"],
      "latency_ms_per_query": main_info["latency_ms"],
      "benchmark": {**test_bench.stats(), "k": config.eval.k, "train_queries": len(train_split.query_ids)},
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

  plan = ablation_plan(mc.frames, mc.tokens_per_frame, config.cache.precision)
  results["ablations"] = {}
  for table in config.ablations:
    rows = {name: evaluate_variant(variant, precision)[0] for name, (variant, precision) in plan[table].items()}
    results["ablations"][table] = rows
    tables.append(evaluate.format_table(rows, f"Ablation: {table.replace('_', ' ')}", synthetic,
                                        columns=list(KEYS)))
    print(tables[-1] + "\n", flush=True)

  if config.eval.k_sweep:
    sweep = {}
    for k in sorted({min(int(k), len(test.video_ids)) for k in config.eval.k_sweep}):
      row, info = evaluate_variant(FULL, config.cache.precision, k)
      sweep[str(k)] = {**row, "latency_ms_per_query": info["latency_ms"]["t2v_rerank"]}
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
                                        columns=[k for k in probe["with_delta"] if k != "pairs"]))

  results["seconds"] = round(time.time() - start, 1)
  results["config"] = json.loads(config.to_json_best_effort())
  common.write_results(workdir, results, tables)
  return results


def online_param_count(params) -> int:
  """Parameters that run at query time: the joint encoder, e_rho and the score head (A.2)."""
  tree = params["reranker"]
  keep = ("bert", "prior_fc1", "prior_fc2", "score_fc1", "score_fc2")
  return int(sum(np.size(x) for name in keep if name in tree for x in jax.tree_util.tree_leaves(tree[name])))


def measured_bytes(store: FeatureStore, kind: str) -> int:
  """On-disk bytes per item of `kind`, read from its shards (data files only)."""
  root = Path(store.root) / kind
  files = sorted(root.glob("*.npy"))
  n = len(store.ids(kind))
  total = 0
  for f in files:
    arr = np.load(f, mmap_mode="r")
    total += arr.nbytes
  return int(total // max(n, 1))
