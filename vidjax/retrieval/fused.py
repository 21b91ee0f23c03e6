"""Exact top-k by a fused score + block-max kernel: the score matrix never leaves the chip.

The XLA search (`vidjax.retrieval.dense._scan_chunks`) writes each chunk's `[Qb, C]` float32 scores to device memory
and reads them back for the block maxima of `_top_k_by_blocks`: at batch 256 over 10M rows that is ~20 GB of traffic
against the 5 GB the bfloat16 rows themselves take (issue 63). Here one Pallas kernel (`block_maxima`) scores a tile
of rows against a tile of queries in registers / shared memory (GPU, Triton lowering) or VMEM (TPU, Mosaic) and
writes only the maximum of every `block` consecutive rows: `[Qb, N / block]` floats, 1/block of the scores. Then, in
XLA, the `m = candidate_blocks(k)` blocks with the largest maxima are gathered and re-scored exactly, and their top k
is the answer (`search`).

Why it is exact: the top-k rows lie in the k blocks with the largest maxima (a block ranked below k others has in each
of them a row that beats all of its own; `dense._top_k_by_blocks` uses the same argument). The kernel's maxima and the
re-scoring may round differently (summation order; on a GPU a float32 kernel product is TF32, `PRECISION`), so `m`
keeps `k + max(k, 8)` blocks: a top-k row is missed only if more than that many blocks hold a row within the kernel's
rounding of its score (near-ties). The returned scores are always the re-scoring's, the XLA program's scores of the
same rows: float32 rows at `Precision.HIGHEST`; bfloat16 rows as float32 products on a CPU, and with the query rounded
to bfloat16 on an accelerator (`dense.bf16_queries_rounded`); ties by position (candidates in position order,
`lax.top_k` keeps the lower index).

Layout: rows `[R, D]` (a device's stored chunks, reshaped without a copy), cut into tiles of `tile_rows` rows, each
`tile_rows / block` blocks; one program scores one row tile against one query tile, and the grid is ordered so that
the programs reading one row tile run one after the other (its second read comes from the cache; `block_maxima`).
The output is `[row tiles, Qb, blocks per tile]`: its last two block dimensions are (a multiple of 8, the whole axis),
as Mosaic (TPU) asks.

On a CPU the kernel runs only in interpret mode (`interpret=True`, slow: for tests); `dense` chooses it by default on
GPU and TPU only (`dense.KERNELS`).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

# Rows per block maximum, per platform: a larger block writes fewer maxima (N / block floats per query) but re-scores
# more rows (`candidate_blocks(k) * block` per query). GPU: 128 rows = one [tq, 128] MMA tile per step. NOT measured
# on a device yet (bench/ann.py --block sweeps it).
BLOCK = {"gpu": 128, "tpu": 128, "cpu": 32}
# Rows per kernel program (`tile_rows`), at most: the query tile is loaded once per program.
TILE_ROWS = {"gpu": 1024, "tpu": 4096, "cpu": 256}
# Queries per program, at most (GPU: the [tq, block] float32 accumulator lives in registers; Triton's dot needs
# M >= 16).
TILE_QUERIES = {"gpu": 64, "tpu": 128, "cpu": 64}
MIN_TILE_QUERIES = {"gpu": 16, "tpu": 8, "cpu": 1}
# Columns of D per step of the product's inner loop (None: all D at once). GPU: 64, as Triton matmuls stage their
# operands (bfloat16, 64 queries x 128 rows: 24 KB of shared memory a stage, 3 stages; a whole 256-wide row tile would
# be 64-128 KB a stage). TPU: all D (lane slices narrower than 128 do not tile).
TILE_D = {"gpu": 64, "tpu": None, "cpu": None}
# The kernel's product for float32 rows: on a GPU "tf32" (one tensor-core pass, ~2^-11 relative per operand: the
# 256-batch 10M-row goal is out of reach in full float32, 1.3 TFLOP at ~67 TFLOP/s); the re-scoring is always
# Precision.HIGHEST, so only the choice of candidate blocks sees TF32 (module docstring). CPU (interpret): full
# float32. bfloat16 rows: one bfloat16 product with the query rounded to bfloat16, float32 accumulation.
PRECISION = {"gpu": "tf32", "tpu": "default", "cpu": "highest"}
_PRECISIONS = {"highest": jax.lax.Precision.HIGHEST, "tf32": jax.lax.Precision.DEFAULT,
               "default": jax.lax.Precision.DEFAULT}
_CONTRACT_D = (((1,), (1,)), ((), ()))


def candidate_blocks(k: int, num_blocks: int) -> int:
  """Blocks re-scored per query for a top-`k`: k plus a margin of max(k, 8) for the kernel's rounding."""
  return min(num_blocks, 2 * k + 8) if k <= num_blocks else num_blocks


