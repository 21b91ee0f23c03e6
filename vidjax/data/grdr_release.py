"""GRDR's released features -> a vidjax feature store (`configs/prepare.py`'s import path).

The release (Hugging Face dataset JasonCoderMaker/GRDR-TVR; the repo's `download_features.py` names the parts and
where it puts them) ships, per dataset folder `msrvtt`, `actnet`, `didemo`, `lsmdc` (`RELEASE_DIRS`):

    --features:        <features>/InternVideo2/<d>/video_embeddings_{train,test}.pkl  {video id: [D] embedding}
                       <features>/InternVideo2/<d>/text_embeddings_{train,test}.pkl   {f"{video id}_{i}": [D]}
    --xpool-features:  <frames>/<video id>.npz  {"frame_embeds": [T, D_f] float32, "frame_indices": [T], "video_id"}

The pickles are plain `pickle.dump`s of dicts (GRDR's `utils/data_utils.py`, `load_shared_features`; the values
are NumPy arrays: its `scripts/dev/convert_pseudo_to_memmap.py` builds a NumPy memmap from a value's `.dtype`),
keyed as GRDR's loader keys a split's rows (`data/video_dataset.py`): the video id, and f"{video id}_{i}" for a
video's i-th caption, except that the test split of a paragraph dataset (DiDeMo, ActivityNet) has one key
f"{video id}_0" per video, its sentences joined. The X-Pool files are what `reranker/xpool/utils/
extract_video_features.py` writes: each video's frames (`config/all_config.py`: 12; `trainer/trainer.py` checks
[12, 512]) through X-Pool's CLIP image tower, unit-normalised, one `.npz` per video named by its id without
extension (the release's folder layout inside `<frames>` is not fixed here: the files are found by name anywhere
below it).

`import_release` writes the kinds the methods read, keyed as vidjax's GRDR-format records
(`vidjax.data.annotations.grdr`) name them:

    clip        [D]       each video's InternVideo2 embedding
    text        [D]       each caption's InternVideo2 text embedding (caption id), each test paragraph's (video id)
    frame_clip  [T, D_f]  each video's X-Pool frame features (with `frames`)

Each annotation file is matched to the split whose pickles hold all of its videos and texts (the files do not say
which split they are). A video or caption the annotations name and the release lacks, a vector of another width,
a NaN, a pickle that is not a dict of vectors: each is one error naming the file and the key. Pickles are read
with a restricted unpickler that builds only dicts, lists, tuples, strings, numbers and NumPy arrays of numbers
(no module is imported, and nothing runs but `np.dtype` of a type code, `np.frombuffer` of the pickled bytes,
`OrderedDict` and the latin-1 encoding of a string); a pickle of torch tensors is refused with what to do instead.
"""
from __future__ import annotations

import collections
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from vidjax.data.annotations import types
from vidjax.data.annotations.grdr import caption_id
from vidjax.data.features import FeatureStore

RELEASE_DIRS = {"msrvtt": "msrvtt", "activitynet": "actnet", "didemo": "didemo", "lsmdc": "lsmdc"}
PARAGRAPHS = ("didemo", "activitynet")  # their test pickles hold one joined paragraph per video
SPLITS = ("train", "test")
FRAMES_KEY = "frame_embeds"  # X-Pool's per-frame features in each video's .npz
KINDS = ("clip", "text", "frame_clip")


class ReleaseError(ValueError):
  """A release file that does not hold what the annotations need: the message names the file and the key."""


# ------------------------------------------------------------------------------------------------
# Restricted pickles.


def _refuse(what: str):
  raise pickle.UnpicklingError(what)


