"""A composed retrieval stack: one recall stage, then any number of rescoring stages, each keeping its own top K.

    stack = Stack(recall, k_recall=100, stages=[Stage("vedje", vedje_scorer, k=20, batch_fn=vedje_batch),
                                                Stage("cast", cast_ensemble, k=10, batch_fn=with_history)])
    result = stack.search(queries, k=10)
    result.ids [Q, 10]; result.stage_ids["recall" | "vedje" | "cast"]: what each stage passed on (and
    result.stage_scores[stage] the scores it gave them);
    result.latency_ms[stage]: ms per query; Stack.candidate_recall(result, relevant): per stage

The recall stage is any `vidjax.evaluate.Retriever` (a `DenseIndex`, GRDR's `GenerativeRecall`); a stage is any
Scorer with a `batch_fn(queries, candidate_ids [Q, K], previous_scores [Q, K])` that builds its batch (default:
the queries plus the recall stage's stored vectors of the candidates and `prior` = the previous scores, as
`TwoStage` does). Each stage reorders the candidates it receives by its scores (equal scores keep the previous
order) and passes its top `k` on; the last stage's order is the answer. A stack without stages is the recall
stage alone, so a missing method's stage is simply left out.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

import numpy as np

from vidjax.retrieval.dense import DEFAULT_QUERY_BATCH, pad_rows, query_batches

RECALL = "recall"
# (queries, candidate_ids [Q, K], previous_scores [Q, K]) -> a stage's batch
BatchFn = Callable[[Any, np.ndarray, np.ndarray], Mapping[str, Any]]


@dataclasses.dataclass(frozen=True)
class Stage:
  """A rescoring stage: `scorer` (a Scorer or `batch -> [Q, K]`) over the candidates it receives; keeps `k`."""
  name: str
  scorer: Any
  k: int
  batch_fn: Optional[BatchFn] = None


class StackResult(NamedTuple):
  """ids / scores [Q, k] of the last stage; stage_ids {stage: [Q, K_stage]} what each stage passed on (recall
  first) and stage_scores {stage: [Q, K_stage]} the scores that stage gave them; latency_ms {stage: ms per
  query, "total"}."""
  ids: np.ndarray
  scores: np.ndarray
  stage_ids: dict[str, np.ndarray]
  stage_scores: dict[str, np.ndarray]
  latency_ms: dict[str, float]

  def score_of(self, stage: str, query: int, item: Any) -> float:
    """The score `stage` gave result `item` of query `query`, or NaN if that stage did not pass it on."""
    hit = np.flatnonzero(self.stage_ids[stage][query] == item)
    return float(self.stage_scores[stage][query, hit[0]]) if hit.size else float("nan")


class Stack:
  """recall -> stage 1 -> stage 2 -> ...; see the module docstring."""

  def __init__(self, recall: Any, k_recall: int, stages: Sequence[Stage] = (), query_batch: int = DEFAULT_QUERY_BATCH):
    if not hasattr(recall, "retrieve"):
      raise TypeError(f"Stack: the recall stage must have retrieve(queries, k); got {type(recall).__name__}")
    names = [RECALL] + [s.name for s in stages]
    if len(set(names)) != len(names):
      raise ValueError(f"Stack: stage names must be unique and not {RECALL!r}, got {names}")
    previous = k_recall
    for name, k in zip(names, [k_recall] + [s.k for s in stages]):
      if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= previous:
        raise ValueError(f"Stack: stage {name!r} keeps k={k!r}; expected an integer in [1, {previous}] (no stage keeps "
                         "more candidates than it receives)")
      previous = k
    for s in stages:
      if s.batch_fn is None and not hasattr(recall, "vectors"):
        raise TypeError(f"Stack: stage {s.name!r} has no batch_fn and the recall stage {type(recall).__name__} has no "
                        "vectors(ids) for the default batch")
    if not isinstance(query_batch, (int, np.integer)) or query_batch < 1:
      raise ValueError(f"Stack: query_batch must be a positive integer, got {query_batch!r}")
    self.recall, self.k_recall, self.stages, self.query_batch = recall, int(k_recall), list(stages), int(query_batch)

  @property
  def max_k(self) -> int:
    """The most results one search returns (the last stage's k)."""
    return self.stages[-1].k if self.stages else self.k_recall

  @property
  def names(self) -> list[str]:
    return [RECALL] + [s.name for s in self.stages]

  def default_batch(self, queries: Any, candidate_ids: np.ndarray, previous: np.ndarray) -> dict[str, Any]:
    fields = dict(queries) if isinstance(queries, Mapping) else {"text": queries}
    return {**fields, "candidates": self.recall.vectors(candidate_ids), "prior": previous}

  def search(self, queries: Any, k: int, exclude: Optional[Sequence[Sequence[Any]]] = None) -> StackResult:
    """The top `k` (1 <= k <= the last stage's k) of every query (an array [Q, ...] or a dict of them).

    `exclude[q]`: ids query q must not get back (e.g. the context clips it was given); the recall stage
    fetches that many more candidates and drops them, so every stage still sees k_recall candidates (a corpus
    too small for that pads with score -inf, which stays last)."""
    last = self.max_k
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= last:
      raise ValueError(f"Stack.search: k must be an integer in [1, {last}], got {k!r}")
    q = _num_rows(queries)
    if q == 0:
      raise ValueError("Stack.search: no queries (Q = 0)")
    if exclude is not None and len(exclude) != q:
      raise ValueError(f"Stack.search: exclude has {len(exclude)} rows for {q} queries")
    extra = max((len(e) for e in exclude), default=0) if exclude is not None else 0
    most = getattr(self.recall, "max_k", None) or (len(self.recall) if hasattr(self.recall, "__len__") else None)
    if extra and most is not None:  # never more than the recall stage can return
      extra = max(0, min(extra, most - self.k_recall))
    seconds = dict.fromkeys(self.names, 0.0)
    parts: dict[str, list] = {name: [] for name in self.names}
    part_scores: dict[str, list] = {name: [] for name in self.names}
    finals = []
    for start, stop, size in query_batches(q, self.query_batch):
      rows = _rows(queries, start, stop, size)
      t = time.perf_counter()
      ids, scores = self.recall.retrieve(rows, self.k_recall + extra)
      ids, scores = np.asarray(ids), np.asarray(scores, np.float32)
      if ids.shape != (size, self.k_recall + extra) or scores.shape != ids.shape:
        raise ValueError(f"Stack: the recall stage returned ids {ids.shape} and scores {scores.shape} for {size} "
                         f"queries and k={self.k_recall + extra}; expected {(size, self.k_recall + extra)} each")
      if exclude is not None:
        ids, scores = _drop(ids, scores, [exclude[min(i, stop - 1)] for i in range(start, start + size)],
                            self.k_recall)
      seconds[RECALL] += time.perf_counter() - t
      parts[RECALL].append(ids[:stop - start])
      part_scores[RECALL].append(scores[:stop - start])
      for stage in self.stages:
        t = time.perf_counter()
        batch = (stage.batch_fn or self.default_batch)(rows, ids, scores)
        fn = stage.scorer.score if hasattr(stage.scorer, "score") else stage.scorer
        ids, scores = rerank(fn, batch, ids, scores, stage.k, f"Stack stage {stage.name!r}")
        seconds[stage.name] += time.perf_counter() - t
        parts[stage.name].append(ids[:stop - start])
        part_scores[stage.name].append(scores[:stop - start])
      finals.append((ids[:stop - start, :k], scores[:stop - start, :k]))
    latency = {name: 1e3 * s / q for name, s in seconds.items()}
    latency["total"] = sum(latency.values())
    return StackResult(np.concatenate([f[0] for f in finals]), np.concatenate([f[1] for f in finals]),
                       {name: np.concatenate(p) for name, p in parts.items()},
                       {name: np.concatenate(p) for name, p in part_scores.items()}, latency)

  def vectors(self, ids: Any) -> np.ndarray:
    """The recall stage's stored vectors of `ids` (so a stack used as a recall stage serves default batches)."""
    return self.recall.vectors(ids)

  def retrieve(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The `vidjax.evaluate.Retriever` protocol (a stack can be another stack's recall stage)."""
    result = self.search(queries, k)
    return result.ids, result.scores

  @staticmethod
  def candidate_recall(result: StackResult, relevant: np.ndarray) -> dict[str, float]:
    """{stage: % of queries whose relevant id is among the candidates that stage passed on}."""
    relevant = np.asarray(relevant)
    return {name: float(100.0 * np.mean((ids == relevant[:, None]).any(axis=1)))
            for name, ids in result.stage_ids.items()}


def _drop(ids: np.ndarray, scores: np.ndarray, exclude: Sequence[Sequence[Any]], k: int) -> tuple[np.ndarray, np.ndarray]:
  """The first `k` candidates of each row that are not in its `exclude` (excluded ones left at the end score -inf)."""
  hit = np.array([np.isin(row, np.asarray(list(e), dtype=ids.dtype)) if len(e) else np.zeros(len(row), bool)
                  for row, e in zip(ids, exclude)])
  order = np.argsort(hit, axis=1, kind="stable")[:, :k]  # kept candidates first, in recall order
  ids, scores, hit = (np.take_along_axis(a, order, 1) for a in (ids, scores, hit))
  return ids, np.where(hit, -np.inf, scores).astype(np.float32)


def _num_rows(queries: Any) -> int:
  if isinstance(queries, Mapping):
    sizes = {key: np.shape(v)[0] if np.ndim(v) else None for key, v in queries.items()}
    if not sizes or None in sizes.values() or len(set(sizes.values())) != 1:
      raise ValueError("search: query fields need one shared leading dimension Q, got shapes "
                       f"{ {key: np.shape(v) for key, v in queries.items()} }")
    return next(iter(sizes.values()))
  if np.ndim(queries) < 1:
    raise ValueError(f"search: queries must be [Q, ...], got shape {np.shape(queries)}")
  return np.shape(queries)[0]


def _rows(queries: Any, start: int, stop: int, size: int) -> Any:
  if isinstance(queries, Mapping):
    return {key: pad_rows(np.asarray(v)[start:stop], size) for key, v in queries.items()}
  return pad_rows(np.asarray(queries)[start:stop], size)


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
