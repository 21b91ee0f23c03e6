"""Saved indexes that lie, and saves that fail (issue 50): `DenseIndex.load` checks every file against what index.json
claims and names the index and the file; `DenseIndex.save` on a full disk is one "no space left" error and leaves
nothing behind; `StackIndex` (what `python -m vidjax.search` opens) checks its manifest and files the same way, and the
CLI's errors quote at most the start of a long query.

Same shapes as tests/test_dense_index.py (D=16, chunk=128, query_batch=8): 300 rows are three chunks, the last
ragged, so the jitted programs are the ones that file compiles.
"""
import errno
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from vidjax import search
from vidjax.retrieval import index as index_format
from vidjax.retrieval import DenseIndex, dense, files

D, CHUNK, QB = 16, 128, 8


def _data(n=300, seed=0):
  rng = np.random.default_rng(seed)
  return [f"vid{i:05d}" for i in rng.permutation(n)], rng.normal(size=(n, D)).astype(np.float32)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  """(a saved 300-row index, the index, a query batch): each test damages a copy."""
  ids, x = _data()
  index = DenseIndex(ids, x, chunk=CHUNK, query_batch=QB)
  path = index.save(tmp_path_factory.mktemp("saved") / "index")
  return path, index, np.random.default_rng(1).normal(size=(5, D)).astype(np.float32)


@pytest.fixture
def copy(saved, tmp_path):
  shutil.copytree(saved[0], tmp_path / "index")
  return tmp_path / "index"


def _as_format_1(path):
  """What an index saved before the hashes were recorded looks like."""
  meta = json.loads((path / "index.json").read_text())
  meta["format"] = 1
  del meta["files"]
  (path / "index.json").write_text(json.dumps(meta))


def _load_error(path, match, cls=ValueError):
  with pytest.raises(cls, match=match) as e:
    DenseIndex.load(path)
  assert str(path) in str(e.value), e.value
  return str(e.value)


def test_index_json_records_every_file_and_an_old_index_still_loads(saved, copy):
  path, index, q = saved
  meta = json.loads((path / "index.json").read_text())
  assert meta["format"] == dense.INDEX_FORMAT == 2
  assert set(meta["files"]) == {"ids.npy", "vectors.npy"}
  assert meta["files"]["vectors.npy"]["chunk_rows"] == CHUNK and len(meta["files"]["vectors.npy"]["chunk_sha256"]) == 3
  assert meta["files"]["ids.npy"]["bytes"] == (path / "ids.npy").stat().st_size
  np.testing.assert_array_equal(np.load(path / "ids.npy"), index.ids)  # plain .npy files, as before
  _as_format_1(copy)
  back = DenseIndex.load(copy)
  np.testing.assert_array_equal(back.search(q, 7)[0], index.search(q, 7)[0])


@pytest.mark.parametrize("old", [False, True], ids=["hashed", "format1"])
def test_a_nan_row_in_vectors_is_refused_naming_the_file(copy, saved, old):
  if old:
    _as_format_1(copy)
  vectors = np.load(copy / "vectors.npy", mmap_mode="r+")
  vectors[200] = np.nan  # chunk 1 (rows 128..255)
  vectors.flush()
  del vectors
  message = _load_error(copy, "vectors.npy")
  if old:  # no hashes: the rows themselves are checked, naming the id
    assert "not finite" in message and repr(str(saved[1].ids[200])) in message
  else:
    assert "rows 128..255" in message and "SHA-256" in message


def test_an_edited_row_of_an_old_index_is_refused(copy, saved):
  _as_format_1(copy)
  vectors = np.load(copy / "vectors.npy", mmap_mode="r+")
  vectors[299] *= 3  # the ragged last chunk; no longer a unit vector
  vectors.flush()
  del vectors
  message = _load_error(copy, "not unit vectors")
  assert repr(str(saved[1].ids[299])) in message


