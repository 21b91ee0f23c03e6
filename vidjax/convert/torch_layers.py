"""torch layers' state-dict entries as flax params: what the converters share.

torch's `nn.Linear` keeps its weight as `[out, in]` and computes `x W^T + b`; flax's `nn.Dense` keeps a kernel
`[in, out]` and computes `x K + b`, so K = W^T. `nn.LayerNorm`'s `weight` is flax's `scale`.
"""
from __future__ import annotations

import numpy as np

from vidjax.convert.state_dict import ConversionError, StateDict


def linear(sd: StateDict, prefix: str, width_in: int, width_out: int) -> dict:
  """`<prefix>.weight` [out, in] and `<prefix>.bias` [out] -> a Dense's {kernel [in, out], bias}."""
  return {"kernel": sd.take(f"{prefix}.weight", (width_out, width_in)).T.copy(),
          "bias": sd.take(f"{prefix}.bias", (width_out,))}


def layer_norm(sd: StateDict, prefix: str, width: int) -> dict:
  """`<prefix>.weight` / `.bias` [width] -> a LayerNorm's {scale, bias}."""
  return {"scale": sd.take(f"{prefix}.weight", (width,)), "bias": sd.take(f"{prefix}.bias", (width,))}


def identity_dense(width_in: int, width_out: int) -> dict:
  """A Dense that passes its input through: the (rectangular) identity kernel, zero bias."""
  return {"kernel": np.eye(width_in, width_out, dtype=np.float32), "bias": np.zeros(width_out, np.float32)}


def width_of(sd: StateDict, key: str, axis: int = 0) -> int:
  """The size of `key`'s `axis` (the key marked used; its full shape is checked by the converter's later take)."""
  value = sd.take(key)
  if value.ndim <= axis:
    raise ConversionError(f"{sd.source}: key {key!r} has shape {tuple(value.shape)}, expected at least {axis + 1} axes")
  return int(value.shape[axis])
