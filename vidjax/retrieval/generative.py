"""Generative recall (GRDR §3.4) as a recall stage: query encoding -> trie-constrained beam search -> IDs -> videos.

    recall = GenerativeRecall(trie, encode_fn, logp_fn, params, width=100, vectors=features)   # uncapped
    ids, scores = recall.retrieve(queries, k=recall.max_candidates)  # [Q, k] video ids, "" / -inf past the candidates
    stack = TwoStage(recall, k_recall=recall.max_candidates, reranker=CosineScorer())   # dense rerank of them all

The model side comes in as two functions, so this module knows no model:
  encode_fn(params, queries) -> the queries' state (e.g. the encoder memory [Q, L, d]), jitted here;
  logp_fn(params, state, prefix int32 [Q, W, m]) -> log P(next code) [Q, W, K] (`trie.beam_search`).

A query's candidates are the videos of its beams' IDs, de-duplicated in beam order (videos sharing an ID
in index order), all of them (`limit=None`, GRDR §4.3: the beam sets how many) or at most `limit`; fewer than k
are padded with id "" and score -inf, which `TwoStage` leaves at the end (`max_candidates`: a k that cuts
none). A candidate's score is the log-likelihood of the first beam that brought it.
`latency_ms` accumulates wall time per stage (encode, decode, id_to_video) over every `retrieve` call
and `queries_seen` the queries, for the per-stage latency of §4.1.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Callable, Optional

import jax
import numpy as np

from vidjax.ops import is_positive_int
from vidjax.retrieval.dense import pad_rows
from vidjax.retrieval.trie import SemanticIdTrie, beam_search

STAGES = ("encode", "decode", "id_to_video")


def t5_state_copies(decoder_layers: int) -> int:
  """`GenerativeRecall`'s `state_copies` for a T5 decoder's `logp_fn`: the repeated encoder memory and each decoder
  layer's cross-attention keys and values over it."""
  return 1 + 2 * decoder_layers


