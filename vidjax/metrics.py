"""Retrieval metrics, each a pure NumPy function of scores and ranks.

CVR (../shared/papers/cast.txt §3.1 "Metrics"): every query ranks its own candidate pool
(1 GT + 9 negatives in the paper's protocol) and we report

* Acc       Recall@1 in %;
* MnR       mean 1-based rank of the ground truth;
* State Acc % of queries whose GT scores strictly above every one of its state negatives;
* Ident Acc % of queries whose GT scores strictly above every one of its identity negatives.

Queries without a negative of a type are left out of that diagnostic's denominator (its count is
returned as ``n_state`` / ``n_ident``; the value is NaN when no query qualifies).

Ties are resolved pessimistically everywhere: the rank of the GT is the number of candidates
whose score is >= the GT score, so a model that gives every candidate the same score gets rank C,
not 1, and a tie with a hard negative is a diagnostic failure. This makes constant or degenerate
scorers look as bad as they are.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

# Negative-type codes of a candidate pool (the `neg_types` array).
GT = 0
STATE = 1
IDENTITY = 2
EASY = 3


def _check_scores(scores, target_index):
  scores = np.asarray(scores)
  target_index = np.asarray(target_index)
  if scores.ndim != 2:
    raise ValueError(f"scores must be [Q, C], got shape {scores.shape}")
  if target_index.shape != (scores.shape[0],):
    raise ValueError(f"target_index must be [Q] = ({scores.shape[0]},), got {target_index.shape}")
  if target_index.size and (target_index.min() < 0 or target_index.max() >= scores.shape[1]):
    raise ValueError(f"target_index values must lie in [0, {scores.shape[1]}), got range "
                     f"[{target_index.min()}, {target_index.max()}]")
  return scores.astype(np.float64), target_index.astype(np.int64)


def rank_of_target(scores: np.ndarray, target_index: np.ndarray) -> np.ndarray:
  """1-based rank of each query's target among its candidates, ties pessimistic.

  Args:
    scores: [Q, C] higher = better.
    target_index: [Q] column of the target.

  Returns:
    [Q] int64 ranks in [1, C]: the number of candidates scoring >= the target.
  """
  scores, target_index = _check_scores(scores, target_index)
  gt = np.take_along_axis(scores, target_index[:, None], axis=1)
  return np.sum(scores >= gt, axis=1).astype(np.int64)


def recall_at_k(scores: np.ndarray, target_index: np.ndarray,
                ks: Sequence[int] = (1, 5, 10)) -> dict[str, float]:
  """Recall@K in %: [Q, C], [Q] -> {"R@k": % of queries whose target rank <= k}."""
  ranks = rank_of_target(scores, target_index)
  return {f"R@{k}": float(100.0 * np.mean(ranks <= k)) if ranks.size else float("nan")
          for k in ks}


def _beats_all(scores, gt, neg_types, code):
  """Per query: (has a negative of `code`, GT strictly above all of them)."""
  is_type = neg_types == code
  has = is_type.any(axis=1)
  best_neg = np.max(np.where(is_type, scores, -np.inf), axis=1)
  return has, gt[:, 0] > best_neg


def cvr_metrics(scores: np.ndarray, target_index: np.ndarray,
                neg_types: np.ndarray) -> dict[str, float]:
  """CVR metrics of §3.1.

  Args:
    scores: [Q, C] candidate scores, higher = better.
    target_index: [Q] column of the ground truth in each row.
    neg_types: [Q, C] int codes GT / STATE / IDENTITY / EASY; neg_types[q, target_index[q]]
      must be GT.

  Returns:
    {"acc": %, "mnr": mean rank, "state_acc": %, "ident_acc": %, "n": Q,
     "n_state": queries with >= 1 state negative, "n_ident": likewise for identity}.
  """
  scores, target_index = _check_scores(scores, target_index)
  neg_types = np.asarray(neg_types)
  if neg_types.shape != scores.shape:
    raise ValueError(f"neg_types must match scores {scores.shape}, got {neg_types.shape}")
  at_target = np.take_along_axis(neg_types, target_index[:, None], axis=1)[:, 0]
  if np.any(at_target != GT):
    bad = int(np.flatnonzero(at_target != GT)[0])
    raise ValueError(f"query {bad}: neg_types[{bad}, target_index={target_index[bad]}] is "
                     f"{at_target[bad]}, expected GT={GT}")
  ranks = rank_of_target(scores, target_index)
  gt = np.take_along_axis(scores, target_index[:, None], axis=1)
  has_s, ok_s = _beats_all(scores, gt, neg_types, STATE)
  has_i, ok_i = _beats_all(scores, gt, neg_types, IDENTITY)
  pct = lambda ok, has: float(100.0 * ok[has].mean()) if has.any() else float("nan")
  return {
      "acc": float(100.0 * np.mean(ranks == 1)) if ranks.size else float("nan"),
      "mnr": float(np.mean(ranks)) if ranks.size else float("nan"),
      "state_acc": pct(ok_s, has_s),
      "ident_acc": pct(ok_i, has_i),
      "n": int(ranks.size),
      "n_state": int(has_s.sum()),
      "n_ident": int(has_i.sum()),
  }
