"""A T5 encoder-decoder in flax.linen (Raffel et al. 2020, v1.0 layout): GRDR's generative retriever trunk.

GRDR (../shared/papers/grdr.txt §4.3) uses T5-Small as the retriever. This module is the T5
architecture; the vocabulary head is left to the caller (GRDR predicts codes by cosine over its
shared codebook, eq. 8, not over words):

  per encoder layer:  x = x + Attn(RMSNorm(x), bias_enc)        (bidirectional relative-position bias)
                      x = x + W_o ReLU(W_i RMSNorm(x))
  per decoder layer:  y = y + Attn(RMSNorm(y), causal + bias_dec)   (unidirectional bias)
                      y = y + CrossAttn(RMSNorm(y), encoder output)
                      y = y + W_o ReLU(W_i RMSNorm(y))
  each stack ends with RMSNorm; dropout after every sublayer and on the embeddings (its masks from
  `ops.dropout_keep_mask`'s counter hash: on a CPU, threefry masks took two thirds of a training step).

T5 specifics kept: no biases anywhere; RMSNorm with a scale only (eps 1e-6); attention logits are not
scaled by 1/sqrt(d_kv) (T5 folds that into the init); the relative-position bias (32 log-spaced
buckets up to distance 128, one learned scalar per bucket and head) is computed by the first layer of
each stack and shared by all of its layers; cross-attention has no position bias.

`T5Config.small()` is T5-Small (d_model 512, 8 heads of 64, d_ff 2048, 6 + 6 layers, vocabulary
32,128 with the input embedding shared by both stacks): 60,506,624 parameters, the published count
(checked in tests/test_t5.py). No pretrained T5 weights are available offline, so it trains from
random init (normal init with T5's fan-in scaling).
"""
from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidjax.models.layers import Dropout
from vidjax.ops import check_positive_fields


@dataclasses.dataclass(frozen=True)
class T5Config:
  """T5 hyperparameters. `vocab_size` 0 = no token embedding (inputs come as embeddings)."""
  d_model: int = 512
  num_heads: int = 8
  d_kv: int = 64
  d_ff: int = 2048
  encoder_layers: int = 6
  decoder_layers: int = 6
  vocab_size: int = 32128
  num_buckets: int = 32
  max_distance: int = 128
  dropout_rate: float = 0.1
  layer_norm_eps: float = 1e-6
  dtype: str = "float32"

  def __post_init__(self):
    check_positive_fields(self, ("d_model", "num_heads", "d_kv", "d_ff", "decoder_layers", "num_buckets",
                                 "max_distance"))
    for name in ("encoder_layers", "vocab_size"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"T5Config.{name} must be a non-negative integer, got {value!r}")
    if not 0.0 <= self.dropout_rate < 1.0:
      raise ValueError(f"T5Config.dropout_rate must be in [0, 1), got {self.dropout_rate!r}")

  @classmethod
  def small(cls, **overrides) -> "T5Config":
    """T5-Small (GRDR §4.3)."""
    return cls(**overrides)


def relative_position_bucket(relative_position, bidirectional: bool, num_buckets: int = 32,
                             max_distance: int = 128):
  """T5's bucket of `memory_position - query_position` (int array -> int32 array, same shape).

  Half the buckets (all of them when unidirectional) are exact offsets 0..n/2-1; the rest are
  log-spaced up to `max_distance`; bidirectional uses the other half for positive offsets.
  Unidirectional (decoder) buckets only look back: offsets > 0 fall in bucket 0.
  """
  n = -jnp.asarray(relative_position, jnp.int32)
  bucket = jnp.zeros_like(n)
  if bidirectional:
    num_buckets //= 2
    bucket = bucket + (n < 0).astype(jnp.int32) * num_buckets
    n = jnp.abs(n)
  else:
    n = jnp.maximum(n, 0)
  max_exact = num_buckets // 2
  safe = jnp.maximum(n, 1).astype(jnp.float32)
  large = max_exact + (jnp.log(safe / max_exact) / math.log(max_distance / max_exact)
                       * (num_buckets - max_exact)).astype(jnp.int32)
  large = jnp.minimum(large, num_buckets - 1)
  return bucket + jnp.where(n < max_exact, n, large)


