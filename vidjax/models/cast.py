"""CAST: Context-Aware State Transition adapter, and the CVR baselines it is compared to.

Implements the CAST paper (../shared/papers/cast.txt): the adapter of §2.3 with the exact layer
specification of Appendix B / Table 10, and the baselines of §3.1 / Table 2 / Table 4:

* `CAST` — v̂_t = Norm(v_{t-1} + Δ_cond + Δ_ctx) (eq. 3-5, Table 10).
* `EarlyFusion` — an MLP over the concatenated text and context features, predicting the target
  directly (Table 4 "Direct") or as a residual update of v_{t-1} (Table 4 "Residual").
* `LateFusionLearned` — per-query learned weights over the semantic score A = sim(q, c) and the
  visual-continuity score B = sim(v_{t-1}, c); it scores candidates (`score`) instead of predicting
  an embedding.
* `zero_shot_scores` / `late_fusion_heuristic_scores` — the parameter-free baselines (Zero-Shot
  and Late Fusion (Heuristic), S = A + α·B), plain functions of arrays.

All modules share one call convention, arrays in / arrays out (no files, no loops)::

    text         [B, D]     query step-text embedding q_t (frozen backbone)
    history      [B, L, D]  visual context H_t, LEFT-padded: the last real slot is v_{t-1}
    history_mask [B, L]     1 = real clip, 0 = padding
    -> v_hat     [B, D]     float32, unit norm

L may be 0 (or a row may be fully masked): then v_{t-1} = 0 and the attention output is 0, which
is the context-agnostic L = 0 point of the paper's Figure 6 sweep. Every input is L2-normalised
inside the model with a safe norm, so zero padding stays zero and never produces NaN.

`dtype` is the computation dtype (e.g. ``jnp.bfloat16``); parameters are always float32
(`param_dtype`) and outputs are float32.
"""
from __future__ import annotations

from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidjax.ops import cosine, l2_normalize

Dtype = Any

# Late Fusion (Heuristic): S = A + α·B. The paper (§3.1) does not report α; 1.0 weighs semantic
# and visual evidence equally, the only choice that favours neither without tuning.
DEFAULT_HEURISTIC_ALPHA = 1.0


def last_context(history: jax.Array, history_mask: jax.Array) -> jax.Array:
  """The anchor state v_{t-1}: the last real clip of each history row.

  Args:
    history: [B, L, D] context clips (any padding side; left padding is the convention).
    history_mask: [B, L], nonzero = real clip.

  Returns:
    [B, D] the last real clip of each row, 0 for rows with no real clip (or L = 0).
  """
  b, l, d = history.shape
  if l == 0:
    return jnp.zeros((b, d), history.dtype)
  real = history_mask > 0
  # Index of the last real slot, found from the right so any padding side works.
  last = l - 1 - jnp.argmax(real[:, ::-1], axis=1)
  v = jnp.take_along_axis(history, last[:, None, None], axis=1)[:, 0]
  return jnp.where(jnp.any(real, axis=1, keepdims=True), v, 0)


def masked_mean(history: jax.Array, history_mask: jax.Array) -> jax.Array:
  """Mean of the real clips of each row: [B, L, D], [B, L] -> [B, D] (0 for empty rows)."""
  m = (history_mask > 0).astype(history.dtype)[..., None]
  total = jnp.sum(history * m, axis=1)
  return total / jnp.maximum(jnp.sum(m, axis=1), 1.0)


def zero_shot_scores(text: jax.Array, candidates: jax.Array) -> jax.Array:
  """Zero-Shot baseline (§3.1 (i)), A = sim(q, c): [B, D], [B, C, D] -> [B, C]."""
  return cosine(text, candidates)


def late_fusion_heuristic_scores(text: jax.Array, history: jax.Array, history_mask: jax.Array,
                                 candidates: jax.Array,
                                 alpha: float = DEFAULT_HEURISTIC_ALPHA) -> jax.Array:
  """Late Fusion (Heuristic) (§3.1 (ii)): S = sim(q, c) + α·sim(v_{t-1}, c).

  Args:
    text: [B, D]; history: [B, L, D]; history_mask: [B, L]; candidates: [B, C, D].
    alpha: fixed weight of visual continuity (see `DEFAULT_HEURISTIC_ALPHA`).

  Returns:
    [B, C] scores.
  """
  v_prev = last_context(history, history_mask)
  return cosine(text, candidates) + alpha * cosine(v_prev, candidates)


