"""Dense stage-1 index: exact cosine top-K over a corpus of embeddings with string ids.

The recall stage of the retrieval stack (ARCHITECTURE.md "At query time"): a query embedding
`[D]` against every corpus embedding, best K kept. It is exact (brute force), so it is also the
reference that approximate or generative recall (GRDR) is measured against.

    index = DenseIndex(ids, embeddings)                       # [N] str ids, [N, D] float
    index = DenseIndex.from_store(store, "clip")              # streams a feature store kind
    ids, scores = index.search(queries, k=10)                 # [Q, K] str, [Q, K] float32

How it works:

* The corpus is L2-normalised (`vidjax.ops.l2_normalize`), sorted by id and stored on the default
  device as one array of equal chunks `[num_chunks, chunk, D]` (the last chunk zero-padded), in float32 or
  bfloat16. Building it streams one chunk at a time into that array (updated in place), so the index never holds a
  second copy of the corpus.
* A search is one compiled program per query batch (`_search`), on every platform: either one step over all rows
  (small query batches, whose `[Qb, N]` scores fit `SCORE_BUDGET`) or a `lax.scan` over the chunks; each step
  scores `[Qb, rows]` (float32, also with bfloat16 storage: see `_scores`), keeps its top K (`_top_k_by_blocks`,
  equal to `lax.top_k`) and merges them with the running `[Qb, K]` best. Chunk sizes, the budget and the bfloat16
  scoring are chosen per platform (`DEFAULT_CHUNK`, `SCORE_BUDGET`, `_plan`): cache-sized chunks on a CPU (measured),
  ~1M-row chunks on GPU and TPU. The program compiles once per (query batch, chunk count, chunk, D, storage dtype,
  K, plan). One exception, measured (issue 63): a single-device CPU index runs one program per chunk, each on a view
  that shares the stored buffer, dispatched without waiting and merged by one more (`_chunk_views`; a small batch
  over fewer than `VIEWS_MIN_ROWS` rows stays one program): on a 2-core machine shared with other work, one
  program's product waits at each of its barriers for a descheduled thread, and the chunks' programs do not.
* bfloat16 chunks are scanned as their uint16 bits (`_scan_chunks`): XLA:CPU converts a sliced bfloat16 array to
  float32, and for a scan it hoisted that conversion of the whole corpus out of the loop.
* The fused program (`kernel=`, `KERNELS`; the default on GPU and TPU): one Pallas kernel scores tiles of rows and
  writes only each block's maximum score, never the `[Qb, N]` score matrix; the k-plus-margin best blocks are then
  re-scored exactly in XLA (`vidjax.retrieval.fused`). The XLA program above stays the CPU's default, the fallback
  (a kernel that fails to compile or run under "auto" is reported once and the XLA program takes over), and the
  reference of the tests (which run the kernel on a CPU in Pallas interpret mode).
* Precision: float32 storage is scored at `Precision.HIGHEST` (never TF32 on a GPU), so scores are float32 dot
  products on every backend. bfloat16 storage: on GPU and TPU one bfloat16 matmul with float32 accumulation (the query
  rounded to bfloat16: scores within 2^-9 of the float32 query's, `bf16_queries_rounded`); on a CPU, float32 scores
  of the bfloat16 rows (the measured fastest there).
* Queries go in batches of `query_batch` rows; a remainder (or a query set smaller than one
  batch) is padded to the next power of two, so single queries do not pay for 256 and there are
  at most log2(query_batch) + 1 query shapes.
* Ties: equal scores rank the smaller id first. Corpus positions are id order, `lax.top_k`
  returns the lower index first among equal values (its documented contract), and every merge
  puts the running best (earlier chunks, smaller positions) before the new chunk's. `top_k`
  orders -0.0 below +0.0, so exact zeros are canonicalised to +0.0 first.

* Sharded (`mesh=`, `axis=`): the chunks are dealt to the devices along one mesh axis in position order, whole
  chunks each (the last device's tail is zero padding), each device's block read from the source when it is placed
  (`jax.make_array_from_callback`). A search is one `shard_map` (`_sharded_search`): every device runs the
  single-device program on its own chunks (`_scan_chunks`, the same plan, decided by N), adding its row offset, then
  the devices' [Q, K] are gathered in position order and one `top_k` keeps the best K, so the answer is the
  single-device one bit for bit (tested on 8 simulated CPU devices; in the one-step plan a device's product has fewer
  rows than the single device's, which on CPU gives the same bits and on an accelerator is not tested). `save`
  writes the stored rows one chunk at a time; `load` deals them over any mesh again.
  Multi-process (a pod): the mesh spans every process's devices, each process reads only the chunks of its own
  devices (from arrays or a store, streaming) and every process gets the whole answer (a test runs 2 processes).
  `vectors` is then a collective (every process calls it with the same ids and gets every row); `save` writes each
  process's own blocks into one file, so its directory must be one every process sees (a shared filesystem).

Backends (`backend=`, `params=`; `from_config` reads a config's `index` section): "jax" (the above, exact, the
default; `params={"rescore": True}` with bfloat16 storage re-ranks the bfloat16 top 2k by the float32 rows on the
host: `JaxExact`), "approx" (the same chunks, `jax.lax.approx_max_k` per chunk on a TPU; on CPU and GPU, where
approx_max_k is an exact sort of every score, the exact program), "faiss" and "scann"
(`vidjax.retrieval.backends`, optional extras). Every backend answers [Q, k] scores and positions; ids, normalisation,
the tie rule (re-applied to what an approximate backend returns) and results it did not find (id "", score -inf)
stay here.

Saved indexes (`save`, `load`, `vidjax.retrieval.files`): written with plain file writes, never a memory map (a full
disk is one error naming the file and "no space left"; the temporary directory is removed, and a killed save's is
removed by the next save), and index.json records every file's size and SHA-256 (the vectors' one per chunk). `load`
checks them, and the vectors' dtype, shape, size, finiteness and norms, before it trusts a file: a file that is
truncated, re-saved, reordered or edited is one error naming the index and the file.
"""
from __future__ import annotations

import errno
import functools
import inspect
import json
import math
import os
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterator, Sequence

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from vidjax import io as vio
from vidjax import progress as progress_lib
from vidjax.data.features import FeatureStore
from vidjax.ops import l2_normalize
from vidjax.retrieval import files
from vidjax.retrieval import fused

DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}
BACKENDS = ("jax", "approx", "faiss", "scann")  # = vidjax.defaults.common.INDEX_BACKENDS (the configs' choices)
INDEX_FORMAT = 2  # of `DenseIndex.save` (2: index.json records every file's size and SHA-256; 1 still loads)
# Per platform (`platform_of`: the platform of the devices holding the index). A search is one compiled program per
# query batch (`_search`, `_sharded_search`) that takes the stored chunks in one of two shapes (`_plan`):
#   * one step over all of a device's rows, when the [Qb, N] float32 scores are at most `SCORE_BUDGET` elements
#     (small query batches: a single matrix-vector-like product, no loop);
#   * else a `lax.scan` over its chunks of `DEFAULT_CHUNK` rows, merging each chunk's top-k into the running best.
# CPU: measured on this project's 2-core Xeon VM (AVX-512, no AMX), 100k x 256 random unit rows, k = 10, one search
# program at a time (medians of 6-8 calls, the machine shared but lightly loaded): at batch 256, scanned chunks of
# 2,048 / 4,096 / 8,192 / 16,384 rows took 195 / 152 / 148 / 179 ms with float32 storage (the per-chunk dispatch
# loop the index had before: 146-150 ms at its 14,336-row chunks) and 205 ms at 4,096 / 202 ms at 8,192 rows with
# bfloat16 ("upcast"); one step over all rows beat the scan at batch 16 (19.8 against 30.6 ms) and lost at 64 (62
# against 52), hence a budget of 2^22 scores; at batch 1 it took 8 ms where the NumPy BLAS path the index had before
# took 56. XLA:CPU copies each scanned chunk out of the stored array before its matmul (the dynamic slice), one
# extra pass over the rows that the one-step plan does not pay.
# CPU since issue 63 (measured on a 2-core AMD EPYC VM, BENCHMARKS.md "Dense search"): a single-device CPU index runs
# one program per chunk instead (`_chunk_views`; small batches over fewer than VIEWS_MIN_ROWS rows excepted), the
# plan choosing the bfloat16 scoring (`_plan`); float32
# chunks are 16,384 rows again (the per-chunk dispatch before 7655a41 had them: at 1M x 256, batch 256, 0.94x of it
# with 8,192 rows, 1.05x with 16,384), bfloat16 ones 8,192. The scan stays the sharded CPU index's program.
# GPU and TPU: NOT measured in the session that chose them (it had no device): large chunks, so a 10M-row corpus is
# ~10 steps of one large matmul each (a PyTorch peer on an H200 scanned 2M-row chunks), and a budget of 2^28 scores
# (1 GiB of float32: batch 256 x 1M rows) under which a batch is one step (batch 1 at 10M rows: 40 MB of scores).
# Whether XLA:GPU also copies each scanned chunk (see CPU) is not known here. launch/gpu_check.sh measures them
# (bench/ann.py --chunk).
DEFAULT_CHUNK = {"cpu": {"float32": 16384, "bfloat16": 8192},
                 "gpu": {"float32": 1 << 20, "bfloat16": 1 << 20},
                 "tpu": {"float32": 1 << 19, "bfloat16": 1 << 19}}