def applies(k: int, rows: int, block: int) -> bool:
  """Whether the fused search pays for a top-`k` over `rows` rows per device in blocks of `block`: the candidates it
  re-scores are at most a quarter of the rows (else the XLA search, which reads every row once, is cheaper)."""
  num_blocks = rows // block
  return rows % block == 0 and num_blocks >= 2 and candidate_blocks(k, num_blocks) * block * 4 <= rows


def _tile(n: int, most: int, least: int = 1) -> int:
  """The largest power of two <= `most` (and >= `least`) dividing `n`; 0 if none."""
  t = 1 << (most.bit_length() - 1)
  while t >= least and n % t:
    t //= 2
  return t if t >= least else 0


def _squeezed():
  return pl.Squeezed() if hasattr(pl, "Squeezed") else None


def _compiler_params(platform: str):
  if platform == "gpu":
    try:
      from jax.experimental.pallas import triton as pl_triton  # pylint: disable=g-import-not-at-top
      return pl_triton.CompilerParams(num_warps=4, num_stages=3)
    except (ImportError, AttributeError, TypeError):
      return None
  if platform == "tpu":
    try:
      from jax.experimental.pallas import tpu as pl_tpu  # pylint: disable=g-import-not-at-top
      return pl_tpu.CompilerParams(dimension_semantics=("parallel", "parallel"))
    except (ImportError, AttributeError, TypeError):
      return None
  return None


@functools.partial(jax.jit, static_argnames=("block", "tile_rows", "tile_queries", "tile_d", "precision", "platform",
                                             "interpret"))