def _prepare(text, history, history_mask):
  """Normalises the inputs and gives an empty history one masked slot.

  Returns (q [B, D], h [B, L', D], mask [B, L'] bool, v_prev [B, D], has_ctx [B, 1]), float32,
  L' = max(L, 1). The padded slot keeps every shape non-empty so that params created at any L
  serve every L.
  """
  if text.ndim != 2 or history.ndim != 3 or history_mask.shape != history.shape[:2]:
    raise ValueError(
        "CAST inputs must be text [B, D], history [B, L, D], history_mask [B, L]; got "
        f"text {text.shape}, history {history.shape}, history_mask {history_mask.shape}")
  if history.shape[0] != text.shape[0] or history.shape[2] != text.shape[1]:
    raise ValueError(f"text {text.shape} and history {history.shape} disagree on B or D")
  q = l2_normalize(text)
  h = l2_normalize(history)
  mask = history_mask > 0
  if h.shape[1] == 0:
    h = jnp.zeros((h.shape[0], 1, h.shape[2]), h.dtype)
    mask = jnp.zeros((h.shape[0], 1), bool)
  h = jnp.where(mask[..., None], h, 0.0)  # zero padding whatever the caller padded with
  v_prev = last_context(h, mask)
  has_ctx = jnp.any(mask, axis=1, keepdims=True)
  return q, h, mask, v_prev, has_ctx


def _flat_init(init, n_in: int):
  """DenseGeneral's init: `init` on the flat (prod(in), prod(out)) matrix, reshaped (same values)."""
  def wrapped(rng, shape, dtype=jnp.float32):
    flat = (int(np.prod(shape[:n_in])), int(np.prod(shape[n_in:])))
    return jnp.reshape(init(rng, flat, dtype), shape)
  return wrapped


class _KernelBias(nn.Module):
  """The kernel and bias of one `nn.DenseGeneral` (same names, shapes and init), used by hand."""
  kernel_shape: tuple[int, ...]
  n_in: int
  kernel_init: Any = nn.linear.default_kernel_init

  @nn.compact
  def __call__(self):
    kernel = self.param("kernel", _flat_init(self.kernel_init, self.n_in), self.kernel_shape, jnp.float32)
    bias = self.param("bias", nn.initializers.zeros, self.kernel_shape[self.n_in:], jnp.float32)
    return kernel, bias


class SingleQueryAttention(nn.Module):
  """Multi-head attention of ONE query over L keys/values, computed without projecting every key.

  The same function and parameters (names, shapes, init) as `nn.MultiHeadDotProductAttention` with a
  length-1 query (query/key/value kernels [d, H, K], out kernel [H, K, d]), reassociated for a single
  query: the key projection is applied to the query side (logits_h = (W_k,h^T q_h) . x_l + q_h . b_k,h)
  and the value projection after the attention-weighted sum (sum_l a_l (W_v,h x_l + b_v,h) =
  W_v,h (sum_l a_l x_l) + b_v,h). This costs O(B·H·L·d + B·d²) instead of O(B·L·d²): CAST's
  attention over L = 5 history clips does about a third of the train step's FLOPs less.

  Rows whose mask has no real slot attend uniformly (as the library layer does); CAST zeroes them.
  """
  num_heads: int
  features: int
  dtype: Dtype = jnp.float32
  out_kernel_init: Any = nn.linear.default_kernel_init

  @nn.compact
  def __call__(self, query: jax.Array, kv: jax.Array, mask: jax.Array) -> jax.Array:
    """query [B, d], kv [B, L, d], mask [B, L] bool -> [B, d]."""
    d, h = self.features, self.num_heads
    k = d // h
    wq, bq = _KernelBias((query.shape[-1], h, k), 1, name="query")()
    wk, bk = _KernelBias((kv.shape[-1], h, k), 1, name="key")()
    wv, bv = _KernelBias((kv.shape[-1], h, k), 1, name="value")()
    wo, bo = _KernelBias((h, k, d), 2, kernel_init=self.out_kernel_init, name="out")()
    c = lambda x: jnp.asarray(x, self.dtype)  # noqa: E731
    query, kv = c(query), c(kv)
    q = (jnp.einsum("bd,dhk->bhk", query, c(wq)) + c(bq)) / jnp.sqrt(k).astype(self.dtype)
    logits = jnp.einsum("bhd,bld->bhl", jnp.einsum("bhk,dhk->bhd", q, c(wk)), kv)
    logits = logits + jnp.einsum("bhk,hk->bh", q, c(bk))[..., None]
    logits = jnp.where(mask[:, None, :], logits, jnp.finfo(logits.dtype).min)
    weights = jax.nn.softmax(logits, axis=-1)
    mixed = jnp.einsum("bhl,bld->bhd", weights, kv)
    values = jnp.einsum("bhd,dhk->bhk", mixed, c(wv)) + c(bv)
    return jnp.einsum("bhk,hkd->bd", values, c(wo)) + c(bo)


