"""A CLIP4Clip checkpoint (ArrowLuo/CLIP4Clip, `modules/modeling.py`'s `CLIP4Clip`, trained with `--loose_type`)
-> the params of `vidjax.models.dense.DenseRetriever(pooling="meanp" | "seqtransf")`.

The pooling follows the checkpoint's `sim_header`, read from its keys: `transformerClip.*` with
`frame_position_embeddings.weight` is seqTransf, neither is meanP; an explicit `pooling` option must agree. seqLSTM
(`lstm_visual.*`) and tightTransf (`cross.*`, `similarity_dense.*`) have no vidjax counterpart and are refused.
  * seqTransf: `frame_position_embeddings.weight` `[P, W]` -> `seq_transformer/frame_position_embeddings`;
    `transformerClip.resblocks.<i>` (module_cross's residual attention block) -> `seq_transformer/block_<i>`:
    `attn.in_proj_weight` / `in_proj_bias` split into query, key, value (rows in that order), `attn.out_proj` ->
    `out`, `mlp.c_fc`, `mlp.c_proj`, `ln_1`, `ln_2` (torch's `[out, in]` weights transposed to kernels);
  * `clip.*` is skipped: vidjax holds no towers, its inputs are their features (CLIP's projected frame and text
    embeddings from this checkpoint's own towers), so `frame_proj` and `text_proj` are the identity;
  * `clip.logit_scale` (ln of the logit scale `_loose_similarity` multiplies by) becomes the model's `temperature`
    (exp(-logit_scale), in `info["config"]`), or its learned `log_logit_scale` with `learn_logit_scale=True`.
The heads of `transformerClip` are not in the checkpoint: `heads`, default CLIP4Clip's rule width // 64.

`info["config"]` holds the dense section's `model.*` values the checkpoint fixes (`configs/dense/common.py`: the
layers, the head width, the position table's length); `info["widths"]` the feature widths the inputs must have.
"""
from __future__ import annotations

import math
import re

import numpy as np

from vidjax.convert.state_dict import ConversionError, StateDict
from vidjax.convert.torch_layers import identity_dense, layer_norm, linear, width_of

UNSUPPORTED = {"lstm_visual.": "seqLSTM", "cross.": "tightTransf", "similarity_dense.": "tightTransf"}


def _block(sd: StateDict, prefix: str, width: int) -> dict:
  qkv_w = sd.take(f"{prefix}.attn.in_proj_weight", (3 * width, width))
  qkv_b = sd.take(f"{prefix}.attn.in_proj_bias", (3 * width,))
  block = {name: {"kernel": qkv_w[i * width:(i + 1) * width].T.copy(), "bias": qkv_b[i * width:(i + 1) * width]}
           for i, name in enumerate(("query", "key", "value"))}
  block["out"] = linear(sd, f"{prefix}.attn.out_proj", width, width)
  block["c_fc"] = linear(sd, f"{prefix}.mlp.c_fc", width, 4 * width)
  block["c_proj"] = linear(sd, f"{prefix}.mlp.c_proj", 4 * width, width)
  block["ln_1"] = layer_norm(sd, f"{prefix}.ln_1", width)
  block["ln_2"] = layer_norm(sd, f"{prefix}.ln_2", width)
  return block


def convert(sd: StateDict, pooling: str | None = None, heads: int | None = None,
            learn_logit_scale: bool = False) -> tuple[dict, dict]:
  """(DenseRetriever params, info) of a CLIP4Clip state dict (the module docstring)."""
  for prefix, header in UNSUPPORTED.items():
    if sd.has_prefix(prefix):
      raise ConversionError(f"{sd.source}: a {header} checkpoint (keys {prefix}*); vidjax has meanP and seqTransf")
  found = "seqtransf" if sd.has_prefix("transformerClip.") or "frame_position_embeddings.weight" in sd else "meanp"
  if pooling is not None and pooling != found:
    raise ConversionError(f"{sd.source}: pooling={pooling!r}, but the checkpoint's keys are {found}'s")
  embed = width_of(sd, "clip.text_projection", axis=1)  # CLIP's joint space: the features' width
  params = {"frame_proj": identity_dense(embed, embed), "text_proj": identity_dense(embed, embed)}
  config = {}
  if found == "seqtransf":
    table = sd.take("frame_position_embeddings.weight")
    if table.ndim != 2 or table.shape[1] != embed:
      raise ConversionError(f"{sd.source}: key 'frame_position_embeddings.weight' has shape {tuple(table.shape)}, "
                            f"expected (P, {embed})")
    positions, width = table.shape
    heads = width // 64 if heads is None else heads
    if not (isinstance(heads, int) and heads >= 1 and width % heads == 0):
      raise ConversionError(f"{sd.source}: heads={heads!r} must be a positive divisor of the width {width}")
    layers = sorted({int(m.group(1)) for k in sd.keys() if (m := re.match(r"transformerClip\.resblocks\.(\d+)\.", k))})
    if layers != list(range(len(layers))) or not layers:
      raise ConversionError(f"{sd.source}: transformerClip.resblocks.* must be numbered 0..L-1, found {layers}")
    seq = {"frame_position_embeddings": table}
    seq.update({f"block_{i}": _block(sd, f"transformerClip.resblocks.{i}", width) for i in layers})
    params["seq_transformer"] = seq
    config = {"model.seq_layers": len(layers), "model.seq_head_dim": width // heads, "model.max_positions": positions}
  log_scale = float(sd.take("clip.logit_scale", ()))
  if learn_logit_scale:
    params["log_logit_scale"] = np.asarray(log_scale, np.float32)
  sd.skip("clip.", "CLIP4Clip's CLIP towers: vidjax's inputs are their features (frame_proj and text_proj are the "
                   "identity)")
  sd.finish()
  config.update({"model.temperature": math.exp(-log_scale), "model.learn_logit_scale": bool(learn_logit_scale)})
  info = {"pooling": found, "pooling_from": "the checkpoint's keys" + (" (as the option)" if pooling else ""),
          "widths": {"embed_dim": embed, "frame_dim": embed}, "config": config, "logit_scale": math.exp(log_scale)}
  return params, info
