"""Tests for vidjax/train.py: optimizer, train step numerics, fit (learning, resume, NaN, logs)."""
import json
import struct

import flax.linen as nn
import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from vidjax import sharding
from vidjax import train
from vidjax.data import pipeline

# AdamW and the train step are compared with NumPy: they hold at full float32 only, which a GPU (TF32 by default) or
# a TPU (one bf16 pass) computes when asked (tests/conftest.py).
pytestmark = pytest.mark.highest_precision

DIM, OUT, NUM_EXAMPLES, BATCH = 4, 2, 48, 8
_RS = np.random.RandomState(0)
W_TRUE = _RS.randn(DIM, OUT).astype(np.float32)
_XS = _RS.randn(NUM_EXAMPLES, DIM).astype(np.float32)
SOURCE = [{"x": x, "y": x @ W_TRUE, "idx": np.int32(i)} for i, x in enumerate(_XS)]


# Module-level functions and optimizer, so every `fit` call below reuses one compiled step.
def init_fn(rng):
  return {"w": 0.1 * jax.random.normal(rng, (DIM, OUT)), "b": jnp.zeros((OUT,))}


def loss_fn(params, batch, rng):
  pred = batch["x"] @ params["w"] + params["b"]
  # A little rng-dependent noise, so exact resume also proves the per-step rngs are reproduced.
  pred = pred + 1e-2 * jax.random.normal(rng, pred.shape)
  loss = jnp.mean((pred - batch["y"]) ** 2)
  return loss, {"first_idx": batch["idx"][0].astype(jnp.float32)}


OPTIMIZER = train.adamw(0.1, 1e-3)
MESH = sharding.make_mesh(1)


def _fit(workdir, dataset=None, **kwargs):
  kwargs.setdefault("num_steps", 12)
  kwargs.setdefault("progress", False)
  return train.fit(init_fn=init_fn, loss_fn=loss_fn, optimizer=OPTIMIZER,
                   dataset=pipeline.make_batches(SOURCE, BATCH, seed=3) if dataset is None else dataset,
                   workdir=workdir, seed=7, mesh=MESH, **kwargs)


def _jsonl(path):
  return [json.loads(line) for line in path.read_text().splitlines()]


def _tb_scalars(tb_dir):
  """Reads every scalar from TFRecord event files without TensorFlow: {tag: [(step, value)]}."""
  from tensorboardX.proto import event_pb2
  out = {}
  for path in sorted(tb_dir.glob("events.out.tfevents.*")):
    data = path.read_bytes()
    pos = 0
    while pos < len(data):
      (length,) = struct.unpack("<Q", data[pos:pos + 8])
      event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
      pos += 12 + length + 4
      for value in event.summary.value:
        out.setdefault(value.tag, []).append((event.step, value.simple_value))
  return out


# ------------------------------------------------------------------------------------------------
# Optimizer.


def _numpy_adamw(params, grads, lrs, wd, b1=0.9, b2=0.999, eps=1e-8):
  p, m, v = params.copy(), np.zeros_like(params), np.zeros_like(params)
  for t, (g, lr) in enumerate(zip(grads, lrs), 1):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    update = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    p = p - lr * (update + wd * p)
  return p


@pytest.mark.parametrize("total_steps", [None, 6])
def test_adamw_matches_numpy(total_steps):
  lr, wd, warmup, steps = 0.1, 0.01, 2, 5
  rs = np.random.RandomState(1)
  p0 = rs.randn(3).astype(np.float32)
  grads = rs.randn(steps, 3).astype(np.float32)
  lrs = []
  for c in range(steps):  # optax evaluates the schedule at the update count before the update
    if c < warmup:
      lrs.append(lr * c / warmup)
    elif total_steps is None:
      lrs.append(lr)
    else:
      lrs.append(lr * 0.5 * (1 + np.cos(np.pi * (c - warmup) / (total_steps - warmup))))
  opt = train.adamw(lr, wd, warmup_steps=warmup, total_steps=total_steps)

  @jax.jit
  def run(p):
    def body(carry, g):
      p, state = carry
      updates, state = opt.update(g, state, p)
      return (optax.apply_updates(p, updates), state), None
    return jax.lax.scan(body, (p, opt.init(p)), jnp.asarray(grads))[0][0]

  p = run(jnp.asarray(p0))
  np.testing.assert_allclose(np.asarray(p), _numpy_adamw(p0, grads, lrs, wd), rtol=1e-5, atol=1e-6)


