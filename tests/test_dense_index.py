"""Tests for vidjax/retrieval: DenseIndex against a brute-force NumPy top-K, and the TwoStage pipeline.

Every index here uses D=16, chunk=128 (40 rows: one chunk; 300 rows: three, the last ragged) and
query_batch=8 (queries run as batches of 8 and a padded 4), so the jitted chunk step compiles for
a handful of shapes shared by all tests. faiss is an
optional extra of the library and part of the test extra (`pip install -e ".[test]"` installs faiss-cpu, so CI runs
`test_faiss_backend_matches_dense`); without it that test skips with the reason reported, and the NumPy comparisons
cover the index fully.
"""
import sys

import jax
import ml_collections
import ml_dtypes
import numpy as np
import pytest

from vidjax import evaluate
from vidjax.data.features import FeatureStore, write_arrays
from vidjax.ops import l2_normalize
from vidjax.retrieval import DenseIndex, TwoStage, TwoStageResult
from vidjax.retrieval import dense
from vidjax.retrieval.dense import query_batches

pytestmark = pytest.mark.highest_precision  # every search is compared with NumPy (SCORE_TOL below)

D, CHUNK, QB, K = 16, 128, 8, 5


def _ids(n, rng):
  """n distinct ids in a random order (so sorting by id permutes the rows)."""
  return [f"vid{i:05d}" for i in rng.permutation(n)]


def _index(ids, x, dtype="float32", **kw):
  return DenseIndex(ids, x, dtype=dtype, chunk=CHUNK, query_batch=QB, **kw)


# The precision each comparison with NumPy needs, on every platform: float32 storage is scored at HIGHEST precision
# (never TF32), so its float32 sums of 16 products are within 1e-6 of the float64 reference; bfloat16 storage is
# scored with the query rounded to bfloat16 on accelerators (`dense.bf16_queries_rounded`: the reference rounds it the
# same way, every product is then exact) and exactly on a CPU, and then the same 1e-6 holds.
SCORE_TOL = 1e-6


def brute_force(ids, x, queries, k, dtype="float32", full=False):
  """Top-k by (cosine desc, id asc) over the full float64 score matrix of the stored vectors, scored as the index
  scores them on this platform (`dense.bf16_queries_rounded`); with `full`, also that [Q, N] matrix and the sorted
  ids."""
  order = np.argsort(np.asarray(ids))
  sorted_ids = np.asarray(ids)[order]
  corpus = l2_normalize(np.asarray(x, np.float32)[order])
  q = l2_normalize(np.asarray(queries, np.float32))
  if dtype == "bfloat16":
    corpus = corpus.astype(ml_dtypes.bfloat16).astype(np.float32)
    if dense.bf16_queries_rounded():
      q = q.astype(ml_dtypes.bfloat16).astype(np.float32)
  s = q.astype(np.float64) @ corpus.astype(np.float64).T
  top = np.lexsort((np.broadcast_to(np.arange(len(ids)), s.shape), -s), axis=-1)[:, :k]
  out = sorted_ids[top], np.take_along_axis(s, top, 1)
  return out + (s, sorted_ids) if full else out


def assert_top_k(got_ids, got_s, ids, x, queries, k, dtype="float32", tol=SCORE_TOL):
  """`(got_ids, got_s)` is the top-k of brute force up to `tol`: rank by rank, the float64 score of the id returned
  is within `tol` of the reference's score at that rank (so only scores closer than `tol` may change places), ids are
  distinct, and the returned scores are within `tol` of the reference's."""
  want_ids, want_s, full, sorted_ids = brute_force(ids, x, queries, k, dtype, full=True)
  assert got_ids.shape == want_ids.shape and got_s.dtype == np.float32
  true_s = np.take_along_axis(full, np.searchsorted(sorted_ids, got_ids), 1)
  np.testing.assert_allclose(true_s, want_s, atol=tol, rtol=0)
  np.testing.assert_allclose(got_s, want_s, atol=tol, rtol=0)
  assert all(len(set(row)) == k for row in got_ids)


@pytest.fixture(params=["one step", "scan"])
def plan(request, monkeypatch):
  """Both shapes of a search program (`dense._plan`), whatever this platform's budget picks for these tiny sizes:
  one step over all rows, or a `lax.scan` over the chunks."""
  monkeypatch.setitem(dense.SCORE_BUDGET, dense.platform_of(), 1 << 60 if request.param == "one step" else 0)
  return request.param


