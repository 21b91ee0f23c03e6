"""VideoPrism video encoder and LvT video-text model in Flax linen.

The frozen visual backbone of vidjax (ARCHITECTURE.md, "feature extraction"). It
implements the public VideoPrism v1 models (Zhao et al., "VideoPrism: A
Foundational Visual Encoder for Video Understanding", ICML 2024, Sec. 3.1 and
Fig. 2: the factorized space-time ViViT encoder; Sec. 3.2 stage 1: the
video-text contrastive "LvT" model) so that the official `.npz` checkpoints load
directly, with no conversion step:

* `FactorizedEncoder`: spatial transformer over 18x18 patches of every frame,
  then a temporal transformer per patch position. Returns `[B, T*N, D]` tokens,
  time-major (token index t*N + n).
* `FactorizedVideoCLIP` (LvT): the encoder above + a 2-layer auxiliary
  space-time transformer + a one-query attention pooler for the global video
  embedding, and a CoCa-style causal text encoder over SentencePiece ids with a
  CLS token appended last. Both embeddings are L2-normalized.

Module and parameter names are the checkpoint contract (`params/...` keys of the
official files, '/'-joined), so they are set explicitly. The exact computation
follows `shared/refs/videoprism_architecture.md`; the numbered pitfalls there
(LayerNorm gain 1 + scale, antialiased positional-embedding resize, logit cap
before masking, per-dim-scaled pooler queries of width 4D, CLS appended after
the padding) are the reasons for the less obvious lines below.

Dtypes: parameters are stored and created in `dtype` (float32); every parameter
is cast to `fprop_dtype` when used. Unlike the official code, the models cast
their floating inputs (frames, text paddings) to `fprop_dtype`, so a bfloat16
run needs no caller-side casts. Attention logits, softmax and the final L2
normalization are computed in float32.

Checkpoints: `param_shapes(model)` is the key/shape contract of the official
`.npz` files; `vidjax.checkpoints.load_videoprism` reads a file and checks every
key and shape against it (this module opens no files).
"""
from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidjax.ops import flatten_dict, l2_normalize
from vidjax.tokenizers.sentencepiece import C4_EN_SPM_PATH  # noqa: F401  (re-exported for configs)

Array = jax.Array
DType = Any

LN_EPSILON = 1e-6
PER_DIM_SCALE_CONSTANT = 1.442695041  # 1 / softplus(0): rho = 0 gives exactly 1/sqrt(dh).
TEXT_MAX_LEN = 64  # Text length of the public LvT models; their tokenizer is C4_EN_SPM_PATH.

CHECKPOINTS = {
    "videoprism_public_v1_base": "gs://videoprism/v1/flax_base_f16r288_repeated.npz",
    "videoprism_public_v1_large": "gs://videoprism/v1/flax_large_f8r288_repeated.npz",
    "videoprism_lvt_public_v1_base": "gs://videoprism/v1/flax_lvt_base_f16r288_repeated.npz",
    "videoprism_lvt_public_v1_large": "gs://videoprism/v1/flax_lvt_large_f8r288_repeated.npz",
}

_lecun = nn.initializers.lecun_normal()


def _large_negative(dtype: DType) -> float:
  return -0.7 * float(jnp.finfo(dtype).max)


def _cast(x: Array, dtype: DType) -> Array:
  # jnp, not x.astype: NumPy params (e.g. straight from an .npz) would promote with NumPy rules.
  return jnp.asarray(x, dtype)


def resize_pos_emb(table: Array, new_shape: tuple[int, ...]) -> Array:
  """Resizes a learned positional-embedding grid along its leading (non-feature) axes.

  Antialiased bilinear resize with half-pixel centres (`jax.image.resize`,
  `antialias=True`), as the official code does: downsampling widens the
  triangle kernel (16 -> 8 averages ~4 neighbours), upsampling is plain linear
  interpolation with edge clamping. The feature axis is untouched.

  Args:
    table: `[*grid, D]`, e.g. `[T0, D]` or `[16, 16, D]`.
    new_shape: target grid, e.g. `(T,)` or `(H/P, W/P)`.

  Returns:
    `[*new_shape, D]` in float32 (or table's dtype).
  """
  new_shape = tuple(int(s) for s in new_shape)
  if new_shape == tuple(table.shape[:-1]):
    return table
  return jax.image.resize(table, new_shape + (table.shape[-1],), method="bilinear",
                          antialias=True, precision=jax.lax.Precision.HIGHEST)


