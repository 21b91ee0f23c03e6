"""The Grain input pipelines of vidjax: feature tables over the store, batching, loaders.

Every method trains from the same pieces (ARCHITECTURE.md "Grain pipelines"; STYLE.md item 8):

  * `FeatureTable`: the rows of one feature kind for a fixed id set. A kind that fits the memory
    budget is read once into RAM; a larger one (e.g. VEDJE's per-frame patch tokens `[T, N, D]`
    of a whole corpus) stays memory-mapped in the store's shards and each batch reads only its
    rows, so a corpus larger than RAM streams.
  * `make_batches(source, ...)`: a random-access source of example dicts -> seeded, reshuffled
    batches (Grain `MapDataset`), this process's slice of each global batch.
  * `make_index_batches(n, ..., batch_fn)`: the same order over example *indices*, each batch built
    by one vectorized `batch_fn(indices)` (no per-example Python work); method-specific collation
    (CVR arrays: `vidjax.data.cvr.CVRTrainSource.collate`) is the `batch_fn`.
  * `Gather`: batch fields that are rows of tables. A `batch_fn` returns int row indices for them; tables within
    the device budget are put on the device once and gathered inside the jitted train step, so the host never
    touches feature vectors per step and a batch crossing to the device is a few int arrays; a table over budget
    (or streaming from the store) is gathered on the host as before (`Gather.host`).
  * `loader(dataset)`: the Grain `IterDataset` that `vidjax.train.fit` iterates, with vidjax's read
    options (few threads, a short prefetch queue); its iterator position is checkpointed by `fit`.
  * `text_token_batch(tokenizer, texts, max_length)`: fixed-length token id batches for text towers.

Data order depends only on the seed: batch `t` of the global batch is stream items
`[t * B, (t + 1) * B)`; with several processes, process `p` loads the contiguous block
`[p * B / P, (p + 1) * B / P)` of those rows, so the global batch that `sharding.shard_batch`
assembles (in process order) is row for row the one a single process would load, and per-row
randomness (dropout masks) falls on the same examples whatever the process count.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import grain
import jax
import jax.numpy as jnp
import numpy as np

from vidjax import sharding as sharding_lib
from vidjax.data.features import FeatureStore

# A few threads and a short queue: batches are usually cheap feature look-ups, and Grain's default
# (16 threads, 500 batches ahead) would hold far too much memory for large batches.
NUM_THREADS = 2
PREFETCH = 4
# Feature kinds up to this size are read into memory; larger ones stream from the memory-mapped store.
DEFAULT_MEMORY_BUDGET_BYTES = 4 << 30


# ----------------------------------------------------------------------------------------------
# Feature tables.


class FeatureTable:
  """Rows of one feature kind for a fixed id set: `rows(ids)` -> int indices, `gather(rows)` -> arrays.

  Construction checks that the store holds every id (one `MissingFeatureError` naming the missing
  ones, before any training starts). When the kind's float32 size for these ids is at most
  `memory_budget_bytes` the table is read once into memory; otherwise it streams: `gather` reads
  the requested rows from the store's memory-mapped shards on every call.

  Attributes:
    ids: the sorted unique ids; `index[id]` is its row.
    item_shape: per-item shape, e.g. `(D,)` or `(T, N, D)`.
    in_memory: whether the rows were read into memory.
  """

  def __init__(self, store: FeatureStore, kind: str, ids: Sequence[str],
               memory_budget_bytes: int | None = DEFAULT_MEMORY_BUDGET_BYTES):
    self.kind = kind
    self.ids = sorted(set(ids))
    self.index = {i: n for n, i in enumerate(self.ids)}
    self._store = store
    self._shards, self._shard, self._row = store.locate(kind, self.ids)
    self.item_shape = store.item_shape(kind) if self.ids else (0,)
    self.nbytes = 4 * len(self.ids) * int(np.prod(self.item_shape))
    self.in_memory = memory_budget_bytes is None or self.nbytes <= memory_budget_bytes
    if self.in_memory:
      # Read every row once (through the streaming path) and keep them; row len(ids) is the zero
      # vector used for padding (index -1 maps there in `gather`).
      self._emb = self._read(np.append(np.arange(len(self.ids)), -1))

  @classmethod
  def from_arrays(cls, kind: str, ids: Sequence[str], rows: np.ndarray) -> "FeatureTable":
    """An in-memory table of `rows [N, *item_shape]` keyed by `ids` (e.g. read from a TFDS dataset)."""
    ids = [str(i) for i in ids]
    rows = np.asarray(rows, np.float32)
    if rows.ndim < 2 or rows.shape[0] != len(ids) or len(set(ids)) != len(ids):
      raise ValueError(f"FeatureTable.from_arrays({kind!r}): need distinct ids, one per row; got {len(ids)} ids "
                       f"({len(set(ids))} distinct) for rows of shape {rows.shape}")
    table = cls.__new__(cls)
    order = np.argsort(np.asarray(ids), kind="stable")
    table.kind, table.ids = kind, [ids[i] for i in order]
    table.index = {i: n for n, i in enumerate(table.ids)}
    table.item_shape, table.in_memory = tuple(rows.shape[1:]), True
    table.nbytes = rows.nbytes
    table._emb = np.concatenate([rows[order], np.zeros((1,) + table.item_shape, np.float32)])
    return table

  @property
  def dim(self) -> int:
    return self.item_shape[-1]

  def padded(self) -> np.ndarray | None:
    """The in-memory rows with a zero row appended (row `len(ids)`, where `gather` sends -1): [N + 1, *item_shape];
    None for a table that streams from the store."""
    return self._emb if self.in_memory else None

  def __len__(self) -> int:
    return len(self.ids)

  def rows(self, ids: Sequence[str], length: int | None = None, left_pad: bool = False) -> np.ndarray:
    """Indices of `ids`, padded with -1 to `length` (on the left when `left_pad`)."""
    rows = [self.index[i] for i in ids]
    if length is not None:
      rows = rows[-length:] if left_pad else rows[:length]
      pad = [-1] * (length - len(rows))
      rows = pad + rows if left_pad else rows + pad
    return np.asarray(rows, np.int32)

  def gather(self, rows: np.ndarray) -> np.ndarray:
    """`rows` int [...] -> float32 [..., *item_shape]; -1 gives zeros."""
    rows = np.asarray(rows)
    if self.in_memory:
      return self._emb[np.where(rows < 0, len(self.ids), rows)]
    return self._read(rows)

  def _read(self, rows: np.ndarray) -> np.ndarray:
    """Reads `rows` from the store's memory-mapped shards (-1 gives zeros)."""
    flat = rows.reshape(-1)
    out = np.zeros((flat.size,) + self.item_shape, np.float32)
    real = np.flatnonzero(flat >= 0)
    shard, row = self._shard[flat[real]], self._row[flat[real]]
    for n in np.unique(shard):
      sel = shard == n
      out[real[sel]] = self._store.read_rows(self.kind, self._shards[n], row[sel])
    return out.reshape(rows.shape + self.item_shape)


