"""Layers more than one model shares."""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from vidjax.ops import dropout_keep_mask


class Dropout(nn.Module):
  """Inverted dropout (`flax.linen.Dropout`'s contract) with `ops.dropout_keep_mask`'s cheaper mask.

  Kept elements are scaled by 1 / keep probability; `deterministic=True` or rate 0 is the identity.
  Draws from the "dropout" rng collection, as flax's Dropout does.
  """
  rate: float

  @nn.compact
  def __call__(self, x, deterministic: bool):
    if deterministic or self.rate == 0.0:
      return x
    keep, keep_prob = dropout_keep_mask(self.make_rng("dropout"), x.shape, self.rate)
    return jnp.where(keep, x / jnp.asarray(keep_prob, x.dtype), jnp.zeros((), x.dtype))
