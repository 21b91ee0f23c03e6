"""The generative-retrieval baselines of GRDR's Tables 1-2 (../shared/papers/grdr.txt §2, §4.2) as Flax modules.

GRDR compares its recall with three GR methods, "all with 4 codebook layers of size 256" (§4.2), each with the same
T5 retriever and reranker:

* TIGER (Rajput et al. 2023, "Recommender Systems with Generative Retrieval", §3.1-3.2): semantic IDs from an
  RQ-VAE (`RQVAE`: an MLP encoder, M residual codebooks where each layer takes the codeword nearest to the residual
  in Euclidean distance, an MLP decoder that reconstructs the feature; `euclidean_residual_quantize`), one extra
  token appended so that every item's ID is unique (the collision token: `vidjax.methods.grdr_baselines`), and a
  seq2seq retriever whose decoder emits the ID's tokens from ONE vocabulary shared by every position (GRDR §4.5:
  "a single shared vocabulary across all layers rather than independent codebooks"): `SemanticIdRetriever` with
  `shared_vocab=True`, whose softmax at every step runs over all sum_l K_l tokens (`VocabLayout.offsets`).
* AVG (Li et al. 2025, "Revolutionizing Text-to-Image Retrieval as Autoregressive Token-to-Voken Generation"):
  TIGER's pipeline with cross-modal alignment during tokenization (GRDR §2, §4.2): the same `RQVAE` with a text
  head (`text_dim` > 0) whose projection of the quantized latent is aligned with the video's text embedding
  (`vidjax.methods.grdr_baselines.tokenizer_loss`).
* T2VIndexer (Li et al. 2024, MM): IDs from hierarchical k-means of the video features
  (`vidjax.retrieval.kmeans.HierarchicalKMeans`), and a decoder with the prefix-aware decoder adapter of GRDR §4.5
  (T2VIndexer takes it from NCI, Wang et al. 2022 §3.2, "prefix-aware weight-adaptive decoder"): the output
  projection of step i is specific to the position (W_i over that position's K codes) and adapted to the prefix
  c_<i: `SemanticIdRetriever` with `shared_vocab=False, prefix_adapter=True`,

      logits_i = (h_i * (1 + a_i)) W_i,   a_i = tanh(A([BOS, e(c_1), ..., e(c_{i-1})])_i)

  i.e. W_i^ada = diag(1 + a_i) W_i: NCI's AdaptiveDecoder(prefix) W_i read as a diagonal (per-dimension) weight
  adaptation, A a one-layer causal Transformer over the prefix's tokens (NCI: a small Transformer decoder).

Decisions the papers leave open, stated here: the RQ-VAE's MLPs use ReLU (TIGER §4.1: 512-256-128 hidden, 32-d
latent; the config sets the widths), its straight-through estimator feeds the decoder (RQ-VAE; its gradient the
official baseline's, tests/test_reference_tiger.py); the retriever's
decoder input is a learned embedding of each position's token (one table over the shared vocabulary, position-
specific tokens either way, as NCI's and TIGER's tokens are); T5 v1.1's untied output layer.
"""
from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidjax.models.grdr import QUERY_ENCODERS
from vidjax.models.t5 import T5Config, T5Decoder, T5Encoder
from vidjax.ops import check_positive_fields


def euclidean_residual_quantize(z: jax.Array, codebooks: jax.Array):
  """TIGER's residual quantizer (Rajput et al. 2023 §3.1): at layer d the codeword nearest to the residual r_d by
  squared L2 distance, r_{d+1} = r_d - e_{c_d}.

  Args:
    z: [..., D] latent vectors; codebooks: [M, K, D].

  Returns:
    codes int32 [..., M]; z_hat [..., D] (sum of the selected codewords); residuals [..., M, D] (r_1 = z .. r_M,
    the codewords subtracted under a stop-gradient, as the official quantizer: a loss on them reaches z only);
    selected [..., M, D] (e_{c_1} .. e_{c_M}).
  """
  codes, residuals, selected = [], [], []
  r = z
  for m in range(codebooks.shape[0]):
    book = codebooks[m]
    dist = jnp.sum(r * r, -1, keepdims=True) - 2.0 * r @ book.T + jnp.sum(book * book, -1)
    c = jnp.argmin(dist, axis=-1).astype(jnp.int32)
    e = book[c]
    codes.append(c)
    residuals.append(r)
    selected.append(e)
    r = r - jax.lax.stop_gradient(e)
  selected = jnp.stack(selected, -2)
  return jnp.stack(codes, -1), jnp.sum(selected, -2), jnp.stack(residuals, -2), selected


