"""`vidjax.retrieval.kmeans`: the hierarchical k-means IDs (T2VIndexer's) against a straightforward NumPy loop."""
import numpy as np

from vidjax.retrieval.kmeans import HierarchicalKMeans, kmeans


def _unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _lloyd(x, start, iters):
  """Cosine Lloyd's iterations written out: each centre the direction of its members' sum."""
  c = start.copy()
  for _ in range(iters):
    assign = [int(np.argmax([row @ centre for centre in c])) for row in x]
    for j in range(len(c)):
      members = [row for row, a in zip(x, assign) if a == j]
      if members:
        c[j] = _unit(np.sum(members, axis=0))
  return c


def test_kmeans_equals_lloyd_from_the_same_rows():
  x = _unit(np.random.default_rng(0).normal(size=(60, 5))).astype(np.float32)
  got = kmeans(x, 4, 6, np.random.default_rng(3))
  start = x[np.random.default_rng(3).choice(len(x), 4, replace=False)]
  np.testing.assert_allclose(got, _lloyd(x, start, 6), rtol=1e-5, atol=1e-6)


def test_hierarchical_kmeans_ids_are_tree_paths():
  """One ID per video; a video shares its layer-l prefix with the videos of its cluster at every level; the tree's
  centres are `kmeans` of each node's rows; an unseen video descends to the nearest centre at each level."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(200, 8)).astype(np.float32)
  tree = HierarchicalKMeans.fit(x, 4, 3, seed=0, iters=5)
  codes = tree.codes(x)
  assert codes.shape == (200, 1, 3) and codes.min() >= 0 and codes.max() < 4
  assert len(np.unique(codes[:, 0], axis=0)) > 32  # the third level splits the 16 second-level nodes
  unit = _unit(x)
  root = _lloyd(unit, unit[np.random.default_rng(0).choice(200, 4, replace=False)], 5)
  np.testing.assert_allclose(tree.centres[()], root, rtol=1e-5, atol=1e-6)
  for path, centres in tree.centres.items():  # every training video is in the node of its path's prefix
    members = np.flatnonzero((codes[:, 0, :len(path)] == path).all(1))
    np.testing.assert_array_equal(codes[members, 0, len(path)], np.argmax(unit[members] @ centres.T, axis=1))
  new = _unit(rng.normal(size=(10, 8)).astype(np.float32))
  for v, got in zip(new, tree.codes(new)[:, 0]):
    path = ()
    for level in range(3):
      assert got[level] == int(np.argmax(tree.centres[path] @ v))
      path += (int(got[level]),)