class RMSNorm(nn.Module):
  """T5's layer norm: x / sqrt(mean(x^2) + eps) * scale (no mean subtraction, no bias)."""
  eps: float = 1e-6
  dtype: str = "float32"

  @nn.compact
  def __call__(self, x):
    scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + self.eps)
    return (y * scale).astype(jnp.dtype(self.dtype))


def _dense(features, config: T5Config, fan_in: int, name: str, axis=-1):
  return nn.DenseGeneral(features, axis=axis, use_bias=False, dtype=jnp.dtype(config.dtype),
                         param_dtype=jnp.float32, kernel_init=nn.initializers.normal(fan_in ** -0.5), name=name)


class Attention(nn.Module):
  """Multi-head attention without biases or logit scaling; `bias` [B|1, H, Lq, Lk] is added to the logits."""
  config: T5Config

  @nn.compact
  def __call__(self, x, memory, bias, deterministic: bool):
    c = self.config
    heads = (c.num_heads, c.d_kv)
    q = _dense(heads, c, c.d_model * c.d_kv, "q")(x)  # T5 init: q gets the extra 1/sqrt(d_kv)
    k = _dense(heads, c, c.d_model, "k")(memory)
    v = _dense(heads, c, c.d_model, "v")(memory)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) + bias
    weights = Dropout(c.dropout_rate)(jax.nn.softmax(logits, axis=-1), deterministic=deterministic)
    out = jnp.einsum("bhqk,bkhd->bqhd", weights.astype(v.dtype), v)
    return _dense(c.d_model, c, c.num_heads * c.d_kv, "o", axis=(-2, -1))(out)


class FeedForward(nn.Module):
  config: T5Config

  @nn.compact
  def __call__(self, x, deterministic: bool):
    c = self.config
    h = jax.nn.relu(_dense(c.d_ff, c, c.d_model, "wi")(x))
    h = Dropout(c.dropout_rate)(h, deterministic=deterministic)
    return _dense(c.d_model, c, c.d_ff, "wo")(h)


class PositionBias(nn.Module):
  """The learned relative-position bias [1, H, Lq, Lk] of one stack."""
  config: T5Config
  bidirectional: bool

  @nn.compact
  def __call__(self, q_len: int, k_len: int):
    c = self.config
    table = self.param("rel_embedding", nn.initializers.normal(c.d_model ** -0.5), (c.num_buckets, c.num_heads))
    rel = np.arange(k_len)[None, :] - np.arange(q_len)[:, None]
    buckets = relative_position_bucket(rel, self.bidirectional, c.num_buckets, c.max_distance)
    return jnp.transpose(jnp.asarray(table)[buckets], (2, 0, 1))[None]


def _sublayer(config: T5Config, name: str, fn, x, deterministic):
  """x + Dropout(fn(RMSNorm(x))): T5's pre-norm residual block."""
  y = fn(RMSNorm(config.layer_norm_eps, config.dtype, name=f"{name}_norm")(x))
  return x + Dropout(config.dropout_rate)(y, deterministic=deterministic)


def _mask_bias(mask):
  """bool [B, Lq|1, Lk] (True = attend) -> additive float32 [B, 1, Lq|1, Lk]."""
  return jnp.where(mask[:, None], 0.0, -1e9).astype(jnp.float32)


class T5Encoder(nn.Module):
  """embeddings [B, L, d_model], mask [B, L] (True = real) -> [B, L, d_model]."""
  config: T5Config

  @nn.compact
  def __call__(self, x, mask, deterministic: bool = True):
    c = self.config
    x = Dropout(c.dropout_rate)(x.astype(jnp.dtype(c.dtype)), deterministic=deterministic)
    bias = PositionBias(c, True, name="position_bias")(x.shape[1], x.shape[1]) + _mask_bias(mask[:, None, :])
    for i in range(c.encoder_layers):
      attn = Attention(c, name=f"layer_{i}_attention")
      x = _sublayer(c, f"layer_{i}_attention", lambda h, a=attn: a(h, h, bias, deterministic), x, deterministic)
      ffn = FeedForward(c, name=f"layer_{i}_ffn")
      x = _sublayer(c, f"layer_{i}_ffn", lambda h, f=ffn: f(h, deterministic), x, deterministic)
    x = RMSNorm(c.layer_norm_eps, c.dtype, name="final_norm")(x)
    return Dropout(c.dropout_rate)(x, deterministic=deterministic)


