"""What vidjax's TFDS builders share: the tfds import, source hashes, embeddings, building and reading.

No TensorFlow: `tensorflow-datasets` builds `GeneratorBasedBuilder`s to `array_record` files and reads
them back with `as_data_source` without it (tests/test_tfds.py asserts that `tensorflow` is never
imported). Install with `pip install -e ".[tfds]"`.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

try:
  import tensorflow_datasets as tfds
except ImportError as e:  # pragma: no cover - exercised only without the extra
  raise ImportError("vidjax's TFDS builders need tensorflow-datasets (TensorFlow is NOT needed): "
                    "pip install -e '.[tfds]'   (or: pip install tensorflow-datasets importlib_resources)") from e

from vidjax.data.features import FeatureStore
from vidjax.data.pipeline import FeatureTable

FILE_FORMAT = "array_record"
# Store manifest fields copied into every dataset's `info.metadata["features"]`.
MANIFEST_FIELDS = ("backbone", "checkpoint", "checkpoint_hash", "synthetic", "random_init")


class Builder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """vidjax's builders write `array_record` (random access through `as_data_source`, no TensorFlow) by default."""

  def __init__(self, *, file_format: str = FILE_FORMAT, **kwargs):
    super().__init__(file_format=file_format, **kwargs)

  @staticmethod
  def manual_dir(dl_manager) -> Path | None:
    """`dl_manager.manual_dir`, or None when none (or an empty one) was given."""
    try:
      return Path(dl_manager.manual_dir)
    except (AssertionError, ValueError):  # tfds: no manual_dir, or an empty one
      return None


def sha256(path: str | os.PathLike) -> str:
  """SHA-256 of a file, or of a folder (its files' relative paths and bytes, in sorted order)."""
  path = Path(path)
  h = hashlib.sha256()
  files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
  for f in files:
    if path.is_dir():
      h.update(str(f.relative_to(path)).encode() + b"\0")
    with open(f, "rb") as fh:
      for block in iter(lambda: fh.read(1 << 20), b""):
        h.update(block)
  return h.hexdigest()


def source_path(given: str, manual_dir: Path | None, default_name: str, what: str) -> Path:
  """The annotation file (or folder) a builder reads: `given` as is when it exists, else inside `manual_dir`."""
  if given and Path(given).exists():
    return Path(given)
  if manual_dir is None:
    raise FileNotFoundError(f"{what}: no such file {given!r} and no manual_dir given "
                            "(tfds.download.DownloadConfig(manual_dir=...) or the builder config's path)")
  path = Path(manual_dir) / (given or default_name)
  if not path.exists():
    raise FileNotFoundError(f"{what}: {path} does not exist (manual_dir {manual_dir}; expected "
                            f"{given or default_name!r} there)")
  return path


def features_metadata(store: FeatureStore, kinds: Mapping[str, str]) -> dict:
  """What `info.metadata["features"]` says about the embeddings: store, kinds, backbone, checkpoint hash."""
  manifest = store.metadata
  return {"store": str(Path(store.root).resolve()), "kinds": dict(kinds), "fingerprint": store.fingerprint(),
          **{k: manifest.get(k) for k in MANIFEST_FIELDS if k in manifest}}


def store_dim(store_dir: str, kind: str) -> int:
  """Width D of a store kind of `[D]` items (what the builders' embedding features are declared with)."""
  store = FeatureStore(store_dir)
  shape = store.item_shape(kind)
  if len(shape) != 1:
    raise ValueError(f"feature store {store_dir} kind {kind!r} has items of shape {shape}; the TFDS builders "
                     "store one [D] vector per id")
  return int(shape[0])


def tables(store: FeatureStore, ids: Mapping[str, Sequence[str]]) -> dict[str, FeatureTable]:
  """In-memory tables of `kind -> ids` (one MissingFeatureError naming the ids the store lacks)."""
  return {kind: FeatureTable(store, kind, sorted(set(i)), None) for kind, i in ids.items()}


def lookup(table: FeatureTable, ids: Sequence[str]) -> np.ndarray:
  """float32 `[len(ids), D]` rows of `ids` (`[0, D]` for none)."""
  return table.gather(table.rows(list(ids))).reshape(len(ids), table.dim)


def embedding(dim: int, rows: bool = False):
  """The TFDS feature of one `[D]` (or `[n, D]`) float32 embedding."""
  return tfds.features.Tensor(shape=(None, dim) if rows else (dim,), dtype=np.float32)


def prepare(builder: tfds.core.DatasetBuilder, manual_dir: str | os.PathLike | None = None) -> tfds.core.DatasetBuilder:
  """Builds `builder` (a no-op when its version is already built in its data_dir); returns it.

  A version already built from a feature store is refused when the store has changed since (its fingerprint,
  `FeatureStore.fingerprint`, is recorded in `info.metadata["features"]`): TFDS would otherwise return the old
  embeddings under the same name and version."""
  store_dir = getattr(builder.builder_config, "features", "") if builder.builder_config else ""
  built = Path(builder.data_dir) / "dataset_info.json"
  if store_dir and built.is_file():
    recorded = open_dataset(builder.data_dir).info.metadata.get("features", {})
    now = FeatureStore(store_dir).fingerprint()
    if recorded.get("fingerprint") != now:
      raise ValueError(f"TFDS dataset {builder.data_dir} was built from feature store {recorded.get('store')} as it "
                       f"was then (fingerprint {recorded.get('fingerprint')}); {store_dir} now has {now}. Its "
                       "embeddings would be stale: build into a new data_dir (or delete this version folder)")
  config = tfds.download.DownloadConfig(manual_dir=str(manual_dir) if manual_dir else None)
  builder.download_and_prepare(download_config=config)
  return builder


def open_dataset(path: str | os.PathLike) -> tfds.core.DatasetBuilder:
  """A built dataset from its version folder (`<data_dir>/<name>/<config>/<version>`), no builder code needed."""
  path = Path(path)
  if not (path / "dataset_info.json").is_file():
    found = sorted(str(p.parent) for p in path.glob("**/dataset_info.json"))
    hint = f"; built versions below it: {found[:5]}" if found else ""
    raise FileNotFoundError(f"{path} is not a built TFDS dataset version folder (no dataset_info.json){hint}")
  return tfds.builder_from_directory(str(path))


def _python(x: Any) -> Any:
  if isinstance(x, bytes):
    return x.decode("utf-8")
  if isinstance(x, np.ndarray) and x.dtype.kind in "SOU":
    return [_python(v) for v in x.tolist()]
  if isinstance(x, (list, tuple)):
    return [_python(v) for v in x]
  if isinstance(x, np.bool_):
    return bool(x)
  if isinstance(x, np.integer):
    return int(x)
  return x


def read_split(builder: tfds.core.DatasetBuilder, split: str) -> list[dict]:
  """Every example of `split` through `tfds`' random-access data source, in the order they were generated.

  TFDS shuffles examples when it writes them; every vidjax builder stores the generation position as
  `index`, so the records come back in their original order (without the `index` field). Text comes
  back as `str`, text lists as lists, embeddings as float32 arrays.
  """
  if split not in builder.info.splits:
    raise KeyError(f"TFDS dataset {builder.info.full_name} has no split {split!r} "
                   f"(splits: {sorted(builder.info.splits)})")
  source = builder.as_data_source(split=split)
  records = [{k: _python(v) for k, v in source[i].items()} for i in range(len(source))]
  records.sort(key=lambda r: r["index"])
  for r in records:
    del r["index"]
  return records