def sinusoidal_pos_emb(length: int, dim: int) -> Array:
  """Fixed sinusoidal positions `[length, dim]` (float32): sines in the first half, cosines in the second.

  Timescales 1 .. 1e4: omega_k = exp(-k * ln(1e4) / (K - 1)), K = dim // 2; an odd
  `dim` gets a zero last column.
  """
  num_timescales = dim // 2
  increment = jnp.float32(math.log(10_000.0)) / jnp.maximum(jnp.float32(num_timescales) - 1, 1)
  inv_timescales = jnp.exp(jnp.arange(num_timescales, dtype=jnp.float32) * -increment)
  scaled = jnp.arange(length, dtype=jnp.float32)[:, None] * inv_timescales[None, :]
  emb = jnp.concatenate([jnp.sin(scaled), jnp.cos(scaled)], axis=-1)
  return jnp.pad(emb, [(0, 0), (0, dim % 2)])


def patchify(frames: Array, patch_size: int) -> Array:
  """`[B', H, W, C]` -> `[B', (H/P)*(W/P), P*P*C]`; grid row-major, vector in (row, col, channel) order."""
  b, h, w, c = frames.shape
  m, n = h // patch_size, w // patch_size
  x = frames.reshape(b, m, patch_size, n, patch_size, c)
  x = x.transpose(0, 1, 3, 2, 4, 5)
  return x.reshape(b, m * n, patch_size * patch_size * c)


def attention_mask(paddings: Array, causal: bool) -> Array:
  """Boolean keep-mask from key paddings `[B, S]` (1 = pad).

  Returns `[B, 1, 1, S]` (keys only) or, when causal, `[B, 1, S, S]` where entry
  (t, s) is kept iff s <= t and neither t nor s is padded (the official merge of
  the padding and causal masks also masks padded queries).
  """
  keep = paddings < 0.5
  if not causal:
    return keep[:, None, None, :]
  s = paddings.shape[-1]
  lower = jnp.arange(s)[None, :] <= jnp.arange(s)[:, None]  # [t, s]
  return keep[:, None, None, :] & keep[:, None, :, None] & lower[None, None]


# ----------------------------------------------------------------------------- layers


class _Base(nn.Module):
  """Carries the parameter dtype (`dtype`) and the activation dtype (`fprop_dtype`)."""
  dtype: DType = jnp.float32
  fprop_dtype: DType = jnp.float32

  @nn.nowrap
  def _p(self, x: Array) -> Array:
    return _cast(x, self.fprop_dtype)


class LayerNorm(_Base):
  """LayerNorm with gain (1 + scale), eps 1e-6, two-pass variance, stats in the activation dtype.

  Params: `scale` [D] (a delta around 0), `bias` [D]. `[..., D] -> [..., D]`.
  """

  @nn.compact
  def __call__(self, x: Array) -> Array:
    d = x.shape[-1]
    scale = self.param("scale", nn.initializers.zeros_init(), (d,), self.dtype)
    bias = self.param("bias", nn.initializers.zeros_init(), (d,), self.dtype)
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + LN_EPSILON)
    return y * (1.0 + self._p(scale)) + self._p(bias)


class FeedForward(_Base):
  """Dense layer stored as `<name>/linear/{kernel, bias}`. `[..., Din] -> [..., output_dim]`."""
  output_dim: int = 0

  @nn.compact
  def __call__(self, x: Array) -> Array:
    return nn.Dense(self.output_dim, dtype=self.fprop_dtype, param_dtype=self.dtype,
                    name="linear")(x)


class AttentionProjection(_Base):
  """Multi-head projection with `w` [D, h, dh] for both directions.

  Input projection: `[..., D] -> [..., h, dh]` (bias [h, dh]). Output projection
  (`is_output_projection`): `[..., h, dh] -> [..., output_dim]` contracting over
  (h, dh) of the same [D, h, dh] layout (bias [D]).
  """
  num_heads: int = 1
  dim_per_head: int = 0
  output_dim: int = 0
  is_output_projection: bool = False

  @nn.compact
  def __call__(self, x: Array) -> Array:
    d = self.output_dim if self.is_output_projection else x.shape[-1]
    w = self._p(self.param("w", _lecun, (d, self.num_heads, self.dim_per_head), self.dtype))
    if self.is_output_projection:
      b = self.param("b", nn.initializers.zeros_init(), (d,), self.dtype)
      return jnp.einsum("...nh,dnh->...d", x, w) + self._p(b)
    b = self.param("b", nn.initializers.zeros_init(), (self.num_heads, self.dim_per_head),
                   self.dtype)
    return jnp.einsum("...d,dnh->...nh", x, w) + self._p(b)


