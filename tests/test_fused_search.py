"""The fused score + block-max search (`vidjax.retrieval.fused`) against NumPy and the XLA search, on CPU in Pallas
interpret mode.

On a GPU or TPU the same tests run the real kernel (its float32 candidate pass is TF32 there, `fused.PRECISION`; the
re-scoring is float32). Tolerances: the kernel's block maxima are float32 sums of 16 products of unit vectors (float32
rows; bfloat16 rows with the query rounded to bfloat16, as the kernel takes them), within 1e-6 of NumPy's float64
products of the same values. The fused search returns the ids the XLA search returns (no two scores here are closer
than their float32 rounding, except exact ties, which both rank by id), and scores within 1e-6 of it (float32 rounding
of 16 products: the re-scoring's summation order is its own).

Sizes: D = 16, one corpus of 3,000 rows in chunks of 1,024 (3 chunks, the last ragged), blocks of 16 rows, tiles of
256 rows (the CPU's), query batches of 8: every test shares a few compiled programs.
"""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

from vidjax.ops import l2_normalize
from vidjax.retrieval import DenseIndex, dense, fused

pytestmark = pytest.mark.highest_precision

D, N, CHUNK, QB, K, BLOCK = 16, 3000, 1024, 8, 5, 16
TOL = 1e-6


@pytest.fixture(autouse=True)
def _block_16(monkeypatch):
  monkeypatch.setitem(dense.FUSED_BLOCK, dense.platform_of(), BLOCK)


def _corpus(seed, n=N):
  rng = np.random.default_rng(seed)
  ids = [f"v{i:05d}" for i in rng.permutation(n)]
  return ids, rng.normal(size=(n, D)).astype(np.float32), rng.normal(size=(19, D)).astype(np.float32)


def _pair(ids, x, dtype, **kw):
  """The same corpus searched by the fused kernel (interpret mode) and by the XLA program."""
  return (DenseIndex(ids, x, dtype=dtype, chunk=CHUNK, query_batch=QB, kernel="pallas", **kw),
          DenseIndex(ids, x, dtype=dtype, chunk=CHUNK, query_batch=QB, kernel="xla", **kw))