class T5Decoder(nn.Module):
  """Causal decoder: y [B, S, d_model] attends to itself (causally) and to memory [B, L, d_model].

  Memory may also be [Q, L, d_model] for B = Q * W rows of y, each query's W rows consecutive (a beam search's beams):
  the cross-attention then reads each query's memory once for its W rows, as one sequence of W * S positions (cross-
  attention treats target positions independently, so this is the per-row computation; the memory's keys and values,
  2 L d_model^2 multiply-adds a row and layer, more than the rest of a prefix of a few tokens, are projected Q times
  instead of B: bench/gr_decoder_memory.py). In training the folded attention
  weights draw their dropout masks in that layout: independent elements at the same rate, other draws than per row."""
  config: T5Config

  @nn.compact
  def __call__(self, y, memory, memory_mask, deterministic: bool = True):
    c = self.config
    b, s = y.shape[:2]
    q = memory.shape[0]
    if q != b and (b % q or memory_mask.shape[0] != q):
      raise ValueError(f"T5Decoder: memory of {q} rows for {b} rows of y: memory must have y's rows, or divide "
                       f"them with a mask of its rows, got mask {tuple(memory_mask.shape)}")

    def fold(fn):  # [B, S, d] -> [Q, W * S, d] around the cross-attention when the memory is per query
      return fn if q == b else lambda h: fn(h.reshape(q, (b // q) * s, h.shape[-1])).reshape(b, s, -1)
    y = Dropout(c.dropout_rate)(y.astype(jnp.dtype(c.dtype)), deterministic=deterministic)
    causal = jnp.asarray(np.tril(np.ones((s, s), bool)))[None]
    self_bias = PositionBias(c, False, name="position_bias")(s, s) + _mask_bias(causal)
    cross_bias = _mask_bias(memory_mask[:, None, :])
    for i in range(c.decoder_layers):
      attn = Attention(c, name=f"layer_{i}_self_attention")
      y = _sublayer(c, f"layer_{i}_self_attention", lambda h, a=attn: a(h, h, self_bias, deterministic),
                    y, deterministic)
      cross = Attention(c, name=f"layer_{i}_cross_attention")
      y = _sublayer(c, f"layer_{i}_cross_attention", fold(lambda h, a=cross: a(h, memory, cross_bias, deterministic)),
                    y, deterministic)
      ffn = FeedForward(c, name=f"layer_{i}_ffn")
      y = _sublayer(c, f"layer_{i}_ffn", lambda h, f=ffn: f(h, deterministic), y, deterministic)
    y = RMSNorm(c.layer_norm_eps, c.dtype, name="final_norm")(y)
    return Dropout(c.dropout_rate)(y, deterministic=deterministic)


class T5(nn.Module):
  """Token ids -> shared embedding -> encoder; decoder over given input embeddings (the caller's tokens).

  `encode(ids [B, L], mask)` -> memory; `decode(y [B, S, d_model], memory, mask)` -> [B, S, d_model];
  `__call__` runs both (the decoder input given as ids of the same vocabulary).
  """
  config: T5Config

  def setup(self):
    c = self.config
    if c.vocab_size:
      self.embedding = nn.Embed(c.vocab_size, c.d_model, embedding_init=nn.initializers.normal(1.0),
                                param_dtype=jnp.float32, name="embedding")
    self.encoder = T5Encoder(c, name="encoder")
    self.decoder = T5Decoder(c, name="decoder")

  def encode(self, ids, mask, deterministic: bool = True):
    return self.encoder(self.embedding(ids), mask, deterministic)

  def decode(self, y, memory, memory_mask, deterministic: bool = True):
    return self.decoder(y, memory, memory_mask, deterministic)

  def __call__(self, ids, mask, decoder_ids, deterministic: bool = True):
    memory = self.encode(ids, mask, deterministic)
    return self.decode(self.embedding(decoder_ids), memory, mask, deterministic)
