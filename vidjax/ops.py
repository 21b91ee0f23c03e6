"""Small array operations shared by models, losses, evaluation and data builders.

One definition of each, so every part of vidjax agrees on the same convention. NumPy-only callers
(data builders, synthetic worlds, configs) import this module without importing jax: jax is
imported where a jax array is computed.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

def is_positive_int(value: Any) -> bool:
  """True for an integer >= 1 (Python or NumPy; not a bool)."""
  return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1


def check_positive_fields(obj: Any, names: tuple[str, ...]) -> None:
  """One ValueError naming `Type.field` for the first of `names` that is not a positive integer."""
  for name in names:
    value = getattr(obj, name)
    if not is_positive_int(value):
      raise ValueError(f"{type(obj).__name__}.{name} must be a positive integer, got {value!r}")


def _pow2_scale(peak: Any, dtype: Any, xp: Any) -> Any:
  """The power of two 2^-e with peak = m * 2^e, m in [0.5, 1) (`frexp`), e clipped so that 2^-e is a normal number
  of `dtype` (never flushed to zero): `x * scale` is exact and brings the largest |x| to about 1."""
  limit = np.finfo(dtype).maxexp - 2  # float32: 126, float64: 1022
  _, e = xp.frexp(peak)
  return xp.ldexp(xp.ones_like(peak), -xp.clip(e, -limit, limit))


def l2_normalize(x: Any, axis: int = -1) -> Any:
  """Unit-normalises `x` along `axis`; an all-zero vector maps to 0 (padding, missing context, the CAST paper's
  zero-vector negatives), and a vector holding NaN or Inf to NaN (refused downstream, never silently 0).

  The one L2 normalization of vidjax. Each vector is first scaled by the power of two that brings its largest |x|
  to about 1, so that the sum of squares neither overflows nor underflows: finite vectors of 1e30 or 1e-30 normalise
  like the same vectors of size 1 (unscaled, their norm is Inf or 0 in float32 and they would become zero vectors).
  Scaling by a power of two is exact, so a vector whose squares did not overflow or underflow gets the bits it got
  before. "Zero" is therefore only the all-zero vector (as the dtype represents it: a vector of subnormals that a
  device flushes to zero counts as one). A NumPy input gives a NumPy output computed in its own floating dtype
  (`y / ||y||`, so data builders stay bit-exact in float64); anything else is computed with jax in float32
  (`y * rsqrt(||y||^2)`, the scale held out of the gradient and a double `where`, so the gradient is that of
  x / ||x|| and finite at exactly-zero vectors) and cast back to the input's floating dtype, so a bfloat16
  activation stays bfloat16. Shape is preserved.
  """
  if isinstance(x, np.ndarray):
    dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.dtype(np.float64)
    x = x.astype(dtype, copy=False)
    with np.errstate(invalid="ignore", over="ignore"):
      peak = np.max(np.abs(x), axis=axis, keepdims=True, initial=0.0)
      y = x * _pow2_scale(peak, dtype, np)
      sq = np.sum(y * y, axis=axis, keepdims=True)
      ok = peak != 0  # NaN != 0: a NaN or Inf vector stays NaN
      return np.where(ok, y / np.sqrt(np.where(ok, sq, 1.0)), 0.0).astype(dtype, copy=False)
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  x = jnp.asarray(x)
  out_dtype = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.float32
  x32 = x.astype(jnp.float32)
  peak = jax.lax.stop_gradient(jnp.max(jnp.abs(x32), axis=axis, keepdims=True, initial=0.0))
  y = x32 * jax.lax.stop_gradient(_pow2_scale(peak, np.float32, jnp))
  sq = jnp.sum(y * y, axis=axis, keepdims=True)
  ok = peak != 0
  return jnp.where(ok, y * jax.lax.rsqrt(jnp.where(ok, sq, 1.0)), 0.0).astype(out_dtype)


def uninformative(vectors: Any) -> str | None:
  """"zero" when every row of `vectors` [N, ...] is zero, "the same vector" when every row is one vector (N >= 2),
  else None: such vectors rank nothing (every cosine ties). NumPy; no [N, D] temporary."""
  x = np.asarray(vectors)
  if x.ndim < 2 or len(x) < 2:
    return None
  x = x.reshape(len(x), -1)
  high, low = x.max(axis=0), x.min(axis=0)
  if not (high.any() or low.any()):
    return "zero"
  return "the same vector" if np.array_equal(high, low) else None


def cosine(queries: Any, candidates: Any) -> Any:
  """Cosine similarity of queries with candidates (jax, float32).

  Args:
    queries: [Q, D].
    candidates: [C, D] shared by every query (a gallery) or [Q, C, D] (one pool per query).

  Returns:
    [Q, C]; zero vectors score 0.
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  q_shape, c_shape = np.shape(queries), np.shape(candidates)
  if len(q_shape) != 2 or len(c_shape) not in (2, 3) or q_shape[-1] != c_shape[-1] or (
      len(c_shape) == 3 and c_shape[0] != q_shape[0]):
    raise ValueError(f"cosine: queries {tuple(q_shape)} and candidates {tuple(c_shape)} do not fit: expected [Q, D] "
                     "with [C, D] or [Q, C, D]")
  q, c = l2_normalize(jnp.asarray(queries, jnp.float32)), l2_normalize(jnp.asarray(candidates, jnp.float32))
  if c.ndim == 2:
    return q @ c.T
  return jnp.einsum("qd,qcd->qc", q, c)


