"""VEDJE: the cached joint reranker of ../shared/papers/vedje.txt as pure Flax (linen) modules.

Implements §2.2-2.5 with the concrete operators of Appendix A.2 (architecture), A.3 (the heads
the training objectives read) and A.4 (cache precision is a storage matter, see `vidjax.ops`):

* `FrameCompressor` (eq. 1-2) — offline, once per video: M learned queries per frame cross-attend
  to THAT frame's patch tokens only, through one shared key/value projection d_v -> d_l and a
  2-layer transformer-decoder stack; the cache is the ordered concatenation
  Z(v) = [Z_1; ...; Z_T] [B, T*M, d_l].
* `JointReranker` (eq. 5) — online: a BERT encoder (MiniLM shape, `vidjax.models.bert` layers, so
  MiniLM weights load into it) over [text token embeddings; cache tokens] with its own position
  table covering the whole input; c(q, v) = the final [CLS] state; the residual prior
  c~ = c + e_rho(rho); score s = head(c~). Its training heads (A.3): the VTC text projection and
  the tied MLM head.
* `FutureDeltaPredictor` F_omega (eq. 3, A.2) — training only: fixed sinusoidal (h, p) queries,
  a 2-layer decoder cross-attending to one frame's Z_t, LayerNorm, Linear -> d_v.
* `Vedje` — the three composed for training (one parameter tree: compressor / reranker /
  delta_predictor); deployment uses the compressor subtree offline and the reranker subtree online.
* `init_from_minilm` — copies a pretrained `bert.BertModel` tree (e.g. all-MiniLM-L6-v2 from
  `vidjax.checkpoints.load_bert_safetensors`) into a reranker tree.

Design decisions the paper leaves open (each also noted where it is implemented):

* LayerNorm placement of the compressor / F_omega decoders: POST-LN. A.2 specifies these stacks
  by exactly the arguments of PyTorch's `nn.TransformerDecoderLayer` (d_model 384, 8 heads, FFN
  1536, GELU, dropout 0.1), whose default is post-LN (`norm_first=False`), and lists "LayerNorm on
  the output" as an extra for F_omega only (the optional final norm of `nn.TransformerDecoder`),
  not for the compressor. So a layer is
      x = LN(x + Drop(SelfAttn(x)));  x = LN(x + Drop(CrossAttn(x, memory)));
      x = LN(x + Drop(W2 Drop(GELU(W1 x))))
  with LayerNorm eps 1e-5, exact (erf) GELU and dropout on the attention weights too, as PyTorch.
  The cache therefore leaves the compressor LayerNorm'd, on the scale of BERT's embeddings.
* Pooling: §2.4 calls c(q, v) "a pooled pairwise representation" without naming the operator,
  and A.3 calls the VTC input the "text CLS". We take the final-layer [CLS] hidden state for both
  (the BLIP/EDJE reading); BERT's tanh pooler is not used (all-MiniLM-L6-v2's sentence objective
  never trained it), so `init_from_minilm` does not copy it.
* Position embeddings: the reranker owns one learned table of `max_text_len + T*M` rows
  (64 + 64 = 128 by default). Text token i gets row i; cache token j gets row `max_text_len + j`
  whatever the padded text length S <= max_text_len, so a cache slot (frame t, query m) always
  reads the same position embedding (the temporal layout of eq. 2 is addressable). The table is
  initialised from BERT's first rows where they overlap (all 128 for MiniLM's 512) and keeps its
  random init beyond.
* Input embedding of the cache: cache tokens replace word embeddings at their positions and, like
  text, get position + token-type embeddings, then the BERT embedding LayerNorm and dropout (what
  feeding `inputs_embeds` to a HF BERT does). The paper does not mention segment ids; we give the
  text BERT's segment A (type 0) and the cache segment B (type `cache_token_type` = 1), the BERT
  convention for a second input.
* VTC text feature: a TEXT-ONLY pass of the same encoder (no cache; the in-batch InfoNCE of A.3
  needs a text vector that does not depend on the candidate video), final [CLS] state, one linear
  layer to `vtc_dim` (768 = VideoPrism-LvT-B). L2 normalization is the loss's job.
* MLM head: BERT's — Dense(d, d) -> GELU -> LayerNorm, then the transposed word-embedding matrix
  (tied, no separate decoder kernel) plus a vocabulary bias; it reads the JOINT pass over the
  masked text and the cache (A.3: "computed jointly with the cached video tokens in context").

Shapes::

    patches         [B, T, P, d_v]   frozen per-frame patch tokens X_t (VideoPrism: P=256, d_v=768)
    cache           [B, N, d_l]      N = T*M cached tokens Z(v) (width `cache_dim` when it sets its own)
    input_ids       [B, S] int       WordPiece ids incl. [CLS]/[SEP], S <= max_text_len (64)
    attention_mask  [B, S]           1 = real token, 0 = padding
    prior           [B]              stage-1 score rho(q, v)
    -> score        [B]              float32

`dtype` is the computation dtype (e.g. "bfloat16"); parameters are float32 and every public
output is float32. Models know no files: weights come in as parameter trees.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidjax.models import bert
from vidjax.models.bert import BertConfig, BertLayer
from vidjax.models.layers import Dropout, scan_blocks
from vidjax.ops import dropout_keep_mask

Params = dict[str, Any]

# How the T*M cache tokens are written (§3.4, Table 4), all at the same size T*M x d_l:
#   ordered          VEDJE: M queries per frame see that frame only; frames concatenated in order;
#   frame_mean       FrameSet-EDJE mean: T*M queries over the time-averaged patches (order-blind);
#   frame_attention  FrameSet-EDJE attn.: T*M queries over all T*P patches as one unordered set;
#   middle_frame     EDJE middle frame: T*M queries over frame T // 2 only (image-only).
CACHE_STRUCTURES = ("ordered", "frame_mean", "frame_attention", "middle_frame")


# ---------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class VedjeConfig:
  """VEDJE hyperparameters; the defaults are the paper's (App. A.2-A.4).

  Cache (A.2): T = 16 frames, M = 4 tokens per frame (TM = 64; the compact TM = 16 is M = 1),
  VideoPrism-B patches P = 256 of width d_v = 768.
  Joint reranker (A.2, `text`): microsoft/MiniLM-L12-H384-uncased — 12 layers, d_l = 384, 12 heads,
  FFN 1536, vocab 30522, text at most 64 WordPiece tokens incl. [CLS]/[SEP].
  Compressor and F_omega (A.2): 2 decoder layers each, 8 heads, FFN 4 d_l = 1536, GELU,
  dropout 0.1; F_omega's horizon set H = {3} (A.3, A.14).
  e_rho (A.2): Linear(1, 64) -> GELU -> Linear(64, d_l); score head Linear(d_l, d_l) -> GELU ->
  Linear(d_l, 1). VTC projection to d_clip = 768 (A.3, VideoPrism-LvT-B).

  `paper_shape()` is these defaults; `minilm_l6()` is the all-MiniLM-L6-v2 shape (6 layers) whose
  encoder can start from the real weights (`init_from_minilm`).
  """
  # Cache (eq. 1-2).
  frames: int = 16                   # T
  tokens_per_frame: int = 4          # M
  patches: int = 256                 # P
  visual_dim: int = 768              # d_v
  # Joint encoder (BERT / MiniLM): its vocabulary, width d_l (= `hidden_size`, shared by every module unless
  # `cache_dim` sets the cache's own), depth, heads, FFN, LayerNorm eps and dropouts. Its positions and pooler are the
  # reranker's (`bert_config`).
  text: BertConfig = BertConfig(num_layers=12, use_pooler=False)
  max_text_len: int = 64
  cache_token_type: int = 1          # BERT segment id of cache tokens (text is segment 0)
  # Width of the cache tokens, the compressor's and F_omega's (`cache_width`): 0 = the joint encoder's d_l (the
  # paper's single width). Another width keeps the cache while the encoder changes (Table 17's control: a BERT-base
  # encoder over the main model's 384-wide cache); the reranker then reads the cache through a learned linear map to
  # its width (`cache_proj`, an online parameter).
  cache_dim: int = 0
  # Frame-local compressor (A.2).
  compressor_layers: int = 2
  compressor_heads: int = 8
  compressor_mlp: int = 1536
  # Future-delta predictor F_omega (A.2, training only).
  predictor_layers: int = 2
  predictor_heads: int = 8
  predictor_mlp: int = 1536
  horizons: tuple[int, ...] = (3,)
  # Shared by both decoder stacks (PyTorch nn.TransformerDecoderLayer defaults).
  decoder_dropout: float = 0.1
  decoder_layer_norm_eps: float = 1e-5
  # Prior encoder e_rho and VTC head.
  prior_hidden: int = 64
  prior_scale: float = 1.0           # rho enters e_rho as prior_scale * rho (1 = the raw stage-1 score)
  vtc_dim: int = 768                 # d_clip of the stage-1 space (VideoPrism-LvT-B)
  dtype: str = "float32"             # computation dtype; params stay float32
  # Ablations (§3.4, §3.6); the defaults are VEDJE.
  cache_structure: str = "ordered"   # one of CACHE_STRUCTURES
  use_prior: bool = True             # e_rho(rho) added to c (eq. 5); False = "joint only"
  use_joint: bool = True             # the joint pass c(q, v); False = "prior only" (score = head(e_rho))
  # Inference only: `JointReranker.rerank` runs its pairs in blocks of this many (a scan; the last block
  # padded), so each block's [pairs * L, FFN] activations stay in cache on a CPU: 62-65% -> 80-86% of
  # the matmul rate for K = 100, 64-token caches (bench/vedje_rerank.py). 0 = every pair in one pass
  # (what an accelerator wants).
  scan_pairs: int = 20
  # Training only: a step's joint passes (B queries x K candidates) run in rematerialized blocks of this many
  # pairs, so their activations are bounded by the block (recomputed in the backward pass) instead of growing with
  # B*K: at the paper's shapes one pair holds ~38 MB, and B = 64 in-batch pairs is 4096 passes, ~154 GB at once.
  # 0 = every pair in one pass (the default; a step with at most this many pairs also runs in one pass).
  train_pairs: int = 0

  def __post_init__(self):
    object.__setattr__(self, "horizons", tuple(int(h) for h in self.horizons))
    problems = []
    if self.cache_dim < 0:
      problems.append(f"cache_dim={self.cache_dim} must be >= 0 (0 = the joint encoder's width)")
    for what, width, heads in (("text.num_heads", "hidden_size", self.text.num_heads),
                               ("compressor_heads", "cache_width", self.compressor_heads),
                               ("predictor_heads", "cache_width", self.predictor_heads)):
      if heads < 1 or getattr(self, width) % heads:
        problems.append(f"{width}={getattr(self, width)} is not divisible by {what}={heads}")
    if self.cache_width % 4:
      problems.append(f"cache_width={self.cache_width} must be a multiple of 4 (F_omega's "
                      "queries split it in two sinusoidal halves of sin/cos pairs)")
    for name in ("frames", "tokens_per_frame", "patches", "visual_dim", "max_text_len",
                 "compressor_layers", "predictor_layers", "prior_hidden", "vtc_dim"):
      if getattr(self, name) < 1:
        problems.append(f"{name}={getattr(self, name)} must be >= 1")
    if not self.horizons or any(h < 1 for h in self.horizons):
      problems.append(f"horizons={self.horizons} must be a non-empty set of integers >= 1")
    if not 0 <= self.cache_token_type < self.text.type_vocab_size:
      problems.append(f"cache_token_type={self.cache_token_type} is not a segment id below "
                      f"text.type_vocab_size={self.text.type_vocab_size}")
    if self.cache_structure not in CACHE_STRUCTURES:
      problems.append(f"cache_structure={self.cache_structure!r} is not one of {CACHE_STRUCTURES}")
    if self.scan_pairs < 0:
      problems.append(f"scan_pairs={self.scan_pairs} must be >= 0 (0 = all pairs in one pass)")
    if self.train_pairs < 0:
      problems.append(f"train_pairs={self.train_pairs} must be >= 0 (0 = all pairs in one pass)")
    if not (self.use_prior or self.use_joint):
      problems.append("use_prior and use_joint are both False: the score would read nothing")
    jnp.dtype(self.dtype)  # fails loudly on an unknown dtype name
    if problems:
      raise ValueError("VedjeConfig: " + "; ".join(problems))

  @classmethod
  def paper_shape(cls, **overrides) -> "VedjeConfig":
    """The paper's model (A.2): MiniLM-L12-H384 reranker (~33M), T = 16, M = 4."""
    return cls(**overrides)

  @classmethod
  def minilm_l6(cls, **overrides) -> "VedjeConfig":
    """The all-MiniLM-L6-v2 shape (6 layers, otherwise as the paper), loadable from the real weights."""
    return cls(**{"text": BertConfig(num_layers=6, use_pooler=False), **overrides})

  @property
  def hidden_size(self) -> int:
    """d_l: the joint encoder's width, which the heads share (and the cache, unless `cache_dim` sets its own)."""
    return self.text.hidden_size

  @property
  def cache_width(self) -> int:
    """The cache tokens' width, the compressor's and F_omega's: `cache_dim`, or d_l when it is 0."""
    return self.cache_dim or self.hidden_size

  @property
  def cache_len(self) -> int:
    """N = T * M cached tokens per video."""
    return self.frames * self.tokens_per_frame

  @property
  def input_len(self) -> int:
    """Rows of the reranker's position table: max_text_len + T * M."""
    return self.max_text_len + self.cache_len

  def bert_config(self) -> BertConfig:
    """The `BertConfig` of the reranker's encoder layers (no pooler; positions cover the joint input)."""
    return dataclasses.replace(self.text, max_position=self.input_len, use_pooler=False, dtype=self.dtype)