@pytest.mark.parametrize("old", [False, True], ids=["hashed", "format1"])
def test_reordered_ids_are_refused(copy, old):
  if old:
    _as_format_1(copy)
  ids = np.load(copy / "ids.npy")
  np.save(copy / "ids.npy", ids[np.r_[1, 0, 2:len(ids)]])  # two ids swapped: same size, same set
  _load_error(copy, "ids.npy .*(SHA-256|not sorted)")


@pytest.mark.parametrize("old", [False, True], ids=["hashed", "format1"])
def test_vectors_resaved_as_float64_are_refused(copy, old):
  if old:
    _as_format_1(copy)
  np.save(copy / "vectors.npy", np.load(copy / "vectors.npy").astype(np.float64))
  _load_error(copy, r"vectors.npy holds float64 \(300, 16\), index.json says float32 \(300, 16\)")


@pytest.mark.parametrize("damage,match", [
    ("truncate_vectors", "vectors.npy has .* bytes, its header needs .*truncated"),
    ("empty_vectors", "vectors.npy is not a readable .npy array"),
    ("missing_vectors", "vectors.npy is missing"),
    ("truncate_ids", "ids.npy has .* bytes, index.json recorded .*truncated"),
    ("garbage_json", "index.json is not valid JSON"),
    ("list_json", "index.json holds a JSON list"),
    ("incomplete_json", "index.json lacks 'dim', 'n'"),
    ("bad_field", "index.json field 'query_batch' is '0', expected a positive integer"),
    ("unknown_backend", "index.json names backend 'annoy', which this vidjax does not have"),
    ("no_hashes", r"index.json lacks the chunk hashes of vectors.npy"),
])
def test_damaged_files_are_one_error_naming_the_index_and_the_file(copy, damage, match):
  meta = json.loads((copy / "index.json").read_text())
  if damage == "truncate_vectors":
    data = (copy / "vectors.npy").read_bytes()
    (copy / "vectors.npy").write_bytes(data[:len(data) // 2])
  elif damage == "empty_vectors":
    (copy / "vectors.npy").write_bytes(b"")
  elif damage == "missing_vectors":
    (copy / "vectors.npy").unlink()
  elif damage == "truncate_ids":
    data = (copy / "ids.npy").read_bytes()
    (copy / "ids.npy").write_bytes(data[:100])
  elif damage == "garbage_json":
    (copy / "index.json").write_bytes(b"\x00garbage{")
  elif damage == "list_json":
    (copy / "index.json").write_text("[1, 2]")
  elif damage == "incomplete_json":
    (copy / "index.json").write_text(json.dumps({k: v for k, v in meta.items() if k not in ("dim", "n")}))
  elif damage == "bad_field":
    (copy / "index.json").write_text(json.dumps(meta | {"query_batch": 0}))
  elif damage == "unknown_backend":
    (copy / "index.json").write_text(json.dumps(meta | {"backend": "annoy"}))
  elif damage == "no_hashes":
    del meta["files"]["vectors.npy"]
    (copy / "index.json").write_text(json.dumps(meta))
  _load_error(copy, match)


def test_truncated_ids_of_an_old_index_name_the_file(copy):
  _as_format_1(copy)
  data = (copy / "ids.npy").read_bytes()
  (copy / "ids.npy").write_bytes(data[:100])
  _load_error(copy, "ids.npy is not a readable .npy array")


def test_a_killed_save_points_at_the_index_it_was_replacing(copy):
  copy.rename(copy.with_name("index.old"))  # killed between moving the old index aside and moving the new one in
  with pytest.raises(FileNotFoundError, match=r"index.old holds the index an interrupted save was replacing"):
    DenseIndex.load(copy)


def _full_disk_after(monkeypatch, calls):
  """Every write after the first `calls` ones fails as a full disk's does (os.write: OSError ENOSPC)."""
  real, seen = files._os_write, []

  def write(fd, data, offset):
    seen.append(len(data))
    if len(seen) > calls:
      raise OSError(errno.ENOSPC)  # as the brief of issue 50 simulates it: no strerror, no file name
    return real(fd, data, offset)

  monkeypatch.setattr(files, "_os_write", write)
  return seen


@pytest.mark.parametrize("calls", [0, 2, 3, 6])  # ids.npy header / vectors.npy header / its rows / index.json
def test_a_full_disk_is_one_message_and_leaves_nothing(saved, copy, monkeypatch, calls):
  path, index, q = saved
  before = {p.name: p.read_bytes() for p in copy.iterdir()}
  seen = _full_disk_after(monkeypatch, calls)
  with pytest.raises(OSError, match="no space left on device writing") as e:
    index.save(copy)
  assert len(seen) == calls + 1  # the failing write was reached
  message = str(e.value)
  assert str(copy) in message and e.value.errno == errno.ENOSPC, message
  assert not copy.with_name("index.tmp").exists() and not copy.with_name("index.old").exists()
  assert {p.name: p.read_bytes() for p in copy.iterdir()} == before  # the index already there is untouched
  monkeypatch.undo()
  np.testing.assert_array_equal(DenseIndex.load(copy).search(q, 5)[0], index.search(q, 5)[0])


def test_too_little_free_space_is_refused_before_writing(saved, tmp_path, monkeypatch):
  path, index, _ = saved
  real = shutil.disk_usage
  monkeypatch.setattr(dense.shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
  with pytest.raises(OSError, match=r"no space left on device for the index: it needs [0-9,]+ bytes, 1,000 are free"):
    index.save(tmp_path / "index")
  assert not (tmp_path / "index.tmp").exists() and not (tmp_path / "index").exists()


def test_a_killed_saves_leftovers_are_cleaned_by_the_next_save(saved, tmp_path):
  path, index, q = saved
  tmp = tmp_path / "index.tmp"
  tmp.mkdir()
  (tmp / "vectors.npy").write_bytes(b"half written")
  (tmp / "ids.npy").write_bytes(b"")
  index.save(tmp_path / "index")
  assert not tmp.exists()
  np.testing.assert_array_equal(DenseIndex.load(tmp_path / "index").search(q, 5)[0], index.search(q, 5)[0])


def test_bfloat16_index_round_trips_with_its_hashes(tmp_path):
  ids, x = _data(200, seed=3)
  index = DenseIndex(ids, x, dtype="bfloat16", chunk=CHUNK, query_batch=QB)
  back = DenseIndex.load(index.save(tmp_path / "index"))
  assert json.loads((tmp_path / "index" / "index.json").read_text())["files"]["vectors.npy"]["dtype"] == "<u2"
  np.testing.assert_array_equal(back.vectors(ids[:7]), index.vectors(ids[:7]))
  raw = np.load(tmp_path / "index" / "vectors.npy", mmap_mode="r+")
  raw[150, 3] ^= 1  # one bit of one bfloat16 value
  raw.flush()
  del raw
  _load_error(tmp_path / "index", "rows 128..199")


def test_faiss_index_file_is_checked(tmp_path):
  pytest.importorskip("faiss", reason="faiss-cpu is an optional extra (pip install vidjax[faiss])")
  ids, x = _data(300, seed=4)
  path = DenseIndex(ids, x, backend="faiss").save(tmp_path / "index")
  assert set(json.loads((path / "index.json").read_text())["files"]) == {"ids.npy", "faiss.index"}
  data = bytearray((path / "faiss.index").read_bytes())
  data[-5] ^= 0xFF
  (path / "faiss.index").write_bytes(bytes(data))
  _load_error(path, "faiss.index does not match the SHA-256")


# ----------------------------------------------------------------------------- the stack index vidjax.search opens


def _stack_index(path, n=12, dim=D):
  """A minimal stack index as `write_index` lays it out: a dense recall stage and its caption table, no stages."""
  rng = np.random.default_rng(5)
  ids = [f"clip{i:03d}" for i in range(n)]
  captions = [f"step {i % 4}" for i in range(n)]
  path.mkdir()
  np.savez(path / "corpus.npz", ids=np.array(ids), vectors=rng.normal(size=(n, dim)).astype(np.float32),
           captions=np.array(captions), videos=np.array([f"v{i // 3}" for i in range(n)]))
  unique = sorted(set(captions))
  np.savez(path / "texts.npz", captions=np.array(unique), vectors=rng.normal(size=(len(unique), dim)).astype(np.float32))
  manifest = {"format": index_format.INDEX_FORMAT, "dataset": "test", "synthetic": True, "backbone": "b", "dim": dim,
              "clips": n, "text_encoder": {"kind": "caption_lookup", "file": "texts.npz", "backbone": "b"},
              "recall": {"kind": "dense", "file": "corpus.npz", "k": 10, "backbone": "b",
                         "index": {"backend": "jax", "dtype": "float32", "params": {}}},
              "stages": [], "omitted_stages": [],
              "files": {f: files.file_record(path / f) for f in ("corpus.npz", "texts.npz")}}
  _write_manifest(path, manifest)
  return path, manifest


def _write_manifest(path, manifest):
  """Writes `manifest` with the hash of its fields (what a writer with these values would have written)."""
  manifest[index_format.MANIFEST_HASH] = index_format.manifest_digest(manifest)
  (path / "manifest.json").write_text(json.dumps(manifest))


def _cli_error(path, capsys, query="step 1"):
  assert search.main(["--index", str(path), query]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith("vidjax.search: "), err
  return err


def test_stack_index_opens_and_searches(tmp_path, capsys):
  path, _ = _stack_index(tmp_path / "index")
  assert search.main(["--index", str(path), "step 1", "--json", "--k", "3"]) == 0
  assert len(json.loads(capsys.readouterr().out)["results"]) == 3


@pytest.mark.parametrize("damage,match", [
    ("edited_corpus", "corpus.npz does not match the SHA-256 manifest.json recorded"),
    ("truncated_texts", "texts.npz has .* bytes, manifest.json recorded .*truncated"),
    ("missing_key", r"manifest.json: recall.k is missing, expected an integer in \[1, 12\]"),
    ("bad_type", "manifest.json: dim is 16.0, expected a positive integer"),
    ("unknown_backend", "manifest.json: recall index .*'annoy'.* is not one this vidjax builds"),
    ("wrong_count", "corpus.npz holds 12 ids .*the manifest says 13 clips"),
    ("nan_vector", "corpus.npz vectors of 'clip004' are not finite"),
    ("nan_caption", "texts.npz vectors of 'step 2' are not finite"),
])
def test_stack_index_checks_what_it_claims(tmp_path, capsys, damage, match):
  path, manifest = _stack_index(tmp_path / "index")
  if damage == "edited_corpus":
    with np.load(path / "corpus.npz") as z:
      arrays = dict(z)
    arrays["vectors"][4] += 1
    np.savez(path / "corpus.npz", **arrays)
  elif damage == "truncated_texts":
    data = (path / "texts.npz").read_bytes()
    (path / "texts.npz").write_bytes(data[:len(data) // 2])
  else:
    if damage == "missing_key":
      del manifest["recall"]["k"]
    elif damage == "bad_type":
      manifest["dim"] = 16.0
    elif damage == "unknown_backend":
      manifest["recall"]["index"]["backend"] = "annoy"
    elif damage == "wrong_count":
      manifest["clips"] = 13
    elif damage in ("nan_vector", "nan_caption"):
      name = "corpus.npz" if damage == "nan_vector" else "texts.npz"
      with np.load(path / name) as z:
        arrays = dict(z)
      arrays["vectors"][4 if damage == "nan_vector" else 2, 1] = np.nan
      np.savez(path / name, **arrays)
      manifest["files"][name] = files.file_record(path / name)  # the hash agrees: the rows themselves are checked
    _write_manifest(path, manifest)
  err = _cli_error(path, capsys)
  assert str(path) in err and __import__("re").search(match, err), err




_CAST_STAGE = {"name": "cast", "kind": "cast_ensemble", "k": 5, "file": "cast.npz", "backbone": "b", "num_heads": 2,
               "context_len": 2, "w_v": 0.5, "w_p": 0.5, "needs_context": True}


@pytest.mark.parametrize("edit", [
    lambda m: m.update(synthetic=False),
    lambda m: m["recall"].update(k=5),
    lambda m: m["text_encoder"].update(kind="text_tower", tower={"backbone": "b"}),
    lambda m: m.update(omitted_stages=[]),
    lambda m: m.update(stages=[dict(_CAST_STAGE)], files={**m["files"], "cast.npz": {"bytes": 1, "sha256": "0" * 64}}),
    lambda m: m.update(dataset="msrvtt"),
])
def test_a_stack_index_whose_manifest_was_edited_is_refused(tmp_path, capsys, edit):
  """Issue 62: the manifest's own fields (stages, weights, context lengths, `synthetic`, omitted stages, the text
  encoder) are covered by the hash it records, as its files are: a valid but edited value is refused."""
  path, manifest = _stack_index(tmp_path / "index")
  manifest["omitted_stages"] = [{"name": "rerank", "kind": "vedje", "why": "built with reranker=vedje"}]
  _write_manifest(path, manifest)
  edit(manifest)
  (path / "manifest.json").write_text(json.dumps(manifest))  # the hash is the one written before the edit
  err = _cli_error(path, capsys)
  assert "manifest.json: its fields do not match the manifest_sha256 it recorded" in err, err


@pytest.mark.parametrize("drop, match", [
    ("files", r"manifest.json: files is missing, expected an object"),
    ("manifest_sha256", r"manifest.json: manifest_sha256 is missing, expected 64 hex digits"),
    ("format", r"format 'vidjax-stack-index/1' is not 'vidjax-stack-index/2'; an index written before its manifest's "
               r"own fields were hashed: rebuild it"),
])
def test_a_stack_index_without_its_integrity_records_is_refused(tmp_path, capsys, drop, match):
  path, manifest = _stack_index(tmp_path / "index")
  if drop == "format":
    manifest["format"] = "vidjax-stack-index/1"
    (path / "manifest.json").write_text(json.dumps(manifest))
  else:
    del manifest[drop]
    if drop == "files":
      _write_manifest(path, manifest)  # a manifest that hashes itself but records no file: never loaded unchecked
    else:
      (path / "manifest.json").write_text(json.dumps(manifest))
  err = _cli_error(path, capsys)
  assert __import__("re").search(match, err), err


@pytest.mark.parametrize("edit, match", [
    (lambda m: m["recall"].update(k=0), r"recall.k is 0, expected an integer in \[1, 12\]"),
    (lambda m: m["recall"].update(k=40), r"recall.k is 40, expected an integer in \[1, 12\]"),
    (lambda m: m.update(synthetic="yes"), r"synthetic is 'yes', expected true or false"),
    (lambda m: m["text_encoder"].update(kind="bert"), r"text_encoder.kind is 'bert', expected one of"),
    (lambda m: m["text_encoder"].update(file="../texts.npz"), r"text_encoder.file is '../texts.npz', expected a file "
                                                              r"name inside the index"),
    (lambda m: m.update(omitted_stages="vedje"), r"omitted_stages is 'vedje', expected a list of"),
    (lambda m: m.update(stages=[dict(_CAST_STAGE, w_v=float("nan"))]), r"stages\[0\].w_v is NaN, expected a finite"),
    (lambda m: m.update(stages=[dict(_CAST_STAGE, context_len=-1)]), r"stages\[0\].context_len is -1, expected an "
                                                                    r"integer >= 0"),
    (lambda m: m.update(stages=[dict(_CAST_STAGE, num_heads=3)]), r"stages\[0\].num_heads is 3, expected a positive "
                                                                 r"integer that divides dim 16"),
    (lambda m: m.update(stages=[dict(_CAST_STAGE, k=11)]), r"stages\[0\].k is 11, expected an integer in \[1, 10\]"),
    (lambda m: m.update(stages=[dict(_CAST_STAGE), dict(_CAST_STAGE, k=2)]), r"stages\[1\].name is 'cast', expected "
                                                                            r"a name no earlier stage has"),
    (lambda m: m.update(stages=["cast"]), r"stages\[0\] is 'cast', expected an object"),
    (lambda m: m.update(stages=[dict(_CAST_STAGE)]), r"files does not record stages\[0\].file 'cast.npz'"),
    (lambda m: m["files"]["corpus.npz"].update(sha256="abc"), r"files.corpus.npz is .*expected \{bytes, sha256\}"),
])
def test_a_bad_value_in_a_stack_index_manifest_is_one_error_naming_the_field(tmp_path, capsys, edit, match):
  """Issue 62: a manifest a writer got wrong (hashed as written) is one line naming the index file and the field."""
  path, manifest = _stack_index(tmp_path / "index")
  edit(manifest)
  _write_manifest(path, manifest)
  err = _cli_error(path, capsys)
  assert f"index {path}/manifest.json: " in err and __import__("re").search(match, err), err


@pytest.mark.parametrize("vectors, which, problem", [
    (lambda n, d: np.zeros((n, d), np.float32), "corpus.npz", "zero"),
    (lambda n, d: np.tile(np.arange(d, dtype=np.float32), (n, 1)), "corpus.npz", "the same vector"),
    (lambda n, d: np.zeros((n, d), np.float32), "texts.npz", "zero"),
])
def test_a_stack_index_over_vectors_that_rank_nothing_is_refused(tmp_path, capsys, vectors, which, problem):
  """As stage-1 retrieval refuses them: every score would tie, and results would read as a ranking."""
  path, manifest = _stack_index(tmp_path / "index")
  with np.load(path / which) as z:
    arrays = dict(z)
  arrays["vectors"] = vectors(*arrays["vectors"].shape)
  np.savez(path / which, **arrays)
  manifest["files"][which] = files.file_record(path / which)
  _write_manifest(path, manifest)
  err = _cli_error(path, capsys)
  what = "clip" if which == "corpus.npz" else "caption"
  assert f"index {path}: {which}: all " in err and f"{what} vectors are {problem}; they rank nothing" in err, err


def test_search_quotes_at_most_the_start_of_a_long_query(tmp_path, capsys):
  path, _ = _stack_index(tmp_path / "index")
  err = _cli_error(path, capsys, query="x" * 120_000)
  assert len(err) < 700 and "120,000 characters" in err and "is not a caption" in err, err[:1000]
  assert search.main(["--index", str(path), "step 1", "--context", "y" * 50_000]) == 2
  err = capsys.readouterr().err
  assert len(err) < 700 and "50,000 characters" in err, err[:1000]


_FULL_DISK_SCRIPT = r"""
import errno, sys
import numpy as np
from vidjax import sharding
sharding.initialize_distributed()
import jax
from vidjax.retrieval import DenseIndex, files
rng = np.random.default_rng(0)
x = rng.normal(size=(1300, 16)).astype(np.float32)
mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
index = DenseIndex([f"v{i:05d}" for i in range(1300)], x, chunk=128, query_batch=8, mesh=mesh)
if jax.process_index() == 1:  # the disk fills while process 1 writes its blocks
  def full(fd, data, offset):
    raise OSError(errno.ENOSPC)
  files._os_write = full
try:
  index.save(sys.argv[1])
  print("RESULT saved")
except OSError as e:
  print("RESULT " + str(e))
"""


def test_a_full_disk_on_one_process_of_a_multi_process_save_fails_every_process(tmp_path):
  """Process 1 of 2 cannot write its blocks: both processes raise the one "no space left" error (neither waits
  forever on the other) and nothing is left behind."""
  import os
  import subprocess
  import sys
  from tests.test_multiprocess import REPO, _base_env, _free_port
  port, base = _free_port(), _base_env()
  procs = [subprocess.Popen(
      [sys.executable, "-c", _FULL_DISK_SCRIPT, str(tmp_path / "index")], cwd=REPO,
      env=dict(base, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO),
               XLA_FLAGS=(base.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip(),
               JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(rank)),
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in range(2)]
  outs = [p.communicate(timeout=300)[0] for p in procs]
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out[-3000:]
    result = [l for l in out.splitlines() if l.startswith("RESULT ")][-1]
    assert "no space left on device writing" in result and "vectors.npy" in result, result
  assert sorted(os.listdir(tmp_path)) == []


def test_save_refuses_to_replace_what_is_not_an_index(saved, tmp_path):
  path, index, q = saved
  (tmp_path / "data").mkdir()
  (tmp_path / "data" / "notes.txt").write_text("mine")
  (tmp_path / "file").write_text("mine")
  for target in (tmp_path / "data", tmp_path / "file"):
    with pytest.raises(FileExistsError, match=f"{target} exists and is not a saved index; refusing to replace it"):
      index.save(target)
  assert (tmp_path / "data" / "notes.txt").read_text() == "mine" and (tmp_path / "file").read_text() == "mine"
  (tmp_path / "empty").mkdir()
  np.testing.assert_array_equal(DenseIndex.load(index.save(tmp_path / "empty")).search(q, 5)[0], index.search(q, 5)[0])


def test_search_names_the_stages_it_ran_and_those_the_index_does_not_keep(tmp_path, capsys):
  """Issue 52: a stack built with reranker="vedje" keeps no VEDJE stage in its index; search says so on its first
  output line (and in --json) instead of answering as if the query went through recall -> rerank."""
  from vidjax.experiments.common import load_config  # pylint: disable=g-import-not-at-top
  from vidjax.methods.stack import omitted_stages  # pylint: disable=g-import-not-at-top
  config = load_config(Path(__file__).resolve().parents[1] / "configs/stack_coin.py:smoke")
  assert omitted_stages(config) == []
  config.stack.reranker = "vedje"
  omitted = omitted_stages(config)
  rng = np.random.default_rng(5)
  ids, captions = [f"clip{i:03d}" for i in range(12)], [f"step {i % 4}" for i in range(12)]
  path = index_format.write_index(
      tmp_path / "index", ids=ids, vectors=rng.normal(size=(12, D)).astype(np.float32), captions=captions,
      videos=[f"v{i // 3}" for i in range(12)], text_captions=sorted(set(captions)),
      text_vectors=rng.normal(size=(4, D)).astype(np.float32), dataset="test", synthetic=True, backbone="b",
      text_encoder={"kind": "caption_lookup", "file": "texts.npz", "backbone": "b"},
      recall={"kind": "dense", "file": "corpus.npz", "k": 10, "backbone": "b",
              "index": {"backend": "jax", "dtype": "float32", "params": {}}}, stages=[], omitted=omitted)
  assert search.main(["--index", str(path), "step 1", "--k", "3"]) == 0
  first = capsys.readouterr().out.split("\n")[0]
  assert first.startswith("stages: dense recall (the index keeps no vedje stage: built with reranker=vedje"), first
  assert search.main(["--index", str(path), "step 1", "--k", "3", "--json"]) == 0
  out = json.loads(capsys.readouterr().out)
  assert out["stages"] == ["recall"] and out["omitted_stages"] == omitted and out["stages_line"] == first
  old, _ = _stack_index(tmp_path / "old")  # an index without omitted stages: none named
  assert search.main(["--index", str(old), "step 1", "--k", "3"]) == 0
  assert capsys.readouterr().out.split("\n")[0] == "stages: dense recall"
