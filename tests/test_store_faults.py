"""Feature store and atomic writes under faults (issue 50): concurrent writers, files that lie about what they hold,
names that leave the store, what a killed writer leaves, full disks, umask, byte order marks."""
import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from vidjax import io
from vidjax.data import features
from vidjax.data.features import FeatureStore, StaleFeatureError, write_arrays

REPO = Path(__file__).resolve().parents[1]

# One writer process: 300 ids of its own (values base + i) and 10 ids both processes write (the same values), all
# with the default shard_prefix, flushing often so that the two processes' flushes interleave.
_WRITER = r"""
import sys, time
from pathlib import Path
import numpy as np
from vidjax.data import features
root, tag, base, prefix = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[6]
ready, go = Path(sys.argv[4]), Path(sys.argv[5])
store = features.FeatureStore(root)
ready.touch()
while not go.exists():
  time.sleep(0.002)
with store.writer("clip", shard_prefix=prefix, flush_every=7) as w:
  for i in range(300):
    w.add(f"{tag}{i:03d}", np.full(8, base + i, np.float32))
    if i % 30 == 0:
      w.add(f"both{i // 30}", np.full(8, -1 - i // 30, np.float32))
"""


def _expected(item_id: str) -> float:
  if item_id.startswith("both"):
    return -1 - int(item_id[4:])
  return {"a": 0, "b": 1000}[item_id[0]] + int(item_id[1:])


@pytest.mark.parametrize("prefixes", [("p0", "p0"), ("p0", "p1")])
def test_two_processes_writing_one_kind_keep_every_id_and_readers_see_whole_shards(tmp_path, prefixes):
  root = tmp_path / "store"
  FeatureStore.create(root, {"backbone": "test"})
  go = tmp_path / "go"
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
  procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(root), tag, str(base), str(tmp_path / f"ready-{tag}"),
                             str(go), prefix], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
           for (tag, base), prefix in zip((("a", 0), ("b", 1000)), prefixes)]
  try:
    deadline = time.time() + 120
    while not all((tmp_path / f"ready-{t}").exists() for t in "ab"):
      assert time.time() < deadline and all(p.poll() is None for p in procs), [p.communicate() for p in procs]
      time.sleep(0.01)
    go.touch()
    reads = 0
    while any(p.poll() is None for p in procs):  # a reader during the writes sees whole shards with the right rows
      reader = FeatureStore(root)
      ids = reader.ids("clip")
      if ids:
        np.testing.assert_array_equal(reader.get("clip", ids)[:, 0], [_expected(i) for i in ids])
        reads += 1
      time.sleep(0.02)
  finally:
    outs = [p.communicate(timeout=120) for p in procs]
  assert [p.returncode for p in procs] == [0, 0], outs
  store = FeatureStore(root)
  ids = store.ids("clip")
  assert len(ids) == 610 and set(ids) == {f"{t}{i:03d}" for t in "ab" for i in range(300)} | {f"both{i}" for i in
                                                                                               range(10)}
  got = store.get("clip", ids)
  np.testing.assert_array_equal(got, np.repeat(np.array([_expected(i) for i in ids], np.float32)[:, None], 8, 1))
  report = store.verify()["clip"]
  assert report["items"] == 610 and report["shape"] == [8]
  assert not [p.name for p in (root / "clip").iterdir() if p.name.endswith(".tmp")]


# A writer killed (SIGKILL) in the middle of writing a shard, holding the kind's lock.
_KILLED = r"""
import sys, time
from pathlib import Path
import numpy as np
from vidjax.data import features
root, ready = sys.argv[1], Path(sys.argv[2])
def stuck_save(f, array, allow_pickle=False):
  f.write(b"\x93NUMPY half an array")
  f.flush()
  ready.touch()
  time.sleep(600)
np.save = stuck_save
with features.FeatureStore(root).writer("clip") as w:
  w.add("k", np.ones(4))
"""


