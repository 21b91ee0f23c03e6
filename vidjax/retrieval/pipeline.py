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

import time
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple, Optional

import numpy as np

from vidjax.retrieval.dense import DEFAULT_QUERY_BATCH, pad_rows, query_batches

BatchFn = Callable[[Any, np.ndarray, np.ndarray], Mapping[str, Any]]


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


def _num_rows(queries: Any) -> int:
  if isinstance(queries, Mapping):
    sizes = {key: np.shape(v)[0] if np.ndim(v) else None for key, v in queries.items()}
    if not sizes or None in sizes.values() or len(set(sizes.values())) != 1:
      raise ValueError("TwoStage.search: query fields need one shared leading dimension Q, got shapes "
                       f"{ {key: np.shape(v) for key, v in queries.items()} }")
    return next(iter(sizes.values()))
  if np.ndim(queries) < 1:
    raise ValueError(f"TwoStage.search: queries must be [Q, ...], got shape {np.shape(queries)}")
  return np.shape(queries)[0]


def _rows(queries: Any, start: int, stop: int, size: int) -> Any:
  if isinstance(queries, Mapping):
    return {key: pad_rows(np.asarray(v)[start:stop], size) for key, v in queries.items()}
  return pad_rows(np.asarray(queries)[start:stop], size)


class TwoStage:
  """recall -> (optional) rerank; see the module docstring."""

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
    self.reranker = None if reranker is None else (reranker.score if hasattr(reranker, "score") else reranker)
    self.batch_fn = batch_fn or self.default_batch

  def default_batch(self, queries: Any, candidate_ids: np.ndarray, stage1_scores: np.ndarray) -> dict[str, Any]:
    """The queries (`{"text": queries}` or the query dict) + `candidates` [Q, K, D] + `prior` [Q, K]."""
    fields = dict(queries) if isinstance(queries, Mapping) else {"text": queries}
    return {**fields, "candidates": self.recall.vectors(candidate_ids), "prior": stage1_scores}

  def search(self, queries: Any, k: int) -> TwoStageResult:
    """The top `k` of the reranked top `k_recall` (see `TwoStageResult`).

    Args:
      queries: an array [Q, ...] or a dict of [Q, ...] arrays, as the recall stage takes them.
      k: 1 <= k <= k_recall.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= self.k_recall:
      raise ValueError(f"TwoStage.search: k must be an integer in [1, k_recall={self.k_recall}], got {k!r}")
    q = _num_rows(queries)
    if q == 0:
      raise ValueError("TwoStage.search: no queries (Q = 0)")
    parts, seconds = [], {"recall": 0.0, "rerank": 0.0}
    for start, stop, size in query_batches(q, self.query_batch):
      rows = _rows(queries, start, stop, size)
      t = time.perf_counter()
      ids, s1 = self.recall.retrieve(rows, self.k_recall)
      ids, s1 = np.asarray(ids), np.asarray(s1, np.float32)
      seconds["recall"] += time.perf_counter() - t
      if ids.shape != (size, self.k_recall) or s1.shape != ids.shape:
        raise ValueError(f"TwoStage: the recall stage returned ids {ids.shape} and scores {s1.shape} for "
                         f"{size} queries and k={self.k_recall}; expected {(size, self.k_recall)} each")
      if self.reranker is None:
        final_ids, final_s = ids[:, :k], s1[:, :k]
      else:
        t = time.perf_counter()
        final_ids, final_s = self._rerank(rows, ids, s1, k)
        seconds["rerank"] += time.perf_counter() - t
      m = stop - start
      parts.append((final_ids[:m], final_s[:m], ids[:m], s1[:m]))
    out = [np.concatenate(p) for p in zip(*parts)]
    latency = {name: 1e3 * s / q for name, s in seconds.items()}
    latency["total"] = latency["recall"] + latency["rerank"]
    return TwoStageResult(*out, latency_ms=latency)

  def retrieve(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The `vidjax.evaluate.Retriever` protocol: (final ids [Q, k], scores [Q, k])."""
    result = self.search(queries, k)
    return result.ids, result.scores

  def _rerank(self, queries: Any, ids: np.ndarray, s1: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    return rerank(self.reranker, self.batch_fn(queries, ids, s1), ids, s1, k, "TwoStage")


def rerank(scorer: Callable[[Mapping[str, Any]], Any], batch: Mapping[str, Any], ids: np.ndarray, prior: np.ndarray,
           k: int, who: str) -> tuple[np.ndarray, np.ndarray]:
  """The top `k` of candidates `ids [Q, K]` (previous scores `prior`) by `scorer(batch) -> [Q, K]`, best first.

  Equal scores keep the previous order; candidates padded with prior -inf keep -inf and stay last; a NaN or
  Inf score of a real candidate is an error (named after `who`)."""
  scores = np.asarray(scorer(batch), np.float32)
  if scores.shape != ids.shape:
    raise ValueError(f"{who}: the reranker returned scores of shape {scores.shape} for {ids.shape[0]} "
                     f"queries x {ids.shape[1]} candidates; expected {ids.shape}")
  padding = prior == -np.inf  # a recall stage with fewer than K candidates pads with -inf
  bad = ~np.isfinite(scores) & ~padding
  if bad.any():
    raise ValueError(f"{who}: the reranker returned NaN or Inf scores for {int(np.sum(bad.any(axis=1)))} queries")
  scores = np.where(padding, -np.inf, scores)
  order = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # equal scores keep the previous order
  return np.take_along_axis(ids, order, 1), np.take_along_axis(scores, order, 1)
