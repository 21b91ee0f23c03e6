"""GRDR's multi-view video tokenizer (../shared/papers/grdr.txt §3.2) as Flax (linen) modules.

* `ViewMLPs` — N_v independent two-layer MLPs with a linear skip, stacked (one einsum per layer
  for all views): the view encoders phi_i (eq. 3) and the reconstruction decoders psi_i (eq. 7).
* `residual_quantize` — eq. 4-5: M layers of K codes, at each layer the code of maximum cosine
  with the current residual; the quantized vector z_hat is the sum of the selected entries.
* `Tokenizer` — f_v [B, d_v] -> views z [B, N_v, d_z] -> codes [B, N_v, m] for the first m layers,
  z_hat, and the reconstruction f~_v = mean_i psi_i(z_hat_i) [B, d_v]. The codebooks C^(1..M)
  [M, K, d_z] live here and are the ones the generative retriever predicts over (the shared
  codebook of §3.3).
* `match_views` — the view <-> query-cluster rule (below).

Decisions the paper leaves open:

* View encoder shape: phi_i(f) = W2 GELU(W1 f) + S f (width `hidden`), output L2-normalised,
  since everything downstream compares views by cosine (eq. 5, 8, 9). psi_i has the same shape
  without the normalisation.
* Gradients through the quantizer: straight-through (z + sg[z_hat - z]) into the reconstruction
  decoder, as RQ-VAE; the codebook learns from L_RQ's codebook term and, shared with the
  retriever, from L_CE / L_HC.
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

from vidjax.ops import check_positive_fields, l2_normalize

# Views up to this many are matched to clusters exactly (N_v! permutations), more greedily.
MAX_EXACT_VIEWS = 6


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
  """Defaults from §4.3: N_v = 4, M = 3, K = 128 (LSMDC: N_v = 1, K = 200).

  feature_dim: d_v, the frozen video feature (768: VideoPrism-LvT-B's stage-1 space).
  latent_dim: d_z, the view / codebook / retriever-output space.
  hidden: width of the view MLPs.
  """
  feature_dim: int = 768
  latent_dim: int = 512
  hidden: int = 1024
  num_views: int = 4
  num_layers: int = 3
  num_codes: int = 128

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
    (r^(l), the vector layer l quantizes: r^(1) = z).
  """
  codes, residuals = [], []
  r = z
  z_hat = jnp.zeros_like(z)
  for m in range(num_layers):
    book = codebooks[m]
    c = jnp.argmax(l2_normalize(r) @ l2_normalize(book).T, axis=-1).astype(jnp.int32)
    residuals.append(r)
    codes.append(c)
    z_hat = z_hat + book[c]
    r = z - z_hat
  return jnp.stack(codes, -1), z_hat, jnp.stack(residuals, -2)


class Tokenizer(nn.Module):
  """Multi-view encoder + residual quantizer + reconstruction decoder (see the module docstring)."""
  config: TokenizerConfig

  def setup(self):
    c = self.config
    self.encoder = ViewMLPs(c.num_views, c.hidden, c.latent_dim)
    self.decoder = ViewMLPs(c.num_views, c.hidden, c.feature_dim, per_view_input=True)
    self.codebooks = self.param("codebooks", nn.initializers.normal(1.0 / math.sqrt(c.latent_dim)),
                                (c.num_layers, c.num_codes, c.latent_dim))

  def encode(self, features):
    """f_v [..., d_v] -> unit views z [..., N_v, d_z] (eq. 3)."""
    return l2_normalize(self.encoder(features))

  def __call__(self, features, num_layers: int | None = None):
    """f_v [B, d_v] -> dict(z, codes [B, N_v, m], z_hat, residuals [B, N_v, m, d_z], reconstruction [B, d_v]).

    `num_layers` = m (default M): only the first m codebooks are used (progressive training).
    """
    m = self.config.num_layers if num_layers is None else num_layers
    z = self.encode(features)
    codes, z_hat, residuals = residual_quantize(z, self.codebooks, m)
    straight_through = z + jax.lax.stop_gradient(z_hat - z)
    reconstruction = jnp.mean(self.decoder(straight_through), axis=-2)
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