def test_a_writer_killed_mid_shard_holds_no_lock_and_leaves_nothing_the_next_writer_does_not_clean(tmp_path):
  store = FeatureStore.create(tmp_path, {})
  with store.writer("clip") as w:
    w.add("a", np.zeros(4))
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
  proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(tmp_path), str(tmp_path / "ready")], env=env, cwd=REPO,
                          stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.time() + 120
    while not (tmp_path / "ready").exists():
      assert time.time() < deadline and proc.poll() is None, proc.communicate()
      time.sleep(0.01)
    assert FeatureStore(tmp_path).ids("clip") == ["a"]  # a reader does not wait for the writer's lock
  finally:
    proc.kill()
    proc.communicate()
  assert [p.name for p in (tmp_path / "clip").glob(".p0-00001.npy.*.tmp")]  # what kill -9 left
  with store.writer("clip") as w:  # the lock died with the process: this writer goes on and cleans up
    w.add("k", np.ones(4))
  assert sorted(p.name for p in (tmp_path / "clip").iterdir()) == [
      "p0-00000.ids.json", "p0-00000.npy", "p0-00001.ids.json", "p0-00001.npy"]
  assert FeatureStore(tmp_path).verify()["clip"]["items"] == 2


def test_an_id_another_writer_committed_meanwhile_is_skipped_when_equal_and_refused_when_not(tmp_path):
  FeatureStore.create(tmp_path, {})
  one, two = FeatureStore(tmp_path), FeatureStore(tmp_path)  # as two processes see the store
  w1, w2 = one.writer("clip", flush_every=100), two.writer("clip", flush_every=100)
  w1.add("a", np.ones(4))
  w1.add("b", np.ones(4))
  w2.add("a", np.ones(4))
  w2.add("c", np.full(4, 3.0))
  w1.flush()
  w2.flush()  # "a" is there with the same values: not written twice
  assert FeatureStore(tmp_path).ids("clip") == ["a", "b", "c"] and w2.written == 1
  w3 = two.writer("clip")
  w3.add("d", np.zeros(4))
  w1.add("d", np.full(4, 9.0))
  w1.flush()
  with pytest.raises(StaleFeatureError, match=r"kind 'clip'.*id 'd' is already stored with other values"):
    w3.flush()
  np.testing.assert_array_equal(FeatureStore(tmp_path).get("clip", ["d"]), [[9, 9, 9, 9]])
  FeatureStore(tmp_path).verify()


@pytest.mark.parametrize("kind", ["../escape", "", ".", "..", "a/b", ".hidden", "a\\b"])
def test_kind_names_that_leave_the_store_are_refused(tmp_path, kind):
  store = FeatureStore.create(tmp_path / "s", {})
  with pytest.raises(ValueError, match=r"feature kind must be a plain name"):
    store.writer(kind)
  with pytest.raises(ValueError, match=r"feature kind must be a plain name"):
    store.has(kind, "a")
  with pytest.raises(ValueError, match=r"feature kind must be a plain name"):
    features.import_arrays(tmp_path / "s", kind, __file__, ["a"])
  assert not (tmp_path / "escape").exists() and not list((tmp_path / "s").glob("*.npy"))
  with pytest.raises(ValueError, match=r"shard_prefix must be a plain name"):
    store.writer("clip", shard_prefix="../p")


def test_a_kind_holds_one_shape_and_one_dtype(tmp_path):
  store = write_arrays(tmp_path, {"clip": (["a", "b"], np.ones((2, 8), np.float32))})
  with pytest.raises(ValueError, match=r"kind 'clip': this writer stores float32 items of shape \[16\] but the kind "
                                       r"holds float32 items of shape \[8\] \(shard clip/p0-00000\)"):
    with store.writer("clip", shard_prefix="p1") as w:
      w.add("c", np.ones(16))
  with pytest.raises(ValueError, match=r"this writer stores bfloat16 items of shape \[8\] but the kind holds float32"):
    with store.writer("clip", shard_prefix="p1", dtype="bfloat16") as w:
      w.add("c", np.ones(8))
  # A writer that started before the kind had any shard (another process) is refused when it commits.
  fresh = FeatureStore.create(tmp_path / "t", {})
  late = FeatureStore(tmp_path / "t").writer("clip", shard_prefix="p1")
  late.add("z", np.ones(16))
  with fresh.writer("clip") as w:
    w.add("a", np.ones(8))
  with pytest.raises(ValueError, match=r"shape \[16\] but the kind holds float32 items of shape \[8\]"):
    late.flush()
  assert FeatureStore(tmp_path).verify()["clip"] == {"items": 2, "shape": [8], "shards": 1}


