"""Dense text-video retrievers over frozen per-frame features: CLIP4Clip (meanP, seqTransf) and X-Pool.

CLIP4Clip (Luo et al. 2021, "An Empirical Study of CLIP for End to End Video Clip Retrieval", §3.2 "Similarity
Calculator"), the parameter-free and the sequential type:
  * meanP: each frame embedding L2-normalised, averaged over the T frames, normalised again; s(t, v) = cos(t, v);
  * seqTransf: frame embeddings + learned frame-position embeddings (a table of 77, CLIP's context length, which the
    release gives it) through a small transformer (CLIP's residual attention blocks: pre-LayerNorm self-attention and
    a QuickGELU MLP of width 4D; 4 layers, D / 64 heads; the release builds them with its own TF-style LayerNorm,
    epsilon 1e-12, not CLIP's 1e-5), the output added back to the input frames (the residual), then meanP.

X-Pool (Gorti et al., CVPR 2022, "Cross-Modal Language-Video Attention for Text-Video Retrieval", §4): the text
embedding attends over the frames of a video. With one LayerNorm LN_1 on both inputs,
    Q = LN_1(t) W_Q,  K = LN_1(F) W_K,  V = LN_1(F) W_V,  a = softmax(Q K^T / sqrt(d_h)) V     (per head)
    r = LN_2(a W_O),  z_{v|t} = LN_3(r + Dropout(FC(r))),  s(t, v) = cos(t, z_{v|t})
so a video's embedding depends on the text: the similarity is per (text, video) pair and a batch of B pairs gives a
B x B matrix of B x B pooled embeddings. As in the authors' release, W_Q, W_K, W_V, W_O and FC start as the
identity (zero biases), there is 1 head, and the LayerNorms are torch's (epsilon 1e-5).

Both papers fine-tune CLIP end to end. Here the text and frame towers are frozen (their features are inputs, read from
a feature store), so what trains is the pooling above plus two linear maps that stand in for the towers' last
projections: `frame_proj` (D_v -> D, which also maps a backbone's frame tokens into the D-wide text space when the
widths differ) and `text_proj` (D -> D), both initialised to the (rectangular) identity. With identity maps meanP
starts in the backbone's own space but not at its cosine: it averages the `num_frames` sampled frames, each
L2-normalised first, where the store's clip embedding is the backbone's own pooling of every frame. On the
moving-object world (seed 0: 12 of 16 frames) meanP at initialisation scores 12.5 T2V R@1, the backbone's cosine 10.0.

Held against the official code (the goldens of `bench/goldens/dense.py`; `tests/test_reference_xpool.py`,
`tests/test_reference_clip4clip.py`), whose checkpoints `vidjax.convert.xpool` / `vidjax.convert.clip4clip` load.

Shapes: text `[Q, D]` (the store's text embeddings), frames `[V, T, D_v]` (per-frame features), scores `[Q, V]`
(`similarity`, every text against every video) or `[Q, K]` (`pair_scores`, each text against its own K candidates).
"""
from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidjax.models.layers import Dropout
from vidjax.ops import l2_normalize

POOLINGS = ("meanp", "seqtransf", "xpool")


