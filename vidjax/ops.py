"""Small array operations shared by models, losses, evaluation and data builders.

One definition of each, so every part of vidjax agrees on the same convention. NumPy-only callers
(data builders, synthetic worlds, configs) import this module without importing jax: jax is
imported where a jax array is computed.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

# Vectors with an L2 norm below this count as zero vectors (padding, missing context, the CAST
# paper's zero-vector negatives): they normalise to exactly 0 and never produce NaN.
NORM_EPS = 1e-6


def l2_normalize(x: Any, axis: int = -1) -> Any:
  """Unit-normalises `x` along `axis`; vectors with norm < `NORM_EPS` (1e-6) map to 0.

  The one L2 normalization of vidjax. A NumPy input gives a NumPy output computed in its own
  dtype (`x / ||x||`, so data builders stay bit-exact in float64); anything else is computed
  with jax in float32 (`x * rsqrt(||x||^2)`, with a double `where` so the gradient is finite at
  exactly-zero vectors) and cast back to the input's floating dtype, so a bfloat16 activation
  stays bfloat16. Shape is preserved.
  """
  if isinstance(x, np.ndarray):
    sq = np.sum(x * x, axis=axis, keepdims=True)
    ok = sq > NORM_EPS**2
    return np.where(ok, x / np.sqrt(np.where(ok, sq, 1.0)), 0.0).astype(x.dtype, copy=False)
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  x = jnp.asarray(x)
  out_dtype = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.float32
  x32 = x.astype(jnp.float32)
  sq = jnp.sum(x32 * x32, axis=axis, keepdims=True)
  ok = sq > NORM_EPS**2
  return jnp.where(ok, x32 * jax.lax.rsqrt(jnp.where(ok, sq, 1.0)), 0.0).astype(out_dtype)


def cosine(queries: Any, candidates: Any) -> Any:
  """Cosine similarity of queries with candidates (jax, float32).

  Args:
    queries: [Q, D].
    candidates: [C, D] shared by every query (a gallery) or [Q, C, D] (one pool per query).

  Returns:
    [Q, C]; zero vectors score 0.
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
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
