"""VidCLIP: the VideoComp dual encoder on frozen per-frame features (../shared/papers/videocomp.txt §4.1).

Video tower (§4.1: "temporal positional encoding after the final ViT layer", "concatenate all
frame-level tokens along the temporal dimension into [B, T·N, D]", "an attention pooler with two
layers: the first employs 196 queries, and the second aggregates them into a single global ...
embedding")::

  x [B, T, N, D] (frozen VideoPrism tokens; per-frame embeddings [B, T, D] are N = 1)
  x = Dense(LayerNorm(x)) + temporal_pos[t]          learned, one row per frame, shared by its N tokens
  x = reshape(x, [B, T·N, width])
  h = AttentionPool(queries=Q1)(x)   [B, Q1, width]  cross-attention from learned queries + MLP
  v = AttentionPool(queries=1)(h)    [B, 1, width]   -> LayerNorm -> Dense(embed_dim)

The pooler starts random (`pool_init="random"`) or as exact mean pooling (`pool_init="mean"`,
`mean_pool_params`), the paper config's choice: there the pooler is new on frozen tokens and the paper's rates
(1e-7 / 1e-6) are for a pretrained one (configs/comp/common.py).

Text tower (§4.1: "a CLS token to summarize the text features", "sequence length ... 160"): a BERT
encoder (`vidjax.models.bert.BertModel`, no pooler) whose final [CLS] state goes through
Dense(embed_dim). By default it starts from the real all-MiniLM-L6-v2 weights (`init_text_from`):
the paper's text tower (a 12-layer CLIP text transformer pretrained on DataComp-1B) is not
available offline. MiniLM's 512 learned positions cover the 160 tokens, so no resizing is needed.

With real VideoPrism weights the text tower can instead be VideoPrism's LvT text encoder
(`LvtText`: `videoprism.TextEncoder`, CLS appended last, causal, SentencePiece ids; `init_text_from_lvt`
places the `text_encoder` subtree of an official LvT checkpoint, `checkpoints.lvt_text_encoder`), so both towers start from VideoPrism.

Similarity is the cosine of the two L2-normalised embeddings (§3.4: "we use cosine similarity
between video and text embeddings"); the contrastive temperature is learnable, tau = exp(-log_scale)
with log_scale initialised to log(1 / 0.07) and clipped to scale <= 100 as in CLIP.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidjax.models import bert, videoprism
from vidjax.models.layers import scan_blocks
from vidjax.ops import flatten_dict, l2_normalize

Params = dict[str, Any]
MAX_LOGIT_SCALE = 100.0


@dataclasses.dataclass(frozen=True)
class LvtText:
  """VideoPrism's LvT text encoder as the text tower (`videoprism.TextEncoder`). LvT-B: vocabulary 32,000
  (c4_en), width 768, 12 layers, 12 heads, MLP 3072; LvT-L: 1024, 24, 16, 4096; logit cap 50 in both."""
  vocabulary_size: int
  model_dim: int
  num_layers: int
  num_heads: int
  mlp_dim: int
  atten_logit_cap: float = 50.0


@dataclasses.dataclass(frozen=True)
class VidClipConfig:
  """VidCLIP sizes. The defaults are the paper's where it gives them (§4.1) on a MiniLM text tower.

  Attributes:
    visual_dim: D of the frozen input tokens (768 for VideoPrism-B).
    frames: T, frames per video (16, §4.2).
    width: the video tower's width (the paper's ViT-L: 1024).
    pool_queries: Q1, queries of the first pooling layer (196, §4.1).
    pool_heads, pool_mlp: attention heads and MLP width of each pooling layer.
    embed_dim: the shared embedding width.
    text: the BERT text tower (all-MiniLM-L6-v2's shape by default; `use_pooler` is forced off).
    lvt: when set, the text tower is VideoPrism's LvT text encoder of this shape instead of `text`
      (input ids from its SentencePiece model; any length: its positions are sinusoidal).
    max_text_len: text tokens incl. [CLS]/[SEP] (160, §4.1).
    init_temperature: the starting tau (CLIP: 0.07).
    dtype: computation dtype; parameters stay float32.
    pool_init: "random" (every pooler weight drawn at random) or "mean" (`mean_pool_params`: both pooling layers
      start as exact mean pooling of their LayerNorm-ed tokens).
    text_block: in training, texts run through the text tower in rematerialized blocks of this many
      (`layers.scan_blocks`), so a step keeps one block's activations for the backward pass; 0: all in one pass.
    video_block: the same for the videos through the video tower (`video_activation_bytes`); 0: one pass.
  """
  visual_dim: int = 768
  frames: int = 16
  width: int = 1024
  pool_queries: int = 196
  pool_heads: int = 16
  pool_mlp: int = 4096
  embed_dim: int = 768
  text: bert.BertConfig = dataclasses.field(default_factory=bert.BertConfig)
  lvt: LvtText | None = None
  max_text_len: int = 160
  init_temperature: float = 0.07
  dtype: str = "float32"
  pool_init: str = "random"
  text_block: int = 0
  video_block: int = 0

  def __post_init__(self):
    for name in ("visual_dim", "frames", "width", "pool_queries", "pool_heads", "pool_mlp", "embed_dim",
                 "max_text_len"):
      value = getattr(self, name)
      if not isinstance(value, int) or value < 1:
        raise ValueError(f"VidClipConfig.{name}={value!r} must be a positive integer")
    if self.width % self.pool_heads:
      raise ValueError(f"VidClipConfig: width={self.width} is not divisible by pool_heads={self.pool_heads}")
    if self.lvt is None and self.max_text_len > self.text.max_position:
      raise ValueError(f"VidClipConfig: max_text_len={self.max_text_len} exceeds the text tower's "
                       f"max_position={self.text.max_position}")
    for name in ("text_block", "video_block"):
      if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
        raise ValueError(f"VidClipConfig.{name}={getattr(self, name)!r} must be an integer >= 0 (0: one pass)")
    if not 0.0 < self.init_temperature < 1.0:
      raise ValueError(f"VidClipConfig.init_temperature={self.init_temperature} must lie in (0, 1)")
    if self.pool_init not in ("random", "mean"):
      raise ValueError(f"VidClipConfig.pool_init={self.pool_init!r} is not one of ('random', 'mean')")


def video_activation_bytes(cfg: VidClipConfig, tokens_per_frame: int) -> int:
  """Bytes of activations one video of `cfg.frames` x `tokens_per_frame` tokens through the video tower keeps for
  the backward pass (float32): per input token its input row, about 10 width-wide rows (LayerNorm-ed, projected, the
  first pooler's keys and values) and the heads' attention rows over the first pooler's queries (3 each); per first
  pooler query about 16 width-wide and 4 MLP-wide rows (its MLP and the second pooler over it). Within 4% of XLA's
  own count (`memory_analysis`, CPU, float32) at the paper's shapes with 16 or 256 VideoPrism tokens a frame and at
  the tiny backbone's 4."""
  s, q = cfg.frames * tokens_per_frame, cfg.pool_queries
  return 4 * (s * (cfg.visual_dim + 10 * cfg.width + 3 * cfg.pool_heads * q) + q * (16 * cfg.width + 4 * cfg.pool_mlp))


def _dense(features: int, dtype, name: str) -> nn.Dense:
  return nn.Dense(features, dtype=dtype, param_dtype=jnp.float32, kernel_init=nn.initializers.normal(0.02),
                  name=name)


class AttentionPool(nn.Module):
  """Learned queries cross-attend to the tokens, then a residual MLP (pre-LayerNorm): [B, S, W] -> [B, Q, W]."""
  num_queries: int
  heads: int
  mlp: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x):
    b, _, w = x.shape
    queries = self.param("queries", nn.initializers.normal(0.02), (self.num_queries, w), jnp.float32)
    q = jnp.broadcast_to(queries.astype(self.dtype), (b, self.num_queries, w))
    kv = nn.LayerNorm(dtype=self.dtype, param_dtype=jnp.float32, name="kv_norm")(x)
    h = nn.MultiHeadDotProductAttention(num_heads=self.heads, dtype=self.dtype, param_dtype=jnp.float32,
                                        name="attention")(
        nn.LayerNorm(dtype=self.dtype, param_dtype=jnp.float32, name="q_norm")(q), kv)
    y = nn.LayerNorm(dtype=self.dtype, param_dtype=jnp.float32, name="mlp_norm")(h)
    y = _dense(self.mlp, self.dtype, "mlp_in")(y)
    y = _dense(w, self.dtype, "mlp_out")(nn.gelu(y))
    return h + y


class VideoTower(nn.Module):
  """Frozen per-frame tokens [B, T, N, D] (or [B, T, D]) -> unnormalised video embeddings [B, embed_dim]."""
  config: VidClipConfig

  @nn.compact
  def __call__(self, x, deterministic: bool = True):
    del deterministic  # no dropout in the video tower (the argument of `layers.scan_blocks`' modules)
    cfg = self.config
    dtype = jnp.dtype(cfg.dtype)
    if x.ndim == 3:
      x = x[:, :, None, :]
    if x.ndim != 4 or x.shape[1] != cfg.frames or x.shape[3] != cfg.visual_dim:
      raise ValueError(f"VidCLIP video input must be [B, T={cfg.frames}, N, D={cfg.visual_dim}] or "
                       f"[B, T, D], got {x.shape}")
    b, t, n, _ = x.shape
    x = nn.LayerNorm(dtype=dtype, param_dtype=jnp.float32, name="input_norm")(x.astype(dtype))
    x = _dense(cfg.width, dtype, "input_proj")(x)
    temporal = self.param("temporal_pos", nn.initializers.normal(0.02), (cfg.frames, cfg.width), jnp.float32)
    x = (x + temporal[None, :, None, :].astype(dtype)).reshape(b, t * n, cfg.width)
    h = AttentionPool(cfg.pool_queries, cfg.pool_heads, cfg.pool_mlp, dtype, name="pool_1")(x)
    h = AttentionPool(1, cfg.pool_heads, cfg.pool_mlp, dtype, name="pool_2")(h)[:, 0]
    h = nn.LayerNorm(dtype=dtype, param_dtype=jnp.float32, name="out_norm")(h)
    return _dense(cfg.embed_dim, dtype, "out_proj")(h).astype(jnp.float32)


class TextTower(nn.Module):
  """Token ids [B, S] (+ mask) -> unnormalised text embeddings [B, embed_dim] from the [CLS] state."""
  config: VidClipConfig

  @nn.compact
  def __call__(self, input_ids, attention_mask, deterministic: bool = True):
    cfg = self.config
    if input_ids.shape[-1] > cfg.max_text_len:
      raise ValueError(f"VidCLIP text input has {input_ids.shape[-1]} tokens, more than "
                       f"max_text_len={cfg.max_text_len}; truncate in the tokenizer")
    if cfg.lvt is not None:  # CoCa-style: the CLS is appended after the tokens (padding 0) and read last
      lv = cfg.lvt
      paddings = 1.0 - jnp.asarray(attention_mask, jnp.float32)
      summary = videoprism.TextEncoder(
          name="lvt", vocabulary_size=lv.vocabulary_size, model_dim=lv.model_dim, num_layers=lv.num_layers,
          num_heads=lv.num_heads, mlp_dim=lv.mlp_dim, atten_logit_cap=lv.atten_logit_cap,
          fprop_dtype=jnp.dtype(cfg.dtype))(input_ids, paddings)[:, -1]
    else:
      text_cfg = dataclasses.replace(cfg.text, use_pooler=False, dtype=cfg.dtype)
      summary = bert.BertModel(text_cfg, name="bert")(input_ids, attention_mask, deterministic=deterministic)[0][:, 0]
    return _dense(cfg.embed_dim, jnp.dtype(cfg.dtype), "out_proj")(summary).astype(jnp.float32)


class VidClip(nn.Module):
  """The dual encoder. `__call__` gives both unit embeddings; `encode_video` / `encode_text` one side."""
  config: VidClipConfig

  def setup(self):
    self.video = VideoTower(self.config)
    self.text = TextTower(self.config)
    self.log_scale = self.param("log_scale", nn.initializers.constant(math.log(1.0 / self.config.init_temperature)),
                                (), jnp.float32)

  def encode_video(self, x, deterministic: bool = True):
    """`deterministic=False` (training): in rematerialized blocks of `video_block` videos (`layers.scan_blocks`)."""
    block = self.config.video_block
    if deterministic or block == 0 or x.shape[0] <= block:
      return l2_normalize(self.video(x))
    return l2_normalize(scan_blocks(self.video, (x,), block, False))

  def encode_text(self, input_ids, attention_mask, deterministic: bool = True):
    block = self.config.text_block
    if deterministic or block == 0 or input_ids.shape[0] <= block:
      return l2_normalize(self.text(input_ids, attention_mask, deterministic))
    return l2_normalize(scan_blocks(self.text, (input_ids, attention_mask), block, deterministic))

  def temperature(self):
    """tau = 1 / min(exp(log_scale), 100) (CLIP's clipped logit scale)."""
    return 1.0 / jnp.minimum(jnp.exp(self.log_scale), MAX_LOGIT_SCALE)

  def __call__(self, video, input_ids, attention_mask, deterministic: bool = True):
    """-> (video [B, E], text [B', E], tau): unit embeddings and the temperature."""
    return self.encode_video(video), self.encode_text(input_ids, attention_mask, deterministic), self.temperature()


def mean_pool_params(pool: Params) -> Params:
  """An `AttentionPool`'s params set so that it computes exact mean pooling: every query's output is the mean of
  the LayerNorm-ed tokens (`kv_norm`). A new tree.

  The query projection is zero, so every attention logit is 0 and the attention uniform; the value and output
  projections are the identity (zero biases), so each head passes its slice of the mean through; the residual
  MLP's output projection is zero. The key projection and the MLP's input stay random: with both query and key
  projections zero, neither would get a gradient (each one's gradient is proportional to the other).
  """
  att = pool["attention"]
  w = att["out"]["kernel"].shape[-1]
  heads, head_dim = att["value"]["bias"].shape
  eye = jnp.eye(w, dtype=jnp.float32)
  zero = lambda x: jnp.zeros_like(x)  # noqa: E731
  new_att = {**att,
             "query": jax.tree.map(zero, att["query"]),
             "value": {"kernel": eye.reshape(w, heads, head_dim), "bias": zero(att["value"]["bias"])},
             "out": {"kernel": eye.reshape(heads, head_dim, w), "bias": zero(att["out"]["bias"])}}
  return {**pool, "attention": new_att, "mlp_out": jax.tree.map(zero, pool["mlp_out"])}


def init_params(model: VidClip, rng: jax.Array, tokens_per_frame: int = 1) -> Params:
  """Every VidCLIP parameter, from dummy inputs of the config's shapes (works under `jax.eval_shape`); with
  `pool_init="mean"` both pooling layers start as mean pooling (`mean_pool_params`)."""
  cfg = model.config
  video = jnp.zeros((1, cfg.frames, tokens_per_frame, cfg.visual_dim), jnp.float32)
  ids = jnp.zeros((1, cfg.max_text_len), jnp.int32)
  params = jax.jit(lambda key: model.init(key, video, ids, jnp.ones_like(ids))["params"])(rng)  # one compilation
  if cfg.pool_init == "mean":
    tower = params["video"]
    params = {**params, "video": {**tower, **{k: mean_pool_params(tower[k]) for k in ("pool_1", "pool_2")}}}
  return params


def init_text_from(params: Params, bert_params: Params) -> Params:
  """Copies a pretrained `bert.BertModel` tree (e.g. all-MiniLM-L6-v2) into the text tower; a new tree."""
  text = params["text"]
  new_bert = bert.copy_pretrained(text["bert"], bert_params, what="VidCLIP text tower",
                                  hint="set the text tower's num_layers to the checkpoint's")
  return {**params, "text": {**text, "bert": new_bert}}


def init_text_from_lvt(params: Params, text_encoder: Params) -> Params:
  """Puts an LvT text encoder tree (`checkpoints.lvt_text_encoder`: the `text_encoder` subtree of an official
  VideoPrism LvT checkpoint) into the text tower; a new tree."""
  if "lvt" not in params["text"]:
    raise ValueError("init_text_from_lvt: the VidCLIP text tower is not an LvT encoder (set VidClipConfig.lvt)")
  want = {k: np.shape(v) for k, v in flatten_dict(params["text"]["lvt"]).items()}
  got = {k: np.shape(v) for k, v in flatten_dict(text_encoder).items()}
  if got != want:
    raise ValueError(f"init_text_from_lvt: the LvT tree does not match the text tower: "
                     f"{sorted(set(want.items()) ^ set(got.items()))[:6]}")
  lvt = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), text_encoder)
  return {**params, "text": {**params["text"], "lvt": lvt}}