def block_maxima(queries: jax.Array, rows: jax.Array, *, block: int, tile_rows: int, tile_queries: int,
                 tile_d: int | None = None, precision: str = "highest", platform: str = "cpu",
                 interpret: bool = False) -> jax.Array:
  """The maximum score of every `block` consecutive rows, without the scores leaving the kernel.

  Args:
    queries: [Qb, D] in the rows' dtype (float32, or bfloat16: the query rounded), Qb a multiple of `tile_queries`.
    rows: [R, D] float32 or bfloat16, R a multiple of `tile_rows`, itself a multiple of `block`.
    tile_d: the product's inner loop takes this many of the D columns at a time (None: all D at once).
    precision: the kernel's float32 product ("highest", "tf32" / "default": the platform's fast float32 matmul).

  Returns:
    float32 [Qb, R / block]: entry (q, j) = max over rows j * block .. (j + 1) * block - 1 of queries[q] . rows[r],
    accumulated in float32.
  """
  qb, d = queries.shape
  r = rows.shape[0]
  steps = tile_rows // block
  tile_d = d if tile_d is None or d % tile_d else tile_d
  if r % tile_rows or tile_rows % block or qb % tile_queries:
    raise ValueError(f"block_maxima: rows {r} / tile {tile_rows} / block {block} or queries {qb} / tile "
                     f"{tile_queries} do not divide")
  prec = _PRECISIONS[precision] if rows.dtype == jnp.float32 else jax.lax.Precision.DEFAULT

  def kernel(q_ref, x_ref, o_ref):
    col = jax.lax.broadcasted_iota(jnp.int32, (tile_queries, steps), 1)

    def step(t, acc):
      at = pl.ds(pl.multiple_of(t * block, block), block)
      if tile_d == d:
        s = jax.lax.dot_general(q_ref[...], x_ref[at, :], _CONTRACT_D, precision=prec,
                                preferred_element_type=jnp.float32)
      else:  # a matmul's inner loop: the operands staged tile_d columns at a time (shared memory on a GPU)
        def inner(j, s):
          cols = pl.ds(pl.multiple_of(j * tile_d, tile_d), tile_d)
          return s + jax.lax.dot_general(q_ref[:, cols], x_ref[at, cols], _CONTRACT_D, precision=prec,
                                         preferred_element_type=jnp.float32)
        s = jax.lax.fori_loop(0, d // tile_d, inner, jnp.zeros((tile_queries, block), jnp.float32))
      return jnp.where(col == t, jnp.max(s, axis=1)[:, None], acc)

    o_ref[...] = jax.lax.fori_loop(0, steps, step, jnp.full((tile_queries, steps), -jnp.inf, jnp.float32))

  # Program (i, j): row tile i, query tile j. The programs that read one row tile should run one after the other, so
  # that its second read hits the cache: Triton launches the grid's first axis fastest, Mosaic (TPU) iterates the last
  # axis fastest (and skips the copy of a row tile whose block index did not change).
  # (CUDA's second grid axis holds at most 65,535 programs: past that the row tiles go first.)
  swap = platform == "gpu" and r // tile_rows <= 65535
  order = (lambda f: (lambda j, i: f(i, j))) if swap else (lambda f: f)
  grid = (qb // tile_queries, r // tile_rows) if swap else (r // tile_rows, qb // tile_queries)
  out = pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((r // tile_rows, qb, steps), jnp.float32),
      grid=grid,
      in_specs=[pl.BlockSpec((tile_queries, d), order(lambda i, j: (j, 0))),
                pl.BlockSpec((tile_rows, d), order(lambda i, j: (i, 0)))],
      out_specs=pl.BlockSpec((_squeezed(), tile_queries, steps), order(lambda i, j: (i, j, 0))),
      interpret=interpret,
      compiler_params=None if interpret else _compiler_params(platform),
      name="vidjax_block_maxima",
  )(queries, rows)
  return out.transpose(1, 0, 2).reshape(qb, (r // tile_rows) * steps)


class Plan(NamedTuple):
  """The kernel's static arguments (hashable: a jit static argument of the search program)."""
  block: int
  tile_rows: int
  tile_queries: int
  tile_d: int | None
  padded_queries: int
  precision: str
  platform: str
  interpret: bool


def plan(platform: str, rows: int, qb: int, k: int, *, block: int | None = None, precision: str | None = None,
         interpret: bool = False) -> Plan | None:
  """The kernel's arguments for a top-`k` of `qb` queries over `rows` rows (per device) on `platform`, from the
  module's constants; `block` / `precision` may be forced (tests, `bench/ann.py`). None where the fused search does
  not pay (`applies`) or the rows do not tile."""
  block = block or BLOCK[platform]
  tile_rows = _tile(rows, TILE_ROWS[platform], block)
  if not tile_rows or not applies(k, rows, block):
    return None
  padded = max(MIN_TILE_QUERIES[platform], 1 << max(0, qb - 1).bit_length())
  most = TILE_QUERIES[platform]
  return Plan(block, tile_rows, min(most, padded), TILE_D[platform],
              padded if padded <= most else -(-qb // most) * most, precision or PRECISION[platform], platform,
              interpret)


def search(queries: jax.Array, rows: jax.Array, offset, n_valid, *, k: int, block: int, tile_rows: int,
           tile_queries: int, tile_d: int | None, padded_queries: int, precision: str, platform: str,
           interpret: bool):
  """Exact top-k of unit queries over `rows` (module docstring); traced inside the caller's jitted program.

  Args:
    queries: float32 [Qb, D], unit norm.
    rows: [R, D] float32 or bfloat16, corpus positions offset .. offset + R - 1 (positions >= n_valid are zero
      padding).
    offset, n_valid: int32 scalars.
    k: 1 <= k; `applies(k, R, block)` should hold (else the XLA search is cheaper).
    block, tile_rows, tile_queries, tile_d, padded_queries, precision, platform, interpret: `plan(...)`.

  Returns:
    (scores float32 [Qb, k] best first, positions int32 [Qb, k]); equal scores rank the smaller position first.
  """
  qb, d = queries.shape
  r = rows.shape[0]
  num_blocks = r // block
  m = candidate_blocks(k, num_blocks)
  q = queries if padded_queries == qb else jnp.concatenate(
      [queries, jnp.broadcast_to(queries[-1:], (padded_queries - qb, d))])
  maxima = block_maxima(q.astype(rows.dtype), rows, block=block, tile_rows=tile_rows, tile_queries=tile_queries,
                        tile_d=tile_d, precision=precision, platform=platform, interpret=interpret)[:qb]
  # Blocks wholly past the corpus are padding; the one block holding the corpus's last row may score its zero padding
  # rows, an overestimate that costs at most one candidate slot (the margin covers it).
  first_row = offset + block * jnp.arange(num_blocks, dtype=jnp.int32)
  maxima = jnp.where(first_row[None, :] < n_valid, maxima, -jnp.inf)
  from vidjax.retrieval.dense import _top_k_by_blocks  # pylint: disable=g-import-not-at-top
  _, best = _top_k_by_blocks(maxima, m)
  best = jnp.sort(best, axis=1)  # position order, so that lax.top_k's lower-index rule is the smaller-position rule
  cand_pos = (best[:, :, None] * block + jnp.arange(block, dtype=jnp.int32)).reshape(qb, m * block)
  cand = jnp.take(rows, cand_pos, axis=0, mode="clip")  # [Qb, m * block, D]
  if rows.dtype == jnp.float32:
    scores = jnp.einsum("qd,qcd->qc", queries, cand, precision=jax.lax.Precision.HIGHEST,
                        preferred_element_type=jnp.float32)
  elif platform == "cpu":  # float32 products of the bfloat16 rows, as the CPU's XLA program scores them
    scores = jnp.einsum("qd,qcd->qc", queries, cand.astype(jnp.float32), precision=jax.lax.Precision.HIGHEST,
                        preferred_element_type=jnp.float32)
  else:  # the query rounded to bfloat16, float32 accumulation: as the accelerators' XLA program scores them
    scores = jnp.einsum("qd,qcd->qc", queries.astype(jnp.bfloat16), cand, preferred_element_type=jnp.float32)
  pos = cand_pos + offset
  scores = jnp.where(pos < n_valid, jnp.where(scores == 0, 0.0, scores), -jnp.inf)
  top_s, sel = jax.lax.top_k(scores, min(k, m * block))
  top_p = jnp.take_along_axis(pos, sel, axis=1)
  if k > m * block:  # more than every row of the device (a tiny corpus): the rest stays empty
    top_s = jnp.concatenate([top_s, jnp.full((qb, k - m * block), -jnp.inf, jnp.float32)], axis=1)
    top_p = jnp.concatenate([top_p, jnp.full((qb, k - m * block), -1, jnp.int32)], axis=1)
  return top_s, top_p


def numpy_block_maxima(queries: np.ndarray, rows: np.ndarray, block: int) -> np.ndarray:
  """The reference of `block_maxima` (float64 products of the given values): [Qb, R / block]."""
  s = np.asarray(queries, np.float64) @ np.asarray(rows, np.float64).T
  return s.reshape(s.shape[0], -1, block).max(axis=-1)