@pytest.mark.parametrize("dtype,tile_d", [("float32", None), ("bfloat16", None), ("float32", 8)])
def test_block_maxima_equal_numpy(dtype, tile_d):
  """All D at once, and D in an inner loop of 8 columns at a time (the GPU's staging)."""
  rng = np.random.default_rng(0)
  rows = l2_normalize(rng.normal(size=(1024, D)).astype(np.float32)).astype(dense.DTYPES[dtype])
  q = l2_normalize(rng.normal(size=(8, D)).astype(np.float32)).astype(dense.DTYPES[dtype])
  got = fused.block_maxima(jnp.asarray(q), jnp.asarray(rows), block=BLOCK, tile_rows=256, tile_queries=8,
                           tile_d=tile_d, interpret=True)
  want = fused.numpy_block_maxima(q.astype(np.float32), rows.astype(np.float32), BLOCK)
  assert got.shape == (8, 1024 // BLOCK) and got.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(got), want, atol=TOL, rtol=0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_search_equals_the_exact_search(dtype):
  ids, x, queries = _corpus(1)
  pallas, xla = _pair(ids, x, dtype)
  assert pallas._backend._stored.shape == (3, CHUNK, D)  # 3,072 rows: 72 of padding in the last chunk
  plan = pallas._backend.fused_plan(QB, K)
  cpu = dense.platform_of() == "cpu"  # interpret mode; on a GPU or TPU the real kernel runs
  assert plan is not None and (plan.block, plan.interpret) == (BLOCK, cpu) and plan.tile_rows % BLOCK == 0
  assert pallas.kernel == "pallas" and xla.kernel == "xla"
  for k in (1, K):
    got_ids, got_s = pallas.search(queries, k)
    want_ids, want_s = xla.search(queries, k)
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_allclose(got_s, want_s, atol=TOL, rtol=0)
  # and NumPy's float64 top-k of the stored rows (bfloat16 rows upcast; the query rounded as the platform does)
  corpus = l2_normalize(x[np.argsort(ids)]).astype(dense.DTYPES[dtype]).astype(np.float64)
  q = l2_normalize(queries)
  if dtype == "bfloat16" and dense.bf16_queries_rounded():
    q = q.astype(dense.DTYPES["bfloat16"])
  s = q.astype(np.float64) @ corpus.T
  top = np.argsort(-s, axis=1, kind="stable")[:, :K]
  np.testing.assert_array_equal(got_ids, np.sort(ids)[top])
  np.testing.assert_allclose(got_s, np.take_along_axis(s, top, 1), atol=TOL, rtol=0)


def test_ties_rank_the_smaller_id_first():
  """Rows of four +-1 entries: every cosine is a multiple of 1/4 (exact in any order), many tie across blocks; the
  fused search ranks them by id as the XLA search does."""
  rng = np.random.default_rng(7)
  x = np.zeros((N, D), np.float32)
  for row in x:
    row[rng.choice(D, 4, replace=False)] = rng.choice([-1.0, 1.0], 4)
  ids = [f"v{i:05d}" for i in rng.permutation(N)]
  queries = np.concatenate([x[:3], x[1500:1505]])
  pallas, xla = _pair(ids, x, "bfloat16")  # +-0.5 is exact in bfloat16
  for k in (1, K, 40):
    got, want = pallas.search(queries, k), xla.search(queries, k)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_a_large_k_or_a_tiny_corpus_takes_the_xla_program():
  ids, x, queries = _corpus(2)
  pallas, xla = _pair(ids, x, "float32")
  assert pallas._backend.fused_plan(QB, 100) is None  # 208 candidate blocks x 16 rows > a quarter of 3,072 rows
  np.testing.assert_array_equal(pallas.search(queries, 100)[0], xla.search(queries, 100)[0])
  small = DenseIndex(ids[:100], x[:100], chunk=CHUNK, query_batch=QB, kernel="pallas")
  assert small._backend.fused_plan(QB, K) is None


def test_fused_search_inside_a_mesh():
  """The sharded program runs the kernel on each device's rows (a one-device mesh here; the 8-device equality of
  the sharded index is test_dense_index's, with the XLA program)."""
  ids, x, queries = _corpus(3)
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
  pallas, xla = _pair(ids, x, "float32", mesh=mesh)
  got, want = pallas.search(queries, K), xla.search(queries, K)
  np.testing.assert_array_equal(got[0], want[0])
  np.testing.assert_allclose(got[1], want[1], atol=TOL, rtol=0)


def test_a_failing_default_kernel_falls_back_to_xla(monkeypatch):
  """kernel="auto" whose kernel cannot run here (a device without the lowering): one warning, then the XLA program;
  asked for by name, the error is raised."""
  ids, x, queries = _corpus(4)
  index = DenseIndex(ids, x, chunk=CHUNK, query_batch=QB, kernel="auto")
  want = index.search(queries, 3)  # a k no other test compiles, so the patched kernel is traced
  index._backend.kernel_used = "pallas"  # as on a GPU

  def broken(*args, **kwargs):
    raise NotImplementedError("no lowering for this platform")

  monkeypatch.setattr(fused, "search", broken)
  with pytest.warns(UserWarning, match="fused Pallas search failed"):
    got = index.search(queries, 3)
  np.testing.assert_array_equal(got[0], want[0])
  assert index.kernel == "xla"
  named = DenseIndex(ids, x, chunk=CHUNK, query_batch=QB, kernel="pallas")
  with pytest.raises(NotImplementedError):
    named.search(queries, 3)
  with pytest.raises(ValueError, match="kernel must be one of"):
    DenseIndex(ids, x, kernel="triton")


def test_bfloat16_scan_holds_no_float32_copy_of_the_corpus():
  """The regression of issue 63: scanning bfloat16 chunks, XLA:CPU converted the whole stored block to float32 before
  the loop (a float32 copy of the corpus per search). The chunks are scanned as uint16 bits instead."""
  block = jnp.zeros((3, CHUNK, D), jnp.bfloat16)
  q = jnp.zeros((QB, D), jnp.float32)
  hlo = dense._search.lower(q, block, np.int32(N), k=K, whole=False, bf16_scoring="upcast").compile().as_text()
  assert f"f32[3,{CHUNK},{D}]" not in hlo
  assert "while" in hlo


def test_approx_max_k_only_on_a_tpu():
  """On CPU and GPU `approx_max_k` is an exact sort of every score: the "approx" backend runs the exact program
  there (same answer, cheaper); its recall_target is recorded and used on a TPU."""
  ids, x, queries = _corpus(5, n=500)
  approx = DenseIndex(ids, x, chunk=CHUNK, query_batch=QB, backend="approx", params={"recall_target": 0.5})
  assert approx._backend.recall_target_used is None and approx.params["recall_target"] == 0.5
  exact = DenseIndex(ids, x, chunk=CHUNK, query_batch=QB)
  np.testing.assert_array_equal(approx.search(queries, K)[0], exact.search(queries, K)[0])
  approx._backend.platform = "tpu"
  assert approx._backend.recall_target_used == 0.5


# ----------------------------------------------------------------------------- bfloat16 re-ranked by float32 rows


def _rescore_reference(ids, x, queries, k):
  """The bfloat16 index's top 2k (float64 scores of the bfloat16 rows, ties by id) re-ranked by float64 scores of
  the float32 rows: ids [Q, k], scores [Q, k]."""
  order = np.argsort(ids)
  sorted_ids, rows = np.asarray(ids)[order], l2_normalize(x[order]).astype(np.float64)
  q = l2_normalize(queries).astype(np.float64)
  q_bf = q.astype(np.float32).astype(dense.DTYPES["bfloat16"]) if dense.bf16_queries_rounded() else q
  bf = q_bf.astype(np.float64) @ rows.astype(np.float32).astype(dense.DTYPES["bfloat16"]).astype(np.float64).T
  cand = np.lexsort((np.broadcast_to(np.arange(len(ids)), bf.shape), -bf), axis=-1)[:, :dense.RESCORE_FACTOR * k]
  exact = np.einsum("qd,qcd->qc", q, rows[cand])
  pick = np.lexsort((cand, -exact), axis=-1)[:, :k]
  return sorted_ids[np.take_along_axis(cand, pick, 1)], np.take_along_axis(exact, pick, 1)


@pytest.mark.parametrize("kernel", ["xla", "pallas"])
def test_bfloat16_rescored_by_float32_rows(kernel, tmp_path):
  ids, x, queries = _corpus(6)
  index = DenseIndex(ids, x, dtype="bfloat16", chunk=CHUNK, query_batch=QB, kernel=kernel, params={"rescore": True})
  assert index.params == {"chunk": CHUNK, "rescore": True} and index.nbytes == 3 * CHUNK * D * 2
  got_ids, got_s = index.search(queries, K)
  want_ids, want_s = _rescore_reference(ids, x, queries, K)
  np.testing.assert_array_equal(got_ids, want_ids)
  np.testing.assert_allclose(got_s, want_s, atol=TOL, rtol=0)
  # here every float32 top-5 lies in the bfloat16 top 10: the float32 index's answer
  f32_ids, f32_s = DenseIndex(ids, x, chunk=CHUNK, query_batch=QB, kernel="xla").search(queries, K)
  np.testing.assert_array_equal(got_ids, f32_ids)
  np.testing.assert_allclose(got_s, f32_s, atol=TOL, rtol=0)
  index.save(tmp_path / "index")  # the float32 rows travel as rescore.npy, checked on load
  loaded = DenseIndex.load(tmp_path / "index", kernel=kernel)
  assert loaded.params == index.params
  np.testing.assert_array_equal(loaded.search(queries, K)[0], got_ids)
  np.testing.assert_array_equal(loaded.search(queries, K)[1], got_s)


def test_rescore_errors(tmp_path):
  ids, x, queries = _corpus(7, n=500)
  with pytest.raises(ValueError, match="needs backend 'jax', dtype 'bfloat16'"):
    DenseIndex(ids, x, params={"rescore": True})
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
  with pytest.raises(ValueError, match="no mesh"):
    DenseIndex(ids, x, dtype="bfloat16", mesh=mesh, params={"rescore": True})
  with pytest.raises(ValueError, match="rescore must be True or False"):
    DenseIndex(ids, x, dtype="bfloat16", params={"rescore": "yes"})
  index = DenseIndex(ids, x, dtype="bfloat16", chunk=128, params={"rescore": True})
  index.save(tmp_path / "index")
  with pytest.raises(ValueError, match="not over a mesh"):
    DenseIndex.load(tmp_path / "index", mesh=mesh)
  data = bytearray((tmp_path / "index" / "rescore.npy").read_bytes())
  data[-8] ^= 1  # one bit of the last row
  (tmp_path / "index" / "rescore.npy").write_bytes(bytes(data))
  with pytest.raises(ValueError, match="rescore.npy rows .* do not match the SHA-256"):
    DenseIndex.load(tmp_path / "index")


@pytest.mark.parametrize("platform,target,call", [("gpu", "cuda", "__gpu$xla.gpu.triton"),
                                                  ("tpu", "tpu", "tpu_custom_call")])
def test_the_kernel_lowers_for_gpu_and_tpu(platform, target, call):
  """No accelerator in CI: the fused search is lowered for CUDA (Pallas -> Triton) and TPU (Pallas -> Mosaic) here,
  with the platform's own tiles, so a kernel the lowering rejects fails on a CPU (compiling the Triton / Mosaic IR
  needs the device)."""
  rows = 1 << 14
  for dtype in (jnp.bfloat16, jnp.float32):
    for qb in (1, 256):
      plan = fused.plan(platform, rows, qb, 10)
      assert plan is not None and not plan.interpret
      program = jax.jit(lambda q, x, p=plan: fused.search(q, x, jnp.int32(0), jnp.int32(rows - 3), k=10,
                                                          **p._asdict()))
      exported = jax.export.export(program, platforms=[target],
                                   disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(call)])(
          jax.ShapeDtypeStruct((qb, 256), jnp.float32), jax.ShapeDtypeStruct((rows, 256), dtype))
      assert call in exported.mlir_module()