def test_adamw_rejects_bad_values():
  with pytest.raises(ValueError, match="learning_rate"):
    train.adamw(0.0, 0.1)
  with pytest.raises(ValueError, match="total_steps=5 must exceed warmup_steps=5"):
    train.adamw(1e-3, 0.1, warmup_steps=5, total_steps=5)


def test_param_labels_and_freezing_with_multi_transform():
  params = {"enc": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}, "head": {"kernel": jnp.ones(2)}}
  rules = [(r"enc/.*", "frozen"), (r".*", "train")]
  labels = train.param_labels(params, rules)
  assert labels == {"enc": {"kernel": "frozen", "bias": "frozen"}, "head": {"kernel": "train"}}
  opt = optax.multi_transform({"train": optax.sgd(0.5), "frozen": optax.set_to_zero()},
                              lambda p: train.param_labels(p, rules))
  grads = jax.tree.map(jnp.ones_like, params)
  updates, _ = opt.update(grads, opt.init(params), params)
  new = optax.apply_updates(params, updates)
  np.testing.assert_array_equal(new["enc"]["kernel"], params["enc"]["kernel"])
  np.testing.assert_allclose(new["head"]["kernel"], np.full(2, 0.5))
  with pytest.raises(ValueError, match="'head/kernel' matches none of the rules"):
    train.param_labels(params, [(r"enc/.*", "frozen")])


# ------------------------------------------------------------------------------------------------
# Train step.


def _sgd_loss(params, batch, rng):
  pred = batch["x"] @ params["w"] + params["b"]
  return jnp.mean((pred - batch["y"]) ** 2), {"u": jax.random.uniform(rng)}


_SGD = optax.sgd(0.1)
_SGD_STEP = train.jit_train_step(train.make_train_step(_sgd_loss, _SGD), MESH)


def test_train_step_matches_numpy():
  rs = np.random.RandomState(2)
  x, y = rs.randn(BATCH, DIM).astype(np.float32), rs.randn(BATCH, OUT).astype(np.float32)
  w, b = rs.randn(DIM, OUT).astype(np.float32), rs.randn(OUT).astype(np.float32)
  state = train.init_state(lambda _: {"w": jnp.asarray(w), "b": jnp.asarray(b)}, _SGD, None)
  state = state.replace(step=jnp.int32(3))
  rng = jax.random.PRNGKey(5)
  new, metrics = _SGD_STEP(state, sharding.shard_batch({"x": x, "y": y}, MESH), rng)

  err = x @ w + b - y
  gw, gb = 2 * x.T @ err / err.size, 2 * err.sum(0) / err.size
  np.testing.assert_allclose(metrics["loss"], np.mean(err ** 2), rtol=1e-5)
  np.testing.assert_allclose(metrics["grad_norm"], np.sqrt((gw ** 2).sum() + (gb ** 2).sum()),
                             rtol=1e-5)
  np.testing.assert_allclose(new.params["w"], w - 0.1 * gw, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(new.params["b"], b - 0.1 * gb, rtol=1e-5, atol=1e-6)
  assert int(new.step) == 4
  # The step's rng is the base key folded with the step before the update.
  np.testing.assert_allclose(metrics["u"], jax.random.uniform(jax.random.fold_in(rng, 3)))


def test_train_step_rejects_reserved_aux_names():
  bad = lambda p, b, r: (jnp.sum(p["w"]), {"loss": jnp.float32(0)})
  step = train.make_train_step(bad, _SGD)
  state = train.init_state(lambda _: {"w": jnp.ones(2)}, _SGD, None)
  with pytest.raises(ValueError, match=r"must not be named \['loss'\]"):
    step(state, {}, jax.random.PRNGKey(0))


class _Bf16Mlp(nn.Module):
  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(8, dtype=jnp.bfloat16)(x))
    return nn.Dense(OUT, dtype=jnp.bfloat16)(x)


