"""A released PyTorch checkpoint's state dict as NumPy arrays, read without importing torch.

`load_state_dict(path)` reads:
  * `.pt` / `.pth` / `.bin` / `.ckpt` / `.tar` files that `torch.save` wrote (its zip format, the default since
    torch 1.6): `data.pkl` is read with a restricted unpickler that builds tensors from the archive's storage files
    with NumPy and never imports or calls anything else (an unknown class in the pickle becomes an inert `Opaque`
    placeholder, which is an error only where a tensor is expected);
  * `.safetensors` (the `safetensors` package's NumPy reader);
  * `.npz` (NumPy's own, `allow_pickle=False`).
A checkpoint that wraps its weights (`{"state_dict": ..., "epoch": ...}`, `{"model": ...}`) is unwrapped, and a
`module.` prefix that DataParallel put on every key is removed.

`StateDict` is what a converter (`vidjax.convert.<kind>.convert`) reads: every key must be taken (`take`) or skipped
with a reason (`skip`); `finish()` then refuses any key left over, so a checkpoint of another model, or of another
version of the same model, is one error naming the key, never silently half-loaded.
"""
from __future__ import annotations

import collections
import io
import pickle
import zipfile
from pathlib import Path
from typing import Any, Mapping

import ml_dtypes
import numpy as np

# torch storage class names (what `torch.save` pickles) -> NumPy dtypes.
_STORAGE_DTYPES = {
    "DoubleStorage": np.float64, "FloatStorage": np.float32, "HalfStorage": np.float16,
    "BFloat16Storage": ml_dtypes.bfloat16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}
_WRAPPERS = ("state_dict", "model_state_dict", "model", "module", "net")


class ConversionError(ValueError):
  """A checkpoint that does not fit the model it is converted to: the message names the file and the key."""


class Opaque:
  """An object of a class the restricted unpickler does not build (a config, an optimizer class): inert, named."""

  def __init__(self, name: str, *args, **kwargs):  # pylint: disable=unused-argument
    self.name = name

  def __setstate__(self, state):  # pylint: disable=unused-argument
    pass

  def __repr__(self) -> str:
    return f"Opaque({self.name})"


class _Storage:
  """A storage record from the pickle: the archive file holding its bytes and its element type."""

  def __init__(self, dtype, key: str):
    self.dtype, self.key = dtype, key


def _opaque_class(name: str):
  return type(name.rsplit(".", 1)[-1], (Opaque,), {"__init__": lambda self, *a, **k: Opaque.__init__(self, name)})


class _Unpickler(pickle.Unpickler):
  """Builds only dicts, lists, tuples, NumPy arrays and scalars; everything else becomes an `Opaque`."""

  def __init__(self, file, archive: zipfile.ZipFile, prefix: str, source: str):
    super().__init__(file)
    self._archive, self._prefix, self._source = archive, prefix, source
    self._buffers: dict[str, bytes] = {}

  def find_class(self, module: str, name: str):
    full = f"{module}.{name}"
    if full == "collections.OrderedDict":
      return collections.OrderedDict
    if full in ("torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor"):
      return self._rebuild_tensor
    if full in ("torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state"):
      return lambda data, *args: data
    if module == "torch" and name in _STORAGE_DTYPES:
      return _STORAGE_DTYPES[name]
    if module == "torch" and name in ("float32", "float16", "bfloat16", "float64", "int64", "int32", "bool"):
      return name
    if full in ("numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar"):
      return lambda dtype, data=b"": np.frombuffer(data, dtype)[0] if data else dtype.type(0)
    if module == "numpy" and name == "dtype":
      return np.dtype
    if full == "builtins.set":
      return set
    return _opaque_class(full)

  def persistent_load(self, pid):
    # ('storage', storage type, key, location, numel): the bytes are `<prefix>data/<key>` in the archive.
    if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage"):
      raise ConversionError(f"{self._source}: unknown persistent record {pid!r} in data.pkl")
    dtype = pid[1]
    if isinstance(dtype, str):  # torch.UntypedStorage with a dtype name
      dtype = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float64": np.float64,
               "int64": np.int64, "int32": np.int32, "bool": np.bool_}[dtype]
    if not (isinstance(dtype, type) and issubclass(dtype, np.generic)):
      raise ConversionError(f"{self._source}: storage of unsupported type {pid[1]!r} in data.pkl")
    return _Storage(dtype, str(pid[2]))

  def _rebuild_tensor(self, storage, offset, size, stride, *unused):
    if not isinstance(storage, _Storage):
      raise ConversionError(f"{self._source}: a tensor without a storage record in data.pkl")
    if storage.key not in self._buffers:
      try:
        self._buffers[storage.key] = self._archive.read(f"{self._prefix}data/{storage.key}")
      except KeyError as e:
        raise ConversionError(f"{self._source}: storage file data/{storage.key} is missing from the archive") from e
    flat = np.frombuffer(self._buffers[storage.key], dtype=storage.dtype)
    itemsize = flat.dtype.itemsize
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    extent = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(size) else offset
    if extent > flat.size:
      raise ConversionError(f"{self._source}: a tensor of shape {size} runs past its storage data/{storage.key} "
                            f"({flat.size} elements)")
    view = np.lib.stride_tricks.as_strided(flat[offset:], shape=size, strides=tuple(s * itemsize for s in stride))
    return np.array(view)  # own copy, C order


