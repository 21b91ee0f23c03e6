"""VEDJE's online side: the joint reranker as a Scorer over cached videos (§2.4-2.5, eq. 5; A.4).

Nothing visual runs here: the videos' caches Z(v) were written offline (`vidjax.extract.transform_kind`
with the compressor) into a feature store kind, in any storage precision (A.4: a bf16 / fp8 / fp4 cache
is dequantized to float32 when read). A reranker batch for Q queries x K stage-1 candidates::

    input_ids       int [Q, K, S]     WordPiece ids of the text side of each pair
    attention_mask  int [Q, K, S]
    cache           [Q, K, N, d_l]    the video side of each pair (N = T*M cached tokens)
    prior           [Q, K]            stage-1 scores rho(q, v)
    -> scores       float32 [Q, K]

`PairBatches` builds such batches from a feature store for
`vidjax.retrieval.TwoStage` in both directions.
"""
from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from vidjax.data.features import FeatureStore, MissingFeatureError
from vidjax.models import vedje as vedje_models


class VedjeScorer:
  """Scores (text, cached video) pairs with a trained `JointReranker` (eq. 5).

  The Q*K pairs of a batch run in calls of `pair_block` pairs (the last padded), so the jitted reranker
  compiles once per text length; inside a call the model runs them in blocks of `config.scan_pairs`.
  """

  def __init__(self, config: vedje_models.VedjeConfig, params: Any, pair_block: int = 256):
    """params: the reranker's parameter tree (`Vedje` params['reranker'] or a `JointReranker` tree)."""
    self.config, self.params, self.pair_block = config, params, int(pair_block)
    model = vedje_models.JointReranker(config)
    self._fn = jax.jit(lambda p, ids, mask, cache, prior: model.apply({"params": p}, ids, mask, cache, prior,
                                                                      method=model.score_pairs))

  def check(self, batch: Mapping[str, Any]) -> tuple[int, int]:
    """Raises one clear ValueError for a malformed batch; returns (Q, K)."""
    prior = np.asarray(batch["prior"])
    if prior.ndim != 2:
      raise ValueError(f"VEDJE rerank: prior must be [Q, K] stage-1 scores, got shape {prior.shape}")
    q, k = prior.shape
    # -inf is a recall stage's padding (a corpus with fewer candidates than K, or a query's excluded context
    # clips): not a score; `score` gives such pairs -inf without running them. NaN / +Inf is a broken stage 1.
    bad = ~np.isfinite(prior) & (prior != -np.inf)
    if bad.any():
      rows = np.flatnonzero(bad.any(axis=1))
      raise ValueError(f"VEDJE rerank: {int(bad.sum())} stage-1 scores are NaN or Inf (query rows "
                       f"{rows[:5].tolist()}{' ...' if len(rows) > 5 else ''} of this batch); the prior "
                       "rho(q, v) must be finite (only -inf, a recall stage's padding, is allowed): check the stage-1 "
                       "embeddings")
    cache = batch["cache"]
    want = (q, k, self.config.cache_len, self.config.cache_width)
    if tuple(np.shape(cache)) != want:
      raise ValueError(f"VEDJE rerank: cache has shape {tuple(np.shape(cache))}, expected [Q, K, N, d_c] = {want} "
                       f"(T*M = {self.config.frames}*{self.config.tokens_per_frame} tokens of width "
                       f"{self.config.cache_width}): was the cache written by a compressor of this config?")
    if not jnp.issubdtype(np.asarray(cache[:0]).dtype, jnp.floating):
      raise ValueError(f"VEDJE rerank: cache must be floating point, got dtype {np.asarray(cache[:0]).dtype}")
    for key in ("input_ids", "attention_mask"):
      shape = np.shape(batch[key])
      if len(shape) != 3 or shape[:2] != (q, k):
        raise ValueError(f"VEDJE rerank: {key} must be [Q, K, S] = [{q}, {k}, S], got {shape}")
    return q, k

  def score(self, batch: Mapping[str, Any]) -> np.ndarray:
    """[Q, K] scores; a padded pair (prior -inf) scores -inf and is not run. The cache is converted to float32 one
    block of `pair_block` pairs at a time (host memory bounded by the block, not by Q*K)."""
    q, k = self.check(batch)
    n = q * k
    flat = {key: np.asarray(batch[key]).reshape((n,) + np.shape(batch[key])[2:])
            for key in ("input_ids", "attention_mask", "cache", "prior")}
    padding = flat["prior"] == -np.inf
    out = np.full(n, -np.inf, np.float32)
    real = np.flatnonzero(~padding)
    flat = {key: v[real] if key != "cache" else v for key, v in flat.items()}
    for start in range(0, len(real), self.pair_block):
      stop = min(start + self.pair_block, len(real))
      part = {key: v[start:stop] for key, v in flat.items() if key != "cache"}
      part["cache"] = flat["cache"][real[start:stop]].astype(np.float32)
      if stop - start < self.pair_block:  # pad to one shape: one compile
        part = {key: np.concatenate([v, np.repeat(v[:1], self.pair_block - (stop - start), 0)]) for key, v in part.items()}
      scores = self._fn(self.params, part["input_ids"], part["attention_mask"], part["cache"], part["prior"])
      out[real[start:stop]] = np.asarray(scores)[:stop - start]
    return out.reshape(q, k)


def held_prior(prior: np.ndarray) -> np.ndarray:
  """`[Q, K]` stage-1 scores -> each row's mean over its real candidates in every real slot (-inf padding kept)."""
  prior = np.asarray(prior, np.float32)
  real = prior != -np.inf
  mean = np.where(real, prior, 0.0).sum(axis=1) / np.maximum(real.sum(axis=1), 1)
  return np.where(real, mean[:, None], -np.inf).astype(np.float32)


class PriorHeld:
  """A reranker read with its stage-1 prior held at each query's mean over its candidates (`held_prior`): the prior
  no longer orders a query's candidates, so the ranking is the joint pass's (of a reranker trained with the prior:
  not Table 6's joint-only model, trained without it). Beside the reranker's own ranking and stage 1's, it splits
  what the learned joint pass contributes from what the residual prior (eq. 5) carries."""

  def __init__(self, scorer: VedjeScorer):
    self.scorer = scorer

  def score(self, batch: Mapping[str, Any]) -> np.ndarray:
    return self.scorer.score({**batch, "prior": held_prior(batch["prior"])})


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
