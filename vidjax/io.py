"""Small file helpers shared by every module that writes results: atomic writes.

A write goes to a temporary file in the same directory and is renamed into place, so a reader
(or a resumed job) never sees a half-written file and nothing already written is lost when a job
is killed.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np


def _atomic(path: str | os.PathLike, write: Callable[[Any], None], mode: str) -> Path:
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  try:
    with os.fdopen(fd, mode) as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
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
  """`json.loads` that rejects an object with a duplicate key, naming `source` and the key."""
  try:
    return json.loads(text, object_pairs_hook=_unique_keys)
  except DuplicateKeyError as e:
    raise DuplicateKeyError(f"{source}: the key {e.args[0]!r} appears twice in one JSON object (a reader would "
                            "silently keep the last); remove or rename the duplicate") from None


def read_json(path: str | os.PathLike, what: str = "JSON file") -> Any:
  """Reads JSON, raising one clear error that names the file and the problem (a parse error, or a key that appears
  twice in one object, which a plain parser would resolve silently to its last value)."""
  path = Path(path)
  if not path.exists():
    raise FileNotFoundError(f"{what} not found: {path}")
  try:
    with open(path, "rb") as f:
      return loads_json(f.read().decode("utf-8"), f"{what} {path}")
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{what} {path} is not valid JSON: {e}") from None
