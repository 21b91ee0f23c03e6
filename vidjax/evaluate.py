"""The Scorer protocol and the Consistent Video Retrieval (CVR) evaluator.

Implements the inference side of CAST (../shared/papers/cast.txt §2.4 "Plug-and-Play Inference",
eq. 10-13; §3.1 baselines and metrics; App. B ensemble-coefficient grid; §3.4 reranking of
generated candidates). Knows no model by name: predictors plug in as `apply_fn(params, ...)`.

A Scorer maps a batch of queries and each query's own candidate pool to scores::

    queries["text"]          [Q, D]     query text embeddings t_q
    queries["history"]       [Q, L, D]  visual context, left-padded (last real slot = v_{t-1})
    queries["history_mask"]  [Q, L]     1 = real clip
    candidates               [Q, C, D]  candidate clip embeddings v_c
    -> scores                [Q, C]     higher = better

The three CVR score components (eq. 10-12) are A = sim(t_q, v_c) (semantic), B = sim(v_{t-1}, v_c)
(visual continuity) and C = sim(v̂_t, v_c) (predicted next state); the Full Ensemble (eq. 13) is
S = A + w_v·B + w_p·C. Every scorer jits its per-batch work; `evaluate_cvr` feeds it fixed-size
chunks (the last one padded by repeating its final query) so each shape compiles once.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidjax import metrics

QUERY_KEYS = ("text", "history", "history_mask")
CVR_KEYS = QUERY_KEYS + ("candidates", "target_index", "neg_types")
DEFAULT_CHUNK = 256
# App. B grid: w_v in {0.0, ..., 0.5}, w_p in {0.2, ..., 1.5}, step 0.1.
W_V_GRID = np.round(np.arange(0, 0.51, 0.1), 2)
W_P_GRID = np.round(np.arange(0.2, 1.51, 0.1), 2)

# apply_fn(params, text [Q, D], history [Q, L, D], history_mask [Q, L]) -> v_hat [Q, D]
PredictFn = Callable[..., jax.Array]


class Scorer(Protocol):
  """Anything that scores each query's candidate pool (see module docstring for shapes)."""

  def score(self, queries: Mapping[str, np.ndarray], candidates: np.ndarray) -> np.ndarray:
    """{text [Q, D], history [Q, L, D], history_mask [Q, L]}, candidates [Q, C, D] -> [Q, C]."""
    ...


# ----------------------------------------------------------------------------- score components


def _unit(x):
  x = jnp.asarray(x, jnp.float32)
  sq = jnp.sum(x * x, axis=-1, keepdims=True)
  ok = sq > 1e-12
  return jnp.where(ok, x * jax.lax.rsqrt(jnp.where(ok, sq, 1.0)), 0.0)


def _sim(x, candidates):
  """[Q, D], [Q, C, D] -> [Q, C] cosine; zero vectors score 0."""
  return jnp.einsum("qd,qcd->qc", _unit(x), _unit(candidates))


def _last_context(history, history_mask):
  """[Q, L, D], [Q, L] -> [Q, D] the last real clip (0 when none)."""
  q, l, d = history.shape
  if l == 0:
    return jnp.zeros((q, d), jnp.float32)
  real = history_mask > 0
  last = l - 1 - jnp.argmax(real[:, ::-1], axis=1)
  v = jnp.take_along_axis(history, last[:, None, None], axis=1)[:, 0]
  return jnp.where(jnp.any(real, axis=1, keepdims=True), v, 0.0)


@jax.jit
def _semantic_visual(text, history, history_mask, candidates):
  return _sim(text, candidates), _sim(_last_context(history, history_mask), candidates)


@jax.jit
def _zero_shot(text, candidates):
  return _sim(text, candidates)


@functools.partial(jax.jit, static_argnums=0)
def _predictor_components(apply_fn, params, text, history, history_mask, candidates):
  a, b = _semantic_visual(text, history, history_mask, candidates)
  v_hat = apply_fn(params, text, history, history_mask)
  return a, b, _sim(v_hat, candidates)