@dataclasses.dataclass(frozen=True)
class DenseConfig:
  """One dense retriever. `embed_dim` is D (the text embeddings' width, the joint space), `frame_dim` D_v (the
  frame features' width)."""
  pooling: str                   # "meanp" | "seqtransf" (CLIP4Clip §3.2) | "xpool" (X-Pool §4)
  embed_dim: int
  frame_dim: int
  seq_layers: int = 4            # CLIP4Clip seqTransf: 4 transformer layers
  seq_head_dim: int = 64         # ... heads = max(1, D // 64) (CLIP's rule, 8 heads at D = 512)
  max_positions: int = 77        # ... learned frame-position embeddings (CLIP4Clip: CLIP's context length, 77)
  xpool_heads: int = 1           # X-Pool: one head
  dropout: float = 0.3           # X-Pool: dropout on FC's output (MSR-VTT 9k / LSMDC; MSVD 0.4)
  temperature: float = 0.01      # softmax temperature of the loss (CLIP's trained logit scale 100)
  learn_logit_scale: bool = False

  def __post_init__(self):
    if self.pooling not in POOLINGS:
      raise ValueError(f"DenseConfig.pooling must be one of {POOLINGS}, got {self.pooling!r}")
    for name in ("embed_dim", "frame_dim", "seq_layers", "seq_head_dim", "max_positions", "xpool_heads"):
      if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 1):
        raise ValueError(f"DenseConfig.{name} must be a positive integer, got {getattr(self, name)!r}")
    if self.embed_dim % self.xpool_heads:
      raise ValueError(f"DenseConfig: embed_dim {self.embed_dim} is not divisible by xpool_heads {self.xpool_heads}")
    if not 0.0 <= self.dropout < 1.0 or not self.temperature > 0:
      raise ValueError(f"DenseConfig: dropout must be in [0, 1) and temperature > 0, got {self.dropout}, "
                       f"{self.temperature}")

  @property
  def seq_heads(self) -> int:
    heads = max(1, self.embed_dim // self.seq_head_dim)
    while self.embed_dim % heads:
      heads -= 1
    return heads


def eye_init(key, shape, dtype=jnp.float32):  # pylint: disable=unused-argument
  """The (rectangular) identity, as torch's `nn.init.eye_` (X-Pool's projections; the frame / text maps)."""
  return jnp.eye(shape[0], shape[1], dtype=dtype)


def mean_pool(frames: jax.Array) -> jax.Array:
  """CLIP4Clip meanP: `[..., T, D]` -> `[..., D]`, each frame normalised, averaged, normalised again."""
  return l2_normalize(jnp.mean(l2_normalize(frames), axis=-2))


def _heads(x: jax.Array, heads: int) -> jax.Array:
  return x.reshape(*x.shape[:-1], heads, x.shape[-1] // heads)


class ResidualBlock(nn.Module):
  """CLIP's residual attention block: x + MHSA(LN(x)), then x + MLP(LN(x)) with QuickGELU, width 4D; LayerNorm
  epsilon 1e-12 (CLIP4Clip's `module_cross` builds the block with its TF-style LayerNorm). Weights start at
  N(0, 0.02) (CLIP4Clip's `init_weights` for the modules it does not copy from CLIP)."""
  width: int
  heads: int

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    dense = lambda width, name: nn.Dense(width, kernel_init=nn.initializers.normal(0.02), name=name)  # noqa: E731
    h = nn.LayerNorm(epsilon=1e-12, name="ln_1")(x)
    q, k, v = (_heads(dense(self.width, n)(h), self.heads) for n in ("query", "key", "value"))
    w = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1]), axis=-1)
    a = jnp.einsum("bhqk,bkhd->bqhd", w, v).reshape(x.shape)
    x = x + dense(self.width, "out")(a)
    h = dense(4 * self.width, "c_fc")(nn.LayerNorm(epsilon=1e-12, name="ln_2")(x))
    return x + dense(self.width, "c_proj")(h * jax.nn.sigmoid(1.702 * h))


class SeqTransformer(nn.Module):
  """CLIP4Clip seqTransf: `[B, T, D]` frames + position embeddings -> `layers` residual blocks -> + the input."""
  width: int
  layers: int
  heads: int
  max_positions: int

  @nn.compact
  def __call__(self, frames: jax.Array) -> jax.Array:
    t = frames.shape[-2]
    if t > self.max_positions:
      raise ValueError(f"SeqTransformer: {t} frames, more than max_positions={self.max_positions}")
    pos = self.param("frame_position_embeddings", nn.initializers.normal(0.02), (self.max_positions, self.width))
    x = frames + pos[:t]
    for i in range(self.layers):
      x = ResidualBlock(self.width, self.heads, name=f"block_{i}")(x)
    return x + frames


class XPool(nn.Module):
  """X-Pool's text-conditioned attention pooling (§4; the module docstring has the equations).

  `cross=True`: text `[Q, D]` x frames `[V, T, D]` -> `[Q, V, D]` (every text with every video);
  `cross=False`: text `[Q, D]` x frames `[Q, K, T, D]` -> `[Q, K, D]` (each text with its own K videos)."""
  width: int
  heads: int = 1
  dropout: float = 0.3

  @nn.compact
  def __call__(self, text: jax.Array, frames: jax.Array, cross: bool, deterministic: bool = True) -> jax.Array:
    dense = lambda name: nn.Dense(self.width, kernel_init=eye_init, name=name)  # noqa: E731
    ln1 = nn.LayerNorm(epsilon=1e-5, name="layer_norm1")
    t, f = ln1(text), ln1(frames)
    q = _heads(dense("q_proj")(t), self.heads)   # [Q, H, d]
    k = _heads(dense("k_proj")(f), self.heads)   # [V, T, H, d] | [Q, K, T, H, d]
    v = _heads(dense("v_proj")(f), self.heads)
    scale = 1.0 / math.sqrt(q.shape[-1])
    if cross:
      w = jax.nn.softmax(jnp.einsum("qhd,vthd->qvht", q, k) * scale, axis=-1)
      a = jnp.einsum("qvht,vthd->qvhd", w, v)
    else:
      w = jax.nn.softmax(jnp.einsum("qhd,qkthd->qkht", q, k) * scale, axis=-1)
      a = jnp.einsum("qkht,qkthd->qkhd", w, v)
    a = a.reshape(*a.shape[:-2], self.width)
    r = nn.LayerNorm(epsilon=1e-5, name="layer_norm2")(dense("out_proj")(a))
    r = r + Dropout(self.dropout)(dense("linear_proj")(r), deterministic)
    return nn.LayerNorm(epsilon=1e-5, name="layer_norm3")(r)


