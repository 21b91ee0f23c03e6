"""VEDJE as a method (../shared/papers/vedje.txt §2, A.2-A.4, A.10-A.11): the trained variants (`Variant`,
`ablation_plan`), a variant's model config, its training queries and stage-1 neighbourhood batches (with BERT's MLM
masking), training through the one loop, offline cache indexing, the reranked R@K of `TwoStage` in both directions,
the A.10 / A.11 diagnostics; and a run's pieces: its config checks, its data and variants (`Session`), the report's
sections and `suite` (what `evaluate_all` reads of a finished run).

    cfg = model_config(config.model, variant, visual_dim, patches, vtc_dim, vocab_size)
    params = train_variant(variant, cfg, split, patches, negatives, config.train, ...)   # <workdir>/models/<variant>
    index_caches(params, cfg, store, cache_store, "tokens", "cache", "bfloat16", video_ids, progress)
    reranked, info = rerank_metrics(VedjeScorer(cfg, params["reranker"]), PairBatches(...), test, k, indices)
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import zlib
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import jax
import numpy as np

from vidjax import checkpoints, evaluate, extract, losses, metrics, ops, train
from vidjax.data import lexicon, pipeline
from vidjax.data.features import STORAGE_DTYPES, FeatureStore
from vidjax.data.retrieval import PROTOCOLS, build_benchmark, dataset_label, embeddings, read_dataset
from vidjax.defaults import common
from vidjax.data import provenance
from vidjax.models import vedje as V
from vidjax.models import bert
from vidjax.models.bert import BertConfig
from vidjax.retrieval import DenseIndex, TwoStage
from vidjax.ops import is_positive_int
from vidjax.scorers.vedje import PairBatches, PriorHeld, VedjeScorer
from vidjax.tokenizers.wordpiece import WordPieceTokenizer

KEYS = ("t2v_r1", "t2v_r5", "t2v_r10", "v2t_r1", "v2t_r5", "v2t_r10")
# Ablation tables (results.json "ablations"), in print order.
ABLATIONS = ("cache_structure", "prior", "cache_budget", "delta", "horizon", "loss_stack", "loss_leave_one_out",
             "backbone")
PRECISIONS = ("bfloat16", "float8_e4m3", "float4_e2m1")  # cache storage of the budget table (A.4)


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
  control: bool = False   # Table 17: the joint encoder takes `model.control`'s (larger) shape, random init; the
                          # cache keeps the config's width
  init: Optional[str] = None  # the joint encoder's initialisation: None = the config's `model.init`; "random"

  @property
  def name(self) -> str:
    parts = [f"m{self.tokens_per_frame}" if self.tokens_per_frame else "", self.cache_structure,
             "" if self.use_prior else "noprior", "" if self.use_joint else "nojoint",
             "" if self.weights == (1.0, 1.0, 1.0, 1.0) else "w" + "-".join(f"{w:g}" for w in self.weights),
             "h" + "-".join(map(str, self.horizons)) if self.horizons else "", "abs" if self.absolute_delta else "",
             "control" if self.control else "", self.init or ""]
    return "_".join(p for p in parts if p)


FULL = Variant()
NO_DELTA = Variant(weights=(1.0, 1.0, 1.0, 0.0))
# The paper's tables each ablation table of `ablation_plan` reproduces (results.json `tables_needing_all`).
PAPER_TABLES = {"cache_structure": "Table 4", "prior": "Table 6", "cache_budget": "Table 3 and Table 10 (A.8)",
                "delta": "Tables 5, 11 (A.9) and 14 (A.12)", "horizon": "Table 16 (A.14)",
                "loss_stack": "Table 15 (A.13)", "loss_leave_one_out": "none (vidjax's, not in the paper)",
                "backbone": "Table 17 (A.15)"}


def init_of(mc, variant: Variant) -> str:
  """The joint encoder's initialisation of a variant: Table 17's control is always random (BERT-base weights are
  not available offline), a variant's own `init` wins, else the config's `model.init`."""
  return "random" if variant.control else variant.init or mc.init


def ablation_plan(frames: int, tokens_per_frame: int, precision: str, horizons=(3,), init: str = "random") \
    -> dict[str, dict[str, tuple[Variant, str]]]:
  """{table: {row: (variant, cache precision)}}: the paper's ablations (§3.3-3.6, A.12-A.15).

  cache_structure: Table 4 (its "w/o L_delta" row is `without_delta`); prior: Table 6; cache_budget: Table 3 and A.8;
  delta: Tables 5 and 14; horizon: Table 16, one single-horizon model per h (the row equal to `model.horizons` is
  the full model); loss_stack: Table 15, the losses added cumulatively (VTM, +MLM, +VTC, +L_delta; the run adds the
  stage-1 row); loss_leave_one_out: one loss dropped at a time (not in the paper); backbone: Table 17 (A.15, "cache
  structure versus reranker capacity"), two rows that differ only in capacity: the joint encoder at the config's
  shape and at `model.control`'s (BERT-base's on the dataset configs) over the same cache (the config's T x M
  tokens of width `model.hidden_size`, which the control reads through a learned projection), both from random
  init (`init` is the config's
  `model.init`: with "minilm" the default-shape row is a random-init model of its own, not the pretrained main
  model, since no pretrained weights of the control's shape are available offline).
  """
  compact = 1 if tokens_per_frame > 1 else tokens_per_frame
  big, small = frames * tokens_per_frame, frames * compact
  unordered = dict(weights=NO_DELTA.weights)  # Table 4: the unordered caches have no future-delta target
  horizons = tuple(horizons)

  def weights(*on: str) -> Variant:  # the loss weights (vtm, vtc, mlm, delta) with only `on` active
    w = tuple(1.0 if name in on else 0.0 for name in ("vtm", "vtc", "mlm", "delta"))
    return FULL if w == FULL.weights else Variant(weights=w)

  return {
      "cache_structure": {"ordered": (FULL, precision),
                          "frame_mean": (Variant(cache_structure="frame_mean", **unordered), precision),
                          "frame_attention": (Variant(cache_structure="frame_attention", **unordered), precision),
                          "middle_frame": (Variant(cache_structure="middle_frame", **unordered), precision),
                          "without_delta": (NO_DELTA, precision)},
      "prior": {"prior_only": (Variant(use_joint=False), precision),
                "joint_only": (Variant(use_prior=False), precision),
                "prior_joint": (FULL, precision)},
      "cache_budget": {f"{p}_{n}": (FULL if m == tokens_per_frame else Variant(tokens_per_frame=m), p)
                       for n, m in ((big, tokens_per_frame), (small, compact)) for p in PRECISIONS},
      "delta": {"with_delta": (FULL, precision), "without_delta": (NO_DELTA, precision),
                "absolute_target": (Variant(absolute_delta=True), precision),
                f"with_delta_{small}": (Variant(tokens_per_frame=compact), precision),
                f"without_delta_{small}": (Variant(tokens_per_frame=compact, weights=NO_DELTA.weights), precision)},
      "horizon": {f"h{h}": (FULL if (h,) == horizons else Variant(horizons=(h,)), precision) for h in (2, 3, 4)},
      "loss_stack": {"vtm": (weights("vtm"), precision), "vtm_mlm": (weights("vtm", "mlm"), precision),
                     "vtm_mlm_vtc": (weights("vtm", "mlm", "vtc"), precision), "full": (FULL, precision)},
      "loss_leave_one_out": {"full": (FULL, precision),
                             **{f"without_{name}": (weights(*(n for n in ("vtm", "vtc", "mlm", "delta") if n != name)),
                                                    precision) for name in ("vtm", "vtc", "mlm", "delta")}},
      "backbone": {"default": (FULL if init == "random" else Variant(init="random"), precision),
                   "control": (Variant(control=True), precision)},
  }


def model_config(mc, variant: Variant, visual_dim: int, patches: int, vtc_dim: int, vocab_size: int) -> V.VedjeConfig:
  """The variant's model; Table 17's control (`variant.control`) takes `mc.control`'s encoder shape and keeps the
  config's cache (its width `mc.hidden_size`, its compressor and F_omega), so the rows differ only in the encoder."""
  cache_dim = mc.hidden_size
  if variant.control:
    mc = mc.copy_and_resolve_references()
    mc.update(dict(mc.control))
  return V.VedjeConfig(
      frames=mc.frames, tokens_per_frame=variant.tokens_per_frame or mc.tokens_per_frame, patches=patches,
      visual_dim=visual_dim, max_text_len=mc.max_text_len,
      text=BertConfig(vocab_size=vocab_size, hidden_size=mc.hidden_size, num_layers=mc.num_layers, num_heads=mc.num_heads,
                      intermediate_size=mc.intermediate_size, dropout_rate=mc.dropout_rate,
                      attention_dropout_rate=mc.dropout_rate, use_pooler=False),
      compressor_layers=mc.compressor_layers, compressor_heads=mc.compressor_heads, compressor_mlp=mc.compressor_mlp,
      predictor_layers=mc.predictor_layers, predictor_heads=mc.predictor_heads, predictor_mlp=mc.predictor_mlp,
      horizons=variant.horizons or tuple(mc.horizons), decoder_dropout=mc.dropout_rate, prior_hidden=mc.prior_hidden, prior_scale=mc.prior_scale,
      vtc_dim=vtc_dim, dtype=mc.dtype, cache_structure=variant.cache_structure, use_prior=variant.use_prior,
      use_joint=variant.use_joint, cache_dim=cache_dim)


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
  truncated: int = 0          # queries cut at the max text length (A.2: 64 WordPiece tokens)

  @functools.cached_property
  def captions_of_video(self) -> list[np.ndarray]:
    """Per video row: the rows of its captions."""
    order = np.argsort(self.query_video, kind="stable")
    bounds = np.searchsorted(self.query_video[order], np.arange(len(self.video_ids) + 1))
    return [order[bounds[v]:bounds[v + 1]] for v in range(len(self.video_ids))]


def load_split(bench, store: FeatureStore, config, tokenizer, max_len: int) -> Split:
  """The benchmark's queries tokenized at `max_len` (A.2: 64, paragraphs included: the paper states one max text
  length for every dataset, so longer DiDeMo / ActivityNet paragraphs are truncated, and counted) and the
  store's stage-1 embeddings."""
  get = embeddings
  video_ids = list(bench.corpus)
  texts = [q.text for q in bench.queries]
  tokens = pipeline.text_token_batch(tokenizer, texts, max_len)
  return Split(bench.query_ids, bench.relevant(), tokens["input_ids"], tokens["attention_mask"],
               get(store, config.data.text_kind, bench.query_ids, "query texts"), video_ids,
               get(store, config.data.clip_kind, video_ids, "corpus videos"),
               pipeline.truncated_count(tokenizer, texts, max_len))


def read_train(config):
  """The training split's records (real data), queries of the test protocol's kind (`data.protocol`: every
  caption, or DiDeMo's / ActivityNet's paragraphs, one per video, as at test time). An id list
  (`data.train_video_list`, MSR-VTT's 9k `train_list_jsfusion.txt`) defines the training videos by itself: the
  JSON's own split field (6,513 "train") is then not applied."""
  if not config.data.train_annotations:
    common.bad_value("data.train_annotations", "", "the training split's annotation file when data.features is set")
  split = None if config.data.train_video_list else config.data.train_split or None
  return build_benchmark(read_dataset(config.dataset, config.data.train_annotations, config.data.train_video_list),
                         protocol=config.data.protocol, split=split)


def stage1_negatives(split: Split, tc, chunk: int = 4096) -> np.ndarray:
  """int [Q, count]: each training query's best-ranked stage-1 videos other than its own, as many as the
  "stage1" VTM scheme draws from (`train.candidate_pool`); none in the "in_batch" scheme."""
  count = max(tc.candidate_pool - 1, tc.hard_negatives) if tc.vtm_candidates == "stage1" else 0
  text, clip = ops.l2_normalize(split.text), ops.l2_normalize(split.clip)
  count = min(count, len(split.video_ids) - 1)
  if count == 0:
    return np.zeros((len(text), 0), np.int64)
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


def limits(config, num_train: int, num_videos: int | None = None) -> dict[str, tuple[int, str]]:
  """What must fit the data (`common.clip_to_data`): a training batch at most the training queries and, as a batch
  is query-video pairs of distinct videos (`neighbourhood_rows`), at most the training videos (`num_videos`; rows
  past them would repeat a video, masked out of each other's negatives), and a query's in-batch VTM negatives at
  most the other videos of that (clipped) batch besides its stage-1 hard negatives."""
  tc = config.train
  most, why = num_train, f"the {num_train} training queries"
  if num_videos is not None and num_videos < num_train:
    most, why = num_videos, f"the {num_videos} training videos (a batch's pairs are of distinct videos)"
  batch = min(tc.batch_size, most)
  return {"train.batch_size": (most, why),
          "train.in_batch_negatives": (batch - 1 - hard_negatives(tc),
                                       f"a batch of {batch} queries less each query's own video and its "
                                       f"{hard_negatives(tc)} stage-1 negatives", 0)}


def gallery_limits(num_videos: int) -> dict[str, tuple[int, str]]:
  """What must fit the test gallery (`common.clip_to_data`): the stage-1 candidates reranked (`eval.k`, Table 2's
  `eval.cost_k`) at most its videos, so the tables show the K that ran."""
  gallery = f"the {num_videos} test videos"
  return {"eval.k": (num_videos, gallery), "eval.cost_k": (num_videos, gallery)}


def hard_negatives(tc) -> int:
  """Stage-1 neighbours per anchor query: `train.hard_negatives` in the "stage1" VTM scheme, none "in_batch"."""
  return tc.hard_negatives if tc.vtm_candidates == "stage1" else 0


def neighbourhood_rows(split: Split, negatives: np.ndarray, idx: np.ndarray, tc, rng: np.random.Generator) \
    -> tuple[np.ndarray, list[np.ndarray]]:
  """The batch's B query rows, built as stage-1 neighbourhoods, and each row's neighbourhood (rows into the batch).
  In the "in_batch" VTM scheme a neighbourhood is its anchor alone: B query-video pairs of distinct videos.

  Each anchor query (the loop's `idx`, in order) brings `hard_negatives` of its stage-1 top `candidate_pool`
  videos (the `always_top` best-ranked first, the rest drawn at random) *with one of their own captions*: every
  video of the batch is some query's positive. A hard negative drawn as a bare extra video (the earlier design)
  is a negative for others but never a positive, so stage-1 hubs were negatives far more often than positives
  and the reranker learned a text-blind score of the video that ranks hubs last (measured: near-identical
  scores for a video's forward and reversed captions, test R@1 below stage 1). Videos are distinct within a
  batch; a neighbour without a training caption is skipped."""
  b, h = len(idx), hard_negatives(tc)
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


def make_batch_fn(split: Split, negatives: np.ndarray, tc, cfg: V.VedjeConfig, tokenizer, seed: int,
                  patch_rows: np.ndarray | None = None):
  """index batch -> the `Vedje` training batch: B query-video pairs (stage-1 neighbourhoods or, "in_batch",
  distinct videos, see `neighbourhood_rows`); each query is scored against its positive, the other videos of its
  neighbourhood (its hard negatives) and `in_batch_negatives` other videos of the batch, C = 1 + hard_negatives +
  in_batch_negatives candidates (topped up with in-batch videos where a neighbourhood is smaller).

  The videos' features travel as rows, gathered on the device (`train_variant`'s `pipeline.Gather`): `patches`
  int32 [B], each pair's video's row in the patch-token table (`patch_rows[video]`; the split's video row when
  None), and `stage1_video` int32 [B], its row of `split.clip`."""
  text_n, clip_n = ops.l2_normalize(split.text), ops.l2_normalize(split.clip)
  special = [tokenizer.vocab[t] for t in ("[PAD]", "[CLS]", "[SEP]")]
  c = 1 + hard_negatives(tc) + tc.in_batch_negatives

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
    masked, chosen = mlm_mask(ids, attn, rng, mask_id=tokenizer.vocab["[MASK]"], vocab_size=cfg.text.vocab_size,
                                       special_ids=special, prob=tc.mlm_prob)
    return {"patches": (pos if patch_rows is None else patch_rows[pos]).astype(np.int32), "input_ids": ids,
            "attention_mask": attn, "mlm_input_ids": masked, "mlm_mask": chosen,
            "candidates": cand, "candidate_mask": mask, "positive": np.zeros(b, np.int32),
            "priors": np.einsum("bd,bkd->bk", text_n[rows], clip_n[pos[cand]]).astype(np.float32),
            "stage1_video": pos.astype(np.int32)}

  return batch_fn


def train_variant(variant: Variant, cfg: V.VedjeConfig, split: Split, patches: pipeline.FeatureTable, negatives, tc,
                  mc, tokenizer, seed: int, workdir: Path) -> Any:
  """Trains one variant through the one loop; returns its (host) parameter tree.

  `patches`: the per-frame patch tokens [T, P, d_v] of the split's videos (a `FeatureTable` over the store's tokens
  kind). The batch's patch tokens and stage-1 video embeddings are gathered on the device from tables put there
  once (when they fit; a corpus whose tokens stream from the store is gathered on the host), and eq. 4's targets
  are computed from the gathered patches inside the step."""
  model = V.Vedje(cfg)
  weights = tuple(float(a) * float(b) for a, b in zip(tc.loss_weights, variant.weights))
  bert = checkpoints.load_bert_dir(mc.minilm_dir) if init_of(mc, variant) == "minilm" else None

  def init_fn(rng):
    params = V.init_params(model, rng)
    return V.init_from_minilm(params, bert) if bert is not None else params

  def loss_fn(params, batch, rng):
    targets, valid = losses.future_delta_targets(batch["patches"], cfg.horizons, absolute=variant.absolute_delta)
    batch = {**batch, "delta_targets": targets, "delta_valid": valid}
    out = model.apply({"params": params}, batch["patches"], batch["input_ids"], batch["attention_mask"],
                      batch["candidates"], batch["priors"], batch["mlm_input_ids"], deterministic=False,
                      rngs={"dropout": rng})
    return losses.vedje_loss(out, batch, tau_vtm=tc.tau_vtm, logit_scale=tc.vtc_logit_scale,
                             weights=batch["loss_weights"][0])

  # The loss weights travel with the batch (one row per example, so the batch shards as usual), not as constants
  # of the traced step: every loss ablation of a shape runs the same compiled program.
  make = make_batch_fn(split, negatives, tc, cfg, tokenizer, seed, patch_rows=patches.rows(split.video_ids))
  gather = pipeline.Gather({"patches": patches, "stage1": split.clip},
                           {"patches": "patches", "stage1_video": "stage1"})

  def batch_fn(idx):
    return {**make(idx), "loss_weights": np.tile(np.asarray(weights, np.float32), (len(idx), 1))}

  steps_per_epoch = len(split.query_ids) // tc.batch_size
  optimizer = train.adamw(tc.lr, tc.weight_decay, tc.warmup_steps, warmup_init=tc.warmup_init,
                          decay_every=max(steps_per_epoch, 1), decay_rate=tc.epoch_decay)
  state = train.fit_epochs(
      name=f"VEDJE {variant.name}", init_fn=init_fn, loss_fn=loss_fn, num_examples=len(split.query_ids),
      batch_fn=batch_fn, gather=gather,
      tcfg=tc, seed=seed, workdir=workdir, optimizer=optimizer, description=f"vedje {variant.name}")
  return jax.device_get(state.params)


def pair_bytes(cfg) -> int:
  """Bytes of activations one (text, cache) pair's joint pass keeps for the backward pass (`bert.activation_bytes`
  over its S + T*M tokens): 37.6 MB a pair at the paper's shapes, 154 GB for 4096 pairs (XLA's `memory_analysis`
  counts within 4% of it)."""
  return bert.activation_bytes(cfg.text, cfg.max_text_len + cfg.cache_len)


def train_pairs(cfg, budget_bytes: float) -> int:
  """Pairs per rematerialized training block (`VedjeConfig.train_pairs`) whose activations fit `budget_bytes`."""
  return max(1, int(budget_bytes // pair_bytes(cfg)))


def mlm_mask(input_ids: np.ndarray, attention_mask: np.ndarray, rng: np.random.Generator, *,
             mask_id: int, vocab_size: int, special_ids: Sequence[int], prob: float = 0.15
             ) -> tuple[np.ndarray, np.ndarray]:
  """BERT's masking for a masked-language objective (VEDJE's L_mlm, A.3: "standard MLM").

  Each real, non-special token is chosen with probability `prob`; a chosen token becomes [MASK]
  80% of the time, a random token 10% and stays 10%. Every row with a maskable token gets at
  least one chosen position, so no row is empty.

  Returns:
    (masked input_ids int32 [B, S], chosen float32 [B, S]: the positions the loss predicts).
  """
  ids = np.asarray(input_ids, np.int32)
  maskable = (np.asarray(attention_mask) > 0) & ~np.isin(ids, np.asarray(list(special_ids)))
  chosen = maskable & (rng.random(ids.shape) < prob)
  for b in np.flatnonzero(~chosen.any(axis=1) & maskable.any(axis=1)):
    chosen[b, rng.choice(np.flatnonzero(maskable[b]))] = True
  action = rng.random(ids.shape)
  out = ids.copy()
  out[chosen & (action < 0.8)] = mask_id
  swap = chosen & (action >= 0.8) & (action < 0.9)
  out[swap] = rng.integers(0, vocab_size, size=int(swap.sum()))
  return out, chosen.astype(np.float32)


# ----------------------------------------------------------------------------------------------
# Indexing and reranking.


def index_caches(params, cfg: V.VedjeConfig, store: FeatureStore, cache_store: FeatureStore, tokens_kind: str,
                 kind: str, precision: str, video_ids, progress: bool) -> int:
  """Offline indexing: the compressor writes `kind` for every video id not yet there (resumable)."""
  compressor = V.FrameCompressor(cfg)
  compress = jax.jit(lambda p, x: compressor.apply({"params": p}, x))  # params an argument, not baked-in constants
  fn = lambda x: compress(params["compressor"], x)  # noqa: E731
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


def stage1_indices(test: Split, index_config) -> tuple[DenseIndex, DenseIndex]:
  """The test split's stage-1 indices (videos for T2V, captions for V2T) as `config.index` describes, built once per
  run."""
  return (DenseIndex.from_config(test.video_ids, test.clip, index_config),
          DenseIndex.from_config(test.query_ids, test.text, index_config))


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
  # a random order of the same candidates: the chance level of any reading of these top-k lists
  chance_t2v_r1 = round(100.0 * float(s1_t2v_rel.any(axis=1).mean()) / max(k_t2v, 1), 2)
  return reranked, {"stage1": stage1, "chance_t2v_r1": chance_t2v_r1,
                    "latency_ms": {"t2v_rerank": round(t2v.latency_ms["rerank"], 3),
                                   "v2t_rerank": round(v2t.latency_ms["rerank"], 3)},
                    "t2v_ranks": metrics.candidate_ranks(t2v.scores, t2v_rel),
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


def probe_classes(input_ids: np.ndarray, attention_mask: np.ndarray, tokenizer) -> dict[str, np.ndarray]:
  """bool [Q, S] masks of A.11's token classes: `content` (J(q): no special tokens, punctuation or English
  function words, `vidjax.data.lexicon`), and its `verb` and `temporal` subsets. A word piece ("##ing") is
  content and takes no class of its own."""
  words = {i: w for w, i in tokenizer.vocab.items()}
  table = np.zeros((3, max(words) + 1), bool)  # content, verb, temporal per vocabulary id
  for i, w in words.items():
    if w.startswith("[") and w.endswith("]"):
      continue
    word = w[2:] if w.startswith("##") else w
    if not any(ch.isalnum() for ch in word) or (not w.startswith("##") and lexicon.is_function_word(word)):
      continue
    table[0, i] = True
    table[1, i] = not w.startswith("##") and lexicon.is_verb(word)
    table[2, i] = not w.startswith("##") and lexicon.is_temporal_word(word)
  live = attention_mask > 0
  content, verb, temporal = (t[input_ids] & live for t in table)
  return {"content": content, "verb": verb, "temporal": temporal}


def pair_seed(query_id: str, video_id: str) -> int:
  """A deterministic seed keyed by a query-video pair (A.11's random mask)."""
  return zlib.crc32(f"{query_id}\t{video_id}".encode())


def cache_probe(params, cfg: V.VedjeConfig, cache_store: FeatureStore, kind: str, test: Split, tokenizer,
                num_masked: int = 4, chunk: int = 256) -> dict:
  """A.11 (Table 13) over every test query and its ground-truth video: the query-directed MaxSim alignment of the
  content tokens to the cache (eq. 10-11: mean, verb and temporal-word classes, `probe_classes`), and the
  reranker-score drop (eq. 13) when the `num_masked` cached tokens of highest / lowest query support r_{t,m}
  (eq. 12) or `num_masked` random ones (seeded by the query-video pair) are zeroed.

  Query-token embeddings are the reranker's text-only final hidden states (its text space). A class's alignment
  is the mean over the pairs with at least one token of the class of each pair's mean over those tokens.
  """
  reranker = V.JointReranker(cfg)
  p = {"params": params["reranker"]}
  encode_p = jax.jit(lambda p, ids, attn: reranker.apply(p, ids, attn, None, method=V.JointReranker.encode))
  score_p = jax.jit(lambda p, ids, attn, c, prior: reranker.apply(p, ids, attn, c, prior))
  encode = lambda ids, attn: encode_p(p, ids, attn)  # noqa: E731  (params as arguments, not constants)
  score = lambda ids, attn, c, prior: score_p(p, ids, attn, c, prior)  # noqa: E731
  classes = probe_classes(test.input_ids, test.attention_mask, tokenizer)
  n = len(test.query_ids)
  per = {name: np.full(n, np.nan) for name in ("content", "verb", "temporal")}
  drops = {name: np.empty(n) for name in ("top_token", "random", "low_attribution")}
  for start in range(0, n, chunk):
    rows = np.arange(start, min(start + chunk, n))
    pad = np.concatenate([rows, np.repeat(rows[:1], chunk - len(rows))])  # one shape: one compile
    ids, attn = test.input_ids[pad], test.attention_mask[pad]
    vids = [test.video_ids[i] for i in test.query_video[pad]]
    cache = np.asarray(cache_store.get(kind, vids), np.float32)
    prior = np.sum(ops.l2_normalize(test.text[pad]) * ops.l2_normalize(test.clip[test.query_video[pad]]), -1)
    prior = prior.astype(np.float32)
    e, z = ops.l2_normalize(np.asarray(encode(ids, attn))), ops.l2_normalize(cache)
    sims = np.einsum("bsd,bnd->bsn", e, z)  # [B, S, N]
    a = sims.max(axis=2)  # a_j (eq. 10)
    m = len(rows)
    for name in per:
      sel = classes[name][rows]
      has = sel.any(1)
      per[name][rows[has]] = (np.sum(a[:m] * sel, 1) / np.maximum(sel.sum(1), 1))[has]
    content = classes["content"][pad]
    support = np.where(content[:, :, None], sims, -np.inf).max(axis=1)  # r_{t,m} (eq. 12) [B, N]
    order = np.argsort(-support, axis=1, kind="stable")
    chosen = np.stack([np.random.default_rng(pair_seed(test.query_ids[q], vids[j])).choice(
        cache.shape[1], num_masked, replace=False) for j, q in enumerate(pad)])
    masks = {"top_token": order[:, :num_masked], "low_attribution": order[:, -num_masked:], "random": chosen}
    base = np.asarray(score(ids, attn, cache, prior))
    for name, pos in masks.items():
      masked = cache.copy()
      np.put_along_axis(masked, pos[:, :, None], 0.0, axis=1)
      drops[name][rows] = (base - np.asarray(score(ids, attn, masked, prior)))[:m]  # eq. 13

  def mean(x):
    x = x[np.isfinite(x)]
    return round(float(np.mean(x)), 4) if len(x) else None

  out = {"mean_alignment": mean(per["content"]), "verb_alignment": mean(per["verb"]),
         "temporal_word_alignment": mean(per["temporal"])}
  out.update({f"{name}_masking_score_drop": mean(d) for name, d in drops.items()})
  out.update(pairs=n, pairs_with_verbs=int(np.isfinite(per["verb"]).sum()),
             pairs_with_temporal_words=int(np.isfinite(per["temporal"]).sum()))
  return out


def cost_profile(params, cfg: V.VedjeConfig, store: FeatureStore, tokens_kind: str, split: Split, k: int,
                 repeats: int = 20) -> dict:
  """Table 2's columns on this machine: "compress_ms_per_video" (the compressor on one video, batch 1: the offline
  cost of writing a cache), "rerank_ms_per_query" (one query against its K cached candidates in one call, batch 1:
  the online cost) and the peak memory of each compiled step in MB (XLA's memory analysis of the compiled
  program: arguments + outputs + temporaries; the paper's column is the GPU's peak, in GB). Times are the median of
  `repeats` calls after one compiling call. The cost does not depend on the parameter values."""
  compressor, reranker = V.FrameCompressor(cfg), V.JointReranker(cfg)
  compress = jax.jit(lambda p, x: compressor.apply({"params": p}, x))
  rerank = jax.jit(lambda p, ids, mask, cache, prior: reranker.apply({"params": p}, ids, mask, cache, prior,
                                                                      method=reranker.score_pairs))
  k = min(k, len(split.video_ids))
  videos = store.get(tokens_kind, split.video_ids[:k])
  caches = np.asarray(compress(params["compressor"], videos))
  prior = ops.l2_normalize(split.clip[:k]) @ ops.l2_normalize(split.text[0])
  pair = (np.repeat(split.input_ids[:1], k, 0), np.repeat(split.attention_mask[:1], k, 0), caches,
          prior.astype(np.float32))
  steps = {"compress": (compress, (params["compressor"], videos[:1])), "rerank": (rerank, (params["reranker"], *pair))}
  # As in Table 2, parameters and caches are resident on the device before the clock starts: one copy here, so no
  # timed call includes a host-to-device transfer (the trained params arrive as host arrays, the caches as NumPy).
  steps = {name: (fn, jax.device_put(args)) for name, (fn, args) in steps.items()}
  out = {"k": k}
  for name, (fn, args) in steps.items():
    unit = "video" if name == "compress" else "query"
    out[f"{name}_ms_per_{unit}"] = round(1e3 * ops.timed(fn, *args, iters=repeats), 3)
    mem = fn.lower(*args).compile().memory_analysis()
    peak = None if mem is None else (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
                                     - mem.alias_size_in_bytes)
    out[f"{name}_peak_mb"] = None if peak is None else round(peak / 1e6, 2)
  return out


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


# ----------------------------------------------------------------------------------------------
# A run: its config checks, its data and variants (`Session`), the report's sections and the suite.


def check_config(config) -> None:
  """VEDJE's own config keys (the experiment's `validate` adds the dataset and the data source): one clear error
  naming the key, the value and what was expected."""
  common.check_choice(config, "data.protocol", PROTOCOLS)
  common.check_index(config)
  common.check_choice(config, "data.source", ("store",))
  common.check_positive_int(config, ("eval.query_chunk", "eval.gallery_chunk"))
  if config.data.features and not config.data.annotations:
    common.bad_value("data.annotations", config.data.annotations, "the dataset's annotation file when data.features is set")
  mc, tcs = config.model, config.train
  common.check_choice(config, "model.init", ("minilm", "random"))
  common.check_choice(config, "cache.precision", STORAGE_DTYPES)
  common.check_positive_int(config, [f"model.{k}" for k in (
      "frames", "tokens_per_frame", "hidden_size", "num_layers", "num_heads", "intermediate_size", "max_text_len")])
  common.check_choice(config, "model.dtype", ("float32", "bfloat16"))
  common.check_positive_int(config, [f"train.{k}" for k in ("batch_size", "epochs", "checkpoint_every", "log_every",
                                                             "hard_negatives", "candidate_pool")])
  common.check_positive(config, ["train.lr", "train.tau_vtm", "train.vtc_logit_scale", "train.memory_gb"])
  common.check_fraction(config, "train.mlm_prob")
  if len(tcs.loss_weights) != 4 or min(tcs.loss_weights) < 0:
    common.bad_value("train.loss_weights", tcs.loss_weights, "four weights >= 0 (vtm, vtc, mlm, delta)")
  common.check_choice(config, "train.vtm_candidates", ("in_batch", "stage1"))
  if tcs.in_batch_negatives < 0 or 1 + hard_negatives(tcs) + tcs.in_batch_negatives > tcs.batch_size:
    used = "train.hard_negatives + " if tcs.vtm_candidates == "stage1" else ""
    common.bad_value("train.in_batch_negatives", tcs.in_batch_negatives,
                     f">= 0 with 1 + {used}in_batch_negatives <= train.batch_size "
                     "(the candidates of a query are videos of its batch)")
  if mc.control.num_layers < 1 or mc.control.hidden_size % mc.control.num_heads:
    common.bad_value("model.control", dict(mc.control), "an encoder shape (Table 17) with hidden_size divisible by "
                     "num_heads and num_layers >= 1")
  common.check_positive_int(config, ["eval.k", "eval.pair_block", "eval.cost_k"])
  if not all(is_positive_int(k) for k in config.eval.k_sweep):
    common.bad_value("eval.k_sweep", tuple(config.eval.k_sweep), "positive integers (candidates reranked; () = skip)")
  if not (is_positive_int(config.eval.scan_pairs) or config.eval.scan_pairs == 0):
    common.bad_value("eval.scan_pairs", config.eval.scan_pairs, "an integer >= 0 (0 = every pair in one pass)")
  if any(a not in ABLATIONS for a in config.ablations):
    common.bad_value("ablations", config.ablations, f"a subset of {ABLATIONS}")
  if mc.init == "minilm" and mc.num_layers != 6:
    common.bad_value("model.num_layers", mc.num_layers, "6 with model.init='minilm' (all-MiniLM-L6-v2), or "
                     "model.init='random' for another depth")


class Session:
  """A run's data, stage 1 and (trained on first use, restored from `workdir` after) VEDJE variants.

  The data is one path: the test and training annotations (`data.annotations`, `data.train_annotations`) through
  their readers and the feature store `data.features` (kinds `tokens`, `clip`, `text`): a user's, or those a
  world wrote (`vidjax.experiments.common.world_data`). `train_context()` is the context every training call runs
  in (the experiment's training precision)."""

  def __init__(self, config, workdir: Path, restore: bool = False,
               train_context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext):
    self.config, self.workdir, self.restore, self.train_context = config, workdir, restore, train_context
    store = FeatureStore(config.data.features)
    test_bench = build_benchmark(read_dataset(config.dataset, config.data.annotations, config.data.video_list),
                                 protocol=config.data.protocol, split=config.data.split or None)
    train_bench = read_train(config)
    kinds = [config.data.clip_kind, config.data.tokens_kind]
    provenance.check_store(workdir, store, kinds + [config.data.text_kind])
    kept, skipped = provenance.present_videos(config, store, kinds, test_bench.corpus, "test videos")
    kept_train, skipped_train = provenance.present_videos(config, store, kinds, train_bench.corpus, "training videos")
    test_bench, train_bench = test_bench.restrict(kept), train_bench.restrict(kept_train)
    self.path = provenance.real_path(workdir, store, skipped + skipped_train)
    self.mc, self.tc = config.model, config.train
    mc = self.mc
    self.store, self.test_bench = store, test_bench
    self.synthetic = bool(store.metadata.get("synthetic", False))
    self.dataset = dataset_label(config.dataset, store.metadata)
    folder = mc.minilm_dir or checkpoints.default_minilm_dir()
    self.tokenizer = WordPieceTokenizer.from_vocab(Path(folder) / "vocab.txt")
    self.train_split = load_split(train_bench, store, config, self.tokenizer, mc.max_text_len)
    self.test = load_split(test_bench, store, config, self.tokenizer, mc.max_text_len)
    print(("SYNTHETIC DATA: " if self.synthetic else "") + f"VEDJE: {len(self.train_split.query_ids)} training "
          f"queries over {len(self.train_split.video_ids)} videos; test {len(self.test.query_ids)} queries x "
          f"{len(self.test.video_ids)} videos; queries cut at {mc.max_text_len} tokens: "
          f"{self.train_split.truncated} training, {self.test.truncated} test", flush=True)
    # Sizes that do not fit the training split are clipped (or, with `strict`, refused) before any file is written.
    config, self.clipped = common.clip_to_data(config, {**limits(config, len(self.train_split.query_ids),
                                                                 len(self.train_split.video_ids)),
                                                        **gallery_limits(len(self.test.video_ids))})
    config, tables = common.fit_tables(config, len(self.test.query_ids), {"ablations": (), "diagnostics": False})
    self.clipped = {**self.clipped, **tables}
    self.config, self.mc, self.tc = config, config.model, config.train
    token_shape = store.item_shape(config.data.tokens_kind)
    if len(token_shape) != 3:
      raise ValueError(f"store kind {config.data.tokens_kind!r} must hold per-frame patch tokens [T, P, d_v], "
                       f"got item shape {token_shape}")
    frames, self.patches, self.visual_dim = token_shape
    if frames != mc.frames:
      raise ValueError(f"store kind {config.data.tokens_kind!r} has {frames} frames per video, the model expects "
                       f"model.frames={mc.frames}")
    self.negatives = stage1_negatives(self.train_split, self.tc)
    # The caches go to the run's own store (<workdir>/features, or data.cache_store), never into the store the run
    # reads (a user's, or a world's): that stays as it was prepared.
    self.cache_store = FeatureStore.create(config.data.cache_store or workdir / "features")
    self.trained: dict[str, Any] = {}
    self.indices = stage1_indices(self.test, config.index)
    self.evaluated: dict[tuple[str, str, int], tuple[dict, dict]] = {}
    self.scorers: dict[tuple[str, str], tuple[VedjeScorer, PairBatches]] = {}

  @functools.cached_property
  def patch_table(self) -> pipeline.FeatureTable:
    """The training videos' patch tokens (in memory within the budget, else streamed from the store)."""
    return pipeline.FeatureTable(self.store, self.config.data.tokens_kind, self.train_split.video_ids)

  def cfg_of(self, variant: Variant) -> V.VedjeConfig:
    cfg = model_config(self.mc, variant, self.visual_dim, self.patches, self.train_split.clip.shape[1],
                       len(self.tokenizer.vocab))  # a step's pairs in blocks that fit train.memory_gb
    return dataclasses.replace(cfg, train_pairs=train_pairs(cfg, self.config.train.memory_gb * 1e9))

  def params_of(self, variant: Variant):
    if variant.name not in self.trained and self.restore:  # a finished run: its final checkpoint, nothing trains
      self.trained[variant.name] = train.load_params(self.workdir / "models" / variant.name)
    if variant.name not in self.trained:
      with self.train_context():
        self.trained[variant.name] = train_variant(variant, self.cfg_of(variant), self.train_split, self.patch_table,
                                                   self.negatives, self.tc, self.mc, self.tokenizer,
                                                   self.config.seed, self.workdir / "models" / variant.name)
    return self.trained[variant.name]

  def kind_of(self, variant: Variant, precision: str) -> str:
    base = self.config.data.cache_kind
    return base if (variant, precision) == (FULL, self.config.cache.precision) else f"{base}.{variant.name}.{precision}"

  def scorer(self, variant: Variant, precision: str) -> tuple[VedjeScorer, PairBatches]:
    """The variant's reranker over the test videos' caches (indexed and compiled on first use, then reused)."""
    key = (variant.name, precision)
    if key not in self.scorers:
      self.scorers[key] = self._new_scorer(variant, precision)
    return self.scorers[key]

  def _new_scorer(self, variant: Variant, precision: str) -> tuple[VedjeScorer, PairBatches]:
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
    """The feature space of the run's models and benchmarks (`evaluate_all` compares within one): the world its
    store was written from, or the store."""
    c, meta = self.config, self.store.metadata
    return (f"the moving-object world of {c.name} (synthetic, seed {meta.get('seed')})" if "world" in meta else
            f"the feature store {c.data.features}")


def stage1_report(sess: Session) -> dict:
  """Stage 1 over the full test corpus (the foundation's protocol): R@K, MdR, MnR in both directions."""
  c, test = sess.config, sess.test
  full = evaluate.evaluate_gallery(evaluate.CosineScorer(), {"text": test.text}, {"candidates": test.clip},
                                   test.query_video, query_chunk=c.eval.query_chunk, gallery_chunk=c.eval.gallery_chunk)
  return evaluate.rounded({k: v for k, v in full.items() if k != "v2t_videos"})  # with its notes


def cache_bytes_report(sess: Session) -> tuple[dict, list[str]]:
  """Cache bytes per video (A.4; on-disk, before container overhead) for both budgets, this run's width and the
  paper's cache shape (A.2/A.4: T = 16, d_l = 384)."""
  mc, kind = sess.mc, sess.config.data.cache_kind
  small_m = 1 if mc.tokens_per_frame > 1 else mc.tokens_per_frame
  this = {f"{short}_{mc.frames * m}": ops.storage_bytes(mc.frames * m * mc.hidden_size, p)
          for m in (mc.tokens_per_frame, small_m) for p, short in zip(PRECISIONS, ("bf16", "fp8", "fp4"))}
  this.update(measured_main_kind=measured_bytes(sess.cache_store, kind), d_l=mc.hidden_size)
  paper = {f"{short}_{16 * m}": ops.storage_bytes(16 * m * 384, p)
           for m in (4, 1) for p, short in zip(PRECISIONS, ("bf16", "fp8", "fp4"))}
  table = evaluate.format_table(
      {"this run": {k: v for k, v in this.items() if k != "measured_main_kind"}, "paper shape (d_l 384)": paper},
      f"Cache bytes per video (A.4; measured on disk for the main cache: {this['measured_main_kind']} B)",
      sess.synthetic, columns=list(paper))
  return {"cache_bytes": this, "cache_bytes_paper_shape": paper}, [table]


def _host_random_params(cfg: V.VedjeConfig, seed: int) -> Any:
  shapes = jax.eval_shape(lambda k: V.init_params(V.Vedje(cfg), k), jax.random.PRNGKey(seed))
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda a: (0.02 * rng.standard_normal(a.shape)).astype(a.dtype), shapes)


def cost_report(sess: Session) -> tuple[dict, list[str]]:
  """Table 2: the cost profile of both cache budgets at K = eval.cost_k, batch 1, on this machine."""
  c, mc = sess.config, sess.mc
  small_m = 1 if mc.tokens_per_frame > 1 else mc.tokens_per_frame
  cost = {}
  for m in dict.fromkeys((mc.tokens_per_frame, small_m)):
    variant = FULL if m == mc.tokens_per_frame else Variant(tokens_per_frame=m)
    cfg = dataclasses.replace(sess.cfg_of(variant), scan_pairs=c.eval.scan_pairs)
    # cost does not depend on the values: an untrained model will do, its weights drawn on the host (N(0, 0.02),
    # the shapes from `jax.eval_shape`), so no init program is compiled only to be timed
    params = sess.trained.get(variant.name) or _host_random_params(cfg, c.seed)
    cost[f"{mc.frames * m}_tokens"] = cost_profile(params, cfg, sess.store, c.data.tokens_kind, sess.test, c.eval.cost_k)
  table = evaluate.format_table(cost, f"Cost profile (Table 2; K = {c.eval.cost_k}, batch 1, "
                                f"{jax.devices()[0].device_kind})", sess.synthetic,
                                columns=[k for k in next(iter(cost.values())) if k != "k"])
  return {"cost": cost}, [table]


def ablation_report(sess: Session, stage1: dict) -> tuple[dict, list[str]]:
  """The tables of `config.ablations` (`ablation_plan`; each distinct variant trained once, reused across tables)."""
  c, mc = sess.config, sess.mc
  plan = ablation_plan(mc.frames, mc.tokens_per_frame, c.cache.precision, tuple(mc.horizons), mc.init)
  out, tables = {}, []
  for table in c.ablations:
    rows = {name: sess.evaluate_variant(variant, precision)[0] for name, (variant, precision) in plan[table].items()}
    if table == "loss_stack":  # Table 15's first row: the stage-1 retriever before reranking
      rows = {"stage1_only": {k: stage1[k] for k in KEYS}, **rows}
    if table == "backbone":  # Table 17: each encoder's online parameters, shape and initialisation
      rows = backbone_rows(rows, {name: v for name, (v, _) in plan[table].items()}, mc,
                           lambda v: online_param_count(sess.params_of(v)))
    out[table] = rows
    extra = ["online_params", "num_layers", "hidden_size", "cache_width", "init"] if table == "backbone" else []
    tables.append(evaluate.format_table(rows, f"Ablation: {table.replace('_', ' ')}", sess.synthetic,
                                        columns=list(KEYS) + extra))
    print(tables[-1] + "\n", flush=True)
  result = {"ablations": out}
  if "backbone" in out:  # the issue's name for Table 17's rows (the same rows as ablations.backbone)
    result["table17"] = out["backbone"]
  return result, tables


def backbone_rows(rows: dict, variants: dict[str, Variant], mc, online_params: Callable[[Variant], int]) -> dict:
  """Table 17's rows with what makes them differ: each row's online parameters (`online_params(variant)`), its joint
  encoder's depth and width, its cache width (the same in every row: `model_config` keeps the config's cache) and
  its initialisation (`init_of`: "random" for both rows, so the table measures capacity, not pretraining)."""
  out = {}
  for name, row in rows.items():
    v = variants[name]
    shape = mc.control if v.control else mc
    out[name] = {**row, "online_params": online_params(v), "num_layers": int(shape.num_layers),
                 "hidden_size": int(shape.hidden_size), "cache_width": int(mc.hidden_size), "init": init_of(mc, v)}
  return out


def tables_needing_all(config) -> dict:
  """results.json `tables_needing_all`: each ablation table of `ablation_plan` that this run did not report
  (`config.ablations`), with the paper's table it reproduces, the models it would train beyond those this run trains
  and why it is left to `:all` ({} when every table ran)."""
  mc = config.model
  plan = ablation_plan(mc.frames, mc.tokens_per_frame, config.cache.precision, tuple(mc.horizons), mc.init)
  trained = {FULL.name} | {v.name for t in config.ablations for v, _ in plan[t].values()}
  if config.diagnostics:
    trained.add(NO_DELTA.name)  # A.10 / A.11 compare with the model without L_delta
  out = {}
  for table in ABLATIONS:
    if table in config.ablations:
      continue
    more = sorted({v.name for v, _ in plan[table].values()} - trained)
    why = (f"each row is a separately trained reranker: {len(more)} more training(s) than this run's (about one "
           "main model's time each), so the default leaves it to the `:all` variant" if more else
           "its rows are models this run trained; only `ablations`' tables are printed (`:all` prints it)")
    out[table] = {"paper": PAPER_TABLES[table], "models_to_train": len(more), "variants": more, "why": why}
  return out


def k_sweep_report(sess: Session) -> tuple[dict, list[str]]:
  """A.7: the main model reranking K candidates, keyed by the K actually reranked (a requested K past the gallery
  reranks all of it); {} when `eval.k_sweep` is empty."""
  c, n = sess.config, len(sess.test.video_ids)
  if not c.eval.k_sweep:
    return {}, []
  sweep = {}
  for k in sorted({min(int(k), n) for k in c.eval.k_sweep}):
    row, info = sess.evaluate_variant(FULL, c.cache.precision, k)
    sweep[str(k)] = {**row, "latency_ms_per_query": info["latency_ms"]["t2v_rerank"],
                     "requested": sorted(int(r) for r in c.eval.k_sweep if min(int(r), n) == k)}
  table = evaluate.format_table({f"K={k}": v for k, v in sweep.items()}, "Candidate-pool size (A.7)", sess.synthetic,
                                columns=list(KEYS) + ["latency_ms_per_query"])
  return {"k_sweep": sweep}, [table]


def prior_split_report(sess: Session) -> tuple[dict, list[str]]:
  """The main model's ranking split into its parts (`eval.prior_split`): stage 1 over the same candidates (what the
  prior alone orders), the reranker as trained (joint pass + prior, eq. 5), and `joint_alone`: the same reranker,
  trained with the prior, read with a flat prior (each query's prior held at its mean over the candidates,
  `PriorHeld`). `joint_alone` is not Table 6's joint-only model, which trains without the prior (the `prior`
  ablation's `joint_only` row). {} when off."""
  c = sess.config
  if not c.eval.prior_split:
    return {}, []
  main, info = sess.evaluate_variant(FULL, c.cache.precision)
  scorer, pairs = sess.scorer(FULL, c.cache.precision)
  held, _ = rerank_metrics(PriorHeld(scorer), pairs, sess.test, c.eval.k, sess.indices)
  rows = {"stage1": info["stage1"], "vedje": main, "joint_alone": held}
  k = min(c.eval.k, len(sess.test.video_ids))
  title = (f"VEDJE's ranking split: the prior alone (stage 1), joint + prior (as trained), joint_alone = the reranker "
           f"trained with the prior, read with a flat prior (held at each query's mean over its top {k}; not Table "
           f"6's joint-only model); chance (a random order of the same top {k}): T2V R@1 {info['chance_t2v_r1']}")
  chance = {"t2v_r1": info["chance_t2v_r1"], "what": f"a random order of each query's stage-1 top {k}"}
  return ({"prior_split": rows, "prior_split_chance": chance},
          [evaluate.format_table(rows, title, sess.synthetic, columns=list(KEYS))])


def diagnostics_report(sess: Session, main_info: dict) -> tuple[dict, list[str]]:
  """A.10's dynamics stratification and A.11's MaxSim cache probe, with and without L_delta; {} when
  `config.diagnostics` is off."""
  c, test, precision = sess.config, sess.test, sess.config.cache.precision
  if not c.diagnostics:
    return {}, []
  bins = dynamics_bins(dynamics(sess.store, c.data.tokens_kind, test.video_ids))
  strat = {"with_delta": stratified_r1(main_info, test, bins),
           "without_delta": stratified_r1(sess.evaluate_variant(NO_DELTA, precision)[1], test, bins)}
  tables = [evaluate.format_table({f"{name} {b}": v for name, rows in strat.items() for b, v in rows.items()},
                                  "R@1 by visual dynamics (A.10: quartile bins of adjacent-frame change)",
                                  sess.synthetic, columns=["t2v_r1", "v2t_r1", "n_videos"])]
  probe = {}
  for name, variant in (("with_delta", FULL), ("without_delta", NO_DELTA)):
    sess.evaluate_variant(variant, precision)
    probe[name] = cache_probe(sess.params_of(variant), sess.cfg_of(variant), sess.cache_store,
                              sess.kind_of(variant, precision), test, sess.tokenizer)
  tables.append(evaluate.format_table(probe, "Token-cache MaxSim probe (A.11)", sess.synthetic,
                                      columns=[k for k in probe["with_delta"] if not k.startswith("pairs")]))
  return {"dynamics": strat, "cache_probe": probe}, tables


def suite(config, workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """Stage 1 (the store's dual-encoder embeddings) and VEDJE (stage-1 top `eval.k` reranked) on the test split's
  caption-to-video R@K (`configs/evaluate_all.py`). Texts are keyed by caption id, videos by video id."""
  sess = Session(config, Path(workdir), restore=True)
  test, space = sess.test, sess.space
  text_row, video_row = {q: i for i, q in enumerate(test.query_ids)}, {v: i for i, v in enumerate(test.video_ids)}
  stage1 = evaluate.dual_encoder("vedje_stage1", space, lambda ids: test.text[[text_row[i] for i in ids]],
                                 lambda ids: test.clip[[video_row[i] for i in ids]],
                                 keys=evaluate.STORE_IDS, texts=text_row, videos=video_row)
  why = "VEDJE's reranker is wired to its own split's caches and stage-1 candidates (R@K)"

  def own_split(kind, data):  # decided before scoring: the caches and candidates are this split's
    queries, videos, _ = data
    return None if (list(queries), list(videos)) == (test.query_ids, test.video_ids) else \
        f"{why}; this gallery is another split"

  reranked = lambda data: sess.evaluate_variant(FULL, config.cache.precision)[0]  # noqa: E731
  return ([stage1, evaluate.Model("vedje", space, {"gallery": reranked}, {k: why for k in evaluate.BENCHMARK_KINDS},
                                  evaluate.STORE_IDS, own_split)],
          [evaluate.Benchmark(f"R@K ({config.name})", "gallery", space,
                              (test.query_ids, test.video_ids, test.query_video), sess.synthetic, evaluate.STORE_IDS)])