def flatten_dict(tree: Mapping[str, Any], prefix: str = "", sep: str = "/") -> dict[str, Any]:
  """Nested dict -> {'a/b/c': leaf} (the official VideoPrism `.npz` key layout)."""
  flat = {}
  for k, v in tree.items():
    if isinstance(v, Mapping):
      flat.update(flatten_dict(v, f"{prefix}{k}{sep}", sep))
    else:
      flat[f"{prefix}{k}"] = v
  return flat


def unflatten_dict(flat: Mapping[str, Any], sep: str = "/") -> dict[str, Any]:
  """{'a/b/c': leaf} -> nested dict (inverse of `flatten_dict`)."""
  tree: dict[str, Any] = {}
  for key, v in flat.items():
    node = tree
    *parents, leaf = key.split(sep)
    for part in parents:
      node = node.setdefault(part, {})
    node[leaf] = v
  return tree


# ------------------------------------------------------------------------------------------------
# Low-precision storage (VEDJE App. A.4: bf16 caches by default, fp8-e4m3 and fp4-e2m1 by
# quantize -> dequantize; no scale factors, so the on-disk size is exactly bits / 8 per element).

STORAGE_BITS = {"float32": 32, "bfloat16": 16, "float8_e4m3": 8, "float4_e2m1": 4}


def _ml_dtype(fmt: str):
  import ml_dtypes  # ships with jax
  return {"bfloat16": ml_dtypes.bfloat16, "float8_e4m3": ml_dtypes.float8_e4m3fn,
          "float4_e2m1": ml_dtypes.float4_e2m1fn}[fmt]


# The largest finite value of each format: values beyond it saturate instead of becoming NaN
# (float8_e4m3fn has no infinity and maps overflow to NaN).
STORAGE_MAX = {"float8_e4m3": 448.0, "float4_e2m1": 6.0}


def storage_bytes(num_elements: int, fmt: str) -> int:
  """Exact bytes of `num_elements` values stored in `fmt` (fp4: two values a byte, rounded up)."""
  if fmt not in STORAGE_BITS:
    raise ValueError(f"storage format must be one of {sorted(STORAGE_BITS)}, got {fmt!r}")
  return (num_elements * STORAGE_BITS[fmt] + 7) // 8


def quantize_dequantize(x: np.ndarray, fmt: str) -> np.ndarray:
  """Rounds float values to `fmt` (round to nearest even, saturating) and back to float32."""
  if fmt not in STORAGE_BITS:
    raise ValueError(f"storage format must be one of {sorted(STORAGE_BITS)}, got {fmt!r}")
  x = np.asarray(x, np.float32)
  if not np.all(np.isfinite(x)):
    raise ValueError("quantize_dequantize: the input has NaN or infinite values")
  if fmt == "float32":
    return x.copy()
  if fmt in STORAGE_MAX:
    x = np.clip(x, -STORAGE_MAX[fmt], STORAGE_MAX[fmt])
  return x.astype(_ml_dtype(fmt)).astype(np.float32)


def pack_fp4(x: np.ndarray) -> np.ndarray:
  """float values -> uint8 [ceil(N / 2)]: two fp4-e2m1 codes a byte (element 2i in the low nibble)."""
  codes = np.clip(np.asarray(x, np.float32).ravel(), -6.0, 6.0).astype(_ml_dtype("float4_e2m1")).view(np.uint8)
  codes = codes & 0x0F
  if codes.size % 2:
    codes = np.concatenate([codes, np.zeros(1, np.uint8)])
  return (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8)