class DenseRetriever(nn.Module):
  """A CLIP4Clip / X-Pool retriever over frozen text and frame features (the module docstring)."""
  config: DenseConfig

  def setup(self):
    c = self.config
    self.frame_proj = nn.Dense(c.embed_dim, kernel_init=eye_init, name="frame_proj")
    self.text_proj = nn.Dense(c.embed_dim, kernel_init=eye_init, name="text_proj")
    if c.pooling == "seqtransf":
      self.seq = SeqTransformer(c.embed_dim, c.seq_layers, c.seq_heads, c.max_positions, name="seq_transformer")
    if c.pooling == "xpool":
      self.xpool = XPool(c.embed_dim, c.xpool_heads, c.dropout, name="xpool")
    if c.learn_logit_scale:
      self.log_logit_scale = self.param("log_logit_scale", nn.initializers.constant(-math.log(c.temperature)), ())

  def logit_scale(self) -> jax.Array:
    """1 / temperature: learned (from 1 / `temperature`) or fixed."""
    if self.config.learn_logit_scale:
      return jnp.exp(self.log_logit_scale)
    return jnp.asarray(1.0 / self.config.temperature, jnp.float32)

  def encode_text(self, text: jax.Array) -> jax.Array:
    """`[..., D]` -> the normalised query embedding `[..., D]`."""
    return l2_normalize(self.text_proj(text))

  def encode_frames(self, frames: jax.Array) -> jax.Array:
    """`[..., T, D_v]` -> `[..., T, D]`: projected (and, seqTransf, contextualised) frames."""
    x = self.frame_proj(frames)
    if self.config.pooling == "seqtransf":
      lead = x.shape[:-2]
      x = self.seq(x.reshape(-1, *x.shape[-2:])).reshape(*lead, *x.shape[-2:])
    return x

  def encode_video(self, frames: jax.Array) -> jax.Array:
    """meanP / seqTransf: `[..., T, D_v]` -> one normalised video embedding `[..., D]` (no text needed)."""
    if self.config.pooling == "xpool":
      raise ValueError("X-Pool pools a video per text: use similarity / pair_scores")
    return mean_pool(self.encode_frames(frames))

  def similarity(self, text: jax.Array, frames: jax.Array, deterministic: bool = True) -> jax.Array:
    """text `[Q, D]`, frames `[V, T, D_v]` -> cosine `[Q, V]` of every text with every video."""
    t = self.encode_text(text)
    if self.config.pooling != "xpool":
      return t @ self.encode_video(frames).T
    z = l2_normalize(self.xpool(self.text_proj(text), self.encode_frames(frames), True, deterministic))
    return jnp.einsum("qd,qvd->qv", t, z)

  def pair_scores(self, text: jax.Array, frames: jax.Array) -> jax.Array:
    """text `[Q, D]`, frames `[Q, K, T, D_v]` (each text's own candidates) -> cosine `[Q, K]`."""
    t = self.encode_text(text)
    if self.config.pooling != "xpool":
      return jnp.einsum("qd,qkd->qk", t, self.encode_video(frames))
    z = l2_normalize(self.xpool(self.text_proj(text), self.encode_frames(frames), False, True))
    return jnp.einsum("qd,qkd->qk", t, z)

  def __call__(self, text: jax.Array, frames: jax.Array, deterministic: bool = True):
    """A training batch of B (text, video) pairs: (similarities `[B, B]`, texts as rows; logit scale)."""
    return self.similarity(text, frames, deterministic), self.logit_scale()


def init_params(model: DenseRetriever, rng: jax.Array, frames: int = 2):
  """The model's parameters, from dummy inputs (2 texts, 2 videos of `frames` frames)."""
  c = model.config
  return model.init(rng, jnp.zeros((2, c.embed_dim)), jnp.zeros((2, frames, c.frame_dim)))["params"]