def test_bf16_compute_keeps_float32_params_and_grads():
  model = _Bf16Mlp()
  x = _XS[:BATCH]
  y = SOURCE[0]["y"][None].repeat(BATCH, 0)

  def bf16_loss(params, batch, rng):
    pred = model.apply({"params": params}, batch["x"]).astype(jnp.float32)
    return jnp.mean((pred - batch["y"]) ** 2), {}

  opt = train.adamw(1e-2, 1e-3)
  init = jax.jit(lambda r: train.init_state(lambda k: model.init(k, x)["params"], opt, r))
  state = init(jax.random.PRNGKey(0))
  ref_params = jax.tree.map(np.asarray, state.params)
  step = train.jit_train_step(train.make_train_step(bf16_loss, opt), MESH)
  new, metrics = step(state, sharding.shard_batch({"x": x, "y": y}, MESH), jax.random.PRNGKey(1))
  assert all(l.dtype == jnp.float32 for l in jax.tree.leaves(new.params))
  assert all(l.dtype == jnp.float32 for l in jax.tree.leaves(new.opt_state) if l.ndim)
  # The loss agrees with a float32 NumPy forward pass up to bf16 rounding.
  h = np.maximum(x @ ref_params["Dense_0"]["kernel"] + ref_params["Dense_0"]["bias"], 0)
  pred = h @ ref_params["Dense_1"]["kernel"] + ref_params["Dense_1"]["bias"]
  np.testing.assert_allclose(metrics["loss"], np.mean((pred - y) ** 2), rtol=3e-2)
  assert np.isfinite(metrics["grad_norm"]) and metrics["grad_norm"] > 0


# ------------------------------------------------------------------------------------------------
# Data.


def test_make_batches_is_seeded_and_reshuffles_every_epoch():
  a, b, c = (pipeline.make_batches(SOURCE, BATCH, seed=s) for s in (3, 3, 4))
  per_epoch = NUM_EXAMPLES // BATCH
  order = lambda ds, lo, hi: np.concatenate([ds[i]["idx"] for i in range(lo, hi)])
  np.testing.assert_array_equal(order(a, 0, 2 * per_epoch), order(b, 0, 2 * per_epoch))
  assert not np.array_equal(order(a, 0, per_epoch), order(c, 0, per_epoch))
  first, second = order(a, 0, per_epoch), order(a, per_epoch, 2 * per_epoch)
  np.testing.assert_array_equal(np.sort(first), np.arange(NUM_EXAMPLES))
  np.testing.assert_array_equal(np.sort(second), np.arange(NUM_EXAMPLES))
  assert not np.array_equal(first, second)
  batch = a[0]
  assert batch["x"].shape == (BATCH, DIM) and batch["y"].shape == (BATCH, OUT)
  np.testing.assert_array_equal(batch["x"], _XS[batch["idx"]])


# ------------------------------------------------------------------------------------------------
# fit.


def test_fit_learns_and_writes_logs(tmp_path):
  state, history = _fit(tmp_path, num_steps=50, log_every=10, checkpoint_every=25)
  losses = [r["train/loss"] for r in history]
  assert [r["step"] for r in history] == [10, 20, 30, 40, 50]
  assert losses[-1] < 0.05 * losses[0], losses
  assert int(state.step) == 50
  np.testing.assert_allclose(state.params["w"], W_TRUE, atol=0.3)

  records = _jsonl(tmp_path / "metrics.jsonl")
  assert records == history
  assert {"train/loss", "train/grad_norm", "train/first_idx", "train/examples_per_sec"} <= set(records[0])
  scalars = _tb_scalars(tmp_path / "tb")
  assert [s for s, _ in scalars["train/loss"]] == [10, 20, 30, 40, 50]
  np.testing.assert_allclose([v for _, v in scalars["train/loss"]], losses, rtol=1e-6)
  assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == ["25", "50"]

  # Calling fit again on a finished workdir resumes at the end and trains nothing more.
  again, history2 = _fit(tmp_path, num_steps=50, log_every=10, checkpoint_every=25)
  np.testing.assert_array_equal(again.params["w"], state.params["w"])
  assert history2 == history


def test_exact_resume_after_crash(tmp_path):
  straight, _ = _fit(tmp_path / "a", log_every=1, checkpoint_every=5)

  def crash(params, step):
    if step == 8:
      raise RuntimeError("simulated crash")
    return {"marker": 1.0}

  with pytest.raises(RuntimeError, match="simulated crash"):
    _fit(tmp_path / "b", log_every=1, checkpoint_every=5, eval_fn=crash, eval_every=1)
  assert [r["step"] for r in _jsonl(tmp_path / "b" / "metrics.jsonl")] == list(range(1, 8))
  resumed, _ = _fit(tmp_path / "b", log_every=1, checkpoint_every=5)

  for x, y in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  a, b = _jsonl(tmp_path / "a" / "metrics.jsonl"), _jsonl(tmp_path / "b" / "metrics.jsonl")
  # Steps 6-7 logged before the crash were dropped and re-logged once; same batches, same losses.
  assert [r["step"] for r in b] == list(range(1, 13))
  assert [r["train/first_idx"] for r in a] == [r["train/first_idx"] for r in b]
  assert [r["train/loss"] for r in a] == [r["train/loss"] for r in b]
  assert len(set(r["train/first_idx"] for r in a)) > 1