def unpack_fp4(packed: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
  """The inverse of `pack_fp4`: uint8 bytes -> float32 values of `shape`."""
  packed = np.asarray(packed, np.uint8).ravel()
  n = int(np.prod(shape))
  if packed.size != (n + 1) // 2:
    raise ValueError(f"unpack_fp4: {packed.size} bytes cannot hold {n} values of shape {shape}")
  codes = np.stack([packed & 0x0F, packed >> 4], axis=1).ravel()[:n]
  return codes.view(_ml_dtype("float4_e2m1")).astype(np.float32).reshape(shape)


def kmeans_init(key: Any, x: Any, k: int, weights: Any = None) -> Any:
  """k distinct rows of `x [N, D]` drawn uniformly (among rows with weight > 0): k-means' start.

  Raises ValueError when fewer than k rows are available (a NumPy input is checked; under jit
  the caller guarantees it).
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  n = x.shape[0]
  if not isinstance(weights, jax.core.Tracer):
    available = n if weights is None else int(np.sum(np.asarray(weights) > 0))
    if available < k:
      raise ValueError(f"k-means with k={k} needs at least k points, got {available}")
  p = None if weights is None else (jnp.asarray(weights) > 0) / jnp.sum(jnp.asarray(weights) > 0)
  return jnp.asarray(x)[jax.random.choice(key, n, (k,), replace=False, p=p)]


def kmeans(x: Any, centres: Any, iters: int = 20, cosine: bool = True, weights: Any = None):
  """Lloyd's k-means from given starting centres (jax; jit- and vmap-friendly).

  Args:
    x: [N, D] points.
    centres: [k, D] starting centres (e.g. `kmeans_init`).
    iters: Lloyd iterations (assign, then update).
    cosine: True = assign by maximum cosine (GRDR's code selection, eq. 5); False = by squared L2
      distance. Either way a centre is the mean of its points, so its norm carries their scale
      (what a residual-quantization codebook needs).
    weights: optional [N] point weights (0 = padding, ignored).

  Returns:
    (centres [k, D] float32, assignment int32 [N] to the final centres). A centre that loses all
    its points keeps its previous value. Ties go to the lower centre index.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  x = jnp.asarray(x, jnp.float32)
  w = jnp.ones(x.shape[0], jnp.float32) if weights is None else jnp.asarray(weights, jnp.float32)
  xn = l2_normalize(x)

  def assign(c):
    if cosine:
      return jnp.argmax(xn @ l2_normalize(c).T, axis=1)
    d = jnp.sum(x * x, 1, keepdims=True) - 2 * x @ c.T + jnp.sum(c * c, 1)[None]
    return jnp.argmin(d, axis=1)

  def step(c, _):
    onehot = jax.nn.one_hot(assign(c), c.shape[0], dtype=jnp.float32) * w[:, None]
    total, count = onehot.T @ x, jnp.sum(onehot, axis=0)[:, None]
    return jnp.where(count > 0, total / jnp.maximum(count, 1e-12), c), None

  c, _ = jax.lax.scan(step, jnp.asarray(centres, jnp.float32), None, length=iters)
  return c, assign(c).astype(jnp.int32)


def _fmix32(x: Any) -> Any:
  """MurmurHash3's 32-bit finaliser: a bijection of uint32 with full avalanche."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x85EBCA6B)
  x = x ^ (x >> 13)
  x = x * jnp.uint32(0xC2B2AE35)
  return x ^ (x >> 16)


def dropout_keep_mask(key: Any, shape: tuple[int, ...], rate: float):
  """A Bernoulli(1 - `rate`) keep mask of `shape`, several times cheaper on CPU than `jax.random.bernoulli`.

  `jax.random.bernoulli` runs threefry (20 rounds on two words) for every element; on a CPU a
  dropout-heavy model (GRDR's T5: dropout on every sublayer) spends most of its step there. Here
  two 32-bit seeds come from `key` by threefry, and element i's 32 bits from a counter hash,
  `fmix32(fmix32(i * golden + s1) ^ s2)` (MurmurHash3's finaliser, twice): elementwise, so XLA
  fuses it into the masking. An element is dropped when its bits are below `round(rate * 2^32)`:
  the rate is `rate` to within 2^-33, and the second return value is the exact keep probability to
  rescale by. Counter hashes are how fused GPU dropout kernels draw their masks too; the second
  seed keeps two calls' masks from being shifted copies of each other.

  Returns:
    (keep bool array of `shape`, keep probability as a Python float).
  """
  import math  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"dropout rate must be in [0, 1), got {rate!r}")
  n = math.prod(shape)
  if n >= 2 ** 32:
    raise ValueError(f"dropout_keep_mask counts elements in uint32; shape {shape} has {n}")
  seeds = jax.random.bits(key, (2,), jnp.uint32)
  index = jax.lax.iota(jnp.uint32, n).reshape(shape)
  bits = _fmix32(_fmix32(index * jnp.uint32(0x9E3779B9) + seeds[0]) ^ seeds[1])
  threshold = min(round(rate * 2 ** 32), 2 ** 32 - 1)
  return bits >= jnp.uint32(threshold), 1.0 - threshold / 2 ** 32


def timed(fn, *args, iters: int) -> float:
  """Median seconds per call of `fn(*args)` after one warm-up (compiling) call, each waited for."""
  import time  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(iters):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t)
  return float(np.median(times))