class GenerativeRecall:
  """The `vidjax.evaluate.Retriever` protocol over a `SemanticIdTrie` (see the module docstring)."""

  def __init__(self, trie: SemanticIdTrie, encode_fn: Callable, logp_fn: Callable, params: Any, *,
               width: int, limit: Optional[int] = None, vectors: Any = None, query_key: str = "text",
               beam_state_bytes: int = 2 ** 28, state_copies: int = 1):
    """
    Args:
      trie: the corpus's semantic IDs.
      encode_fn, logp_fn: the model (module docstring); `logp_fn` must be hashable (a module-level
        function or one object kept for the life of this recall) since beam search is jitted on it.
      params: passed to both.
      width: beam width W (GRDR §4.3 tunes it so that ~100-150 videos come out).
      limit: at most this many candidate videos per query (None: all the beams bring).
      vectors: optional [V, D] dense embeddings of the trie's videos (its order), for a reranker
        reading `vectors(ids)` (TwoStage's default batch).
      query_key: the query field `retrieve` reads when given a dict batch (as `DenseIndex`)
      beam_state_bytes: how much working memory a beam-search step may take over the queries' state
        repeated for every beam: the beam search runs over chunks of queries that keep `chunk x W x state
        bytes per query x state_copies` under this (default 256 MiB), so its memory does not grow with the
        query batch. At 256 queries, W = 250 and 128 query tokens of width 128 a single pass allocated
        26.8 GB. Chunks give the same beams as one pass (the last is padded to the chunk's shape: one
        compilation).
      state_copies: how many copies of the repeated state `logp_fn` keeps at once: a T5 decoder's
        `code_logp` repeats its encoder memory W times and each decoder layer computes the cross-attention's
        keys and values over it, 1 + 2 x decoder layers (`t5_state_copies`; XLA's own count on CPU: 13.05
        for T5-Small's 6 layers). 1: the state alone.
    """
    if not is_positive_int(width):
      raise ValueError(f"GenerativeRecall: width must be a positive integer, got {width!r}")
    if limit is not None and not is_positive_int(limit):
      raise ValueError(f"GenerativeRecall: limit must be a positive integer or None, got {limit!r}")
    if not is_positive_int(beam_state_bytes):
      raise ValueError(f"GenerativeRecall: beam_state_bytes must be a positive integer, got {beam_state_bytes!r}")
    if not is_positive_int(state_copies):
      raise ValueError(f"GenerativeRecall: state_copies must be a positive integer, got {state_copies!r}")
    if vectors is not None and np.shape(vectors)[0] != len(trie):
      raise ValueError(f"GenerativeRecall: {np.shape(vectors)[0]} vectors for a trie of {len(trie)} videos")
    self.trie, self.params, self.width, self.limit, self.query_key = trie, params, int(width), limit, query_key
    self.beam_state_bytes, self.state_copies = int(beam_state_bytes), int(state_copies)
    self._arrays = trie.arrays()
    self._encode = jax.jit(encode_fn)
    self._logp_fn = logp_fn
    self._vectors = None if vectors is None else np.asarray(vectors, np.float32)
    self._row = {v: i for i, v in enumerate(trie.video_ids)}
    self.reset_latency()

  @property
  def max_candidates(self) -> int:
    """The most candidate videos one query can get: `limit`, or uncapped the videos of the W IDs with the most
    videos (at most the whole trie): a `k` for `retrieve` / `TwoStage.k_recall` that cuts nothing."""
    if self.limit is not None:
      return min(self.limit, len(self.trie))
    sizes = np.sort(np.diff(self.trie.video_ptr))[::-1]
    return int(min(len(self.trie), sizes[:self.width].sum()))

  def candidates(self, queries: Any) -> list[np.ndarray]:
    """Per query, the de-duplicated candidate video indices (into `trie.video_ids`), beam order."""
    return self._recall(queries)[0]

  def _recall(self, queries):
    if isinstance(queries, Mapping):
      queries = queries[self.query_key]
    t0 = time.perf_counter()
    state = jax.block_until_ready(self._encode(self.params, queries))
    t1 = time.perf_counter()
    arrays = jax.tree_util.tree_leaves(state)
    n = arrays[0].shape[0]
    per_query = max(sum(int(a.nbytes) for a in arrays) // max(n, 1), 1)
    chunk = max(1, min(n, self.beam_state_bytes // (self.width * per_query * self.state_copies)))
    parts = []
    for start in range(0, n, chunk):
      rows = jax.tree.map(lambda a, s=start: pad_rows(a[s:s + chunk], chunk), state)  # the last chunk padded
      parts.append(jax.device_get(beam_search(self._logp_fn, self._arrays, self.params, rows,
                                              width=self.width, depth=self.trie.depth))[1:])
    leaves = np.concatenate([p[0] for p in parts])[:n]
    scores = np.concatenate([p[1] for p in parts])[:n]
    t2 = time.perf_counter()
    found, found_scores = [], []
    for q in range(leaves.shape[0]):
      videos, beams = self.trie.videos_in_order(leaves[q], self.limit, return_beams=True)
      found.append(videos)
      found_scores.append(scores[q, beams].astype(np.float32))  # the best beam that brought each video
    t3 = time.perf_counter()
    for name, dt in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2)):
      self.latency_ms[name] += 1e3 * dt
    self.queries_seen += leaves.shape[0]
    return found, found_scores

  def retrieve(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(video ids [Q, k], log-likelihood scores [Q, k]); "" and -inf past a query's candidates."""
    if not is_positive_int(k):
      raise ValueError(f"GenerativeRecall.retrieve: k must be a positive integer, got {k!r}")
    found, found_scores = self._recall(queries)
    ids = np.full((len(found), k), "", dtype=self.trie.video_ids.dtype)
    scores = np.full((len(found), k), -np.inf, np.float32)
    for q, (videos, s) in enumerate(zip(found, found_scores)):
      n = min(k, len(videos))
      ids[q, :n], scores[q, :n] = self.trie.video_ids[videos[:n]], s[:n]
    return ids, scores

  def vectors(self, ids: np.ndarray) -> np.ndarray:
    """The dense vectors of video ids [...] -> [..., D]; zeros for the padding id ""."""
    if self._vectors is None:
      raise ValueError("GenerativeRecall.vectors: no dense vectors were given (vectors=...)")
    ids = np.asarray(ids)
    rows = np.asarray([self._row.get(str(i), -1) for i in ids.reshape(-1)], np.int64)
    out = np.where((rows >= 0)[:, None], self._vectors[np.maximum(rows, 0)], 0.0)
    return out.reshape(ids.shape + (self._vectors.shape[1],))

  def reset_latency(self) -> None:
    """Starts the per-stage latency accounting afresh (e.g. after a compiling first call)."""
    self.latency_ms = {s: 0.0 for s in STAGES}
    self.queries_seen = 0

  def mean_latency_ms(self) -> dict[str, float]:
    """Mean wall time per query of each stage so far."""
    n = max(self.queries_seen, 1)
    return {s: v / n for s, v in self.latency_ms.items()}

