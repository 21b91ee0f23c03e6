"""Hierarchical cosine k-means: a tree of video clusters whose root-to-leaf path is a semantic ID.

T2VIndexer's IDs (GRDR's Tables 1-2 baseline, `vidjax.methods.grdr`): K children per node (fewer where a node holds
fewer videos), M levels; a video's ID is its path, one per video.

    tree = HierarchicalKMeans.fit(features, k=K, num_layers=M, seed=0, iters=20)   # features [V, d]
    codes = tree.codes(features)                                                    # int32 [V, 1, M]
"""
from __future__ import annotations

import numpy as np

from vidjax.ops import l2_normalize


class HierarchicalKMeans:
  """A tree of cosine k-means over unit rows, K children per node, M levels (see the module docstring).
  `codes(features)` descends the tree by nearest centre, so unseen videos get IDs the same way.

  Attributes:
    centres: {path tuple: unit centres float32 [k, d]} of every node the training rows reached (the root is ()).
    num_layers: M.
  """

  def __init__(self, centres: dict, num_layers: int):
    self.centres, self.num_layers = centres, num_layers

  @classmethod
  def fit(cls, features: np.ndarray, k: int, num_layers: int, seed: int, iters: int) -> "HierarchicalKMeans":
    """The tree of `features` [V, d] (deterministic in `seed`): at every node `kmeans` of its rows into
    min(k, rows) clusters, then each non-empty cluster a child node, `num_layers` times."""
    x = np.asarray(l2_normalize(np.asarray(features, np.float32)))
    rng = np.random.default_rng(seed)
    centres, groups = {}, {(): np.arange(len(x))}
    for _ in range(num_layers):
      children = {}
      for path, rows in groups.items():
        c = kmeans(x[rows], min(k, len(rows)), iters, rng)
        centres[path] = c
        assign = np.argmax(x[rows] @ c.T, axis=1)
        for j in range(len(c)):
          members = rows[assign == j]
          if len(members):
            children[path + (j,)] = members
      groups = children
    return cls(centres, num_layers)

  def codes(self, features: np.ndarray) -> np.ndarray:
    """int32 [V, 1, M]: each row's path (a branch no training row reached below descends to its child 0)."""
    x = np.asarray(l2_normalize(np.asarray(features, np.float32)))
    out = np.zeros((len(x), self.num_layers), np.int32)
    groups = {(): np.arange(len(x))}
    for level in range(self.num_layers):
      children = {}
      for path, rows in groups.items():
        c = self.centres.get(path)
        if c is None:  # a branch no training video reached below: its first child
          c = np.zeros((1, x.shape[1]), np.float32)
        j = np.argmax(x[rows] @ c.T, axis=1)
        out[rows, level] = j
        for code in np.unique(j):
          children[path + (int(code),)] = rows[j == code]
      groups = children
    return out[:, None, :]


def kmeans(x: np.ndarray, k: int, iters: int, rng: np.random.Generator) -> np.ndarray:
  """Cosine Lloyd's k-means of unit rows x [n, d] from k distinct rows (drawn by `rng`): unit centres [k, d]; a
  centre that loses every row keeps its place. NumPy, not `vidjax.ops.kmeans`: the tree runs one small k-means per
  node, thousands of shapes that jit would each compile."""
  c = x[rng.choice(len(x), k, replace=False)]
  for _ in range(iters):
    assign = np.argmax(x @ c.T, axis=1)
    sums = np.zeros_like(c)
    np.add.at(sums, assign, x)
    unit = l2_normalize(sums)
    c = np.where(unit.any(axis=1, keepdims=True), unit, c)
  return c
