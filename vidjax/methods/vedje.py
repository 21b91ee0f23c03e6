"""VEDJE as a method (../shared/papers/vedje.txt §2, A.2-A.4, A.10-A.11): a variant's model config, its training
queries and stage-1 neighbourhood batches (with BERT's MLM masking), training through the one loop, offline
cache indexing, the reranked R@K of `TwoStage` in both directions, and the A.10 / A.11 diagnostics.

    cfg = model_config(config.model, variant, visual_dim, patches, vtc_dim, vocab_size)
    params = train_variant(variant, cfg, split, patches, negatives, config.train, ...)   # <workdir>/models/<variant>
    index_caches(params, cfg, store, cache_store, "tokens", "cache", "bfloat16", video_ids, progress)
    reranked, info = rerank_metrics(VedjeScorer(cfg, params["reranker"]), PairBatches(...), test, k, indices)
"""
from __future__ import annotations

import dataclasses
import functools
import zlib
from pathlib import Path
from typing import Any, Sequence

import jax
import numpy as np

from vidjax import checkpoints, extract, losses, metrics, ops, train
from vidjax.data import lexicon, pipeline
from vidjax.data.features import FeatureStore
from vidjax.data.retrieval import build_benchmark, embeddings, read_dataset
from vidjax.defaults import common
from vidjax.defaults.vedje import Variant
from vidjax.models import vedje as V
from vidjax.models.bert import BertConfig
from vidjax.retrieval import DenseIndex, TwoStage
from vidjax.scorers.vedje import PairBatches, VedjeScorer

KEYS = ("t2v_r1", "t2v_r5", "t2v_r10", "v2t_r1", "v2t_r5", "v2t_r10")


def model_config(mc, variant: Variant, visual_dim: int, patches: int, vtc_dim: int, vocab_size: int) -> V.VedjeConfig:
  """The variant's model; Table 17's control (`variant.control`) takes `mc.control`'s encoder shape."""
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
      use_joint=variant.use_joint)


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
  bert = checkpoints.load_bert_dir(mc.minilm_dir) if mc.init == "minilm" and not variant.control else None

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