@pytest.mark.parametrize("part", ["state", "data"])
def test_a_corrupt_checkpoint_is_skipped_for_the_latest_good_one(tmp_path, part, capsys):
  straight, _ = _fit(tmp_path / "a", checkpoint_every=5, num_steps=10)
  _fit(tmp_path / "b", checkpoint_every=5, num_steps=10)
  # Damage step 10: every file of its train state (a truncated array) or its data-iterator state (garbage JSON).
  for f in (tmp_path / "b" / "checkpoints" / "10" / part).rglob("*"):
    if f.is_file():
      f.write_bytes(b"{garbage")
  resumed, _ = _fit(tmp_path / "b", checkpoint_every=5, num_steps=10)  # retrains 6-10 from step 5
  out = capsys.readouterr().out
  assert "checkpoint step 10" in out and "cannot be restored" in out and "resumed from step 5" in out, out
  for x, y in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  np.testing.assert_array_equal(train.load_params(tmp_path / "b")["w"], np.asarray(straight.params["w"]))


def test_no_restorable_checkpoint_is_one_clear_error(tmp_path):
  _fit(tmp_path, checkpoint_every=5, num_steps=5, max_to_keep=1)
  for f in (tmp_path / "checkpoints" / "5" / "state").rglob("*"):
    if f.is_file():
      f.write_bytes(b"")
  with pytest.raises(ValueError, match=r"no checkpoint in .*checkpoints can be restored: step 5: "):
    _fit(tmp_path, checkpoint_every=5, num_steps=10)


def test_nan_loss_stops_with_clear_error_and_keeps_checkpoints(tmp_path):
  clean = [pipeline.make_batches(SOURCE, BATCH, seed=3)[i] for i in range(10)]
  poisoned = [dict(b) for b in clean]
  poisoned[6]["y"] = np.full_like(poisoned[6]["y"], np.nan)  # the batch of step 7
  with pytest.raises(FloatingPointError, match=r"loss is nan at step 7 .*last checkpoint \(step 6\)"):
    _fit(tmp_path, dataset=grain.MapDataset.source(poisoned), num_steps=10, log_every=5,
         checkpoint_every=3)
  steps = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())
  assert steps == [3, 6]
  # The step-6 checkpoint is intact and finite: resuming to step 6 restores it without training.
  state, history = _fit(tmp_path, dataset=grain.MapDataset.source(clean), num_steps=6,
                        log_every=5, checkpoint_every=3)
  assert int(state.step) == 6
  assert all(np.isfinite(np.asarray(l)).all() for l in jax.tree.leaves(state))
  assert [r["step"] for r in history] == [5]


def test_fit_reports_exhausted_dataset(tmp_path):
  one_epoch = pipeline.make_batches(SOURCE, BATCH, seed=3, num_epochs=1)
  with pytest.raises(ValueError, match="ran out of batches after 6 steps"):
    _fit(tmp_path, dataset=one_epoch, num_steps=8, checkpoint_every=100)


def test_make_index_batches_epochs_are_seeded_permutations():
  seen = []
  ds = pipeline.make_index_batches(10, 3, seed=7, batch_fn=lambda idx: {"i": np.asarray(idx)})
  assert len(pipeline.make_index_batches(10, 3, seed=7, batch_fn=lambda i: i, num_epochs=2)) == 6
  for t in range(6):  # two epochs of 10 // 3 = 3 batches; the remainder of each epoch is dropped
    seen.append(ds[t]["i"])
  epoch0, epoch1 = np.concatenate(seen[:3]), np.concatenate(seen[3:])
  assert len(set(epoch0)) == 9 and len(set(epoch1)) == 9 and set(epoch0) <= set(range(10))
  assert not np.array_equal(epoch0, epoch1)  # a fresh permutation every epoch
  again = pipeline.make_index_batches(10, 3, seed=7, batch_fn=lambda idx: {"i": np.asarray(idx)})
  np.testing.assert_array_equal(again[4]["i"], seen[4])
  other = pipeline.make_index_batches(10, 3, seed=8, batch_fn=lambda idx: {"i": np.asarray(idx)})
  assert not all(np.array_equal(other[t]["i"], seen[t]) for t in range(3))
  with pytest.raises(ValueError, match="batch_size <= num_examples"):
    pipeline.make_index_batches(2, 3, seed=0, batch_fn=lambda i: i)