@dataclasses.dataclass(frozen=True)
class RQVAEConfig:
  """TIGER's RQ-VAE (§3.1, §4.1: encoder 512-256-128, latent 32, 3 layers of 256 codes; GRDR §4.2: 4 layers of 256).

  feature_dim: the frozen video feature's width; hidden: encoder widths (the decoder mirrors them); latent_dim: D;
  num_layers, num_codes: M, K; text_dim: AVG's text head (0: none, TIGER).
  """
  feature_dim: int
  hidden: tuple = (512, 256, 128)
  latent_dim: int = 32
  num_layers: int = 4
  num_codes: int = 256
  text_dim: int = 0

  def __post_init__(self):
    check_positive_fields(self, ("feature_dim", "latent_dim", "num_layers", "num_codes"))
    if not all(isinstance(h, int) and h > 0 for h in self.hidden):
      raise ValueError(f"RQVAEConfig.hidden must be positive integers, got {self.hidden!r}")
    if self.text_dim < 0:
      raise ValueError(f"RQVAEConfig.text_dim must be >= 0, got {self.text_dim!r}")


class _MLP(nn.Module):
  widths: tuple
  out_dim: int

  @nn.compact
  def __call__(self, x):
    for i, w in enumerate(self.widths):
      x = jax.nn.relu(nn.Dense(w, name=f"dense_{i}")(x))
    return nn.Dense(self.out_dim, name="out")(x)


class RQVAE(nn.Module):
  """features [B, d_v] -> dict(z [B, D], codes [B, M], z_hat, residuals / selected [B, M, D], reconstruction
  [B, d_v], and with `text_dim` the text head's projection `text` [B, text_dim] of the quantized latent).
  Codebooks: params `codebook_{l}` [K, D] (k-means initialised by the caller), stacked as `codebooks` [M, K, D]."""
  config: RQVAEConfig

  def setup(self):
    c = self.config
    self.encoder = _MLP(tuple(c.hidden), c.latent_dim)
    self.decoder = _MLP(tuple(reversed(c.hidden)), c.feature_dim)
    init = nn.initializers.normal(1.0 / math.sqrt(c.latent_dim))
    self.codebooks = jnp.stack([self.param(f"codebook_{l}", init, (c.num_codes, c.latent_dim))
                                for l in range(c.num_layers)])
    if c.text_dim:
      self.text_head = nn.Dense(c.text_dim, name="text_head")

  def encode(self, features):
    """f [..., d_v] -> z [..., D]."""
    return self.encoder(features)

  def __call__(self, features):
    z = self.encode(features)
    codes, z_hat, residuals, selected = euclidean_residual_quantize(z, self.codebooks)
    # The official straight-through (baselines/mm_semantictvr/index/models/rq.py): one per layer on its residual, so
    # z_hat in value with the gradient of sum_l r_l, M times the identity.
    through = jnp.sum(residuals, axis=-2)
    straight_through = through + jax.lax.stop_gradient(z_hat - through)
    out = {"z": z, "codes": codes, "z_hat": z_hat, "residuals": residuals, "selected": selected,
           "reconstruction": self.decoder(straight_through)}
    if self.config.text_dim:
      out["text"] = self.text_head(straight_through)
    return out

  def video_codes(self, features):
    """Indexing: f [V, d_v] -> codes int32 [V, M]."""
    return euclidean_residual_quantize(self.encode(features), self.codebooks)[0]