class PerDimScale(_Base):
  """q * (1.442695041 / sqrt(dh)) * softplus(per_dim_scale); param `per_dim_scale` [dh]."""

  @nn.compact
  def __call__(self, q: Array) -> Array:
    dh = q.shape[-1]
    rho = self.param("per_dim_scale", nn.initializers.zeros_init(), (dh,), self.dtype)
    scale = jnp.asarray(PER_DIM_SCALE_CONSTANT / math.sqrt(dh), self.fprop_dtype)
    return q * (scale * jax.nn.softplus(self._p(rho)))


ATTENTION_IMPLS = (None, "xla", "cudnn")


def attend(q: Array, k: Array, v: Array, mask: Array | None, logit_cap: float = 0.0,
           implementation: str | None = None) -> Array:
  """softmax(cap(q k^T)) v with already-scaled queries: `q` [B, T, h, dh], `k`, `v` [B, S, h, dh] -> [B, T, h, dh].

  Without a cap this is `jax.nn.dot_product_attention` (scale 1): logits in float32, masked entries set to
  -0.7 * max(float32) by a select, softmax in float32, probabilities cast to `v`'s dtype, so a fully masked row (a
  padded query) is uniform, as in the official code; `implementation` picks its backend (None: JAX's choice,
  which is XLA in jax <= 0.11; "cudnn": cuDNN's fused kernel, GPU only, bfloat16 / float16).

  With a cap (every VideoPrism transformer stack: 50 * tanh(l / 50), applied before masking) no fused kernel JAX
  offers can express it (neither `jax.nn.dot_product_attention` nor cuDNN has a logit soft-cap), so the logits
  are formed in the activation dtype, capped, cast to float32, masked and normalized explicitly, exactly as the
  official code does; asking for "cudnn" then is an error rather than a silently different model.
  """
  if implementation not in ATTENTION_IMPLS:
    raise ValueError(f"attention implementation must be one of {ATTENTION_IMPLS}, got {implementation!r}")
  if logit_cap <= 0.0:
    return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=1.0, implementation=implementation)
  if implementation == "cudnn":
    raise ValueError(f"the cuDNN fused attention has no logit soft-cap, but this layer caps its logits at "
                     f"{logit_cap}; use implementation None or 'xla', or build the model with atten_logit_cap=0 "
                     "(a different model from the public checkpoints)")
  logits = jnp.einsum("btnh,bsnh->bnts", q, k)
  cap = jnp.asarray(logit_cap, logits.dtype)
  logits = (cap * jnp.tanh(logits / cap)).astype(jnp.float32)
  if mask is not None:
    logits = jnp.where(mask, logits, _large_negative(jnp.float32))
  probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
  return jnp.einsum("bnts,bsnh->btnh", probs, v)


class DotProductAttention(_Base):
  """Multi-head attention with optional tanh logit cap and optional learned per-dim query scale.

  Submodules `query`, `key`, `value`, `post` (and `per_dim_scale` if enabled).
  Queries are scaled after their bias (1/sqrt(dh), or PerDimScale); logits are
  capped as cap * tanh(l / cap) before masking, then cast to float32; masked
  entries are replaced by -0.7 * max(float32); softmax in float32 (`attend`;
  `implementation` is its backend).
  """
  num_heads: int = 1
  dim_per_head: int = 0
  atten_logit_cap: float = 0.0
  per_dim_scale: bool = False
  implementation: str | None = None

  @nn.compact
  def __call__(self, q_in: Array, kv_in: Array, mask: Array | None = None) -> Array:
    """`q_in` [B, T, D], `kv_in` [B, S, D], `mask` bool broadcastable to [B, h, T, S] (True = keep) -> [B, T, D]."""
    proj = dict(num_heads=self.num_heads, dim_per_head=self.dim_per_head, dtype=self.dtype,
                fprop_dtype=self.fprop_dtype)
    q = AttentionProjection(name="query", **proj)(q_in)  # [B, T, h, dh]
    k = AttentionProjection(name="key", **proj)(kv_in)  # [B, S, h, dh]
    v = AttentionProjection(name="value", **proj)(kv_in)
    if self.per_dim_scale:
      q = PerDimScale(name="per_dim_scale", dtype=self.dtype, fprop_dtype=self.fprop_dtype)(q)
    else:
      q = q * jnp.asarray(self.dim_per_head ** -0.5, q.dtype)
    context = attend(q, k, v, mask, self.atten_logit_cap, self.implementation)
    return AttentionProjection(name="post", output_dim=q_in.shape[-1], is_output_projection=True,
                               **proj)(context)


