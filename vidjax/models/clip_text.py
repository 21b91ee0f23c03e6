"""CLIP's text tower (Radford et al. 2021, section 2.4): the query encoder of X-Pool (Gorti et al. 2022), which
fine-tunes it with its pooling, so its released checkpoints hold their own text tower.

Token ids `[B, L]` (L <= the context length, 77) -> token + position embeddings -> `layers` pre-LayerNorm residual
blocks (causal multi-head self-attention, then an MLP with QuickGELU, x * sigmoid(1.702 x)) -> a final LayerNorm ->
the hidden state at the end-of-text token -> `text_projection` (no bias) -> `[B, projection]`. Every LayerNorm has
torch's epsilon 1e-5 (flax's default 1e-6 differs visibly at CLIP's embedding scale, a few hundredths).

The end-of-text token is found as the position of the largest id (its first occurrence): CLIP's vocabulary puts
`<|endoftext|>` last (49407 of 49408), and its tokenizer pads with that same token, so the first largest id is the
first end-of-text. OpenAI's `encode_text` pools this way, and so does Hugging Face's `CLIPTextTransformer` for the
config X-Pool loads (`openai/clip-vit-base-patch32`, whose text config keeps the legacy `eos_token_id` 2, for which
transformers 4.47, the version GRDR pins, takes the argmax of the ids). Under the causal mask nothing after the
end-of-text token reaches it, so padding (any token, any length up to the context) leaves the output unchanged.

Parameter names follow the layers, not a checkpoint; `vidjax.convert.xpool` maps both official layouts
(Hugging Face's `text_model.*` and OpenAI's `transformer.resblocks.*`) onto them. `tests/test_reference_clip_text.py`
holds the tower against the official modules.
"""
from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

LAYER_NORM_EPSILON = 1e-5  # torch's nn.LayerNorm default, which both official towers use


@dataclasses.dataclass(frozen=True)
class CLIPTextConfig:
  """The tower's shape; the defaults are ViT-B/32's text tower (the CLIP X-Pool fine-tunes)."""
  width: int = 512
  layers: int = 12
  heads: int = 8
  context: int = 77
  vocab: int = 49408
  projection: int = 512
  mlp_width: int = 2048

  def __post_init__(self):
    for name in ("width", "layers", "heads", "context", "vocab", "projection", "mlp_width"):
      value = getattr(self, name)
      if not (isinstance(value, int) and value >= 1):
        raise ValueError(f"CLIPTextConfig.{name}={value!r} must be a positive integer")
    if self.width % self.heads:
      raise ValueError(f"CLIPTextConfig: width {self.width} is not divisible by heads {self.heads}")


class ResidualBlock(nn.Module):
  """x + causal MHSA(LN_1(x)), then x + fc2(QuickGELU(fc1(LN_2(x)))): `[B, L, W]` -> `[B, L, W]`."""
  width: int
  heads: int
  mlp_width: int

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    b, length, _ = x.shape
    h = nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, name="ln_1")(x)
    q, k, v = (nn.Dense(self.width, name=f"{n}_proj")(h).reshape(b, length, self.heads, -1) for n in "qkv")
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    causal = jnp.tril(jnp.ones((length, length), bool))
    weights = jax.nn.softmax(jnp.where(causal, logits, jnp.finfo(logits.dtype).min), axis=-1)
    attended = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(x.shape)
    x = x + nn.Dense(self.width, name="out_proj")(attended)
    h = nn.Dense(self.mlp_width, name="fc1")(nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, name="ln_2")(x))
    return x + nn.Dense(self.width, name="fc2")(h * jax.nn.sigmoid(1.702 * h))


class CLIPTextTower(nn.Module):
  """Token ids `[B, L]` (int, L <= context) -> text features `[B, projection]` (not normalised; module docstring)."""
  config: CLIPTextConfig = CLIPTextConfig()

  @nn.compact
  def __call__(self, ids: jax.Array) -> jax.Array:
    c = self.config
    length = ids.shape[-1]
    if ids.ndim != 2 or not 1 <= length <= c.context:
      raise ValueError(f"CLIPTextTower: token ids of shape {ids.shape}; expected [B, L] with 1 <= L <= {c.context}")
    tokens = nn.Embed(c.vocab, c.width, embedding_init=nn.initializers.normal(0.02), name="token_embedding")(ids)
    positions = self.param("position_embedding", nn.initializers.normal(0.01), (c.context, c.width))
    x = tokens + positions[:length]
    for i in range(c.layers):
      x = ResidualBlock(c.width, c.heads, c.mlp_width, name=f"block_{i}")(x)
    x = nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, name="ln_final")(x)
    pooled = jnp.take_along_axis(x, jnp.argmax(ids, axis=-1)[:, None, None], axis=1)[:, 0]
    return nn.Dense(c.projection, use_bias=False, name="text_projection")(pooled)


def init_params(config: CLIPTextConfig, rng: jax.Array) -> dict:
  """Freshly initialised params of a `CLIPTextTower(config)` (the structure a conversion must match)."""
  return CLIPTextTower(config).init(rng, jnp.zeros((1, config.context), jnp.int32))["params"]
