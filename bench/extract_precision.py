"""Extraction's bfloat16 default against float32, on the same clips (docs/scaling.md "Extraction precision").

    python bench/extract_precision.py [--model videoprism_lvt_public_v1_base] [--checkpoint FILE.npz]
                                      [--frames 8] [--resolution 288] [--clips 4] [--json FILE]

`config.model.fprop_dtype="auto"` extracts in bfloat16 on an accelerator (bf16 operands, float32 parameters and
accumulation, layer norms and softmax in float32) and in float32 on a CPU. This embeds the same clips of the demo
video (`../shared/data/videoprism_assets`, equal segments of it) and the same captions twice with the extraction's
own functions (`vidjax.extract.make_video_fn` / `make_text_fn`): once in float32 at "highest" (what "float32" gives on
any backend) and once in bfloat16, and reports per kind (clip, frame_clip, text) the largest and the mean of
1 - cos(bf16, f32) over the items, and for how many captions the nearest clip is the same (with float32's margin
between a caption's best and second-best clip beside it: random weights embed clips alike). On a CPU, XLA emulates
bfloat16 with the same roundings a GPU's bf16 matmuls make (bf16 operands and outputs, float32 accumulation), so
the distance measured here is the one an accelerator's extraction has; only its speed is not. Without
`--checkpoint` the weights are the seeded random init (`vidjax.extract.random_variables`): no released checkpoint
is on this machine.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import machine  # bench/machine.py

import jax
import jax.numpy as jnp
import numpy as np

from vidjax import checkpoints
from vidjax import extract as engine
from vidjax.data import video as video_lib
from vidjax.models import videoprism as vp
from vidjax.tokenizers.sentencepiece import SentencePieceTokenizer

ASSETS = Path(__file__).resolve().parents[2] / "shared" / "data" / "videoprism_assets"
CAPTIONS = ["a person drums on a water bottle", "someone taps a plastic bottle with sticks", "a cat sleeps on a sofa",
            "hands play a rhythm", "a bottle of water on a table", "a man cooks pasta in a kitchen",
            "drumming with two sticks", "a close-up of a drum beat"]


def embed(model, variables, frames, tokenizer, mesh):
  kinds = ("clip", "frame_clip")
  video = engine.make_video_fn(model, variables, mesh, kinds)(jax.device_put(frames))
  text = engine.make_text_fn(model, variables, tokenizer, mesh)(CAPTIONS)
  return {k: np.asarray(video[k], np.float32) for k in kinds} | {"text": np.asarray(text, np.float32)}


def one_minus_cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  a, b = a.reshape(-1, a.shape[-1]).astype(np.float64), b.reshape(-1, b.shape[-1]).astype(np.float64)
  return 1.0 - np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--model", default="videoprism_lvt_public_v1_base")
  p.add_argument("--checkpoint", default="", help="an official .npz (default: the seeded random init)")
  p.add_argument("--frames", type=int, default=8, help="frames per clip (CAST App. A: 8 on YouCook2)")
  p.add_argument("--resolution", type=int, default=288)
  p.add_argument("--clips", type=int, default=4, help="equal segments of the demo video")
  p.add_argument("--json", default="", help="also write the rows here")
  args = p.parse_args(argv)

  mp4 = ASSETS / "water_bottle_drumming.mp4"
  duration = 100 / 12  # the demo's 100 frames at 12 fps (tests/test_video.py)
  bounds = np.linspace(0.0, duration, args.clips + 1)
  decoded = video_lib.decode_clips(mp4, [(float(a), float(b)) for a, b in zip(bounds[:-1], bounds[1:])],
                                   args.frames, args.resolution)
  tokenizer = SentencePieceTokenizer(str(ASSETS / "test_spm.model"))
  mesh = engine.local_mesh()
  out, seconds = {}, {}
  for dtype in ("float32", "bfloat16"):
    model = vp.get_model(args.model, fprop_dtype=jnp.dtype(dtype))
    variables = (checkpoints.load_videoprism(args.checkpoint, model) if args.checkpoint
                 else engine.random_variables(model, seed=0))
    with jax.default_matmul_precision("highest"):
      embed(model, variables, decoded.frames[:1], tokenizer, mesh)  # compile
      start = time.perf_counter()
      out[dtype] = embed(model, variables, decoded.frames, tokenizer, mesh)
      seconds[dtype] = time.perf_counter() - start
  rows = []
  for kind in ("clip", "frame_clip", "text"):
    d = one_minus_cos(out["bfloat16"][kind], out["float32"][kind])
    rows.append({"kind": kind, "items": int(d.size), "max_1_minus_cos": float(d.max()),
                 "mean_1_minus_cos": float(d.mean())})
  sims = {t: out[t]["text"] @ out[t]["clip"].T for t in out}
  nearest = {t: np.argmax(v, axis=1) for t, v in sims.items()}
  same = int(np.sum(nearest["bfloat16"] == nearest["float32"]))
  top2 = np.sort(sims["float32"], axis=1)[:, -2:]
  margin = float(np.median(top2[:, 1] - top2[:, 0]))  # float32: each caption's best clip over its second best
  moved = float(np.abs(sims["bfloat16"] - sims["float32"]).max())
  weights = args.checkpoint or "random init (seed 0)"
  print(f"machine: {machine.describe()}")
  print(f"{args.model}, {weights}: {args.clips} clips x {args.frames} frames x {args.resolution}^2 px of the demo "
        f"video, {len(CAPTIONS)} captions; bf16 fprop against float32 at 'highest'")
  print("| kind | items | max 1 - cos | mean 1 - cos |\n|---|---:|---:|---:|")
  for r in rows:
    print(f"| {r['kind']} | {r['items']} | {r['max_1_minus_cos']:.2e} | {r['mean_1_minus_cos']:.2e} |")
  print(f"captions whose nearest clip is the same in both: {same} of {len(CAPTIONS)} (float32's median margin of a "
        f"caption's best clip over its second: {margin:.2e}; the largest caption-clip cosine moved {moved:.2e}); "
        "seconds (embed, after compiling): " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()))
  if args.json:
    Path(args.json).write_text(json.dumps({"rows": rows, "same_nearest_clip": same, "margin": margin, "moved": moved,
                                           "seconds": seconds,
                                           "machine": machine.describe(), "args": vars(args)}, indent=1) + "\n")
  return rows


if __name__ == "__main__":
  main()
