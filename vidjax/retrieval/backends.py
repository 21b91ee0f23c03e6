"""The library backends of `DenseIndex`: faiss and ScaNN behind the interface the JAX backends have
(`vidjax.retrieval.dense.JaxExact`).

A backend is built from `read(sorted positions int64 [m]) -> float32 [m, D]` (unit rows, already checked by
`DenseIndex`) and answers

    search(queries float32 [Qb, D] unit, k) -> (scores float32 [Qb, >= k], positions int64 [Qb, >= k])
    vectors(positions int64 [m]) -> float32 [m, D];  nbytes;  exact;  params (JSON-able, as built)
    save(directory) -> {file: record} (`vidjax.retrieval.files`: what index.json records and `load` checks)
    load(directory, n, dim, params, where)   (a classmethod; `where` names the index in its errors)
    SEARCH_PARAMS; set_search_params(**params)   (the search-time params, changed without a rebuild)

Ids, normalisation, the tie rule (equal scores: smaller position first) and missing results stay in `DenseIndex`.
Both are optional extras: `pip install -e .[faiss]` / `pip install -e .[scann]` (the test extra installs both).

* `Faiss`: any `faiss.index_factory` string over inner products ("Flat" = `IndexFlatIP`, exact; "IVF1024,Flat",
  "IVF1024,PQ32", "HNSW32", ...), with `nprobe` / `efSearch` set through faiss's ParameterSpace. Trained (when the
  factory needs it) on `train_size` rows spread over the corpus, then filled one chunk at a time.
  `blas_threshold` sets `faiss.cvar.distance_compute_blas_threshold` before every search: below it a batch of queries
  skips BLAS. faiss 1.15's own default is 128,000 queries, so every realistic batch took the slow path: 100k x 256,
  batch 256, 3.0 ms a query against 0.26 ms with 16 (BENCHMARKS.md, "Dense stage 1"). vidjax sets it to 16 unless
  told otherwise, and records it in `params`.
* `Scann`: ScaNN's tree (k-means partitions), asymmetric hashing of the residuals (anisotropic quantization) and an
  exact re-scoring of the `reorder` best, on dot products of unit vectors. It needs the whole corpus in memory to
  build, and keeps the float32 rows for `vectors` (counted in `nbytes`).
"""
from __future__ import annotations

import errno
import functools
import math
from pathlib import Path
from typing import Callable

import numpy as np

from vidjax import progress as progress_lib
from vidjax.retrieval import files

Read = Callable[[np.ndarray], np.ndarray]
DEFAULT_CHUNK = 16384


def _import(name: str, extra: str):
  try:
    return __import__(name)
  except ImportError as e:
    raise ImportError(f"DenseIndex(backend={extra!r}) needs {name}, an optional extra: pip install vidjax[{extra}]   "
                      f"(from a checkout: pip install -e \".[{extra}]\")") from e


