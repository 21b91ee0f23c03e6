"""What each setting of `config.precision` costs and changes (README "Precision"), on this device.

    python bench/precision.py [--batch 512] [--dim 768] [--steps 20] [--resolution 72] [--frames 4]

For each of JAX's matmul precisions ("default", "high", "highest"), in the same run on the same device:
  * a large float32 matmul's rate (`machine.peak_matmul_flops_per_s`): the ceiling of each setting;
  * CAST's jitted train step (Table-10 model, type-aware loss, AdamW; batch 512, d = 768, L = 5), what
    `precision.train` governs: ms per step and the first step's loss against "highest";
  * a VideoPrism LvT base forward (random weights, float32 fprop), what `precision.extract` governs: ms per batch
    and the largest difference of the clip embedding from the "highest" one.
On a CPU every row computes full float32 (the differences are 0 and the times equal within noise); on a GPU
"default" and "high" are TF32, on a TPU one and three bfloat16 passes.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import machine  # bench/machine.py
from cast_train import cast_step  # bench/cast_train.py

import jax
import jax.numpy as jnp
import numpy as np

from vidjax import extract as engine
from vidjax.defaults.common import PRECISIONS
from vidjax.models import videoprism as vp


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--batch", type=int, default=512)
  p.add_argument("--dim", type=int, default=768)
  p.add_argument("--steps", type=int, default=20)
  p.add_argument("--model", default="videoprism_lvt_public_v1_base")
  p.add_argument("--resolution", type=int, default=72)
  p.add_argument("--frames", type=int, default=4)
  p.add_argument("--video_batch", type=int, default=2)
  p.add_argument("--iters", type=int, default=3)
  args = p.parse_args(argv)

  step, fresh, data = cast_step(args.batch, args.dim)
  key = jax.random.PRNGKey(1)
  model = vp.get_model(args.model, fprop_dtype=jnp.float32)
  mesh = engine.local_mesh()
  video_fn = engine.make_video_fn(model, engine.random_variables(model, seed=0), mesh, ("clip",))
  video_batch = -(-args.video_batch // mesh.devices.size) * mesh.devices.size
  frames = jax.device_put(np.random.default_rng(0).uniform(
      size=(video_batch, args.frames, args.resolution, args.resolution, 3)).astype(np.float32),
      jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data")))

  rows = {}
  for precision in reversed(PRECISIONS):  # "highest" first: the others are compared with it
    with jax.default_matmul_precision(precision):
      peak = machine.peak_matmul_flops_per_s("float32", iters=args.iters)
      _, first = step(fresh(), data, key)
      _, sec, _ = machine.time_train_step(step, fresh(), data, key, args.steps)
      clip = np.asarray(video_fn(frames)["clip"])
      video_s = machine.timed(video_fn, frames, iters=args.iters)
    rows[precision] = dict(peak=peak, step_ms=1e3 * sec, loss=float(first["loss"]), video_ms=1e3 * video_s, clip=clip)

  ref = rows["highest"]
  print(f"precision settings on {machine.describe()}")
  print(f"  CAST train step: batch {args.batch}, d = {args.dim}, L = 5, float32; VideoPrism {args.model} forward: "
        f"batch {video_batch} x {args.frames} frames x {args.resolution}^2 px, float32 fprop, random weights")
  header = (f"  {'precision':<9} | {'f32 matmul TFLOP/s':>18} | {'CAST step ms':>12} | {'|loss - highest|':>16} | "
            f"{'VideoPrism ms':>13} | {'max |clip - highest|':>20}")
  print(header)
  print("  " + "-" * (len(header) - 2))
  for precision in PRECISIONS:
    r = rows[precision]
    print(f"  {precision:<9} | {r['peak'] / 1e12:>18.3g} | {r['step_ms']:>12.2f} | {abs(r['loss'] - ref['loss']):>16.2e} | "
          f"{r['video_ms']:>13.1f} | {np.abs(r['clip'] - ref['clip']).max():>20.2e}")
  return rows


if __name__ == "__main__":
  main()
