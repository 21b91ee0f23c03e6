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


def scan_blocks(module: nn.Module, arrays: tuple, block: int, deterministic: bool):
  """`module(*arrays, deterministic)` over the rows of `arrays` in blocks of at most `block` rows through one
  `nn.scan` (parameters broadcast, not copied): as few blocks as `block` allows, of equal size (225 rows at most 212
  a block run as 2 x 113, not 2 x 212), the last padded with copies of the first row and its outputs dropped.
  Training (`deterministic=False`): each block is rematerialized in the backward pass (`nn.remat`), so a step keeps
  one block's activations instead of every row's, and draws its own dropout masks. The outputs' rows are the
  arrays' rows, as one call would give them (up to float rounding and the dropout draws)."""
  n = arrays[0].shape[0]
  count = -(-n // block)
  block = -(-n // count)
  pad = -n % block
  blocks = tuple(jnp.concatenate([a, jnp.repeat(a[:1], pad, axis=0)]).reshape(-1, block, *a.shape[1:])
                 for a in arrays)
  body = lambda mdl, carry, xs: (carry, mdl(*xs, deterministic))  # noqa: E731
  if deterministic:
    scan = nn.scan(body, variable_broadcast="params", split_rngs={"params": False})
  else:
    scan = nn.scan(nn.remat(body), variable_broadcast="params", split_rngs={"params": False, "dropout": True})
  _, out = scan(module, None, blocks)
  return out.reshape(-1, *out.shape[2:])[:n]
