"""Semantic-ID index for generative recall: a prefix trie as static arrays, and a jitted beam search over it.

GRDR (../shared/papers/grdr.txt §3.4) gives every video N_v semantic IDs of M codes in [0, K); a
query is decoded into IDs by beam search constrained to the IDs that exist in the corpus, and the
IDs are mapped back to videos.

    trie = SemanticIdTrie(video_ids, codes, num_codes=K)        # codes int [V, N_v, M]
    codes, leaves, scores = beam_search(logp_fn, trie.arrays(), params, queries, width=100, depth=M)
    candidates = trie.videos_in_order(leaves[q], limit=150)    # de-duplicated, beam order

Representation (the layout STATIC uses): the distinct IDs are sorted, so the prefixes of each length
d (the trie's nodes at depth d) are sorted too and the children of a node are a contiguous run of
the next depth's nodes. The first `dense_depth` depths (default 2: the root and its children, at most
1 + K nodes) store a dense table `[n_d, K]` of child node indices (-1: no such child); deeper ones,
where most of the K^d prefixes do not exist, CSR: `row_ptr [n_d + 1]` into the next depth's nodes and
their last codes `child_code [n_{d+1}]` (int16 when K <= 32768). The nodes at depth M are the distinct
IDs (`leaf` = their index); `video_ptr [U + 1]` / `video_index` map each ID to its videos (CSR).

Beam search runs under one jit with static shapes (no Python callback): at a dense depth one `[Q, W, K]` validity
mask from the table; at a CSR depth (STATIC's point) only the B_d children a node can have (B_d: the depth's largest
branching factor, often far below K) are read per beam, as `[Q, W, B_d]` child indices and codes, and the step's
log-probabilities gathered at those codes. Scores are added in log space and the best W continuations kept by
`lax.top_k` (equal scores: the lower beam, then the lower code: a node's children are in code order). Scores are the sum of the step
log-probabilities the caller's `logp_fn` returns (the paper's joint likelihood; invalid codes are
masked, not renormalised). Beams that run out of valid continuations end with score -inf and leaf -1.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidjax.ops import is_positive_int

# Depths below this one get dense child tables (`[n_d, K]`), deeper ones CSR.
DENSE_DEPTH = 2


class TrieArrays(NamedTuple):
  """The trie as a pytree of arrays for `beam_search` (static structure in `dense` / `num_codes` / `branching`).

  tables: per depth d < M, the dense child table int32 [n_d, K], or the CSR pair
    (row_ptr int32 [n_d + 1], child_code int32 [n_{d+1}]).
  branching: per depth, the largest number of children of one node (B_d <= K): a CSR step reads B_d children per
    beam, not K.
  """
  tables: tuple
  dense: tuple  # bool per depth (static)
  num_codes: int  # K (static)
  branching: tuple = ()  # int per depth (static)


jax.tree_util.register_pytree_node(
    TrieArrays, lambda t: (t.tables, (t.dense, t.num_codes, t.branching)),
    lambda aux, children: TrieArrays(children, *aux))


class SemanticIdTrie:
  """The corpus's semantic IDs (see the module docstring).

  Attributes:
    video_ids: str [V], in the order given.
    ids: int32 [U, M], the distinct semantic IDs, sorted (row u is leaf u).
    num_codes: K.
    depth: M.
    video_ptr, video_index: CSR from leaf u to the videos (indices into `video_ids`, ascending)
      that have ID u in some view.
  """

  def __init__(self, video_ids: Sequence[str], codes: Any, num_codes: int, dense_depth: int = DENSE_DEPTH):
    """
    Args:
      video_ids: V distinct ids.
      codes: integer array [V, N_v, M]: each video's N_v semantic IDs of M codes in [0, num_codes).
      num_codes: K, the codebook size.
      dense_depth: depths d < dense_depth get a dense child table, deeper ones CSR.
    """
    codes = np.asarray(codes)
    video_ids = np.asarray(video_ids).astype(str)
    if not is_positive_int(num_codes):
      raise ValueError(f"SemanticIdTrie: num_codes must be a positive integer, got {num_codes!r}")
    if codes.ndim != 3 or 0 in codes.shape:
      raise ValueError(f"SemanticIdTrie: codes must be a non-empty integer array [V, N_v, M], got shape {codes.shape}")
    if not np.issubdtype(codes.dtype, np.integer):
      raise ValueError(f"SemanticIdTrie: codes must be integers, got dtype {codes.dtype}")
    if len(video_ids) != codes.shape[0]:
      raise ValueError(f"SemanticIdTrie: {len(video_ids)} video ids for codes of {codes.shape[0]} videos")
    if len(_sorted_unique(video_ids)) != len(video_ids):
      raise ValueError("SemanticIdTrie: video ids must be distinct")
    bad = np.argwhere((codes < 0) | (codes >= num_codes))
    if bad.size:
      v, view, m = bad[0]
      raise ValueError(f"SemanticIdTrie: code {int(codes[v, view, m])} of video {str(video_ids[v])!r} (view {view}, "
                       f"layer {m}) is outside [0, {num_codes}) ({len(bad)} such codes); the index does not "
                       f"match this codebook size")
    v, n_views, depth = codes.shape
    self.video_ids, self.num_codes, self.depth, self.num_views = video_ids, int(num_codes), depth, n_views
    flat = codes.reshape(v * n_views, depth).astype(np.int64)
    # Vectorised: each ID as one integer key (its codes in base K; lexicographic order = integer order) when K^M
    # fits in int64, so sorting and de-duplicating are 1-d (np.unique over rows is ~10x slower at 10M videos).
    if self.num_codes ** depth < 1 << 62:
      key = np.zeros(len(flat), np.int64)
      for m in range(depth):
        key = key * self.num_codes + flat[:, m]
      keys, leaf_of = np.unique(key, return_inverse=True)
      self.ids = np.stack([keys // self.num_codes ** (depth - 1 - m) % self.num_codes for m in range(depth)],
                          1).astype(np.int32)
    else:
      self.ids, leaf_of = np.unique(flat.astype(np.int32), axis=0, return_inverse=True)
    leaf_of = leaf_of.reshape(-1)
    video_of = np.repeat(np.arange(v, dtype=np.int64), n_views)
    pairs = _sorted_unique(leaf_of.astype(np.int64) * v + video_of)  # (leaf, video) as one key, sorted, distinct
    pair_leaf = pairs // v
    self.video_ptr = np.searchsorted(pair_leaf, np.arange(len(self.ids) + 1)).astype(np.int32)
    self.video_index = (pairs % v).astype(np.int32)
    self.leaf_of = leaf_of.reshape(v, n_views)  # each video's leaves, view order
    self._tables, self._dense, self._branching = [], [], []
    for d in range(depth):
      parents = _prefix_index(self.ids, d)  # node index at depth d of each ID's prefix
      children = _prefix_index(self.ids, d + 1)
      n_d, n_next = parents[-1] + 1, children[-1] + 1
      first = np.r_[0, np.flatnonzero(np.diff(children)) + 1]  # one ID per child node
      child_parent, child_code = parents[first], self.ids[first, d]
      self._branching.append(int(np.bincount(child_parent).max()))
      if d < dense_depth:
        table = np.full((n_d, self.num_codes), -1, np.int32)
        table[child_parent, child_code] = np.arange(n_next, dtype=np.int32)
        self._tables.append(table)
      else:
        row_ptr = np.searchsorted(child_parent, np.arange(n_d + 1)).astype(np.int32)
        code_dtype = np.int16 if self.num_codes <= 1 << 15 else np.int32
        self._tables.append((row_ptr, child_code.astype(code_dtype)))
      self._dense.append(d < dense_depth)

  def __len__(self) -> int:
    return len(self.video_ids)

  @property
  def nbytes(self) -> int:
    """Bytes of the index: the videos' codes (int16 when K <= 32768), the trie tables, the ID -> video map."""
    code_bytes = 2 if self.num_codes <= 1 << 15 else 4
    tables = sum(sum(a.nbytes for a in t) if isinstance(t, tuple) else t.nbytes for t in self._tables)
    return (len(self) * self.num_views * self.depth * code_bytes + tables + self.ids.size * code_bytes
            + self.video_ptr.nbytes + self.video_index.nbytes)

  def arrays(self) -> TrieArrays:
    """The tables as device arrays for `beam_search`, padded so that tries of one K and depth and similar sizes
    share its compiled program (a run evaluates many: Tables 1-3's models, each setting): a dense depth's table to
    `padded_size` rows (-1: nodes that do not exist, never reached), a CSR depth's `row_ptr` (its last entry
    repeated: degree 0) and `child_code` to `padded_size`, and each branching factor up to a multiple of 8 (at most
    K; the extra slots are past every node's degree: a 100-beam step over 40 children reads 40, over 45 reads 48).
    The search's results are those of the unpadded tables."""
    k, tables = self.num_codes, []
    for d, t in enumerate(self._tables):
      if isinstance(t, tuple):
        row_ptr, child_code = t
        row_ptr = np.pad(row_ptr, (0, padded_size(len(row_ptr)) - len(row_ptr)), mode="edge")
        child_code = np.pad(child_code, (0, padded_size(len(child_code)) - len(child_code)))
        tables.append((jnp.asarray(row_ptr), jnp.asarray(child_code)))
      else:
        rows = min(padded_size(len(t)), k ** d)
        tables.append(jnp.asarray(np.pad(t, ((0, rows - len(t)), (0, 0)), constant_values=-1)))
    branching = tuple(min(k, -(-b // 8) * 8) for b in self._branching)
    return TrieArrays(tuple(tables), tuple(self._dense), k, branching)

  def videos_in_order(self, leaves: np.ndarray, limit: int | None = None, return_beams: bool = False):
    """Video indices of `leaves [W]` (beam order; -1 = none), de-duplicated keeping the first occurrence.

    Videos sharing one ID come in ascending index order. At most `limit` are returned. With
    `return_beams`, also the beam (position in `leaves`) each video first came from.
    """
    leaves = np.asarray(leaves)
    beams = np.flatnonzero(leaves >= 0)
    leaves = leaves[beams]
    if not leaves.size:
      empty = np.zeros((0,), np.int32)
      return (empty, empty) if return_beams else empty
    starts, stops = self.video_ptr[leaves], self.video_ptr[leaves + 1]
    runs = np.concatenate([self.video_index[a:b] for a, b in zip(starts, stops)])
    run_beams = np.repeat(beams, stops - starts)
    _, first = np.unique(runs, return_index=True)
    first = np.sort(first)[:limit]
    return (runs[first], run_beams[first]) if return_beams else runs[first]

  def collisions(self) -> int:
    """Number of distinct IDs shared by two or more videos."""
    return int(np.sum(np.diff(self.video_ptr) > 1))


def padded_size(n: int) -> int:
  """The length a trie array of n entries is padded to (`SemanticIdTrie.arrays`): the next power of two up to 4096,
  past it the next multiple of a sixteenth of the next power of two (at most 12.5% more entries: n is above half
  that power)."""
  if n <= 4096:
    return 1 << max(n - 1, 0).bit_length()
  step = (1 << (n - 1).bit_length()) // 16
  return -(-n // step) * step


def _sorted_unique(a: np.ndarray) -> np.ndarray:
  """`np.unique(a)` by sorting (numpy 2's default hashes, 10x slower on 10M strings or int64 keys)."""
  a = np.sort(a)
  return a[np.r_[True, a[1:] != a[:-1]]] if len(a) else a


def _prefix_index(ids: np.ndarray, d: int) -> np.ndarray:
  """Node index at depth d (0 .. n_d - 1) of each sorted ID's length-d prefix."""
  if d == 0:
    return np.zeros(len(ids), np.int64)
  change = ids[1:, d - 1] != ids[:-1, d - 1]  # sorted: a prefix changes where its last code or a shorter one does
  for m in range(d - 1):
    change |= ids[1:, m] != ids[:-1, m]
  return np.r_[0, np.cumsum(change)]


def _children(trie: TrieArrays, d: int, node: jax.Array) -> jax.Array:
  """Child node indices int32 [..., K] of depth-d nodes `node [...]` (-1: no child, or node < 0)."""
  k = trie.num_codes
  table = trie.tables[d]
  if trie.dense[d]:
    out = table[jnp.maximum(node, 0)]
  else:
    row_ptr, child_code = table
    start = row_ptr[jnp.maximum(node, 0)]
    degree = row_ptr[jnp.maximum(node, 0) + 1] - start
    j = jnp.arange(k, dtype=jnp.int32)
    child = start[..., None] + j
    valid = j < degree[..., None]
    code = jnp.where(valid, child_code[jnp.minimum(child, child_code.shape[0] - 1)].astype(jnp.int32), 0)
    # Scatter each valid child to its code; codes are distinct within a node, so max is exact.
    flat_code = code.reshape(-1, k)
    rows = jnp.arange(flat_code.shape[0])[:, None]
    out = jnp.full(flat_code.shape, -1, jnp.int32).at[rows, flat_code].max(
        jnp.where(valid, child, -1).reshape(-1, k))
    out = out.reshape(code.shape)
  return jnp.where((node >= 0)[..., None], out, -1)


def _csr_children(trie: TrieArrays, d: int, node: jax.Array, b: int) -> tuple[jax.Array, jax.Array]:
  """The children of depth-d nodes `node [...]` from the CSR table, B = `b` slots each (the depth's largest
  branching factor): (child node indices int32 [..., B], -1 past a node's degree or for node < 0; their codes
  int32 [..., B], ascending within a node, 0 where there is no child)."""
  row_ptr, child_code = trie.tables[d]
  n = jnp.maximum(node, 0)
  start = row_ptr[n]
  j = jnp.arange(b, dtype=jnp.int32)
  child = start[..., None] + j
  valid = (j < (row_ptr[n + 1] - start)[..., None]) & (node >= 0)[..., None]
  code = jnp.where(valid, child_code[jnp.minimum(child, child_code.shape[0] - 1)].astype(jnp.int32), 0)
  return jnp.where(valid, child, -1), code


LogpFn = Callable[[Any, Any, jax.Array], jax.Array]


@functools.partial(jax.jit, static_argnames=("logp_fn", "width", "depth"))
def beam_search(logp_fn: LogpFn, trie: TrieArrays, params: Any, queries: Any, *, width: int, depth: int
                ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Trie-constrained beam search (see the module docstring).

  Args:
    logp_fn: `(params, queries, prefix int32 [Q, W, m]) -> log-probabilities float32 [Q, W, K]` of
      code m given each beam's prefix; a pure, hashable function (traced once per step m).
    trie: `SemanticIdTrie.arrays()`.
    params: the model's parameters (any pytree), passed through to `logp_fn`.
    queries: the queries' state (e.g. encoder outputs): an array or a dict of arrays, leading dim Q.
    width: W, beams kept per step.
    depth: M, the ID length.

  Returns:
    codes int32 [Q, W, M], leaves int32 [Q, W] (-1 where the score is -inf), scores float32 [Q, W],
    best first.
  """
  q = jax.tree_util.tree_leaves(queries)[0].shape[0]
  k = trie.num_codes
  node = jnp.zeros((q, width), jnp.int32)
  score = jnp.full((q, width), -jnp.inf, jnp.float32).at[:, 0].set(0.0)
  codes = jnp.zeros((q, width, depth), jnp.int32)
  for m in range(depth):
    logp = logp_fn(params, queries, codes[:, :, :m]).astype(jnp.float32)  # [Q, W, K]
    if trie.dense[m] or not trie.branching:
      child = _children(trie, m, node)  # [Q, W, K]: slot = code
      code_of = jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), child.shape)
    else:  # STATIC's step: only the B_m <= K children a node can have, in code order, and their log-probabilities
      child, code_of = _csr_children(trie, m, node, trie.branching[m])  # [Q, W, B_m]
      logp = jnp.take_along_axis(logp, code_of, axis=-1)
    b = child.shape[-1]
    total = jnp.where(child >= 0, score[..., None] + logp, -jnp.inf).reshape(q, width * b)
    score, pick = jax.lax.top_k(total, width)
    beam = pick // b
    code = jnp.take_along_axis(code_of.reshape(q, width * b), pick, axis=1)
    node = jnp.take_along_axis(child.reshape(q, width * b), pick, axis=1)
    codes = jnp.take_along_axis(codes, beam[..., None], axis=1).at[:, :, m].set(code)
    node = jnp.where(jnp.isfinite(score), node, -1)  # a dead beam stays dead
  return codes, node, score