class ArrayTable:
  """A table over an in-memory array `rows [N, ...]` (any dtype, not copied): `gather(rows)` with -1 giving a zero
  row, as `FeatureTable` does; what `Gather` wraps a plain array in."""

  def __init__(self, rows: np.ndarray):
    self._rows = np.asarray(rows)
    if self._rows.ndim < 1:
      raise ValueError(f"ArrayTable: rows need a leading row axis, got shape {self._rows.shape}")
    self.in_memory, self.nbytes = True, self._rows.nbytes

  def __len__(self) -> int:
    return len(self._rows)

  def padded(self) -> np.ndarray:
    """The rows themselves (`Gather.apply` gives zeros for -1 without a padding row)."""
    return self._rows

  def gather(self, rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows)
    out = self._rows[np.maximum(rows, 0)]
    out[rows < 0] = 0
    return out


def device_budget_bytes(fraction: float = 0.25) -> int:
  """Bytes of feature tables a train loop keeps on one device: `fraction` of the device's memory where the backend
  reports it (GPU, TPU), else `DEFAULT_MEMORY_BUDGET_BYTES` (a CPU's "device" memory is the host's)."""
  try:
    stats = jax.local_devices()[0].memory_stats() or {}
  except Exception:  # pylint: disable=broad-except  (backends without memory_stats raise various errors)
    stats = {}
  limit = stats.get("bytes_limit")
  return int(limit * fraction) if limit else DEFAULT_MEMORY_BUDGET_BYTES


