"""A small pair reranker over embeddings: the composed stack's rerank stage where no cached frames exist.

VEDJE (../shared/papers/vedje.txt eq. 5) scores a (text, video) pair with a cross-encoder over text tokens and
cached frame tokens, on top of the stage-1 score rho (its residual prior). A feature space with one embedding
per clip and per caption (the procedural world, a store of LvT clip / text embeddings) has no tokens to
cross-attend over; there the stack's rerank stage is this model, a learned correction to the stage-1 score:

    s(q, v) = w_rho * rho + t^T W v            t [D] query text, v [D] candidate clip; float32 [B, K]

W starts at zero and w_rho at 1, so an untrained reranker returns the stage-1 order. It is trained on the
stage-1 candidates of training queries (the hard negatives it will meet; ../shared/notes/vedje_learnability.md)
with `vidjax.losses.multi_positive_softmax`, every candidate that shows the query's step counting as a positive
(a text query alone cannot say which video it means).

Why bilinear and not an MLP over [t; v; t*v; |t-v|] (VEDJE's pooled-pair recipe on two vectors): measured on
the default procedural world, a 2 x 256 MLP reached 97% top-1 positives on its training queries against 26%
for the stage-1 order, and lowered the evaluation corpus's share of the query's step in the top 20 from 18% to
10%: with one vector per clip it memorised the training clips' noise. The bilinear form (D^2 weights, no
per-clip capacity) moved that share to 19.6% after one epoch, then fell back as it overfit (the default is one
epoch). A single clip vector carries little step evidence beyond what cosine already reads.

Shapes: text [B, D], candidates [B, K, D], prior [B, K] -> scores [B, K] float32.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class PairReranker(nn.Module):
  """s(q, v) = w_rho * rho + t^T W v over (text, candidate) embedding pairs (module docstring)."""
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, text: jax.Array, candidates: jax.Array, prior: jax.Array) -> jax.Array:
    if text.ndim != 2 or candidates.ndim != 3 or prior.shape != candidates.shape[:2] \
        or text.shape[0] != candidates.shape[0] or text.shape[-1] != candidates.shape[-1]:
      raise ValueError(f"PairReranker expects text [B, D], candidates [B, K, D], prior [B, K]; got {text.shape}, "
                       f"{candidates.shape}, {prior.shape}")
    d = text.shape[-1]
    w = self.param("bilinear", nn.initializers.zeros, (d, d))
    w_rho = self.param("prior_weight", nn.initializers.ones, ())
    correction = jnp.einsum("bd,de,bke->bk", text.astype(self.dtype), w.astype(self.dtype), candidates.astype(self.dtype))
    return w_rho * prior.astype(jnp.float32) + correction.astype(jnp.float32)