@pytest.mark.parametrize("value, message", [
    (np.array([1 + 2j, 3 + 0j]), r"id 'x': features must be real numbers, got an array of dtype complex128 \(storing "
                                 r"them would drop the imaginary part\)"),
    (np.array(["a", "b"]), r"id 'x': features must be real numbers, got an array of dtype <U1"),
    (np.array([{}, None], dtype=object), r"dtype object"),
])
def test_rows_that_are_not_real_numbers_are_refused(tmp_path, value, message):
  store = FeatureStore.create(tmp_path, {})
  with pytest.raises(ValueError, match=message):
    with store.writer("clip") as w:
      w.add("x", value)
  assert store.kinds() == []


def _two_shards(root):
  store = FeatureStore.create(root, {})
  with store.writer("clip", flush_every=2) as w:
    for i, item_id in enumerate("abcd"):
      w.add(item_id, np.full(3, i, np.float32))
  return root / "clip"


def _edit_ids(path, **changes):
  meta = json.loads(path.read_text())
  meta.update(changes)
  path.write_text(json.dumps(meta))


@pytest.mark.parametrize("damage, message", [
    (lambda d: _edit_ids(d / "p0-00001.ids.json", shape=[4]),
     r"shard clip/p0-00001: p0-00001.npy has rows of shape \[3\] but its id list p0-00001.ids.json declares float32 "
     r"items of shape \[4\]"),
    (lambda d: _edit_ids(d / "p0-00001.ids.json", ids=[0, 1]),
     r"shard clip/p0-00001: its id list p0-00001.ids.json holds id #0 = 0 \(int\); ids are non-empty strings"),
    (lambda d: _edit_ids(d / "p0-00001.ids.json", ids=["c", "c"]), r"p0-00001.ids.json names 'c' more than once"),
    (lambda d: _edit_ids(d / "p0-00001.ids.json", dtype="bfloat16"),
     r"p0-00001.npy holds float32 values but its id list p0-00001.ids.json declares bfloat16 \(stored as uint16\)"),
    (lambda d: _edit_ids(d / "p0-00001.ids.json", dtype="float64"), r"declares dtype 'float64'"),
    (lambda d: _edit_ids(d / "p0-00001.ids.json", shape="3"), r"declares shape '3'"),
    (lambda d: np.save(d / "p0-00001.npy", np.array([["x", "y", "z"]] * 2)),
     r"p0-00001.npy holds <U1 values but its id list p0-00001.ids.json declares float32"),
    (lambda d: np.save(d / "p0-00001.npy", np.ones((2, 3), np.float64)), r"p0-00001.npy holds float64 values"),
    # Another shard of the kind with other items: declared and written consistently, but not like the first.
    (lambda d: (np.save(d / "p0-00001.npy", np.ones((2, 5), np.float32)), _edit_ids(d / "p0-00001.ids.json",
                                                                                  shape=[5], sha256=None)),
     r"kind 'clip' mixes items: shard clip/p0-00001 holds float32 items of shape \[5\] but "
     r"shard clip/p0-00000 holds float32 items of shape \[3\]"),
])
def test_a_shard_that_disagrees_with_its_id_list_or_its_kind_names_the_file(tmp_path, damage, message):
  kdir = _two_shards(tmp_path)
  damage(kdir)
  with pytest.raises(ValueError, match=message):
    store = FeatureStore(tmp_path)
    store.get("clip", store.ids("clip"))
  with pytest.raises(ValueError, match=message):
    FeatureStore(tmp_path).verify()