class Gather:
  """Batch fields that are rows of tables, gathered on the device inside the jitted train step.

      gather = pipeline.Gather({"clip": clips, "text": texts},          # FeatureTables or arrays
                               {"text": "text", "history": "clip", "positive": "clip"})
      batches = pipeline.make_index_batches(n, batch_size, seed, gather.host(batch_fn))
      train.fit(..., dataset=pipeline.loader(batches), gather=gather)

  `batch_fn(indices)` returns, for each field in `fields`, int32 row indices `[B, ...]` into that field's table (-1 =
  a zero row, e.g. padding), beside any other arrays. Tables whose padded size fits `budget_bytes` (together, in the
  order given) are put on the device once (`device_tables`, replicated over the mesh) and their fields gathered
  inside the step (`apply`): the host builds int index batches and nothing else crosses per step. The other tables
  (a `FeatureTable` streaming from the store, or past the budget) are gathered on the host by `host(batch_fn)`, as
  before. Either way the loss sees the same values: a gather is exact.

  Attributes:
    tables: {name: table} (`FeatureTable` or `ArrayTable`).
    fields: {batch key: table name}.
    on_device: the table names kept on the device.
  """

  def __init__(self, tables: Mapping[str, Any], fields: Mapping[str, str], budget_bytes: int | None = None):
    unknown = sorted(set(fields.values()) - set(tables))
    if unknown:
      raise ValueError(f"Gather: fields name tables {unknown} that are not given (tables: {sorted(tables)})")
    self.tables = {name: t if hasattr(t, "padded") else ArrayTable(t) for name, t in tables.items()}
    self.fields = dict(fields)
    budget = device_budget_bytes() if budget_bytes is None else budget_bytes
    self.on_device, used = [], 0
    for name, table in self.tables.items():
      if table.in_memory and used + table.nbytes <= budget:
        self.on_device.append(name)
        used += table.nbytes
    self.device_bytes = used

  def host(self, batch_fn: Callable[[np.ndarray], dict]) -> Callable[[np.ndarray], dict]:
    """`batch_fn` with the host-side tables' fields gathered (rows -> values); the device-side ones stay rows."""
    host_fields = {k: n for k, n in self.fields.items() if n not in self.on_device}
    if not host_fields:
      return batch_fn

    def fn(idx):
      batch = batch_fn(idx)
      return {**batch, **{k: self.tables[n].gather(batch[k]) for k, n in host_fields.items()}}
    return fn

  def gather_all(self, batch: Mapping[str, np.ndarray]) -> dict:
    """A `batch_fn` batch with every field gathered on the host (e.g. an example for `init`)."""
    return {**batch, **{k: self.tables[n].gather(batch[k]) for k, n in self.fields.items()}}

  def device_tables(self, mesh: jax.sharding.Mesh) -> dict[str, jax.Array]:
    """{name: the table's rows [N (+ 1 zero row for a `FeatureTable`), ...]} for the device-side tables, replicated
    over `mesh` (every process passes its own copy of the same rows)."""
    sharding = sharding_lib.replicated(mesh)
    out = {}
    for name in self.on_device:
      rows = self.tables[name].padded()
      out[name] = jax.make_array_from_callback(rows.shape, sharding, lambda index, rows=rows: rows[index])
    return out

  def apply(self, tables: Mapping[str, jax.Array], batch: Mapping[str, jax.Array]) -> dict:
    """Inside the jitted step: each device-side field's rows [B, ...] -> values [B, ..., *item_shape] (-1 -> zeros:
    sent past the end, where the gather fills zeros)."""
    out = dict(batch)
    for key, name in self.fields.items():
      if name in tables:
        table, rows = tables[name], batch[key]
        out[key] = table.at[jnp.where(rows < 0, table.shape[0], rows)].get(mode="fill", fill_value=0)
    return out


# ----------------------------------------------------------------------------------------------
# Batching.


def make_batches(source: Sequence[Mapping[str, np.ndarray]], batch_size: int, seed: int, *,
                 num_epochs: int | None = None) -> grain.MapDataset:
  """A deterministic, endlessly reshuffled Grain dataset of batches for this process.

  The example stream is `source` shuffled with `seed` (a fresh permutation every epoch), repeated
  `num_epochs` times (forever when None), cut into global batches of `batch_size`.

  Args:
    source: any random-access sequence of examples, each a dict of numpy arrays.
    batch_size: the global batch size (over all processes), divisible by the process count.
    seed: shuffle seed.
    num_epochs: number of passes over `source`; None repeats forever.

  Returns:
    A `grain.MapDataset` whose item `t` is a dict of `[batch_size / process_count, ...]` arrays.
  """
  if len(source) == 0:
    raise ValueError("make_batches: the source has no examples.")
  if batch_size < 1:
    raise ValueError(f"make_batches: batch_size must be >= 1, got {batch_size}.")
  sharding_lib.process_batch_size(batch_size)  # checks divisibility by the process count
  ds = grain.MapDataset.source(source).seed(seed).shuffle().repeat(num_epochs)
  ds = ds.batch(batch_size, drop_remainder=True)
  if jax.process_count() > 1:
    ds = ds.map(lambda batch: jax.tree.map(_process_rows, batch))
  return ds


def _process_rows(rows: np.ndarray) -> np.ndarray:
  """This process's contiguous block of a global batch's rows."""
  local = len(rows) // jax.process_count()
  return rows[jax.process_index() * local:(jax.process_index() + 1) * local]


