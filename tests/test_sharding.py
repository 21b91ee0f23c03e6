"""Tests for vidjax/sharding.py, including an 8-device data-parallel run in a subprocess."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from vidjax import sharding

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("env, multihost", [
    ({}, False),
    ({"JAX_COORDINATOR_ADDRESS": "10.0.0.2:1234"}, True),
    ({"TPU_WORKER_HOSTNAMES": "localhost"}, False),
    ({"TPU_WORKER_HOSTNAMES": "t1v-a,t1v-b"}, True),
    ({"MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.3"}, True),
    ({"SLURM_NTASKS": "1"}, False),
    ({"SLURM_NTASKS": "4"}, True),
    ({"OMPI_COMM_WORLD_SIZE": "2"}, True),
])
def test_multihost_detection(env, multihost):
  reason = sharding.multihost_reason(env)
  assert (reason is not None) == multihost
  if multihost:
    assert next(iter(env)) in reason


def test_initialize_distributed_is_a_noop_on_one_host():
  assert sharding.initialize_distributed({}) is False
  assert jax.process_count() == 1


def test_make_mesh():
  mesh = sharding.make_mesh()
  assert mesh.axis_names == ("data",)
  assert mesh.shape["data"] == jax.device_count()
  assert sharding.make_mesh(1).shape["data"] == 1
  with pytest.raises(ValueError, match=f"num_devices={jax.device_count() + 1} but"):
    sharding.make_mesh(jax.device_count() + 1)


def test_shard_batch_and_create_replicated():
  mesh = sharding.make_mesh(1)
  batch = {"x": np.arange(12, dtype=np.float32).reshape(4, 3), "i": np.arange(4)}
  out = sharding.shard_batch(batch, mesh)
  np.testing.assert_array_equal(np.asarray(out["x"]), batch["x"])
  np.testing.assert_array_equal(np.asarray(out["i"]), batch["i"])
  assert out["x"].sharding.spec == P("data")
  with pytest.raises(ValueError, match="disagree on the batch size"):
    sharding.shard_batch({"x": np.zeros((4, 2)), "y": np.zeros((3,))}, mesh)
  with pytest.raises(ValueError, match=r"\['s'\] is a scalar"):
    sharding.shard_batch({"s": np.float32(1.0)}, mesh)

  params = sharding.create_replicated(lambda k: {"w": jax.random.normal(k, (2, 3))}, mesh,
                                      jax.random.PRNGKey(0))
  np.testing.assert_array_equal(np.asarray(params["w"]),
                                np.asarray(jax.random.normal(jax.random.PRNGKey(0), (2, 3))))
  assert params["w"].sharding.is_fully_replicated
  abstract = sharding.abstract_replicated(params, mesh)
  assert abstract["w"].shape == (2, 3) and abstract["w"].sharding.is_fully_replicated


# Runs in a fresh interpreter: the fake-device flag must be set before jax is imported.
_MULTI_DEVICE_SCRIPT = textwrap.dedent("""
    import json, sys, tempfile
    import jax, jax.numpy as jnp, numpy as np
    from vidjax import sharding, train
    from vidjax.data import pipeline

    assert jax.device_count() == 8, jax.devices()
    rs = np.random.RandomState(0)
    w_true = rs.randn(4, 3).astype(np.float32)
    source = [{"x": x, "y": np.tanh(x @ w_true)} for x in rs.randn(64, 4).astype(np.float32)]

    def init_fn(rng):
      k1, k2 = jax.random.split(rng)
      return {"w1": 0.5 * jax.random.normal(k1, (4, 8)), "w2": 0.5 * jax.random.normal(k2, (8, 3))}

    def loss_fn(params, batch, rng):
      h = jnp.tanh(batch["x"] @ params["w1"])
      keep = jax.random.bernoulli(rng, 0.8, h.shape)  # dropout: rngs must agree across meshes
      pred = (h * keep / 0.8) @ params["w2"]
      return jnp.mean((pred - batch["y"]) ** 2), {}

    opt = train.adamw(1e-2, 1e-3)
    out = {}
    for n in (8, 1):
      mesh = sharding.make_mesh(n)
      state, hist = train.fit(init_fn=init_fn, loss_fn=loss_fn, optimizer=opt,
                              dataset=pipeline.make_batches(source, 16, seed=1), num_steps=5,
                              workdir=tempfile.mkdtemp(), mesh=mesh, log_every=1,
                              checkpoint_every=100, progress=False)
      out[n] = {"params": jax.tree.map(lambda a: np.asarray(a).tolist(), state.params),
                "losses": [r["train/loss"] for r in hist],
                "replicated": all(l.sharding.is_fully_replicated for l in jax.tree.leaves(state)),
                "num_devices": len(jax.tree.leaves(state.params)[0].sharding.device_set)}
    mesh = sharding.make_mesh()
    batch = sharding.shard_batch({"x": np.zeros((16, 4), np.float32)}, mesh)
    out["shard_rows"] = sorted(s.data.shape[0] for s in batch["x"].addressable_shards)
    try:
      sharding.shard_batch({"x": np.zeros((12, 4), np.float32)}, mesh)
      out["indivisible_error"] = None
    except ValueError as e:
      out["indivisible_error"] = str(e)
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def multi_device_result():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
             JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
  proc = subprocess.run([sys.executable, "-c", _MULTI_DEVICE_SCRIPT], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1]
  return json.loads(line[len("RESULT "):])


def test_eight_device_training_matches_one_device(multi_device_result):
  r8, r1 = multi_device_result["8"], multi_device_result["1"]
  assert r8["num_devices"] == 8 and r1["num_devices"] == 1
  assert r8["replicated"] and r1["replicated"]
  np.testing.assert_allclose(r8["losses"], r1["losses"], rtol=1e-5)
  for name in ("w1", "w2"):
    np.testing.assert_allclose(r8["params"][name], r1["params"][name], rtol=1e-5, atol=1e-6)
  # Training moved the params (a run that did nothing would also "match").
  assert r8["losses"][-1] < r8["losses"][0]


def test_batch_is_split_over_eight_devices(multi_device_result):
  assert multi_device_result["shard_rows"] == [2] * 8
  assert "Global batch size 12 is not divisible by the 8 devices" in (
      multi_device_result["indivisible_error"] or "")
