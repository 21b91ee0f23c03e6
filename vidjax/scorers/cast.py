"""CAST's inference side as Scorers (CAST paper §2.4 "Plug-and-Play Inference", eq. 10-13; §3.1
baselines; App. B ensemble-coefficient grid; §3.4 reranking of generated candidates).

Built on the pure score functions of `vidjax.models.cast`; evaluated by the generic
`vidjax.evaluate.evaluate_cvr`. Every scorer takes a CVR batch::

    text          [Q, D]     query text embeddings t_q
    history       [Q, L, D]  visual context, left-padded (last real slot = v_{t-1})
    history_mask  [Q, L]     1 = real clip
    candidates    [Q, C, D]  candidate clip embeddings v_c
    -> scores     [Q, C]     higher = better

The three score components (eq. 10-12) are A = sim(t_q, v_c) (semantic), B = sim(v_{t-1}, v_c)
(visual continuity) and C = sim(v̂_t, v_c) (predicted next state); the Full Ensemble (eq. 13) is
S = A + w_v·B + w_p·C with (w_v, w_p) chosen on a held-out subset of the training split
(`select_ensemble_weights`). Each scorer jits its work once at construction (closing over the
model's apply function), so keep one scorer per trained model.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidjax import evaluate, metrics
from vidjax.models import cast as cast_models
from vidjax.ops import cosine

QUERY_KEYS = ("text", "history", "history_mask")
# The paper's Full-Ensemble grid (App. B, "Inference Details"), `select_ensemble_weights`' default; a run's grid
# is its config's (`eval.w_v_grid` / `eval.w_p_grid`, configs/cast/common.py: the same values).
W_V_GRID = tuple(round(0.1 * i, 1) for i in range(6))
W_P_GRID = tuple(round(0.2 + 0.1 * i, 1) for i in range(14))
# apply_fn(params, text [Q, D], history [Q, L, D], history_mask [Q, L]) -> v_hat [Q, D]
PredictFn = Callable[..., jax.Array]


def _inputs(batch: Mapping[str, Any]):
  missing = [k for k in QUERY_KEYS + ("candidates",) if k not in batch]
  if missing:
    raise KeyError(f"a CVR batch lacks {missing}; it needs {list(QUERY_KEYS) + ['candidates']}")
  text, history, mask, candidates = (batch[k] for k in QUERY_KEYS + ("candidates",))
  q = np.shape(text)[0]
  if (np.ndim(text) != 2 or np.ndim(history) != 3 or np.shape(mask) != np.shape(history)[:2]
      or np.ndim(candidates) != 3 or np.shape(history)[0] != q or np.shape(candidates)[0] != q):
    raise ValueError(
        "expected text [Q, D], history [Q, L, D], history_mask [Q, L], candidates [Q, C, D]; got "
        f"text {np.shape(text)}, history {np.shape(history)}, history_mask {np.shape(mask)}, "
        f"candidates {np.shape(candidates)}")
  return text, history, mask, candidates


class _CVRScorer:
  """Jits `fn(params, text, history, history_mask, candidates)` once; `score(batch)` checks shapes."""

  def __init__(self, fn: Callable[..., Any], params: Any = None):
    self.params = params
    self._fn = jax.jit(fn)

  def _run(self, batch):
    return self._fn(self.params, *_inputs(batch))

  def score(self, batch) -> np.ndarray:
    return np.asarray(self._run(batch), np.float32)


class ZeroShotScorer(_CVRScorer):
  """Zero-Shot baseline (§3.1 (i)): S = A = sim(t_q, v_c), context-free."""

  def __init__(self):
    super().__init__(lambda _, text, h, m, cands: cast_models.zero_shot_scores(text, cands))


class LateFusionHeuristicScorer(_CVRScorer):
  """Late Fusion (Heuristic) (§3.1 (ii)): S = A + α·B, α fixed (the paper reports none; 1.0)."""

  def __init__(self, alpha: float = cast_models.DEFAULT_HEURISTIC_ALPHA):
    self.alpha = alpha
    super().__init__(lambda _, text, h, m, cands: cast_models.late_fusion_heuristic_scores(
        text, h, m, cands, alpha))


class LateFusionLearnedScorer(_CVRScorer):
  """Late Fusion (Learned) (§3.1 (iii)), or any model that scores candidates itself.

  `apply_fn(params, text, history, history_mask, candidates [Q, C, D]) -> [Q, C]`, e.g.
  `lambda p, *a: model.apply({"params": p}, *a, method="score")`.
  """

  def __init__(self, apply_fn: Callable[..., jax.Array], params: Any):
    super().__init__(lambda p, *args: apply_fn(p, *args).astype(jnp.float32), params)


def _components(apply_fn, params, text, history, history_mask, candidates):
  v_prev = cast_models.last_context(jnp.asarray(history, jnp.float32), history_mask)
  v_hat = apply_fn(params, text, history, history_mask)
  return {"A": cosine(text, candidates), "B": cosine(v_prev, candidates), "C": cosine(v_hat, candidates)}


class PredictorScorer(_CVRScorer):
  """Scores with a next-state predictor (CAST, Early Fusion): S = C = sim(v̂_t, v_c) (eq. 12).

  `apply_fn(params, text [Q, D], history [Q, L, D], history_mask [Q, L]) -> v_hat [Q, D]`, e.g.
  `lambda p, *a: model.apply({"params": p}, *a)` (deterministic by default).
  """

  def __init__(self, apply_fn: PredictFn, params: Any):
    super().__init__(lambda p, *args: _components(apply_fn, p, *args), params)

  def components(self, batch) -> dict[str, np.ndarray]:
    """{"A", "B", "C"} each [Q, C] (eq. 10-12)."""
    return {k: np.asarray(v, np.float32) for k, v in self._run(batch).items()}

  def score(self, batch) -> np.ndarray:
    return self.components(batch)["C"]


class EnsembleScorer:
  """Full Ensemble (eq. 13): S = A + w_v·B + w_p·C, with C from `predictor`.

  w_v = 0 gives the Semantic Ensemble (A + C) of Table 5.
  """

  def __init__(self, predictor: PredictorScorer, w_v: float, w_p: float):
    self.predictor, self.w_v, self.w_p = predictor, w_v, w_p

  def components(self, batch) -> dict[str, np.ndarray]:
    return self.predictor.components(batch)

  def score(self, batch) -> np.ndarray:
    c = self.components(batch)
    return c["A"] + self.w_v * c["B"] + self.w_p * c["C"]


def score_components(predictor: PredictorScorer, arrays: Mapping[str, np.ndarray],
                     chunk: int = evaluate.DEFAULT_CHUNK) -> dict[str, np.ndarray]:
  """The eq. 10-12 components over a whole benchmark: {"A", "B", "C"} each [Q, C]."""
  inputs = {k: arrays[k] for k in QUERY_KEYS + ("candidates",)}
  return evaluate.chunked(predictor.components, inputs, chunk)


def select_ensemble_weights(A: np.ndarray, B: np.ndarray, C: np.ndarray, target_index: np.ndarray,
                            w_v_grid: Sequence[float] = W_V_GRID, w_p_grid: Sequence[float] = W_P_GRID):
  """Full-Ensemble coefficient selection (App. B "Inference Details").

  Grid search over S = A + w_v·B + w_p·C on a held-out subset of the TRAINING split (never the
  evaluation split). The winner has the highest Acc; ties go to the lower MnR, then to the first
  point in grid order (w_v outer loop, w_p inner loop).

  Args:
    A, B, C: [Q, C] score components on the held-out subset.
    target_index: [Q] GT column.
    w_v_grid, w_p_grid: candidate coefficients (default: the paper's grid).

  Returns:
    (w_v, w_p, table) with table a list of {"w_v", "w_p", "acc", "mnr"} in grid order.
  """
  A, B, C = (np.asarray(x, np.float64) for x in (A, B, C))
  if not A.shape == B.shape == C.shape:
    raise ValueError(f"A, B, C must share one shape [Q, C], got {A.shape}, {B.shape}, {C.shape}")
  if len(w_v_grid) == 0 or len(w_p_grid) == 0:
    raise ValueError("ensemble weight grids must be non-empty")
  table, best, best_key = [], None, None
  for w_v in w_v_grid:
    for w_p in w_p_grid:
      ranks = metrics.rank_of_target(A + w_v * B + w_p * C, target_index)
      # Integer counts compare exactly, unlike the derived percentages.
      key = (-int(np.sum(ranks == 1)), int(np.sum(ranks)))
      table.append({"w_v": float(w_v), "w_p": float(w_p),
                    "acc": float(100.0 * np.mean(ranks == 1)), "mnr": float(np.mean(ranks))})
      if best_key is None or key < best_key:
        best, best_key = (float(w_v), float(w_p)), key
  return best[0], best[1], table


def rerank_generated(text: np.ndarray, context: np.ndarray, candidates: np.ndarray,
                     predictor: PredictorScorer, w_v: float, w_p: float) -> dict:
  """§3.4 reranking of K generated continuations of one prompt.

  Args:
    text: [D] instruction embedding.
    context: [L, D] visual context (all real; the last row is v_{t-1}). L may be 0.
    candidates: [K, D] embeddings of the generated candidate videos.
    predictor: a trained next-state predictor.
    w_v, w_p: Full-Ensemble coefficients (selected on retrieval; §3.4 reuses them).

  Returns:
    {"text_only": [K] candidate indices best-first by A (Standard Text Match),
     "cast": [K] indices best-first by S = A + w_v·B + w_p·C (CAST Reranking),
     "scores": {"A", "B", "C", "S"} each [K]}. Ties keep the generation order.
  """
  text, context, candidates = (np.asarray(x, np.float32) for x in (text, context, candidates))
  if text.ndim != 1 or context.ndim != 2 or candidates.ndim != 2:
    raise ValueError(f"expected text [D], context [L, D], candidates [K, D]; got {text.shape}, "
                     f"{context.shape}, {candidates.shape}")
  batch = {"text": text[None], "history": context[None],
           "history_mask": np.ones((1, context.shape[0]), np.float32), "candidates": candidates[None]}
  scores = {k: v[0] for k, v in predictor.components(batch).items()}
  scores["S"] = scores["A"] + w_v * scores["B"] + w_p * scores["C"]
  order = lambda s: np.argsort(-s, kind="stable")  # noqa: E731
  return {"text_only": order(scores["A"]), "cast": order(scores["S"]), "scores": scores}
