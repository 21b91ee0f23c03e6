"""VEDJE's online side: the joint reranker as a Scorer over cached videos (§2.4-2.5, eq. 5; A.4).

Nothing visual runs here: the videos' caches Z(v) were written offline (`vidjax.extract.transform_kind`
with the compressor) into a feature store kind, in any storage precision (A.4: a bf16 / fp8 / fp4 cache
is dequantized to float32 when read). A reranker batch for Q queries x K stage-1 candidates::

    input_ids       int [Q, K, S]     WordPiece ids of the text side of each pair
    attention_mask  int [Q, K, S]
    cache           [Q, K, N, d_l]    the video side of each pair (N = T*M cached tokens)
    prior           [Q, K]            stage-1 scores rho(q, v)
    -> scores       float32 [Q, K]

`vidjax.experiments.vedje.PairBatches` builds such batches from a feature store for
`vidjax.retrieval.TwoStage` in both directions.
"""
from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

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
    bad = ~np.isfinite(prior)
    if bad.any():
      rows = np.flatnonzero(bad.any(axis=1))
      raise ValueError(f"VEDJE rerank: {int(bad.sum())} stage-1 scores are NaN or Inf (query rows "
                       f"{rows[:5].tolist()}{' ...' if len(rows) > 5 else ''} of this batch); the prior "
                       "rho(q, v) must be finite: check the stage-1 embeddings")
    cache = batch["cache"]
    want = (q, k, self.config.cache_len, self.config.hidden_size)
    if tuple(np.shape(cache)) != want:
      raise ValueError(f"VEDJE rerank: cache has shape {tuple(np.shape(cache))}, expected [Q, K, N, d_l] = {want} "
                       f"(T*M = {self.config.frames}*{self.config.tokens_per_frame} tokens of width "
                       f"{self.config.hidden_size}): was the cache written by a compressor of this config?")
    if not jnp.issubdtype(np.asarray(cache[:0]).dtype, jnp.floating):
      raise ValueError(f"VEDJE rerank: cache must be floating point, got dtype {np.asarray(cache[:0]).dtype}")
    for key in ("input_ids", "attention_mask"):
      shape = np.shape(batch[key])
      if len(shape) != 3 or shape[:2] != (q, k):
        raise ValueError(f"VEDJE rerank: {key} must be [Q, K, S] = [{q}, {k}, S], got {shape}")
    return q, k

  def score(self, batch: Mapping[str, Any]) -> np.ndarray:
    q, k = self.check(batch)
    n = q * k
    flat = {key: np.asarray(batch[key]).reshape((n,) + np.shape(batch[key])[2:])
            for key in ("input_ids", "attention_mask", "cache", "prior")}
    flat["cache"] = flat["cache"].astype(np.float32)
    out = np.empty(n, np.float32)
    for start in range(0, n, self.pair_block):
      stop = min(start + self.pair_block, n)
      part = {key: v[start:stop] for key, v in flat.items()}
      if stop - start < self.pair_block:  # pad to one shape: one compile
        part = {key: np.concatenate([v, np.repeat(v[:1], self.pair_block - (stop - start), 0)]) for key, v in part.items()}
      scores = self._fn(self.params, part["input_ids"], part["attention_mask"], part["cache"], part["prior"])
      out[start:stop] = np.asarray(scores)[:stop - start]
    return out.reshape(q, k)