class _Dtype:
  """A pickled NumPy dtype, rebuilt from its type code and byte order alone: a plain number type. NumPy's own
  `dtype.__setstate__` would take fields, flags and sizes from the file; a structured or object dtype is refused."""

  def __init__(self, spec, align=False, copy=False):  # pylint: disable=unused-argument
    if not isinstance(spec, (str, bytes)):
      _refuse(f"a dtype spelled {type(spec).__name__}; feature arrays hold plain numbers")
    self.dtype = np.dtype(spec)
    if self.dtype.kind not in "biuf":
      _refuse(f"an array of dtype {self.dtype} (kind {self.dtype.kind!r}); feature arrays hold plain numbers")

  def __setstate__(self, state):
    if not isinstance(state, tuple) or len(state) < 5 or any(x is not None for x in state[2:5]):
      _refuse("a structured dtype; feature arrays hold plain numbers")
    if state[1] in ("<", ">"):
      self.dtype = self.dtype.newbyteorder(state[1])


def _array(data, dtype, shape, order: str) -> np.ndarray:
  """A C-owned array of `shape` from raw bytes, checked against the size the shape and dtype ask for."""
  if not isinstance(dtype, _Dtype):
    _refuse(f"an array whose dtype is a {type(dtype).__name__}")
  if not isinstance(data, (bytes, bytearray, pickle.PickleBuffer)):
    _refuse(f"an array whose data is a {type(data).__name__} (an array of Python objects?)")
  if not (isinstance(shape, tuple) and all(isinstance(n, int) and n >= 0 for n in shape)):
    _refuse(f"an array of shape {shape!r}")
  data = bytes(data)
  if len(data) != int(np.prod(shape)) * dtype.dtype.itemsize:
    _refuse(f"an array of shape {shape} and dtype {dtype.dtype} with {len(data)} bytes of data")
  return np.frombuffer(data, dtype.dtype).reshape(shape, order=order).copy()


class _Ndarray:
  """What `numpy.ndarray` names in a pickle: only the class argument of `_reconstruct`, never called."""


class _Array:
  """An array being unpickled (`_reconstruct`, then its state (version, shape, dtype, fortran, bytes)): built by
  `_array`, never by `ndarray.__setstate__`. `_resolve` swaps it for the array once the pickle is read."""

  def __init__(self, subtype, *unused):
    if subtype is not _Ndarray:
      _refuse(f"an array of class {subtype!r}; only numpy.ndarray is read")
    self.array = None

  def __setstate__(self, state):
    if isinstance(state, tuple) and len(state) == 4:
      state = (1, *state)
    if not isinstance(state, tuple) or len(state) != 5:
      _refuse("an array state that is not numpy's (version, shape, dtype, fortran order, data)")
    _, shape, dtype, fortran, data = state
    self.array = _array(data, dtype, shape, "F" if fortran else "C")


