"""The files of a saved index: written with plain file writes, recorded, and checked against the record when read.

`DenseIndex.save` and the library backends write through `write_bytes` / `write_npy` / `create_npy` + `write_rows`:
plain `os.write` / `os.pwrite` on a file descriptor, never a memory map, so a full disk is an `OSError` that `save`
turns into one message naming the index, the file and "no space left" (a memory-mapped write gets SIGBUS instead,
with no message). Each written file is recorded in index.json (`"files"`: its size and SHA-256; vectors.npy of the
JAX backends: its dtype, shape and one SHA-256 per chunk of rows, checked as each chunk is read, so every process of
a mesh still reads only its own chunks). `DenseIndex.load` checks them (`check_file`, `open_npy`, `check_rows`)
before it trusts a file: a truncated, re-saved, reordered or edited file is one error naming the index and the file.
"""
from __future__ import annotations

import errno
import functools
import hashlib
import io as _io
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from vidjax import io as vio

BLOCK = 1 << 24  # bytes per write or read call
SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)  # a full disk, or a quota that is


def _os_write(fd: int, data: memoryview, offset: int | None) -> int:
  """The one place an index file's bytes reach the OS (tests make it fail as a full disk would)."""
  return os.write(fd, data) if offset is None else os.pwrite(fd, data, offset)


def _bytes_of(array: np.ndarray) -> memoryview:
  return memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


def _write_all(fd: int, data: memoryview, offset: int | None = None) -> None:
  done = 0
  while done < len(data):
    n = _os_write(fd, data[done:done + BLOCK], None if offset is None else offset + done)
    if n <= 0:
      raise OSError(errno.EIO, "write returned 0 bytes")
    done += n


def _naming(write):
  """`write(path, ...)` whose OSError names `path` (os.write's do not) and has its errno (also one raised as
  `OSError(errno.ENOSPC)`, whose `errno` attribute is None)."""
  @functools.wraps(write)
  def wrapped(path, *args, **kwargs):
    try:
      return write(path, *args, **kwargs)
    except OSError as e:
      code = e.errno if e.errno is not None else next((a for a in e.args[:1] if isinstance(a, int)), None)
      if e.filename is None or e.errno is None:
        raise OSError(code, e.strerror or os.strerror(code or errno.EIO), str(e.filename or path)) from None
      raise
  return wrapped


class _Hashing:
  """A file written front to back, hashed as it goes: `record()` is its size and SHA-256."""

  def __init__(self, path: Path):
    self.path = path
    self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)  # the process's umask applies
    self.sha, self.size = hashlib.sha256(), 0

  def write(self, data: memoryview) -> None:
    _write_all(self.fd, data)
    self.sha.update(data)
    self.size += len(data)

  def close(self) -> dict:
    try:
      os.fsync(self.fd)
    finally:
      os.close(self.fd)
    return {"bytes": self.size, "sha256": self.sha.hexdigest()}


@_naming
def write_bytes(path: Path, data: bytes) -> dict:
  """Writes `data` to `path`; returns its record {"bytes", "sha256"}."""
  f = _Hashing(path)
  try:
    f.write(memoryview(data))
  finally:
    rec = f.close()
  return rec


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
  """The `.npy` header (magic, version, dict, padding) of a C-order array of `dtype` and `shape`."""
  buf = _io.BytesIO()
  np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                              "fortran_order": False, "shape": tuple(int(s) for s in shape)})
  return buf.getvalue()


@_naming
def write_npy(path: Path, array: np.ndarray) -> dict:
  """Writes `array` as a `.npy` file (np.load reads it), streamed; returns its record {"bytes", "sha256"}."""
  array = np.ascontiguousarray(array)
  f = _Hashing(path)
  try:
    f.write(memoryview(npy_header(array.dtype, array.shape)))
    f.write(_bytes_of(array))
  finally:
    rec = f.close()
  return rec


