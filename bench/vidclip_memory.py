"""VidCLIP's video tower: XLA's memory for an evaluation chunk and for the training block `memory_gb` allows.

    python bench/vidclip_memory.py [--tokens 256 16] [--chunk 256] [--memory-gb 4]

Lowers `VidClip.encode_video` (no execution) at the paper's VidCLIP (VideoComp's `configs/comp/common.py` model
section: width 1024, 196 pooling queries, 4096-wide MLP) over [B, 16 frames, tokens, 768] VideoPrism-B tokens, for
B = `--chunk` (`eval.chunk`, one pass) and B = the `video_block` of `--memory-gb` (`methods.vidclip.video_block`, what
`methods.vidclip.Encoder` now caps an evaluation chunk at), and prints XLA's own count of each (`memory_analysis`:
temporaries and arguments) with the device.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import machine  # bench/machine.py

import jax
import jax.numpy as jnp

from vidjax.defaults.common import config_module
from vidjax.methods import vidclip as M
from vidjax.models import vidclip as V


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--tokens", type=int, nargs="+", default=[256, 16], help="VideoPrism tokens a frame")
  parser.add_argument("--chunk", type=int, default=256, help="videos of one evaluation pass (eval.chunk)")
  parser.add_argument("--memory-gb", type=float, default=4.0, help="the model section's memory_gb")
  args = parser.parse_args()
  mc = config_module(Path(__file__).parents[1] / "configs" / "comp" / "common.py").get_config("youcook2").model
  mc.memory_gb = args.memory_gb
  print(f"machine: {machine.describe()}")
  print(f"{'tokens/frame':>12} | {'videos':>6} | {'what':<28} | {'temp GB':>8} | {'args GB':>8}")
  for tokens in args.tokens:
    cfg = M.model_config(mc, 768, tokens_per_frame=tokens)
    model = V.VidClip(cfg)
    params = jax.eval_shape(lambda: V.init_params(model, jax.random.PRNGKey(0), tokens))  # noqa: B023
    encode = jax.jit(lambda p, x: model.apply({"params": p}, x, method=V.VidClip.encode_video))  # noqa: B023
    for videos, what in ((args.chunk, "eval.chunk, one pass"), (cfg.video_block, f"video_block at {args.memory_gb:g} GB")):
      x = jax.ShapeDtypeStruct((videos, cfg.frames, tokens, cfg.visual_dim), jnp.float32)
      m = encode.lower(params, x).compile().memory_analysis()
      print(f"{tokens:>12} | {videos:>6} | {what:<28} | {m.temp_size_in_bytes / 1e9:>8.2f} | "
            f"{m.argument_size_in_bytes / 1e9:>8.2f}", flush=True)


if __name__ == "__main__":
  main()