@functools.partial(jax.jit, static_argnums=0)
def _apply_scores(apply_fn, params, text, history, history_mask, candidates):
  return apply_fn(params, text, history, history_mask, candidates).astype(jnp.float32)


def _unpack(queries: Mapping[str, np.ndarray], candidates: np.ndarray):
  missing = [k for k in QUERY_KEYS if k not in queries]
  if missing:
    raise KeyError(f"queries lack {missing}; a CVR query batch needs {list(QUERY_KEYS)}")
  text, history, mask = (np.asarray(queries[k]) for k in QUERY_KEYS)
  candidates = np.asarray(candidates)
  q = text.shape[0]
  if (text.ndim != 2 or history.ndim != 3 or mask.shape != history.shape[:2]
      or candidates.ndim != 3 or history.shape[0] != q or candidates.shape[0] != q):
    raise ValueError(
        "expected text [Q, D], history [Q, L, D], history_mask [Q, L], candidates [Q, C, D]; got "
        f"text {text.shape}, history {history.shape}, history_mask {mask.shape}, "
        f"candidates {candidates.shape}")
  return text, history, mask, candidates


# ----------------------------------------------------------------------------- scorers


@dataclasses.dataclass(frozen=True)
class ZeroShotScorer:
  """Zero-Shot baseline (§3.1 (i)): S = A = sim(t_q, v_c), context-free."""

  def score(self, queries, candidates):
    text, _, _, candidates = _unpack(queries, candidates)
    return np.asarray(_zero_shot(text, candidates))


@dataclasses.dataclass(frozen=True)
class LateFusionHeuristicScorer:
  """Late Fusion (Heuristic) (§3.1 (ii)): S = A + α·B, α fixed.

  The paper does not report α; the default 1.0 weighs semantic and visual evidence equally.
  """
  alpha: float = 1.0

  def score(self, queries, candidates):
    a, b = _semantic_visual(*_unpack(queries, candidates))
    return np.asarray(a + self.alpha * b)


@dataclasses.dataclass(frozen=True)
class EmbeddingPredictorScorer:
  """Scores with a next-state predictor (CAST, EarlyFusion): S = C = sim(v̂_t, v_c) (eq. 12).

  Attributes:
    apply_fn: `(params, text [Q, D], history [Q, L, D], history_mask [Q, L]) -> v_hat [Q, D]`,
      e.g. `CAST(dim).apply` (deterministic by default). Must be hashable: it is a static jit
      argument, so keep passing the same function to reuse compilations.
    params: the variables passed to `apply_fn`.
  """
  apply_fn: PredictFn
  params: Any

  def components(self, queries, candidates) -> dict[str, np.ndarray]:
    """{"A", "B", "C"} each [Q, C] (eq. 10-12)."""
    text, history, mask, candidates = _unpack(queries, candidates)
    a, b, c = _predictor_components(self.apply_fn, self.params, text, history, mask, candidates)
    return {"A": np.asarray(a), "B": np.asarray(b), "C": np.asarray(c)}

  def score(self, queries, candidates):
    return self.components(queries, candidates)["C"]


@dataclasses.dataclass(frozen=True)
class LateFusionLearnedScorer:
  """Late Fusion (Learned) (§3.1 (iii)), or any model that scores candidates itself.

  Attributes:
    apply_fn: `(params, text, history, history_mask, candidates [Q, C, D]) -> [Q, C]`, e.g.
      `functools.partial(LateFusionLearned(dim).apply, method="score")` built once and reused.
    params: the variables passed to `apply_fn`.
  """
  apply_fn: Callable[..., jax.Array]
  params: Any

  def score(self, queries, candidates):
    text, history, mask, candidates = _unpack(queries, candidates)
    return np.asarray(_apply_scores(self.apply_fn, self.params, text, history, mask, candidates))


