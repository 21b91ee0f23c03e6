"""An X-Pool checkpoint (layer6ai-labs/xpool, `model/clip_transformer.py`'s `CLIPTransformer`) -> two vidjax models:
the params of `vidjax.models.dense.DenseRetriever(pooling="xpool")` (part `RETRIEVER`) and of its query encoder
`vidjax.models.clip_text.CLIPTextTower` (part `TEXT_TOWER`), one conversion holding both
(`vidjax.convert.into(..., subtree=RETRIEVER)` loads the first).

The checkpoint holds `pool_frames.*` (`modules/transformer.py`'s `Transformer`, the text-conditioned pooling) and
`clip.*` (the CLIP towers X-Pool fine-tunes, OpenAI's or Hugging Face's layout, with `clip.logit_scale`).
  * `pool_frames.layer_norm{1,2,3}`, `.cross_attn.{q,k,v,out}_proj`, `.linear_proj` -> `xpool/<same name>` (torch's
    `[out, in]` weights transposed to kernels);
  * the text tower (`clip.text_model.*` and `clip.text_projection.weight`, or OpenAI's `clip.token_embedding.weight`,
    `clip.transformer.*`, ...) -> `TEXT_TOWER` (`vidjax.convert.clip_text`): X-Pool embeds each query with it, so
    the rerank reads the queries this tower embeds (`vidjax.convert.embed_text`), in the space the pooling was
    trained in;
  * the image tower (`clip.vision_model.*`, `clip.visual_projection.*`, or OpenAI's `clip.visual.*`) is skipped:
    vidjax's inputs are its outputs, the per-frame features (the release ships them), so `frame_proj` and
    `text_proj` (which stand in for the towers' last projections when vidjax trains) are the identity and the
    towers' own projections stay in the features;
  * `clip.logit_scale` (ln of the loss's logit scale, clamped at ln 100 by X-Pool's trainer) becomes the model's
    `temperature` (exp(-logit_scale), in `info["config"]`), or its learned `log_logit_scale` with
    `learn_logit_scale=True`.
The numbers of attention heads are not in the checkpoint (the weights' shapes do not depend on them): `heads` for
the pooling, default the release's `num_mha_heads` = 1 (`config/all_config.py`); `text_heads` for the text tower,
default CLIP's width // 64.

`info["config"]` holds the dense section's `model.*` values the checkpoint fixes (`configs/dense/common.py`);
`info["widths"]` the text and frame feature widths the inputs must have; `info["text_tower"]` the tower's layout and
`CLIPTextConfig` fields; `info["parts"]` the conversion's two parts.
"""
from __future__ import annotations

import math

import numpy as np

from vidjax.convert import clip_text
from vidjax.convert.state_dict import ConversionError, StateDict
from vidjax.convert.torch_layers import identity_dense, layer_norm, linear, width_of

POOL = "pool_frames"
RETRIEVER, TEXT_TOWER = "retriever", "text_tower"  # the conversion's parts (module docstring)


def convert(sd: StateDict, heads: int = 1, learn_logit_scale: bool = False,
            text_heads: int | None = None) -> tuple[dict, dict]:
  """({RETRIEVER: DenseRetriever params, TEXT_TOWER: CLIPTextTower params}, info) of an X-Pool state dict (the module
  docstring)."""
  width = width_of(sd, f"{POOL}.layer_norm1.weight")
  if not (isinstance(heads, int) and heads >= 1 and width % heads == 0):
    raise ConversionError(f"{sd.source}: heads={heads!r} must be a positive divisor of the width {width}")
  xpool = {f"layer_norm{i}": layer_norm(sd, f"{POOL}.layer_norm{i}", width) for i in (1, 2, 3)}
  xpool.update({name: linear(sd, f"{POOL}.cross_attn.{name}", width, width)
                for name in ("q_proj", "k_proj", "v_proj", "out_proj")})
  xpool["linear_proj"] = linear(sd, f"{POOL}.linear_proj", width, width)
  log_scale = float(sd.take("clip.logit_scale", ()))
  tower, tower_info = clip_text.convert(sd, "clip.", text_heads)
  if tower_info["config"]["projection"] != width:
    raise ConversionError(f"{sd.source}: the text tower projects to {tower_info['config']['projection']} but the "
                          f"pooling is {width} wide; X-Pool pools with the tower's text features")
  retriever = {"xpool": xpool, "frame_proj": identity_dense(width, width), "text_proj": identity_dense(width, width)}
  if learn_logit_scale:
    retriever["log_logit_scale"] = np.asarray(log_scale, np.float32)
  sd.finish()
  params = {RETRIEVER: retriever, TEXT_TOWER: tower}
  info = {"pooling": "xpool", "parts": [RETRIEVER, TEXT_TOWER], "text_tower": tower_info,
          "widths": {"embed_dim": width, "frame_dim": width},
          "config": {"model.xpool_heads": heads, "model.temperature": math.exp(-log_scale),
                     "model.learn_logit_scale": bool(learn_logit_scale)},
          "logit_scale": math.exp(log_scale)}
  return params, info
