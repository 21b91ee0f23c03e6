"""Feature store: frozen-backbone embeddings keyed by id, on disk, lazy and resumable.

Every method in vidjax reads its inputs from a feature store; `vidjax/extract.py` writes one
(VideoPrism), and `import_arrays` turns any `.npy` / `.npz` array plus an id list into one.

Layout of one store (one directory per backbone)::

    <root>/manifest.json                  metadata: backbone, checkpoint hash, frames, resolution, dtype, ...
    <root>/<kind>/<shard>.npy             array [n, ...] (bfloat16 / float8_e4m3 as their uint16 / uint8 bit
                                          patterns; float4_e2m1 as two codes a byte, [n, ceil(items / 2)])
    <root>/<kind>/<shard>.ids.json        {"ids": [n ids], "dtype": one of STORAGE_DTYPES, "shape": [...],
                                           "sha256_ids_rows": hash of the ids, dtype, shape and rows together}
    <root>/.locks/                        one lock file per kind (and the manifest) that writers hold

A *kind* is one family of arrays with one per-item shape, e.g. ``clip`` ([D] clip embeddings),
``text`` ([D] caption embeddings), ``tokens`` ([T, N, D] per-frame patch tokens). A shard is
committed by writing its ``.ids.json`` last (both files atomically), so a shard without ids is
invisible and a killed writer loses only its unflushed buffer. Shards written by different
processes (``shard_prefix``) live side by side; reading merges them by their id files, and
`FeatureStore.merge_manifest` records the merged shard list for multi-host runs. Any number of processes may
write one kind at once, with the same prefix or not: a writer holds the kind's lock (``fcntl.flock``, released
when a process dies) while it chooses a shard name and commits the shard. Every file is checked against what it
claims when it is opened (an id list's ids, dtype and shape against its array; every shard of a kind against the
first; the rows and their ids, in order, against the hash the id list recorded), and a mismatch names the file. Kind
names and shard prefixes are plain names (letters, digits and `_ . - + = @`), ids non-empty strings.

Interface (all a consumer needs)::

    store = FeatureStore(root)                 # open (raises if root has no manifest)
    store.get("clip", ["vid_0001_03", ...])    # -> np.float32 [N, D]; one clear error naming missing ids
    store.ids("text"); store.has("clip", id); store.kinds(); store.metadata
    store = FeatureStore.create(root, {"backbone": ...})
    with store.writer("clip", shard_prefix="p0") as w:  w.add(id, array)   # resumable: skip store.has(...)
    import_arrays(root, kind, "emb.npy", "ids.txt")
    store.verify()                             # integrity report, raises on corruption
    store.remove("clip", ["vid_0001_03"])      # drops items (re-extracting a changed video)
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Iterable, Sequence

import ml_dtypes
import numpy as np

from vidjax import io
from vidjax.ops import pack_fp4, quantize_dequantize, unpack_fp4

try:
  import fcntl  # pylint: disable=g-import-not-at-top
except ImportError:  # not POSIX
  fcntl = None

MANIFEST = "manifest.json"
_IDS_SUFFIX = ".ids.json"
_LOCKS = ".locks"


class MissingFeatureError(KeyError):
  """Raised when a store lacks ids that a benchmark or training set asks for."""

  def __str__(self):  # KeyError quotes its message; people should read plain text.
    return str(self.args[0])


STORAGE_DTYPES = ("float32", "bfloat16", "float8_e4m3", "float4_e2m1")


def _to_storage(array: np.ndarray, dtype: str) -> np.ndarray:
  """float rows [n, *shape] -> the on-disk array: bf16 / fp8 as bit patterns (uint16 / uint8), fp4 as
  two codes a byte per row ([n, ceil(prod(shape) / 2)] uint8); fp8 and fp4 saturate (VEDJE A.4)."""
  if dtype == "float32":
    return np.asarray(array, dtype=np.float32)
  if dtype == "bfloat16":
    return np.asarray(array, dtype=ml_dtypes.bfloat16).view(np.uint16)
  if dtype == "float8_e4m3":
    return quantize_dequantize(array, dtype).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
  if dtype == "float4_e2m1":
    flat = np.asarray(array, np.float32).reshape(len(array), -1)
    flat = np.pad(flat, ((0, 0), (0, flat.shape[1] % 2)))  # rows of even length: bytes never straddle rows
    return pack_fp4(flat).reshape(len(array), -1)
  raise ValueError(f"feature store dtype must be one of {STORAGE_DTYPES}, got {dtype!r}")


def _from_storage(array: np.ndarray, dtype: str, shape: Sequence[int]) -> np.ndarray:
  """The inverse of `_to_storage`: float32 [n, *shape]."""
  if dtype == "bfloat16":
    return np.asarray(array).view(ml_dtypes.bfloat16).astype(np.float32)
  if dtype == "float8_e4m3":
    return np.asarray(array).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
  if dtype == "float4_e2m1":
    n, size = len(array), int(np.prod(shape))
    flat = unpack_fp4(np.asarray(array), (n, size + size % 2))
    return flat[:, :size].reshape((n, *shape))
  return np.asarray(array, dtype=np.float32)


class NonFiniteFeatureError(ValueError):
  """Features hold NaN or Inf (a NaN score ranks first, a NaN row normalises to zero and ranks last: both silent)."""


class StaleFeatureError(ValueError):
  """An id is written again with values other than the ones the store holds."""


def _shown(value, limit: int = 120) -> str:
  text = json.dumps(value)
  return text if len(text) <= limit else text[:limit] + "..."


def _ids_shown(ids: Sequence[str], limit: int = 5) -> str:
  return ", ".join(repr(str(i)) for i in list(ids)[:limit]) + (f" ... ({len(ids)} in all)" if len(ids) > limit else "")


def check_finite(array: np.ndarray, ids: Sequence[str], where: str) -> None:
  """Raises `NonFiniteFeatureError` naming `where` and the ids (first few + count) of rows [N, ...] with NaN / Inf."""
  bad = ~np.isfinite(np.asarray(array, np.float32).reshape(len(ids), -1)).all(axis=1)
  if bad.any():
    rows = [ids[i] for i in np.flatnonzero(bad)]
    raise NonFiniteFeatureError(f"{where}: {len(rows)} of {len(ids)} items hold NaN or Inf: {_ids_shown(rows)}; "
                                "re-extract them (or drop them from the annotations)")


# A kind is a folder of the store and a shard prefix starts its file names: plain names only, so that "../x" cannot
# write outside the store, "" into its root, ".x" among its hidden files, and "p[0]" (a glob pattern) cannot miss
# its own shards when a writer lists them and overwrite one.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=@-]*")


def _check_name(name: str, what: str) -> str:
  """`name` when it is a plain name for a kind or shard prefix (`_PLAIN_NAME`); else one clear error."""
  if not isinstance(name, str) or not _PLAIN_NAME.fullmatch(name):
    raise ValueError(f"{what} must be a plain name (letters, digits and _ . - + = @, not starting with '.'; no path "
                     f"or glob characters such as / \\ * ? [ ]), got {name!r}")
  return name


def _id_problem(item_id) -> str | None:
  """Why `item_id` cannot be an id (None when it can): ids are non-empty strings with a visible character and no
  NUL, as every annotation reader requires of the ids it returns."""
  if not isinstance(item_id, str):
    return type(item_id).__name__
  if not item_id.strip():
    return "empty" if not item_id else "only whitespace"
  if "\x00" in item_id:
    return "holds a NUL character"
  return None


DIGEST_KEY = "sha256_ids_rows"  # what an id list records of its shard (`_digest`); required


def _digest_of_ids(ids: Sequence[str], dtype: str, shape: Sequence[int]):
  """The SHA-256 a shard's rows are then fed to (`_digest`): its ids in order, storage dtype and item shape."""
  return hashlib.sha256(json.dumps({"ids": list(ids), "dtype": dtype, "shape": [int(d) for d in shape]},
                                   separators=(",", ":")).encode() + b"\n")