class TransformerFeedForward(_Base):
  """Pre-LN FFN block with residual: h + (phi(LN(h) W1 + b1) * (1-pi)) W2 + b2) * (1-pi). `[B, S, D]`."""
  hidden_dim: int = 0
  activation: str = "gelu"

  @nn.compact
  def __call__(self, x: Array, paddings: Array) -> Array:
    keep = (1.0 - paddings)[..., None].astype(x.dtype)
    y = LayerNorm(name="layer_norm", dtype=self.dtype, fprop_dtype=self.fprop_dtype)(x)
    y = FeedForward(name="ffn_layer1", output_dim=self.hidden_dim, dtype=self.dtype,
                    fprop_dtype=self.fprop_dtype)(y)
    # Exact (erf) GELU for the vision towers, ReLU for the text tower.
    y = jax.nn.gelu(y, approximate=False) if self.activation == "gelu" else jax.nn.relu(y)
    y = y * keep
    y = FeedForward(name="ffn_layer2", output_dim=x.shape[-1], dtype=self.dtype,
                    fprop_dtype=self.fprop_dtype)(y)
    return x + y * keep


class TransformerLayer(_Base):
  """One pre-LN transformer layer (norm_policy 'pre'). `[B, S, D] -> ([B, S, D], None)`.

  Returns a (carry, None) pair so the same module runs under `nn.scan`.
  """
  num_heads: int = 1
  mlp_dim: int = 0
  atten_logit_cap: float = 0.0
  attention_impl: str | None = None  # `attend`'s backend: None (JAX's choice), 'xla' or 'cudnn'
  activation: str = "gelu"

  @nn.compact
  def __call__(self, x: Array, paddings: Array, mask: Array) -> tuple[Array, None]:
    d = x.shape[-1]
    u = LayerNorm(name="layer_norm", dtype=self.dtype, fprop_dtype=self.fprop_dtype)(x)
    a = DotProductAttention(name="self_attention", num_heads=self.num_heads,
                            dim_per_head=d // self.num_heads, atten_logit_cap=self.atten_logit_cap,
                            implementation=self.attention_impl,
                            dtype=self.dtype, fprop_dtype=self.fprop_dtype)(u, u, mask)
    h = x + a
    out = TransformerFeedForward(name="ff_layer", hidden_dim=self.mlp_dim,
                                 activation=self.activation, dtype=self.dtype,
                                 fprop_dtype=self.fprop_dtype)(h, paddings)
    return out, None


class StackedTransformer(_Base):
  """`num_layers` identical layers; no final LN. `[B, S, D]`, paddings `[B, S]` -> `[B, S, D]`.

  With `scan=True` (the checkpoint layout) the layers are one `nn.scan`-ed module
  `x_layers` whose parameters carry a leading layer axis; otherwise they are
  `x_layers_0`, `x_layers_1`, ... without it.
  """
  num_layers: int = 1
  num_heads: int = 1
  mlp_dim: int = 0
  atten_logit_cap: float = 0.0
  attention_impl: str | None = None  # `attend`'s backend: None (JAX's choice), 'xla' or 'cudnn'
  activation: str = "gelu"
  causal: bool = False
  scan: bool = True

  @nn.compact
  def __call__(self, x: Array, paddings: Array) -> Array:
    mask = attention_mask(paddings, self.causal)
    kw = dict(num_heads=self.num_heads, mlp_dim=self.mlp_dim, atten_logit_cap=self.atten_logit_cap,
              attention_impl=self.attention_impl,
              activation=self.activation, dtype=self.dtype, fprop_dtype=self.fprop_dtype)
    if self.scan:
      layers = nn.scan(TransformerLayer, variable_axes={"params": 0}, split_rngs={"params": True},
                       in_axes=(nn.broadcast, nn.broadcast), length=self.num_layers)
      x, _ = layers(name="x_layers", **kw)(x, paddings, mask)
      return x
    for i in range(self.num_layers):
      x, _ = TransformerLayer(name=f"x_layers_{i}", **kw)(x, paddings, mask)
    return x


class _StackHolder(_Base):
  """Official `VisionTransformer` wrapper: only adds the `transformers_stack` name level."""
  num_layers: int = 1
  num_heads: int = 1
  mlp_dim: int = 0
  atten_logit_cap: float = 0.0
  attention_impl: str | None = None  # `attend`'s backend: None (JAX's choice), 'xla' or 'cudnn'
  scan: bool = True

  @nn.compact
  def __call__(self, x: Array, paddings: Array) -> Array:
    return StackedTransformer(name="transformers_stack", num_layers=self.num_layers,
                              num_heads=self.num_heads, mlp_dim=self.mlp_dim,
                              atten_logit_cap=self.atten_logit_cap, attention_impl=self.attention_impl,
                              activation="gelu",
                              causal=False, scan=self.scan, dtype=self.dtype,
                              fprop_dtype=self.fprop_dtype)(x, paddings)


