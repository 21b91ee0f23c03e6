"""VidCLIP (VideoComp) train-step throughput with the paper's shapes as far as they fit the machine.

    python bench/comp_train.py [--batch 8] [--tokens 256] [--negatives 4] [--steps 3] [--mode comploss]

The real jitted train step of `vidjax.train` (VidCLIP forward on both towers, L_con + λ·L_pref with the
negatives through the text tower, AdamW; parameters and optimizer state float32): 16 frames of `--tokens`
frozen VideoPrism-B tokens of width 768 (16 x 16 = 256 patches per frame at 288 px), the paper's pooler
(width 1024, 196 then 1 queries), the all-MiniLM-L6-v2 text tower at 160 tokens for the positive and
`--negatives` negatives per video. The paper's fine-tuning batch is 32 (§4.2); the default here is 8
so that a 2-core CPU finishes in a few minutes (the step is linear in the batch). Reports examples/s,
the achieved FLOP/s (XLA's cost analysis of the compiled step) and its ratio to the device's peak: a large
matmul (8192^3 on an accelerator, 2048^3 on CPU) in the row's compute dtype, float32 at jax's default precision,
measured in the same run (`machine.peaks`). Prints a table with the device it ran on.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import machine  # bench/machine.py

import jax
import jax.numpy as jnp
import numpy as np

from vidjax import losses, train
from vidjax.models import bert
from vidjax.models import vidclip as V


def bench(batch: int, tokens: int, negatives: int, steps: int, mode: str, dtype: str) -> dict:
  cfg = V.VidClipConfig(visual_dim=768, frames=16, text=bert.BertConfig(use_pooler=False), max_text_len=160,
                        dtype=dtype)
  model = V.VidClip(cfg)
  rng = np.random.default_rng(0)
  s = cfg.max_text_len
  data = {"video": rng.normal(size=(batch, 16, tokens, 768)).astype(np.float32),
          "input_ids": rng.integers(1000, 30000, size=(batch, s)).astype(np.int32),
          "attention_mask": np.ones((batch, s), np.int32),
          "neg_ids": rng.integers(1000, 30000, size=(batch, negatives, s)).astype(np.int32),
          "neg_mask": np.ones((batch, negatives, s), np.int32),
          "neg_valid": np.ones((batch, negatives), np.float32)}

  def loss_fn(params, b, key):
    apply = lambda *a, **kw: model.apply({"params": params}, *a, **kw)  # noqa: E731
    video = apply(b["video"], method=V.VidClip.encode_video)
    text = apply(b["input_ids"], b["attention_mask"], False, method=V.VidClip.encode_text, rngs={"dropout": key})
    neg = apply(b["neg_ids"].reshape(-1, s), b["neg_mask"].reshape(-1, s), False, method=V.VidClip.encode_text,
                rngs={"dropout": key}).reshape(batch, negatives, -1)
    loss, aux = losses.comp_total_loss(video, text, neg, b["neg_valid"], apply(method=V.VidClip.temperature),
                                       mode=mode, levels=(1,) * (negatives - 1) + (2,))
    return loss, aux

  optimizer = train.adamw(1e-6, 1e-5)
  params = V.init_params(model, jax.random.PRNGKey(0), tokens)
  state = train.TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params))
  step_fn = jax.jit(train.make_train_step(loss_fn, optimizer), donate_argnums=0)
  batch_dev = jax.device_put(data)
  key = jax.random.PRNGKey(1)
  state, sec, flops = machine.time_train_step(step_fn, state, batch_dev, key, steps)
  n_params = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(params))
  return {"step_ms": 1e3 * sec, "examples_per_s": batch / sec, "flops_per_step": flops, "flops_per_s": flops / sec,
          "params": n_params}


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--tokens", type=int, default=256, help="frozen tokens per frame (VideoPrism-B: 256)")
  ap.add_argument("--negatives", type=int, default=4, help="negative paragraphs per video (CompLoss hierarchy)")
  ap.add_argument("--steps", type=int, default=3)
  ap.add_argument("--mode", default="comploss", choices=losses.COMP_MODES)
  ap.add_argument("--dtypes", default="float32,bfloat16")
  args = ap.parse_args()
  dtypes = args.dtypes.split(",")
  peak = machine.peaks(dtypes)
  print(f"machine: {machine.describe()}")
  print(machine.peaks_line(peak))
  print(f"VidCLIP train step ({args.mode}): batch {args.batch} videos of 16 x {args.tokens} tokens (d 768), "
        f"1 + {args.negatives} texts of 160 tokens each")
  print(f"{'compute':<10}{'step ms':>10}{'videos/s':>10}{'GFLOP/step':>12}{'GFLOP/s':>10}{'of peak':>11}{'params':>12}")
  for dtype in dtypes:
    r = bench(args.batch, args.tokens, args.negatives, args.steps, args.mode, dtype)
    print(f"{dtype:<10}{r['step_ms']:>10.0f}{r['examples_per_s']:>10.2f}{r['flops_per_step'] / 1e9:>12.1f}"
          f"{r['flops_per_s'] / 1e9:>10.1f}{r['flops_per_s'] / peak[dtype]:>11.1%}{r['params'] / 1e6:>11.1f}M")


if __name__ == "__main__":
  main()