def _residual_init(std: Optional[float]):
  return nn.linear.default_kernel_init if std is None else nn.initializers.normal(std)


class CAST(nn.Module):
  """The CAST adapter (§2.3, Appendix B Table 10).

  Path 1 (Δ_cond, eq. 4): [q; v_{t-1}] → Linear(2d, 2d) → LayerNorm(2d) → ReLU →
  Dropout → Linear(2d, d).

  Path 2 (Δ_ctx, eq. 5): q' = W_q q, H' = W_h H (Linear(d, d) each); one multi-head cross-attention
  layer (`num_heads` heads, query q', keys/values H', with its own in/out projections as in a
  standard multi-head attention layer) with a key-padding mask; then the "residual MLP" of
  Table 10, which we read as a pre-LN residual block around the attended feature a:
      Δ_ctx = a + Linear(d, d)(ReLU(Linear(d, d)(LayerNorm(a)))).
  Rows with no real context get a = 0 (the masked softmax would otherwise spread uniformly over
  padding); Δ_ctx then reduces to the MLP's constant response to 0.

  Output: v̂ = Norm(v_{t-1} + Δ_cond + Δ_ctx). No gating. Dropout applies to Path 1 only, as in
  Table 10; the attention itself has none.

  Attributes:
    dim: embedding dimension d of the frozen backbone (must be divisible by num_heads).
    num_heads: cross-attention heads (8 in the paper).
    dropout_rate: Path-1 dropout (0.1 in the paper).
    residual_init_std: std of the (normal) init of the layers that end each residual branch (the
      last Linear of each path and the attention's output projection), so the untrained adapter
      predicts v̂ ≈ v_{t-1} and learns the transition as a departure from the anchor state (as
      ReZero / LoRA-style adapters do). Not exactly 0: with no context (L = 0) there is no anchor and
      an exactly-zero Δ would have no gradient through the normalization. The paper does not give
      an initialization; with Flax's default (None) the random Δ is several times larger than the
      unit-norm anchor and the paper's short schedules spend most of their steps undoing it.
    dtype: computation dtype; params stay float32.
  """
  dim: int
  num_heads: int = 8
  dropout_rate: float = 0.1
  residual_init_std: Optional[float] = 1e-3
  dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, text: jax.Array, history: jax.Array, history_mask: jax.Array,
               deterministic: bool = True) -> jax.Array:
    """text [B, D], history [B, L, D], history_mask [B, L] -> v_hat [B, D] float32."""
    d = self.dim
    if d % self.num_heads:
      raise ValueError(f"CAST dim={d} must be divisible by num_heads={self.num_heads}")
    if text.shape[-1] != d:
      raise ValueError(f"CAST(dim={d}) got text of width {text.shape[-1]}")
    q, h, mask, v_prev, has_ctx = _prepare(text, history, history_mask)
    dense = lambda n, name, init=nn.linear.default_kernel_init: nn.Dense(  # noqa: E731
        n, dtype=self.dtype, param_dtype=jnp.float32, kernel_init=init, name=name)
    out_init = _residual_init(self.residual_init_std)
    layer_norm = lambda name: nn.LayerNorm(dtype=self.dtype, param_dtype=jnp.float32, name=name)

    # Path 1: instruction-conditioned state transition.
    x = jnp.concatenate([q, v_prev], axis=-1).astype(self.dtype)
    x = dense(2 * d, "cond_fc1")(x)
    x = nn.relu(layer_norm("cond_ln")(x))
    x = nn.Dropout(self.dropout_rate, deterministic=deterministic)(x)
    delta_cond = dense(d, "cond_fc2", out_init)(x)

    # Path 2: temporal context attention.
    q_proj = dense(d, "ctx_query_proj")(q.astype(self.dtype))
    h_proj = dense(d, "ctx_history_proj")(h.astype(self.dtype))
    attn = SingleQueryAttention(self.num_heads, d, dtype=self.dtype, out_kernel_init=out_init,
                                name="ctx_attention")(q_proj, h_proj, mask)
    attn = jnp.where(has_ctx, attn, 0)
    y = layer_norm("ctx_ln")(attn)
    y = dense(d, "ctx_fc2", out_init)(nn.relu(dense(d, "ctx_fc1")(y)))
    delta_ctx = attn + y

    out = v_prev + delta_cond.astype(jnp.float32) + delta_ctx.astype(jnp.float32)
    return l2_normalize(out)


