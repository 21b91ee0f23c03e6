"""GRDR's multi-view video tokenizer (../shared/papers/grdr.txt §3.2) as Flax (linen) modules.

* `ViewMLPs` — N_v independent two-layer MLPs with a linear skip, stacked (one einsum per layer
  for all views): the view encoders phi_i (eq. 3) and the reconstruction decoders psi_i (eq. 7).
* `residual_quantize` — eq. 4-5: M layers of K codes, at each layer the code of maximum cosine
  with the current residual; the quantized vector z_hat is the sum of the selected entries.
* `Tokenizer` — f_v [B, d_v] -> views z [B, N_v, d_z] -> codes [B, N_v, m] for the first m layers,
  z_hat, and the reconstruction f~_v = mean_i psi_i(z_hat_i) [B, d_v]. The codebooks C^(1..M)
  (params `codebook_0 ..`, stacked as `codebooks` [M, K, d_z]) live here and are the ones the
  generative retriever predicts over (the shared codebook of §3.3).
* `GRDR` — the tokenizer and the generative retriever (a query encoder and a T5 decoder,
  `vidjax.models.t5`) in one module, with the methods Algorithm 1 and inference call.
* `match_views` — the view <-> query-cluster rule (below).

Decisions the paper leaves open, and what the official code (JasonCodeMaker/GRDR, models/grdr.py and
models/video_rqvae/, held against it by tests/test_reference_grdr.py) does:

* View encoder shape: phi_i(f) = W2 GELU(W1 f) + S f (width `hidden`); psi_i the same per view. The official
  encoders and decoders are one linear map each (its case W1 = W2 = 0, which `vidjax.convert.grdr` writes).
  `TokenizerConfig.normalize_views`: True (vidjax's default) L2-normalises the views; False is the official
  tokenizer, whose views keep their length: each layer picks its code by the cosine of the residual (the residual
  is normalised for the choice only) and the residual arithmetic r^(l+1) = r^(l) - C^(l)[c_l] stays unnormalised.
* Gradients through the quantizer, as the official code: the residuals subtract the selected codewords under a
  stop-gradient (r^(l) reaches the encoder only), and the straight-through estimator feeds the reconstruction
  decoder z_hat in value with the gradient of sum_l r^(l)/|r^(l)| (each layer's straight-through is on its
  normalised residual); the codebook learns from L_RQ's codebook term and, shared with the retriever, from L_CE /
  L_HC.
* View <-> cluster matching: each video's training queries are clustered into N_v intents
  (k-means, `vidjax.ops.kmeans`), whose order is arbitrary. View i is aligned with the cluster
  pi(i) under the permutation pi that maximises sum_i cos(z_i, centre_pi(i)) for the current
  views (all N_v! permutations are scored: 24 at N_v = 4; greedy above `MAX_EXACT_VIEWS`), so a
  view keeps the intent it already leans to and two views never share one.
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidjax.models.t5 import T5Config, T5Decoder, T5Encoder
from vidjax.ops import check_positive_fields, l2_normalize

# Views up to this many are matched to clusters exactly (N_v! permutations), more greedily.
MAX_EXACT_VIEWS = 6


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
  """Defaults from §4.3: N_v = 4, M = 3, K = 128 (LSMDC: N_v = 1, K = 200).

  feature_dim: d_v, the frozen video feature (768: VideoPrism-LvT-B's stage-1 space).
  latent_dim: d_z, the view / codebook / retriever-output space.
  hidden: width of the view MLPs.
  normalize_views: L2-normalise the views (False: the official tokenizer's unnormalised views, module docstring).
  """
  feature_dim: int = 768
  latent_dim: int = 512
  hidden: int = 1024
  num_views: int = 4
  num_layers: int = 3
  num_codes: int = 128
  normalize_views: bool = True

  def __post_init__(self):
    check_positive_fields(self, ("feature_dim", "latent_dim", "hidden", "num_views", "num_layers", "num_codes"))


class ViewMLPs(nn.Module):
  """N views of f(x) = W2 GELU(W1 x + b1) + b2 + S x: x [..., d_in] or [..., N, d_in] -> [..., N, d_out]."""
  num_views: int
  hidden: int
  out_dim: int
  per_view_input: bool = False  # True: x already has a view axis (the decoders psi_i)

  @nn.compact
  def __call__(self, x):
    d_in = x.shape[-1]
    init = nn.initializers.lecun_normal()
    shape = lambda *s: (self.num_views,) + s  # noqa: E731
    w1 = self.param("w1", init, shape(d_in, self.hidden))
    b1 = self.param("b1", nn.initializers.zeros, shape(self.hidden))
    w2 = self.param("w2", init, shape(self.hidden, self.out_dim))
    b2 = self.param("b2", nn.initializers.zeros, shape(self.out_dim))
    skip = self.param("skip", init, shape(d_in, self.out_dim))
    eq = "...vi,vio->...vo" if self.per_view_input else "...i,vio->...vo"
    h = jax.nn.gelu(jnp.einsum(eq, x, w1) + b1, approximate=False)
    return jnp.einsum("...vh,vho->...vo", h, w2) + b2 + jnp.einsum(eq, x, skip)


def residual_quantize(z: jax.Array, codebooks: jax.Array, num_layers: int):
  """Eq. 4-5 for the first `num_layers` codebooks.

  Args:
    z: [..., D] latent vectors.
    codebooks: [M, K, D] (M >= num_layers).
    num_layers: m, how many layers to quantize.

  Returns:
    codes int32 [..., m]; z_hat [..., D] = sum of the selected entries; residuals [..., m, D]
    (r^(l), the vector layer l quantizes: r^(1) = z; the subtracted entries under a stop-gradient, as the official
    quantizer, so a loss on the residuals reaches z only).
  """
  if num_layers == 0:
    return (jnp.zeros(z.shape[:-1] + (0,), jnp.int32), jnp.zeros_like(z), jnp.zeros(z.shape[:-1] + (0, z.shape[-1]),
                                                                                    z.dtype))
  codes, residuals = [], []
  r = z
  z_hat = jnp.zeros_like(z)
  for m in range(num_layers):
    book = codebooks[m]
    c = jnp.argmax(l2_normalize(r) @ l2_normalize(book).T, axis=-1).astype(jnp.int32)
    residuals.append(r)
    codes.append(c)
    z_hat = z_hat + book[c]
    r = z - jax.lax.stop_gradient(z_hat)
  return jnp.stack(codes, -1), z_hat, jnp.stack(residuals, -2)


def straight_through(residuals: jax.Array, z_hat: jax.Array) -> jax.Array:
  """The quantized vectors as the reconstruction decoder reads them: z_hat [..., D] in value, with the gradient of
  sum_l r^(l) / |r^(l)| (residuals [..., m, D] from `residual_quantize`): the official quantizer's straight-through,
  one per layer on its normalised residual."""
  through = jnp.sum(l2_normalize(residuals), axis=-2)
  return through + jax.lax.stop_gradient(z_hat - through)


class Tokenizer(nn.Module):
  """Multi-view encoder + residual quantizer + reconstruction decoder (see the module docstring)."""
  config: TokenizerConfig

  def setup(self):
    c = self.config
    self.encoder = ViewMLPs(c.num_views, c.hidden, c.latent_dim)
    self.decoder = ViewMLPs(c.num_views, c.hidden, c.feature_dim, per_view_input=True)
    # One parameter per layer, `codebook_{l}` (0-based), so a training phase can freeze C^(1..m-1)
    # by parameter path; `codebooks` stacks them [M, K, d_z].
    init = nn.initializers.normal(1.0 / math.sqrt(c.latent_dim))
    self.codebooks = jnp.stack([self.param(f"codebook_{l}", init, (c.num_codes, c.latent_dim))
                                for l in range(c.num_layers)])

  def encode(self, features):
    """f_v [..., d_v] -> views z [..., N_v, d_z] (eq. 3), unit length with `normalize_views`."""
    z = self.encoder(features)
    return l2_normalize(z) if self.config.normalize_views else z

  def __call__(self, features, num_layers: int | None = None):
    """f_v [B, d_v] -> dict(z, codes [B, N_v, m], z_hat, residuals [B, N_v, m, d_z], reconstruction [B, d_v]).

    `num_layers` = m (default M): only the first m codebooks are used (progressive training).
    """
    m = self.config.num_layers if num_layers is None else num_layers
    z = self.encode(features)
    codes, z_hat, residuals = residual_quantize(z, self.codebooks, m)
    reconstruction = jnp.mean(self.decoder(straight_through(residuals, z_hat)), axis=-2)
    return {"z": z, "codes": codes, "z_hat": z_hat, "residuals": residuals, "reconstruction": reconstruction}


def _permutations(n: int) -> np.ndarray:
  return np.asarray(list(itertools.permutations(range(n))), np.int32)


def match_views(z: jax.Array, centres: jax.Array, valid: jax.Array | None = None) -> jax.Array:
  """The view -> cluster assignment of each video (the rule in the module docstring).

  Args:
    z: [V, N, D] views; centres: [V, N, D] each video's query-cluster centres (any order).
    valid: optional bool [V, N], False for a cluster with no queries (never preferred).

  Returns:
    int32 [V, N]: view i of video v is aligned with cluster `out[v, i]` (a permutation per video).
  """
  v, n, _ = z.shape
  sim = jnp.einsum("vid,vjd->vij", l2_normalize(z), l2_normalize(centres))
  if valid is not None:
    sim = jnp.where(valid[:, None, :], sim, -2.0)
  if n <= MAX_EXACT_VIEWS:
    perms = jnp.asarray(_permutations(n))  # [P, N]
    score = jnp.sum(sim[:, jnp.arange(n)[None, :], perms], axis=-1)  # [V, P]
    return perms[jnp.argmax(score, axis=1)]
  out = np.full((v, n), -1, np.int32)  # greedy: best remaining (view, cluster) pair first
  sim = np.array(sim)
  for _ in range(n):
    flat = sim.reshape(v, -1).argmax(axis=1)
    i, j = flat // n, flat % n
    out[np.arange(v), i] = j
    sim[np.arange(v), i, :] = -np.inf
    sim[np.arange(v), :, j] = -np.inf
  return jnp.asarray(out)


# ----------------------------------------------------------------------------------------------
# The generative retriever (§3.3) and the whole model.

QUERY_ENCODERS = ("t5", "t5_features", "minilm")

# The code temperature of eq. 8 (the paper gives no value) as the official model keeps it: a learnable logit scale
# exp(4.605) ~ 100 clamped to [20, 100] (models/grdr.py `logit_scale`), i.e. tau_code starts at ~0.01 and stays in
# [0.01, 0.05].
CODE_LOG_TAU_INIT = -4.605
CODE_TAU_RANGE = (0.01, 0.05)


@dataclasses.dataclass(frozen=True)
class RetrieverConfig:
  """The generative retriever: a query encoder and a T5 decoder predicting codes over the shared codebook.

  query_encoder: "t5" — the paper's: a T5 encoder (`t5.encoder_layers` layers, random init) over the query
    text's token ids (int [B, L], 0 = padding; `vocab_size` ids); "minilm" — no trainable encoder: the frozen
    all-MiniLM-L6-v2 sentence embedding (computed once per query, as every frozen backbone in vidjax) becomes the
    decoder's memory; "t5_features" — the T5 encoder stack over that feature query's memory tokens.
  query_dim: width of a query given as a feature vector (384 for MiniLM; the embedded world's
    query vectors stand in for it, `dim`).
  query_tokens: a feature query becomes this many memory tokens (a learned linear map).
  vocab_size: "t5": the query token vocabulary (the tokenizer's ids + 1, id 0 the padding).
  t5: the T5 shape (`T5Config.small()` is the paper's, §4.3; `vocab_size` 0 when queries are features).
  tau_init: initial value of the learnable alignment temperature (eq. 9); the code temperature (eq. 8) starts at
    exp(CODE_LOG_TAU_INIT) and is clamped to CODE_TAU_RANGE, as the official model's.
  """
  t5: T5Config = dataclasses.field(default_factory=lambda: T5Config.small(vocab_size=0))
  query_encoder: str = "t5"
  query_dim: int = 384
  query_tokens: int = 4
  tau_init: float = 0.07
  vocab_size: int = 0

  def __post_init__(self):
    check_positive_fields(self, ("query_dim", "query_tokens"))
    if self.query_encoder not in QUERY_ENCODERS:
      raise ValueError(f"RetrieverConfig.query_encoder must be one of {QUERY_ENCODERS}, got {self.query_encoder!r}")
    if self.query_encoder == "t5" and not self.vocab_size > 0:
      raise ValueError("RetrieverConfig: query_encoder='t5' reads token ids and needs vocab_size > 0 (the query "
                       f"tokenizer's), got {self.vocab_size!r}")
    if not self.tau_init > 0:
      raise ValueError(f"RetrieverConfig.tau_init must be > 0, got {self.tau_init!r}")


class GRDR(nn.Module):
  """Tokenizer + generative retriever sharing the codebooks `tokenizer/codebooks` [M, K, d_z].

  The decoder reads [BOS, C^(1)[c_1], ..., C^(m-1)[c_{m-1}]]: a learned start vector, then each earlier code's own
  codebook entry (the official model's decoder inputs: the shared codebook is also the decoder's input
  vocabulary); its output at position l is h_l; P(c_l | c_<l, q) = softmax(cos(h_l, C^(l)) / tau) (eq. 8). Where
  d_z differs from T5's width (the official model has them equal) learned linear maps `code_in` / `out` carry the
  entries into the decoder and its outputs back to d_z. Two learnable temperatures,
  `log_tau_code` (eq. 8, 10, 11; clamped as the official model's) and `log_tau_align` (eq. 9).
  """
  tokenizer: TokenizerConfig
  retriever: RetrieverConfig

  def setup(self):
    r, t = self.retriever, self.tokenizer
    d = r.t5.d_model
    self.tok = Tokenizer(t, name="tokenizer")
    if r.query_encoder == "t5":
      self.query_embed = nn.Embed(r.vocab_size, d, embedding_init=nn.initializers.normal(1.0), name="query_embed")
    else:
      self.query_in = nn.Dense(r.query_tokens * d, name="query_in")
    if r.query_encoder in ("t5", "t5_features"):
      self.encoder = T5Encoder(r.t5, name="encoder")
    self.decoder = T5Decoder(r.t5, name="decoder")
    self.bos = self.param("bos", nn.initializers.normal(0.02), (d,))  # the official start vector's init
    if t.latent_dim != d:
      self.code_in = nn.Dense(d, use_bias=False, name="code_in")
      self.out = nn.Dense(t.latent_dim, use_bias=False, name="out")
    constant = lambda v: lambda _: jnp.asarray(v, jnp.float32)  # noqa: E731
    self.log_tau_code = self.param("log_tau_code", constant(CODE_LOG_TAU_INIT))
    self.log_tau_align = self.param("log_tau_align", constant(math.log(r.tau_init)))

  def temperatures(self):
    """(tau_code in CODE_TAU_RANGE, tau_align floored at 0.01)."""
    return (jnp.clip(jnp.exp(self.log_tau_code), *CODE_TAU_RANGE),
            jnp.maximum(jnp.exp(self.log_tau_align), 0.01))

  def encode_query(self, queries, deterministic: bool = True):
    """queries [B, query_dim] (feature queries) or int [B, L] (token ids, "t5") -> the decoder's state
    {"memory": [B, L', d_model], "mask": bool [B, L']}."""
    r = self.retriever
    if r.query_encoder == "t5":
      mask = queries > 0
      x = self.encoder(self.query_embed(queries), mask, deterministic)
      return {"memory": x, "mask": mask}
    x = self.query_in(queries).reshape(queries.shape[0], r.query_tokens, r.t5.d_model)
    mask = jnp.ones(x.shape[:2], bool)
    if r.query_encoder == "t5_features":
      x = self.encoder(x, mask, deterministic)
    return {"memory": x, "mask": mask}

  def decode(self, state, prefix, deterministic: bool = True):
    """state (`encode_query`); prefix int [B, m] (codes of layers 1..m) -> h [B, m + 1, d_z] (h_1 .. h_{m+1})."""
    b, m = prefix.shape
    project = self.tokenizer.latent_dim != self.retriever.t5.d_model
    y = [jnp.broadcast_to(jnp.asarray(self.bos), (b, 1, self.bos.shape[0]))]
    if m:
      entries = jnp.stack([self.tok.codebooks[l][prefix[:, l]] for l in range(m)], axis=1)
      y.append(self.code_in(entries) if project else entries)
    y = jnp.concatenate(y, axis=1)
    h = self.decoder(y, state["memory"], state["mask"], deterministic)
    return self.out(h) if project else h

  def code_logp(self, state, prefix):
    """Beam-search step: state (`encode_query`, Q rows), prefix int [Q, W, m] -> log P(c_{m+1} | prefix, q)
    [Q, W, K]."""
    q, w, m = prefix.shape
    h = self.decode(state, prefix.reshape(q * w, m))[:, m]  # each query's memory read once for its W beams
    tau, _ = self.temperatures()
    book = self.tok.codebooks[m]
    logits = (l2_normalize(h.astype(jnp.float32)) @ l2_normalize(book).T) / tau
    return jax.nn.log_softmax(logits, axis=-1).reshape(q, w, -1)

  def phase_outputs(self, features, queries, view, num_layers: int, train_layer: int,
                    deterministic: bool = True, frozen_codes=None):
    """What the losses of one training phase need (Algorithm 1).

    Args:
      features: f_v [B, d_v] of each row's video; queries [B, query_dim]; view int [B]: the view
        of that video the row's query is aligned with (`match_views`).
      num_layers: codebooks the tokenizer quantizes with (m - 1 in the alignment phase, m in co-training).
      train_layer: m (1-based), the layer being trained; the decoder yields h_1 .. h_m.
      frozen_codes: optional int [B, m - 1], the aligned view's codes of the frozen layers 1..m-1 as they
        were when the phase began (L_HC's targets, eq. 10: "the learned codes"); the decoder is teacher-forced
        on them. None: the current codes.

    Returns:
      dict: z / z_hat [B, N_v, d_z], reconstruction [B, d_v], codes [B, N_v, num_layers], and for the
      aligned view: view_z [B, d_z], view_codes [B, num_layers], view_residuals [B, num_layers, d_z];
      hc_codes [B, m - 1] (L_HC's targets); h [B, m, d_z]; codebooks; tau_code, tau_align.
    """
    tok = self.tok(features, num_layers)
    pick = lambda x: jnp.take_along_axis(x, view.reshape((-1, 1) + (1,) * (x.ndim - 2)), axis=1)[:, 0]  # noqa: E731
    codes = pick(tok["codes"])
    earlier = codes[:, :train_layer - 1] if frozen_codes is None else jnp.asarray(frozen_codes, jnp.int32)
    h = self.retriever_h(queries, earlier, deterministic)
    tau_code, tau_align = self.temperatures()
    return {**tok, "view_z": pick(tok["z"]), "view_codes": codes, "view_residuals": pick(tok["residuals"]),
            "hc_codes": earlier, "h": h, "codebooks": self.tok.codebooks, "tau_code": tau_code,
            "tau_align": tau_align}

  def retriever_h(self, queries, prefix, deterministic: bool = True):
    """Teacher forcing: queries [B, ...] and codes int [B, m - 1] -> h_1 .. h_m [B, m, d_z]."""
    return self.decode(self.encode_query(queries, deterministic), prefix, deterministic)

  def video_codes(self, features, num_layers: int | None = None):
    """Offline indexing: f_v [V, d_v] -> codes [V, N_v, m] (eq. 3-5)."""
    return self.tok(features, num_layers)["codes"]

  def __call__(self, features, queries):
    """For `init`: touches every parameter."""
    out = self.phase_outputs(features, queries, jnp.zeros(features.shape[0], jnp.int32),
                             self.tokenizer.num_layers, self.tokenizer.num_layers)
    return out["h"], out["reconstruction"]
