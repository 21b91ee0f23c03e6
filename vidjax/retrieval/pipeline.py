"""Two-stage retrieval: a recall stage's top K, re-scored by any Scorer (ARCHITECTURE.md "At query time").

    stack = TwoStage(index, k_recall=100, reranker=scorer)      # index: anything with retrieve(queries, k)
    result = stack.search(queries, k=10)
    result.ids [Q, 10], result.scores, result.recall_ids [Q, 100], result.latency_ms["rerank"]

The recall stage is anything with `retrieve(queries, k) -> (ids [Q, K], scores [Q, K])` (the
`vidjax.evaluate.Retriever` protocol: a `DenseIndex`, a generative recall); the reranker is any
Scorer (`score(batch) -> [Q, K]`). The reranker's batch comes from
`batch_fn(queries, candidate_ids [Q, K], stage1_scores [Q, K])`; by default it is the queries
(`{"text": queries}`, or the query dict itself) plus `candidates` = the recall stage's stored
vectors of the candidates `[Q, K, D]` (`recall.vectors(ids)`) and `prior` = the stage-1 scores.
The final order is the reranker's scores, best first, equal scores kept in stage-1 order. A recall
stage with fewer than K candidates for a query (generative recall) pads with stage-1 score -inf:
those places keep score -inf whatever the reranker says and stay last.

Queries go through both stages in batches of `query_batch` (the last padded to the next power of
two by repeating its last row, the padding dropped), so a jitted reranker compiles for a bounded
set of shapes.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

from vidjax.retrieval.dense import DEFAULT_QUERY_BATCH
from vidjax.retrieval.stack import BatchFn, Stack, Stage


class TwoStageResult(NamedTuple):
  """What `TwoStage.search` returns.

  ids: [Q, k] final ids, best first.
  scores: float32 [Q, k], the reranker's scores (stage-1 scores without a reranker).
  recall_ids: [Q, K] stage-1 ids (K = k_recall), best first.
  recall_scores: float32 [Q, K] stage-1 scores.
  latency_ms: {"recall": ms/query, "rerank": ms/query (batch building + scoring + ordering; 0
    without a reranker), "total": ms/query}, wall time over the whole call divided by Q.
  """
  ids: np.ndarray
  scores: np.ndarray
  recall_ids: np.ndarray
  recall_scores: np.ndarray
  latency_ms: dict[str, float]


class TwoStage:
  """recall -> (optional) rerank: a `Stack` with at most one stage; see the module docstring."""

  def __init__(self, recall: Any, k_recall: int, reranker: Any = None, batch_fn: Optional[BatchFn] = None,
               query_batch: int = DEFAULT_QUERY_BATCH):
    """
    Args:
      recall: has `retrieve(queries, k) -> (ids [Q, k], scores [Q, k])`, best first.
      k_recall: K, candidates per query handed to the reranker.
      reranker: a Scorer (`score(batch)`) or a plain `batch -> [Q, K]` function; None = stage 1 only.
      batch_fn: `(queries, candidate_ids [Q, K], stage1_scores [Q, K]) -> reranker batch`; the
        default needs `recall.vectors(ids) -> [..., D]` (as `DenseIndex` has).
      query_batch: queries per pass through both stages.
    """
    if not hasattr(recall, "retrieve"):
      raise TypeError(f"TwoStage: the recall stage must have retrieve(queries, k); got {type(recall).__name__}")
    if isinstance(k_recall, bool) or not isinstance(k_recall, (int, np.integer)) or k_recall < 1:
      raise ValueError(f"TwoStage: k_recall must be a positive integer, got {k_recall!r}")
    if not isinstance(query_batch, (int, np.integer)) or query_batch < 1:
      raise ValueError(f"TwoStage: query_batch must be a positive integer, got {query_batch!r}")
    if reranker is not None and batch_fn is None and not hasattr(recall, "vectors"):
      raise TypeError(f"TwoStage: the default reranker batch needs recall.vectors(ids), which "
                      f"{type(recall).__name__} lacks; pass batch_fn(queries, candidate_ids, stage1_scores)")
    self.recall, self.k_recall, self.query_batch = recall, int(k_recall), int(query_batch)
    stages = [] if reranker is None else [Stage("rerank", reranker, self.k_recall, batch_fn)]
    self._stack = Stack(recall, self.k_recall, stages, self.query_batch)

  def search(self, queries: Any, k: int) -> TwoStageResult:
    """The top `k` of the reranked top `k_recall` (see `TwoStageResult`).

    Args:
      queries: an array [Q, ...] or a dict of [Q, ...] arrays, as the recall stage takes them.
      k: 1 <= k <= k_recall.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= self.k_recall:
      raise ValueError(f"TwoStage.search: k must be an integer in [1, k_recall={self.k_recall}], got {k!r}")
    r = self._stack.search(queries, k)
    latency = {"recall": r.latency_ms["recall"], "rerank": r.latency_ms.get("rerank", 0.0),
               "total": r.latency_ms["total"]}
    return TwoStageResult(r.ids, r.scores, r.stage_ids["recall"], r.stage_scores["recall"], latency)

  def retrieve(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The `vidjax.evaluate.Retriever` protocol: (final ids [Q, k], scores [Q, k])."""
    result = self.search(queries, k)
    return result.ids, result.scores