def _index_batches():
  def collate(idx):
    return {k: np.stack([SOURCE[i][k] for i in idx]) for k in SOURCE[0]}
  return pipeline.make_index_batches(len(SOURCE), BATCH, seed=3, batch_fn=collate)


def test_exact_resume_with_index_batches(tmp_path):
  straight, _ = _fit(tmp_path / "a", dataset=_index_batches(), log_every=1, checkpoint_every=5)

  def crash(params, step):
    if step == 8:
      raise RuntimeError("simulated crash")
    return {}

  with pytest.raises(RuntimeError, match="simulated crash"):
    _fit(tmp_path / "b", dataset=_index_batches(), log_every=1, checkpoint_every=5, eval_fn=crash, eval_every=1)
  resumed, _ = _fit(tmp_path / "b", dataset=_index_batches(), log_every=1, checkpoint_every=5)
  for x, y in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  a, b = _jsonl(tmp_path / "a" / "metrics.jsonl"), _jsonl(tmp_path / "b" / "metrics.jsonl")
  assert [r["train/first_idx"] for r in a] == [r["train/first_idx"] for r in b]
  assert len(set(r["train/first_idx"] for r in a)) > 1


# ------------------------------------------------------------------------------------------------
# A hard kill (SIGKILL) mid-run, then resume.

_KILL_SCRIPT = """
import os, signal, sys
import jax, jax.numpy as jnp, numpy as np
from vidjax import sharding, train
from vidjax.data import pipeline

rs = np.random.RandomState(0)
xs = rs.randn(48, 4).astype(np.float32)
w_true = rs.randn(4, 2).astype(np.float32)
source = [{"x": x, "y": x @ w_true} for x in xs]

def init_fn(rng):
  return {"w": 0.1 * jax.random.normal(rng, (4, 2)), "b": jnp.zeros((2,))}

def loss_fn(params, batch, rng):
  pred = batch["x"] @ params["w"] + params["b"] + 1e-2 * jax.random.normal(rng, (batch["x"].shape[0], 2))
  return jnp.mean((pred - batch["y"]) ** 2), {"x0": batch["x"][0, 0]}

def kill(params, step):
  if step == int(sys.argv[2]):
    import pathlib, time
    for _ in range(300):  # the step-5 checkpoint is written asynchronously: kill once it is committed
      if (pathlib.Path(sys.argv[1]) / "checkpoints" / "5").is_dir():
        break
      time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGKILL)   # a hard kill: no cleanup, no finally blocks
  return {}

state, _ = train.fit(init_fn=init_fn, loss_fn=loss_fn, optimizer=train.adamw(0.1, 1e-3),
                     dataset=pipeline.loader(pipeline.make_batches(source, 8, seed=3)), num_steps=12,
                     workdir=sys.argv[1], seed=7, mesh=sharding.make_mesh(1), log_every=1,
                     checkpoint_every=5, progress=False,
                     eval_fn=kill if int(sys.argv[2]) else None, eval_every=1)
np.savez(sys.argv[1] + "/final.npz", w=state.params["w"], b=state.params["b"])
"""


def test_hard_kill_then_resume_gives_the_same_params_and_logs(tmp_path):
  import subprocess
  import sys
  script = tmp_path / "kill.py"
  script.write_text(_KILL_SCRIPT)
  run = lambda workdir, kill_at: subprocess.run(  # noqa: E731
      [sys.executable, str(script), str(workdir), str(kill_at)], capture_output=True, text=True, timeout=300)
  straight = run(tmp_path / "a", 0)
  assert straight.returncode == 0, straight.stderr[-2000:]
  killed = run(tmp_path / "b", 8)
  assert killed.returncode == -9, killed.stderr[-2000:]  # SIGKILL at step 8, after the step-5 checkpoint
  assert (tmp_path / "b" / "checkpoints" / "5").is_dir() and not (tmp_path / "b" / "final.npz").exists()
  resumed = run(tmp_path / "b", 0)
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  a, b = np.load(tmp_path / "a" / "final.npz"), np.load(tmp_path / "b" / "final.npz")
  for key in ("w", "b"):
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)
  # The resumed run saw the same batches: its logged first inputs equal the straight run's, step by step.
  straight_log, resumed_log = _jsonl(tmp_path / "a" / "metrics.jsonl"), _jsonl(tmp_path / "b" / "metrics.jsonl")
  assert [r["step"] for r in resumed_log] == list(range(1, 13))
  assert [r["train/x0"] for r in resumed_log] == [r["train/x0"] for r in straight_log]
  np.testing.assert_array_equal(train.load_params(tmp_path / "b")["w"], b["w"])