class _IndexBatches(Sequence):
  """Item `t`: the example indices of global batch `t` for this process (see `make_index_batches`)."""

  def __init__(self, num_examples: int, batch_size: int, seed: int, num_epochs: int | None):
    self.n, self.batch_size, self.seed = num_examples, batch_size, seed
    self.per_epoch = num_examples // batch_size
    # "Forever" is a length no run reaches; Grain needs a finite one.
    self.length = self.per_epoch * (num_epochs if num_epochs is not None else 1 << 32)
    self._cache: tuple[int, np.ndarray] | None = None

  def __len__(self) -> int:
    return self.length

  def __getitem__(self, t: int) -> np.ndarray:
    if not 0 <= t < self.length:
      raise IndexError(t)
    epoch, b = divmod(int(t), self.per_epoch)
    if self._cache is None or self._cache[0] != epoch:
      self._cache = (epoch, np.random.default_rng([self.seed, epoch]).permutation(self.n))
    return _process_rows(self._cache[1][b * self.batch_size:(b + 1) * self.batch_size])


def make_index_batches(num_examples: int, batch_size: int, seed: int,
                       batch_fn: Callable[[np.ndarray], Any], *,
                       num_epochs: int | None = None) -> grain.MapDataset:
  """Like `make_batches`, but shuffles example *indices* and builds each batch with one call.

  Epoch `e` is the permutation `default_rng([seed, e]).permutation(num_examples)` cut into
  `num_examples // batch_size` batches (the remainder of each epoch is dropped); batch `t` is
  `batch_fn(indices)` of this process's rows of that slice. For sources whose examples are rows of
  arrays (or of a `FeatureTable`) this avoids per-example Python work, which dominates small models
  on CPU.

  Args:
    num_examples: size of the example set.
    batch_size: global batch size, divisible by the process count.
    seed: shuffle seed; the data order depends on nothing else.
    batch_fn: `batch_fn(int64 indices [B_local]) -> dict of [B_local, ...] arrays`.
    num_epochs: passes over the data; None repeats (practically) forever.

  Returns:
    A `grain.MapDataset` of batches.
  """
  if batch_size < 1 or num_examples < batch_size:
    raise ValueError(f"make_index_batches: need 1 <= batch_size <= num_examples, got batch_size={batch_size}, "
                     f"num_examples={num_examples}.")
  sharding_lib.process_batch_size(batch_size)  # checks divisibility by the process count
  return grain.MapDataset.source(_IndexBatches(num_examples, batch_size, seed, num_epochs)).map(batch_fn)


def loader(dataset: grain.MapDataset, num_threads: int = NUM_THREADS,
           prefetch: int = PREFETCH) -> grain.IterDataset:
  """The `IterDataset` that `vidjax.train.fit` consumes: `num_threads` workers, `prefetch` batches ahead."""
  if num_threads < 0 or prefetch < 0:
    raise ValueError(f"loader: num_threads and prefetch must be >= 0, got {num_threads}, {prefetch}")
  return dataset.to_iter_dataset(grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=prefetch))


# ----------------------------------------------------------------------------------------------
# Text.


def text_token_batch(tokenizer: Callable[..., tuple[np.ndarray, np.ndarray]], texts: Sequence[str],
                     max_length: int) -> dict[str, np.ndarray]:
  """Texts -> `{"input_ids": int32 [B, S], "attention_mask": int32 [B, S]}`, S = `max_length`.

  Every batch has the same S, so a jitted text tower compiles once. `tokenizer` is a
  `vidjax.tokenizers.wordpiece.WordPieceTokenizer` (or anything with its
  `__call__(texts, max_length, padding="max_length")`).
  """
  if isinstance(texts, str):
    raise TypeError("text_token_batch expects a sequence of strings, got a single str")
  ids, mask = tokenizer(list(texts), max_length=max_length, padding="max_length")
  return {"input_ids": np.asarray(ids, np.int32), "attention_mask": np.asarray(mask, np.int32)}


def longest_tokens(tokenizer: Callable[..., tuple[np.ndarray, np.ndarray]], texts: Sequence[str],
                   max_length: int) -> int:
  """The most ids (with [CLS]/[SEP]) any of `texts` takes, at most `max_length`: the length at which
  `text_token_batch` cuts exactly what it cuts at `max_length` (the tokenizer's own special tokens included)."""
  if not len(texts):
    return 0
  _, mask = tokenizer(list(texts), max_length=max_length, padding="longest")
  return int(np.asarray(mask).sum(1).max())


def truncated_count(tokenizer: Callable[..., tuple[np.ndarray, np.ndarray]], texts: Sequence[str],
                    max_length: int) -> int:
  """How many of `texts` `text_token_batch(..., max_length)` cuts short (more than max_length ids with
  [CLS]/[SEP])."""
  if not len(texts):
    return 0
  _, mask = tokenizer(list(texts), max_length=max_length + 1, padding="longest")
  return int(np.sum(np.asarray(mask).sum(1) > max_length))