@dataclasses.dataclass(frozen=True)
class EnsembleScorer:
  """Full Ensemble (eq. 13): S = A + w_v·B + w_p·C, with C from `predictor`.

  w_v = 0 gives the Semantic Ensemble (A + C) of Table 5.
  """
  predictor: EmbeddingPredictorScorer
  w_v: float
  w_p: float

  def components(self, queries, candidates) -> dict[str, np.ndarray]:
    """{"A", "B", "C"} each [Q, C] (eq. 10-12)."""
    return self.predictor.components(queries, candidates)

  def score(self, queries, candidates):
    c = self.components(queries, candidates)
    return c["A"] + self.w_v * c["B"] + self.w_p * c["C"]


# ----------------------------------------------------------------------------- evaluation


def _check_arrays(arrays: Mapping[str, np.ndarray]):
  missing = [k for k in CVR_KEYS if k not in arrays]
  if missing:
    raise KeyError(f"CVR arrays lack {missing}; expected keys {list(CVR_KEYS)}")
  q, c = np.shape(arrays["candidates"])[:2]
  for key, shape in (("target_index", (q,)), ("neg_types", (q, c))):
    if np.shape(arrays[key]) != shape:
      raise ValueError(f"CVR arrays[{key!r}] must have shape {shape} (candidates are "
                       f"{np.shape(arrays['candidates'])}), got {np.shape(arrays[key])}")


def chunked(fn: Callable[[dict, np.ndarray], Any], queries: Mapping[str, np.ndarray],
            candidates: np.ndarray, chunk: int = DEFAULT_CHUNK):
  """Runs `fn(queries_chunk, candidates_chunk)` over fixed-size chunks of the Q axis.

  Every chunk has exactly `chunk` rows (the last is padded by repeating its final query, and the
  padded rows are dropped), so a jitted `fn` compiles once whatever Q is.

  Args:
    fn: returns an array [chunk, ...] or a dict of such arrays.
    queries: {text [Q, D], history [Q, L, D], history_mask [Q, L]}.
    candidates: [Q, C, D].
    chunk: rows per call (>= 1).

  Returns:
    fn's output for all Q rows (array or dict), concatenated in order.
  """
  if chunk < 1:
    raise ValueError(f"chunk must be >= 1, got {chunk}")
  text, history, mask, candidates = _unpack(queries, candidates)
  q = text.shape[0]
  if q == 0:
    raise ValueError("cannot score an empty query set (Q = 0)")
  outs = []
  for start in range(0, q, chunk):
    stop = min(start + chunk, q)
    idx = np.minimum(np.arange(start, start + chunk), q - 1)  # pad by repeating the last row
    part = {"text": text[idx], "history": history[idx], "history_mask": mask[idx]}
    outs.append((fn(part, candidates[idx]), stop - start))
  if isinstance(outs[0][0], Mapping):
    return {k: np.concatenate([np.asarray(o[k])[:n] for o, n in outs]) for k in outs[0][0]}
  return np.concatenate([np.asarray(o)[:n] for o, n in outs])


def _queries(arrays):
  return {k: arrays[k] for k in QUERY_KEYS}


def evaluate_cvr(scorer: Scorer, arrays: Mapping[str, np.ndarray],
                 chunk: int = DEFAULT_CHUNK) -> dict[str, float]:
  """CVR evaluation (§3.1) of any Scorer.

  Args:
    scorer: a `Scorer`.
    arrays: {text [Q, D], history [Q, L, D], history_mask [Q, L], candidates [Q, C, D],
      target_index [Q], neg_types [Q, C] (metrics.GT / STATE / IDENTITY / EASY)}.
    chunk: queries per scorer call.

  Returns:
    `metrics.cvr_metrics` of the scores: acc, mnr, state_acc, ident_acc (+ counts).
  """
  _check_arrays(arrays)
  scores = chunked(scorer.score, _queries(arrays), arrays["candidates"], chunk)
  return metrics.cvr_metrics(scores, arrays["target_index"], arrays["neg_types"])


