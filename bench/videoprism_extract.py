"""Benchmark: VideoPrism feature extraction, model-only and end to end (decode + model), and the model's FLOP/s.

Three rates over the same shapes, in one process:

  * model only: the video branch the extractor runs (`vidjax.extract.make_video_fn`: LvT clip embedding + mean-pooled
    tokens, random weights) on frames already on the device, the median of `--iters` calls;
  * decode only: the extractor's pool of decoding worker processes (`vidjax.extract.decode_ahead`, `--workers`,
    default every usable core but one) over `--videos` copies of the real demo mp4 in a temporary folder, and one PyAV
    decode in this process for scale;
  * end to end: `vidjax.extract.extract_videos` over those copies into a temporary feature store (decoding workers,
    uint8 transfer, model, fetch, store writes), compile excluded. Its goal is >= 80% of model-only frames/s.

The model's FLOP/s (counted analytically: matmuls only, i.e. projections, attention, FFN, patch projection, pooler)
is reported as a fraction of a large matmul in the dtype of the work measured in the same run
(`machine.peak_matmul_flops_per_s`: 8192^3 on an accelerator, 2048^3 on CPU; float32 at jax's default precision,
TF32 on a GPU, as the model's float32 matmuls run). XLA's `cost_analysis()` of the scanned model counts each
`nn.scan` layer body once; on an unscanned copy (LvT base, 4 x 72 px) it gives 4.34 GFLOP/frame against 4.27
analytic.

Every transformer stack of the public VideoPrism models caps its attention logits (50 tanh(l / 50)), which no fused
attention kernel JAX offers can express, so the exact model runs XLA attention; `--logit-cap 0 --attention cudnn`
times cuDNN's fused attention on the uncapped variant (a different model: for speed comparison only).

  python bench/videoprism_extract.py                       # base, 72 px, 4 frames, batch 2 (CPU-sized)
  python bench/videoprism_extract.py --paper --iters 5     # base, 288 px, 16 frames, batch 8, bfloat16 (a GPU)
  python bench/videoprism_extract.py --paper --logit-cap 0 --attention cudnn   # fused attention, uncapped variant
"""
from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import machine  # pylint: disable=g-import-not-at-top  (bench/machine.py)
import av
import jax
import jax.numpy as jnp
import numpy as np

from vidjax import extract as engine
from vidjax.data import video
from vidjax.models import videoprism as vp

_ASSET = Path("shared") / "data" / "videoprism_assets" / "water_bottle_drumming.mp4"
# The shared folder sits beside the checkout here and may sit inside it on a lent device machine.
MP4 = next((p for p in (REPO.parent / _ASSET, REPO / _ASSET) if p.is_file()), REPO.parent / _ASSET)
PAPER = dict(model="videoprism_lvt_public_v1_base", resolution=288, frames=16, batch=8, dtype="bfloat16")


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


def parse(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--paper", action="store_true", help="the paper's setting: LvT base, 288 px, 16 frames, batch 8, "
                 "bfloat16 (explicit flags after it still override)")
  p.add_argument("--model", default="videoprism_lvt_public_v1_base")
  p.add_argument("--resolution", type=int, default=72)
  p.add_argument("--frames", type=int, default=4)
  p.add_argument("--batch", type=int, default=2)
  p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  p.add_argument("--iters", type=int, default=3, help="timed model calls (median)")
  p.add_argument("--attention", default="", choices=("", "xla", "cudnn"), help="attention backend ('' = JAX's)")
  p.add_argument("--logit-cap", type=float, default=None, help="override the model's logit cap (0 = uncapped "
                 "variant, needed for --attention cudnn)")
  p.add_argument("--videos", type=int, default=0, help="mp4 copies for the decode and end-to-end rows "
                 "(default: enough for 4 batches, at least 2 per decoding worker)")
  p.add_argument("--segments", type=int, default=1, help="clips per video copy (equal segments of it; 1 = the "
                 "whole video): the demo decodes 100 frames per pass, so this sets decoded frames per sampled frame")
  p.add_argument("--workers", type=int, default=0, help="decoding processes (0 = every usable core but one)")
  p.add_argument("--mp4", default=str(MP4), help="the video copied for the decode and end-to-end rows")
  p.add_argument("--json", default="", help="also write the rows to this JSON file")
  args = p.parse_args(argv)
  if args.paper:
    given = {a.split("=")[0].lstrip("-").replace("-", "_") for a in (argv if argv is not None else sys.argv[1:])}
    for k, v in PAPER.items():
      if k not in given:
        setattr(args, k, v)
  return args