# ---------------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------------


def _dense(features: int, dtype, name: str, init=nn.linear.default_kernel_init) -> nn.Dense:
  return nn.Dense(features, dtype=dtype, param_dtype=jnp.float32, kernel_init=init, name=name)


def sinusoidal_encoding(positions: Sequence[int] | np.ndarray, dim: int) -> np.ndarray:
  """The standard (Vaswani et al.) sinusoidal encoding: [N] positions -> [N, dim] float32.

  PE[pos, 2i] = sin(pos / 10000^(2i/dim)), PE[pos, 2i+1] = cos(pos / 10000^(2i/dim)).
  """
  if dim % 2:
    raise ValueError(f"sinusoidal_encoding needs an even dim, got {dim}")
  pos = np.asarray(positions, np.float64)[:, None]
  freq = 1.0 / (10000.0 ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
  out = np.zeros((pos.shape[0], dim), np.float64)
  out[:, 0::2] = np.sin(pos * freq)
  out[:, 1::2] = np.cos(pos * freq)
  return out.astype(np.float32)


def delta_queries(horizons: Sequence[int], patches: int, dim: int) -> np.ndarray:
  """F_omega's fixed queries (A.2): [|H| * P, dim], row i * P + p is (h_i, p).

  The first half of `dim` is the sinusoidal encoding of the horizon h, the second half that of
  the patch position p in {0, ..., P-1}. Not a parameter.
  """
  half = dim // 2
  h_part = np.repeat(sinusoidal_encoding(horizons, half), patches, axis=0)
  p_part = np.tile(sinusoidal_encoding(np.arange(patches), half), (len(horizons), 1))
  return np.concatenate([h_part, p_part], axis=1)


def heads_first_attention(query, key, value, bias=None, mask=None, broadcast_dropout=True, dropout_rng=None,
                          dropout_rate=0.0, deterministic=False, dtype=None, precision=None, module=None,
                          force_fp32_for_softmax=False, **unused):
  """`flax.linen.dot_product_attention`'s computation (same scaling, masking, fp32 softmax) with the
  heads moved in front of the two products: [..., L, H, c] -> [..., H, L, c].

  XLA:CPU runs the products as batched matmuls that way, about twice as fast for the many small
  per-frame attentions of the compressor and F_omega. Without dropout, results equal flax's to
  float rounding; dropout masks come from `ops.dropout_keep_mask` (same law, cheaper draws).
  """
  del module, force_fp32_for_softmax, unused  # the softmax runs in float32 here always
  dtype = dtype or query.dtype
  q = jnp.swapaxes(query, -3, -2) / jnp.sqrt(query.shape[-1]).astype(dtype)
  k, v = jnp.swapaxes(key, -3, -2), jnp.swapaxes(value, -3, -2)
  logits = jnp.einsum("...hqc,...hkc->...hqk", q, k, precision=precision).astype(jnp.float32)
  if bias is not None:
    logits = logits + bias
  if mask is not None:
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
  weights = jax.nn.softmax(logits, axis=-1).astype(dtype)
  if not deterministic and dropout_rate > 0.0:
    shape = weights.shape if not broadcast_dropout else (1,) * (weights.ndim - 2) + weights.shape[-2:]
    keep, keep_prob = dropout_keep_mask(dropout_rng, shape, dropout_rate)
    weights = weights * (keep / keep_prob).astype(dtype)
  out = jnp.einsum("...hqk,...hkc->...hqc", weights, v, precision=precision)
  return jnp.swapaxes(out, -3, -2)


class TransformerDecoderLayer(nn.Module):
  """One post-LN transformer-decoder layer (PyTorch `nn.TransformerDecoderLayer`, norm_first=False).

  x = LN(x + Drop(SelfAttn(x))); x = LN(x + Drop(CrossAttn(x, memory)));
  x = LN(x + Drop(Dense(Drop(GELU(Dense(x)))))). No masks: every query sees every query and every
  memory token (the memory is one frame's tokens). Attention weights get dropout as in PyTorch.
  """
  d_model: int
  num_heads: int
  mlp_dim: int
  dropout_rate: float = 0.1
  layer_norm_eps: float = 1e-5
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, memory: jax.Array, deterministic: bool = True) -> jax.Array:
    """x [B, Q, d], memory [B, K, d] -> [B, Q, d] (computation dtype)."""
    drop = lambda t: Dropout(self.dropout_rate)(t, deterministic=deterministic)  # noqa: E731
    norm = lambda name: nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype,  # noqa: E731
                                     param_dtype=jnp.float32, name=name)
    attention = lambda name: nn.MultiHeadDotProductAttention(  # noqa: E731
        num_heads=self.num_heads, qkv_features=self.d_model, out_features=self.d_model,
        dropout_rate=self.dropout_rate, broadcast_dropout=False, dtype=self.dtype,
        param_dtype=jnp.float32, force_fp32_for_softmax=True, attention_fn=heads_first_attention,
        name=name)
    x = x.astype(self.dtype)
    memory = memory.astype(self.dtype)
    x = norm("self_attention_norm")(
        x + drop(attention("self_attention")(x, x, x, deterministic=deterministic)))
    x = norm("cross_attention_norm")(
        x + drop(attention("cross_attention")(x, memory, memory, deterministic=deterministic)))
    y = nn.gelu(_dense(self.mlp_dim, self.dtype, "mlp_in")(x), approximate=False)
    y = _dense(self.d_model, self.dtype, "mlp_out")(drop(y))
    return norm("mlp_norm")(x + drop(y))


