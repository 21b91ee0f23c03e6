"""The pair reranker (`vidjax.models.pair`) as a Scorer: the composed stack's rerank stage on embeddings.

A batch for Q queries x K candidates::

    text        [Q, D]      query text embeddings
    candidates  [Q, K, D]   candidate clip embeddings
    prior       [Q, K]      the previous stage's scores rho(q, v)
    -> scores   float32 [Q, K]
"""
from __future__ import annotations

from typing import Any, Mapping

import jax
import numpy as np

from vidjax.models.pair import PairReranker

KEYS = ("text", "candidates", "prior")


class PairScorer:
  """Scores (text, candidate) pairs with a trained `PairReranker`; jits once per batch shape."""

  def __init__(self, model: PairReranker, params: Any):
    self.model, self.params = model, params
    self._fn = jax.jit(lambda p, text, cands, prior: model.apply({"params": p}, text, cands, prior))

  def score(self, batch: Mapping[str, Any]) -> np.ndarray:
    missing = [k for k in KEYS if k not in batch]
    if missing:
      raise KeyError(f"a pair-rerank batch lacks {missing}; it needs {list(KEYS)}")
    prior = np.asarray(batch["prior"], np.float32)
    # Padded candidates (-inf prior) score -inf whatever the model says (`vidjax.retrieval.pipeline.rerank`).
    scores = self._fn(self.params, np.asarray(batch["text"], np.float32), np.asarray(batch["candidates"], np.float32),
                      np.where(np.isfinite(prior), prior, 0.0))
    return np.asarray(scores, np.float32)