def score_components(predictor: EmbeddingPredictorScorer, arrays: Mapping[str, np.ndarray],
                     chunk: int = DEFAULT_CHUNK) -> dict[str, np.ndarray]:
  """The eq. 10-12 components over a whole benchmark: {"A", "B", "C"} each [Q, C].

  Feed them (on the held-out subset) to `select_ensemble_weights`.
  """
  _check_arrays(arrays)
  return chunked(predictor.components, _queries(arrays), arrays["candidates"], chunk)


def select_ensemble_weights(A: np.ndarray, B: np.ndarray, C: np.ndarray,
                            target_index: np.ndarray,
                            w_v_grid: Sequence[float] = W_V_GRID,
                            w_p_grid: Sequence[float] = W_P_GRID):
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
                     predictor_apply: PredictFn, params: Any, w_v: float, w_p: float):
  """§3.4 reranking of K generated continuations of one prompt.

  Args:
    text: [D] instruction embedding.
    context: [L, D] visual context (all real; the last row is v_{t-1}). L may be 0.
    candidates: [K, D] embeddings of the generated candidate videos.
    predictor_apply, params: a next-state predictor as in `EmbeddingPredictorScorer`.
    w_v, w_p: Full-Ensemble coefficients (selected on retrieval, §3.4 reuses them).

  Returns:
    {"text_only": [K] candidate indices best-first by A (Standard Text Match),
     "cast": [K] indices best-first by S = A + w_v·B + w_p·C (CAST Reranking),
     "scores": {"A", "B", "C", "S"} each [K]}. Ties keep the generation order.
  """
  text, context, candidates = (np.asarray(x, np.float32) for x in (text, context, candidates))
  if text.ndim != 1 or context.ndim != 2 or candidates.ndim != 2:
    raise ValueError(f"expected text [D], context [L, D], candidates [K, D]; got {text.shape}, "
                     f"{context.shape}, {candidates.shape}")
  queries = {"text": text[None], "history": context[None],
             "history_mask": np.ones((1, context.shape[0]), np.float32)}
  comp = EmbeddingPredictorScorer(predictor_apply, params).components(queries, candidates[None])
  scores = {k: v[0] for k, v in comp.items()}
  scores["S"] = scores["A"] + w_v * scores["B"] + w_p * scores["C"]
  order = lambda s: np.argsort(-s, kind="stable")
  return {"text_only": order(scores["A"]), "cast": order(scores["S"]), "scores": scores}


# ----------------------------------------------------------------------------- tables

_HEADERS = {"acc": "Acc.", "mnr": "MnR", "state_acc": "State Acc.", "ident_acc": "Ident. Acc."}


def format_table(rows: Mapping[str, Mapping[str, float]], title: str, synthetic: bool,
                 columns: Optional[Sequence[str]] = None) -> str:
  """Plain-text results table shaped like the paper's Tables 2 / 4 / 5.

  Args:
    rows: {method: {metric: value}}, in display order.
    title: first line of the table.
    synthetic: when true the title line says SYNTHETIC, so synthetic-world numbers are never
      mistaken for the paper's.
    columns: metric keys to show; default: acc, mnr, state_acc, ident_acc when present, else
      every key in order of first appearance. Missing values print as "-".

  Returns:
    the table as one string (no trailing newline).
  """
  if columns is None:
    seen = list(dict.fromkeys(k for r in rows.values() for k in r))
    columns = [k for k in _HEADERS if k in seen] or seen
  head = ["Method"] + [_HEADERS.get(c, c) for c in columns]

  def cell(v):
    if v is None:
      return "-"
    if isinstance(v, (float, np.floating)):
      return "nan" if math.isnan(v) else f"{v:.2f}"
    return str(v)

  body = [[str(m)] + [cell(r.get(c)) for c in columns] for m, r in rows.items()]
  widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
  fmt = lambda cells: " | ".join(
      c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
  line = "-+-".join("-" * w for w in widths)
  if synthetic:
    title = f"SYNTHETIC DATA: {title} (demonstrates mechanisms; not the paper's numbers)"
  return "\n".join([title, fmt(head), line] + [fmt(r) for r in body])