class LearnedTable(_Base):
  """A learned table `emb_var` [num_rows, dim], returned whole (float32 param dtype)."""
  num_rows: int = 0
  dim: int = 0
  stddev: float | None = None

  @nn.compact
  def __call__(self) -> Array:
    init = _lecun if self.stddev is None else nn.initializers.normal(self.stddev)
    return self.param("emb_var", init, (self.num_rows, self.dim), self.dtype)


class AttentionPool(_Base):
  """One-query attention pooling (`AttenTokenPoolingLayer`): `[B, S, D] -> [B, 1, D]`.

  No mask, no logit cap, no residual/FFN; PerDimScale queries; head width
  `hidden_dim / num_heads`; LayerNorm `pooling_attention_layer_norm` on the output.
  """
  num_heads: int = 1
  hidden_dim: int = 0
  attention_impl: str | None = None

  @nn.compact
  def __call__(self, tokens: Array) -> Array:
    b, _, d = tokens.shape
    query = self.param("pooling_attention_query", _lecun, (1, d), self.dtype)
    query = jnp.broadcast_to(self._p(query)[None], (b, 1, d))
    out = DotProductAttention(name="pooling_attention", num_heads=self.num_heads,
                              dim_per_head=self.hidden_dim // self.num_heads, per_dim_scale=True,
                              implementation=self.attention_impl,
                              dtype=self.dtype, fprop_dtype=self.fprop_dtype)(query, tokens, None)
    return LayerNorm(name="pooling_attention_layer_norm", dtype=self.dtype,
                     fprop_dtype=self.fprop_dtype)(out)


# ----------------------------------------------------------------------------- models


def _check_common(model_dim: int, num_heads: int, norm_policy: str, where: str) -> None:
  if model_dim % num_heads:
    raise ValueError(f"{where}: model_dim={model_dim} must be divisible by num_heads={num_heads}")
  if norm_policy != "pre":
    raise ValueError(f"{where}: norm_policy={norm_policy!r} is not supported (only 'pre', as in "
                     "every public VideoPrism checkpoint)")