class EarlyFusion(nn.Module):
  """Early Fusion baseline (§3.1 (iv), Table 4 rows 1-2).

  An MLP over [q; v_{t-1}; masked mean of H] (3d) with the same shape as CAST's Path 1 so that the
  ablation isolates the dual-path design: Linear(3d, 2d) → LayerNorm → ReLU → Dropout →
  Linear(2d, d). `residual=False`: v̂ = Norm(out) (Table 4 "Direct"); `residual=True`:
  v̂ = Norm(v_{t-1} + out) (Table 4 "Residual").
  """
  dim: int
  residual: bool
  dropout_rate: float = 0.1
  residual_init_std: Optional[float] = 1e-3  # residual variant only: start at v̂ ≈ v_{t-1}, as CAST
  dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, text: jax.Array, history: jax.Array, history_mask: jax.Array,
               deterministic: bool = True) -> jax.Array:
    """text [B, D], history [B, L, D], history_mask [B, L] -> v_hat [B, D] float32."""
    d = self.dim
    if text.shape[-1] != d:
      raise ValueError(f"EarlyFusion(dim={d}) got text of width {text.shape[-1]}")
    q, h, mask, v_prev, _ = _prepare(text, history, history_mask)
    x = jnp.concatenate([q, v_prev, masked_mean(h, mask)], axis=-1).astype(self.dtype)
    x = nn.Dense(2 * d, dtype=self.dtype, param_dtype=jnp.float32, name="fc1")(x)
    x = nn.relu(nn.LayerNorm(dtype=self.dtype, param_dtype=jnp.float32, name="ln")(x))
    x = nn.Dropout(self.dropout_rate, deterministic=deterministic)(x)
    out = nn.Dense(d, dtype=self.dtype, param_dtype=jnp.float32, name="fc2",
                   kernel_init=_residual_init(self.residual_init_std if self.residual else None))(x)
    out = out.astype(jnp.float32)
    return l2_normalize(v_prev + out if self.residual else out)


class LateFusionLearned(nn.Module):
  """Late Fusion (Learned) baseline (§3.1 (iii)).

  Form (the paper gives none): per-query weights (w_a, w_b) = softplus(MLP([q; v_{t-1}])) with
  MLP = Linear(2d, hidden) → ReLU → Linear(hidden, 2), and S(q, c) = w_a·A + w_b·B with
  A = sim(q, c), B = sim(v_{t-1}, c). Softplus keeps both weights positive, so the model can only
  re-weight the two existing similarity signals — the "scalar aggregation" the paper contrasts
  with CAST's vector transition. Train it with `losses.type_aware_contrastive` on its scores.

  `__call__` returns the weights [B, 2]; `score` returns candidate scores [B, C].
  """
  dim: int
  hidden: int = 64
  dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, text: jax.Array, history: jax.Array, history_mask: jax.Array,
               deterministic: bool = True) -> jax.Array:
    """text [B, D], history [B, L, D], history_mask [B, L] -> weights [B, 2] (w_a, w_b) float32."""
    del deterministic  # no dropout; kept for the shared call signature
    if text.shape[-1] != self.dim:
      raise ValueError(f"LateFusionLearned(dim={self.dim}) got text of width {text.shape[-1]}")
    q, _, _, v_prev, _ = _prepare(text, history, history_mask)
    x = jnp.concatenate([q, v_prev], axis=-1).astype(self.dtype)
    x = nn.relu(nn.Dense(self.hidden, dtype=self.dtype, param_dtype=jnp.float32, name="fc1")(x))
    x = nn.Dense(2, dtype=self.dtype, param_dtype=jnp.float32, name="fc2")(x)
    return nn.softplus(x.astype(jnp.float32))

  def score(self, text: jax.Array, history: jax.Array, history_mask: jax.Array,
            candidates: jax.Array, deterministic: bool = True) -> jax.Array:
    """text [B, D], history [B, L, D], history_mask [B, L], candidates [B, C, D] or [C, D] -> [B, C]."""
    w = self(text, history, history_mask, deterministic)
    return late_fusion_learned_scores(w, text, last_context(history, history_mask), candidates)


def late_fusion_learned_scores(weights: jax.Array, text: jax.Array, v_prev: jax.Array,
                               candidates: jax.Array) -> jax.Array:
  """S = w_a·sim(q, c) + w_b·sim(v_{t-1}, c) (`LateFusionLearned`).

  Args:
    weights: [B, 2] (w_a, w_b) from `LateFusionLearned.__call__`.
    text: [B, D] query text q; v_prev: [B, D] anchor clip v_{t-1} (0 when there is none).
    candidates: [B, C, D] one pool per query, or [C, D] shared by every query (e.g. the in-batch
      positives of the contrastive loss).

  Returns:
    [B, C] scores.
  """
  return weights[:, :1] * cosine(text, candidates) + weights[:, 1:] * cosine(v_prev, candidates)
