"""What every benchmark reports besides its own numbers: the machine, and its own limits.

Each bench states its achieved rate as a fraction of what this device actually does, measured in the same process
(ARCHITECTURE.md "Accelerators"; issue 49 item 5):

  * `peak_matmul_flops_per_s(dtype)`: a large square matmul in `dtype` (8192^3 on an accelerator, 2048^3 on CPU,
    where a larger one only takes longer), float32 at the precision the code under test uses (`precision`;
    on a GPU the default float32 matmul is TF32);
  * `copy_bytes_per_s()`: a memory copy of a large array (256 MiB on an accelerator, 64 MiB on CPU), counted as the
    bytes read plus the bytes written: the bandwidth a memory-bound kernel (a search over stored rows) can reach;
  * `limits_line()`: both, one line, for a table header.

A floor is then `max(flops / peak, bytes / bandwidth)` seconds (`floor_seconds`). `matmul_flops_per_s` (2048^2,
float32) is kept for the CPU tables already in BENCHMARKS.md.
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


def on_accelerator() -> bool:
  return jax.devices()[0].platform != "cpu"


def describe() -> str:
  """One line: devices, host CPU, cores, jax version."""
  dev = jax.devices()[0]
  return (f"{dev.platform}:{dev.device_kind} x{jax.device_count()} | host CPU: {cpu_model()}, "
          f"{os.cpu_count()} cores | jax {jax.__version__}")


def matmul_flops_per_s(n: int = 2048, iters: int = 10, dtype: str = "float32", precision: str | None = None) -> float:
  """[n, n] @ [n, n] rate on the default device (2 n^3 FLOPs per product), operands and result in
  `dtype` (default float32; e.g. "bfloat16" for the rate bfloat16 computation can reach); `precision`: the
  matmul precision ("default", "high", "highest"; None = jax's default, TF32 for float32 on a GPU)."""
  a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.dtype(dtype))
  b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.dtype(dtype))
  return 2 * n ** 3 / timed(jax.jit(lambda x, y: jnp.matmul(x, y, precision=precision)), a, b, iters=iters)


def peak_matmul_flops_per_s(dtype: str = "bfloat16", precision: str | None = None, n: int | None = None,
                            iters: int = 10) -> float:
  """The device's large-matmul rate in `dtype` (8192^3 on an accelerator, 2048^3 on CPU unless `n` is given)."""
  return matmul_flops_per_s(n or (8192 if on_accelerator() else 2048), iters, dtype, precision)


def peaks(dtypes, precision: str | None = None) -> dict[str, float]:
  """`{dtype: peak_matmul_flops_per_s(dtype, precision)}`, each measured once now (the benches' "% of peak")."""
  return {d: peak_matmul_flops_per_s(d, precision) for d in dict.fromkeys(dtypes)}


def peaks_line(measured: dict[str, float], precision: str | None = None) -> str:
  """One header line naming the peaks a bench divides by: size, dtype, float32 precision, rate."""
  n = 8192 if on_accelerator() else 2048
  rates = ", ".join(f"{d}{' (precision ' + (precision or 'default') + ')' if d == 'float32' else ''} "
                    f"{r / 1e12:.3g} TFLOP/s" for d, r in measured.items())
  return f"peak = a {n}^3 matmul in the dtype of the work, measured in this run: {rates}"


def copy_bytes_per_s(nbytes: int | None = None, iters: int = 10) -> float:
  """Memory bandwidth of the default device: a jitted copy of an `nbytes` float32 array (256 MiB on an accelerator,
  64 MiB on CPU), counted as bytes read + bytes written per second."""
  nbytes = nbytes or ((256 if on_accelerator() else 64) << 20)
  x = jnp.ones((nbytes // 4,), jnp.float32)
  # `x * 1 + 0` would be folded away; adding a traced scalar forces a read and a write of every element.
  return 2 * nbytes / timed(jax.jit(lambda v, s: v + s), x, jnp.float32(1.0), iters=iters)


def floor_seconds(flops: float, nbytes: float, peak_flops_per_s: float, bytes_per_s: float) -> float:
  """The device's floor for work of `flops` FLOPs reading `nbytes` bytes: the larger of the two times."""
  return max(flops / peak_flops_per_s, nbytes / bytes_per_s)


def limits_line(dtypes: tuple[str, ...] = ("bfloat16", "float32")) -> tuple[str, dict[str, float]]:
  """(one header line, {"matmul_<dtype>": FLOP/s, "copy": bytes/s}): the device's limits measured now; float32
  at jax's default precision and at "highest" on an accelerator (they differ there)."""
  limits = {f"matmul_{d}": peak_matmul_flops_per_s(d) for d in dtypes}
  if on_accelerator() and "float32" in dtypes:
    limits["matmul_float32_highest"] = peak_matmul_flops_per_s("float32", "highest")
  limits["copy"] = copy_bytes_per_s()
  parts = [f"{k.removeprefix('matmul_')} matmul {v / 1e12:.3g} TFLOP/s" for k, v in limits.items() if k != "copy"]
  parts.append(f"memory copy {limits['copy'] / 1e9:.4g} GB/s")
  return "device limits (measured now): " + ", ".join(parts), limits


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