class Faiss:
  """`DenseIndex(backend="faiss", params={...})` (module docstring)."""

  name = "faiss"

  def __init__(self, n: int, dim: int, read: Read, *, factory: str = "Flat", nprobe: int | None = None,
               efSearch: int | None = None, blas_threshold: int = 16, train_size: int = 100_000,
               chunk: int | None = None, progress: bool = False, _index=None):  # pylint: disable=invalid-name
    faiss = _import("faiss", "faiss")
    self._faiss = faiss
    self.n, self.dim = n, dim
    self.factory, self.nprobe, self.efSearch, self.blas_threshold = str(factory), nprobe, efSearch, int(blas_threshold)
    self.exact = self.factory == "Flat"
    if _index is not None:
      self.index = _index
    else:
      try:
        self.index = faiss.index_factory(dim, self.factory, faiss.METRIC_INNER_PRODUCT)
      except RuntimeError as e:
        raise ValueError(f"DenseIndex backend 'faiss': params factory={factory!r} is not a faiss index_factory "
                         f"string for {dim}-d vectors ({str(e).strip().splitlines()[-1]})") from e
      if not self.index.is_trained:
        sample = np.unique(np.linspace(0, n - 1, min(n, int(train_size))).astype(np.int64))
        self.index.train(np.ascontiguousarray(read(sample)))
      chunk = chunk or DEFAULT_CHUNK
      bar = progress_lib.bar(math.ceil(n / chunk), f"faiss {self.factory} build", unit="chunk", disable=not progress)
      for start in range(0, n, chunk):
        self.index.add(np.ascontiguousarray(read(np.arange(start, min(start + chunk, n)))))
        bar.update(1)
      bar.close()
    self.set_search_params(nprobe=nprobe, efSearch=efSearch)

  SEARCH_PARAMS = ("nprobe", "efSearch")

  def set_search_params(self, **params) -> None:
    """nprobe / efSearch (None: unchanged), applied through faiss's ParameterSpace without rebuilding."""
    space = self._faiss.ParameterSpace()
    for key, value in params.items():
      if value is None:
        continue
      try:
        space.set_index_parameter(self.index, key, int(value))
      except RuntimeError as e:
        raise ValueError(f"DenseIndex backend 'faiss': params {key}={value!r} does not apply to factory "
                         f"{self.factory!r}") from e
      setattr(self, key, int(value))

  @property
  def params(self) -> dict:
    out = {"factory": self.factory, "blas_threshold": self.blas_threshold}
    return out | {k: v for k, v in (("nprobe", self.nprobe), ("efSearch", self.efSearch)) if v is not None}

  @functools.cached_property
  def nbytes(self) -> int:  # the index's serialised size (a copy of it: computed once; the index is built by then)
    return int(self._faiss.serialize_index(self.index).nbytes)

  def vectors(self, flat: np.ndarray) -> np.ndarray:
    try:
      return np.asarray(self.index.reconstruct_batch(flat), np.float32)
    except RuntimeError:  # IVF indexes reconstruct through a direct map
      self._faiss.extract_index_ivf(self.index).make_direct_map()
      return np.asarray(self.index.reconstruct_batch(flat), np.float32)

  def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    self._faiss.cvar.distance_compute_blas_threshold = self.blas_threshold
    queries = np.ascontiguousarray(queries, np.float32)
    if not self.exact:
      return self.index.search(queries, k)
    # Exact: faiss's order among equal scores is its own; fetch until the k-th score's tie block is complete (the
    # last fetched score is below it, or everything was fetched), so `DenseIndex` can re-rank by position.
    fetch = min(self.n, k + 1)
    while True:
      s, p = self.index.search(queries, fetch)
      if fetch == self.n or np.all(s[:, -1] < s[:, k - 1]):
        return s, p
      fetch = min(self.n, 2 * fetch)

  def save(self, path: Path) -> dict:
    """Writes faiss.index; returns its record for index.json."""
    _library_write(lambda: self._faiss.write_index(self.index, str(path / "faiss.index")), path / "faiss.index")
    return {"faiss.index": files.file_record(path / "faiss.index")}

  @classmethod
  def load(cls, path: Path, n: int, dim: int, params: dict, where: str) -> "Faiss":
    faiss = _import("faiss", "faiss")
    try:
      index = faiss.read_index(str(path / "faiss.index"))
    except RuntimeError as e:
      raise files.IndexFileError(f"{where}: faiss.index is not a readable faiss index ({_last_line(e)}); the index "
                                 "is damaged: rebuild it (DenseIndex.save)") from None
    if (index.ntotal, index.d) != (n, dim):
      raise files.IndexFileError(f"{where}: faiss.index holds {index.ntotal} x {index.d}, index.json says {n} x {dim}")
    return cls(n, dim, None, _index=index, **params)


