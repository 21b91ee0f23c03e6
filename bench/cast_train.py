"""CAST train-step throughput (issue: batch 512, d = 768, L = 5; float32 and bfloat16 compute).

    python bench/cast_train.py [--batch 512] [--dim 768] [--context 5] [--steps 20]

Times the real jitted train step of `vidjax.train` (CAST forward + type-aware loss + AdamW update;
parameters and optimizer state stay float32 in both modes) and reports examples/s, the achieved
FLOP/s (XLA's cost analysis of the compiled step) and its ratio to a float32 matmul rate measured in
the same run on the same device. Prints a table with the machine it ran on.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import machine  # bench/machine.py

import jax
import jax.numpy as jnp
import numpy as np

from vidjax import losses, train
from vidjax.models import cast as cast_models


def flops_of(compiled) -> float:
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):
    cost = cost[0]
  return float(cost.get("flops", float("nan"))) if cost else float("nan")


def bench_train_step(batch: int, dim: int, context: int, dtype, steps: int) -> dict:
  model = cast_models.CAST(dim, dtype=dtype)
  rng = np.random.default_rng(0)
  unit = lambda *s: (lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True))(rng.normal(size=s)).astype(np.float32)  # noqa: E731
  data = {
      "text": unit(batch, dim), "history": unit(batch, context, dim), "history_mask": np.ones((batch, context), np.float32),
      "positive": unit(batch, dim), "state_negs": unit(batch, 3, dim), "state_mask": np.ones((batch, 3), np.float32),
      "ident_negs": unit(batch, 3, dim), "ident_mask": np.ones((batch, 3), np.float32),
  }

  def loss_fn(params, b, key):
    v_hat = model.apply({"params": params}, b["text"], b["history"], b["history_mask"], deterministic=False,
                        rngs={"dropout": key})
    return losses.cast_loss(v_hat, b["positive"], b["state_negs"], b["state_mask"], b["ident_negs"], b["ident_mask"])

  optimizer = train.adamw(1e-4, 1e-3)
  params = model.init(jax.random.PRNGKey(0), data["text"][:1], data["history"][:1], data["history_mask"][:1])["params"]
  state = train.TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params))
  step_fn = jax.jit(train.make_train_step(loss_fn, optimizer), donate_argnums=0)
  batch_dev = jax.device_put(data)
  key = jax.random.PRNGKey(1)
  compiled = step_fn.lower(state, batch_dev, key).compile()
  flops = flops_of(compiled)
  state, _ = step_fn(state, batch_dev, key)  # warm-up
  jax.block_until_ready(state)
  start = time.perf_counter()
  for _ in range(steps):
    state, metrics = step_fn(state, batch_dev, key)
  jax.block_until_ready(metrics)
  sec = (time.perf_counter() - start) / steps
  leaves = jax.tree_util.tree_leaves(state.params) + jax.tree_util.tree_leaves(state.opt_state)
  assert all(x.dtype != jnp.bfloat16 for x in leaves if hasattr(x, "dtype")), "params must stay float32"
  return {"step_ms": 1e3 * sec, "examples_per_s": batch / sec, "flops_per_step": flops, "flops_per_s": flops / sec}


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--batch", type=int, default=512)
  ap.add_argument("--dim", type=int, default=768)
  ap.add_argument("--context", type=int, default=5)
  ap.add_argument("--steps", type=int, default=20)
  args = ap.parse_args()
  peak = machine.matmul_flops_per_s()
  print(f"machine: {machine.describe()}")
  print(f"float32 matmul rate (2048^3, same run): {peak / 1e9:.1f} GFLOP/s")
  print(f"CAST train step, batch {args.batch}, d {args.dim}, L {args.context}")
  print(f"{'compute':<10}{'step ms':>10}{'examples/s':>13}{'GFLOP/step':>12}{'GFLOP/s':>10}{'of matmul':>11}")
  for name, dtype in (("float32", jnp.float32), ("bfloat16", jnp.bfloat16)):
    r = bench_train_step(args.batch, args.dim, args.context, dtype, args.steps)
    print(f"{name:<10}{r['step_ms']:>10.2f}{r['examples_per_s']:>13.0f}{r['flops_per_step'] / 1e9:>12.3f}"
          f"{r['flops_per_s'] / 1e9:>10.1f}{r['flops_per_s'] / peak:>10.1%}")


if __name__ == "__main__":
  main()