def test_a_half_deleted_old_step_is_ignored_on_resume_and_cleaned_by_the_next_save(tmp_path):
  import shutil
  straight, _ = _fit(tmp_path / "a", checkpoint_every=2, num_steps=10, max_to_keep=2)
  _fit(tmp_path / "b", checkpoint_every=2, num_steps=6, max_to_keep=2)
  ck = tmp_path / "b" / "checkpoints"
  # A kill while orbax deleted an old step leaves part of its directory behind.
  shutil.copytree(ck / "4", ck / "2")
  for f in [f for f in (ck / "2").rglob("*") if f.is_file()][:3]:
    f.unlink()
  resumed, history = _fit(tmp_path / "b", checkpoint_every=2, num_steps=10, max_to_keep=2)
  assert sorted(p.name for p in ck.iterdir()) == ["10", "8"]  # the next saves removed it with the old steps
  for x, y in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed)):  # resumed from step 6, not 2
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# ----------------------------------------------------------------------------------------------
# Device-resident inputs (pipeline.Gather) and multi-step calls.

_TABLES = {"x": _XS, "y": _XS @ W_TRUE}


def _row_batches(gather=None):
  """SOURCE's order (as `_index_batches`), each batch as row indices into `_TABLES` (gathered by `gather`)."""
  def rows(idx):
    idx = np.asarray(idx, np.int32)
    return {"x": idx, "y": idx, "idx": idx}
  return pipeline.make_index_batches(len(SOURCE), BATCH, seed=3,
                                     batch_fn=gather.host(rows) if gather is not None else rows)


def test_gather_apply_equals_the_host_gather_with_padding_rows():
  rng = np.random.default_rng(0)
  table = rng.normal(size=(10, 3, 2)).astype(np.float32)
  tokens = rng.integers(0, 99, size=(6, 4)).astype(np.int32)
  gather = pipeline.Gather({"t": table, "tok": tokens}, {"a": "t", "b": "t", "ids": "tok"})
  assert gather.on_device == ["t", "tok"]
  batch = {"a": rng.integers(-1, 10, size=(5,)).astype(np.int32), "b": np.array([[-1, 0], [9, -1]], np.int32),
           "ids": np.array([-1, 5, 0], np.int32), "other": np.ones(5, np.float32)}
  on_device = jax.jit(gather.apply)(gather.device_tables(MESH), batch)
  on_host = gather.gather_all(batch)
  for key in batch:
    np.testing.assert_array_equal(np.asarray(on_device[key]), on_host[key])
  np.testing.assert_array_equal(on_host["b"][0, 0], np.zeros((3, 2)))  # -1: a zero row
  np.testing.assert_array_equal(on_host["ids"][1], tokens[5])
  assert on_host["ids"].dtype == np.int32 and np.all(on_host["ids"][0] == 0)
  # Over budget: the table stays on the host and `host` gathers its fields there.
  none = pipeline.Gather({"t": table, "tok": tokens}, {"a": "t", "ids": "tok"}, budget_bytes=0)
  assert none.on_device == [] and none.device_tables(MESH) == {}
  small = pipeline.Gather({"t": table, "tok": tokens}, {"a": "t", "ids": "tok"}, budget_bytes=tokens.nbytes + 4)
  assert small.on_device == ["tok"]  # the tables that fit, in the order given
  hosted = small.host(lambda idx: {"a": np.asarray(idx, np.int32), "ids": np.asarray(idx, np.int32)})(np.arange(3))
  np.testing.assert_array_equal(hosted["a"], table[:3])
  np.testing.assert_array_equal(hosted["ids"], np.arange(3))  # still rows: gathered on the device
  with pytest.raises(ValueError, match=r"tables \['z'\] that are not given"):
    pipeline.Gather({"t": table}, {"a": "z"})