class FactorizedEncoder(_Base):
  """VideoPrism factorized space-time video encoder (ViViT model 2, no CLS, no pooling).

  Call: `model.apply(variables, frames, train=False, frame_paddings=None)` with
  `frames` float `[B, T, H, W, 3]` RGB in [0, 1] (no mean/std normalization),
  H and W multiples of `patch_size`. T may differ from `pos_emb_shape[0]` and the
  grid from `pos_emb_shape[1:]`: the learned tables are then resized
  (`resize_pos_emb`). `frame_paddings` `[B, T]` (1 = padded frame) mask keys
  and zero the FFN in both stacks.

  Returns `(tokens, outputs)`: tokens `[B, T*N, D]` (after `temporal_ln`, index
  t*N + n, N = (H/P)*(W/P)); outputs `{'spatial_features': [B, T, N, D]}`, the
  per-frame features after `spatial_ln` (before any temporal mixing).
  """
  patch_size: int = 18
  pos_emb_shape: tuple[int, int, int] = (16, 16, 16)
  model_dim: int = 768
  num_spatial_layers: int = 12
  num_temporal_layers: int = 4
  num_heads: int = 12
  mlp_dim: int = 3072
  atten_logit_cap: float = 50.0
  attention_impl: str | None = None  # `attend`'s backend: None (JAX's choice), 'xla' or 'cudnn'
  norm_policy: str = "pre"
  scan: bool = True

  @nn.compact
  def __call__(self, frames: Array, train: bool = False,
               frame_paddings: Array | None = None) -> tuple[Array, dict[str, Array]]:
    del train  # All dropout rates are 0 in VideoPrism.
    _check_common(self.model_dim, self.num_heads, self.norm_policy, type(self).__name__)
    if frames.ndim != 5 or frames.shape[-1] != 3:
      raise ValueError(f"FactorizedEncoder expects frames [B, T, H, W, 3], got shape {frames.shape}")
    b, t, h, w, _ = frames.shape
    p = self.patch_size
    if h % p or w % p:
      raise ValueError(f"frame size {h}x{w} must be a multiple of patch_size={p}")
    gh, gw = h // p, w // p
    n = gh * gw
    d = self.model_dim
    dt = dict(dtype=self.dtype, fprop_dtype=self.fprop_dtype)
    x = self._p(frames).reshape(b * t, h, w, 3)
    if frame_paddings is None:
      frame_paddings = jnp.zeros((b, t), self.fprop_dtype)
    elif frame_paddings.shape != (b, t):
      raise ValueError(f"frame_paddings shape {frame_paddings.shape} != (B, T) = {(b, t)}")
    frame_paddings = self._p(frame_paddings)

    x = FeedForward(name="patch_projection", output_dim=d, **dt)(patchify(x, p))  # [BT, N, D]
    t0, s0h, s0w = self.pos_emb_shape
    spatial = LearnedTable(name="spatial_pos_emb", num_rows=s0h * s0w, dim=d, **dt)()
    spatial = resize_pos_emb(spatial.reshape(s0h, s0w, d), (gh, gw)).reshape(n, d)
    x = x + self._p(spatial)[None]

    spatial_paddings = jnp.repeat(frame_paddings.reshape(b * t, 1), n, axis=1)
    stack = dict(num_heads=self.num_heads, mlp_dim=self.mlp_dim,
                 atten_logit_cap=self.atten_logit_cap, attention_impl=self.attention_impl, scan=self.scan, **dt)
    x = _StackHolder(name="spatial_encoder", num_layers=self.num_spatial_layers, **stack)(
        x, spatial_paddings)
    x = LayerNorm(name="spatial_ln", **dt)(x)
    spatial_features = x.reshape(b, t, n, d)

    # Per-patch temporal sequences: (b, t, n) -> sequence b*N + n, position t.
    x = spatial_features.transpose(0, 2, 1, 3).reshape(b * n, t, d)
    temporal_paddings = jnp.repeat(frame_paddings[:, None, :], n, axis=1).reshape(b * n, t)
    temporal = LearnedTable(name="temporal_pos_emb", num_rows=t0, dim=d, **dt)()
    x = x + self._p(resize_pos_emb(temporal, (t,)))[None]
    x = _StackHolder(name="temporal_encoder", num_layers=self.num_temporal_layers, **stack)(
        x, temporal_paddings)
    x = LayerNorm(name="temporal_ln", **dt)(x)
    tokens = x.reshape(b, n, t, d).transpose(0, 2, 1, 3).reshape(b, t * n, d)
    return tokens, {"spatial_features": spatial_features}


class TextEncoder(_Base):
  """CoCa-style unimodal text encoder: `[B, L]` ids + paddings -> `[B, L+1, D]` (CLS last).

  Token embeddings and the CLS are scaled by sqrt(D); sinusoidal positions on the
  L tokens only; the CLS is appended after the padding with padding 0; causal
  ReLU stack `unimodal_transformer`; final LN `unimodal_ln`.
  """
  vocabulary_size: int = 32_000
  model_dim: int = 768
  num_layers: int = 12
  num_heads: int = 12
  mlp_dim: int = 3072
  atten_logit_cap: float = 50.0
  attention_impl: str | None = None  # `attend`'s backend: None (JAX's choice), 'xla' or 'cudnn'
  enable_causal_atten: bool = True
  scan: bool = True

  @nn.compact
  def __call__(self, ids: Array, paddings: Array) -> Array:
    b, length = ids.shape
    d = self.model_dim
    dt = dict(dtype=self.dtype, fprop_dtype=self.fprop_dtype)
    table = LearnedTable(name="token_emb", num_rows=self.vocabulary_size, dim=d,
                         stddev=1.0 / math.sqrt(d), **dt)()
    x = self._p(jnp.asarray(table)[ids]) * jnp.asarray(math.sqrt(d), self.fprop_dtype)
    x = x + self._p(sinusoidal_pos_emb(length, d))[None]
    cls = self.param("cls_emb", nn.initializers.normal(1.0 / math.sqrt(d)), (1, 1, d), self.dtype)
    cls = jnp.broadcast_to(self._p(cls) * jnp.asarray(math.sqrt(d), self.fprop_dtype), (b, 1, d))
    x = jnp.concatenate([x, cls], axis=1)
    paddings = jnp.concatenate([self._p(paddings), jnp.zeros((b, 1), self.fprop_dtype)], axis=1)
    x = StackedTransformer(name="unimodal_transformer", num_layers=self.num_layers,
                           num_heads=self.num_heads, mlp_dim=self.mlp_dim,
                           atten_logit_cap=self.atten_logit_cap, attention_impl=self.attention_impl,
                           activation="relu",
                           causal=self.enable_causal_atten, scan=self.scan, **dt)(x, paddings)
    return LayerNorm(name="unimodal_ln", **dt)(x)


