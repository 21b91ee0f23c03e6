"""Benchmark: VideoPrism feature-extraction throughput (frames/s) and achieved FLOP/s.

Runs the video branch the extractor runs (`vidjax/experiments/extract.py:make_video_fn`: LvT clip
embedding + mean-pooled tokens) with random weights at a reduced resolution, compares the
achieved FLOP/s with a float32 matmul rate measured in the same process, and times PyAV decoding
of the real demo clip at the same resolution.

FLOPs are counted analytically (matmuls only: projections, attention, FFN, patch projection,
pooler). XLA's `cost_analysis()` of the scanned model counts each `nn.scan` layer body once; on
an unscanned copy (LvT base, 4 x 72 px) it gives 4.34 GFLOP/frame against 4.27 analytic.

  python bench/videoprism_extract.py                      # base, 72 px, 4 frames, batch 2
  python bench/videoprism_extract.py --resolution 144 --frames 8 --batch 4
  python bench/videoprism_extract.py --model videoprism_lvt_public_v1_large --resolution 288
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import machine  # pylint: disable=g-import-not-at-top  (bench/machine.py)
import jax
import jax.numpy as jnp
import numpy as np

from vidjax import extract as engine
from vidjax.data import video
from vidjax.models import videoprism as vp

MP4 = REPO.parent / "shared" / "data" / "videoprism_assets" / "water_bottle_drumming.mp4"


def analytic_flops(model, batch: int, frames: int, resolution: int) -> float:
  """Matmul FLOPs of one video forward pass `[B, T, H, W, 3]` (2 per multiply-add)."""
  d, f, p = model.model_dim, model.mlp_dim, model.patch_size
  n = (resolution // p) ** 2

  def stack(layers, sequences, length):
    tokens = sequences * length
    dense = tokens * (4 * 2 * d * d + 2 * 2 * d * f)  # q, k, v, post + two FFN matmuls
    attention = sequences * 2 * 2 * length * length * d  # logits + context
    return layers * (dense + attention)

  total = batch * frames * n * 2 * (p * p * 3) * d  # patch projection
  total += stack(model.num_spatial_layers, batch * frames, n)
  total += stack(model.num_temporal_layers, batch * n, frames)
  if isinstance(model, vp.FactorizedVideoCLIP):
    total += stack(model.num_auxiliary_layers, batch, frames * n)
    w = 4 * d  # pooler attention width
    total += batch * (frames * n * 2 * 2 * d * w + 2 * 2 * frames * n * w + 2 * 2 * d * w)
  return float(total)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--model", default="videoprism_lvt_public_v1_base")
  p.add_argument("--resolution", type=int, default=72)
  p.add_argument("--frames", type=int, default=4)
  p.add_argument("--batch", type=int, default=2)
  p.add_argument("--iters", type=int, default=3)
  p.add_argument("--matmul", type=int, default=2048, help="side of the reference float32 matmul")
  p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  args = p.parse_args(argv)

  model = vp.get_model(args.model, fprop_dtype=jnp.dtype(args.dtype))
  variables = engine.random_variables(model, seed=0)
  mesh = engine.local_mesh()
  batch = -(-args.batch // mesh.devices.size) * mesh.devices.size
  fn = engine.make_video_fn(model, variables, mesh, ("clip", "clip_mean"))
  frames = jax.device_put(
      np.random.default_rng(0).uniform(size=(batch, args.frames, args.resolution, args.resolution, 3))
      .astype(np.float32), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data")))

  t = time.perf_counter()
  jax.block_until_ready(fn(frames))
  compile_s = time.perf_counter() - t
  step_flops = analytic_flops(model, batch, args.frames, args.resolution)
  step_s = machine.timed(fn, frames, iters=args.iters)
  model_fps = batch * args.frames / step_s
  achieved = step_flops / step_s
  peak = machine.matmul_flops_per_s(args.matmul, iters=args.iters)

  t = time.perf_counter()
  decoded = video.decode_clips(MP4, [(i * 0.5, i * 0.5 + 2.0) for i in range(8)], args.frames, args.resolution)
  decode_s = time.perf_counter() - t
  decode_fps = decoded.frames.shape[0] * args.frames / decode_s

  dev = jax.devices()[0]
  rows = [
      ("machine", machine.cpu_model()),
      ("cores (os.cpu_count)", str(os.cpu_count())),
      ("device", f"{len(jax.devices())} x {dev.device_kind} ({dev.platform})"),
      ("jax", jax.__version__),
      ("model", f"{args.model} ({args.dtype}, random weights)"),
      ("input", f"batch {batch} x {args.frames} frames x {args.resolution}^2 px"),
      ("compile + first step", f"{compile_s:.1f} s"),
      ("step", f"{step_s * 1e3:.1f} ms (median of {args.iters})"),
      ("model frames/s", f"{model_fps:.1f}"),
      ("FLOPs / frame (analytic)", f"{step_flops / (batch * args.frames) / 1e9:.2f} GFLOP"),
      ("achieved", f"{achieved / 1e9:.1f} GFLOP/s"),
      (f"f32 matmul {args.matmul}^2", f"{peak / 1e9:.1f} GFLOP/s"),
      ("achieved / matmul", f"{achieved / peak:.1%}"),
      ("decode frames/s (PyAV, real mp4)", f"{decode_fps:.1f}"),
  ]
  width = max(len(k) for k, _ in rows)
  print("VideoPrism feature extraction benchmark")
  for k, v in rows:
    print(f"  {k:<{width}}  {v}")
  return dict(rows)


if __name__ == "__main__":
  main()
