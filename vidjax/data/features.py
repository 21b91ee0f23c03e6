"""Feature store: frozen-backbone embeddings keyed by id, on disk, lazy and resumable.

Every method in vidjax reads its inputs from a feature store; `vidjax/extract.py` writes one
(VideoPrism), and `import_arrays` turns any `.npy` / `.npz` array plus an id list into one.

Layout of one store (one directory per backbone)::

    <root>/manifest.json                  metadata: backbone, checkpoint hash, frames, resolution, dtype, ...
    <root>/<kind>/<shard>.npy             array [n, ...] (bfloat16 / float8_e4m3 as their uint16 / uint8 bit
                                          patterns; float4_e2m1 as two codes a byte, [n, ceil(items / 2)])
    <root>/<kind>/<shard>.ids.json        {"ids": [n ids], "dtype": one of STORAGE_DTYPES, "shape": [...]}

A *kind* is one family of arrays with one per-item shape, e.g. ``clip`` ([D] clip embeddings),
``text`` ([D] caption embeddings), ``tokens`` ([T, N, D] per-frame patch tokens). A shard is
committed by writing its ``.ids.json`` last (both files atomically), so a shard without ids is
invisible and a killed writer loses only its unflushed buffer. Shards written by different
processes (``shard_prefix``) live side by side; reading merges them by their id files, and
`FeatureStore.merge_manifest` records the merged shard list for multi-host runs.

Interface (all a consumer needs)::

    store = FeatureStore(root)                 # open (raises if root has no manifest)
    store.get("clip", ["vid_0001_03", ...])    # -> np.float32 [N, D]; one clear error naming missing ids
    store.ids("text"); store.has("clip", id); store.kinds(); store.metadata
    store = FeatureStore.create(root, {"backbone": ...})
    with store.writer("clip", shard_prefix="p0") as w:  w.add(id, array)   # resumable: skip store.has(...)
    import_arrays(root, kind, "emb.npy", "ids.txt")
    store.verify()                             # integrity report, raises on corruption
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Iterable, Sequence

import ml_dtypes
import numpy as np

from vidjax import io
from vidjax.ops import pack_fp4, quantize_dequantize, unpack_fp4

MANIFEST = "manifest.json"
_IDS_SUFFIX = ".ids.json"


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


def _ids_shown(ids: Sequence[str], limit: int = 5) -> str:
  return ", ".join(repr(str(i)) for i in list(ids)[:limit]) + (f" ... ({len(ids)} in all)" if len(ids) > limit else "")


def check_finite(array: np.ndarray, ids: Sequence[str], where: str) -> None:
  """Raises `NonFiniteFeatureError` naming `where` and the ids (first few + count) of rows [N, ...] with NaN / Inf."""
  bad = ~np.isfinite(np.asarray(array, np.float32).reshape(len(ids), -1)).all(axis=1)
  if bad.any():
    rows = [ids[i] for i in np.flatnonzero(bad)]
    raise NonFiniteFeatureError(f"{where}: {len(rows)} of {len(ids)} items hold NaN or Inf: {_ids_shown(rows)}; "
                                "re-extract them (or drop them from the annotations)")


class FeatureStore:
  """Random-access store of arrays keyed by (kind, id); see the module docstring for the layout."""

  def __init__(self, root: str | os.PathLike):
    self.root = Path(root)
    manifest = self.root / MANIFEST
    if not manifest.exists():
      raise FileNotFoundError(
          f"no feature store at {self.root} (missing {MANIFEST}); create one with "
          "FeatureStore.create(...), vidjax.data.features.import_arrays(...) or the extract_videoprism config")
    self.metadata = io.read_json(manifest, "feature store manifest")
    self._index: dict[str, dict[str, tuple[str, int]]] = {}
    self._shards: dict[tuple[str, str], tuple[np.ndarray, str]] = {}

  # -- creation --------------------------------------------------------------------------------
  @classmethod
  def create(cls, root: str | os.PathLike, metadata: dict | None = None, exist_ok: bool = True) -> "FeatureStore":
    """Creates (or reopens, when `exist_ok`) a store with `metadata` written to its manifest."""
    root = Path(root)
    manifest = root / MANIFEST
    if manifest.exists():
      if not exist_ok:
        raise FileExistsError(f"feature store already exists at {root}")
      store = cls(root)
      if metadata:
        store.update_metadata(metadata)
      return store
    io.atomic_write_json(manifest, dict(metadata or {}))
    return cls(root)

  def update_metadata(self, metadata: dict) -> None:
    """Merges `metadata` into the manifest (atomic)."""
    self.metadata.update(metadata)
    io.atomic_write_json(self.root / MANIFEST, self.metadata)

  # -- reading ---------------------------------------------------------------------------------
  def kinds(self) -> list[str]:
    return sorted(p.name for p in self.root.iterdir() if p.is_dir() and any(p.glob("*" + _IDS_SUFFIX)))

  def _kind_index(self, kind: str) -> dict[str, tuple[str, int]]:
    if kind not in self._index:
      index: dict[str, tuple[str, int]] = {}
      kdir = self.root / kind
      for ids_file in sorted(kdir.glob("*" + _IDS_SUFFIX)) if kdir.is_dir() else []:
        shard = ids_file.name[: -len(_IDS_SUFFIX)]
        meta = io.read_json(ids_file, "feature shard id list")
        if not isinstance(meta, dict) or not isinstance(meta.get("ids"), list):
          raise ValueError(f"feature store {self.root}: shard {kind}/{shard}: its id list {ids_file.name} has no "
                           "'ids' list; the shard is corrupt (re-extract into a new store)")
        for row, item_id in enumerate(meta["ids"]):
          if item_id in index:
            raise ValueError(f"feature store {self.root}: id {item_id!r} of kind {kind!r} is in two shards "
                             f"({index[item_id][0]} and {shard})")
          index[item_id] = (shard, row)
      self._index[kind] = index
    return self._index[kind]

  def refresh(self) -> None:
    """Forgets cached indices (call after another process wrote shards)."""
    self._index.clear()
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
    first opened: its values must be finite (`NonFiniteFeatureError` names the store, kind and ids)."""
    key = (kind, shard)
    if key not in self._shards:
      where = f"feature store {self.root}: shard {kind}/{shard}"
      meta = io.read_json(self.root / kind / (shard + _IDS_SUFFIX), "feature shard id list")
      if not isinstance(meta, dict) or not isinstance(meta.get("ids"), list):
        raise ValueError(f"{where}: its id list {shard + _IDS_SUFFIX} has no 'ids' list; the shard is corrupt "
                         "(re-extract into a new store)")
      try:
        array = np.load(self.root / kind / (shard + ".npy"), mmap_mode="r")
      except (OSError, ValueError, EOFError) as e:
        raise ValueError(f"{where}: the array file {shard}.npy cannot be read ({e}); the shard is corrupt or "
                         "truncated (re-extract into a new store)") from None
      if array.ndim < 1 or array.shape[0] != len(meta["ids"]):
        raise ValueError(f"{where}: {len(meta['ids'])} ids but an array of shape {array.shape}; the shard is corrupt "
                         "(re-extract into a new store)")
      dtype, shape = meta.get("dtype", "float32"), tuple(meta.get("shape", array.shape[1:]))
      for start in range(0, array.shape[0], 4096):  # bounded memory on a large memory-mapped shard
        check_finite(_from_storage(array[start:start + 4096], dtype, shape), meta["ids"][start:start + 4096],
                     f"feature store {self.root}, kind {kind!r} (shard {shard})")
      self._shards[key] = (array, dtype, shape)
    return self._shards[key]

  def get(self, kind: str, ids: Sequence[str]) -> np.ndarray:
    """Returns float32 `[len(ids), *item_shape]`; raises `MissingFeatureError` naming missing ids."""
    names, shard, row = self.locate(kind, ids)
    if not len(ids):
      return np.zeros((0,), np.float32)
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
    """Per-item shape of `kind` (from its first shard)."""
    index = self._kind_index(kind)
    if not index:
      raise MissingFeatureError(f"feature store {self.root} has no {kind!r} features")
    shard, _ = next(iter(index.values()))
    return self._shard(kind, shard)[2]

  def storage_dtype(self, kind: str) -> str:
    """Storage dtype of `kind` (one of STORAGE_DTYPES, from its first shard)."""
    self.item_shape(kind)  # a clear error when the kind is absent
    shard, _ = next(iter(self._kind_index(kind).values()))
    return self._shard(kind, shard)[1]

  def get_one(self, kind: str, item_id: str) -> np.ndarray:
    return self.get(kind, [item_id])[0]

  def fingerprint(self) -> str:
    """A hash of what the store holds: every kind's committed shards (name, size, modification time) and the
    manifest. Writing, rewriting or re-extracting any shard changes it (what a dataset built from the store
    records, to refuse a stale build)."""
    import hashlib  # pylint: disable=g-import-not-at-top
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

  def verify(self) -> dict:
    """Checks every shard: ids match rows, shapes agree within a kind, values finite.

    Returns `{kind: {"items": n, "shape": [...], "shards": k}}`; raises ValueError naming the first problem.
    """
    self.refresh()
    report = {}
    for kind in self.kinds():
      shapes = set()
      n_shards = 0
      for ids_file in sorted((self.root / kind).glob("*" + _IDS_SUFFIX)):
        shard = ids_file.name[: -len(_IDS_SUFFIX)]
        npy = self.root / kind / (shard + ".npy")
        if not npy.exists():
          raise ValueError(f"feature store {self.root}: shard {kind}/{shard} has ids but no array file {npy.name}")
        array, dtype, shape = self._shard(kind, shard)
        n_ids = len(io.read_json(ids_file)["ids"])
        if array.shape[0] != n_ids:
          raise ValueError(f"feature store {self.root}: shard {kind}/{shard} has {n_ids} ids but {array.shape[0]} rows")
        if not np.all(np.isfinite(_from_storage(array, dtype, shape))):
          raise ValueError(f"feature store {self.root}: shard {kind}/{shard} contains NaN or Inf")
        shapes.add(shape)
        n_shards += 1
      if len(shapes) > 1:
        raise ValueError(f"feature store {self.root}: kind {kind!r} mixes item shapes {sorted(shapes)}")
      report[kind] = {"items": len(self._kind_index(kind)), "shape": list(shapes.pop()) if shapes else [],
                      "shards": n_shards}
    return report