class FactorizedVideoCLIP(_Base):
  """VideoPrism LvT video-text model (`FactorizedVideoCLIP`).

  Call: `model.apply(variables, frames, text_ids, text_paddings, train=False,
  normalize=True, frame_paddings=None, return_frame_embeddings=False)`.
  `frames` `[B, T, H, W, 3]` in [0, 1] or None; `text_ids` int `[B', L]` or None;
  `text_paddings` `[B', L]` (1.0 = pad), required with `text_ids`.

  Returns `(video_embeddings [B, D] | None, text_embeddings [B', D] | None,
  outputs)`. With frames, `outputs` holds `video_tokens` `[B, T*N, D]` (the
  video encoder output after `temporal_ln`, before the auxiliary encoder; the
  official `spatiotemporal_features`), `spatial_features` `[B, T, N, D]`, and,
  if `return_frame_embeddings`, `frame_embeddings` `[B, T, D]` (each frame's
  auxiliary-encoder tokens pooled by the same pooler, L2-normalized when
  `normalize`).
  """
  patch_size: int = 18
  pos_emb_shape: tuple[int, int, int] = (16, 16, 16)
  num_spatial_layers: int = 12
  num_temporal_layers: int = 4
  mlp_dim: int = 3072
  num_auxiliary_layers: int = 2
  vocabulary_size: int = 32_000
  enable_causal_atten: bool = True
  num_unimodal_layers: int = 12
  norm_policy: str = "pre"
  model_dim: int = 768
  num_heads: int = 12
  atten_logit_cap: float = 50.0
  attention_impl: str | None = None  # `attend`'s backend: None (JAX's choice), 'xla' or 'cudnn'
  scan: bool = True

  @nn.compact
  def __call__(self, frames: Array | None = None, text_ids: Array | None = None,
               text_paddings: Array | None = None, train: bool = False, normalize: bool = True,
               frame_paddings: Array | None = None, return_frame_embeddings: bool = False,
               ) -> tuple[Array | None, Array | None, dict[str, Array]]:
    del train  # All dropout rates are 0 in VideoPrism.
    _check_common(self.model_dim, self.num_heads, self.norm_policy, type(self).__name__)
    dt = dict(dtype=self.dtype, fprop_dtype=self.fprop_dtype)
    d = self.model_dim
    video_emb, text_emb, outputs = None, None, {}
    if frames is not None:
      tokens, enc_out = FactorizedEncoder(
          name="vision_encoder", patch_size=self.patch_size, pos_emb_shape=self.pos_emb_shape,
          model_dim=d, num_spatial_layers=self.num_spatial_layers,
          num_temporal_layers=self.num_temporal_layers, num_heads=self.num_heads,
          mlp_dim=self.mlp_dim, atten_logit_cap=self.atten_logit_cap, attention_impl=self.attention_impl,
          norm_policy="pre",
          scan=self.scan, **dt)(frames, frame_paddings=frame_paddings)
      outputs["video_tokens"] = tokens
      outputs["spatial_features"] = enc_out["spatial_features"]
      x = tokens
      if self.num_auxiliary_layers > 0:
        # Full space-time attention over all T*N tokens; frame paddings are not used here.
        x = _StackHolder(name="auxiliary_encoder", num_layers=self.num_auxiliary_layers,
                         num_heads=self.num_heads, mlp_dim=self.mlp_dim,
                         atten_logit_cap=self.atten_logit_cap, attention_impl=self.attention_impl,
                         scan=self.scan, **dt)(
                             x, jnp.zeros(x.shape[:2], x.dtype))
      pooler = AttentionPool(name="contrastive_vision_pooler", num_heads=self.num_heads,
                             hidden_dim=4 * d, attention_impl=self.attention_impl, **dt)
      video_emb = pooler(x)[:, 0]
      if normalize:
        video_emb = l2_normalize(video_emb)
      if return_frame_embeddings:
        b, t = frames.shape[:2]
        per_frame = pooler(x.reshape(b * t, -1, d))[:, 0].reshape(b, t, d)
        outputs["frame_embeddings"] = l2_normalize(per_frame) if normalize else per_frame
    if text_ids is not None:
      if text_paddings is None:
        raise ValueError("text_paddings [B, L] (1.0 = pad) are required with text_ids")
      if text_paddings.shape != text_ids.shape:
        raise ValueError(f"text_paddings shape {text_paddings.shape} != text_ids shape "
                         f"{text_ids.shape}")
      feats = TextEncoder(name="text_encoder", vocabulary_size=self.vocabulary_size, model_dim=d,
                          num_layers=self.num_unimodal_layers, num_heads=self.num_heads,
                          mlp_dim=4 * d, atten_logit_cap=self.atten_logit_cap, attention_impl=self.attention_impl,
                          enable_causal_atten=self.enable_causal_atten, scan=self.scan, **dt)(
                              text_ids, text_paddings)
      text_emb = feats[:, -1]  # The CLS token, appended last.
      if normalize:
        text_emb = l2_normalize(text_emb)
    return video_emb, text_emb, outputs


