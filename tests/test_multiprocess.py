"""Two real JAX processes on this machine (local coordinator, gloo CPU collectives), as a pod would run.

Checks what the per-process code paths promise: a 2-process CAST run trains on the same global batches
as a 1-process run (same data order, same losses within float tolerance, the same results), only
process 0 writes the shared files, and a 2-process feature extraction gives the same store, after the
manifest merge, as a 1-process one. launch/README.md documents the command.
"""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vidjax.data.features import FeatureStore

REPO = Path(__file__).resolve().parents[1]
MP4 = REPO.parent / "shared" / "data" / "videoprism_assets" / "water_bottle_drumming.mp4"


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _base_env() -> dict:
  """This environment without JAX's and XLA's settings, except the suite's compilation cache and XLA's optimisation
  level (conftest.py): the processes compile what the one-process runs compiled, the same way."""
  keep = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")
  base = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_")) or k in keep}
  level = [f for f in os.environ.get("XLA_FLAGS", "").split() if f.startswith("--xla_backend_optimization_level")]
  return base | ({"XLA_FLAGS": " ".join(level)} if level else {})


def _run(config: str, workdir: Path, processes: int, extra=()):
  """Runs `python -m vidjax.main` as `processes` processes; returns their completed processes."""
  port = _free_port()
  base = _base_env()
  procs = []
  for rank in range(processes):
    env = dict(base, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    if processes > 1:
      env.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(processes),
                 JAX_PROCESS_ID=str(rank))
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "vidjax.main", "--config", config, "--workdir", str(workdir), *extra],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
  outs = [p.communicate(timeout=400)[0] for p in procs]
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out[-3000:]
  return outs


def _jsonl(path):
  return [json.loads(line) for line in path.read_text().splitlines()]


def test_two_process_cast_run_equals_one_process(tmp_path, smoke_runs):
  one = smoke_runs("cast")[0]  # the one-process run of the same config (conftest: shared with the CAST tests)
  # Without the sweep's extra context lengths: their models train through the same code as the main one.
  two = _run("configs/cast_coin.py:smoke", tmp_path / "two", 2, ["--config.sweep.context_lengths=(2,)"])
  assert "2 process(es)" in two[0] and "results written" in two[0]
  assert "results written" not in two[1]  # process 1 computes, process 0 writes
  a = json.loads((one / "results.json").read_text())
  b = json.loads((tmp_path / "two" / "results.json").read_text())
  assert list(b["context_sweep"]) == ["2"] and set(a["context_sweep"]) == {"0", "1", "2"}
  for key in ("metrics", "context_sweep", "inference_ablation", "top1_breakdown"):
    for method in b[key] if key == "context_sweep" else a[key]:
      for metric, value in a[key][method].items():
        assert b[key][method][metric] == pytest.approx(value, abs=0.75), (key, method, metric)  # 0.75 = a few queries
  assert a["benchmark_stats"] == b["benchmark_stats"]
  for method in ("cast", "late_fusion_learned", "early_fusion_residual"):
    la = _jsonl(one / "train" / method / "metrics.jsonl")
    lb = _jsonl(tmp_path / "two" / "train" / method / "metrics.jsonl")
    assert [r["step"] for r in la] == [r["step"] for r in lb]  # one writer: no duplicated records
    np.testing.assert_allclose([r["train/loss"] for r in lb], [r["train/loss"] for r in la], rtol=1e-4)
    assert len(list((tmp_path / "two" / "train" / method / "tb").glob("events.*"))) == 1


def test_two_process_extraction_store_equals_one_process(tmp_path):
  videos = tmp_path / "videos"
  videos.mkdir()
  lines = []
  for v in range(4):  # extraction splits by video: several files, so both processes get work
    (videos / f"vid{v}.mp4").symlink_to(MP4)
    lines += [f"vid{v}#{s}\t{videos / f'vid{v}.mp4'}\t{s * 0.5:.1f}\t{s * 0.5 + 1.0:.1f}" for s in range(2)]
  (tmp_path / "clips.txt").write_text("\n".join(lines) + "\n")
  extra = [f"--config.data.videos={tmp_path / 'clips.txt'}"]
  _run("configs/extract_videoprism.py:smoke", tmp_path / "one", 1, extra)
  _run("configs/extract_videoprism.py:smoke", tmp_path / "two", 2, extra)
  one, two = FeatureStore(tmp_path / "one" / "features"), FeatureStore(tmp_path / "two" / "features")
  assert sorted(p.name for p in (tmp_path / "two" / "features" / "clip").glob("*.ids.json")) == \
      ["p0-00000.ids.json", "p1-00000.ids.json"]  # each process wrote its own shard
  assert two.metadata["counts"]["clip"] == 8 and set(two.metadata["shards"]["clip"]) == {"p0-00000", "p1-00000"}
  for kind in ("clip", "clip_mean", "tokens"):
    ids = one.ids(kind)
    assert ids == two.ids(kind) and len(ids) == 8
    np.testing.assert_allclose(two.get(kind, ids), one.get(kind, ids), rtol=1e-5, atol=1e-6, err_msg=kind)
  two.verify()


