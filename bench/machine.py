"""What every benchmark reports besides its own numbers: the machine, and its own limit.

`matmul_flops_per_s` measures a float32 (or, asked for, e.g. bfloat16) matmul on the default device
in the same process, so each benchmark can state its achieved FLOP/s as a fraction of what this
machine actually does.
"""
from __future__ import annotations

import os
import platform
import time

import jax
import jax.numpy as jnp

from vidjax.ops import timed  # noqa: F401  (the benches' timer, re-exported)


def cpu_model() -> str:
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown"


def describe() -> str:
  """One line: devices, host CPU, cores, jax version."""
  dev = jax.devices()[0]
  return (f"{dev.platform}:{dev.device_kind} x{jax.device_count()} | host CPU: {cpu_model()}, "
          f"{os.cpu_count()} cores | jax {jax.__version__}")


def matmul_flops_per_s(n: int = 2048, iters: int = 10, dtype: str = "float32") -> float:
  """[n, n] @ [n, n] rate on the default device (2 n^3 FLOPs per product), operands and result in
  `dtype` (default float32; e.g. "bfloat16" for the rate bfloat16 computation can reach)."""
  a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.dtype(dtype))
  b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.dtype(dtype))
  return 2 * n ** 3 / timed(jax.jit(lambda x, y: x @ y), a, b, iters=iters)


def flops_of(compiled) -> float:
  """FLOPs of a compiled computation from XLA's cost analysis (nan when the backend gives none)."""
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):
    cost = cost[0]
  return float(cost.get("flops", float("nan"))) if cost else float("nan")


def time_train_step(step_fn, state, batch, key, steps: int):
  """(final state, seconds per step, FLOPs per step) of a jitted `vidjax.train` step after one warm-up call."""
  flops = flops_of(step_fn.lower(state, batch, key).compile())
  state, _ = step_fn(state, batch, key)
  jax.block_until_ready(state)
  start = time.perf_counter()
  for _ in range(steps):
    state, metrics = step_fn(state, batch, key)
  jax.block_until_ready(metrics)
  return state, (time.perf_counter() - start) / steps, flops