# ----------------------------------------------------------------------------- configs

CONFIGS: dict[str, dict[str, Any]] = {
    "videoprism_public_v1_base": dict(
        patch_size=18, pos_emb_shape=(16, 16, 16), model_dim=768, num_spatial_layers=12,
        num_temporal_layers=4, num_heads=12, mlp_dim=3072, atten_logit_cap=50.0, scan=True),
    "videoprism_public_v1_large": dict(
        patch_size=18, pos_emb_shape=(8, 16, 16), model_dim=1024, num_spatial_layers=24,
        num_temporal_layers=4, num_heads=16, mlp_dim=4096, atten_logit_cap=50.0, scan=True),
    "videoprism_lvt_public_v1_base": dict(
        patch_size=18, pos_emb_shape=(16, 16, 16), num_spatial_layers=12, num_temporal_layers=4,
        mlp_dim=3072, num_auxiliary_layers=2, vocabulary_size=32_000, enable_causal_atten=True,
        num_unimodal_layers=12, norm_policy="pre", model_dim=768, num_heads=12,
        atten_logit_cap=50.0, scan=True),
    "videoprism_lvt_public_v1_large": dict(
        patch_size=18, pos_emb_shape=(8, 16, 16), num_spatial_layers=24, num_temporal_layers=4,
        mlp_dim=4096, num_auxiliary_layers=2, vocabulary_size=32_000, enable_causal_atten=True,
        num_unimodal_layers=12, norm_policy="pre", model_dim=1024, num_heads=16,
        atten_logit_cap=50.0, scan=True),
}
"""Constructor kwargs of the four public checkpoints. Names starting with
`videoprism_lvt` build `FactorizedVideoCLIP` (text via `C4_EN_SPM_PATH`, ids of
length `TEXT_MAX_LEN`), the others `FactorizedEncoder`. Training inputs:
`pos_emb_shape[0]` frames of `patch_size * pos_emb_shape[1]` = 288 pixels."""


def get_model(name: str, **overrides: Any) -> FactorizedEncoder | FactorizedVideoCLIP:
  """Builds the module for a `CONFIGS` entry; `overrides` replace fields (e.g. `fprop_dtype=jnp.bfloat16`)."""
  if name not in CONFIGS:
    raise KeyError(f"unknown VideoPrism model {name!r}; expected one of {sorted(CONFIGS)}")
  cls = FactorizedVideoCLIP if name.startswith("videoprism_lvt") else FactorizedEncoder
  return cls(**{**CONFIGS[name], **overrides})


# ----------------------------------------------------------------------------- checkpoints


def _dummy_inputs(model: nn.Module) -> tuple[tuple, dict]:
  """The smallest inputs that create every parameter (shapes do not depend on input size)."""
  p = model.patch_size
  frames = jnp.zeros((1, 1, p, p, 3), jnp.float32)
  if isinstance(model, FactorizedVideoCLIP):
    return (frames, jnp.zeros((1, 2), jnp.int32), jnp.zeros((1, 2), jnp.float32)), {}
  if isinstance(model, FactorizedEncoder):
    return (frames,), {}
  raise TypeError(f"expected a FactorizedEncoder or FactorizedVideoCLIP, got {type(model)}")


def param_shapes(model: nn.Module) -> dict[str, jax.ShapeDtypeStruct]:
  """`{'params/...': ShapeDtypeStruct}` of the model's variables, via `jax.eval_shape` (no allocation)."""
  args, kwargs = _dummy_inputs(model)
  variables = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), *args, **kwargs))
  return flatten_dict(variables)


def init_params(model: nn.Module, seed: int | jax.Array = 0) -> dict[str, Any]:
  """Random variables `{'params': ...}` for `model` from a seed or a PRNG key (Flax's initialisers), jitted: one
  compilation instead of the model's forward pass run op by op."""
  args, kwargs = _dummy_inputs(model)
  key = jax.random.PRNGKey(seed) if isinstance(seed, int) else seed
  return jax.jit(lambda k: model.init(k, *args, **kwargs))(key)
