"""Pixel oracles: which mechanism a rendered query needs (SYNTHETIC corpora; `release.corpus_summary` reads them).

An oracle knows exactly what a query describes: the noise-free frames of the scenes its caption names, drawn on a
black board (the board tint says nothing a caption says, so no oracle may read it). It scores each gallery clip by
how close its noise-free frames are, in one of two ways:

* `frame_mean_scores`: the distance between the mean frame of the query's content and the mean frame of the clip,
  what any model that pools frames by their mean before it compares (stage-1 pooling, meanP) can at best see;
* `aligned_scores`: the smallest distance between the query's frames and any window of the clip's frames at the
  same times (`windows` per clip), which sees order and which part of a clip a query names.

`decided` says, per query, whether an oracle puts the target strictly first (a tie with another clip is not a
decision). A query *needs* a mechanism when the frame-mean oracle does not decide it and the aligned one does.
Frames are pooled 4 x 4 spatially first (the oracles compare scenes of whole cells, 16 px each at the defaults).
"""
from __future__ import annotations

import numpy as np

POOL = 4
_TOL = 1e-6  # relative: a score within this of the best is a tie


def pooled(frames: np.ndarray) -> np.ndarray:
  """`[T, H, W, C]` uint8/float frames -> float32 `[T, (H/POOL) * (W/POOL) * C]`."""
  t, h, w, c = frames.shape
  x = np.asarray(frames, np.float32).reshape(t, h // POOL, POOL, w // POOL, POOL, c).mean(axis=(2, 4))
  return x.reshape(t, -1)


def _sq_dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """`[Q, D]`, `[V, D]` -> `[Q, V]` squared distances (clipped at 0)."""
  a = np.asarray(a, np.float64)
  b = np.asarray(b, np.float64)
  d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
  return np.maximum(d, 0.0)


def frame_mean_scores(queries: list[np.ndarray], clips: list[np.ndarray]) -> np.ndarray:
  """`[Q, V]`: minus the distance between mean frames (each item `[T_i, D]`, `pooled`)."""
  q = np.stack([x.mean(0) for x in queries])
  v = np.stack([x.mean(0) for x in clips])
  return -np.sqrt(_sq_dist(q, v))


def aligned_scores(queries: list[np.ndarray], clips: list[np.ndarray], window: int) -> np.ndarray:
  """`[Q, V]`: minus the smallest distance between a query's `window` frames (every query is `[window, D]`) and a
  clip's frames `[k window, (k + 1) window)`, over its windows k (a query as long as the clip: the whole clip)."""
  q = np.stack([x.reshape(-1) for x in queries])
  out = np.full((len(queries), len(clips)), -np.inf)
  for j, clip in enumerate(clips):
    wins = clip[: len(clip) // window * window].reshape(len(clip) // window, -1)
    out[:, j] = -np.sqrt(_sq_dist(q, wins).min(axis=1))
  return out


def sequence_scores(queries: list[np.ndarray], clips: list[np.ndarray]) -> np.ndarray:
  """`[Q, V]`: minus the distance between a query's frames and a clip's frames at the same times (-inf where their
  lengths differ): the order-aware oracle."""
  out = np.full((len(queries), len(clips)), -np.inf)
  for length in {len(x) for x in queries} & {len(x) for x in clips}:
    qi = [i for i, x in enumerate(queries) if len(x) == length]
    vi = [j for j, x in enumerate(clips) if len(x) == length]
    d = _sq_dist(np.stack([queries[i].reshape(-1) for i in qi]), np.stack([clips[j].reshape(-1) for j in vi]))
    out[np.ix_(qi, vi)] = -np.sqrt(d)
  return out


def decided(scores: np.ndarray, targets: np.ndarray) -> np.ndarray:
  """bool `[Q]`: the target scores strictly above every other clip (more than a relative `_TOL` of the spread)."""
  scores = np.asarray(scores, np.float64)
  targets = np.asarray(targets)
  rows = np.arange(len(scores))
  best_other = np.where(np.arange(scores.shape[1])[None, :] == targets[:, None], -np.inf, scores).max(axis=1)
  scale = np.maximum(np.abs(np.where(np.isfinite(scores), scores, 0.0)).max(axis=1), 1.0)
  return scores[rows, targets] > best_other + _TOL * scale


def needs(mean_scores: np.ndarray, aligned: np.ndarray, targets: np.ndarray) -> dict:
  """{"queries", "frame_mean_r1", "aligned_r1", "share"}: the oracles' R@1 (%) and the share (%) of queries the
  aligned oracle decides and the frame-mean one does not (the queries the mechanism decides)."""
  m, a = decided(mean_scores, targets), decided(aligned, targets)
  n = len(targets)
  pct = lambda x: round(100.0 * float(np.sum(x)) / max(n, 1), 2)  # noqa: E731
  return {"queries": int(n), "frame_mean_r1": pct(m), "aligned_r1": pct(a), "share": pct(a & ~m)}