def _read_torch_zip(path: Path) -> Any:
  source = str(path)
  with zipfile.ZipFile(path) as archive:
    pkls = [n for n in archive.namelist() if n.endswith("data.pkl")]
    if len(pkls) != 1:
      raise ConversionError(f"{source}: not a torch.save archive (expected one data.pkl, found {len(pkls)})")
    prefix = pkls[0][: -len("data.pkl")]
    byteorder = archive.read(f"{prefix}byteorder").decode().strip() if f"{prefix}byteorder" in archive.namelist() \
        else "little"
    if byteorder != "little":
      raise ConversionError(f"{source}: a big-endian checkpoint; re-save it on a little-endian machine")
    return _Unpickler(io.BytesIO(archive.read(pkls[0])), archive, prefix, source).load()


def _unwrap(obj: Any, source: str) -> dict[str, np.ndarray]:
  """The flat {name: array} inside a checkpoint object (see the module docstring)."""
  while isinstance(obj, Mapping) and not any(isinstance(v, np.ndarray) for v in obj.values()):
    inner = [k for k in _WRAPPERS if isinstance(obj.get(k), Mapping)]
    if not inner:
      raise ConversionError(f"{source}: no state dict found (top-level keys: {sorted(map(str, obj))[:8]})")
    obj = obj[inner[0]]
  if not isinstance(obj, Mapping):
    raise ConversionError(f"{source}: the checkpoint holds a {type(obj).__name__}, not a state dict")
  out = {}
  for k, v in obj.items():
    if not isinstance(v, np.ndarray):
      if isinstance(v, (int, float)) and not isinstance(v, bool):  # e.g. a BatchNorm's num_batches_tracked
        v = np.asarray(v)
      else:
        raise ConversionError(f"{source}: key {k!r} holds {v!r}, not a tensor")
    out[str(k)] = v
  if out and all(k.startswith("module.") for k in out):
    out = {k[len("module."):]: v for k, v in out.items()}
  return out


def load_state_dict(path: str | Path) -> dict[str, np.ndarray]:
  """{key: array} of a checkpoint file (formats in the module docstring)."""
  path = Path(path)
  if not path.is_file():
    raise ConversionError(f"{path}: no such checkpoint file" + (" (a directory)" if path.is_dir() else ""))
  if path.suffix == ".safetensors":
    from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
    try:
      return dict(load_file(str(path)))
    except Exception as e:  # noqa: BLE001  (the library's errors have no common base)
      raise ConversionError(f"{path}: not a readable safetensors file ({e})") from e
  if path.suffix == ".npz":
    with np.load(path, allow_pickle=False) as z:
      return _unwrap({k: z[k] for k in z.files}, str(path))
  if not zipfile.is_zipfile(path):
    raise ConversionError(f"{path}: not a zip-format torch checkpoint (torch < 1.6's legacy format is not read: "
                          "re-save it with torch.save, or as .safetensors)")
  try:
    return _unwrap(_read_torch_zip(path), str(path))
  except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError) as e:
    raise ConversionError(f"{path}: corrupt torch checkpoint ({e})") from e


class StateDict:
  """A state dict a converter consumes key by key (the module docstring)."""

  def __init__(self, mapping: Mapping[str, np.ndarray], source: str):
    self.source = source
    self._arrays = dict(mapping)
    self._used: set[str] = set()
    self.skipped: dict[str, str] = {}  # prefix -> why (recorded in the conversion's info)

  @classmethod
  def load(cls, path: str | Path) -> "StateDict":
    return cls(load_state_dict(path), str(path))

  def keys(self) -> list[str]:
    return list(self._arrays)

  def __contains__(self, key: str) -> bool:
    return key in self._arrays

  def has_prefix(self, prefix: str) -> bool:
    return any(k.startswith(prefix) for k in self._arrays)

  def take(self, key: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """The array under `key` (float arrays as float32), marked used; its shape checked when `shape` is given."""
    if key not in self._arrays:
      raise ConversionError(f"{self.source}: missing key {key!r}")
    value = self._arrays[key]
    if shape is not None and tuple(value.shape) != tuple(shape):
      raise ConversionError(f"{self.source}: key {key!r} has shape {tuple(value.shape)}, expected {tuple(shape)}")
    self._used.add(key)
    return value.astype(np.float32) if np.issubdtype(value.dtype, np.floating) or value.dtype == ml_dtypes.bfloat16 \
        else value

  def skip(self, prefix: str, why: str) -> int:
    """Marks every key starting with `prefix` as deliberately not converted; returns how many."""
    keys = [k for k in self._arrays if k.startswith(prefix)]
    self._used.update(keys)
    if keys:
      self.skipped[prefix] = why
    return len(keys)

  def finish(self) -> None:
    """Refuses a key nobody took or skipped (a checkpoint of another model or version)."""
    left = [k for k in self._arrays if k not in self._used]
    if left:
      more = f" (and {len(left) - 1} more)" if len(left) > 1 else ""
      raise ConversionError(f"{self.source}: unknown key {left[0]!r}{more}")