SCORE_BUDGET = {"cpu": 1 << 22, "gpu": 1 << 28, "tpu": 1 << 27}
# The search program (`kernel=`): "xla" (the above), "pallas" (the fused score + block-max kernel of
# `vidjax.retrieval.fused`: no [Qb, N] score matrix in device memory; on a CPU in interpret mode, for tests), "auto"
# (pallas on GPU and TPU, xla on CPU: `resolve_kernel`). FUSED_BLOCK: rows per block maximum, per platform (None:
# `fused.BLOCK`); the bench sweeps it.
KERNELS = ("auto", "xla", "pallas")
# params rescore (bfloat16 storage): the device's top RESCORE_FACTOR * k re-ranked by the float32 rows (`JaxExact`).
RESCORE_FACTOR = 2
FUSED_BLOCK: dict[str, int] = {}
DEFAULT_QUERY_BATCH = 256
# Chunk lengths are multiples of this many rows (see `_build`).
_ROW_ALIGN = 128
# The two-level top-k of one step (`_top_k_by_blocks`): rows of at most `_FULL_TOP_K` positions
# take `lax.top_k` directly; longer ones are cut into blocks of `_block(rows)` positions. Measured
# on CPU (bench/dense_index.py, batch 256): `lax.top_k` costs ~2.5 us per row at 1024 positions,
# blocks of 32 were best for 4096-8192-row chunks and 64 for 16384.
_FULL_TOP_K = 2048


def _block(c: int) -> int:
  return 32 if c <= 8192 else 64


def _plan(platform: str, qb: int, n: int) -> tuple[bool, str]:
  """(one step over all of a device's rows?, how a bfloat16 chunk is scored: `_scores`) for a batch of `qb` queries
  against `n` corpus rows: one step when the [qb, n] scores fit `SCORE_BUDGET`.

  Accelerators: one bfloat16 matmul (the query rounded to bfloat16, float32 accumulation: the native tensor-core /
  MXU product). CPU, measured (100k x 256, 4,096-row chunks, the machine loaded, process CPU time): one step over the
  whole bfloat16 block takes the three-term split (batch 1: 9.4 ms; converting the block would write a float32 copy
  of the corpus: 110 ms); a scan over cache-sized chunks converts each to float32 (batch 256: 206 ms; one bfloat16
  matmul 289 ms, the split 635 ms: XLA:CPU's bfloat16 matmul is slower than its float32 one). Both give float32
  scores of the bfloat16 rows.
  """
  whole = qb * n <= SCORE_BUDGET[platform]
  if platform != "cpu":
    return whole, "bf16"
  return whole, "split3" if whole else "upcast"


def bf16_queries_rounded(platform: str | None = None) -> bool:
  """Whether a bfloat16 index on `platform` (default: the default device's) scores with the query rounded to
  bfloat16 (accelerators, both programs: scores within 2^-9 of the float32 query's) rather than exactly (CPU): the
  precision a comparison with a NumPy reference has to allow for."""
  return (platform or platform_of()) != "cpu"


def resolve_kernel(kernel: str, platform: str) -> str:
  """"xla" or "pallas": what `kernel` ("auto", "xla", "pallas"; `KERNELS`) means on `platform`. "auto" is the fused
  Pallas search on GPU and TPU and the XLA program on a CPU, where Pallas runs only in interpret mode (slow: asked
  for by name, for tests)."""
  if kernel not in KERNELS:
    raise ValueError(f"DenseIndex kernel must be one of {KERNELS}, got {kernel!r}")
  return ("pallas" if platform != "cpu" else "xla") if kernel == "auto" else kernel


def platform_of(mesh: jax.sharding.Mesh | None = None) -> str:
  """"cpu", "gpu" or "tpu": the platform of `mesh`'s devices, else of the default device (any other platform
  is treated as an accelerator: "gpu")."""
  platform = (mesh.devices.flat[0] if mesh is not None else jax.devices()[0]).platform
  return platform if platform in DEFAULT_CHUNK else "gpu"


def default_chunk(dtype: str, platform: str | None = None) -> int:
  """Corpus rows per chunk on `platform` (default: the default device's) for storage `dtype`."""
  return DEFAULT_CHUNK[platform or platform_of()][dtype]


def query_batches(n: int, batch: int) -> Iterator[tuple[int, int, int]]:
  """Splits `n` query rows into `(start, stop, padded_size)` batches.

  Full batches have `batch` rows; the remainder is padded to the next power of two (at most
  `batch`), so a jitted consumer sees at most log2(batch) + 1 shapes.
  """
  for start in range(0, n, batch):
    stop = min(start + batch, n)
    size = batch if stop - start == batch else min(batch, 1 << (stop - start - 1).bit_length())
    yield start, stop, size


def pad_rows(x: np.ndarray, size: int) -> np.ndarray:
  """`x [m, ...]` -> `[size, ...]`, padded by repeating the last row (m >= 1)."""
  if x.shape[0] == size:
    return x
  return x[np.minimum(np.arange(size), x.shape[0] - 1)]


_CONTRACT_D = (((1,), (1,)), ((), ()))


def _scores(queries: jax.Array, chunk: jax.Array, bf16_scoring: str = "bf16") -> jax.Array:
  """float32 unit queries [Qb, D] x corpus chunk [C, D] -> float32 cosine scores [Qb, C].

  float32 storage: one float32 matmul at HIGHEST precision (never TF32 or bfloat16 passes: on a GPU the default
  float32 matmul is TF32, whose ~1e-4 error reorders near-ties). bfloat16 storage (`_plan` chooses):
    "bf16": one bfloat16 matmul of the query rounded to bfloat16, accumulated in float32: scores within
      2^-9 (|q| |x| = 1) of the float32 query's, at the device's bfloat16 rate and bytes;
    "split3": the query split exactly into three bfloat16 terms (hi + mid + lo carry all 24 significand bits), so
      each product with a bfloat16 corpus value is exact: float32 scores of the bfloat16-rounded corpus from three
      bfloat16 matmuls, without a float32 copy of the chunk;
    "upcast": the chunk converted to float32, one float32 matmul (the same scores as "split3" up to summation
      order).
  """
  if chunk.dtype == jnp.float32:
    return jax.lax.dot_general(queries, chunk, _CONTRACT_D, precision=jax.lax.Precision.HIGHEST,
                               preferred_element_type=jnp.float32)
  if bf16_scoring == "bf16":
    return jax.lax.dot_general(queries.astype(jnp.bfloat16), chunk, _CONTRACT_D, preferred_element_type=jnp.float32)
  if bf16_scoring == "upcast":
    return jax.lax.dot_general(queries, chunk.astype(jnp.float32), _CONTRACT_D, precision=jax.lax.Precision.HIGHEST,
                               preferred_element_type=jnp.float32)
  hi = queries.astype(jnp.bfloat16)
  rest = queries - hi.astype(jnp.float32)
  mid = rest.astype(jnp.bfloat16)
  lo = (rest - mid.astype(jnp.float32)).astype(jnp.bfloat16)
  qb = queries.shape[0]
  s = jax.lax.dot_general(jnp.concatenate([hi, mid, lo]), chunk, _CONTRACT_D, preferred_element_type=jnp.float32)
  return (s[:qb] + s[qb:2 * qb]) + s[2 * qb:]