_INDEX_SCRIPT = r"""
import json, sys
import numpy as np
from vidjax import sharding
sharding.initialize_distributed()
import jax
from vidjax.data.features import FeatureStore
from vidjax.retrieval import DenseIndex
store = FeatureStore(sys.argv[1])
rows_read = []
read_rows = store.read_rows
def counting(kind, shard, rows):
  rows_read.append(len(rows))
  return read_rows(kind, shard, rows)
store.read_rows = counting
mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
index = DenseIndex.from_store(store, "clip", chunk=128, query_batch=8, mesh=mesh)
q = np.load(sys.argv[2])
ids, scores = index.search(q, 9)
reads = int(sum(rows_read))
some = index.ids[[0, 1100, 1299]]  # positions held by process 0's, 1's and 1's devices
vectors = index.vectors(some)  # a collective: every process gets every row
index.save(sys.argv[3])  # each process writes its own blocks; process 0 commits
back = DenseIndex.load(sys.argv[3], mesh=mesh)
print("RESULT " + json.dumps({"process": jax.process_index(), "devices": jax.device_count(),
                              "local": jax.local_device_count(), "rows_read": reads,
                              "ids": ids.tolist(), "scores": scores.view(np.int32).tolist(),
                              "vectors": vectors.view(np.int32).tolist(),
                              "reloaded": back.search(q, 9)[0].tolist()}))
"""


def test_two_process_sharded_index_reads_its_own_block_and_equals_one_device(tmp_path):
  """DenseIndex over a mesh of 2 processes x 4 CPU devices, built from a feature store: each process reads only
  the chunks of its own devices (about half the corpus, streaming), and both get the single-device answer, ids and
  float bits (ties across the processes' blocks included); `vectors` gives every process every row, and `save`
  (each process writes its own blocks) gives an index that reloads on the mesh and on one device."""
  from vidjax.data.features import write_arrays
  from vidjax.retrieval import DenseIndex
  rng = np.random.default_rng(0)
  n = 1300  # 11 chunks of 128 over 8 devices: 2 each, the last 5 padding
  x = rng.normal(size=(n, 16)).astype(np.float32)
  x[500:520] = x[10]  # one score tied across blocks
  ids = [f"v{i:05d}" for i in rng.permutation(n)]
  write_arrays(tmp_path / "store", {"clip": (ids, x)})
  q = rng.normal(size=(13, 16)).astype(np.float32)
  q[3] = x[10]
  np.save(tmp_path / "q.npy", q)
  single = DenseIndex(ids, x, chunk=128, query_batch=8)
  want_ids, want_scores = single.search(q, 9)
  port = _free_port()
  base = _base_env()
  procs = [subprocess.Popen(
      [sys.executable, "-c", _INDEX_SCRIPT, str(tmp_path / "store"), str(tmp_path / "q.npy"),
       str(tmp_path / "index")], cwd=REPO,
      env=dict(base, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO),
               XLA_FLAGS=(base.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip(),
               JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(rank)),
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in range(2)]
  outs = [p.communicate(timeout=300)[0] for p in procs]
  results = []
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out[-3000:]
    results.append(json.loads([l for l in out.splitlines() if l.startswith("RESULT ")][-1][len("RESULT "):]))
  assert sorted(r["process"] for r in results) == [0, 1]
  for r in results:
    assert (r["devices"], r["local"]) == (8, 4)
    assert r["ids"] == want_ids.tolist() and r["scores"] == want_scores.view(np.int32).tolist()
    assert r["reloaded"] == want_ids.tolist()
    np.testing.assert_array_equal(np.array(r["vectors"], np.int32).view(np.float32),
                                  single.vectors(single.ids[[0, 1100, 1299]]))
  # the saved index (both processes' blocks in one file) loads on one device and answers as the single index does
  saved = DenseIndex.load(tmp_path / "index")
  assert saved.search(q, 9)[0].tolist() == want_ids.tolist()
  np.testing.assert_array_equal(saved.vectors(np.array(ids)), single.vectors(np.array(ids)))
  # process 0's devices hold chunks 0-7 (rows 0-1023), process 1's chunks 8-10 (rows 1024-1299) and padding
  assert sorted(r["rows_read"] for r in results) == [n - 1024, 1024]
