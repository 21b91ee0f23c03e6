"""Semantic-ID trie and constrained beam search against exhaustive enumeration and a plain-Python beam."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidjax.retrieval.trie import SemanticIdTrie, beam_search

pytestmark = pytest.mark.highest_precision  # compares with NumPy or a reference (tests/conftest.py)

H = 8


def logp_fn(params, queries, prefix):
  """A prefix-dependent scorer: h = query + sum of the prefix codes' embeddings, log-softmax(h W_m)."""
  emb, out = params
  m = prefix.shape[-1]
  h = queries[:, None, :] + sum(emb[l][prefix[..., l]] for l in range(m))
  return jax.nn.log_softmax(h @ out[m], axis=-1)


def _random_case(seed, k, depth, videos, views):
  rng = np.random.default_rng(seed)
  # Few distinct values per layer so that prefixes are shared and some IDs collide.
  codes = rng.integers(0, k, size=(videos, views, depth))
  codes[: videos // 3, :, 0] = rng.integers(0, 2)
  params = (jnp.asarray(rng.normal(size=(depth, k, H)), jnp.float32),
            jnp.asarray(rng.normal(size=(depth, H, k)), jnp.float32))
  queries = jnp.asarray(rng.normal(size=(3, H)), jnp.float32)
  return codes, params, queries


def _step_logp(params, queries, prefixes):
  """log P of every code after each prefix, [Q, P, K], through the same function."""
  return np.asarray(logp_fn(params, queries, jnp.asarray(prefixes, jnp.int32)))


def _reference_beam(trie, params, queries, width):
  """Plain-Python beam search: every valid continuation of every beam, best `width` kept each step."""
  valid = {tuple(i) for i in trie.ids}
  out = []
  for qi in range(queries.shape[0]):
    beams = [((), np.float32(0.0))]
    for m in range(trie.depth):
      prefixes = np.array([[list(b) for b, _ in beams]], np.int32).reshape(1, len(beams), m)
      logp = _step_logp(params, queries[qi:qi + 1], prefixes)[0]
      cand = []
      for bi, (b, s) in enumerate(beams):
        for c in range(trie.num_codes):
          if any(v[:m + 1] == b + (c,) for v in valid):
            cand.append((-(np.float32(s) + logp[bi, c]), bi, c, b + (c,), np.float32(s) + logp[bi, c]))
      cand.sort(key=lambda t: t[:3])  # score desc, then lower beam, then lower code
      beams = [(t[3], t[4]) for t in cand[:width]]
    out.append(beams)
  return out


@pytest.mark.parametrize("seed,k,depth,dense_depth", [(0, 5, 3, 3), (1, 4, 3, 0), (2, 6, 2, 1), (3, 3, 4, 2)])
def test_beam_search_equals_plain_python_beam_and_never_leaves_the_trie(seed, k, depth, dense_depth):
  codes, params, queries = _random_case(seed, k, depth, videos=20, views=2)
  trie = SemanticIdTrie([f"v{i}" for i in range(20)], codes, k, dense_depth=dense_depth)
  valid = {tuple(i) for i in trie.ids}
  for width in (1, 3, 7):
    got_codes, leaves, scores = jax.device_get(
        beam_search(logp_fn, trie.arrays(), params, queries, width=width, depth=depth))
    want = _reference_beam(trie, params, queries, width)
    for qi in range(queries.shape[0]):
      n = len(want[qi])
      assert [tuple(c) for c in got_codes[qi, :n]] == [b for b, _ in want[qi]]
      np.testing.assert_allclose(scores[qi, :n], [s for _, s in want[qi]], rtol=1e-6, atol=1e-6)
      assert all(tuple(c) in valid for c in got_codes[qi, :n])
      np.testing.assert_array_equal(trie.ids[leaves[qi, :n]], got_codes[qi, :n])
      assert np.all(leaves[qi, n:] == -1) and np.all(np.isneginf(scores[qi, n:]))


def test_tries_of_similar_size_share_a_program_and_padding_changes_no_result():
  """Tries of one K and depth whose tables differ in size and branching (7 or 8 depth-1 nodes, 25-30 / 33-43 CSR
  entries, 3 or 4 children at most at depth 2) give arrays of one shape and static structure: one compiled beam
  search for a run's models (Tables 1-3); and the search over the padded arrays is the search over the tables as
  built (the dead beams' codes aside, which no caller reads)."""
  from vidjax.retrieval.trie import TrieArrays, padded_size
  k, depth = 8, 3
  structure, raw_shapes = set(), set()
  for seed, videos in ((33, 20), (23, 22), (38, 18)):
    codes, params, queries = _random_case(seed, k, depth, videos=videos, views=2)
    trie = SemanticIdTrie([f"v{i}" for i in range(videos)], codes, k)
    padded = trie.arrays()
    raw = TrieArrays(jax.tree.map(jnp.asarray, tuple(trie._tables)), tuple(trie._dense), k, tuple(trie._branching))
    structure.add((jax.tree_util.tree_structure(padded), str(jax.tree.map(jnp.shape, padded.tables))))
    raw_shapes.add((jax.tree_util.tree_structure(raw), str(jax.tree.map(jnp.shape, raw.tables))))
    for width in (2, 5, 64):  # 64: more beams than the 33-43 IDs, so some die
      got = jax.device_get(beam_search(logp_fn, padded, params, queries, width=width, depth=depth))
      want = jax.device_get(beam_search(logp_fn, raw, params, queries, width=width, depth=depth))
      alive = want[1] >= 0
      assert (width < 64) == bool(alive.all())
      np.testing.assert_array_equal(got[1], want[1])
      np.testing.assert_array_equal(got[0][alive], want[0][alive])
      np.testing.assert_array_equal(got[2], want[2])
  assert len(raw_shapes) == 3 and len(structure) == 1, structure
  assert [padded_size(n) for n in (1, 2, 3, 4096, 4097, 10 ** 7)] == [1, 2, 4, 4096, 4608, 10485760]


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_wide_beam_search_is_exhaustive_enumeration_of_valid_ids(seed):
  k, depth = 4, 3
  codes, params, queries = _random_case(seed, k, depth, videos=12, views=3)
  trie = SemanticIdTrie([f"v{i}" for i in range(12)], codes, k)
  width = k ** depth  # no pruning possible
  got_codes, leaves, scores = jax.device_get(
      beam_search(logp_fn, trie.arrays(), params, queries, width=width, depth=depth))
  # Every valid ID scored with the same function, one step at a time; sorted by score.
  ids = trie.ids
  total = np.zeros((queries.shape[0], len(ids)), np.float32)
  for m in range(depth):
    logp = _step_logp(params, queries, np.broadcast_to(ids[None, :, :m], (queries.shape[0], len(ids), m)))
    total = total + np.take_along_axis(logp, ids[None, :, m, None], axis=2)[..., 0]
  for qi in range(queries.shape[0]):
    order = np.argsort(-total[qi], kind="stable")
    n = len(ids)
    np.testing.assert_array_equal(got_codes[qi, :n], ids[order])
    np.testing.assert_allclose(scores[qi, :n], total[qi, order], rtol=1e-6, atol=1e-6)
    assert np.all(leaves[qi, n:] == -1)
  # All valid IDs (and only those) were found, each once.
  assert sorted(map(tuple, got_codes[0, :len(ids)])) == sorted(map(tuple, ids))
  assert len(ids) < width  # the trie is sparse: invalid IDs were really excluded


def test_ids_map_to_videos_and_deduplicate_in_beam_order():
  codes = np.array([[[0, 1], [2, 2]],   # v0
                    [[0, 1], [0, 1]],   # v1: same ID in both views
                    [[1, 0], [0, 1]],   # v2
                    [[2, 2], [1, 1]]])  # v3
  trie = SemanticIdTrie(["v0", "v1", "v2", "v3"], codes, 3)
  np.testing.assert_array_equal(trie.ids, [[0, 1], [1, 0], [1, 1], [2, 2]])
  leaf = {tuple(i): u for u, i in enumerate(trie.ids)}
  assert trie.collisions() == 2  # (0, 1): v0 v1 v2; (2, 2): v0 v3
  beam = [leaf[(2, 2)], leaf[(0, 1)], -1, leaf[(1, 1)]]
  np.testing.assert_array_equal(trie.videos_in_order(beam), [0, 3, 1, 2])
  np.testing.assert_array_equal(trie.videos_in_order(beam, limit=3), [0, 3, 1])
  assert trie.videos_in_order([-1, -1]).size == 0
  assert trie.nbytes > 0


@pytest.mark.parametrize("codes,k,match", [
    (np.array([[[0, 5]]]), 4, "code 5 of video 'a'.*outside \\[0, 4\\)"),
    (np.array([[[0, -1]]]), 4, "outside"),
    (np.zeros((1, 2)), 4, "\\[V, N_v, M\\]"),
    (np.zeros((1, 1, 2), np.float32), 4, "integers"),
    (np.zeros((2, 1, 2), np.int32), 4, "2 videos"),
    (np.zeros((1, 1, 2), np.int32), 0, "num_codes"),
])
def test_corrupt_or_mismatched_index_gets_one_clear_error(codes, k, match):
  with pytest.raises(ValueError, match=match):
    SemanticIdTrie(["a"], codes, k)


def test_all_ids_of_small_tries_enumerated_match_codes():
  # Every (video, view) ID is a root-to-leaf path, and the leaves are exactly the distinct IDs.
  rng = np.random.default_rng(7)
  for k, depth in itertools.product((2, 5), (1, 3)):
    codes = rng.integers(0, k, size=(9, 2, depth))
    trie = SemanticIdTrie([str(i) for i in range(9)], codes, k)
    assert {tuple(c) for c in codes.reshape(-1, depth)} == {tuple(i) for i in trie.ids}
    np.testing.assert_array_equal(trie.ids[trie.leaf_of], codes)
