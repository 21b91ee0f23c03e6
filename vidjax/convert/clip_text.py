"""CLIP's text tower in a checkpoint -> the params of `vidjax.models.clip_text.CLIPTextTower` (what X-Pool's converter
uses for its fine-tuned query encoder).

Two layouts, told apart by their keys under `prefix` (X-Pool's: "clip."):
  * Hugging Face's `CLIPModel` (X-Pool with `--huggingface`, as both X-Pool's and GRDR's released checkpoints are
    trained): `text_model.embeddings.{token_embedding,position_embedding}.weight`, `text_model.encoder.layers.<i>.
    {layer_norm1, self_attn.{q,k,v,out}_proj, layer_norm2, mlp.fc1, mlp.fc2}`, `text_model.final_layer_norm`,
    `text_projection.weight` `[P, W]` (a Linear without bias); checkpoints of older transformers versions also hold
    the buffer `text_model.embeddings.position_ids` (0 .. context - 1, checked); the vision tower
    (`vision_model.*`, `visual_projection.*`) is skipped;
  * OpenAI's `CLIP` (X-Pool's `model/clip_model.py`): `token_embedding.weight`, `positional_embedding`,
    `transformer.resblocks.<i>.{ln_1, attn.in_proj_weight / in_proj_bias (query, key, value rows in that order),
    attn.out_proj, ln_2, mlp.c_fc, mlp.c_proj}`, `ln_final`, `text_projection` `[W, P]` (multiplied from the right,
    so it is the kernel as it is); the vision tower (`visual.*`) is skipped.
torch's `[out, in]` Linear weights are transposed to kernels. The number of heads is not in the checkpoint (the
weights' shapes do not depend on it): `heads`, default CLIP's rule width // 64 (8 for ViT-B/32's 512-wide tower).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from vidjax.convert.state_dict import ConversionError, StateDict
from vidjax.convert.torch_layers import layer_norm, linear, width_of
from vidjax.models.clip_text import CLIPTextConfig

HF = "text_model."
HF_VISION = ("vision_model.", "visual_projection.")
OPENAI_VISION = "visual."
VISION_SKIPPED = "CLIP's image tower: vidjax's X-Pool reads its outputs, the per-frame features, as inputs"


def _layers(sd: StateDict, key_of_layer) -> int:
  n = 0
  while key_of_layer(n) in sd:
    n += 1
  if not n:
    raise ConversionError(f"{sd.source}: missing key {key_of_layer(0)!r} (the text tower's first layer)")
  return n


def _heads(sd: StateDict, heads: int | None, width: int) -> int:
  heads = width // 64 if heads is None else heads
  if not (isinstance(heads, int) and heads >= 1 and width % heads == 0):
    raise ConversionError(f"{sd.source}: text_heads={heads!r} must be a positive divisor of the text tower's width "
                          f"{width} (the checkpoint does not hold it; CLIP's rule is width // 64)")
  return heads


def _huggingface(sd: StateDict, prefix: str, heads: int | None) -> tuple[dict, CLIPTextConfig]:
  p = prefix + HF
  vocab, width = (width_of(sd, f"{p}embeddings.token_embedding.weight", axis) for axis in (0, 1))
  context = width_of(sd, f"{p}embeddings.position_embedding.weight")
  if f"{p}embeddings.position_ids" in sd:
    ids = sd.take(f"{p}embeddings.position_ids")
    if not np.array_equal(ids.reshape(-1), np.arange(context)):
      raise ConversionError(f"{sd.source}: key {p}embeddings.position_ids is not 0 .. {context - 1}")
  layer = lambda i: f"{p}encoder.layers.{i}"  # noqa: E731
  layers = _layers(sd, lambda i: f"{layer(i)}.layer_norm1.weight")
  mlp = width_of(sd, f"{layer(0)}.mlp.fc1.weight")
  projection = width_of(sd, f"{prefix}text_projection.weight")
  config = CLIPTextConfig(width=width, layers=layers, heads=_heads(sd, heads, width), context=context, vocab=vocab,
                          projection=projection, mlp_width=mlp)
  params = {"token_embedding": {"embedding": sd.take(f"{p}embeddings.token_embedding.weight", (vocab, width))},
            "position_embedding": sd.take(f"{p}embeddings.position_embedding.weight", (context, width))}
  for i in range(layers):
    block = {"ln_1": layer_norm(sd, f"{layer(i)}.layer_norm1", width),
             "ln_2": layer_norm(sd, f"{layer(i)}.layer_norm2", width),
             "fc1": linear(sd, f"{layer(i)}.mlp.fc1", width, mlp), "fc2": linear(sd, f"{layer(i)}.mlp.fc2", mlp, width)}
    block.update({f"{n}_proj": linear(sd, f"{layer(i)}.self_attn.{n}_proj", width, width)
                  for n in ("q", "k", "v", "out")})
    params[f"block_{i}"] = block
  params["ln_final"] = layer_norm(sd, f"{p}final_layer_norm", width)
  params["text_projection"] = {"kernel": sd.take(f"{prefix}text_projection.weight", (projection, width)).T.copy()}
  for vision in HF_VISION:
    sd.skip(prefix + vision, VISION_SKIPPED)
  return params, config


def _openai(sd: StateDict, prefix: str, heads: int | None) -> tuple[dict, CLIPTextConfig]:
  vocab, width = (width_of(sd, f"{prefix}token_embedding.weight", axis) for axis in (0, 1))
  context = width_of(sd, f"{prefix}positional_embedding")
  layer = lambda i: f"{prefix}transformer.resblocks.{i}"  # noqa: E731
  layers = _layers(sd, lambda i: f"{layer(i)}.ln_1.weight")
  mlp = width_of(sd, f"{layer(0)}.mlp.c_fc.weight")
  projection = width_of(sd, f"{prefix}text_projection", axis=1)
  config = CLIPTextConfig(width=width, layers=layers, heads=_heads(sd, heads, width), context=context, vocab=vocab,
                          projection=projection, mlp_width=mlp)
  params = {"token_embedding": {"embedding": sd.take(f"{prefix}token_embedding.weight", (vocab, width))},
            "position_embedding": sd.take(f"{prefix}positional_embedding", (context, width))}
  for i in range(layers):
    qkv_w = sd.take(f"{layer(i)}.attn.in_proj_weight", (3 * width, width))
    qkv_b = sd.take(f"{layer(i)}.attn.in_proj_bias", (3 * width,))
    rows = lambda j: slice(j * width, (j + 1) * width)  # noqa: E731
    block = {f"{n}_proj": {"kernel": qkv_w[rows(j)].T.copy(), "bias": qkv_b[rows(j)]} for j, n in enumerate("qkv")}
    block.update({"out_proj": linear(sd, f"{layer(i)}.attn.out_proj", width, width),
                  "ln_1": layer_norm(sd, f"{layer(i)}.ln_1", width), "ln_2": layer_norm(sd, f"{layer(i)}.ln_2", width),
                  "fc1": linear(sd, f"{layer(i)}.mlp.c_fc", width, mlp),
                  "fc2": linear(sd, f"{layer(i)}.mlp.c_proj", mlp, width)})
    params[f"block_{i}"] = block
  params["ln_final"] = layer_norm(sd, f"{prefix}ln_final", width)
  params["text_projection"] = {"kernel": sd.take(f"{prefix}text_projection", (width, projection))}
  sd.skip(prefix + OPENAI_VISION, VISION_SKIPPED)
  return params, config


def convert(sd: StateDict, prefix: str = "", heads: int | None = None) -> tuple[dict, dict]:
  """(CLIPTextTower params, info) of the text tower under `prefix`; info: {"layout", "config" (CLIPTextConfig's
  fields)}. The vision tower under `prefix` is skipped; every other key is left to the caller."""
  if sd.has_prefix(prefix + HF):
    params, config = _huggingface(sd, prefix, heads)
    layout = "huggingface"
  elif f"{prefix}token_embedding.weight" in sd:
    params, config = _openai(sd, prefix, heads)
    layout = "openai"
  else:
    raise ConversionError(f"{sd.source}: no CLIP text tower: neither {prefix}{HF}* (Hugging Face's layout) nor "
                          f"{prefix}token_embedding.weight (OpenAI's)")
  return params, {"layout": layout, "config": dataclasses.asdict(config)}