@pytest.mark.parametrize("budget,steps_per_call", [(None, 1), (0, 1), (None, 3)])
def test_device_gather_and_multi_step_calls_train_the_same_steps(tmp_path, budget, steps_per_call):
  """Rows gathered on the device (or, over budget, on the host) and several steps per call (a scan that stops at
  every log and checkpoint step: calls of 3, 1, 1, 3, ... live steps, each of 3 with the rest masked) train exactly the
  steps of the plain host-collated loop."""
  straight, history = _fit(tmp_path / "a", dataset=_index_batches(), log_every=4, checkpoint_every=5)
  gather = pipeline.Gather(_TABLES, {"x": "x", "y": "y"}, budget_bytes=budget)
  state, rows_history = _fit(tmp_path / "b", dataset=_row_batches(gather), log_every=4, checkpoint_every=5,
                             gather=gather, steps_per_call=steps_per_call)
  for x, y in zip(jax.tree.leaves(straight), jax.tree.leaves(state)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
  assert [r["step"] for r in history] == [r["step"] for r in rows_history] == [4, 8, 12]
  assert [r["train/first_idx"] for r in history] == [r["train/first_idx"] for r in rows_history]
  np.testing.assert_allclose([r["train/loss"] for r in history], [r["train/loss"] for r in rows_history], rtol=1e-6)
  per_step = rows_history[0]["train/h2d_bytes_per_step"]
  # Rows only / the vectors; the first log interval (4 steps) is a call of 3 and one of 1 live + 2 masked steps, whose
  # batches are copies of its live one: 6 batches sent for 4 steps.
  sent = 6 / 4 if steps_per_call == 3 else 1
  assert per_step == sent * (3 * 4 * BATCH if budget is None else 4 * BATCH * (DIM + OUT + 1))
  assert rows_history[0]["train/host_ms_per_step"] > 0


def test_exact_resume_with_multi_step_calls(tmp_path):
  gather = pipeline.Gather(_TABLES, {"x": "x", "y": "y"})
  straight, _ = _fit(tmp_path / "a", dataset=_row_batches(gather), log_every=2, checkpoint_every=5, gather=gather,
                     steps_per_call=4)

  def crash(params, step):
    if step == 8:
      raise RuntimeError("simulated crash")
    return {}

  with pytest.raises(RuntimeError, match="simulated crash"):
    _fit(tmp_path / "b", dataset=_row_batches(gather), log_every=2, checkpoint_every=5, gather=gather,
         steps_per_call=4, eval_fn=crash, eval_every=4)
  resumed, _ = _fit(tmp_path / "b", dataset=_row_batches(gather), log_every=2, checkpoint_every=5, gather=gather,
                    steps_per_call=4)
  for x, y in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  a, b = _jsonl(tmp_path / "a" / "metrics.jsonl"), _jsonl(tmp_path / "b" / "metrics.jsonl")
  assert [r["train/loss"] for r in a] == [r["train/loss"] for r in b]


def test_a_nan_inside_a_multi_step_call_names_its_step(tmp_path):
  clean = [pipeline.make_batches(SOURCE, BATCH, seed=3)[i] for i in range(10)]
  poisoned = [dict(b) for b in clean]
  poisoned[6]["y"] = np.full_like(poisoned[6]["y"], np.nan)  # the batch of step 7, inside the call of steps 6-8
  with pytest.raises(FloatingPointError, match=r"loss is nan at step 7 "):
    _fit(tmp_path, dataset=grain.MapDataset.source(poisoned), num_steps=10, log_every=10, checkpoint_every=10,
         steps_per_call=3)


# ----------------------------------------------------------------------------------------------
# One compiled train program per model.


def test_fitted_steps_per_call_divides_the_intervals_or_masks():
  assert train.fitted_steps_per_call(8, [50, 1000]) == 5  # the main job's log and checkpoint intervals
  assert train.fitted_steps_per_call(8, [64, 1000]) == 8
  assert train.fitted_steps_per_call(8, [100, 500, 25]) == 5
  assert train.fitted_steps_per_call(8, [7, 1000]) == 8  # only 1 divides both: 8 steps a call, some masked
  assert train.fitted_steps_per_call(1, [7]) == 1


@pytest.mark.parametrize("steps_per_call", [1, 4])
def test_a_fit_compiles_one_train_program_whatever_its_boundaries(tmp_path, steps_per_call):
  """Log every 3, checkpoint every 5, eval every 2 over 13 steps: calls of 1 to 4 live steps, every one the same
  program (the masked steps of an early stop run in it); `programs_compiled` counts it, per `fit`."""
  gather = pipeline.Gather(_TABLES, {"x": "x", "y": "y"})
  with train.counting_programs():
    state, history = _fit(tmp_path, dataset=_row_batches(gather), num_steps=13, log_every=3, checkpoint_every=5,
                          eval_fn=lambda params, step: {"one": 1.0}, eval_every=2, gather=gather,
                          steps_per_call=steps_per_call)
    counted = train.programs_compiled()
  assert int(state.step) == 13 and [r["step"] for r in history if "train/loss" in r] == [3, 6, 9, 12, 13]
  assert counted["train_programs"] == 1 and counted["per_fit"] == [["train", 1]], counted
  assert counted["programs"] >= 1 and counted["compile_seconds"] >= 0
  with train.counting_programs():  # a finished run resumes at its end and compiles nothing
    _fit(tmp_path, dataset=_row_batches(gather), num_steps=13, log_every=3, checkpoint_every=5, gather=gather,
         steps_per_call=steps_per_call)
    assert train.programs_compiled()["train_programs"] == 0


@pytest.mark.parametrize("skip", [True, False])
def test_masked_steps_leave_the_state_as_it_was(monkeypatch, skip):
  """A call of 4 steps with 2 live equals a call of 2 steps: the masked ones change nothing, whatever their batch,
  skipped (a conditional, as on a CPU) or computed and discarded (a select, as on an accelerator)."""
  monkeypatch.setattr(train, "SKIP_MASKED_STEPS", ("cpu",) if skip else ())
  step = train.make_train_step(loss_fn, OPTIMIZER)
  batches = [pipeline.make_batches(SOURCE, BATCH, seed=3)[i] for i in range(4)]
  stack = lambda bs: jax.tree.map(lambda *x: np.stack(x), *bs)  # noqa: E731
  fresh = lambda: train.init_state(init_fn, OPTIMIZER, jax.random.PRNGKey(0))  # noqa: E731
  rng = jax.random.PRNGKey(1)
  four = train.jit_train_steps(step, MESH, None, 4)
  two = train.jit_train_steps(step, MESH, None, 2)
  masked, metrics = four(fresh(), {}, stack(batches[:2] + [batches[3], batches[3]]), rng, np.int32(2))
  plain, plain_metrics = two(fresh(), {}, stack(batches[:2]), rng, np.int32(2))
  assert int(masked.step) == 2
  for x, y in zip(jax.tree.leaves(masked), jax.tree.leaves(plain)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(np.asarray(metrics["loss"])[:2], np.asarray(plain_metrics["loss"]), rtol=1e-6)


def test_a_smoke_run_records_one_train_program_per_model(smoke_runs):
  """The main job's results.json says how many programs it compiled: one train program per model it trained."""
  _, results = smoke_runs("cast")
  programs = results["programs"]
  assert programs["per_fit"] and all(n == 1 for _, n in programs["per_fit"]), programs
  assert programs["train_programs"] == len(programs["per_fit"]) and programs["programs"] >= programs["train_programs"]
  assert results["precision"]["platform"] == jax.default_backend()  # a world run records where it ran


def test_the_compilation_cache_is_on_for_accelerators_and_left_to_the_user_on_a_cpu(tmp_path, monkeypatch):
  monkeypatch.setenv("VIDJAX_CACHE_DIR", str(tmp_path))
  assert train.compilation_cache_dir("auto", "gpu") == str(tmp_path / "xla")
  assert train.compilation_cache_dir("auto", "tpu") == str(tmp_path / "xla")
  assert train.compilation_cache_dir("auto", "cpu") is None
  assert train.compilation_cache_dir("", "gpu") is None and train.compilation_cache_dir("off", "gpu") is None
  assert train.compilation_cache_dir(str(tmp_path / "mine"), "cpu") == str(tmp_path / "mine")
  # A folder already set (the suite's, tests/conftest.py's JAX_COMPILATION_CACHE_DIR; or a user's) wins.
  assert jax.config.jax_compilation_cache_dir
  assert train.use_compilation_cache(str(tmp_path / "mine")) == jax.config.jax_compilation_cache_dir
  assert not (tmp_path / "mine").exists()


def test_the_loop_hands_freed_host_memory_back_when_it_ends(tmp_path, monkeypatch):
  """`train.release_host_memory` at the end of every `fit`: glibc's free pages go back to the system (freed small
  buffers with a live one above them stay resident until then); without glibc it says it did nothing."""
  import platform  # pylint: disable=g-import-not-at-top
  import re  # pylint: disable=g-import-not-at-top
  from pathlib import Path  # pylint: disable=g-import-not-at-top
  calls = []
  real = train.release_host_memory
  monkeypatch.setattr(train, "release_host_memory", lambda: calls.append(1) or real())
  _fit(tmp_path, num_steps=2, log_every=1, checkpoint_every=2)
  assert calls == [1]
  if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
    assert real() is False
    return
  rss = lambda: int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) * 1024  # noqa
  blocks = [bytearray(64 * 1024 - 64) for _ in range(4000)]  # 256 MB below glibc's mmap threshold: heap pages
  keep = blocks[-1]
  del blocks
  before = rss()
  assert real() is True
  assert before - rss() > 100e6, (before, rss())
  del keep