class ShardWriter:
  """Buffers (id, array) pairs and commits them as numbered shards `<prefix>-<00000>`.

  An id already in the store is skipped when its values are the ones stored (so re-running a killed job resumes
  where it stopped) and refused with `StaleFeatureError` when they differ: a store never keeps old values silently
  (write changed features into a new store). Non-finite values are refused (`NonFiniteFeatureError`).
  Use as a context manager; leaving the block flushes the remainder.
  """

  def __init__(self, store: FeatureStore, kind: str, shard_prefix: str, flush_every: int, dtype: str):
    if "/" in shard_prefix or not shard_prefix:
      raise ValueError(f"shard_prefix must be a plain non-empty name, got {shard_prefix!r}")
    self.store, self.kind, self.prefix, self.flush_every, self.dtype = store, kind, shard_prefix, flush_every, dtype
    _to_storage(np.zeros(1), dtype)  # validates dtype early
    # A shard is committed by its id list, written last: an array file without one is what a killed writer
    # left (no reader sees it). Remove such orphans, so that a shard is on disk whole or not at all.
    kdir = store.root / kind
    for npy in sorted(kdir.glob(f"{shard_prefix}-*.npy")) if kdir.is_dir() else []:
      if not (kdir / (npy.name[:-len(".npy")] + _IDS_SUFFIX)).exists():
        npy.unlink()
    self._ids: list[str] = []
    self._arrays: list[np.ndarray] = []
    self._pending: set[str] = set()
    self.written = 0

  def __enter__(self):
    return self

  def __exit__(self, exc_type, exc, tb):
    if exc_type is None:
      self.flush()

  def add(self, item_id: str, array: np.ndarray) -> bool:
    """Queues one item; returns False (and does nothing) if the id is already stored or queued with these values."""
    item_id = str(item_id)
    array = np.asarray(array)
    where = f"feature store {self.store.root}, kind {self.kind!r}"
    check_finite(array[None], [item_id], where)
    if item_id in self._pending or self.store.has(self.kind, item_id):
      if item_id in self._pending:
        old = _from_storage(_to_storage(self._arrays[self._ids.index(item_id)][None], self.dtype), self.dtype,
                            self._arrays[0].shape)[0]
      else:
        old = self.store.get_one(self.kind, item_id)
      new = _from_storage(_to_storage(array[None], self.dtype), self.dtype, array.shape)[0]
      if old.shape != new.shape or not np.array_equal(old, new):
        raise StaleFeatureError(f"{where}: id {item_id!r} is already stored with other values; a store does not "
                                "keep two versions of an item: write the changed features into a new store (or "
                                "delete the old kind first)")
      return False
    if self._arrays and array.shape != self._arrays[0].shape:
      raise ValueError(f"feature {self.kind}/{item_id}: shape {array.shape} differs from {self._arrays[0].shape}")
    self._ids.append(item_id)
    self._arrays.append(array)
    self._pending.add(item_id)
    if len(self._ids) >= self.flush_every:
      self.flush()
    return True

  def _next_shard_name(self) -> str:
    kdir = self.store.root / self.kind
    taken = {p.name[: -len(_IDS_SUFFIX)] for p in kdir.glob(f"{self.prefix}-*{_IDS_SUFFIX}")} if kdir.exists() else set()
    n = 0
    while f"{self.prefix}-{n:05d}" in taken:
      n += 1
    return f"{self.prefix}-{n:05d}"

  def flush(self) -> None:
    if not self._ids:
      return
    kdir = self.store.root / self.kind
    kdir.mkdir(parents=True, exist_ok=True)
    shard = self._next_shard_name()
    stacked = np.stack(self._arrays)
    io.atomic_save_npy(kdir / (shard + ".npy"), _to_storage(stacked, self.dtype))
    io.atomic_write_json(kdir / (shard + _IDS_SUFFIX),
                         {"ids": self._ids, "dtype": self.dtype, "shape": list(stacked.shape[1:])}, indent=None)
    index = self.store._kind_index(self.kind)
    for row, item_id in enumerate(self._ids):
      index[item_id] = (shard, row)
    self.written += len(self._ids)
    self._ids, self._arrays, self._pending = [], [], set()


