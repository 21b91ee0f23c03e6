"""An X-Pool checkpoint (layer6ai-labs/xpool, `model/clip_transformer.py`'s `CLIPTransformer`) -> the params of
`vidjax.models.dense.DenseRetriever(pooling="xpool")`.

The checkpoint holds `pool_frames.*` (`modules/transformer.py`'s `Transformer`, the text-conditioned pooling) and
`clip.*` (the CLIP towers X-Pool fine-tunes, OpenAI's or Hugging Face's layout, with `clip.logit_scale`).
  * `pool_frames.layer_norm{1,2,3}`, `.cross_attn.{q,k,v,out}_proj`, `.linear_proj` -> `xpool/<same name>` (torch's
    `[out, in]` weights transposed to kernels);
  * `clip.*` is skipped: vidjax holds no towers, its inputs are their features (the release's X-Pool video
    features, and text features from the same checkpoint's text tower), so `frame_proj` and `text_proj` (which
    stand in for the towers' last projections when vidjax trains) are the identity and the tower's own
    projections stay in the features;
  * `clip.logit_scale` (ln of the loss's logit scale, clamped at ln 100 by X-Pool's trainer) becomes the model's
    `temperature` (exp(-logit_scale), in `info["config"]`), or its learned `log_logit_scale` with
    `learn_logit_scale=True`.
The number of attention heads is not in the checkpoint (the weights' shapes do not depend on it): `heads`, default
the release's `num_mha_heads` = 1 (`config/all_config.py`).

`info["config"]` holds the dense section's `model.*` values the checkpoint fixes (`configs/dense/common.py`);
`info["widths"]` the text and frame feature widths the inputs must have.
"""
from __future__ import annotations

import math

import numpy as np

from vidjax.convert.state_dict import ConversionError, StateDict
from vidjax.convert.torch_layers import identity_dense, layer_norm, linear, width_of

POOL = "pool_frames"


def convert(sd: StateDict, heads: int = 1, learn_logit_scale: bool = False) -> tuple[dict, dict]:
  """(DenseRetriever params, info) of an X-Pool state dict (the module docstring)."""
  width = width_of(sd, f"{POOL}.layer_norm1.weight")
  if not (isinstance(heads, int) and heads >= 1 and width % heads == 0):
    raise ConversionError(f"{sd.source}: heads={heads!r} must be a positive divisor of the width {width}")
  xpool = {f"layer_norm{i}": layer_norm(sd, f"{POOL}.layer_norm{i}", width) for i in (1, 2, 3)}
  xpool.update({name: linear(sd, f"{POOL}.cross_attn.{name}", width, width)
                for name in ("q_proj", "k_proj", "v_proj", "out_proj")})
  xpool["linear_proj"] = linear(sd, f"{POOL}.linear_proj", width, width)
  log_scale = float(sd.take("clip.logit_scale", ()))
  sd.skip("clip.", "X-Pool's CLIP towers: vidjax's inputs are their features (frame_proj and text_proj are the "
                   "identity)")
  params = {"xpool": xpool, "frame_proj": identity_dense(width, width), "text_proj": identity_dense(width, width)}
  if learn_logit_scale:
    params["log_logit_scale"] = np.asarray(log_scale, np.float32)
  sd.finish()
  info = {"pooling": "xpool", "widths": {"embed_dim": width, "frame_dim": width},
          "config": {"model.xpool_heads": heads, "model.temperature": math.exp(-log_scale),
                     "model.learn_logit_scale": bool(learn_logit_scale)},
          "logit_scale": math.exp(log_scale)}
  return params, info