def _resolve(obj):
  """The unpickled object with every `_Array` replaced by its array (and every `_Dtype` by its dtype)."""
  if isinstance(obj, _Array):
    if obj.array is None:
      _refuse("an array without its data")
    return obj.array
  if isinstance(obj, _Dtype):
    return obj.dtype
  if isinstance(obj, dict):
    return {k: _resolve(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return type(obj)(_resolve(v) for v in obj)
  return obj


def _scalar(dtype, data=b""):
  return _array(data, dtype, (), "C")[()] if data else _refuse("a NumPy scalar without its data")


def _frombuffer(buffer, dtype, shape, order):
  return _array(buffer, dtype, tuple(shape), order)


def _empty_bytes(*args):
  return _refuse(f"bytes{args!r}") if args else b""


def _latin1(text, encoding):
  if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
    _refuse(f"_codecs.encode of a {type(text).__name__} with encoding {encoding!r}")
  return text.encode("latin1")


# (module, name) -> what the unpickler builds instead: NumPy's own pickling of arrays, dtypes and scalars (numpy 1
# names `numpy.core`, numpy 2 `numpy._core`; protocol 5 uses `_frombuffer`; protocols 0-2 spell bytes with `_codecs`
# and an empty bytes object with `bytes()`, Python 2's `__builtin__` under protocols 0-1).
_ALLOWED = {
    **{(f"numpy.{core}.multiarray", "_reconstruct"): _Array for core in ("core", "_core")},
    **{(f"numpy.{core}.multiarray", "scalar"): _scalar for core in ("core", "_core")},
    **{(f"numpy.{core}.numeric", "_frombuffer"): _frombuffer for core in ("core", "_core")},
    ("numpy", "ndarray"): _Ndarray,
    ("numpy", "dtype"): _Dtype,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("_codecs", "encode"): _latin1,
    ("builtins", "bytes"): _empty_bytes,
    ("__builtin__", "bytes"): _empty_bytes,
}


class _Unpickler(pickle.Unpickler):
  """Builds dicts, lists, tuples, strings, numbers and NumPy arrays of numbers; refuses every other class by name."""

  def find_class(self, module: str, name: str):
    if (module, name) in _ALLOWED:
      return _ALLOWED[(module, name)]
    if module.split(".")[0] == "torch":
      _refuse(f"it holds torch objects ({module}.{name}): a plain pickle of torch tensors keeps each tensor's storage "
              "as the bytes of a legacy (non-zip) torch.save, rebuilt by torch.storage._load_from_bytes, and vidjax "
              "does not import torch. Re-save the dict with NumPy values where torch is installed: "
              "pickle.dump({k: v.numpy() for k, v in d.items()}, f)")
    _refuse(f"it names {module}.{name}, which is not a NumPy array, dtype or scalar (a feature pickle holds a dict of "
            "arrays; nothing else is built)")

  def persistent_load(self, pid):
    _refuse(f"it holds a persistent reference {pid!r} (a torch.save archive's tensor?)")


def load_pickle(path: str | os.PathLike) -> Any:
  """The object a plain pickle holds, built by the restricted unpickler (module docstring); one `ReleaseError`
  naming the file when it holds anything else, or is not a pickle."""
  path = Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"release pickle not found: {path}")
  if zipfile.is_zipfile(path):
    raise ReleaseError(f"{path}: a zip archive (a torch.save file?), not a plain pickle of a dict of NumPy arrays")
  try:
    with open(path, "rb") as f:
      return _resolve(_Unpickler(f).load())
  except pickle.UnpicklingError as e:
    raise ReleaseError(f"{path}: not read: {e}") from None
  except (EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError, MemoryError) as e:
    raise ReleaseError(f"{path}: not a readable pickle ({type(e).__name__}: {e}); is it truncated?") from None


def _table(path: Path) -> dict[str, Any]:
  table = load_pickle(path)
  if not isinstance(table, dict):
    raise ReleaseError(f"{path}: holds a {type(table).__name__}; expected a dict of id -> embedding")
  for key in table:
    if not isinstance(key, str) or not key:
      raise ReleaseError(f"{path}: key {key!r} ({type(key).__name__}); the keys are video and caption ids (strings)")
  return table


def _vector(value: Any, path: Path, key: str) -> np.ndarray:
  """float32 [D] of one pickled embedding (a NumPy array, or a list of numbers), or one error naming file and key."""
  try:
    array = np.asarray(value)
  except (ValueError, TypeError) as e:
    raise ReleaseError(f"{path}: key {key!r} is not an array of numbers ({e})") from None
  if array.dtype.kind not in "biuf":
    raise ReleaseError(f"{path}: key {key!r} holds {array.dtype} values; an embedding is real numbers")
  if array.ndim != 1 or not array.size:
    raise ReleaseError(f"{path}: key {key!r} holds an array of shape {array.shape}; an embedding is one vector [D]")
  array = array.astype(np.float32)
  if not np.isfinite(array).all():
    raise ReleaseError(f"{path}: key {key!r} holds NaN or Inf")
  return array


# ------------------------------------------------------------------------------------------------
# The release's files.


def feature_files(features: str | os.PathLike, dataset: str) -> dict[str, dict[str, Path]]:
  """{split: {"video": path, "text": path}} of `dataset`'s InternVideo2 pickles under the `--features-dir` of
  `download_features.py` (the folder holding `InternVideo2/`); one error when the dataset's folder is not there."""
  if dataset not in RELEASE_DIRS:
    raise ValueError(f"GRDR's release has features for {sorted(RELEASE_DIRS)}, not {dataset!r}")
  folder = Path(features) / "InternVideo2" / RELEASE_DIRS[dataset]
  if not folder.is_dir():
    raise FileNotFoundError(f"{folder}: no such folder; data.import_features is the folder download_features.py "
                            f"--features wrote (its --features-dir, default ./dataset/features, holding "
                            f"InternVideo2/{RELEASE_DIRS[dataset]}/video_embeddings_train.pkl ...)")
  return {s: {"video": folder / f"video_embeddings_{s}.pkl", "text": folder / f"text_embeddings_{s}.pkl"}
          for s in SPLITS}


def frame_files(frames: str | os.PathLike) -> dict[str, Path]:
  """{video id: path} of every `<video id>.npz` below the X-Pool features folder; a video id in two files (two
  caches under one folder: X-Pool's and CLIP4Clip's, or two datasets') is one error naming both."""
  root = Path(frames)
  if not root.is_dir():
    raise FileNotFoundError(f"{root}: no such folder (data.import_frames: the X-Pool video features folder)")
  found: dict[str, Path] = {}
  for path in sorted(root.rglob("*.npz")):
    name = path.name[: -len(".npz")]
    if name in found:
      raise ReleaseError(f"{root}: video {name!r} has two feature files, {found[name]} and {path}; point "
                         "data.import_frames at the one dataset's X-Pool folder")
    found[name] = path
  if not found:
    raise ReleaseError(f"{root}: no <video id>.npz files below it (data.import_frames: the X-Pool video features "
                       "folder of download_features.py --xpool-features)")
  return found


def read_frames(path: Path, video: str) -> np.ndarray:
  """float32 [T, D_f] X-Pool frame features of one `.npz`; one error naming the file on anything else."""
  try:
    with np.load(path, allow_pickle=False) as z:
      arrays = {k: z[k] for k in z.files if k in (FRAMES_KEY, "video_id")}
      names = sorted(z.files)
  except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
    raise ReleaseError(f"{path}: not a readable .npz ({e})") from None
  if FRAMES_KEY not in arrays:
    pooled = " (a CLIP4Clip cache: pooled 'video_embed' vectors, not X-Pool's frames)" if "video_embed" in names else ""
    raise ReleaseError(f"{path}: no array {FRAMES_KEY!r} (it has {names}){pooled}")
  array = arrays[FRAMES_KEY]
  named = str(arrays["video_id"]) if "video_id" in arrays else video
  if named != video:
    raise ReleaseError(f"{path}: holds the features of video {named!r}, not of {video!r} (its file name)")
  if array.dtype.kind not in "biuf" or array.ndim != 2 or not array.size:
    raise ReleaseError(f"{path}: {FRAMES_KEY!r} is {array.dtype} of shape {array.shape}; expected per-frame "
                       "features [T, D] (X-Pool: [12, 512])")
  array = array.astype(np.float32)
  if not np.isfinite(array).all():
    raise ReleaseError(f"{path}: {FRAMES_KEY!r} holds NaN or Inf")
  return array


# ------------------------------------------------------------------------------------------------
# Matching annotation files to splits, and the import.


def wanted_texts(dataset: str, records: types.RetrievalData, split: str) -> dict[str, str]:
  """{release text key: vidjax text id} of one annotation file read as `split` (module docstring)."""
  if dataset in PARAGRAPHS and split == "test":
    return {caption_id(v, 0): v for v in dict.fromkeys(c.video_id for c in records.captions)}
  return {c.caption_id: c.caption_id for c in records.captions}


class _Release:
  """The dataset's pickles, each read once when first needed (a missing file reads as an empty table)."""

  def __init__(self, features, dataset: str):
    self.files = feature_files(features, dataset)
    self._tables: dict[Path, dict] = {}

  def table(self, split: str, what: str) -> dict:
    path = self.files[split][what]
    if path not in self._tables:
      self._tables[path] = _table(path) if path.is_file() else {}
    return self._tables[path]

  def first_missing(self, split: str, videos: Sequence[str], texts: Sequence[str]) -> tuple[Path, str, str] | None:
    """(file, key, what it is) of the first video or text key of a split's pickles that is missing, or None."""
    for what, keys in (("video", videos), ("text", texts)):
      table = self.table(split, what)
      for key in keys:
        if key not in table:
          return self.files[split][what], key, what
    return None


def split_of(release: _Release, dataset: str, path, records: types.RetrievalData) -> str:
  """The split whose pickles hold every video and text of the annotation file `path`; one error naming the file
  and the first missing key when none does (the split holding most of its videos), or when both do."""
  videos = records.video_ids()
  holds = [s for s in SPLITS if release.first_missing(s, videos, list(wanted_texts(dataset, records, s))) is None]
  if len(holds) == 1:
    return holds[0]
  if holds:
    raise ReleaseError(f"{path}: both the train and the test pickles of {release.files['test']['video'].parent} hold "
                       "every video and caption of it; the import cannot tell which split it is")
  best = max(SPLITS, key=lambda s: (sum(v in release.table(s, "video") for v in videos), s == "test"))
  file, key, what = release.first_missing(best, videos, list(wanted_texts(dataset, records, best)))
  if not file.is_file():
    raise ReleaseError(f"{file}: no such file (the {best} split's {what} embeddings, which {path} needs)")
  role = "a video" if what == "video" else "a caption's (or paragraph's) text"
  raise ReleaseError(f"{file}: no key {key!r}, {role} of {path} (matched to the {best} split, whose video pickle "
                     "holds most of its videos); the release does not cover these annotations")


def import_release(store_root: str | os.PathLike, dataset: str, annotations: Sequence[tuple[str, types.RetrievalData]],
                   features: str | os.PathLike, frames: str | os.PathLike | None = None,
                   metadata: dict | None = None) -> dict:
  """Writes `KINDS` for every video and text of `annotations` ((file, records) pairs, as `read_dataset` reads them)
  from the release under `features` (and `frames`) into the store at `store_root` (created when missing; a rerun
  skips what it holds). Returns what was imported: counts, and which split each annotation file was."""
  release = _Release(features, dataset)
  widths: dict[str, tuple[tuple[int, ...], str]] = {}  # "embedding" / "frame_clip" -> (shape, the first file with it)
  rows: dict[str, dict[str, np.ndarray]] = {k: {} for k in KINDS}

  def put(kind: str, item: str, array: np.ndarray, source: Path, key: str) -> None:
    first = widths.setdefault("embedding" if kind != "frame_clip" else kind, (array.shape, str(source)))
    if first[0] != array.shape:
      raise ReleaseError(f"{source}: key {key!r} holds shape {list(array.shape)} but {first[1]} holds "
                         f"{list(first[0])}: one store kind holds one width (InternVideo2's video and text "
                         "embeddings share one space)")
    old = rows[kind].get(item)
    if old is not None and not np.array_equal(old, array):
      raise ReleaseError(f"{source}: key {key!r} differs from the {kind!r} of {item!r} another release file gave")
    rows[kind][item] = array

  splits = {}
  for path, records in annotations:
    split = split_of(release, dataset, path, records)
    splits[str(path)] = split
    for what, keys in (("video", {v: v for v in records.video_ids()}),
                       ("text", wanted_texts(dataset, records, split))):
      source, table = release.files[split][what], release.table(split, what)
      for key, item in keys.items():
        put("clip" if what == "video" else "text", item, _vector(table[key], source, key), source, key)
  if frames is not None:
    files = frame_files(frames)
    for video in rows["clip"]:
      if video not in files:
        raise ReleaseError(f"{frames}: no {video}.npz below it (the X-Pool features of a video the annotations name)")
      put("frame_clip", video, read_frames(files[video], video), files[video], video)
  store = FeatureStore.create(store_root, metadata)
  for kind, items in rows.items():
    if items:
      with store.writer(kind, shard_prefix="import", flush_every=4096) as w:
        for item, array in items.items():
          w.add(item, array)
  return {"splits": splits, **{f"{kind}_items": len(items) for kind, items in rows.items()}}
