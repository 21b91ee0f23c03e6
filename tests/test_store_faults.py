"""Feature store and atomic writes under faults (issue 50): concurrent writers, files that lie about what they hold,
names that leave the store, what a killed writer leaves, full disks, umask, byte order marks."""
import errno
import json
import os

import numpy as np
import pytest

from vidjax import io
from vidjax.data.features import write_arrays


def test_atomic_files_are_created_with_the_process_umask(tmp_path):
  old = os.umask(0o022)
  try:
    io.atomic_write_text(tmp_path / "results.json", "{}\n")
    io.atomic_write_bytes(tmp_path / "clip.mp4", b"\0")
    store = write_arrays(tmp_path / "s", {"clip": (["a"], np.ones((1, 2), np.float32))})
    files = [tmp_path / "results.json", tmp_path / "clip.mp4", tmp_path / "s" / "manifest.json",
             *sorted((tmp_path / "s" / "clip").iterdir())]
    assert {f.name: oct(f.stat().st_mode & 0o777) for f in files} == {f.name: "0o644" for f in files}
    os.umask(0o077)
    io.atomic_write_json(tmp_path / "private.json", {})
    assert (tmp_path / "private.json").stat().st_mode & 0o777 == 0o600
    os.umask(0o002)
    store.update_metadata({"shared": True})
    assert (tmp_path / "s" / "manifest.json").stat().st_mode & 0o777 == 0o664
  finally:
    os.umask(old)


def test_an_io_error_names_the_file(tmp_path, monkeypatch):
  def broken(fd):
    raise OSError(errno.EIO, os.strerror(errno.EIO))
  monkeypatch.setattr(os, "fsync", broken)
  with pytest.raises(io.WriteError, match=r"results.json: cannot write it \(\[Errno 5\] Input/output error\)"):
    io.atomic_write_json(tmp_path / "results.json", {})
  monkeypatch.undo()
  assert not list(tmp_path.iterdir())


def test_json_readers_accept_a_byte_order_mark_like_the_text_readers(tmp_path):
  path = tmp_path / "a.json"
  path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"a": [1, 2]}).encode())
  assert io.read_json(path) == {"a": [1, 2]}
  assert io.loads_json("\ufeff[1]") == [1]
  path.write_bytes(b"\xef\xbb\xbf\xef\xbb\xbf{}")  # one mark is a mark; a second is content
  with pytest.raises(ValueError, match=r"a.json is not valid JSON"):
    io.read_json(path)