def test_verify_finds_rows_that_are_not_the_ones_the_id_list_was_written_with(tmp_path):
  kdir = _two_shards(tmp_path)
  a, b = (kdir / "p0-00000.npy").read_bytes(), (kdir / "p0-00001.npy").read_bytes()
  (kdir / "p0-00000.npy").write_bytes(b)  # rows of 'c', 'd' under the ids 'a', 'b': the shapes all agree
  (kdir / "p0-00001.npy").write_bytes(a)
  with pytest.raises(ValueError, match=r"shard clip/p0-00000: p0-00000.npy does not hold the rows its id list "
                                       r"p0-00000.ids.json was written with"):
    FeatureStore(tmp_path).verify()


def test_an_id_list_with_a_byte_order_mark_is_read_like_one_without(tmp_path):
  kdir = _two_shards(tmp_path)
  path = kdir / "p0-00000.ids.json"
  path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
  store = FeatureStore(tmp_path)
  assert store.has("clip", "a") and store.ids("clip") == ["a", "b", "c", "d"]


@pytest.mark.parametrize("content, message", [
    ("[1, 2]", r"manifest .*manifest.json holds a JSON list, expected an object"),
    ('"x"', r"holds a JSON str"),
    ("{", r"manifest .*manifest.json is not valid JSON"),
])
def test_a_manifest_that_is_not_an_object_names_the_file(tmp_path, content, message):
  (tmp_path / "manifest.json").write_text(content)
  with pytest.raises(ValueError, match=message):
    FeatureStore(tmp_path)


def test_a_killed_writers_temporary_files_are_cleaned_like_its_orphan_arrays(tmp_path):
  store = FeatureStore.create(tmp_path, {})
  with store.writer("clip") as w:
    w.add("a", np.ones(3, np.float32))
  kdir = tmp_path / "clip"
  left = [kdir / ".p0-00001.ids.json.k2j4x9.tmp", kdir / ".p0-00001.npy.abc123.tmp", kdir / "p0-00003.npy"]
  others = [kdir / ".p0-x-00000.npy.abc123.tmp", kdir / "p1-00000.npy"]  # another prefix's: its writer cleans them
  for f in left + others:
    f.write_bytes(b"half")
  assert FeatureStore(tmp_path).ids("clip") == ["a"]  # readers never see them
  with store.writer("clip") as w:  # the next writer of the prefix removes them
    w.add("b", np.full(3, 2.0, np.float32))
  assert sorted(p.name for p in kdir.iterdir()) == sorted(
      ["p0-00000.ids.json", "p0-00000.npy", "p0-00001.ids.json", "p0-00001.npy"] + [f.name for f in others])
  store.writer("clip", shard_prefix="p1")
  store.writer("clip", shard_prefix="p0-x")
  assert not any(f.exists() for f in others)
  (tmp_path / ".manifest.json.zz81.tmp").write_text("{")
  store.update_metadata({"x": 1})
  assert not (tmp_path / ".manifest.json.zz81.tmp").exists() and FeatureStore(tmp_path).metadata == {"x": 1}


def _write_bad_npy(path, kind):
  if kind == "truncated":
    np.save(path, np.ones((4, 3), np.float32))
    path.write_bytes(path.read_bytes()[:-10])
  elif kind == "object":
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
  elif kind == "0-d":
    np.save(path, np.float32(3.0))
  elif kind == "complex":
    np.save(path, np.ones((2, 3), np.complex64))
  elif kind == "strings":
    np.save(path, np.array(["u", "v"]))
  elif kind == "garbage":
    path.write_bytes(b"not an array at all")
  elif kind == "npz":
    np.savez(path.with_suffix(".npz"), x=np.ones((2, 3)))
    path.with_suffix(".npz").rename(path)