def tie_vectors(n, rng):
  """Rows with four entries +-1 (norm 2, so unit rows are +-0.5 and 0): every cosine between two
  such rows is a multiple of 1/4, exact in any summation order; many scores tie exactly, and
  some rows repeat."""
  x = np.zeros((n, D), np.float32)
  for row in x:
    row[rng.choice(D, 4, replace=False)] = rng.choice([-1.0, 1.0], 4)
  x[n // 2:n // 2 + 10] = x[0]  # exact duplicates
  return x


# ----------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", [40, 300])  # one chunk (padded); several chunks with a ragged last one
def test_random_data_matches_brute_force(n, dtype, plan):
  rng = np.random.default_rng(n)
  ids, x = _ids(n, rng), rng.normal(size=(n, D)).astype(np.float32)
  queries = rng.normal(size=(19, D)).astype(np.float32)  # batches of 8, 8 and a padded 3
  index = _index(ids, x, dtype)
  # 40 rows: one chunk of 128 (88 padding rows); 300: three chunks of 128 (the last holds 44 rows), stored as one
  # [chunks, 128, D] array.
  assert (index.chunk, index._backend._stored.shape, len(index)) == (128, (1 if n == 40 else 3, CHUNK, D), n)
  got_ids, got_s = index.search(queries, K)
  assert got_ids.shape == (19, K) and got_ids.dtype.kind == "U" and got_s.dtype == np.float32
  assert_top_k(got_ids, got_s, ids, x, queries, K, dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_exact_ties_rank_the_smaller_id_first(dtype, plan):
  rng = np.random.default_rng(7)
  n = 200
  ids, x = _ids(n, rng), tie_vectors(n, rng)
  queries = np.concatenate([x[:1], x[n // 2 + 3:n // 2 + 4], tie_vectors(17, rng)])  # 19 queries
  index = _index(ids, x, dtype)  # +-0.5 is exact in bfloat16 too
  got_ids, got_s = index.search(queries, K)
  want_ids, want_s = brute_force(ids, x, queries, K)
  np.testing.assert_array_equal(got_ids, want_ids)
  np.testing.assert_array_equal(got_s, want_s.astype(np.float32))
  # The 11 copies of row 0 all score exactly 1 for the first query: the 5 smallest of their ids.
  copies = sorted(np.asarray(ids)[[0, *range(n // 2, n // 2 + 10)]])
  assert list(got_ids[0]) == copies[:K] and np.all(got_s[0] == 1.0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_single_queries_agree_with_a_full_batch(dtype, monkeypatch):
  # A batch of 1 in one step over all rows answers what the batch of 8 does chunk by chunk (on a CPU, bfloat16: with
  # the other scoring, `dense._plan`); tie vectors score exactly (multiples of 1/4) in any precision.
  rng = np.random.default_rng(11)
  n = 300
  monkeypatch.setitem(dense.SCORE_BUDGET, dense.platform_of(), n)  # 1 x 300 fits, 8 x 300 does not
  ids, x = _ids(n, rng), tie_vectors(n, rng)
  queries = np.concatenate([x[:1], tie_vectors(7, rng)])  # 8 queries: one jitted batch
  index = _index(ids, x, dtype)
  batched = index.search(queries, K)
  singles = [index.search(q[None], K) for q in queries]
  np.testing.assert_array_equal(np.concatenate([i for i, _ in singles]), batched[0])
  np.testing.assert_array_equal(np.concatenate([sc for _, sc in singles]), batched[1])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cpu_chunk_programs_share_the_stored_buffer_and_equal_the_one_program(dtype, plan, monkeypatch):
  """A single-device CPU index searches one program per chunk on views of its stored array (no copy: the same
  memory); the one-program plans (`_search`: one step, or a scan over the bits of bfloat16 chunks) give the same ids
  and scores."""
  rng = np.random.default_rng(41)
  ids, x = _ids(300, rng), rng.normal(size=(300, D)).astype(np.float32)
  queries = rng.normal(size=(19, D)).astype(np.float32)
  index = _index(ids, x, dtype)
  backend = index._backend
  if dense.platform_of() != "cpu":
    assert backend._chunk_views is None
    return
  stored = np.asarray(backend._stored)
  assert [v.unsafe_buffer_pointer() for v in backend._chunk_views] == [stored[j].ctypes.data for j in range(3)]
  monkeypatch.setattr(dense, "VIEWS_MIN_ROWS", 0)  # small batches too (the "one step" plan)
  views = index.search(queries, K)
  backend._chunk_views = None
  program = index.search(queries, K)
  np.testing.assert_array_equal(views[0], program[0])
  np.testing.assert_allclose(views[1], program[1], atol=SCORE_TOL, rtol=0)


def test_full_ranking_with_k_larger_than_a_chunk(plan):
  rng = np.random.default_rng(8)
  n = 200
  ids, x = _ids(n, rng), tie_vectors(n, rng)
  queries = tie_vectors(3, rng)  # one padded batch of 4
  got_ids, got_s = _index(ids, x).search(queries, n)  # k = N > chunk: every row, in order
  want_ids, want_s = brute_force(ids, x, queries, n)
  np.testing.assert_array_equal(got_ids, want_ids)
  np.testing.assert_array_equal(got_s, want_s.astype(np.float32))


def test_zero_vectors_score_zero_and_tie_by_id(plan):
  rng = np.random.default_rng(9)
  ids, x = _ids(40, rng), rng.normal(size=(40, D)).astype(np.float32)
  x[5] = 0.0
  queries = np.zeros((3, D), np.float32)  # zero queries: every score is 0, so the order is the ids'
  got_ids, got_s = _index(ids, x).search(queries, K)
  assert np.all(got_s == 0) and np.all(got_ids == np.asarray(sorted(ids)[:K]))
  queries = -x[:3]  # the zero row (score 0) sits in the middle of every ranking
  got_ids, got_s = _index(ids, x).search(queries, 40)
  want_ids, want_s = brute_force(ids, x, queries, 40)
  np.testing.assert_array_equal(got_ids, want_ids)
  np.testing.assert_allclose(got_s, want_s, atol=1e-6, rtol=0)


@pytest.mark.parametrize("k,c", [(1, 4096), (3, 4096), (8, 4096), (7, 16384)])
def test_two_level_top_k_equals_lax_top_k_with_ties(k, c):
  # Long enough rows for the block path (blocks of 32 and of 64 positions). Scores from 3 values:
  # most blocks tie on their maximum, and most rows on their k-th value.
  assert c > dense._FULL_TOP_K
  scores = np.random.default_rng(k).integers(0, 3, size=(4, c)).astype(np.float32)
  scores[1] = 0.0
  scores[2, c - 28:] = -np.inf  # padding
  scores[3, :c - 16] = 0.0
  got = jax.jit(dense._top_k_by_blocks, static_argnums=1)(scores, k)
  want = jax.lax.top_k(scores, k)
  np.testing.assert_array_equal(got[0], want[0])
  np.testing.assert_array_equal(got[1], want[1])
  np.testing.assert_array_equal(want[1], np.argsort(-scores, axis=1, kind="stable")[:, :k])


def test_query_batches_cover_every_row_with_bounded_shapes():
  assert list(query_batches(19, 8)) == [(0, 8, 8), (8, 16, 8), (16, 19, 4)]
  assert list(query_batches(1, 256)) == [(0, 1, 1)]
  assert list(query_batches(300, 256)) == [(0, 256, 256), (256, 300, 64)]
  assert {size for n in range(1, 600) for _, _, size in query_batches(n, 256)} == {1, 2, 4, 8, 16, 32, 64, 128, 256}


def test_vectors_retrieve_and_evaluate_ranked():
  rng = np.random.default_rng(10)
  ids, x = _ids(40, rng), rng.normal(size=(40, D)).astype(np.float32)
  index = _index(ids, x)
  pick = [ids[3], ids[0]]
  np.testing.assert_allclose(index.vectors(pick), l2_normalize(x[[3, 0]]), atol=1e-7)
  assert index.vectors(np.asarray([pick, pick])).shape == (2, 2, D)
  assert index.nbytes == CHUNK * D * 4
  with pytest.raises(KeyError, match="nope"):
    index.vectors(["nope", ids[1]])
  # The evaluate.Retriever protocol: a dict batch, read through query_key.
  queries = x[:8] + 0.01 * rng.normal(size=(8, D)).astype(np.float32)
  got_ids, _ = index.retrieve({"text": queries}, K)
  np.testing.assert_array_equal(got_ids, index.search(queries, K)[0])
  assert np.all(got_ids[:, 0] == np.asarray(ids[:8]))
  got = evaluate.evaluate_ranked(index, {"text": queries}, np.asarray(ids[:8]), k=K, ks=(1,), chunk=QB)
  assert got == {"r1": 100.0}
  with pytest.raises(KeyError, match="query_key"):
    index.retrieve({"video": queries}, K)


# ----------------------------------------------------------------------------- feature store


def test_from_store_equals_from_arrays(tmp_path):
  rng = np.random.default_rng(11)
  n = 200
  ids, x = _ids(n, rng), rng.normal(size=(n, D)).astype(np.float32)
  # Two shards whose ids interleave in sorted order, written as float32.
  store = write_arrays(tmp_path / "store", {"clip": (ids[:120], x[:120])})
  with store.writer("clip", shard_prefix="p1") as w:
    for i, row in zip(ids[120:], x[120:]):
      w.add(i, row)
  store = FeatureStore(tmp_path / "store")
  queries = rng.normal(size=(19, D)).astype(np.float32)
  for dtype in ("float32", "bfloat16"):
    from_store = DenseIndex.from_store(store, "clip", dtype=dtype, chunk=CHUNK, query_batch=QB)
    want_ids, want_s = _index(ids, x, dtype).search(queries, K)
    got_ids, got_s = from_store.search(queries, K)
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_array_equal(got_s, want_s)  # the same stored rows and the same program: bit for bit
    assert_top_k(got_ids, got_s, ids, x, queries, K, dtype)


def test_from_store_errors(tmp_path):
  rng = np.random.default_rng(12)
  store = write_arrays(tmp_path / "store", {"tokens": (["a", "b"], rng.normal(size=(2, 3, D)))})
  with pytest.raises(ValueError, match=r"shape \(3, 16\)"):
    DenseIndex.from_store(store, "tokens")
  with pytest.raises(ValueError, match="no 'clip' features"):
    DenseIndex.from_store(store, "clip")
  bad = rng.normal(size=(3, D)).astype(np.float32)
  bad[1, 4] = np.nan
  with pytest.raises(ValueError, match="kind 'clip': 1 of 1 items hold NaN or Inf: 'b'"):  # the store refuses it
    write_arrays(tmp_path / "nan", {"clip": (["a", "b", "c"], bad)})
  with pytest.raises(ValueError, match="id 'b' has NaN"):  # and so does an index built from arrays
    DenseIndex(["a", "b", "c"], bad, chunk=CHUNK)


# ----------------------------------------------------------------------------- errors


def test_errors_are_clear():
  rng = np.random.default_rng(13)
  ids, x = _ids(40, rng), rng.normal(size=(40, D)).astype(np.float32)
  index = _index(ids, x)
  q = rng.normal(size=(3, D)).astype(np.float32)
  with pytest.raises(ValueError, match=r"k must be an integer in \[1, 40\]"):
    index.search(q, 41)
  with pytest.raises(ValueError, match="k must be"):
    index.search(q, 0)
  with pytest.raises(ValueError, match=r"no queries \(Q = 0\)"):
    index.search(np.zeros((0, D)), K)
  with pytest.raises(ValueError, match=r"queries must be \[Q, D=16\], got shape \(3, 15\)"):
    index.search(q[:, :15], K)
  with pytest.raises(ValueError, match=r"queries must be \[Q, D=16\], got shape \(16,\)"):
    index.search(q[0], K)
  q[2, 0] = np.inf
  with pytest.raises(ValueError, match=r"queries \[2\] have NaN or Inf"):
    index.search(q, K)
  x_bad = x.copy()
  x_bad[7, 3] = np.nan
  with pytest.raises(ValueError, match=f"id '{ids[7]}' has NaN or Inf"):
    _index(ids, x_bad)
  with pytest.raises(ValueError, match=f"ids must be distinct; 1 repeated: '{ids[0]}'"):
    _index([ids[0]] + ids[1:39] + [ids[0]], x)
  with pytest.raises(ValueError, match="39 ids for 40 embedding rows"):
    _index(ids[:39], x)
  with pytest.raises(ValueError, match="non-empty"):
    _index([], np.zeros((0, D)))
  with pytest.raises(ValueError, match="dtype must be one of"):
    _index(ids, x, "float16")
  with pytest.raises(ValueError, match="backend must be one of"):
    _index(ids, x, backend="annoy")
  with pytest.raises(ValueError, match="chunk must be a positive integer"):
    DenseIndex(ids, x, chunk=0)


def test_faiss_backend_missing_names_the_extra(monkeypatch):
  monkeypatch.setitem(sys.modules, "faiss", None)  # makes `import faiss` raise ImportError
  rng = np.random.default_rng(14)
  with pytest.raises(ImportError, match=r"pip install vidjax\[faiss\]"):
    _index(_ids(40, rng), rng.normal(size=(40, D)), backend="faiss")


def test_faiss_backend_matches_dense():
  pytest.importorskip("faiss", reason="faiss-cpu is an optional extra (pip install vidjax[faiss]); "
                                      "the NumPy brute-force tests cover DenseIndex without it")
  rng = np.random.default_rng(15)
  n = 200
  ids, x = _ids(n, rng), tie_vectors(n, rng)
  queries = np.concatenate([x[:1], tie_vectors(18, rng)])
  flat = _index(ids, x, backend="faiss")
  want_ids, want_s = _index(ids, x).search(queries, K)
  got_ids, got_s = flat.search(queries, K)
  np.testing.assert_array_equal(got_ids, want_ids)  # including the order of exact ties
  np.testing.assert_array_equal(got_s, want_s)
  np.testing.assert_array_equal(flat.vectors(ids[:3]), _index(ids, x).vectors(ids[:3]))
  rx = rng.normal(size=(n, D)).astype(np.float32)
  np.testing.assert_array_equal(_index(ids, rx, backend="faiss").search(queries, K)[0],
                                brute_force(ids, rx, queries, K)[0])


def _clustered(n, rng, d=32, centres=20):
  """Unit vectors around `centres` directions: the data on which approximate search works."""
  c = rng.normal(size=(centres, d))
  return (c[rng.integers(0, centres, n)] + 0.3 * rng.normal(size=(n, d))).astype(np.float32)


@pytest.mark.parametrize("backend,params,min_recall", [
    ("approx", {"recall_target": 0.9}, 0.99),  # on CPU approx_max_k is an exact sort
    ("faiss", {"factory": "IVF16,Flat", "nprobe": 4}, 0.6),
    ("faiss", {"factory": "HNSW16", "efSearch": 64}, 0.8),
    ("scann", {"num_leaves": 16, "num_leaves_to_search": 4, "reorder": 50}, 0.6)])
def test_every_backend_against_exact_search_with_its_recall_reported(backend, params, min_recall, record_property):
  """Each backend behind the one interface, on 2,000 clustered 32-d vectors: recall@10 against the exact "jax"
  index is measured and printed (not assumed), and the ids and scores it returns are real: every id is in the corpus
  and its score is the exact cosine of that id's stored vector."""
  if backend in ("faiss", "scann"):
    pytest.importorskip(backend, reason=f"{backend} is an optional extra (pip install vidjax[{backend}])")
  rng = np.random.default_rng(21)
  n, k = 2000, 10
  ids, x = _ids(n, rng), _clustered(n, rng)
  queries = _clustered(64, rng)
  exact = DenseIndex(ids, x, chunk=1024, query_batch=64)
  index = DenseIndex(ids, x, chunk=1024, query_batch=64, backend=backend, params=params)
  assert index.backend == backend and index.exact is False and index.nbytes > 0
  assert set(params) <= set(index.params)
  want, _ = exact.search(queries, k)
  got, scores = index.search(queries, k)
  recall = np.mean([len(set(a) & set(b)) / k for a, b in zip(got, want)])
  print(f"{backend} {params}: recall@{k} = {recall:.3f}")  # shown with -s (and in the junit XML below)
  record_property(f"recall_at_{k}", round(float(recall), 4))
  assert recall >= min_recall, (backend, recall)
  found = got != ""
  cos = np.einsum("qd,qkd->qk", l2_normalize(queries), exact.vectors(np.where(found, got, ids[0])))
  np.testing.assert_allclose(scores[found], cos[found], atol=2e-3 if backend == "scann" else 1e-5)
  assert all((np.diff(s[f]) <= 1e-6).all() for s, f in zip(scores, found))  # best first


@pytest.mark.parametrize("backend,build,sweep", [
    ("faiss", {"factory": "IVF16,Flat", "nprobe": 1}, {"nprobe": 16}),
    ("faiss", {"factory": "HNSW16", "efSearch": 8}, {"efSearch": 128}),
    ("scann", {"num_leaves": 16, "num_leaves_to_search": 1, "reorder": 20}, {"num_leaves_to_search": 16}),
    ("approx", {"recall_target": 0.5}, {"recall_target": 0.99})])
def test_search_params_change_without_a_rebuild_and_equal_a_fresh_build(backend, build, sweep, tmp_path):
  """A sweep of search-time params (bench/ann.py's) on one built index raises its recall and answers as an index
  built with the new params does (ScaNN aside: its builds differ), and records them; a build-time param or the exact backend is refused by name."""
  if backend in ("faiss", "scann"):
    pytest.importorskip(backend, reason=f"{backend} is an optional extra (pip install vidjax[{backend}])")
  rng = np.random.default_rng(24)
  ids, x = _ids(1000, rng), _clustered(1000, rng)
  queries = _clustered(32, rng)
  index = DenseIndex(ids, x, backend=backend, params=build)
  before = index.search(queries, 10)
  assert index.set_search_params(**sweep) is index and index.params == {**index.params, **sweep}
  after = index.search(queries, 10)
  if backend != "scann":  # ScaNN's build is not deterministic (two builds of these rows share 45% of the top-10)
    fresh = DenseIndex(ids, x, backend=backend, params={**build, **sweep})
    np.testing.assert_array_equal(after[0], fresh.search(queries, 10)[0])
  exact = DenseIndex(ids, x).search(queries, 10)[0]
  recall = [np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, exact)]) for got in (before[0], after[0])]
  assert recall[1] >= recall[0], recall
  if backend != "approx":  # on CPU approx_max_k is exact at any recall_target
    assert recall[1] > recall[0], recall
  assert DenseIndex.load(index.save(tmp_path / "i")).params == index.params
  with pytest.raises(ValueError, match=r"has no search-time params \['(factory|reorder|num_leaves)'\]"):
    index.set_search_params(**{"factory": "Flat"} if backend == "faiss" else {"reorder" if backend == "scann"
                                                                              else "num_leaves": 4})
  with pytest.raises(ValueError, match=r"backend 'jax' has no search-time params \['nprobe'\] \(it has \[\]"):
    DenseIndex(ids, x).set_search_params(nprobe=4)


@pytest.mark.parametrize("backend", ["jax", "bfloat16", "approx", "faiss", "scann"])
def test_save_and_load_give_the_same_answers(backend, tmp_path):
  if backend in ("faiss", "scann"):
    pytest.importorskip(backend, reason=f"{backend} is an optional extra (pip install vidjax[{backend}])")
  rng = np.random.default_rng(22)
  ids, x = _ids(300, rng), _clustered(300, rng, d=D, centres=8)
  kw = ({"dtype": "bfloat16"} if backend == "bfloat16" else {"backend": backend})
  if backend == "scann":
    kw["params"] = {"num_leaves": 8, "num_leaves_to_search": 8}
  index = _index(ids, x, **kw)
  saved = index.save(tmp_path / "index")
  assert {"ids.npy", "index.json"} <= {p.name for p in saved.iterdir()} and not (tmp_path / "index.tmp").exists()
  back = DenseIndex.load(saved, backend=index.backend, dim=D)
  queries = rng.normal(size=(11, D)).astype(np.float32)
  for k in (1, 7):
    a, b = index.search(queries, k), back.search(queries, k)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1].view(np.int32), b[1].view(np.int32))  # bit for bit
  np.testing.assert_array_equal(index.vectors(ids[:4]), back.vectors(ids[:4]))
  assert (back.params, back.dtype, back.exact, back.query_batch) == (index.params, index.dtype, index.exact, QB)


def test_load_refuses_another_backend_dimension_or_a_non_index(tmp_path):
  rng = np.random.default_rng(23)
  ids, x = _ids(40, rng), rng.normal(size=(40, D)).astype(np.float32)
  path = _index(ids, x).save(tmp_path / "index")
  with pytest.raises(ValueError, match="built with backend 'jax', not 'faiss'"):
    DenseIndex.load(path, backend="faiss")
  with pytest.raises(ValueError, match=f"built for {D}-d vectors, not 32-d"):
    DenseIndex.load(path, dim=32)
  with pytest.raises(FileNotFoundError, match="not a saved index"):
    DenseIndex.load(tmp_path)
  with pytest.raises(ValueError, match="unknown params"):
    _index(ids, x, params={"nprobe": 3})
  with pytest.raises(ValueError, match="stores float32"):
    _index(ids, x, dtype="bfloat16", backend="faiss")


def test_an_index_section_of_a_config_chooses_the_backend_and_its_params():
  pytest.importorskip("faiss", reason="faiss-cpu is an optional extra (pip install vidjax[faiss])")
  from vidjax.defaults import common
  rng = np.random.default_rng(25)
  ids, x = _ids(300, rng), _clustered(300, rng, d=D, centres=8)
  section = common.index_section()
  assert DenseIndex.from_config(ids, x, section).backend == "jax"
  section.backend, section.params.factory, section.params.nprobe = "faiss", "IVF4,Flat", 4
  index = DenseIndex.from_config(ids, x, section, query_batch=QB)
  assert index.params == {"factory": "IVF4,Flat", "nprobe": 4, "blas_threshold": 16} and index.query_batch == QB
  section.params.reorder = 10  # a ScaNN param on a faiss index: one clear error naming it, before any work
  config = ml_collections.ConfigDict({"index": section})
  with pytest.raises(ValueError, match=r"config.index.params=.*'reorder': 10.* only params of backend 'faiss'"):
    common.check_index(config)
  with pytest.raises(ValueError, match=r"unknown params \['reorder'\]"):
    DenseIndex.from_config(ids, x, section)
  section.backend = "annoy"
  with pytest.raises(ValueError, match=r"config.index.backend='annoy' is invalid: expected one of \('jax'"):
    common.check_index(config)
  # the configs' choices are the index's backends, and each backend's params its constructor's
  assert common.INDEX_BACKENDS == dense.BACKENDS
  from vidjax.retrieval import backends
  import inspect
  for name, cls in backends.LIBRARY.items():
    assert set(common.INDEX_PARAMS[name]) == {p for p in inspect.signature(cls).parameters if not p.startswith("_")} - {
        "n", "dim", "read", "chunk", "progress"}, name


def test_scann_backend_missing_names_the_extra(monkeypatch):
  monkeypatch.setitem(sys.modules, "scann", None)
  rng = np.random.default_rng(24)
  with pytest.raises(ImportError, match=r"pip install vidjax\[scann\]"):
    _index(_ids(40, rng), rng.normal(size=(40, D)), backend="scann")


# ----------------------------------------------------------------------------- two stages


class ReverseCosine:
  """A reranker that reverses stage 1: minus the cosine of the query with each candidate."""

  def __init__(self):
    self.batches = []

  def score(self, batch):
    self.batches.append(batch)
    return -np.einsum("qd,qkd->qk", l2_normalize(np.asarray(batch["text"], np.float32)), batch["candidates"])


_SHARDED_SCRIPT = r"""
import json, tempfile
import numpy as np, jax
from vidjax import sharding
from vidjax.data.features import write_arrays
from vidjax.retrieval import DenseIndex, dense
dense.SCORE_BUDGET["cpu"] = 2 * 1300  # 2 queries: one step over every device's rows; 8: a scan over its chunks
rng = np.random.default_rng(0)
out = {}
for n, dtype, shape in ((1000, "float32", (8,)), (1300, "bfloat16", (8,)), (1300, "float32", (2, 4))):
  mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(shape), ("data", "model")[:len(shape)])
  x = rng.normal(size=(n, 16)).astype(np.float32)
  x[500:520] = x[10]  # one score tied across shards
  x[700] = 0          # a zero row: scores 0, ties by id
  ids = [f"v{i:05d}" for i in rng.permutation(n)]
  q = rng.normal(size=(21, 16)).astype(np.float32)
  q[3] = x[10]
  one = DenseIndex(ids, x, dtype=dtype, chunk=128, query_batch=8)
  many = DenseIndex(ids, x, dtype=dtype, chunk=128, query_batch=8, mesh=mesh)
  same = []
  for qs, k in ((q, 1), (q, 5), (q, 200), (q[:2], 5)):
    a, b = one.search(qs, k), many.search(qs, k)
    same.append(bool((a[0] == b[0]).all() and (a[1].view(np.int32) == b[1].view(np.int32)).all()))
  with tempfile.TemporaryDirectory() as d:
    store = write_arrays(d + "/store", {"clip": (ids, x)})
    stored = DenseIndex.from_store(store, "clip", dtype=dtype, chunk=128, query_batch=8, mesh=mesh)
    same.append(bool((stored.search(q, 7)[0] == one.search(q, 7)[0]).all()))
    many.save(d + "/index")  # one device block at a time; loaded on one device and dealt over the mesh again
    want = one.search(q, 7)
    same.append(all(bool((b.search(q, 7)[0] == want[0]).all() and (b.search(q, 7)[1].view(np.int32) ==
                                                                   want[1].view(np.int32)).all())
                    for b in (DenseIndex.load(d + "/index"), DenseIndex.load(d + "/index", mesh=mesh))))
  out[f"{n}-{dtype}-{shape}"] = {"same": same, "devices": len(many._backend._stored.sharding.device_set),
                                  "shards": sorted({s.data.shape[0] for s in many._backend._stored.addressable_shards}),
                                  "vectors": bool(np.array_equal(one.vectors(ids[:5]), many.vectors(ids[:5])))}
print("RESULT " + json.dumps(out))
"""


def test_sharded_index_over_eight_devices_equals_one_device_bit_for_bit():
  """The corpus split over 8 simulated CPU devices (whole chunks each; 11 chunks -> 2 a device, 5 of padding), and
  over one axis of a 2 x 4 mesh: the same ids and the same float bits as the single-device index, ties across shards
  included, from arrays and from a store, and after a save and a load (on one device and on the mesh)."""
  import json
  import os
  import subprocess
  from pathlib import Path
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
             PYTHONPATH=str(Path(__file__).resolve().parents[1]))
  proc = subprocess.run([sys.executable, "-c", _SHARDED_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads([l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1][len("RESULT "):])
  assert result["1000-float32-(8,)"] == {"same": [True] * 6, "devices": 8, "shards": [1], "vectors": True}
  assert result["1300-bfloat16-(8,)"] == {"same": [True] * 6, "devices": 8, "shards": [2], "vectors": True}
  assert result["1300-float32-(2, 4)"] == {"same": [True] * 6, "devices": 8, "shards": [6], "vectors": True}


def test_a_mesh_needs_the_jax_backend_and_one_of_its_axes():
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
  x = np.eye(4, D, dtype=np.float32)
  with pytest.raises(ValueError, match="axis of the mesh"):
    _index(["a", "b", "c", "d"], x, mesh=mesh, axis="model")
  assert _index(["a", "b", "c", "d"], x, mesh=mesh).search(x[:1], 2)[0].tolist() == [["a", "b"]]


def test_two_stage_rerank_reverses_and_reports_latency():
  rng = np.random.default_rng(16)
  n = 200
  ids, x = _ids(n, rng), rng.normal(size=(n, D)).astype(np.float32)
  index = _index(ids, x)
  queries = rng.normal(size=(19, D)).astype(np.float32)
  reranker = ReverseCosine()
  result = TwoStage(index, k_recall=K, reranker=reranker, query_batch=QB).search(queries, 3)
  assert isinstance(result, TwoStageResult)
  s1_ids, s1_scores = index.search(queries, K)
  np.testing.assert_array_equal(result.recall_ids, s1_ids)
  np.testing.assert_array_equal(result.recall_scores, s1_scores)
  np.testing.assert_array_equal(result.ids, s1_ids[:, ::-1][:, :3])
  np.testing.assert_allclose(result.scores, -s1_scores[:, ::-1][:, :3], atol=1e-6)
  assert set(result.latency_ms) == {"recall", "rerank", "total"}
  assert all(v >= 0 for v in result.latency_ms.values())
  # The default batch: queries, the index's vectors of the candidates, stage-1 scores as the prior.
  assert [b["candidates"].shape for b in reranker.batches] == [(8, K, D), (8, K, D), (4, K, D)]
  first = reranker.batches[0]
  np.testing.assert_array_equal(first["candidates"], index.vectors(s1_ids[:8]))
  np.testing.assert_array_equal(first["prior"], s1_scores[:8])


def test_two_stage_without_reranker_is_stage_one():
  rng = np.random.default_rng(17)
  ids, x = _ids(40, rng), rng.normal(size=(40, D)).astype(np.float32)
  index = _index(ids, x)
  queries = rng.normal(size=(5, D)).astype(np.float32)
  stack = TwoStage(index, k_recall=K, query_batch=QB)
  result = stack.search(queries, 2)
  s1_ids, s1_scores = index.search(queries, K)
  np.testing.assert_array_equal(result.ids, s1_ids[:, :2])
  np.testing.assert_array_equal(result.scores, s1_scores[:, :2])
  assert result.latency_ms["rerank"] == 0.0
  np.testing.assert_array_equal(stack.retrieve({"text": queries}, 2)[0], s1_ids[:, :2])


def test_two_stage_generic_recall_batch_fn_and_errors():
  class Fixed:  # a recall stage without stored vectors (e.g. generative recall)
    def retrieve(self, queries, k):
      q = len(queries["tokens"])
      return np.tile(np.arange(k), (q, 1)), np.tile(-np.arange(k, dtype=np.float32), (q, 1))

  queries = {"tokens": np.arange(6).reshape(3, 2)}
  with pytest.raises(TypeError, match="pass batch_fn"):
    TwoStage(Fixed(), 4, reranker=lambda b: b["prior"])
  stack = TwoStage(Fixed(), 4, reranker=lambda b: b["cand"].astype(np.float32) % 2, query_batch=QB,
                   batch_fn=lambda q, cand, prior: {"cand": cand, **q})
  result = stack.search(queries, 4)
  # Scores 0/1 by parity; equal scores keep the stage-1 order.
  np.testing.assert_array_equal(result.ids, np.tile([1, 3, 0, 2], (3, 1)))
  with pytest.raises(ValueError, match=r"k must be an integer in \[1, k_recall=4\]"):
    stack.search(queries, 5)
  with pytest.raises(ValueError, match="expected \\(4, 4\\)"):
    TwoStage(Fixed(), 4, reranker=lambda b: np.zeros((4, 3)), batch_fn=lambda *a: {}).search(queries, 2)
  with pytest.raises(ValueError, match="no queries"):
    stack.search({"tokens": np.zeros((0, 2))}, 2)