class Scann:
  """`DenseIndex(backend="scann", params={...})` (module docstring). Defaults follow ScaNN's README: about sqrt(N)
  leaves, 2 dimensions per AH block, anisotropic threshold 0.2, re-scoring the best 100."""

  name = "scann"
  exact = False

  def __init__(self, n: int, dim: int, read: Read, *, num_leaves: int | None = None,
               num_leaves_to_search: int | None = None, dims_per_block: int = 2, aq_threshold: float = 0.2,
               reorder: int = 100, training_sample_size: int = 250_000, chunk: int | None = None,
               progress: bool = False, _searcher=None, _rows=None):
    scann = _import("scann", "scann")
    self.n, self.dim = n, dim
    self.num_leaves = int(num_leaves or max(1, min(n, round(math.sqrt(n)))))
    self.num_leaves_to_search = int(num_leaves_to_search or max(1, self.num_leaves // 10))
    self.dims_per_block, self.aq_threshold, self.reorder = int(dims_per_block), float(aq_threshold), int(reorder)
    self.training_sample_size = int(training_sample_size)
    if not 1 <= self.num_leaves_to_search <= self.num_leaves <= n:
      raise ValueError(f"DenseIndex backend 'scann': params need 1 <= num_leaves_to_search "
                       f"({self.num_leaves_to_search}) <= num_leaves ({self.num_leaves}) <= N ({n})")
    if _searcher is not None:
      self.searcher, self.rows = _searcher, _rows
      return
    chunk = chunk or DEFAULT_CHUNK
    self.rows = np.empty((n, dim), np.float32)
    bar = progress_lib.bar(math.ceil(n / chunk), "scann build", unit="chunk", disable=not progress)
    for start in range(0, n, chunk):
      self.rows[start:start + chunk] = read(np.arange(start, min(start + chunk, n)))
      bar.update(1)
    bar.close()
    builder = scann.scann_ops_pybind.builder(self.rows, 10, "dot_product")
    self.searcher = (builder.tree(num_leaves=self.num_leaves, num_leaves_to_search=self.num_leaves_to_search,
                                  training_sample_size=min(n, self.training_sample_size))
                     .score_ah(self.dims_per_block, anisotropic_quantization_threshold=self.aq_threshold)
                     .reorder(self.reorder).build())

  # `reorder` is not one: a searcher built with a smaller reorder answers a larger pre-reorder count differently
  # from one built with it (measured: 16% of the top-10 differed).
  SEARCH_PARAMS = ("num_leaves_to_search",)

  def set_search_params(self, num_leaves_to_search: int | None = None) -> None:
    leaves = int(num_leaves_to_search or self.num_leaves_to_search)
    if not 1 <= leaves <= self.num_leaves:
      raise ValueError(f"DenseIndex backend 'scann': params num_leaves_to_search must be in [1, num_leaves = "
                       f"{self.num_leaves}], got {leaves}")
    self.num_leaves_to_search = leaves

  @property
  def params(self) -> dict:
    return {"num_leaves": self.num_leaves, "num_leaves_to_search": self.num_leaves_to_search,
            "dims_per_block": self.dims_per_block, "aq_threshold": self.aq_threshold, "reorder": self.reorder,
            "training_sample_size": self.training_sample_size}

  @property
  def nbytes(self) -> int:
    # the float32 rows (re-scoring and `vectors`), plus the AH codes: dim / dims_per_block bytes... per row
    return int(self.rows.nbytes + self.n * math.ceil(self.dim / self.dims_per_block))

  def vectors(self, flat: np.ndarray) -> np.ndarray:
    return self.rows[flat]

  def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    p, s = self.searcher.search_batched(np.ascontiguousarray(queries, np.float32), final_num_neighbors=k,
                                        pre_reorder_num_neighbors=max(self.reorder, k),
                                        leaves_to_search=self.num_leaves_to_search)
    return np.asarray(s, np.float32), np.asarray(p, np.int64)

  def save(self, path: Path) -> dict:
    """Writes scann/ (the searcher) and vectors.npy (the float32 rows); returns their records for index.json."""
    (path / "scann").mkdir()
    # relative paths: the directory is renamed into place
    _library_write(lambda: self.searcher.serialize(str(path / "scann"), relative_path=True), path / "scann")
    out = {"vectors.npy": files.write_npy(path / "vectors.npy", self.rows)}
    return out | {p.relative_to(path).as_posix(): files.file_record(p)
                  for p in sorted((path / "scann").rglob("*")) if p.is_file()}

  @classmethod
  def load(cls, path: Path, n: int, dim: int, params: dict, where: str) -> "Scann":
    scann = _import("scann", "scann")
    rows = np.array(files.open_npy(path / "vectors.npy", np.float32, (n, dim), where))
    try:
      searcher = scann.scann_ops_pybind.load_searcher(str(path / "scann"))
    except (RuntimeError, ValueError, OSError) as e:
      raise files.IndexFileError(f"{where}: scann/ is not a readable ScaNN searcher ({_last_line(e)}); the index is "
                                 "damaged: rebuild it (DenseIndex.save)") from None
    return cls(n, dim, None, _searcher=searcher, _rows=rows, **params)


def _last_line(e: Exception) -> str:
  lines = str(e).strip().splitlines()
  return lines[-1][:200] if lines else type(e).__name__


def _library_write(write: Callable[[], None], path: Path) -> None:
  """A library's own file write, its error an OSError naming `path` ("no space left" when the disk is full)."""
  try:
    write()
  except RuntimeError as e:  # faiss and ScaNN raise RuntimeError with the C library's message
    text = str(e)
    full = "space left" in text.lower() or "ENOSPC" in text or files.free_bytes(path) == 0
    raise OSError(errno.ENOSPC if full else errno.EIO, _last_line(e), str(path)) from None


LIBRARY = {"faiss": Faiss, "scann": Scann}