@pytest.mark.parametrize("kind, message", [
    ("truncated", r"array file .*a.npy cannot be read"),
    ("object", r"array file .*a.npy cannot be read .*Object arrays cannot be loaded"),
    ("0-d", r"array file .*a.npy holds a single value \(a 0-d array\)"),
    ("complex", r"array file .*a.npy holds complex64 values \(the imaginary part would be dropped\)"),
    ("strings", r"array file .*a.npy holds <U1 values"),
    ("garbage", r"array file .*a.npy cannot be read"),
    ("npz", r"array file .*a.npy is an .npz archive, not an .npy array"),
])
def test_import_of_an_unreadable_array_names_the_file_in_python_and_at_the_command_line(tmp_path, capsys, kind,
                                                                                        message):
  _write_bad_npy(tmp_path / "a.npy", kind)
  (tmp_path / "ids.txt").write_text("u\nv\n")
  with pytest.raises(ValueError, match=message):
    features.import_arrays(tmp_path / "s", "clip", tmp_path / "a.npy", tmp_path / "ids.txt")
  assert features.main(["import", str(tmp_path / "s"), "clip", str(tmp_path / "a.npy"), str(tmp_path / "ids.txt")]) == 1
  err = capsys.readouterr().err
  assert err.startswith("feature store error: array file") and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("name, content, message", [
    ("ids.txt", b"u\n\xff\xfev\n", r"id list .*ids.txt is not UTF-8 text \(invalid start byte at byte 2\)"),
    ("ids.json", b'["u", 0]', r"id list .*ids.json: entry #1 is 0 \(int\); ids are non-empty strings"),
    ("ids.json", b'{"u": 0}', r"id list .*ids.json must be a JSON list of strings, got a JSON dict"),
    ("ids.txt", b"u\nv\nu\n", r"the id list .*ids.txt for .*a.npy names 1 ids more than once: 'u'"),
])
def test_import_of_a_bad_id_list_names_the_file(tmp_path, capsys, name, content, message):
  np.save(tmp_path / "a.npy", np.ones((3 if b"u\nv\nu" in content else 2, 3), np.float32))
  (tmp_path / name).write_bytes(content)
  with pytest.raises(ValueError, match=message):
    features.import_arrays(tmp_path / "s", "clip", tmp_path / "a.npy", tmp_path / name)
  assert features.main(["import", str(tmp_path / "s"), "clip", str(tmp_path / "a.npy"), str(tmp_path / name)]) == 1
  assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_import_names_duplicate_ids_and_ignores_a_byte_order_mark(tmp_path):
  np.save(tmp_path / "a.npy", np.arange(6, dtype=np.float32).reshape(3, 2))
  np.save(tmp_path / "b.npy", np.ones((4, 2), np.float32))
  with pytest.raises(ValueError, match=r"the id list for .*b.npy names 2 ids more than once: 'u', 'v'"):
    features.import_arrays(tmp_path / "s", "clip", tmp_path / "b.npy", ["v", "u", "v", "u"])
  (tmp_path / "ids.txt").write_bytes(b"\xef\xbb\xbfu\r\nv\r\nw\r\n")  # as Windows Notepad saves it
  store = features.import_arrays(tmp_path / "s", "clip", tmp_path / "a.npy", tmp_path / "ids.txt")
  assert store.has("clip", "u") and store.ids("clip") == ["u", "v", "w"]
  np.testing.assert_array_equal(store.get("clip", ["u"]), [[0, 1]])


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


class _FullDisk:
  """A file object whose writes fail with ENOSPC once `room` bytes are written (what a full disk does)."""

  def __init__(self, f, room):
    self._f, self._room = f, room

  def write(self, data):
    data = memoryview(data).cast("B")
    if len(data) > self._room:
      self._f.write(data[:self._room])
      self._room = 0
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    self._room -= len(data)
    return self._f.write(data)

  def __getattr__(self, name):
    return getattr(self._f, name)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self._f.close()


def _short_write_save(f, array, allow_pickle=False):  # numpy's report of a short write: no errno, no file
  f.write(b"\x93NUMPY partial")
  raise OSError(f"{array.nbytes} requested and {array.nbytes // 2} written")