def _digest(ids: Sequence[str], dtype: str, shape: Sequence[int], array: np.ndarray) -> str:
  """SHA-256 of a shard as its id list records it (`DIGEST_KEY`): the ids in order, the storage dtype and item
  shape, then the on-disk rows in C order. Rows moved to other ids, reordered ids and edited rows all change it."""
  h = _digest_of_ids(ids, dtype, shape)
  for rows in _row_chunks(array):
    h.update(np.ascontiguousarray(array[rows]).data)
  return h.hexdigest()


# What each storage dtype's rows are on disk: (numpy kind, item size).
_ON_DISK = {"float32": ("f", 4), "bfloat16": ("u", 2), "float8_e4m3": ("u", 1), "float4_e2m1": ("u", 1)}


def _stored_shape(dtype: str, shape: Sequence[int]) -> tuple[int, ...]:
  """Per-row shape on disk of items of `shape` stored as `dtype` (fp4: two codes a byte, rows of even length)."""
  if dtype == "float4_e2m1":
    size = int(np.prod(shape))
    return ((size + size % 2) // 2,)
  return tuple(shape)


def _row_chunks(array: np.ndarray, budget: int = 64 << 20) -> Iterable[slice]:
  """Row ranges of `array` of about `budget` bytes each (bounded memory over a large memory-mapped shard)."""
  step = max(1, budget // max(1, array[:1].nbytes))
  for start in range(0, array.shape[0], step):
    yield slice(start, start + step)


@contextlib.contextmanager
def _locked(root: Path, name: str):
  """An exclusive lock on `<root>/.locks/<name>` (fcntl.flock: released when the process dies, even by kill -9).

  Every writer of a kind holds its lock while it cleans what a killed writer left, chooses a shard name and
  commits the shard, so writers in several processes (same or different `shard_prefix`) never take one name.
  Readers need no lock: a shard appears whole (its id list is renamed into place last) or not at all.
  """
  folder = root / _LOCKS
  folder.mkdir(exist_ok=True)
  fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o666)
  try:
    if fcntl is not None:  # POSIX; elsewhere writers of one kind must not run at once
      fcntl.flock(fd, fcntl.LOCK_EX)
    yield
  finally:
    os.close(fd)


class FeatureStore:
  """Random-access store of arrays keyed by (kind, id); see the module docstring for the layout."""

  def __init__(self, root: str | os.PathLike):
    self.root = Path(root)
    manifest = self.root / MANIFEST
    if not manifest.exists():
      raise FileNotFoundError(
          f"no feature store at {self.root} (missing {MANIFEST}); create one with "
          "FeatureStore.create(...), vidjax.data.features.import_arrays(...) or the extract_videoprism config")
    self.metadata = _read_manifest(self.root)
    self._index: dict[str, dict[str, tuple[str, int]]] = {}
    self._metas: dict[tuple[str, str], tuple[list[str], str, tuple[int, ...] | None, str]] = {}
    self._decl: dict[str, tuple[str, tuple[int, ...], str]] = {}  # kind -> (dtype, item shape, which file said so)
    self._shards: dict[tuple[str, str], tuple[np.ndarray, str, tuple[int, ...]]] = {}

  # -- creation --------------------------------------------------------------------------------
  @classmethod
  def create(cls, root: str | os.PathLike, metadata: dict | None = None, exist_ok: bool = True) -> "FeatureStore":
    """Creates (or reopens, when `exist_ok`) a store with `metadata` written to its manifest.

    Reopening never rewrites what the manifest says: a key of `metadata` that the manifest holds with another value
    is one error naming the key and both values (features of another backbone or source under one manifest would be
    silent corruption); keys the manifest lacks are added. `update_metadata` is the explicit way to change it.
    """
    root = Path(root)
    manifest = root / MANIFEST
    created = False
    if not manifest.exists():
      root.mkdir(parents=True, exist_ok=True)
      with _locked(root, "manifest"):  # two processes creating one store: one writes, the other merges
        if not manifest.exists():
          io.atomic_write_json(manifest, dict(metadata or {}))
          created = True
    if not created and not exist_ok:
      raise FileExistsError(f"feature store already exists at {root}")
    store = cls(root)
    if not created and metadata:
      given = json.loads(json.dumps(dict(metadata)))  # as the manifest holds it (tuples as lists)
      for key, value in given.items():
        if key in store.metadata and store.metadata[key] != value:
          raise ValueError(
              f"feature store {root} exists and its {MANIFEST} says {key}={_shown(store.metadata[key])}, but it was "
              f"opened to be written with {key}={_shown(value)}; a store keeps one manifest: write into a new store "
              "(or change the manifest on purpose with FeatureStore.update_metadata)")
      if any(key not in store.metadata for key in given):
        store.update_metadata({k: v for k, v in given.items() if k not in store.metadata})
    return store

  def update_metadata(self, metadata: dict) -> None:
    """Merges `metadata` into the manifest as it is on disk now (atomic, under the manifest's lock, so that two
    processes updating one store keep each other's keys)."""
    with _locked(self.root, "manifest"):
      for tmp in self.root.glob(f".{MANIFEST}.*.tmp"):  # what a killed update left
        tmp.unlink(missing_ok=True)
      current = _read_manifest(self.root)
      current.update(metadata)
      io.atomic_write_json(self.root / MANIFEST, current)
    self.metadata.clear()
    self.metadata.update(current)

  # -- reading ---------------------------------------------------------------------------------
  def kinds(self) -> list[str]:
    return sorted(p.name for p in self.root.iterdir()
                  if p.is_dir() and not p.name.startswith(".") and any(p.glob("*" + _IDS_SUFFIX)))

  def _read_meta(self, kind: str, shard: str) -> tuple[list[str], str, tuple[int, ...] | None, str]:
    """A shard's id list, checked: (ids, storage dtype, declared item shape or None, its `DIGEST_KEY`)."""
    path = self.root / kind / (shard + _IDS_SUFFIX)
    meta = io.read_json(path, "feature shard id list")

    def corrupt(what):
      return ValueError(f"feature store {self.root}: shard {kind}/{shard}: its id list {path.name} {what}; the shard "
                        "is corrupt (re-extract into a new store)")

    if not isinstance(meta, dict) or not isinstance(meta.get("ids"), list):
      raise corrupt("has no 'ids' list")
    ids = meta["ids"]
    for n, item_id in enumerate(ids):
      if _id_problem(item_id):
        shown = repr(item_id[:80]) if isinstance(item_id, str) else repr(item_id)[:80]
        raise corrupt(f"holds id #{n} = {shown} ({_id_problem(item_id)}); ids are non-empty strings")
    if len(set(ids)) != len(ids):
      seen: set[str] = set()
      twice = [i for i in ids if i in seen or seen.add(i)]
      raise corrupt(f"names {_ids_shown(sorted(set(twice)))} more than once")
    dtype = meta.get("dtype", "float32")
    if dtype not in STORAGE_DTYPES:
      raise corrupt(f"declares dtype {dtype!r} (expected one of {STORAGE_DTYPES})")
    shape = meta.get("shape")
    if shape is not None:
      if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                for d in shape):
        raise corrupt(f"declares shape {shape!r} (expected a list of sizes)")
      shape = tuple(shape)
    elif dtype == "float4_e2m1":
      raise corrupt("declares no item shape (float4_e2m1 rows cannot be read without one)")
    digest = meta.get(DIGEST_KEY)
    if digest is None:
      raise ValueError(f"feature store {self.root}: shard {kind}/{shard}: its id list {path.name} records no "
                       f"{DIGEST_KEY} (the hash of its ids and rows together, which every shard has had since vidjax "
                       f"issue 62); upgrade the store once with `python -m vidjax.data.features upgrade {self.root}` "
                       "(checks each shard against the hash of its rows it recorded, then records the new one), or "
                       "re-extract into a new store")
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
      raise corrupt(f"declares {DIGEST_KEY} {str(digest)[:80]!r} (expected 64 hex digits)")
    return ids, dtype, shape, digest

  def _declare(self, kind: str, dtype: str, shape: tuple[int, ...], source: str) -> None:
    """Records what `source` says `kind` holds; one kind holds one item shape and one storage dtype."""
    first = self._decl.setdefault(kind, (dtype, tuple(shape), source))
    if first[:2] != (dtype, tuple(shape)):
      raise ValueError(
          f"feature store {self.root}: kind {kind!r} mixes items: {source} holds {dtype} items of shape "
          f"{list(shape)} but {first[2]} holds {first[0]} items of shape {list(first[1])}; a kind holds one shape "
          "and one dtype (write the odd items as another kind, or into a new store)")

  def _forget(self, kind: str) -> None:
    self._index.pop(kind, None)
    self._decl.pop(kind, None)
    for cache in (self._metas, self._shards):
      for key in [k for k in cache if k[0] == kind]:
        del cache[key]

  def _sync(self, kind: str) -> dict[str, tuple[str, int]]:
    """Adds the shards of `kind` committed since its index was read (by this or another process)."""
    index = self._index.setdefault(kind, {})
    kdir = self.root / kind
    try:
      for ids_file in sorted(kdir.glob("*" + _IDS_SUFFIX)) if kdir.is_dir() else []:
        shard = ids_file.name[: -len(_IDS_SUFFIX)]
        if (kind, shard) in self._metas:
          continue
        ids, dtype, shape, digest = self._read_meta(kind, shard)
        for item_id in ids:
          if item_id in index:
            raise ValueError(f"feature store {self.root}: id {item_id!r} of kind {kind!r} is in two shards "
                             f"({index[item_id][0]} and {shard})")
        for row, item_id in enumerate(ids):
          index[item_id] = (shard, row)
        self._metas[(kind, shard)] = (ids, dtype, shape, digest)
    except BaseException:
      self._forget(kind)  # never keep half an index
      raise
    return index

  def _kind_index(self, kind: str) -> dict[str, tuple[str, int]]:
    if kind not in self._index:
      _check_name(kind, "feature kind")
      self._sync(kind)
    return self._index[kind]

  def refresh(self) -> None:
    """Forgets cached indices (call after another process wrote shards)."""
    self._index.clear()
    self._metas.clear()
    self._decl.clear()
    self._shards.clear()

  def ids(self, kind: str) -> list[str]:
    """All ids of `kind`, sorted."""
    return sorted(self._kind_index(kind))

  def has(self, kind: str, item_id: str) -> bool:
    return item_id in self._kind_index(kind)

  def __len__(self) -> int:
    return sum(len(self._kind_index(k)) for k in self.kinds())

  def _shard(self, kind: str, shard: str) -> tuple[np.ndarray, str, tuple[int, ...]]:
    """(memory-mapped on-disk array, storage dtype, per-item shape as read back). A shard is checked once, when
    first opened, against its id list (row count, dtype, shape, and the hash of its ids and rows, so rows moved to
    other ids are found before they are read), against the kind's other shards (one shape and dtype), and for finite
    values (`NonFiniteFeatureError` names the store, kind and ids)."""
    key = (kind, shard)
    if key not in self._shards:
      self._kind_index(kind)
      if key not in self._metas:
        self._sync(kind)
      ids, dtype, declared, digest = self._metas[key]
      where = f"feature store {self.root}: shard {kind}/{shard}"
      try:
        array = np.load(self.root / kind / (shard + ".npy"), mmap_mode="r")
      except (OSError, ValueError, EOFError) as e:
        raise ValueError(f"{where}: the array file {shard}.npy cannot be read ({e}); the shard is corrupt or "
                         "truncated (re-extract into a new store)") from None
      if array.ndim < 1 or array.shape[0] != len(ids):
        raise ValueError(f"{where}: {len(ids)} ids but an array of shape {array.shape}; the shard is corrupt "
                         "(re-extract into a new store)")
      if (array.dtype.kind, array.dtype.itemsize) != _ON_DISK[dtype] or not array.dtype.isnative:
        raise ValueError(f"{where}: {shard}.npy holds {array.dtype} values but its id list {shard}{_IDS_SUFFIX} "
                         f"declares {dtype} (stored as {np.dtype(_ON_DISK[dtype][0] + str(_ON_DISK[dtype][1]))}); "
                         "the shard is corrupt (re-extract into a new store)")
      shape = declared if declared is not None else tuple(array.shape[1:])
      if tuple(array.shape[1:]) != _stored_shape(dtype, shape):
        raise ValueError(f"{where}: {shard}.npy has rows of shape {list(array.shape[1:])} but its id list "
                         f"{shard}{_IDS_SUFFIX} declares {dtype} items of shape {list(shape)}; the shard is corrupt "
                         "(re-extract into a new store)")
      self._declare(kind, dtype, shape, f"shard {kind}/{shard}")
      h = _digest_of_ids(ids, dtype, shape)
      for rows in _row_chunks(array):
        part = np.ascontiguousarray(array[rows])
        check_finite(_from_storage(part, dtype, shape), ids[rows],
                     f"feature store {self.root}, kind {kind!r} (shard {shard})")
        h.update(part.data)
      if h.hexdigest() != digest:
        raise ValueError(f"{where}: {shard}.npy does not hold the rows its id list {shard}{_IDS_SUFFIX} was written "
                         f"with (the {DIGEST_KEY} of its ids and rows differs: rows edited, or ids reordered or "
                         "replaced); the shard is corrupt (re-extract into a new store)")
      self._shards[key] = (array, dtype, shape)
    return self._shards[key]

  def get(self, kind: str, ids: Sequence[str]) -> np.ndarray:
    """Returns float32 `[len(ids), *item_shape]`; raises `MissingFeatureError` naming missing ids."""
    names, shard, row = self.locate(kind, ids)
    if not len(ids):
      return np.zeros((0,) + self.item_shape(kind), np.float32)
    out = np.empty((len(ids),) + self.item_shape(kind), np.float32)
    for n, name in enumerate(names):
      sel = np.flatnonzero(shard == n)
      out[sel] = self.read_rows(kind, name, row[sel])
    return out

  def locate(self, kind: str, ids: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Where `ids` live: (shard names, shard number [N] into that list, row in the shard [N]).

    Raises `MissingFeatureError` naming the missing ids, like `get`.
    """
    index = self._kind_index(kind)
    missing = [i for i in ids if i not in index]
    if missing:
      shown = ", ".join(repr(m) for m in missing[:10]) + (" ..." if len(missing) > 10 else "")
      raise MissingFeatureError(
          f"feature store {self.root} has no {kind!r} features for {len(missing)} of {len(ids)} requested ids: "
          f"{shown} (the store holds {len(index)} {kind!r} ids)")
    names: dict[str, int] = {}
    shard = np.empty(len(ids), np.int64)
    row = np.empty(len(ids), np.int64)
    for n, item_id in enumerate(ids):
      name, r = index[item_id]
      shard[n] = names.setdefault(name, len(names))
      row[n] = r
    return list(names), shard, row

  def read_rows(self, kind: str, shard: str, rows: np.ndarray) -> np.ndarray:
    """float32 `[len(rows), *item_shape]` rows of one shard, read from its memory map."""
    array, dtype, shape = self._shard(kind, shard)
    return _from_storage(array[np.asarray(rows)], dtype, shape)

  def item_shape(self, kind: str) -> tuple[int, ...]:
    """Per-item shape of `kind` (every shard of a kind has it: a shard that differs is refused when opened)."""
    index = self._kind_index(kind)
    if not index:
      raise MissingFeatureError(f"feature store {self.root} has no {kind!r} features")
    shard, _ = next(iter(index.values()))
    return self._shard(kind, shard)[2]

  def storage_dtype(self, kind: str) -> str:
    """Storage dtype of `kind` (one of STORAGE_DTYPES, the same in every shard)."""
    self.item_shape(kind)  # a clear error when the kind is absent
    shard, _ = next(iter(self._kind_index(kind).values()))
    return self._shard(kind, shard)[1]

  def _signature(self, kind: str) -> tuple[str, tuple[int, ...], str] | None:
    """(storage dtype, item shape, the file that says so) of `kind`, or None while it holds nothing."""
    if not self._kind_index(kind):
      return None
    if kind not in self._decl:
      self.item_shape(kind)  # a shard without a declared shape: its array says
    return self._decl[kind]

  def get_one(self, kind: str, item_id: str) -> np.ndarray:
    return self.get(kind, [item_id])[0]

  def fingerprint(self) -> str:
    """A hash of what the store holds: every kind's committed shards (name, size, modification time) and the
    manifest. Writing, rewriting or re-extracting any shard changes it (what a dataset built from the store
    records, to refuse a stale build)."""
    h = hashlib.sha256()
    for kind in self.kinds():
      for f in sorted((self.root / kind).iterdir()):
        if f.suffix in (".npy", ".json"):
          st = f.stat()
          h.update(f"{kind}/{f.name} {st.st_size} {st.st_mtime_ns}\n".encode())
    h.update((self.root / MANIFEST).read_bytes())
    return h.hexdigest()[:16]

  def provenance(self) -> dict:
    """Where the features came from, as every real-path results.json records it: the backbone, its checkpoint
    (or `random_init: true`), the store's path and fingerprint."""
    m = self.metadata
    return {"backbone": m.get("backbone", ""), "checkpoint": m.get("checkpoint", ""),
            "checkpoint_hash": m.get("checkpoint_hash"), "random_init": m.get("random_init"),
            "store": str(self.root), "fingerprint": self.fingerprint()}

  def complete(self, kinds: Sequence[str], ids: Sequence[str]) -> set[str]:
    """The ids of `ids` that have an item of every kind in `kinds` and, where extraction recorded their frames
    (`padded_frames`), at least one decoded frame: a video that did not decode is not a valid video file."""
    have = set(ids)
    for kind in kinds:
      have &= set(self.ids(kind)) if kind in self.kinds() else set()
    if "padded_frames" in self.kinds():
      recorded = sorted(have & set(self.ids("padded_frames")))
      if recorded:
        failed = np.asarray(self.get("padded_frames", recorded)).reshape(len(recorded), -1).min(axis=1) > 0
        have -= {i for i, f in zip(recorded, failed) if f}
    return have

  # -- writing ---------------------------------------------------------------------------------
  def lock(self, name: str):
    """An exclusive lock on `<root>/.locks/<name>` (released when the process dies), for a file of the store that
    several processes update (e.g. the extraction's record of its inputs); a kind's writers hold `kind-<kind>`."""
    return _locked(self.root, _check_name(name, "lock name"))

  def writer(self, kind: str, shard_prefix: str = "p0", flush_every: int = 1024,
             dtype: str | None = None) -> "ShardWriter":
    """A buffered writer for `kind`; see `ShardWriter`."""
    return ShardWriter(self, kind, shard_prefix, flush_every, dtype or self.metadata.get("dtype", "float32"))

  def merge_manifest(self) -> dict:
    """Records every committed shard in the manifest (run once after all processes finished)."""
    shards = {k: sorted(p.name[: -len(_IDS_SUFFIX)] for p in (self.root / k).glob("*" + _IDS_SUFFIX))
              for k in self.kinds()}
    self.refresh()
    counts = {k: len(self._kind_index(k)) for k in shards}  # also checks ids are unique across shards
    self.update_metadata({"shards": shards, "counts": counts})
    return counts

  def remove(self, kind: str, ids: Iterable[str]) -> int:
    """Drops the items of `ids` that `kind` holds; returns how many (re-extracting a changed video: the store keeps
    one version of an item, so its old rows go first).

    Under the kind's lock, each shard holding one is read (and checked), its id list removed (the shard disappears
    whole) with its array file, and its other rows committed as a new shard of its prefix. A process killed in
    between loses at most those other rows of one shard, which the next extraction writes again (it fills in every
    id a kind lacks).
    """
    _check_name(kind, "feature kind")
    drop = set(ids)
    kdir = self.root / kind
    if not drop or not kdir.is_dir():
      return 0
    removed = 0
    with _locked(self.root, "kind-" + kind):
      self._forget(kind)
      index = self._sync(kind)
      shards = sorted({index[i][0] for i in drop if i in index})
      for shard in shards:
        array, dtype, shape = self._shard(kind, shard)
        shard_ids = self._metas[(kind, shard)][0]
        keep = [n for n, i in enumerate(shard_ids) if i not in drop]
        kept = np.array(array[keep])  # in memory: the file goes next
        prefix = re.fullmatch(r"(.+)-\d{5,}", shard)
        new = _next_shard_name(kdir, prefix.group(1) if prefix else shard)  # named while the old one is there
        (kdir / (shard + _IDS_SUFFIX)).unlink()
        (kdir / (shard + ".npy")).unlink(missing_ok=True)
        if keep:
          _commit_shard(kdir, new, [shard_ids[n] for n in keep], kept, dtype, shape)
        removed += len(shard_ids) - len(keep)
      self._forget(kind)
    return removed

  def upgrade(self) -> dict[str, int]:
    """Records `DIGEST_KEY` in every id list that lacks it (a store written before vidjax issue 62, whose id lists
    hashed their rows only, as "sha256"), after checking the shard's rows against that hash; a shard without one
    cannot be vouched for and is refused (re-extract it). Returns {kind: shards upgraded}."""
    upgraded: dict[str, int] = {}
    kinds = sorted(p.name for p in self.root.iterdir() if p.is_dir() and _PLAIN_NAME.fullmatch(p.name)
                   and any(p.glob("*" + _IDS_SUFFIX)))
    for kind in kinds:
      kdir = self.root / kind
      with _locked(self.root, "kind-" + kind):
        for path in sorted(kdir.glob("*" + _IDS_SUFFIX)):
          meta = io.read_json(path, "feature shard id list")
          if not isinstance(meta, dict) or DIGEST_KEY in meta:
            continue
          shard = path.name[: -len(_IDS_SUFFIX)]
          where = f"feature store {self.root}: shard {kind}/{shard}"
          if not isinstance(meta.get("sha256"), str):
            raise ValueError(f"{where}: its id list records no hash of its rows, so its rows cannot be checked before "
                             "the new hash vouches for them; re-extract into a new store")
          array = np.load(kdir / (shard + ".npy"), mmap_mode="r")
          h = hashlib.sha256()
          for rows in _row_chunks(array):
            h.update(np.ascontiguousarray(array[rows]).data)
          if h.hexdigest() != meta["sha256"]:
            raise ValueError(f"{where}: {shard}.npy does not hold the rows its id list was written with (their "
                             "sha256 differs); the shard is corrupt (re-extract into a new store)")
          dtype = meta.get("dtype", "float32")
          shape = meta["shape"] if meta.get("shape") is not None else list(array.shape[1:])
          meta = {k: v for k, v in meta.items() if k != "sha256"}
          meta[DIGEST_KEY] = _digest(meta.get("ids", []), dtype, shape, array)
          io.atomic_write_json(path, meta, indent=None)
          upgraded[kind] = upgraded.get(kind, 0) + 1
    self.refresh()
    return upgraded

  def verify(self) -> dict:
    """Checks every shard: ids match rows, shapes and dtypes agree with the id list and within a kind, the ids and
    rows are the ones the id list was written with, in that order (its `DIGEST_KEY`), values finite.

    Returns `{kind: {"items": n, "shape": [...], "shards": k}}`; raises ValueError naming the first problem.
    """
    self.refresh()
    report = {}
    for kind in self.kinds():
      index = self._kind_index(kind)
      shapes = set()
      shards = sorted(s for k, s in self._metas if k == kind)
      for shard in shards:
        npy = self.root / kind / (shard + ".npy")
        if not npy.exists():
          raise ValueError(f"feature store {self.root}: shard {kind}/{shard} has ids but no array file {npy.name}")
        array, dtype, shape = self._shard(kind, shard)  # checks its rows and ids against their hash
        if not np.all(np.isfinite(_from_storage(array, dtype, shape))):
          raise ValueError(f"feature store {self.root}: shard {kind}/{shard} contains NaN or Inf")
        shapes.add(shape)
      if len(shapes) > 1:
        raise ValueError(f"feature store {self.root}: kind {kind!r} mixes item shapes {sorted(shapes)}")
      report[kind] = {"items": len(index), "shape": list(shapes.pop()) if shapes else [], "shards": len(shards)}
    return report


def _read_manifest(root: Path) -> dict:
  path = root / MANIFEST
  metadata = io.read_json(path, "feature store manifest")
  if not isinstance(metadata, dict):
    raise ValueError(f"feature store manifest {path} holds a JSON {type(metadata).__name__}, expected an object "
                     "(the store's metadata: backbone, dtype, ...); the manifest is corrupt")
  return metadata


def _quantized(array: np.ndarray, dtype: str) -> np.ndarray:
  """`array` as it reads back after storage as `dtype`."""
  return _from_storage(_to_storage(array[None], dtype), dtype, array.shape)[0]


class ShardWriter:
  """Buffers (id, array) pairs and commits them as numbered shards `<prefix>-<00000>`.

  An id already in the store is skipped when its values are the ones stored (so re-running a killed job resumes
  where it stopped) and refused with `StaleFeatureError` when they differ: a store never keeps old values silently
  (write changed features into a new store). Non-finite values are refused (`NonFiniteFeatureError`), and so are
  values that are not real numbers and items whose shape or dtype differ from the kind's.
  Writers in several processes may write one kind at once (with the same or different prefixes): each flush holds
  the kind's lock, and an id another writer committed meanwhile is skipped (same values) or refused (others).
  Use as a context manager; leaving the block flushes the remainder.
  """

  def __init__(self, store: FeatureStore, kind: str, shard_prefix: str, flush_every: int, dtype: str):
    _check_name(kind, "feature kind")
    _check_name(shard_prefix, "shard_prefix")
    self.store, self.kind, self.prefix, self.flush_every, self.dtype = store, kind, shard_prefix, flush_every, dtype
    _to_storage(np.zeros(1), dtype)  # validates dtype early
    try:
      with _locked(store.root, "kind-" + kind):
        self._clean()
    except OSError:  # a store this process cannot write: the first flush says so, naming the file
      pass
    self._ids: list[str] = []
    self._arrays: list[np.ndarray] = []
    self._pending: set[str] = set()
    self.written = 0

  def _clean(self) -> None:
    """Removes what a killed writer of this prefix left (call under the kind's lock, so no live writer's files are
    in flight): a shard is committed by its id list, written last, so an array file without one is an orphan no
    reader sees, and a `.<shard>.npy.*.tmp` / `.<shard>.ids.json.*.tmp` file is a write that never finished. A
    shard is on disk whole or not at all. Other prefixes' files are left to their writers (on a file system whose
    locks do not reach other hosts, each host writes its own prefix)."""
    kdir = self.store.root / self.kind
    if not kdir.is_dir():
      return
    mine = re.compile(rf"{re.escape(self.prefix)}-\d{{5,}}")
    for f in sorted(kdir.iterdir()):
      name = f.name
      if name.startswith(".") and name.endswith(".tmp"):
        shard = re.sub(r"\.(npy|ids\.json)\.[^.]*\.tmp$", "", name[1:])
        if shard != name[1:] and mine.fullmatch(shard):
          f.unlink(missing_ok=True)
      elif name.endswith(".npy") and mine.fullmatch(name[:-len(".npy")]) and \
          not (kdir / (name[:-len(".npy")] + _IDS_SUFFIX)).exists():
        f.unlink(missing_ok=True)

  def __enter__(self):
    return self

  def __exit__(self, exc_type, exc, tb):
    if exc_type is None:
      self.flush()

  def _where(self) -> str:
    return f"feature store {self.store.root}, kind {self.kind!r}"

  def _refuse_if_differs(self, item_id: str, old: np.ndarray, new: np.ndarray) -> None:
    if old.shape != new.shape or not np.array_equal(old, new):
      raise StaleFeatureError(f"{self._where()}: id {item_id!r} is already stored with other values; a store does "
                              "not keep two versions of an item: write the changed features into a new store (or "
                              "delete the old kind first)")

  def _check_kind(self, shape: tuple[int, ...]) -> None:
    """Refuses items of another shape or storage dtype than the kind already holds."""
    sig = self.store._signature(self.kind)
    if sig is not None and sig[:2] != (self.dtype, tuple(shape)):
      raise ValueError(f"{self._where()}: this writer stores {self.dtype} items of shape {list(shape)} but the kind "
                       f"holds {sig[0]} items of shape {list(sig[1])} ({sig[2]}); a kind holds one shape and one "
                       "dtype: write these as another kind, or into a new store")

  def add(self, item_id: str, array: np.ndarray) -> bool:
    """Queues one item; returns False (and does nothing) if the id is already stored or queued with these values."""
    if not isinstance(item_id, (str, np.str_)):  # never str(): None, 5 or b"a" would become an id nobody wrote
      raise ValueError(f"{self._where()}: id {item_id!r} is a {type(item_id).__name__}; ids are non-empty strings")
    item_id = str(item_id)
    if _id_problem(item_id):
      raise ValueError(f"{self._where()}: id {item_id[:80]!r} is {_id_problem(item_id)}; ids are non-empty strings")
    array = np.asarray(array)
    if array.dtype.kind not in "biuf":
      why = " (storing them would drop the imaginary part)" if array.dtype.kind == "c" else ""
      raise ValueError(f"{self._where()}: id {item_id!r}: features must be real numbers, got an array of dtype "
                       f"{array.dtype}{why}")
    check_finite(array[None], [item_id], self._where())
    if self.dtype == "bfloat16" and not np.all(np.isfinite(_quantized(array, self.dtype))):
      raise ValueError(f"{self._where()}: id {item_id!r}: a value of magnitude {float(np.max(np.abs(array))):.3g} "
                       "overflows bfloat16 (largest finite 3.39e38): store the kind as float32")
    if item_id in self._pending or self.store.has(self.kind, item_id):
      if item_id in self._pending:
        old = _quantized(self._arrays[self._ids.index(item_id)], self.dtype)
      else:
        old = self.store.get_one(self.kind, item_id)
      self._refuse_if_differs(item_id, old, _quantized(array, self.dtype))
      return False
    if self._arrays and array.shape != self._arrays[0].shape:
      raise ValueError(f"feature {self.kind}/{item_id}: shape {array.shape} differs from {self._arrays[0].shape}")
    if not self._arrays:
      self._check_kind(array.shape)
    self._ids.append(item_id)
    self._arrays.append(array)
    self._pending.add(item_id)
    if len(self._ids) >= self.flush_every:
      self.flush()
    return True

  def flush(self) -> None:
    if not self._ids:
      return
    kdir = self.store.root / self.kind
    kdir.mkdir(parents=True, exist_ok=True)
    with _locked(self.store.root, "kind-" + self.kind):
      self._clean()
      self.store._sync(self.kind)  # shards other writers committed since this one started
      keep = []
      for n, item_id in enumerate(self._ids):
        if self.store.has(self.kind, item_id):  # another writer committed it meanwhile
          self._refuse_if_differs(item_id, self.store.get_one(self.kind, item_id),
                                  _quantized(self._arrays[n], self.dtype))
        else:
          keep.append(n)
      if keep:
        ids = [self._ids[n] for n in keep]
        stacked = np.stack([self._arrays[n] for n in keep])
        self._check_kind(stacked.shape[1:])
        _commit_shard(kdir, _next_shard_name(kdir, self.prefix), ids, _to_storage(stacked, self.dtype), self.dtype,
                      stacked.shape[1:])
        self.store._sync(self.kind)  # reads the new shard into the index
        self.written += len(ids)
    self._ids, self._arrays, self._pending = [], [], set()


def _next_shard_name(kdir: Path, prefix: str) -> str:
  """The first `<prefix>-<n>` (n of 5 digits) that no id list of the kind folder `kdir` uses (listed by name, never by
  a glob pattern); call under the kind's lock."""
  taken = {p.name[: -len(_IDS_SUFFIX)] for p in kdir.iterdir() if p.name.endswith(_IDS_SUFFIX)} if kdir.exists() \
      else set()
  n = 0
  while f"{prefix}-{n:05d}" in taken:
    n += 1
  return f"{prefix}-{n:05d}"


def _commit_shard(kdir: Path, shard: str, ids: Sequence[str], stored: np.ndarray, dtype: str,
                  shape: Sequence[int]) -> None:
  """Writes a shard (call under the kind's lock): its array, then its id list with `DIGEST_KEY`, which commits it."""
  npy = kdir / (shard + ".npy")
  io.atomic_save_npy(npy, stored)
  try:
    shape = [int(d) for d in shape]
    io.atomic_write_json(kdir / (shard + _IDS_SUFFIX), {"ids": list(ids), "dtype": dtype, "shape": shape,
                                                         DIGEST_KEY: _digest(ids, dtype, shape, stored)}, indent=None)
  except BaseException:
    npy.unlink(missing_ok=True)  # not committed: leave no orphan behind
    raise


def _read_id_list(path: Path) -> list[str]:
  """One id a line (`.txt`, UTF-8; a leading byte order mark is ignored) or a JSON list of strings."""
  if not path.exists():
    raise FileNotFoundError(f"id list not found: {path}")
  if path.suffix == ".json":
    ids = io.read_json(path, "id list")
    if not isinstance(ids, list):
      raise ValueError(f"id list {path} must be a JSON list of strings, got a JSON {type(ids).__name__}")
    for n, item_id in enumerate(ids):
      if not isinstance(item_id, str) or not item_id:
        raise ValueError(f"id list {path}: entry #{n} is {item_id!r} ({type(item_id).__name__}); ids are non-empty "
                         "strings (write \"0\", not 0)")
    return ids
  try:
    text = path.read_bytes().decode("utf-8-sig")
  except UnicodeDecodeError as e:
    raise ValueError(f"id list {path} is not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8") from None
  return [line.strip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n") if line.strip()]


def _load_array(array_path: Path, array_key: str | None) -> np.ndarray:
  """The array of an `.npy`, or one array of an `.npz`, checked: one row per item, real numbers."""
  try:
    if array_path.suffix == ".npz":
      with np.load(array_path, allow_pickle=False) as z:
        keys = list(z.keys())
        if array_key is None:
          if len(keys) != 1:
            raise ValueError(f"{array_path} holds arrays {keys}; pass array_key to choose one")
          array_key = keys[0]
        if array_key not in keys:
          raise KeyError(f"{array_path} has no array {array_key!r} (it has {keys})")
        array = z[array_key]
    else:
      array = np.load(array_path, allow_pickle=False)
  except (OSError, EOFError, zipfile.BadZipFile) as e:
    raise ValueError(f"array file {array_path} cannot be read ({e}); is it truncated, or not an .npy / .npz "
                     "file?") from None
  except ValueError as e:
    if str(array_path) in str(e):
      raise
    raise ValueError(f"array file {array_path} cannot be read ({e}); is it truncated, not an .npy / .npz file, or "
                     "an array of Python objects (never loaded)?") from None
  if not isinstance(array, np.ndarray):
    array.close()
    raise ValueError(f"array file {array_path} is an .npz archive, not an .npy array: name it .npz (and pass "
                     "array_key / --key when it holds several arrays)")
  if array.ndim == 0:
    raise ValueError(f"array file {array_path} holds a single value (a 0-d array); expected one row per id, [N, ...]")
  if array.dtype.kind not in "biuf":
    why = " (the imaginary part would be dropped)" if array.dtype.kind == "c" else ""
    raise ValueError(f"array file {array_path} holds {array.dtype} values{why}; a feature store keeps real numbers")
  return array


def import_arrays(root: str | os.PathLike, kind: str, array_path: str | os.PathLike,
                  ids: str | os.PathLike | Iterable[str], array_key: str | None = None,
                  metadata: dict | None = None, dtype: str = "float32") -> FeatureStore:
  """Imports an `.npy` array (or one array of an `.npz`) with one id per row into a store.

  Args:
    root: store directory (created when missing).
    kind: e.g. "clip" or "text".
    array_path: `.npy` file `[N, ...]`, or `.npz` file (then `array_key` picks the array; defaults to
      its only array).
    ids: a `.txt` (one id a line) or `.json` (list of strings) file, or an iterable of N ids.
  """
  _check_name(kind, "feature kind")
  array_path = Path(array_path)
  if not array_path.exists():
    raise FileNotFoundError(f"array file not found: {array_path}")
  array = _load_array(array_path, array_key)
  from_file = isinstance(ids, (str, os.PathLike))
  id_list = _read_id_list(Path(ids)) if from_file else [str(i) for i in ids]
  source = f"the id list {ids}" if from_file else "the id list"
  if len(id_list) != array.shape[0]:
    raise ValueError(f"{array_path} has {array.shape[0]} rows but {source} has {len(id_list)} ids")
  if len(set(id_list)) != len(id_list):
    seen: set[str] = set()
    twice = sorted({i for i in id_list if i in seen or seen.add(i)})
    raise ValueError(f"{source} for {array_path} names {len(twice)} ids more than once: {_ids_shown(twice)}")
  if metadata is None and (Path(root) / MANIFEST).exists():  # another kind into an existing store: its manifest stays
    store = FeatureStore(root)
  else:
    store = FeatureStore.create(root, metadata or {"source": str(array_path)})
  with store.writer(kind, shard_prefix="import", flush_every=max(1, len(id_list)), dtype=dtype) as w:
    for item_id, row in zip(id_list, array):
      w.add(item_id, row)
  return store


def write_arrays(root: str | os.PathLike, arrays: dict[str, tuple[Sequence[str], np.ndarray]],
                 metadata: dict | None = None, dtype: str = "float32") -> FeatureStore:
  """Writes `{kind: (ids, array [N, ...])}` into a (new or existing) store in one call."""
  store = FeatureStore.create(root, metadata)
  for kind, (ids, array) in arrays.items():
    with store.writer(kind, flush_every=max(1, len(ids)), dtype=dtype) as w:
      for item_id, row in zip(ids, np.asarray(array)):
        w.add(item_id, row)
  return store


def main(argv: Sequence[str] | None = None) -> int:
  """Command line: integrity check, shard merge and array import.

      python -m vidjax.data.features verify STORE            # exit 1 with the problem on corruption
      python -m vidjax.data.features merge STORE             # record all shards in the manifest (multi-host)
      python -m vidjax.data.features upgrade STORE           # hash ids and rows together (stores before issue 62)
      python -m vidjax.data.features import STORE KIND ARRAY.npy|.npz IDS.txt|.json [--key NAME]
  """
  import argparse
  parser = argparse.ArgumentParser(prog="python -m vidjax.data.features", description=main.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = parser.add_subparsers(dest="command", required=True)
  sub.add_parser("verify").add_argument("store")
  sub.add_parser("merge").add_argument("store")
  sub.add_parser("upgrade").add_argument("store")
  imp = sub.add_parser("import")
  for name in ("store", "kind", "array", "ids"):
    imp.add_argument(name)
  imp.add_argument("--key", default=None, help="array name inside an .npz")
  args = parser.parse_args(argv)
  try:
    if args.command == "import":
      store = import_arrays(args.store, args.kind, args.array, args.ids, array_key=args.key)
      print(json.dumps({"imported": len(store.ids(args.kind)), "kind": args.kind, "store": args.store}))
    elif args.command == "merge":
      print(json.dumps({"counts": FeatureStore(args.store).merge_manifest()}))
    elif args.command == "upgrade":
      store = FeatureStore(args.store)
      print(json.dumps({"upgraded_shards": store.upgrade(), "verify": store.verify()}, sort_keys=True))
    else:
      print(json.dumps(FeatureStore(args.store).verify(), indent=1, sort_keys=True))
  except (OSError, ValueError, KeyError) as e:
    message = e.args[0] if isinstance(e, KeyError) and type(e).__str__ is KeyError.__str__ and e.args else e
    print(f"feature store error: {message}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