# ---------------------------------------------------------------------------------------------
# Offline: the frame-local compressor (eq. 1-2)
# ---------------------------------------------------------------------------------------------


class FrameCompressor(nn.Module):
  """Frame-local cache writer (eq. 1-2, A.2): patches [B, T, P, d_v] -> cache Z(v) [B, T*M, d_c] (d_c =
  `config.cache_width`, d_l by default).

  Frames are folded into the batch ([B*T, P, d_v]) so each frame's M queries can only see that
  frame's patches: Z_t depends on X_t alone, and row block [t*M, (t+1)*M) of the cache is Z_t.
  The ablation structures of §3.4 (`CACHE_STRUCTURES`) keep the size T*M x d_l (T = config.frames)
  but let T*M queries read the time-averaged patches, all T*P patches as one unordered set, or the
  middle frame only.
  `kv_proj` is the single shared projection W_K = W_V (d_v -> d_l) of A.2; its output is the
  memory both decoder layers cross-attend to (each attention then has its own in-projections,
  as in a standard decoder). Post-LN layers (see the module docstring).

  Parameters: query_tokens [M, d_l] (Q_0; [T*M, d_l] for the unordered structures), kv_proj, layer_{0..L-1} (`TransformerDecoderLayer`).
  """
  config: VedjeConfig

  @nn.compact
  def __call__(self, patches: jax.Array, deterministic: bool = True) -> jax.Array:
    """patches [B, T, P, d_v] -> cache [B, T*M, d_c] float32 (T may differ from config.frames)."""
    cfg = self.config
    if patches.ndim != 4 or patches.shape[-1] != cfg.visual_dim:
      raise ValueError(f"FrameCompressor expects patches [B, T, P, d_v={cfg.visual_dim}], got "
                       f"shape {tuple(patches.shape)}")
    dtype = jnp.dtype(cfg.dtype)
    b, t, p, dv = patches.shape
    d, m = cfg.cache_width, cfg.tokens_per_frame
    x = patches.astype(dtype)
    if cfg.cache_structure == "ordered":      # [B*T, P, d_v]: each frame its own memory
      memory, groups, queries_per_group = x.reshape(b * t, p, dv), b * t, m
    elif cfg.cache_structure == "frame_mean":
      memory, groups, queries_per_group = jnp.mean(x, axis=1), b, cfg.cache_len
    elif cfg.cache_structure == "frame_attention":
      memory, groups, queries_per_group = x.reshape(b, t * p, dv), b, cfg.cache_len
    else:  # middle_frame
      memory, groups, queries_per_group = x[:, t // 2], b, cfg.cache_len
    memory = _dense(d, dtype, "kv_proj")(memory)
    queries = self.param("query_tokens", nn.initializers.normal(0.02), (queries_per_group, d), jnp.float32)
    x = jnp.broadcast_to(queries.astype(dtype), (groups, queries_per_group, d))
    for i in range(cfg.compressor_layers):
      x = TransformerDecoderLayer(d, cfg.compressor_heads, cfg.compressor_mlp, cfg.decoder_dropout,
                                  cfg.decoder_layer_norm_eps, dtype, name=f"layer_{i}")(
                                      x, memory, deterministic)
    return x.reshape(b, t * m, d).astype(jnp.float32)


# ---------------------------------------------------------------------------------------------
# Online: the joint reranker (eq. 5)
# ---------------------------------------------------------------------------------------------


class JointEmbeddings(nn.Module):
  """BERT input embeddings over [text tokens; cache tokens] with the reranker's own position table.

  Parameter names are `bert.BertEmbeddings`' (word_embeddings, position_embeddings,
  token_type_embeddings, layer_norm) so pretrained trees copy by name; the position table has
  `config.input_len` rows. Text token i -> position i, type 0; cache token j -> position
  max_text_len + j, type cache_token_type. Sum -> LayerNorm -> dropout.
  """
  config: VedjeConfig

  def setup(self):
    cfg = self.config
    dtype = jnp.dtype(cfg.dtype)
    embed = lambda n: nn.Embed(n, cfg.hidden_size, dtype=dtype, param_dtype=jnp.float32,  # noqa: E731
                               embedding_init=nn.initializers.normal(0.02))
    self.word_embeddings = embed(cfg.text.vocab_size)
    self.position_embeddings = embed(cfg.input_len)
    self.token_type_embeddings = embed(cfg.text.type_vocab_size)
    self.layer_norm = nn.LayerNorm(epsilon=cfg.text.layer_norm_eps, dtype=dtype, param_dtype=jnp.float32)
    self.dropout = Dropout(cfg.text.dropout_rate)

  def __call__(self, input_ids: jax.Array, cache: Optional[jax.Array] = None,
               deterministic: bool = True) -> jax.Array:
    """input_ids [B, S], cache [B, N, d] or None -> [B, S + N, d] (computation dtype)."""
    cfg = self.config
    s = input_ids.shape[1]
    positions = jnp.arange(s)
    types = jnp.zeros((s,), jnp.int32)
    x = self.word_embeddings(input_ids)
    if cache is not None:
      n = cache.shape[1]
      x = jnp.concatenate([x, cache.astype(x.dtype)], axis=1)
      positions = jnp.concatenate([positions, cfg.max_text_len + jnp.arange(n)])
      types = jnp.concatenate([types, jnp.full((n,), cfg.cache_token_type, jnp.int32)])
    x = x + self.position_embeddings(positions)[None] + self.token_type_embeddings(types)[None]
    return self.dropout(self.layer_norm(x), deterministic=deterministic)

  def attend(self, x: jax.Array) -> jax.Array:
    """x [..., d] -> x @ word_embeddings^T [..., V] (the tied MLM decoder)."""
    return self.word_embeddings.attend(x)


class JointEncoder(nn.Module):
  """The reranker's BERT: `JointEmbeddings` then `bert.BertLayer` x num_layers (post-LN BERT).

  Parameter tree = `bert.BertModel`'s without the pooler and with a position table of
  `config.input_len` rows: embeddings/{word,position,token_type}_embeddings, embeddings/layer_norm,
  layer_{i}/... (see `init_from_minilm`).
  """
  config: VedjeConfig

  def setup(self):
    bert_cfg = self.config.bert_config()
    self.embeddings = JointEmbeddings(self.config)
    self.layers = [BertLayer(bert_cfg, name=f"layer_{i}") for i in range(bert_cfg.num_layers)]

  def __call__(self, input_ids: jax.Array, attention_mask: jax.Array,
               cache: Optional[jax.Array] = None, deterministic: bool = True) -> jax.Array:
    """input_ids [B, S], attention_mask [B, S], cache [B, N, d] or None -> [B, S(+N), d]."""
    cfg = self.config
    if input_ids.ndim != 2 or attention_mask.shape != input_ids.shape:
      raise ValueError(f"expected input_ids and attention_mask [B, S], got {tuple(input_ids.shape)}"
                       f" and {tuple(attention_mask.shape)}")
    if input_ids.shape[1] > cfg.max_text_len:
      raise ValueError(f"text length {input_ids.shape[1]} exceeds max_text_len={cfg.max_text_len} "
                       "(A.2: 64 WordPiece tokens incl. [CLS]/[SEP]); truncate in the tokenizer")
    mask = attention_mask > 0
    if cache is not None:
      if (cache.ndim != 3 or cache.shape[0] != input_ids.shape[0]
          or cache.shape[2] != cfg.hidden_size or cache.shape[1] > cfg.cache_len):
        raise ValueError(f"expected cache [B={input_ids.shape[0]}, N <= {cfg.cache_len}, "
                         f"{cfg.hidden_size}], got {tuple(cache.shape)}")
      mask = jnp.concatenate([mask, jnp.ones(cache.shape[:2], bool)], axis=1)
    x = self.embeddings(input_ids, cache, deterministic)
    for layer in self.layers:
      x = layer(x, mask, deterministic)
    return x

  def attend(self, x: jax.Array) -> jax.Array:
    return self.embeddings.attend(x)


class JointReranker(nn.Module):
  """The online cached joint reranker (§2.4, eq. 5, A.2) and its training heads (A.3).

  score = head(c + e_rho(rho)), c = final [CLS] state of BERT over [text; cache];
  e_rho = Linear(1, 64) -> GELU -> Linear(64, d_l); head = Linear(d_l, d_l) -> GELU ->
  Linear(d_l, 1). GELU is the exact (erf) form throughout, as BERT's.

  Methods (all arrays in, float32 arrays out):
    __call__(input_ids, attention_mask, cache, prior) -> score [B]   (the online path)
    rerank(input_ids [Q, S], attention_mask, caches [Q, K, N, d], priors [Q, K]) -> [Q, K]
    encode(input_ids, attention_mask, cache=None) -> hidden [B, S(+N), d]   (joint or text-only)
    score_from_hidden(hidden, prior) -> [B]
    mlm_logits(hidden) -> [B, S', V]    tied MLM head on (text positions of) a joint pass
    text_embedding(input_ids, attention_mask) -> [B, vtc_dim]   VTC head on a text-only pass
    training_outputs(...) -> dict   all of the above at once (also what `init_params` runs)

  Parameters: bert (`JointEncoder`), prior_fc1/prior_fc2 (e_rho), score_fc1/score_fc2,
  vtc_proj, mlm_transform/mlm_norm/mlm_bias, and `cache_proj` (d_c -> d_l) when the cache has its own width
  (`VedjeConfig.cache_dim`). Deployment needs bert, prior_*, score_* (and cache_proj) only.
  """
  config: VedjeConfig

  def setup(self):
    cfg = self.config
    dtype = jnp.dtype(cfg.dtype)
    d = cfg.hidden_size
    self.bert = JointEncoder(cfg)
    self.prior_fc1 = _dense(cfg.prior_hidden, dtype, None)
    self.prior_fc2 = _dense(d, dtype, None)
    self.score_fc1 = _dense(d, dtype, None)
    self.score_fc2 = _dense(1, dtype, None)
    self.vtc_proj = _dense(cfg.vtc_dim, dtype, None)
    self.mlm_transform = _dense(d, dtype, None, nn.initializers.normal(0.02))
    self.mlm_norm = nn.LayerNorm(epsilon=cfg.text.layer_norm_eps, dtype=dtype, param_dtype=jnp.float32)
    self.mlm_bias = self.param("mlm_bias", nn.initializers.zeros, (cfg.text.vocab_size,), jnp.float32)
    if cfg.cache_width != d:
      self.cache_proj = _dense(d, dtype, None)

  def _read_cache(self, cache: Optional[jax.Array]) -> Optional[jax.Array]:
    """The cache [B, N, d_c] as the encoder reads it: mapped to d_l by `cache_proj` when the widths differ."""
    if cache is None or self.config.cache_width == self.config.hidden_size:
      return cache
    if cache.ndim != 3 or cache.shape[2] != self.config.cache_width:
      raise ValueError(f"expected cache [B, N, {self.config.cache_width}], got {tuple(cache.shape)}")
    return self.cache_proj(cache.astype(jnp.dtype(self.config.dtype)))

  def encode(self, input_ids: jax.Array, attention_mask: jax.Array,
             cache: Optional[jax.Array] = None, deterministic: bool = True) -> jax.Array:
    """Final hidden states [B, S(+N), d] float32: joint over [text; cache], or text-only (cache=None)."""
    return self.bert(input_ids, attention_mask, self._read_cache(cache), deterministic).astype(jnp.float32)

  def score_from_hidden(self, hidden: jax.Array, prior: jax.Array) -> jax.Array:
    """Eq. 5 on a joint pass: hidden [B, L, d] ([CLS] first), prior [B] -> score [B] float32."""
    dtype = jnp.dtype(self.config.dtype)
    prior = jnp.asarray(prior, jnp.float32)
    if prior.shape != hidden.shape[:1]:
      raise ValueError(f"prior must be [B={hidden.shape[0]}], got {tuple(prior.shape)}")
    cfg = self.config
    c_tilde = hidden[:, 0].astype(dtype) if cfg.use_joint else jnp.zeros((hidden.shape[0], cfg.hidden_size), dtype)
    if cfg.use_prior:
      rho = (cfg.prior_scale * prior)[:, None].astype(dtype)
      c_tilde = c_tilde + self.prior_fc2(nn.gelu(self.prior_fc1(rho), approximate=False))
    s = self.score_fc2(nn.gelu(self.score_fc1(c_tilde), approximate=False))
    return s[:, 0].astype(jnp.float32)

  def __call__(self, input_ids: jax.Array, attention_mask: jax.Array, cache: jax.Array,
               prior: jax.Array, deterministic: bool = True) -> jax.Array:
    """input_ids [B, S], attention_mask [B, S], cache [B, N, d], prior [B] -> score [B] float32.

    With `use_joint=False` ("prior only") no joint pass runs: the score reads e_rho(rho) alone.
    """
    if self.config.use_joint:
      hidden = self.bert(input_ids, attention_mask, self._read_cache(cache), deterministic)
    else:
      hidden = jnp.zeros((input_ids.shape[0], 1, self.config.hidden_size), jnp.float32)
    return self.score_from_hidden(hidden, prior)

  def score_pairs(self, input_ids: jax.Array, attention_mask: jax.Array, caches: jax.Array,
                  priors: jax.Array, deterministic: bool = True) -> jax.Array:
    """`__call__` on n flat pairs (input_ids/attention_mask [n, S], caches [n, N, d], priors [n]) -> [n],
    at inference in blocks of `config.scan_pairs` pairs (see there)."""
    pairs = (input_ids, attention_mask, caches, priors)
    block, n = (self.config.scan_pairs if deterministic else self.config.train_pairs), priors.shape[0]
    if block == 0 or n <= block:
      return self(*pairs, deterministic)
    # training: blocks rematerialized in the backward pass, each its own dropout draw; inference: blocks of
    # `scan_pairs` pairs through one scan, to stay in the CPU's cache
    return scan_blocks(self, pairs, block, deterministic)

  def rerank(self, input_ids: jax.Array, attention_mask: jax.Array, caches: jax.Array,
             priors: jax.Array, deterministic: bool = True) -> jax.Array:
    """One query against K candidates each: input_ids/attention_mask [Q, S], caches
    [Q, K, N, d], priors [Q, K] -> scores [Q, K] float32 (Q*K joint passes, `score_pairs`)."""
    q, k = priors.shape
    if caches.shape[:2] != (q, k) or input_ids.shape[0] != q:
      raise ValueError(f"rerank: input_ids {tuple(input_ids.shape)}, caches "
                       f"{tuple(caches.shape)} and priors {tuple(priors.shape)} disagree on [Q, K]")
    scores = self.score_pairs(jnp.repeat(input_ids, k, axis=0), jnp.repeat(attention_mask, k, axis=0),
                              caches.reshape(q * k, *caches.shape[2:]), priors.reshape(q * k), deterministic)
    return scores.reshape(q, k)

  def mlm_logits(self, hidden: jax.Array) -> jax.Array:
    """BERT's MLM head, decoder tied to the word embeddings: hidden [B, S, d] -> [B, S, V] float32.

    Pass the text positions of a joint pass over the masked text (`hidden[:, :S]`).
    """
    dtype = jnp.dtype(self.config.dtype)
    x = nn.gelu(self.mlm_transform(hidden.astype(dtype)), approximate=False)
    x = self.mlm_norm(x)
    return self.bert.attend(x).astype(jnp.float32) + self.mlm_bias

  def text_embedding(self, input_ids: jax.Array, attention_mask: jax.Array,
                     deterministic: bool = True) -> jax.Array:
    """VTC head: text-only pass, final [CLS] -> Linear -> [B, vtc_dim] float32 (not normalized)."""
    hidden = self.bert(input_ids, attention_mask, None, deterministic)
    return self.vtc_proj(hidden[:, 0]).astype(jnp.float32)

  def training_outputs(self, input_ids: jax.Array, attention_mask: jax.Array, cache: jax.Array,
                       prior: jax.Array, mlm_input_ids: Optional[jax.Array] = None,
                       deterministic: bool = True) -> dict[str, jax.Array]:
    """Every head on matched pairs: {'score' [B], 'text_embedding' [B, vtc_dim],
    'mlm_logits' [B, S, V] (joint pass over mlm_input_ids, default input_ids, with the cache)}."""
    mlm_ids = input_ids if mlm_input_ids is None else mlm_input_ids
    s = input_ids.shape[1]
    masked_hidden = self.bert(mlm_ids, attention_mask, self._read_cache(cache), deterministic)
    return {
        "score": self(input_ids, attention_mask, cache, prior, deterministic),
        "text_embedding": self.text_embedding(input_ids, attention_mask, deterministic),
        "mlm_logits": self.mlm_logits(masked_hidden[:, :s]),
    }


# ---------------------------------------------------------------------------------------------
# Training only: the future-delta predictor F_omega (eq. 3, A.2)
# ---------------------------------------------------------------------------------------------


class FutureDeltaPredictor(nn.Module):
  """F_omega (eq. 3, A.2): cache [B, T*M, d_l] -> predicted deltas [B, T, |H|, P, d_v].

  For each frame t separately (frames folded into the batch), |H| * P fixed sinusoidal queries
  (`delta_queries`: first half of d_l encodes h, second half the patch position p) go through a
  2-layer post-LN decoder that cross-attends to that frame's M tokens Z_t only, then LayerNorm
  and Linear(d_l, d_v). Row [b, t, i, p] predicts Delta_{t, h_i} = X_{t+h_i} - X_t at patch p
  (the layout of `vidjax.losses.future_delta_targets`). Predictions are made for every t; the loss
  masks the (t, h) outside Omega.
  """
  config: VedjeConfig

  @nn.compact
  def __call__(self, cache: jax.Array, deterministic: bool = True) -> jax.Array:
    """cache [B, T*M, d_c] -> [B, T, |H|, P, d_v] float32."""
    cfg = self.config
    m, d = cfg.tokens_per_frame, cfg.cache_width
    if cache.ndim != 3 or cache.shape[2] != d or cache.shape[1] % m:
      raise ValueError(f"FutureDeltaPredictor expects cache [B, T*M (M={m}), {d}], got "
                       f"{tuple(cache.shape)}")
    dtype = jnp.dtype(cfg.dtype)
    b, n, _ = cache.shape
    t = n // m
    h, p = len(cfg.horizons), cfg.patches
    memory = cache.reshape(b * t, m, d).astype(dtype)
    queries = jnp.asarray(delta_queries(cfg.horizons, p, d), dtype)
    x = jnp.broadcast_to(queries, (b * t, h * p, d))
    for i in range(cfg.predictor_layers):
      x = TransformerDecoderLayer(d, cfg.predictor_heads, cfg.predictor_mlp, cfg.decoder_dropout,
                                  cfg.decoder_layer_norm_eps, dtype, name=f"layer_{i}")(
                                      x, memory, deterministic)
    x = nn.LayerNorm(epsilon=cfg.decoder_layer_norm_eps, dtype=dtype, param_dtype=jnp.float32,
                     name="output_norm")(x)
    out = _dense(cfg.visual_dim, dtype, "output_proj")(x)
    return out.reshape(b, t, h, p, cfg.visual_dim).astype(jnp.float32)


# ---------------------------------------------------------------------------------------------
# The three together (training)
# ---------------------------------------------------------------------------------------------


class Vedje(nn.Module):
  """Compressor + reranker + F_omega in one tree, for training (A.3: all trained jointly).

  `__call__` is the training forward over a batch of B (query, video) pairs where query b matches
  video b (the convention of `losses.vtc_loss`); `candidates` says which of the batch's videos each
  query is scored against (e.g. its positive and in-batch negatives for `losses.vtm_loss`).
  Deployment splits the tree: params['compressor'] with `FrameCompressor` offline,
  params['reranker'] with `JointReranker` online; params['delta_predictor'] is discarded.
  """
  config: VedjeConfig

  def setup(self):
    self.compressor = FrameCompressor(self.config)
    self.reranker = JointReranker(self.config)
    self.delta_predictor = FutureDeltaPredictor(self.config)

  def compress(self, patches: jax.Array, deterministic: bool = True) -> jax.Array:
    """patches [B, T, P, d_v] -> cache [B, T*M, d_c] float32."""
    return self.compressor(patches, deterministic)

  def __call__(self, patches: jax.Array, input_ids: jax.Array, attention_mask: jax.Array,
               candidates: jax.Array, priors: jax.Array, mlm_input_ids: Optional[jax.Array] = None,
               deterministic: bool = True) -> dict[str, jax.Array]:
    """The training forward.

    Args:
      patches: [V, T, P, d_v] frozen patch tokens of the batch's V >= B videos; video b < B is
        query b's positive, the rest are extra candidates (e.g. stage-1 hard negatives).
      input_ids, attention_mask: [B, S] query b describes video b.
      candidates: int [B, K] indices into the V videos scored for each query.
      priors: [B, K] stage-1 scores rho(q_b, v_candidates[b, k]).
      mlm_input_ids: [B, S] the masked text for L_mlm (default: input_ids).

    Returns:
      {'cache' [V, T*M, d_l], 'scores' [B, K], 'text_embedding' [B, vtc_dim],
       'mlm_logits' [B, S, vocab] (joint with the query's own video), 'deltas' [B, T, |H|, P, d_v]
       (F_omega on the B positives' caches: the batch's B query-video pairs, A.3)},
      all float32.
    """
    cache = self.compressor(patches, deterministic)
    scores = self.reranker.rerank(input_ids, attention_mask, cache[candidates], priors,
                                  deterministic)
    mlm_ids = input_ids if mlm_input_ids is None else mlm_input_ids
    masked_hidden = self.reranker.encode(mlm_ids, attention_mask, cache[:input_ids.shape[0]], deterministic)
    return {
        "cache": cache,
        "scores": scores,
        "text_embedding": self.reranker.text_embedding(input_ids, attention_mask, deterministic),
        "mlm_logits": self.reranker.mlm_logits(masked_hidden[:, :input_ids.shape[1]]),
        "deltas": self.delta_predictor(cache[:input_ids.shape[0]], deterministic),
    }


def dummy_inputs(module: nn.Module, batch: int = 1, text_len: Optional[int] = None) -> tuple:
  """Zero inputs of the right shapes for `module.init` (any VEDJE module above)."""
  cfg: VedjeConfig = module.config
  s = cfg.max_text_len if text_len is None else text_len
  ids = jnp.zeros((batch, s), jnp.int32)
  mask = jnp.ones((batch, s), jnp.int32)
  cache = jnp.zeros((batch, cfg.cache_len, cfg.cache_width), jnp.float32)
  patches = jnp.zeros((batch, cfg.frames, cfg.patches, cfg.visual_dim), jnp.float32)
  if isinstance(module, FrameCompressor):
    return (patches,)
  if isinstance(module, FutureDeltaPredictor):
    return (cache,)
  if isinstance(module, JointReranker):
    return ids, mask, cache, jnp.zeros((batch,), jnp.float32)
  if isinstance(module, Vedje):
    return (patches, ids, mask, jnp.zeros((batch, 1), jnp.int32), jnp.zeros((batch, 1), jnp.float32))
  raise TypeError(f"dummy_inputs: not a VEDJE module: {type(module).__name__}")


def init_params(module: nn.Module, rng: jax.Array, batch: int = 1) -> Params:
  """Every parameter of `module` (heads included), from `dummy_inputs`; works under jax.eval_shape."""
  method = JointReranker.training_outputs if isinstance(module, JointReranker) else None
  return module.init(rng, *dummy_inputs(module, batch), method=method)["params"]


# ---------------------------------------------------------------------------------------------
# Pretrained BERT -> reranker
# ---------------------------------------------------------------------------------------------

def init_from_minilm(params: Params, bert_params: Params) -> Params:
  """Copies a pretrained `bert.BertModel` tree into a reranker's encoder; returns a new tree.

  `bert_params` is what `vidjax.checkpoints.load_bert_safetensors` returns (e.g. all-MiniLM-L6-v2
  into `VedjeConfig.minilm_l6()`); the copy is `bert.copy_pretrained` (every leaf of params['bert'];
  the position table row by row, rows beyond BERT's keep their random init, so text positions 0..63
  and, for MiniLM's 512 rows, every default cache position start from BERT's learned positions; the
  pretrained pooler ignored: the reranker pools the final [CLS] state). Every other parameter
  (e_rho, score head, training heads) is left as given.

  Args:
    params: a `JointReranker` tree, or a `Vedje` tree (its 'reranker' subtree is updated).
    bert_params: a `BertModel` tree.

  Raises:
    ValueError: listing every missing or mis-shaped leaf, or a layer-count mismatch.
  """
  if "reranker" in params and "bert" not in params:
    return {**params, "reranker": init_from_minilm(params["reranker"], bert_params)}
  if "bert" not in params:
    raise ValueError(f"init_from_minilm: expected a JointReranker tree with a 'bert' subtree, got "
                     f"keys {sorted(params)}")
  return {**params, "bert": bert.copy_pretrained(params["bert"], bert_params, what="reranker",
                                                  hint="use the VedjeConfig whose num_layers matches, e.g. "
                                                       "VedjeConfig.minilm_l6()")}