@pytest.mark.parametrize("fault", ["array", "id list", "numpy short write"])
def test_a_full_disk_names_the_file_leaves_nothing_half_written_and_the_next_run_completes(tmp_path, monkeypatch,
                                                                                          capsys, fault):
  store = FeatureStore.create(tmp_path / "s", {})
  with store.writer("clip", flush_every=2) as w:
    w.add("a", np.ones(4, np.float32))
    w.add("b", np.ones(4, np.float32))
  real_fdopen = os.fdopen
  if fault == "numpy short write":
    monkeypatch.setattr(np, "save", _short_write_save)
  else:
    def fdopen(fd, *args, **kwargs):
      f = real_fdopen(fd, *args, **kwargs)
      name = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else ""
      full = (".ids.json." in name) if fault == "id list" else (".npy." in name)
      return _FullDisk(f, 10) if full else f
    monkeypatch.setattr(os, "fdopen", fdopen)
  w = store.writer("clip", flush_every=100)
  w.add("c", np.full(4, 3.0, np.float32))
  shard = "p0-00001.ids.json" if fault == "id list" else "p0-00001.npy"
  with pytest.raises(io.DiskFullError, match=rf"s/clip/{shard}: no space left on device while writing it"):
    w.flush()
  monkeypatch.undo()
  kdir = tmp_path / "s" / "clip"
  assert sorted(p.name for p in kdir.iterdir()) == ["p0-00000.ids.json", "p0-00000.npy"]  # nothing half-written
  assert FeatureStore(tmp_path / "s").ids("clip") == ["a", "b"]
  w.flush()  # space freed: the same writer (or a rerun) completes
  assert FeatureStore(tmp_path / "s").verify()["clip"] == {"items": 3, "shape": [4], "shards": 2}
  # The import command: one line naming the file and "no space left".
  np.save(tmp_path / "e.npy", np.ones((2, 4), np.float32))
  (tmp_path / "ids.txt").write_text("x\ny\n")
  monkeypatch.setattr(np, "save", _short_write_save)
  assert features.main(["import", str(tmp_path / "t"), "clip", str(tmp_path / "e.npy"), str(tmp_path / "ids.txt")]) == 1
  err = capsys.readouterr().err
  assert "t/clip/import-00000.npy: no space left on device" in err and len(err.strip().splitlines()) == 1, err
  assert not [p for p in (tmp_path / "t" / "clip").iterdir()]


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


# ----------------------------------------------------------------------------- issue 62: a store cannot be scrambled


def test_reordered_ids_are_refused_when_read_and_by_verify(tmp_path):
  """The ids of a shard's id list swapped (shapes, dtype and rows all still agree): the hash its id list recorded
  covers the ids and rows together, so the shard is refused before a row is read under another id."""
  kdir = _two_shards(tmp_path)
  _edit_ids(kdir / "p0-00000.ids.json", ids=["b", "a"])
  message = (r"shard clip/p0-00000: p0-00000.npy does not hold the rows its id list p0-00000.ids.json was written "
             r"with \(the sha256_ids_rows of its ids and rows differs")
  with pytest.raises(ValueError, match=message):
    FeatureStore(tmp_path).get("clip", ["a"])
  with pytest.raises(ValueError, match=message):
    FeatureStore(tmp_path).verify()
  assert features.main(["verify", str(tmp_path)]) == 1


def _as_written_before_issue_62(kdir):
  """Id lists as the store wrote them before its hash covered the ids: "sha256" of the rows only."""
  for path in kdir.glob("*.ids.json"):
    meta = json.loads(path.read_text())
    del meta["sha256_ids_rows"]
    meta["sha256"] = __import__("hashlib").sha256(np.load(path.with_name(
        path.name.replace(".ids.json", ".npy"))).tobytes()).hexdigest()
    path.write_text(json.dumps(meta))


