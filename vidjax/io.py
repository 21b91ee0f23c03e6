"""Small file helpers shared by every module that writes results: atomic writes.

A write goes to a temporary file in the same directory and is renamed into place, so a reader
(or a resumed job) never sees a half-written file and nothing already written is lost when a job
is killed. Files are created with the process's umask, like any other tool's files (a shared store
or results folder stays readable by the group), and a write that fails (a full disk, an I/O error)
removes its temporary file and raises one error that names the file.
"""
from __future__ import annotations

import csv
import errno
import hashlib
import io as io_std
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np


class WriteError(OSError):
  """Writing a file failed (an I/O error); the message names the file. The partial file was removed."""

  def __str__(self):
    return str(self.strerror)


class DiskFullError(WriteError):
  """The file system ran out of space (or quota) while writing a file; the message names the file."""


def csv_text(rows) -> str:
  """`rows` (sequences of cells) as CSV text, one line each ending in "\n" (the release files' layout)."""
  out = io_std.StringIO()
  csv.writer(out, lineterminator="\n").writerows(rows)
  return out.getvalue()


def _umask() -> int:
  """The process's umask, read without changing it where the system says it (Linux), else set and restored."""
  try:
    with open("/proc/self/status", encoding="ascii") as f:
      for line in f:
        if line.startswith("Umask:"):
          return int(line.split()[1], 8)
  except (OSError, ValueError, IndexError):
    pass
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


def _write_error(path: Path, e: OSError) -> OSError:
  """`e` as one error naming `path` (numpy reports a short write as "N requested and M written", no errno)."""
  short = e.errno is None and "requested and" in str(e)
  if e.errno in (errno.ENOSPC, errno.EDQUOT) or short:
    return DiskFullError(errno.ENOSPC, f"{path}: no space left on device while writing it ({e}); the partial file "
                                       "was removed: free some space (or raise the quota) and run again")
  if e.filename is not None:  # already names its file (e.g. permission denied on the folder)
    return e
  return WriteError(e.errno, f"{path}: cannot write it ({e}); the partial file was removed")


def _atomic(path: str | os.PathLike, write: Callable[[Any], None], mode: str) -> Path:
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  try:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  except OSError as e:
    if _write_error(path, e) is e:
      raise
    raise _write_error(path, e) from None
  try:
    with os.fdopen(fd, mode) as f:
      os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600: give the file the mode any other tool would
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException as e:
    try:
      os.unlink(tmp)
    except FileNotFoundError:
      pass
    if isinstance(e, OSError) and not isinstance(e, WriteError) and _write_error(path, e) is not e:
      raise _write_error(path, e) from None
    raise
  return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
  """Writes `text` to `path` atomically (UTF-8)."""
  return _atomic(path, lambda f: f.write(text.encode("utf-8")), "wb")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
  """Writes `data` to `path` atomically."""
  return _atomic(path, lambda f: f.write(data), "wb")


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 1) -> Path:
  """Writes `obj` as JSON atomically, with sorted keys so equal objects give equal bytes."""
  return atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=True, ensure_ascii=False) + "\n")


def atomic_save_npy(path: str | os.PathLike, array: np.ndarray) -> Path:
  """Saves one array in `.npy` format atomically."""
  return _atomic(path, lambda f: np.save(f, array, allow_pickle=False), "wb")


class DuplicateKeyError(ValueError):
  """A JSON object names one key twice (JSON parsers keep the last silently: a video replaced by another)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
  out = {}
  for key, value in pairs:
    if key in out:
      raise DuplicateKeyError(key)
    out[key] = value
  return out


def loads_json(text: str, source: str = "<JSON>") -> Any:
  """`json.loads` that rejects an object with a duplicate key, naming `source` and the key. A leading UTF-8 byte
  order mark (what some Windows editors write) is ignored, as the text and CSV readers ignore it."""
  if text.startswith("\ufeff"):
    text = text[1:]
  try:
    return json.loads(text, object_pairs_hook=_unique_keys)
  except DuplicateKeyError as e:
    raise DuplicateKeyError(f"{source}: the key {e.args[0]!r} appears twice in one JSON object (a reader would "
                            "silently keep the last); remove or rename the duplicate") from None


def read_json(path: str | os.PathLike, what: str = "JSON file") -> Any:
  """Reads JSON, raising one clear error that names the file and the problem (a parse error, or a key that appears
  twice in one object, which a plain parser would resolve silently to its last value). A leading UTF-8 byte order
  mark is accepted and ignored (one rule for every text file the project reads)."""
  path = Path(path)
  if not path.exists():
    raise FileNotFoundError(f"{what} not found: {path}")
  try:
    with open(path, "rb") as f:
      return loads_json(f.read().decode("utf-8"), f"{what} {path}")
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{what} {path} is not valid JSON: {e}") from None


def sha256_file(path: str | os.PathLike, block: int = 1 << 22) -> tuple[str, int]:
  """(sha256 hex digest, size in bytes) of a file as it is on disk, read in blocks."""
  sha, size = hashlib.sha256(), 0
  with open(path, "rb") as f:
    while chunk := f.read(block):
      sha.update(chunk)
      size += len(chunk)
  return sha.hexdigest(), size