def main(argv=None):
  args = parse(argv)
  overrides = {} if args.logit_cap is None else {"atten_logit_cap": args.logit_cap}
  model = vp.get_model(args.model, fprop_dtype=jnp.dtype(args.dtype), attention_impl=args.attention or None,
                       **overrides)
  variables = engine.random_variables(model, seed=0)
  mesh = engine.local_mesh()
  batch = -(-args.batch // mesh.devices.size) * mesh.devices.size
  kinds = ("clip", "clip_mean") if engine.is_lvt(model) else ("clip_mean",)
  fn = engine.make_video_fn(model, variables, mesh, kinds)
  frames = jax.device_put(
      np.random.default_rng(0).uniform(size=(batch, args.frames, args.resolution, args.resolution, 3))
      .astype(np.float32), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data")))

  # Model only.
  t = time.perf_counter()
  jax.block_until_ready(fn(frames))
  compile_s = time.perf_counter() - t
  step_flops = analytic_flops(model, batch, args.frames, args.resolution)
  step_s = machine.timed(fn, frames, iters=args.iters)
  model_fps = batch * args.frames / step_s
  achieved = step_flops / step_s
  peak = machine.peak_matmul_flops_per_s(args.dtype)
  peak_n = 8192 if machine.on_accelerator() else 2048

  # Decode: one PyAV call in this process, then the extractor's worker pool over copies of the real mp4.
  workers = args.workers or engine.default_decode_workers()
  n_videos = args.videos or max(2 * workers, -(-4 * batch // args.segments))
  t = time.perf_counter()
  mp4 = Path(args.mp4)
  with av.open(str(mp4)) as container:  # the clip's length, for --segments
    stream = container.streams.video[0]
    n_frames, fps = stream.frames, float(stream.average_rate)
  single = video.decode_clips(mp4, [None], args.frames, args.resolution, uint8=True)
  single_fps = args.frames / (time.perf_counter() - t)
  with tempfile.TemporaryDirectory(prefix="vp_extract_bench_") as tmp:
    tmp = Path(tmp)
    for i in range(n_videos):
      shutil.copyfile(mp4, tmp / f"v{i:04d}.mp4")
    duration = n_frames / fps
    bounds = np.linspace(0.0, duration, args.segments + 1)
    groups = [(str(tmp / f"v{i:04d}.mp4"),
               [engine.VideoSegment(f"v{i:04d}#{s}", str(tmp / f"v{i:04d}.mp4"), *((bounds[s], bounds[s + 1])
                                    if args.segments > 1 else (None, None))) for s in range(args.segments)])
              for i in range(n_videos)]
    clips = [c for _, g in groups for c in g]
    # Warm-up: starts the fork server and compiles the uint8 -> [0, 1] step, so neither is in the timed rows.
    warm = engine.open_store(tmp / "warm", {"backbone": args.model})
    engine.extract_videos(warm, [c for _, g in groups[:2] for c in g], fn, num_frames=args.frames,
                          resolution=args.resolution, batch_size=batch,
                          kinds=kinds, mesh=mesh, decode_workers=workers, progress=False)
    t = time.perf_counter()
    with contextlib.closing(engine.decode_ahead(groups, args.frames, args.resolution, "squash", workers)) as it:
      decoded = sum(1 for _ in it)
    pool_fps = decoded * args.frames / (time.perf_counter() - t)
    store = engine.open_store(tmp / "store", {"backbone": args.model})
    stats = engine.extract_videos(store, clips, fn, num_frames=args.frames, resolution=args.resolution,
                                  batch_size=batch, kinds=kinds, mesh=mesh, decode_workers=workers, progress=False)
  e2e_fps = stats.frames_per_s

  cap = model.atten_logit_cap
  rows = [
      ("device", machine.describe()),
      ("model", f"{args.model} ({args.dtype}, random weights, logit cap {cap:g}, attention "
                f"{args.attention or 'JAX default'})"),
      ("input", f"batch {batch} x {args.frames} frames x {args.resolution}^2 px"),
      ("compile + first step", f"{compile_s:.1f} s"),
      ("step", f"{step_s * 1e3:.1f} ms (median of {args.iters})"),
      ("model-only frames/s", f"{model_fps:.1f}"),
      ("FLOPs / frame (analytic)", f"{step_flops / (batch * args.frames) / 1e9:.2f} GFLOP"),
      ("model achieved", f"{achieved / 1e12:.3g} TFLOP/s"),
      (f"{args.dtype} matmul peak {peak_n}^3 (same run)", f"{peak / 1e12:.3g} TFLOP/s"),
      ("model / peak", f"{achieved / peak:.1%}"),
      ("decode frames/s, 1 PyAV call here", f"{single_fps:.1f} (whole {mp4.name}, {n_frames} frames decoded per clip)"),
      (f"decode frames/s, {workers} worker processes", f"{pool_fps:.1f} ({n_videos} copies x {args.segments} clips, "
                                                        f"{n_frames / (args.segments * args.frames):.2g} frames decoded "
                                                        "per frame sampled)"),
      (f"end-to-end frames/s ({workers} workers)", f"{e2e_fps:.1f} ({stats.clips} clips, compile excluded)"),
      ("end to end / model only", f"{e2e_fps / model_fps:.1%}"),
  ]
  width = max(len(k) for k, _ in rows)
  print("VideoPrism feature extraction benchmark")
  for k, v in rows:
    print(f"  {k:<{width}}  {v}")
  result = {"device": machine.describe(), "args": vars(args), "batch": batch, "workers": workers,
            "videos": n_videos, "step_s": step_s, "model_frames_per_s": model_fps,
            "decode_frames_per_s_single": single_fps, "decode_frames_per_s_pool": pool_fps,
            "e2e_frames_per_s": e2e_fps, "e2e_over_model": e2e_fps / model_fps, "flops_per_step": step_flops,
            "achieved_flops_per_s": achieved, "peak_flops_per_s": peak, "peak_dtype": args.dtype,
            "model_over_peak": achieved / peak}
  if args.json:
    Path(args.json).write_text(json.dumps(result, indent=1))
  return result


if __name__ == "__main__":
  main()