def test_the_hash_of_ids_and_rows_is_required_and_an_older_store_is_upgraded_once(tmp_path, capsys):
  kdir = _two_shards(tmp_path)
  _as_written_before_issue_62(kdir)
  with pytest.raises(ValueError, match=r"shard clip/p0-00000: its id list p0-00000.ids.json records no "
                                       r"sha256_ids_rows .*upgrade the store once with `python -m "
                                       r"vidjax.data.features upgrade "):
    FeatureStore(tmp_path).ids("clip")
  assert features.main(["verify", str(tmp_path)]) == 1
  err = capsys.readouterr().err
  assert len(err.strip().splitlines()) == 1 and "records no sha256_ids_rows" in err, err
  _edit_ids(kdir / "p0-00001.ids.json", ids=["d", "c"])  # reordered before the upgrade: its rows hash still matches,
  assert features.main(["upgrade", str(tmp_path)]) == 0    # so the upgrade records the order it finds
  assert json.loads(capsys.readouterr().out)["upgraded_shards"] == {"clip": 2}
  store = FeatureStore(tmp_path)
  np.testing.assert_array_equal(store.get("clip", ["a", "d"])[:, 0], [0, 2])
  assert features.main(["upgrade", str(tmp_path)]) == 0  # once: nothing left to upgrade
  assert json.loads(capsys.readouterr().out)["upgraded_shards"] == {}
  # Edited rows are not vouched for by an upgrade, and an id list with no hash at all is refused.
  kdir = _two_shards(tmp_path / "t")
  _as_written_before_issue_62(kdir)
  np.save(kdir / "p0-00001.npy", np.full((2, 3), 7, np.float32))
  with pytest.raises(ValueError, match=r"shard clip/p0-00001: p0-00001.npy does not hold the rows its id list was "
                                       r"written with"):
    FeatureStore(tmp_path / "t").upgrade()
  _edit_ids(kdir / "p0-00001.ids.json", sha256=None)
  with pytest.raises(ValueError, match=r"shard clip/p0-00001: its id list records no hash of its rows"):
    FeatureStore(tmp_path / "t").upgrade()


@pytest.mark.parametrize("name", ["p[0]", "p*", "p?", "a b", "p0\n", "é"])
def test_shard_prefixes_and_kinds_with_glob_or_odd_characters_are_refused(tmp_path, name):
  store = write_arrays(tmp_path, {"clip": (["a"], np.ones((1, 3), np.float32))})
  with pytest.raises(ValueError, match=r"shard_prefix must be a plain name .*no path or glob characters"):
    store.writer("clip", shard_prefix=name)
  with pytest.raises(ValueError, match=r"feature kind must be a plain name"):
    store.writer(name)
  np.testing.assert_array_equal(FeatureStore(tmp_path).get("clip", ["a"]), [[1, 1, 1]])


def test_a_prefix_that_ends_like_another_never_takes_its_shard_names(tmp_path):
  """Shard names are found by listing the kind, not by a glob of the prefix: writers of "p0" and "p0-00000" (each
  a plain name) keep their own shards."""
  store = write_arrays(tmp_path, {"clip": (["a"], np.ones((1, 3), np.float32))})
  for prefix, item in (("p0-00000", "b"), ("p0", "c")):
    with store.writer("clip", shard_prefix=prefix) as w:
      w.add(item, np.full(3, ord(item), np.float32))
  store = FeatureStore(tmp_path)
  assert store.ids("clip") == ["a", "b", "c"] and store.verify()["clip"]["shards"] == 3


@pytest.mark.parametrize("item_id, why", [("", "empty"), ("  \t", "only whitespace"), ("a\x00b", "holds a NUL")])
def test_an_empty_or_blank_id_is_refused_when_added(tmp_path, item_id, why):
  store = FeatureStore.create(tmp_path, {})
  with store.writer("clip") as w:
    w.add("ok", np.ones(3))
    with pytest.raises(ValueError, match=rf"kind 'clip': id .* is {why}.*; ids are non-empty strings"):
      w.add(item_id, np.ones(3))
  assert FeatureStore(tmp_path).ids("clip") == ["ok"]  # the store stays readable
  with pytest.raises(ValueError, match="ids are non-empty strings"):
    write_arrays(tmp_path / "s", {"clip": (["u", item_id], np.ones((2, 3)))})