def _top_k_by_blocks(scores: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
  """`lax.top_k(scores [Qb, C], min(k, C))` with the same result, ties included, at less cost.

  The row is cut into blocks of `_block(C)` consecutive positions; only the k blocks with the
  largest maxima (ties: the lower block) can hold a top-k element: a block ranked below k others
  has each of them holding an element that beats all of its own (higher score, or equal score at
  a smaller position). Those k blocks, put back in position order, go through `top_k`, so the
  tie order is top_k's own. One max-reduction over the row replaces the partial sort of it
  (about 5x cheaper on CPU).
  """
  qb, c = scores.shape
  b = _block(c)
  if c <= _FULL_TOP_K or c % b or c // b <= k:
    return jax.lax.top_k(scores, min(k, c))
  blocks = scores.reshape(qb, c // b, b)
  _, best_blocks = jax.lax.top_k(blocks.max(axis=-1), k)
  best_blocks = jnp.sort(best_blocks, axis=-1)  # position order, so top_k's tie rule holds below
  cand = jnp.take_along_axis(blocks, best_blocks[:, :, None], axis=1).reshape(qb, k * b)
  cand_pos = (best_blocks[:, :, None] * b + jnp.arange(b, dtype=best_blocks.dtype)).reshape(qb, -1)
  top_s, sel = jax.lax.top_k(cand, k)
  return top_s, jnp.take_along_axis(cand_pos, sel, axis=1)


def _merge(queries, chunk, offset, n_valid, best_scores, best_pos, *, k: int, recall_target: float | None = None,
           bf16_scoring: str = "bf16"):
  """One corpus chunk merged into the running top-k.

  Args:
    queries: float32 [Qb, D], unit norm.
    chunk: [C, D] (float32 or bfloat16), corpus rows `offset .. offset + C`.
    offset, n_valid: int32 scalars; rows at positions >= n_valid are padding.
    best_scores, best_pos: [Qb, k] running best, earlier chunks (all positions < offset).
    recall_target: None = the chunk's exact top-k; a fraction: `jax.lax.approx_max_k` at that expected recall (the
      "approx" backend on a TPU; `JaxExact.recall_target_used` passes None elsewhere, where it is a full sort).
    bf16_scoring: how a bfloat16 chunk is scored (`_scores`).

  Returns:
    the new (best_scores float32 [Qb, k], best_pos int32 [Qb, k]), best first, ties by position.
  """
  scores = _scores(queries, chunk, bf16_scoring)
  pos = offset + jnp.arange(chunk.shape[0], dtype=jnp.int32)
  # top_k's total order puts -0.0 below +0.0; equal scores must tie, so canonicalise zeros.
  scores = jnp.where(pos[None, :] < n_valid, jnp.where(scores == 0, 0.0, scores), -jnp.inf)
  if recall_target is None:
    top_s, top_i = _top_k_by_blocks(scores, k)
  else:
    top_s, top_i = jax.lax.approx_max_k(scores, min(k, scores.shape[1]), recall_target=recall_target)
  # Running best first: on equal scores top_k keeps the lower index, i.e. the smaller position.
  all_s = jnp.concatenate([best_scores, top_s], axis=1)
  all_p = jnp.concatenate([best_pos, top_i + offset], axis=1)
  new_s, sel = jax.lax.top_k(all_s, k)
  return new_s, jnp.take_along_axis(all_p, sel, axis=1)


def _scan_chunks(queries, block, first, n_valid, init, *, k: int, recall_target: float | None, whole: bool,
                 bf16_scoring: str, fused_plan: fused.Plan | None = None):
  """The running top-k over consecutive chunks, inside one compiled program.

  Args:
    queries: float32 [Qb, D], unit norm.
    block: [L, C, D] chunks; chunk j holds corpus positions (first + j) * C ..
    first: int32 scalar, the corpus chunk number of block[0].
    n_valid: int32 scalar, the corpus size N (positions >= N are padding).
    init: the running best before the first chunk, (float32 [Qb, k] of -inf, int32 [Qb, k] of -1).
    whole: one step over all L * C rows (the block reshaped, no copy); else one `lax.scan` step per chunk.
    fused_plan: the fused score + block-max kernel over all L * C rows (`vidjax.retrieval.fused`) instead of XLA.

  Returns (scores float32 [Qb, k], positions int32 [Qb, k]), best first, equal scores by smaller position.
  """
  num, c, d = block.shape
  if fused_plan is not None:
    return fused.search(queries, block.reshape(num * c, d), (first * c).astype(jnp.int32), n_valid, k=k,
                        **fused_plan._asdict())
  if whole:
    return _merge(queries, block.reshape(num * c, d), (first * c).astype(jnp.int32), n_valid, *init, k=k,
                  recall_target=recall_target, bf16_scoring=bf16_scoring)
  # bfloat16 chunks are scanned as their uint16 bits: scanning the bfloat16 array itself, XLA:CPU converted the whole
  # block to float32 before the loop (one float32 copy of the corpus written per search, and every chunk converted
  # back inside it): bfloat16 searches 1.5-8x slower than the same steps dispatched one by one (issue 63).
  bits = block.dtype == jnp.bfloat16
  xs = jax.lax.bitcast_convert_type(block, jnp.uint16) if bits else block

  def body(best, inputs):
    j, chunk = inputs
    if bits:
      chunk = jax.lax.bitcast_convert_type(chunk, jnp.bfloat16)
    offset = ((first + j) * c).astype(jnp.int32)
    return _merge(queries, chunk, offset, n_valid, *best, k=k, recall_target=recall_target,
                  bf16_scoring=bf16_scoring), None

  best, _ = jax.lax.scan(body, init, (jnp.arange(num, dtype=jnp.int32), xs))
  return best


def _init(qb: int, k: int) -> tuple[jax.Array, jax.Array]:
  return jnp.full((qb, k), -jnp.inf, jnp.float32), jnp.full((qb, k), -1, jnp.int32)


_STATIC = ("k", "recall_target", "whole", "bf16_scoring", "fused_plan")


@functools.partial(jax.jit, static_argnames=_STATIC)
def _search(queries, chunks, n_valid, *, k: int, recall_target: float | None = None, whole: bool = False,
            bf16_scoring: str = "bf16", fused_plan: fused.Plan | None = None):
  """Top-k of unit queries float32 [Qb, D] over the chunks [L, C, D] of one device: one program."""
  return _scan_chunks(queries, chunks, jnp.int32(0), n_valid, _init(queries.shape[0], k), k=k,
                      recall_target=recall_target, whole=whole, bf16_scoring=bf16_scoring, fused_plan=fused_plan)


@functools.partial(jax.jit, static_argnames=_STATIC + ("mesh", "axis"))
def _sharded_search(queries, chunks, n_valid, *, k: int, mesh: jax.sharding.Mesh, axis: str,
                    recall_target: float | None = None, whole: bool = False, bf16_scoring: str = "bf16",
                    fused_plan: fused.Plan | None = None):
  """Top-k over a corpus split along `axis` of `mesh`.

  Args:
    queries: float32 [Qb, D], unit norm (replicated).
    chunks: [S * L, C, D], sharded along its first axis: shard d holds chunks d * L .. (d + 1) * L - 1, corpus
      positions d * L * C .. (d + 1) * L * C - 1 (zero padding past n_valid).
    n_valid: int32 scalar, the corpus size N.

  Each device runs the single-device program on its L chunks (`_scan_chunks`, so every row's score is the same
  float); the S shards' [Qb, k] results are gathered in shard order, i.e. position order, and one `top_k` keeps the
  best k: ties still rank the smaller position first. Returns (scores float32 [Qb, k], positions int32).
  """
  num_local = chunks.shape[0] // mesh.shape[axis]

  def local(q, block):  # block [L, C, D]
    init = _init(q.shape[0], k)
    if fused_plan is None:
      init = jax.lax.pcast(init, (axis,), to="varying")  # the carry varies over the devices
    s, p = _scan_chunks(q, block, (jax.lax.axis_index(axis) * num_local).astype(jnp.int32), n_valid, init, k=k,
                        recall_target=recall_target, whole=whole, bf16_scoring=bf16_scoring, fused_plan=fused_plan)
    return s[None], p[None]

  spec = jax.sharding.PartitionSpec(axis)
  # A pallas_call's outputs carry no varying-axes type, which shard_map's check asks for: unchecked with the kernel.
  s, p = jax.shard_map(local, mesh=mesh, in_specs=(jax.sharding.PartitionSpec(), spec), out_specs=(spec, spec),
                       check_vma=fused_plan is None)(queries, chunks)
  qb = queries.shape[0]
  all_s = s.transpose(1, 0, 2).reshape(qb, -1)  # [Qb, S * k], shard 0 first
  all_p = p.transpose(1, 0, 2).reshape(qb, -1)
  top, sel = jax.lax.top_k(all_s, k)
  # replicated on every device, so each process of a multi-process mesh holds the whole answer
  everywhere = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  return (jax.lax.with_sharding_constraint(top, everywhere),
          jax.lax.with_sharding_constraint(jnp.take_along_axis(all_p, sel, axis=1), everywhere))


# A CPU's small batch (`_plan`'s one step) over fewer rows than this stays one program (`_chunk_views`).
VIEWS_MIN_ROWS = 1 << 18


def _chunk_views(stored: jax.Array) -> list[jax.Array] | None:
  """One device array per chunk of a CPU index's `stored [L, C, D]`, each sharing the stored buffer (no copy), or
  None where the CPU client copied instead (then the index searches with the one-program plans).

  Why (measured, issue 63, a 2-core VM shared with other work): one program's product runs on both cores by
  splitting it at a barrier, and on a loaded machine each barrier waits for a descheduled thread: 1M x 256 rows,
  batch 1, 275-355 ms for the one program against 95-110 ms for the chunks' programs, dispatched without waiting
  (wall time; 40-47 ms against 50-60 with the machine quiet). At batch 256 the chunks' programs are as fast as the
  scan or faster (bfloat16 at 100k: 189 against 237 ms) and copy no chunk. A small batch over fewer than
  VIEWS_MIN_ROWS rows stays one program: there the one program won quiet or loaded (100k, batch 1: 5-6 ms quiet,
  at least the per-chunk dispatch's speed loaded), and the chunks' dispatch costs more than the product."""
  view = np.asarray(stored)  # a CPU array's own memory
  parts = [jax.device_put(view[j]) for j in range(view.shape[0])]
  if any(p.unsafe_buffer_pointer() != view[j].ctypes.data for j, p in enumerate(parts)):
    return None  # copies: twice the memory; not worth it
  return parts


@functools.partial(jax.jit, static_argnames=("k", "bf16_scoring"))
def _chunk_search(queries, chunk, offset, n_valid, *, k: int, bf16_scoring: str):
  """The top-k of one chunk [C, D] (corpus positions offset ..): (scores [Qb, k], positions [Qb, k])."""
  return _merge(queries, chunk, offset, n_valid, *_init(queries.shape[0], k), k=k, bf16_scoring=bf16_scoring)


_merge_chunk = jax.jit(_merge, static_argnames=("k", "recall_target", "bf16_scoring"))


@functools.partial(jax.jit, static_argnames=("k",))
def _merge_chunks(scores, positions, *, k: int):
  """The best k of the chunks' top-k lists, given in chunk (= position) order: top_k keeps the lower index, i.e. the
  smaller position, among equal scores."""
  top, sel = jax.lax.top_k(jnp.concatenate(scores, axis=1), k)
  return top, jnp.take_along_axis(jnp.concatenate(positions, axis=1), sel, axis=1)


# A single-device build reads and places at least this many rows at a time (fewer, larger host reads and copies).
_BUILD_ROWS = 1 << 16


@functools.partial(jax.jit, donate_argnums=0)
def _put_chunks(chunks, rows, c):
  """chunks [L, C, D] with chunks c .. c + g replaced by rows [g, C, D], in place (the old buffer is donated)."""
  return jax.lax.dynamic_update_slice_in_dim(chunks, rows, c, axis=0)


def _local(x: jax.Array) -> np.ndarray:
  """A replicated array's value on this host (also when other processes hold devices of its mesh)."""
  return np.asarray(x if x.is_fully_addressable else x.addressable_data(0))


def _rows(chunks, rows):
  return chunks[rows].astype(jnp.float32)


_gather_rows = jax.jit(_rows)


class JaxExact:
  """The JAX backends of `DenseIndex` (module docstring): "jax", exact top-k (the default), and "approx",
  `jax.lax.approx_max_k` per chunk at `recall_target` on a TPU (on CPU and GPU JAX computes it as an exact sort of
  every score, so there the exact program runs: `recall_target_used`).

  Built from `read(sorted positions) -> float32 [m, D]` unit rows; stores them in `dtype` as one array of equal
  chunks [L, C, D] on the default device, or dealt over the devices along `axis` of `mesh`.

  `rescore` (bfloat16 storage, one device): the device finds the bfloat16 top 2k (`RESCORE_FACTOR`), and they are
  re-ranked by the float32 rows, read on the host from `rescore_read` (default `read`: the caller's array or the
  feature store the index was built from, never copied; a loaded index reads the rescore.npy its save wrote). Rounding
  a unit vector's coordinates to bfloat16 costs recall (0.96-0.98 recall@10 against float32 exact on clustered
  rows); the float32 top 10 lies inside the bfloat16 top 20 almost always (BENCHMARKS.md), so this gives float32's
  answer at bfloat16's device memory and bandwidth. The scores returned are float32 (float64 products rounded).
  """

  def __init__(self, n: int, dim: int, read, *, dtype: str = "float32", chunk: int | None = None,
               mesh: jax.sharding.Mesh | None = None, axis: str = "data", recall_target: float | None = None,
               progress: bool = False, kernel: str = "auto", rescore: bool = False, rescore_read=None):
    if dtype not in DTYPES:
      raise ValueError(f"DenseIndex dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if kernel not in KERNELS:
      raise ValueError(f"DenseIndex kernel must be one of {KERNELS}, got {kernel!r}")
    if recall_target is not None and not 0 < recall_target <= 1:
      raise ValueError(f"DenseIndex backend 'approx': params recall_target must be in (0, 1], got {recall_target!r}")
    if mesh is not None and axis not in mesh.axis_names:
      raise ValueError(f"DenseIndex: a mesh needs an axis of the mesh {mesh.axis_names}, got axis {axis!r}")
    if rescore and (dtype != "bfloat16" or mesh is not None or recall_target is not None):
      raise ValueError("DenseIndex params rescore=True re-ranks a bfloat16 index's candidates by the float32 rows: it "
                       f"needs backend 'jax', dtype 'bfloat16' and no mesh (got dtype {dtype!r}"
                       f"{', a mesh' if mesh is not None else ''}{', backend approx' if recall_target else ''})")
    self.rescore = bool(rescore)
    self._rescore_read = (rescore_read or read) if rescore else None
    self.platform = platform_of(mesh)
    self.kernel = kernel  # as asked; `kernel_used`: what searches run (the XLA program after a failed kernel)
    self.kernel_used = resolve_kernel(kernel, self.platform)
    chunk = default_chunk(dtype, self.platform) if chunk is None else chunk
    if not isinstance(chunk, (int, np.integer)) or isinstance(chunk, bool) or chunk < 1:
      raise ValueError(f"DenseIndex chunk must be a positive integer, got {chunk!r}")
    self.n, self.dim, self.dtype, self.recall_target = n, dim, dtype, recall_target
    self.name = "jax" if recall_target is None else "approx"
    self.exact = recall_target is None
    # As few chunks as `chunk` allows, made equal in size (rounded up to `_ROW_ALIGN` rows), so
    # the padding of the last one stays small: N=10,000 with chunk 8192 is 2 x 5120 rows, not 2 x 8192.
    align = min(_ROW_ALIGN, chunk)
    self.chunk = int(min(chunk, align * math.ceil(math.ceil(n / math.ceil(n / chunk)) / align)))
    self.mesh, self.axis = mesh, axis
    self._n_valid = np.int32(n)
    num_chunks = math.ceil(n / self.chunk)
    bar = progress_lib.bar(num_chunks, "DenseIndex build", unit="chunk", disable=not progress)

    def rows_of(c: int) -> np.ndarray:  # chunk c in the storage dtype, zero-padded: [chunk, D]
      positions = np.arange(c * self.chunk, min((c + 1) * self.chunk, n))
      if not positions.size:
        return np.zeros((self.chunk, dim), DTYPES[dtype])
      rows = read(positions).astype(DTYPES[dtype])
      bar.update(1)
      return np.pad(rows, ((0, self.chunk - len(rows)), (0, 0)))

    if mesh is not None:  # whole chunks per device; each device's block is read when it is placed (streaming)
      per_device = math.ceil(num_chunks / mesh.shape[axis])
      shape = (per_device * mesh.shape[axis], self.chunk, dim)
      sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(axis))
      self._stored = jax.make_array_from_callback(
          shape, sharding, lambda index: np.stack([rows_of(c) for c in range(*index[0].indices(shape[0]))]))
      # every process gets the gathered rows (replicated), also the rows of other processes' devices
      self._gather = jax.jit(_rows, out_shardings=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    else:  # one device array, filled in place a few chunks (>= _BUILD_ROWS rows) at a time
      self._stored = jnp.zeros((num_chunks, self.chunk, dim), DTYPES[dtype])
      group = max(1, _BUILD_ROWS // self.chunk)
      for c in range(0, num_chunks, group):
        rows = np.stack([rows_of(i) for i in range(c, min(c + group, num_chunks))])
        self._stored = _put_chunks(self._stored, jax.device_put(rows), np.int32(c))
      self._gather = _gather_rows
    bar.close()
    # On a CPU, zero-copy NumPy views of this host's blocks (when it holds them all), for `vectors`.
    blocks = {sh.index[0].start or 0: sh.data for sh in self._stored.addressable_shards}  # replicas: one each
    cpu = all(d.platform == "cpu" for d in self._stored.sharding.device_set)
    self._host_blocks = ([np.asarray(blocks[b]).reshape(-1, dim) for b in sorted(blocks)]
                         if cpu and self._stored.is_fully_addressable else None)
    self._chunk_views = _chunk_views(self._stored) if cpu and mesh is None else None

  @property
  def params(self) -> dict:
    return ({"chunk": self.chunk} | ({} if self.exact else {"recall_target": self.recall_target})
            | ({"rescore": True} if self.rescore else {}))

  @property
  def SEARCH_PARAMS(self) -> tuple[str, ...]:  # pylint: disable=invalid-name
    return () if self.exact else ("recall_target",)

  def set_search_params(self, recall_target: float | None = None) -> None:
    if recall_target is not None:
      if not 0 < recall_target <= 1:
        raise ValueError(f"DenseIndex backend 'approx': params recall_target must be in (0, 1], got "
                         f"{recall_target!r}")
      self.recall_target = float(recall_target)

  @property
  def nbytes(self) -> int:
    """Bytes of the stored vectors (with the last chunk's padding)."""
    return self._stored.nbytes

  def vectors(self, flat: np.ndarray) -> np.ndarray:
    """The stored rows at positions `flat [m]` as float32 [m, D]."""
    if self._host_blocks is not None:  # a CPU: read the host views (a jitted gather compiles once per row count)
      per_block = len(self._host_blocks[0])
      out = np.empty((flat.size, self.dim), np.float32)
      for b in np.unique(flat // per_block):
        sel = np.flatnonzero(flat // per_block == b)
        out[sel] = self._host_blocks[b][flat[sel] % per_block]
      return out
    which, rows = (flat // self.chunk).astype(np.int32), (flat % self.chunk).astype(np.int32)
    return np.array(_local(self._gather(self._stored, (which, rows))), np.float32)

  @property
  def rows_per_device(self) -> int:
    return self._stored.shape[0] // (1 if self.mesh is None else self.mesh.shape[self.axis]) * self.chunk

  def fused_plan(self, qb: int, k: int) -> fused.Plan | None:
    """The fused kernel's plan for a batch of `qb` queries and top-`k`, or None for the XLA program (`kernel_used`
    "xla", `approx_max_k` on a TPU, or a k too large for the kernel to pay: `fused.applies`)."""
    if self.kernel_used != "pallas" or self.recall_target_used is not None:
      return None
    return fused.plan(self.platform, self.rows_per_device, qb, k, block=FUSED_BLOCK.get(self.platform),
                      interpret=self.platform == "cpu")

  @property
  def recall_target_used(self) -> float | None:
    """`recall_target` where `approx_max_k` is a real approximation (a TPU); elsewhere JAX computes it as an exact
    sort of every score (slower than the exact two-level top-k, same answer), so the exact program runs."""
    return self.recall_target if self.platform == "tpu" else None

  def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit queries float32 [Qb, D] -> (scores float32 [Qb, k], positions [Qb, k]): one compiled program (then,
    with `rescore`, the float32 re-ranking of its top RESCORE_FACTOR k on the host)."""
    if self.rescore:
      return self._rescored(queries, k)
    return self._device_search(queries, k)

  def _rescored(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    _, pos = self._device_search(queries, min(self.n, RESCORE_FACTOR * k))
    pos = np.asarray(pos, np.int64)
    found = pos >= 0
    flat = np.unique(pos[found])
    rows = self._rescore_read(flat)  # float32 [m, D], unit
    cand = rows[np.searchsorted(flat, np.where(found, pos, flat[0]))]  # [Qb, 2k, D]
    # float64 products, rounded once (a batched matrix-vector product: 10-40x np.einsum's time on 2 cores)
    scores = np.matmul(cand.astype(np.float64), queries.astype(np.float64)[:, :, None])[..., 0].astype(np.float32)
    return _tie_order(np.where(found, scores, -np.inf).astype(np.float32), np.where(found, pos, self.n), k)

  def _device_search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    # Decided by N, not by a device's rows, so a sharded index takes the single-device index's plan: same bits.
    whole, scoring = _plan(self.platform, len(queries), self.n)
    plan = self.fused_plan(len(queries), k)
    try:
      return self._run(queries, k, whole, scoring, plan)
    except Exception as e:  # pylint: disable=broad-except
      if plan is None or self.kernel != "auto":
        raise
      # The default kernel did not compile or run here (a Pallas lowering this jax / device lacks): say so once and
      # search with the XLA program from now on; asked for by name ("pallas"), the error is raised instead.
      warnings.warn(f"DenseIndex: the fused Pallas search failed on {self.platform} ({type(e).__name__}: "
                    f"{str(e)[:500]}); this index searches with the XLA program from now on (kernel='xla')")
      self.kernel_used = "xla"
      return self._run(queries, k, whole, scoring, None)

  def _run(self, queries, k, whole, scoring, plan):
    if (plan is None and self._chunk_views is not None and self.recall_target_used is None
        and (not whole or self.n >= VIEWS_MIN_ROWS)):
      # A single-device CPU index: one program per chunk, dispatched without waiting (`_chunk_views`). A small batch's
      # chunks are independent (they run side by side on the cores), then one merge; a large batch's each merge the
      # running best (one after the other: each product already takes every core).
      if whole:
        outs = [_chunk_search(queries, view, np.int32(j * self.chunk), self._n_valid, k=k, bf16_scoring=scoring)
                for j, view in enumerate(self._chunk_views)]
        return jax.device_get(_merge_chunks(tuple(o[0] for o in outs), tuple(o[1] for o in outs), k=k))
      best = _init(len(queries), k)
      for j, view in enumerate(self._chunk_views):
        best = _merge_chunk(queries, view, np.int32(j * self.chunk), self._n_valid, *best, k=k, bf16_scoring=scoring)
      return jax.device_get(best)
    kw = dict(k=k, recall_target=self.recall_target_used, whole=whole, bf16_scoring=scoring, fused_plan=plan)
    if self.mesh is not None:
      s, p = _sharded_search(queries, self._stored, self._n_valid, mesh=self.mesh, axis=self.axis, **kw)
      return _local(s), _local(p)
    return jax.device_get(_search(queries, self._stored, self._n_valid, **kw))

  # -- save / load: the stored rows (storage dtype, no padding) in one .npy, written one chunk at a time with plain
  # file writes (`vidjax.retrieval.files`: a full disk is an OSError, not the SIGBUS of a memory map), each chunk's
  # SHA-256 recorded in index.json and checked when the chunk is read back
  @property
  def spans_processes(self) -> bool:
    """Whether other processes hold some of the blocks (then `save` is `create` on one process, `fill` on all)."""
    return not self._stored.is_fully_addressable

  @property
  def storage(self) -> np.dtype:
    """The dtype vectors.npy holds (bfloat16 as its uint16 bits: NumPy's .npy has no bfloat16)."""
    return np.dtype(np.uint16 if self.dtype == "bfloat16" else np.float32)

  @property
  def file_bytes(self) -> int:
    return self.n * self.dim * (self.storage.itemsize + (4 if self.rescore else 0))

  def save(self, path: Path) -> dict:
    """Writes vectors.npy (and, with `rescore`, the float32 rows as rescore.npy); returns their records for
    index.json (`record`)."""
    self.create(path)
    records = self.record(self.fill(path))
    if self.rescore:
      records["rescore.npy"] = self._save_rescore(path)
    return records

  def _save_rescore(self, path: Path) -> dict:
    """rescore.npy: the float32 unit rows `rescore_read` gives, one chunk at a time, each chunk's SHA-256 recorded."""
    shape, hashes = (self.n, self.dim), []

    def blocks():
      for start in range(0, self.n, self.chunk):
        rows = np.ascontiguousarray(self._rescore_read(np.arange(start, min(start + self.chunk, self.n))), np.float32)
        hashes.append(files.sha256_rows(rows))
        yield start, rows

    files.create_npy(path / "rescore.npy", np.dtype(np.float32), shape)
    files.write_rows(path / "rescore.npy", np.dtype(np.float32), shape, blocks())
    return {"dtype": np.dtype(np.float32).str, "shape": list(shape), "chunk_rows": self.chunk, "chunk_sha256": hashes}

  def create(self, path: Path) -> None:
    """An empty vectors.npy of the right shape."""
    files.create_npy(path / "vectors.npy", self.storage, (self.n, self.dim))

  def fill(self, path: Path) -> dict[int, str]:
    """Writes this process's chunks (its device blocks, one chunk at a time) into the vectors.npy `create` made;
    returns {chunk number: SHA-256 of its rows as stored}."""
    hashes = {}

    def blocks():
      for shard in self._stored.addressable_shards:  # [L, chunk, D] from chunk `first` on
        first = shard.index[0].start or 0
        for j in range(shard.data.shape[0]):
          c = first + j
          start, stop = c * self.chunk, min((c + 1) * self.chunk, self.n)
          if stop > start and c not in hashes:  # not padding, not a replica
            rows = np.asarray(shard.data[j])[:stop - start]
            hashes[c] = files.sha256_rows(rows)
            yield start, rows

    files.write_rows(path / "vectors.npy", self.storage, (self.n, self.dim), blocks())
    return hashes

  def record(self, hashes: Mapping[int, str]) -> dict:
    """vectors.npy's entry in index.json's "files": dtype, shape and every chunk's SHA-256 (`fill`'s, merged over
    the processes)."""
    num = math.ceil(self.n / self.chunk)
    if sorted(hashes) != list(range(num)):
      raise RuntimeError(f"DenseIndex.save: chunk hashes for {sorted(hashes)[:5]}.., expected 0..{num - 1}")
    return {"vectors.npy": {"dtype": self.storage.str, "shape": [self.n, self.dim], "chunk_rows": self.chunk,
                            "chunk_sha256": [hashes[c] for c in range(num)]}}

  @classmethod
  def load(cls, path: Path, ids: np.ndarray, dim: int, dtype: str, params: dict, record: dict | None, where: str,
           mesh=None, axis: str = "data", progress: bool = False, kernel: str = "auto",
           rescore_record: dict | None = None) -> "JaxExact":
    """The index saved in `path`, each chunk checked as it is read (`_checked_rows`)."""
    rows = _checked_rows(path, ids, dim, dtype, record, where)
    rescore = bool(params.get("rescore"))
    if rescore and mesh is not None:
      raise ValueError(f"{where}: the index re-ranks by float32 rows (params rescore): it loads on one device, "
                       "not over a mesh")
    rescore_rows = (_checked_rows(path, ids, dim, "float32", rescore_record, where, name="rescore.npy")
                    if rescore else None)
    backend = cls(len(ids), dim, rows, dtype=dtype, chunk=params.get("chunk"), mesh=mesh, axis=axis,
                  recall_target=params.get("recall_target"), progress=progress, kernel=kernel, rescore=rescore,
                  rescore_read=rescore_rows)
    if rescore_rows is not None:
      rescore_rows.check_rest()  # every chunk's hash before the rows are trusted
    if not backend.spans_processes:  # every chunk's hash checked, also any a build read differently
      rows.check_rest()
    return backend


class _checked_rows:  # pylint: disable=invalid-name
  """`read(sorted positions) -> float32 [m, D]` over a saved vectors.npy, checking what index.json claims: the file's
  dtype, shape and size (on open), the SHA-256 of every recorded chunk the read covers, and that every row read is
  finite and unit-norm (or zero) as `save` wrote it (the only check an index saved before hashes were recorded
  gets). Each failure is one error naming the index, the file and the ids."""

  def __init__(self, path: Path, ids: np.ndarray, dim: int, dtype: str, record: dict | None, where: str,
               name: str = "vectors.npy"):
    self.ids, self.dtype, self.where, self.n, self.name = ids, dtype, where, len(ids), name
    storage = np.dtype(np.uint16 if dtype == "bfloat16" else np.float32)
    if record is not None and (record.get("dtype") != storage.str or record.get("shape") != [self.n, dim]):
      raise files.IndexFileError(f"{where}: index.json records {name} as {record.get('dtype')} "
                                 f"{record.get('shape')} but its header fields say {storage.str} {[self.n, dim]}; "
                                 "the index is damaged: rebuild it (DenseIndex.save)")
    self.stored = files.open_npy(path / name, storage, (self.n, dim), where)
    self.block = int(record["chunk_rows"]) if record is not None else None
    self.hashes = list(record["chunk_sha256"]) if record is not None else []
    self.checked = set()
    # float32 rows are unit to ~1e-6 (`l2_normalize`), bfloat16 ones to ~4e-3; an edited row is far off either
    self.tol = 2e-2 if dtype == "bfloat16" else 1e-3

  def _names(self, positions: np.ndarray) -> str:
    shown = ", ".join(repr(str(self.ids[p])) for p in positions[:5])
    return shown + (f" ... ({positions.size} rows)" if positions.size > 5 else "")

  def _check_blocks(self, first: int, raw: np.ndarray) -> None:
    """Checks the recorded chunks that rows first .. first + len(raw) cover whole."""
    if self.block is None:
      return
    stop = first + len(raw)
    for b in range(-(-first // self.block), math.ceil(stop / self.block)):
      lo, hi = b * self.block, min((b + 1) * self.block, self.n)
      if hi > stop or b in self.checked:
        continue
      if files.sha256_rows(raw[lo - first:hi - first]) != self.hashes[b]:
        raise files.IndexFileError(
            f"{self.where}: {self.name} rows {lo}..{hi - 1} (ids {self.ids[lo]!r}..{self.ids[hi - 1]!r}) do not "
            "match the SHA-256 index.json recorded (the file changed after it was saved); the index is damaged: "
            "rebuild it (DenseIndex.save)")
      self.checked.add(b)

  def __call__(self, positions: np.ndarray) -> np.ndarray:
    positions = np.asarray(positions, np.int64)
    contiguous = positions.size and positions[-1] - positions[0] + 1 == positions.size
    raw = np.array(self.stored[positions[0]:positions[-1] + 1] if contiguous else self.stored[positions])
    if contiguous:
      self._check_blocks(int(positions[0]), raw)
    rows = raw.view(DTYPES[self.dtype]).astype(np.float32)
    sq = np.einsum("ij,ij->i", rows, rows)  # one pass: a NaN or Inf value makes its row's sum NaN or Inf
    bad = np.flatnonzero(~np.isfinite(rows[~np.isfinite(sq)]).all(axis=1))
    if bad.size:
      bad = np.flatnonzero(~np.isfinite(sq))[bad]
      raise files.IndexFileError(f"{self.where}: {self.name} rows of ids {self._names(positions[bad])} are not "
                                 "finite (NaN or Inf); the index is damaged: rebuild it (DenseIndex.save)")
    norm = np.sqrt(sq)
    bad = np.flatnonzero(~((np.abs(norm - 1) <= self.tol) | (norm == 0)))  # an overflowing sum is not unit either
    if bad.size:
      raise files.IndexFileError(f"{self.where}: {self.name} rows of ids {self._names(positions[bad])} are not unit "
                                 f"vectors (norm {norm[bad[0]]:.4g}; DenseIndex.save writes unit or zero rows); the "
                                 "index is damaged or was changed: rebuild it (DenseIndex.save)")
    return rows

  def check_rest(self) -> None:
    """Checks the recorded chunks no read covered whole (none, when the build read the saved chunks)."""
    for b in range(len(self.hashes)):
      if b not in self.checked:
        self._check_blocks(b * self.block, np.array(self.stored[b * self.block:min((b + 1) * self.block, self.n)]))


def _tie_order(scores: np.ndarray, positions: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
  """A library backend's candidates [Q, m >= k] -> the best k by (score desc, position asc); -0.0 is 0.0."""
  scores = np.where(scores == 0, np.float32(0), scores)
  order = np.lexsort((positions, -scores), axis=-1)[:, :k]
  return np.take_along_axis(scores, order, 1), np.take_along_axis(positions, order, 1)


class DenseIndex:
  """Cosine top-K over `[N, D]` embeddings with string ids, exact or approximate by backend (module docstring).

  Attributes:
    ids: str [N], sorted; corpus position p holds `ids[p]`.
    dim: D.
    dtype: "float32" | "bfloat16" (storage of the JAX backends; scores are float32 either way).
    backend: "jax" | "approx" | "faiss" | "scann".
    params: the backend's parameters as built (JSON-able; what `save` records).
    exact: whether a search is exact top-k.
    chunk: corpus rows per scan step of the JAX backends (None for the library ones).
    query_batch: queries per search step.
  """

  def __init__(self, ids: Sequence[str], embeddings: Any, dtype: str = "float32",
               chunk: int | None = None, query_batch: int = DEFAULT_QUERY_BATCH,
               backend: str = "jax", query_key: str = "text", mesh: jax.sharding.Mesh | None = None,
               axis: str = "data", params: Mapping[str, Any] | None = None, progress: bool = False,
               kernel: str = "auto"):
    """Builds the index from arrays.

    Args:
      ids: N distinct string ids.
      embeddings: [N, D] float array (any float dtype, a memory map is fine: it is read one
        chunk at a time). Rows are L2-normalised here; zero rows stay zero (they score 0).
      dtype: storage dtype of the JAX backends, "float32" or "bfloat16" (the unit vectors rounded to bfloat16).
      chunk: at most this many corpus rows per scan step; default `default_chunk(dtype)` (per platform:
        `DEFAULT_CHUNK`). The corpus is cut into ceil(N / chunk) equal chunks (multiples of 128 rows), so a corpus
        smaller than one chunk is one chunk of its own size. Small query batches take all rows in one step.
      query_batch: queries per search step.
      backend: "jax" (exact, the default), "approx" (`jax.lax.approx_max_k`), "faiss" or "scann" (optional
        extras: `vidjax.retrieval.backends`).
      query_key: the query field `retrieve` reads when given a dict batch.
      mesh, axis: split the corpus over the devices along `axis` of `mesh` (whole chunks per device, in position
        order; the last device's tail is padding); a search runs on every device at once and gives the
        single-device index's answer bit for bit. None: one device. JAX backends only.
      params: the backend's parameters ("jax": rescore, bfloat16 storage only: re-rank the bfloat16 top 2k by the
        float32 rows, read from `embeddings` at search time, so the array must not change (`JaxExact`); "approx":
        recall_target; "faiss": factory, nprobe, efSearch,
        blas_threshold, train_size; "scann": num_leaves, num_leaves_to_search, dims_per_block, aq_threshold,
        reorder, training_sample_size). None: the backend's defaults.
      progress: a progress bar while building.
      kernel: the JAX backends' search program (`KERNELS`): "auto" (the fused Pallas kernel on GPU and TPU, the XLA
        program on a CPU), "xla", or "pallas" (on a CPU in interpret mode: slow, for tests). Not saved: `load` takes
        it again.
    """
    ids = [str(i) for i in ids]
    shape = np.shape(embeddings)
    if len(shape) != 2 or shape[0] == 0 or shape[1] == 0:
      raise ValueError(f"DenseIndex embeddings must be a non-empty [N, D] array, got shape {shape}")
    if len(ids) != shape[0]:
      raise ValueError(f"DenseIndex: {len(ids)} ids for {shape[0]} embedding rows")
    if not isinstance(embeddings, np.ndarray):
      embeddings = np.asarray(embeddings)
    order = np.argsort(np.asarray(ids), kind="stable")

    def read(positions):  # sorted positions -> float32 rows of the caller's array, one block at a time
      rows = order[positions]
      by_row = np.argsort(rows, kind="stable")  # a memory-mapped input is read in file order
      out = np.empty((len(rows), shape[1]), np.float32)
      out[by_row] = embeddings[rows[by_row]]
      return out

    self._build(np.asarray(ids)[order], shape[1], read, dtype, chunk, query_batch, backend, query_key, mesh, axis,
                params, progress, kernel)

  @classmethod
  def from_store(cls, store: FeatureStore, kind: str, dtype: str = "float32", chunk: int | None = None,
                 query_batch: int = DEFAULT_QUERY_BATCH, backend: str = "jax",
                 query_key: str = "text", mesh: jax.sharding.Mesh | None = None,
                 axis: str = "data", params: Mapping[str, Any] | None = None,
                 progress: bool = False, kernel: str = "auto") -> "DenseIndex":
    """Builds the index over every id of one feature-store kind (items of shape [D]).

    Rows stream from the store's memory-mapped shards one chunk at a time (with a mesh: each device's block when
    it is placed), so only the index's own copy of the corpus is ever held. Arguments as in the constructor.
    """
    ids = store.ids(kind)
    if not ids:
      raise ValueError(f"feature store {store.root} has no {kind!r} features to index")
    item_shape = store.item_shape(kind)
    if len(item_shape) != 1:
      raise ValueError(f"DenseIndex indexes one vector per item; feature store {store.root} kind {kind!r} "
                       f"has items of shape {item_shape} (expected [D])")
    names, shard, row = store.locate(kind, ids)

    def read(positions):
      out = np.empty((len(positions), item_shape[0]), np.float32)
      for n in np.unique(shard[positions]):
        sel = np.flatnonzero(shard[positions] == n)
        rows = row[positions[sel]]
        by_row = np.argsort(rows, kind="stable")  # memory-map reads in file order
        out[sel[by_row]] = store.read_rows(kind, names[n], rows[by_row])
      return out

    index = cls.__new__(cls)
    index._build(np.asarray(ids), item_shape[0], read, dtype, chunk, query_batch, backend, query_key, mesh, axis,
                 params, progress, kernel)
    return index

  @classmethod
  def from_config(cls, ids: Sequence[str], embeddings: Any, index_config, **kwargs) -> "DenseIndex":
    """The index a config's `index` section (`vidjax.defaults.common.index_section`, checked before any work by
    `check_index`) describes: its backend, its storage dtype and its non-None params (one that does not apply to
    the backend is an error); `kwargs` as in the constructor (query_batch, mesh)."""
    backend = index_config.backend
    if backend not in BACKENDS:
      raise ValueError(f"config.index.backend={backend!r} is invalid: expected one of {BACKENDS}")
    given = {k: v for k, v in dict(index_config.params).items() if v is not None}
    return cls(ids, embeddings, dtype=index_config.dtype, backend=backend, params=given, **kwargs)

  # -- construction ------------------------------------------------------------------------------
  def _build(self, sorted_ids: np.ndarray, dim: int, read, dtype: str, chunk: int | None, query_batch: int,
             backend: str, query_key: str, mesh: jax.sharding.Mesh | None, axis: str,
             params: Mapping[str, Any] | None, progress: bool, kernel: str = "auto") -> None:
    """Fills the index from `read(sorted positions int64 [m]) -> float32 [m, D]`, one chunk at a time."""
    if backend not in BACKENDS:
      raise ValueError(f"DenseIndex backend must be one of {BACKENDS}, got {backend!r}")
    if mesh is not None and backend not in ("jax", "approx"):
      raise ValueError(f"DenseIndex: a mesh needs a JAX backend ('jax' or 'approx') and an axis of the mesh "
                       f"{mesh.axis_names}, got backend {backend!r}")
    if kernel not in KERNELS:
      raise ValueError(f"DenseIndex kernel must be one of {KERNELS}, got {kernel!r}")
    if not isinstance(query_batch, (int, np.integer)) or isinstance(query_batch, bool) or query_batch < 1:
      raise ValueError(f"DenseIndex query_batch must be a positive integer, got {query_batch!r}")
    n = len(sorted_ids)
    dup = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
    if dup.size:
      shown = ", ".join(repr(str(sorted_ids[i])) for i in dup[:5]) + (" ..." if dup.size > 5 else "")
      raise ValueError(f"DenseIndex ids must be distinct; {dup.size} repeated: {shown}")
    self.ids, self.dim, self.dtype, self.backend = sorted_ids, int(dim), dtype, backend
    self.query_batch, self.query_key = int(query_batch), query_key

    def unit_rows(positions: np.ndarray) -> np.ndarray:  # read, checked, L2-normalised float32 [m, D]
      rows = read(positions)
      bad = np.flatnonzero(~np.isfinite(rows).all(axis=1))
      if bad.size:
        raise ValueError(f"DenseIndex: the embedding of id {str(sorted_ids[positions[bad[0]]])!r} has NaN or Inf "
                         f"values ({bad.size} such rows among ids {sorted_ids[positions[0]]!r}.."
                         f"{sorted_ids[positions[-1]]!r})")
      return np.asarray(l2_normalize(rows), np.float32)

    params = dict(params or {})
    if backend in ("jax", "approx"):
      unknown = set(params) - ({"recall_target"} if backend == "approx" else {"rescore"})
      if unknown:
        raise ValueError(f"DenseIndex backend {backend!r}: unknown params {sorted(unknown)}")
      recall = float(params.get("recall_target", 0.95)) if backend == "approx" else None
      if not isinstance(params.get("rescore", False), bool):
        raise ValueError(f"DenseIndex params rescore must be True or False, got {params['rescore']!r}")
      self._backend = JaxExact(n, self.dim, unit_rows, dtype=dtype, chunk=chunk, mesh=mesh, axis=axis,
                               recall_target=recall, progress=progress, kernel=kernel,
                               rescore=params.get("rescore", False))
    else:
      from vidjax.retrieval import backends  # pylint: disable=g-import-not-at-top
      if dtype != "float32":
        raise ValueError(f"DenseIndex backend {backend!r} stores float32 (its own codes aside); got dtype {dtype!r}")
      library = backends.LIBRARY[backend]
      known = {p for p in inspect.signature(library).parameters if not p.startswith("_")} - {
          "n", "dim", "read", "chunk", "progress"}
      if set(params) - known:
        raise ValueError(f"DenseIndex backend {backend!r}: unknown params {sorted(set(params) - known)} (known: "
                         f"{sorted(known)})")
      self._backend = library(n, self.dim, unit_rows, chunk=chunk, progress=progress, **params)

  # -- properties --------------------------------------------------------------------------------
  def __len__(self) -> int:
    return len(self.ids)

  @property
  def nbytes(self) -> int:
    """Bytes the backend holds for the vectors (JAX: with the last chunk's padding; ids not counted)."""
    return int(self._backend.nbytes)

  @property
  def exact(self) -> bool:
    return bool(self._backend.exact)

  @property
  def params(self) -> dict:
    return dict(self._backend.params)

  @property
  def chunk(self) -> int | None:
    return getattr(self._backend, "chunk", None) if self.backend in ("jax", "approx") else None

  @property
  def kernel(self) -> str | None:
    """The JAX backends' search program now: "xla" or "pallas" (`KERNELS`); None for the library backends."""
    return getattr(self._backend, "kernel_used", None)

  def set_search_params(self, **params) -> "DenseIndex":
    """Changes the backend's search-time params in place, without a rebuild, and returns the index: "approx"
    recall_target, faiss nprobe / efSearch, ScaNN num_leaves_to_search (None: unchanged). `params` and
    `save` record the new values. Any other name (a build-time one, or the exact "jax" backend) is an error."""
    allowed = tuple(self._backend.SEARCH_PARAMS)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
      raise ValueError(f"DenseIndex.set_search_params: backend {self.backend!r} has no search-time params "
                       f"{unknown} (it has {list(allowed)}; the others need a rebuild)")
    self._backend.set_search_params(**params)
    return self

  @property
  def mesh(self) -> jax.sharding.Mesh | None:
    return getattr(self._backend, "mesh", None)

  def positions(self, ids: Any) -> np.ndarray:
    """Corpus positions (int64, same shape) of `ids`; one KeyError naming the unknown ones."""
    ids = np.asarray(ids).astype(str)
    pos = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
    missing = ids[self.ids[pos] != ids]
    if missing.size:
      shown = ", ".join(repr(str(m)) for m in missing[:10]) + (" ..." if missing.size > 10 else "")
      raise KeyError(f"DenseIndex has no ids {shown} ({missing.size} unknown of {ids.size})")
    return pos.astype(np.int64)

  def vectors(self, ids: Any) -> np.ndarray:
    """The stored unit vectors of `ids [...]` as float32 `[..., D]` (bfloat16 storage upcast; a compressing
    library index, e.g. faiss PQ, returns its decoded approximation)."""
    pos = self.positions(ids)
    return self._backend.vectors(pos.reshape(-1)).reshape(pos.shape + (self.dim,))

  # -- search ------------------------------------------------------------------------------------
  def _check_queries(self, queries: Any, k: int) -> np.ndarray:
    queries = np.asarray(queries)
    if queries.ndim != 2 or queries.shape[1] != self.dim:
      raise ValueError(f"DenseIndex.search: queries must be [Q, D={self.dim}], got shape {queries.shape}")
    if queries.shape[0] == 0:
      raise ValueError("DenseIndex.search: no queries (Q = 0)")
    if not np.issubdtype(queries.dtype, np.floating) and not np.issubdtype(queries.dtype, np.integer):
      raise ValueError(f"DenseIndex.search: queries must be a float array, got dtype {queries.dtype}")
    queries = np.asarray(queries, np.float32)
    if not np.isfinite(queries).all():
      bad = np.flatnonzero(~np.isfinite(queries).all(axis=1))
      raise ValueError(f"DenseIndex.search: queries {bad[:10].tolist()} have NaN or Inf values "
                       f"({bad.size} of {queries.shape[0]})")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= len(self):
      raise ValueError(f"DenseIndex.search: k must be an integer in [1, {len(self)}] (the corpus size), got {k!r}")
    return queries

  def search(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Cosine top-k (exact with the "jax" backend and faiss "Flat"; the others approximate).

    Args:
      queries: float [Q, D] (normalised here; a zero query scores 0 everywhere).
      k: 1 <= k <= N (a larger k is an error, not capped).

    Returns:
      (ids str [Q, k], scores float32 [Q, k]), best first; equal scores rank the smaller id first. An
      approximate backend may find fewer than k (e.g. faiss IVF with a small nprobe): the missing places hold the
      id "" and the score -inf.
    """
    queries = l2_normalize(self._check_queries(queries, k))
    k = int(k)
    pos = np.empty((queries.shape[0], k), np.int64)
    scores = np.empty((queries.shape[0], k), np.float32)
    for start, stop, size in query_batches(queries.shape[0], self.query_batch):
      s, p = self._backend.search(pad_rows(queries[start:stop], size), k)
      if self.backend != "jax":  # the library's and approx_max_k's order among ties is their own
        p = np.where(s > -np.inf, p, len(self))  # a missing result (-1) sorts last
        s, p = _tie_order(np.asarray(s, np.float32), np.asarray(p, np.int64), k)
      scores[start:stop], pos[start:stop] = s[:stop - start], p[:stop - start]
    found = (pos >= 0) & (pos < len(self))
    ids = np.where(found, self.ids[np.clip(pos, 0, len(self) - 1)], "")
    return ids, np.where(found, scores, -np.inf).astype(np.float32)

  def retrieve(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The `vidjax.evaluate.Retriever` protocol: `search` of an array or of `queries[query_key]`."""
    if isinstance(queries, Mapping):
      if self.query_key not in queries:
        raise KeyError(f"DenseIndex.retrieve: the query batch has no {self.query_key!r} field "
                       f"(keys {sorted(queries)}); set query_key")
      queries = queries[self.query_key]
    return self.search(queries, k)

  # -- save / load -------------------------------------------------------------------------------
  def save(self, path: str | Path) -> Path:
    """Writes the index to the directory `path` (atomically: a temporary directory `<path>.tmp` renamed into place):
    index.json (format, backend, params, dim, N, dtype and "files": each file's size and SHA-256, the vectors' one
    per chunk, all of which `load` checks), ids.npy and the backend's own files. A sharded index is written one
    device block at a time; over several processes, each writes its own blocks (call it on every process, with a
    `path` they all see) and process 0 commits.

    Files are written with plain writes (never a memory map): a full disk, or any other write error, is one OSError
    naming the index, the file and "no space left" (every process of a multi-process save raises it), and
    `<path>.tmp` is removed; a `<path>.tmp` that a killed save left is removed by the next save. The index already
    at `path`, if any, stays whole until the new one replaces it."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    where = f"DenseIndex.save({path})"
    if getattr(self._backend, "spans_processes", False):  # other processes hold some of the blocks
      return self._save_processes(path, tmp, where)
    try:
      records = self._start_save(tmp, where)
      records |= self._backend.save(tmp)
      self._commit(path, tmp, records)
    except OSError as e:
      shutil.rmtree(tmp, ignore_errors=True)
      raise _write_error(where, tmp, e) from None
    except BaseException:
      shutil.rmtree(tmp, ignore_errors=True)
      raise
    return path

  def _start_save(self, tmp: Path, where: str) -> dict:
    """A fresh `tmp` (a killed save's removed), the free space checked, ids.npy written: its record."""
    path = tmp.with_name(tmp.name[:-len(".tmp")])
    if path.exists() and not (path / "index.json").is_file() and (not path.is_dir() or any(path.iterdir())):
      raise FileExistsError(f"{where}: {path} exists and is not a saved index; refusing to replace it (save to a new "
                            "path, or remove it first)")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    ids = self.ids.astype(str)
    need = ids.nbytes + getattr(self._backend, "file_bytes", 0)
    free = shutil.disk_usage(tmp).free
    if need > free:
      raise OSError(errno.ENOSPC, f"{where}: no space left on device for the index: it needs {need:,} bytes, "
                    f"{free:,} are free under {tmp.parent}; nothing was written: free space or save elsewhere, then "
                    "save again", str(tmp))
    return {"ids.npy": files.write_npy(tmp / "ids.npy", ids)}

  def _commit(self, path: Path, tmp: Path, records: dict) -> None:
    """index.json written last into `tmp`, then `tmp` renamed to `path` (an index there is replaced whole)."""
    meta = {"format": INDEX_FORMAT, "backend": self.backend, "params": self.params, "dim": self.dim,
            "n": len(self), "dtype": self.dtype, "query_batch": self.query_batch, "query_key": self.query_key,
            "exact": self.exact, "files": records}
    files.write_bytes(tmp / "index.json", (json.dumps(meta, indent=1) + "\n").encode())
    old = path.with_name(path.name + ".old")  # an index already there stays whole until the new one is in place
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
      os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)

  def _save_processes(self, path: Path, tmp: Path, where: str) -> Path:
    """`save` over several processes: process 0 makes `tmp` and vectors.npy, every process writes its own blocks and
    their hashes into `tmp`, process 0 merges the hashes and commits. After each step the processes exchange their
    errno (0: done), so an error on any process is raised on every process (none waits forever on another's
    failure) and `tmp` is removed."""
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    me, lead = jax.process_index(), jax.process_index() == 0

    def step(name: str, fn) -> None:
      """Runs `fn` on this process, then raises on every process the error of the first process it failed on."""
      error = None
      try:
        fn()
      except OSError as e:
        error = _write_error(where, tmp, e)
      codes = np.asarray(multihost_utils.process_allgather(np.int32(
          0 if error is None else error.errno or errno.EIO))).reshape(-1)
      failed = np.flatnonzero(codes)
      if failed.size:
        if lead:
          shutil.rmtree(tmp, ignore_errors=True)
        if error is None:  # another process's: what it was writing, from its errno
          p, code = int(failed[0]), int(codes[failed[0]])
          error = _write_error(where, tmp, OSError(code, os.strerror(code), str(tmp / name)))
          error = OSError(code, f"{error.strerror} (on process {p})")
        raise error

    records, hashes = {}, {}

    def start():
      if lead:
        records.update(self._start_save(tmp, where))
        self._backend.create(tmp)

    def fill():
      hashes.update(self._backend.fill(tmp))
      files.write_bytes(tmp / f".chunks{me}.json", json.dumps(hashes).encode())

    def commit():
      if lead:
        merged = {}
        for p in range(jax.process_count()):
          merged.update({int(c): h for c, h in json.loads((tmp / f".chunks{p}.json").read_text()).items()})
          (tmp / f".chunks{p}.json").unlink()
        self._commit(path, tmp, records | self._backend.record(merged))

    step("vectors.npy", start)
    step("vectors.npy", fill)
    step("index.json", commit)
    return path

  @classmethod
  def load(cls, path: str | Path, *, backend: str | None = None, dim: int | None = None,
           mesh: jax.sharding.Mesh | None = None, axis: str = "data", progress: bool = False,
           kernel: str = "auto") -> "DenseIndex":
    """An index `save` wrote. `backend` / `dim`: what the caller expects (a mismatch is one clear error); `mesh`:
    deal a JAX index over these devices (whatever it was saved from); `kernel`: its search program (`KERNELS`).

    Every file is checked against what index.json claims before it is trusted: index.json's own fields; ids.npy's
    size and SHA-256, and that its ids are sorted and distinct; vectors.npy's dtype, shape and size, each chunk's
    SHA-256 as it is read, and that every row is finite and unit (or zero); a library backend's files' sizes and
    SHA-256. Any mismatch is one error (`files.IndexFileError`, a ValueError) naming the index and the file. An index
    saved before the hashes were recorded (format 1) gets every check but the hashes."""
    path = Path(path)
    where = f"DenseIndex.load({path})"
    if not (path / "index.json").is_file():
      old = path.with_name(path.name + ".old")
      hint = (f"; {old} holds the index an interrupted save was replacing: rename it back, or save again"
              if (old / "index.json").is_file() else "")
      raise FileNotFoundError(f"DenseIndex.load: {path} is not a saved index (no index.json){hint}")
    meta = _read_meta(path, where)
    if backend is not None and backend != meta["backend"]:
      raise ValueError(f"{where}: built with backend {meta['backend']!r}, not {backend!r}")
    if dim is not None and dim != meta["dim"]:
      raise ValueError(f"{where}: built for {meta['dim']}-d vectors, not {dim}-d")
    records = meta.get("files")  # None: format 1
    ids = files.load_npy_bytes(files.check_file(path, "ids.npy", records and records["ids.npy"], where, read=True),
                               "ids.npy", where)
    if ids.ndim != 1 or ids.dtype.kind != "U" or len(ids) != meta["n"]:
      raise files.IndexFileError(f"{where}: ids.npy holds {ids.dtype} {ids.shape}, index.json says {meta['n']} string "
                                 "ids; the index is damaged: rebuild it (DenseIndex.save)")
    unsorted = np.flatnonzero(ids[1:] <= ids[:-1])
    if unsorted.size:
      i = int(unsorted[0])
      raise files.IndexFileError(f"{where}: ids.npy is not sorted and distinct as save writes it ({ids[i]!r} before "
                                 f"{ids[i + 1]!r} at position {i}; {unsorted.size} such places): its ids would not "
                                 "match the vectors' rows; the index is damaged: rebuild it (DenseIndex.save)")
    index = cls.__new__(cls)
    index.ids = ids
    index.dim, index.dtype, index.backend = int(meta["dim"]), meta["dtype"], meta["backend"]
    index.query_batch, index.query_key = int(meta["query_batch"]), meta["query_key"]
    if index.backend in ("jax", "approx"):
      index._backend = JaxExact.load(path, ids, index.dim, index.dtype, meta["params"],
                                     records and records["vectors.npy"], where, mesh, axis, progress, kernel,
                                     records and records.get("rescore.npy"))
    else:
      if mesh is not None:
        raise ValueError(f"{where}: a mesh needs a JAX backend, the index is {index.backend!r}")
      for name, record in (records or {}).items():
        if name != "ids.npy":
          files.check_file(path, name, record, where)
      from vidjax.retrieval import backends  # pylint: disable=g-import-not-at-top
      index._backend = backends.LIBRARY[index.backend].load(path, meta["n"], index.dim, meta["params"], where)
    return index


def _write_error(where: str, tmp: Path, e: OSError) -> OSError:
  """A write error of `save` as one message naming the index and the file: "no space left" for a full disk."""
  code = e.errno if e.errno is not None else next((a for a in e.args[:1] if isinstance(a, int)), None)
  if str(e.strerror or (e.args[0] if e.args else "")).startswith(where):
    return e  # already one of ours
  file = e.filename or tmp
  if code in files.SPACE_ERRNOS:
    return OSError(code, f"{where}: no space left on device writing {file}; the save was abandoned and {tmp} removed "
                   "(an index already at the path is unchanged): free space or save elsewhere, then save again")
  return OSError(code, f"{where}: could not write {file} ({e.strerror or e}); the save was abandoned and {tmp} "
                 "removed (an index already at the path is unchanged)")


def _read_meta(path: Path, where: str) -> dict:
  """index.json, checked field by field: one error naming the index and the field."""
  def bad(problem: str) -> files.IndexFileError:
    return files.IndexFileError(f"{where}: index.json {problem}; the index is damaged or incomplete: rebuild it "
                                "(DenseIndex.save)")

  try:
    meta = vio.loads_json((path / "index.json").read_bytes().decode("utf-8"), str(path / "index.json"))
  except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError and DuplicateKeyError are ValueErrors
    raise bad(f"is not valid JSON ({e})") from None
  if not isinstance(meta, dict):
    raise bad(f"holds a JSON {type(meta).__name__}, not an object")
  if meta.get("format") not in (1, INDEX_FORMAT):
    raise ValueError(f"{where}: index format {meta.get('format')!r}, this vidjax reads 1 and {INDEX_FORMAT}")
  fields = {"backend": str, "dim": int, "n": int, "dtype": str, "params": dict, "query_batch": int, "query_key": str}
  if meta["format"] >= 2:
    fields["files"] = dict
  missing = [k for k in fields if k not in meta]
  if missing:
    raise bad(f"lacks {', '.join(map(repr, missing))}")
  for k, kind in fields.items():
    if not isinstance(meta[k], kind) or isinstance(meta[k], bool) or (kind is int and meta[k] < 1):
      raise bad(f"field {k!r} is {str(meta[k])[:80]!r}, expected {'a positive integer' if kind is int else kind.__name__}")
  if meta["backend"] not in BACKENDS:
    raise bad(f"names backend {meta['backend']!r}, which this vidjax does not have (it has {', '.join(BACKENDS)})")
  if meta["dtype"] not in DTYPES or (meta["backend"] not in ("jax", "approx") and meta["dtype"] != "float32"):
    raise bad(f"names storage dtype {meta['dtype']!r} for backend {meta['backend']!r}")
  params = meta["params"]
  if meta["backend"] in ("jax", "approx"):
    known = {"chunk"} | ({"recall_target"} if meta["backend"] == "approx" else {"rescore"})
    chunk = params.get("chunk")
    if (set(params) - known or not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1
        or not isinstance(params.get("rescore", False), bool)):
      raise bad(f"params {params} are not those of backend {meta['backend']!r} (a positive integer chunk"
                + (", recall_target)" if meta["backend"] == "approx" else ", rescore true or false)"))
  else:
    from vidjax.retrieval import backends  # pylint: disable=g-import-not-at-top
    known = {p for p in inspect.signature(backends.LIBRARY[meta["backend"]]).parameters if not p.startswith("_")} - {
        "n", "dim", "read", "chunk", "progress"}
    if set(params) - known:
      raise bad(f"params {sorted(set(params) - known)} are not params of backend {meta['backend']!r}")
  records = meta.get("files")
  if records is not None:
    def whole(r):
      return (isinstance(r, dict) and isinstance(r.get("bytes"), int) and isinstance(r.get("sha256"), str))

    if not whole(records.get("ids.npy")):
      raise bad("lacks the size and SHA-256 of ids.npy (\"files\")")
    if meta["backend"] in ("jax", "approx"):
      r = records.get("vectors.npy")
      rows = r.get("chunk_rows") if isinstance(r, dict) else None
      if (not isinstance(rows, int) or isinstance(rows, bool) or rows < 1 or not isinstance(r.get("chunk_sha256"), list)
          or len(r["chunk_sha256"]) != math.ceil(meta["n"] / rows)):
        raise bad("lacks the chunk hashes of vectors.npy (\"files\")")
      if meta["params"].get("rescore"):
        r = records.get("rescore.npy")
        rows = r.get("chunk_rows") if isinstance(r, dict) else None
        if (not isinstance(rows, int) or isinstance(rows, bool) or rows < 1
            or not isinstance(r.get("chunk_sha256"), list) or len(r["chunk_sha256"]) != math.ceil(meta["n"] / rows)):
          raise bad("lacks the chunk hashes of rescore.npy (\"files\"), which params rescore needs")
    elif not all(whole(r) for r in records.values()) or not all(
        whole(records.get(f)) for f in {"faiss": ["faiss.index"], "scann": ["vectors.npy"]}[meta["backend"]]):
      raise bad("records a file without its size and SHA-256, or lacks the backend's files (\"files\")")
  return meta