@_naming
def create_npy(path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> None:
  """A `.npy` file of `shape` whose rows `write_rows` fills (the data part is a hole until then)."""
  header = npy_header(dtype, shape)
  fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
  try:
    _write_all(fd, memoryview(header))
    os.ftruncate(fd, len(header) + int(np.prod(shape)) * np.dtype(dtype).itemsize)
    os.fsync(fd)
  finally:
    os.close(fd)


@_naming
def write_rows(path: Path, dtype: np.dtype, shape: tuple[int, ...], blocks) -> None:
  """Writes `(first row, rows [m, ...])` blocks into the `.npy` file `create_npy(path, dtype, shape)` made."""
  offset = len(npy_header(dtype, shape))
  row_bytes = int(np.prod(shape[1:])) * np.dtype(dtype).itemsize
  fd = os.open(path, os.O_WRONLY)
  try:
    for first, rows in blocks:
      _write_all(fd, _bytes_of(np.asarray(rows).view(dtype)), offset + first * row_bytes)
    os.fsync(fd)
  finally:
    os.close(fd)


def sha256_rows(rows: np.ndarray) -> str:
  """The SHA-256 of rows' bytes as stored (C order)."""
  return hashlib.sha256(_bytes_of(rows)).hexdigest()


def file_record(path: Path) -> dict:
  """{"bytes", "sha256"} of a file as it is on disk (for files a library wrote itself)."""
  digest, size = vio.sha256_file(path, BLOCK)
  return {"bytes": size, "sha256": digest}


class IndexFileError(ValueError):
  """A file of a saved index is missing, damaged or not what the index recorded."""


DENSE_REBUILD = "rebuild it (DenseIndex.save)"


def _damaged(where: str, name: str, problem: str, rebuild: str = DENSE_REBUILD) -> IndexFileError:
  return IndexFileError(f"{where}: {name} {problem}; the index is damaged or was changed after it was saved: "
                        f"{rebuild}")


def check_file(root: Path, name: str, record: dict | None, where: str, read: bool = False,
               recorded_in: str = "index.json", rebuild: str = DENSE_REBUILD) -> bytes | None:
  """Checks `root / name` against its record in `recorded_in` (size and SHA-256; None: only that it exists),
  streaming; returns its bytes when `read`. `rebuild`: what the error tells the user to do."""
  path = root / name
  if not path.is_file():
    raise _damaged(where, name, "is missing", rebuild)
  size = path.stat().st_size
  if record is not None and size != record["bytes"]:
    raise _damaged(where, name, f"has {size} bytes, {recorded_in} recorded {record['bytes']}"
                   + (" (truncated)" if size < record["bytes"] else ""), rebuild)
  if record is None and not read:
    return None
  sha, parts = hashlib.sha256(), []
  with open(path, "rb") as f:
    while block := f.read(BLOCK):
      sha.update(block)
      if read:
        parts.append(block)
  if record is not None and sha.hexdigest() != record["sha256"]:
    raise _damaged(where, name, f"does not match the SHA-256 {recorded_in} recorded (its content changed)", rebuild)
  return b"".join(parts) if read else None


def load_npy_bytes(data: bytes, name: str, where: str) -> np.ndarray:
  """A `.npy` file's array from its bytes (no pickles); a damaged file is one error naming it."""
  try:
    return np.load(_io.BytesIO(data), allow_pickle=False)
  except (ValueError, OSError, EOFError) as e:
    raise _damaged(where, name, f"is not a readable .npy array (truncated or damaged: {e})") from None


def open_npy(path: Path, dtype: np.dtype, shape: tuple[int, ...], where: str) -> np.ndarray:
  """A read-only memory map of the `.npy` file at `path`, after checking that its header says `dtype` and `shape`
  (C order) and that the file holds all of it."""
  name = path.name
  if not path.is_file():
    raise _damaged(where, name, "is missing")
  try:
    with open(path, "rb") as f:
      version = np.lib.format.read_magic(f)
      read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(
          version)
      if read_header is None:
        raise ValueError(f".npy version {version}")
      got_shape, fortran, got_dtype = read_header(f)
      offset = f.tell()
  except (ValueError, OSError, EOFError) as e:
    raise _damaged(where, name, f"is not a readable .npy array (empty, truncated or damaged: {e})") from None
  if got_dtype != np.dtype(dtype) or tuple(got_shape) != tuple(shape) or fortran:
    raise _damaged(where, name, f"holds {'Fortran-order ' if fortran else ''}{got_dtype} {tuple(got_shape)}, "
                   f"index.json says {np.dtype(dtype)} {tuple(shape)}")
  want = offset + int(np.prod(shape)) * np.dtype(dtype).itemsize
  size = path.stat().st_size
  if size != want:
    raise _damaged(where, name, f"has {size} bytes, its header needs {want}" + (" (truncated)" if size < want else ""))
  return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=tuple(shape))


def quote(text: Any, limit: int = 80) -> str:
  """`repr(text)`, or for a long text its first `limit` characters and its length (what an error message quotes)."""
  text = str(text)
  return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text):,} characters)"


def free_bytes(path: Path) -> int | None:
  """Free bytes on the filesystem holding `path` (or its nearest existing parent); None when unknown."""
  path = Path(path)
  while not path.exists() and path != path.parent:
    path = path.parent
  try:
    return shutil.disk_usage(path).free
  except OSError:
    return None