def test_creating_an_existing_store_refuses_another_manifest_instead_of_rewriting_it(tmp_path):
  FeatureStore.create(tmp_path, {"backbone": "videoprism", "num_frames": 16, "shape": (2, 3)})
  before = (tmp_path / "manifest.json").read_bytes()
  with pytest.raises(ValueError, match=r"its manifest.json says backbone=\"videoprism\", but it was opened to be "
                                       r"written with backbone=\"clip\"; a store keeps one manifest"):
    FeatureStore.create(tmp_path, {"backbone": "clip", "num_frames": 16})
  with pytest.raises(ValueError, match=r"backbone=\"clip\""):
    write_arrays(tmp_path, {"clip": (["a"], np.ones((1, 3)))}, {"backbone": "clip"})
  assert (tmp_path / "manifest.json").read_bytes() == before and not (tmp_path / "clip").exists()
  FeatureStore.create(tmp_path, {"backbone": "videoprism", "shape": (2, 3)})  # the same (tuples as lists): reopened
  assert (tmp_path / "manifest.json").read_bytes() == before
  assert FeatureStore.create(tmp_path, {"backbone": "videoprism", "dataset": "coin"}).metadata == {
      "backbone": "videoprism", "num_frames": 16, "shape": [2, 3], "dataset": "coin"}  # a new key is added
  # Importing a second kind keeps the manifest the first import wrote.
  np.save(tmp_path / "a.npy", np.ones((1, 3), np.float32))
  np.save(tmp_path / "b.npy", np.ones((1, 3), np.float32))
  features.import_arrays(tmp_path / "s", "clip", tmp_path / "a.npy", ["x"])
  features.import_arrays(tmp_path / "s", "text", tmp_path / "b.npy", ["x"])
  assert FeatureStore(tmp_path / "s").metadata == {"source": str(tmp_path / "a.npy")}


def test_get_of_no_ids_has_the_kinds_item_shape(tmp_path):
  store = write_arrays(tmp_path, {"clip": (["a"], np.ones((1, 4))), "tokens": (["a"], np.ones((1, 2, 3)))})
  assert store.get("clip", []).shape == (0, 4) and store.get("tokens", []).shape == (0, 2, 3)
  assert store.get("clip", []).dtype == np.float32


def test_remove_drops_items_and_keeps_every_other_row_of_their_shards(tmp_path):
  store = FeatureStore.create(tmp_path, {})
  with store.writer("clip", flush_every=3) as w:
    for i, item_id in enumerate("abcdefg"):
      w.add(item_id, np.full(3, i, np.float32))
  assert store.remove("clip", ["b", "e", "zzz"]) == 2
  store = FeatureStore(tmp_path)
  assert store.ids("clip") == list("acdfg")
  np.testing.assert_array_equal(store.get("clip", list("acdfg"))[:, 0], [0, 2, 3, 5, 6])
  assert store.verify()["clip"]["items"] == 5
  with store.writer("clip") as w:  # a removed id is written again with new values (what re-extraction does)
    assert w.add("b", np.full(3, 9.0, np.float32))
  np.testing.assert_array_equal(FeatureStore(tmp_path).get("clip", ["b"]), [[9, 9, 9]])


def test_ids_that_are_not_strings_and_bfloat16_overflow_are_refused_at_add(tmp_path):
  """A non-string id is never turned into one (None -> "None"); a finite value that overflows the kind's bfloat16
  would be stored as Inf and poison every read of its shard."""
  store = FeatureStore.create(tmp_path, {})
  with store.writer("clip") as w:
    for bad in (None, 5, b"a"):
      with pytest.raises(ValueError, match=f"id {bad!r} is a {type(bad).__name__}; ids are non-empty strings"):
        w.add(bad, np.zeros(4))
    w.add("ok", np.zeros(4))
  with store.writer("half", dtype="bfloat16") as w:
    with pytest.raises(ValueError, match="id 'big': a value of magnitude 3.4e\\+38 overflows bfloat16"):
      w.add("big", np.full(4, 3.4e38, np.float32))
    w.add("ok", np.ones(4))
  assert FeatureStore(tmp_path).ids("clip") == ["ok"] and FeatureStore(tmp_path).get("half", ["ok"]).shape == (1, 4)