def _read_id_list(path: Path) -> list[str]:
  if path.suffix == ".json":
    ids = io.read_json(path, "id list")
    if not isinstance(ids, list):
      raise ValueError(f"id list {path} must be a JSON list of strings")
    return [str(i) for i in ids]
  with open(path, encoding="utf-8") as f:
    return [line.strip() for line in f if line.strip()]


def import_arrays(root: str | os.PathLike, kind: str, array_path: str | os.PathLike,
                  ids: str | os.PathLike | Iterable[str], array_key: str | None = None,
                  metadata: dict | None = None, dtype: str = "float32") -> FeatureStore:
  """Imports an `.npy` array (or one array of an `.npz`) with one id per row into a store.

  Args:
    root: store directory (created when missing).
    kind: e.g. "clip" or "text".
    array_path: `.npy` file `[N, ...]`, or `.npz` file (then `array_key` picks the array; defaults to
      its only array).
    ids: a `.txt` (one id a line) or `.json` (list) file, or an iterable of N ids.
  """
  array_path = Path(array_path)
  if not array_path.exists():
    raise FileNotFoundError(f"array file not found: {array_path}")
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
  id_list = _read_id_list(Path(ids)) if isinstance(ids, (str, os.PathLike)) else [str(i) for i in ids]
  if len(id_list) != array.shape[0]:
    raise ValueError(f"{array_path} has {array.shape[0]} rows but the id list has {len(id_list)} ids")
  if len(set(id_list)) != len(id_list):
    raise ValueError(f"id list for {array_path} contains duplicate ids")
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
      python -m vidjax.data.features import STORE KIND ARRAY.npy|.npz IDS.txt|.json [--key NAME]
  """
  import argparse
  parser = argparse.ArgumentParser(prog="python -m vidjax.data.features", description=main.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = parser.add_subparsers(dest="command", required=True)
  sub.add_parser("verify").add_argument("store")
  sub.add_parser("merge").add_argument("store")
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
    else:
      print(json.dumps(FeatureStore(args.store).verify(), indent=1, sort_keys=True))
  except (OSError, ValueError, KeyError) as e:
    print(f"feature store error: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