@dataclasses.dataclass(frozen=True)
class VocabLayout:
  """The decoder's token space: position l of an ID has `sizes[l]` codes. Shared (TIGER, AVG): one vocabulary of
  sum(sizes) tokens, position l's code c is token offsets[l] + c. Per position (T2VIndexer): the same embedding
  table, but step l's softmax runs over its own sizes[l] codes only."""
  sizes: tuple

  @property
  def offsets(self) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int32)

  @property
  def total(self) -> int:
    return int(sum(self.sizes))

  def to_shared(self, codes) -> np.ndarray:
    """codes int [..., L] (per position, 0 <= c < sizes[l]) -> shared tokens [..., L]."""
    codes = np.asarray(codes)
    return (codes + self.offsets[:codes.shape[-1]]).astype(np.int32)


@dataclasses.dataclass(frozen=True)
class IdRetrieverConfig:
  """The seq2seq generative retriever of the baselines (GRDR §4.2: T5-Small for every GR method).

  sizes: codes per ID position (TIGER / AVG: (K,) * M + (K_collision,); T2VIndexer: (K,) * M).
  shared_vocab: True: the step's softmax covers the whole shared vocabulary (TIGER, AVG); False: position-specific
    output weights over the position's own codes (NCI / T2VIndexer).
  prefix_adapter: the prefix-aware weight adaptation (T2VIndexer; the module docstring).
  query_encoder / query_dim / query_tokens / vocab_size: the query side, as GRDR's (`RetrieverConfig`).
  """
  sizes: tuple
  t5: T5Config = dataclasses.field(default_factory=lambda: T5Config.small(vocab_size=0))
  shared_vocab: bool = True
  prefix_adapter: bool = False
  query_encoder: str = "t5"
  query_dim: int = 384
  query_tokens: int = 4
  vocab_size: int = 0

  def __post_init__(self):
    check_positive_fields(self, ("query_dim", "query_tokens"))
    if not self.sizes or not all(isinstance(s, int) and s > 0 for s in self.sizes):
      raise ValueError(f"IdRetrieverConfig.sizes must be positive integers, got {self.sizes!r}")
    if self.query_encoder not in QUERY_ENCODERS:
      raise ValueError(f"IdRetrieverConfig.query_encoder must be one of {QUERY_ENCODERS}, got {self.query_encoder!r}")
    if self.query_encoder == "t5" and not self.vocab_size > 0:
      raise ValueError("IdRetrieverConfig: query_encoder='t5' needs vocab_size > 0 (the query tokenizer's)")

  @property
  def layout(self) -> VocabLayout:
    return VocabLayout(tuple(self.sizes))

  @property
  def num_outputs(self) -> int:
    """Width of a step's distribution: the shared vocabulary, or the largest position's codes."""
    return self.layout.total if self.shared_vocab else max(self.sizes)


class PrefixAdapter(nn.Module):
  """A([BOS, e(c_1), ...]) [B, S, d] -> a [B, S, d] in (-1, 1): one causal pre-norm Transformer layer over the
  prefix's tokens (nothing else: the adaptation depends on the prefix alone, NCI §3.2), then tanh(Dense)."""
  num_heads: int
  d_ff: int

  @nn.compact
  def __call__(self, x):
    d = x.shape[-1]
    mask = nn.make_causal_mask(jnp.ones(x.shape[:2], jnp.int32))
    x = x + nn.MultiHeadDotProductAttention(self.num_heads, name="attention")(nn.LayerNorm(name="norm_0")(x),
                                                                                mask=mask)
    h = nn.Dense(self.d_ff, name="wi")(nn.LayerNorm(name="norm_1")(x))
    x = x + nn.Dense(d, name="wo")(jax.nn.relu(h))
    return jnp.tanh(nn.Dense(d, name="out")(x))


class SemanticIdRetriever(nn.Module):
  """Query -> the semantic ID's tokens (see the module docstring). Codes passed in and out are the trie's: shared
  tokens with `shared_vocab`, else each position's own code."""
  config: IdRetrieverConfig

  def setup(self):
    c = self.config
    d = c.t5.d_model
    if c.query_encoder == "t5":
      self.query_embed = nn.Embed(c.vocab_size, d, embedding_init=nn.initializers.normal(1.0), name="query_embed")
    else:
      self.query_in = nn.Dense(c.query_tokens * d, name="query_in")
    if c.query_encoder in ("t5", "t5_features"):
      self.encoder = T5Encoder(c.t5, name="encoder")
    self.decoder = T5Decoder(c.t5, name="decoder")
    self.bos = self.param("bos", nn.initializers.normal(1.0), (d,))
    self.token_embed = nn.Embed(c.layout.total, d, embedding_init=nn.initializers.normal(1.0), name="token_embed")
    init = nn.initializers.normal(d ** -0.5)
    if c.shared_vocab:
      self.head = self.param("head", init, (d, c.layout.total))  # one softmax over every position's tokens
    else:
      self.head = self.param("head", init, (len(c.sizes), d, max(c.sizes)))  # W_i, position-specific
    if c.prefix_adapter:
      self.adapter = PrefixAdapter(c.t5.num_heads, c.t5.d_ff, name="prefix_adapter")

  def encode_query(self, queries, deterministic: bool = True):
    """queries [B, query_dim] (feature queries) or int [B, L] (token ids, "t5") -> {"memory", "mask"}."""
    c = self.config
    if c.query_encoder == "t5":
      mask = queries > 0
      return {"memory": self.encoder(self.query_embed(queries), mask, deterministic), "mask": mask}
    x = self.query_in(queries).reshape(queries.shape[0], c.query_tokens, c.t5.d_model)
    mask = jnp.ones(x.shape[:2], bool)
    if c.query_encoder == "t5_features":
      x = self.encoder(x, mask, deterministic)
    return {"memory": x, "mask": mask}

  def _tokens(self, prefix):
    """The decoder's input [B, m + 1, d]: BOS then the prefix's token embeddings."""
    b, m = prefix.shape
    shared = prefix if self.config.shared_vocab else prefix + jnp.asarray(self.config.layout.offsets[:m])
    bos = jnp.broadcast_to(jnp.asarray(self.bos), (b, 1, self.bos.shape[0]))
    return jnp.concatenate([bos, self.token_embed(shared)], axis=1)

  def logits(self, state, prefix, deterministic: bool = True):
    """state (`encode_query`), prefix int [B, m] (the trie's codes of positions 1..m) -> the logits of positions
    1..m+1 [B, m + 1, num_outputs] (a position's codes past its size: -inf)."""
    c = self.config
    y = self._tokens(prefix)
    h = self.decoder(y, state["memory"], state["mask"], deterministic).astype(jnp.float32)
    if c.prefix_adapter:
      h = h * (1.0 + self.adapter(y))
    if c.shared_vocab:
      return h @ self.head
    n = h.shape[1]
    out = jnp.einsum("bsd,sdk->bsk", h, self.head[:n])
    valid = jnp.arange(max(c.sizes))[None, :] < jnp.asarray(c.sizes[:n])[:, None]  # [n, K]
    return jnp.where(valid[None], out, -jnp.inf)

  def teacher_logits(self, queries, codes, deterministic: bool = True):
    """Training: queries and the target ID int [B, L] (trie codes) -> logits [B, L, num_outputs] (teacher forcing)."""
    return self.logits(self.encode_query(queries, deterministic), codes[:, :-1], deterministic)

  def code_logp(self, state, prefix):
    """Beam-search step (`vidjax.retrieval.trie.beam_search`): prefix int [Q, W, m] -> log P(next token)
    [Q, W, num_outputs]."""
    q, w, m = prefix.shape
    logits = self.logits(state, prefix.reshape(q * w, m))[:, m]  # each query's memory read once for its W beams
    return jax.nn.log_softmax(logits, axis=-1).reshape(q, w, -1)

  def __call__(self, queries, codes):
    """For `init`: touches every parameter."""
    return self.teacher_logits(queries, codes)
