"""The one generic train loop of vidjax: train state, jitted train step, checkpoint/resume, logs.

Every method (CAST, VEDJE, VideoComp, GRDR) trains through `fit`; the loop knows no method by
name. A method plugs in three things:

  init_fn(rng) -> params                           e.g. lambda rng: model.init(rng, *dummy)['params']
  loss_fn(params, batch, rng) -> (loss, aux)       aux: dict of scalar metrics to log
  optimizer: optax.GradientTransformation          e.g. adamw(1e-4, 1e-3) (CAST's AdamW settings)

and gets back the trained state and the logged history:

  dataset = pipeline.loader(pipeline.make_batches(examples, batch_size=64, seed=0))  # vidjax.data.pipeline
  state, history = fit(init_fn=init_fn, loss_fn=loss_fn, optimizer=adamw(1e-4, 1e-3),
                       dataset=dataset, num_steps=5000, workdir=workdir, seed=0)

Most methods train by epochs over an index range: `fit_epochs(...)` turns a `tcfg` section (epochs,
batch_size, lr, weight_decay, checkpoint_every, log_every, progress) into steps, index batches and `fit`.

What the loop does (ARCHITECTURE.md, "train.py"; STYLE.md items 3, 8-10):
- The train state is a small pytree (`TrainState`: step, params, opt_state). The optimizer is not
  stored in it; it is closed over by `make_train_step`, so the state is pure data that orbax saves.
- `make_train_step(loss_fn, optimizer)` builds the pure `train_step(state, batch, rng)`; `fit` jits
  it with `donate_argnums=0` and explicit shardings from a `('data',)` mesh (batch split along
  its leading dimension, state replicated; see `vidjax.sharding`). The per-step rng is
  `fold_in(rng, state.step)`, so randomness depends only on the seed and the step.
- Inputs live on the device (ARCHITECTURE.md "Accelerators"): with `gather=` (`vidjax.data.pipeline.Gather`) the
  feature tables within the device budget are put on the device once, a batch carries their row indices and the
  gather runs inside the jitted step. A call runs `steps_per_call` steps as one `lax.scan` (the platform's default:
  one on CPU, several on an accelerator, dividing the log, eval and checkpoint intervals); a call that stops early at
  one of those steps masks the rest, so a run compiles one train program (`programs_compiled` counts them, and
  results.json records the count). The log records the host's own ms and bytes per step.
- Checkpoints: an orbax `CheckpointManager` in `<workdir>/checkpoints` holds the train state and the
  data iterator's position in the same step; calling `fit` again on the same workdir resumes
  exactly where the last checkpoint left off (same params, same next batch, same rngs).
- Logs: `<workdir>/metrics.jsonl` (one JSON object per logged step) and TensorBoard event files in
  `<workdir>/tb`, written by process 0 only; a progress bar shows step, loss and examples/s (on a
  terminal; in a log file a plain line every 10 s, `vidjax.progress`).
- A non-finite loss or gradient norm stops the run with a `FloatingPointError` naming the step;
  a state with NaNs is never checkpointed, and checkpoints already written are kept.
- A checkpoint that does not restore (a truncated array file, a garbage iterator state) is reported and
  removed, and the run resumes from the newest one that does (orbax keeps `max_to_keep`).
- `metrics.jsonl` is flushed and fsynced at every checkpoint, so what a checkpoint covers is on disk.
- A full disk while a checkpoint is written stops the run with one `OSError` (ENOSPC) naming the checkpoint folder
  and "no space left"; the step orbax was writing (`<step>.orbax-checkpoint-tmp*`) is removed then, and by the
  next run if the process died first, which resumes from the newest complete checkpoint.

Mixed precision is a model concern: Flax modules compute in `dtype=jnp.bfloat16` with float32
params, so gradients and optimizer state stay float32 and nothing here changes.

Freezing and per-group learning rates go through the `optimizer` argument with
`optax.multi_transform` and labels from parameter paths (`param_labels`):

  rules = [(r'text_encoder/.*', 'frozen'), (r'.*', 'train')]
  optimizer = optax.multi_transform(
      {'train': adamw(1e-4, 1e-3), 'frozen': optax.set_to_zero()},
      lambda params: param_labels(params, rules))

(`multi_transform` accepts a function of the params, so the labels are computed from the real
param tree inside `fit`.) Large frozen backbones should stay out of the train state altogether
(STYLE.md item 4): extract their features once and feed them as batch inputs.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import logging
import math
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import flax
import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp

from vidjax import io
from vidjax import progress as progress_lib
from vidjax import sharding as sharding_lib
from vidjax.data import pipeline

LossFn = Callable[[Any, Any, jax.Array], tuple[jax.Array, Mapping[str, jax.Array]]]
EvalFn = Callable[[Any, int], Mapping[str, Any]]

# Metrics that must stay finite; anything else in `aux` is only logged.
CHECKED_METRICS = ("loss", "grad_norm")


@flax.struct.dataclass
class TrainState:
  """Everything that changes during training, as one pytree (saved whole by orbax).

  Attributes:
    step: int32 scalar, the number of optimizer updates applied so far.
    params: the model parameters (a pytree, usually Flax's nested dict).
    opt_state: the optimizer state for `params`.
  """
  step: jax.Array
  params: Any
  opt_state: Any


# ----------------------------------------------------------------------------------------------
# Optimizers and parameter groups.


def adamw(learning_rate: float, weight_decay: float, warmup_steps: int = 0,
          total_steps: int | None = None, *, b1: float = 0.9, b2: float = 0.999,
          eps: float = 1e-8, mask: Any = None, warmup_init: float = 0.0,
          decay_every: int | None = None, decay_rate: float = 1.0) -> optax.GradientTransformation:
  """AdamW with an optional linear warmup and an optional cosine or step decay.

  Weight decay is decoupled and scaled by the learning rate, as in PyTorch's `AdamW`
  (CAST Sec. 3 "Implementation Details" and App. B Table 10: AdamW, lr 1e-4, weight decay 1e-3).

  Args:
    learning_rate: peak learning rate (> 0).
    weight_decay: decoupled weight decay coefficient (>= 0).
    warmup_steps: linear warmup from 0 to `learning_rate` over this many steps.
    total_steps: when given, cosine-decay to 0 at this step; otherwise constant after warmup.
    warmup_init: the warmup's starting learning rate (VEDJE A.3: 1e-6).
    decay_every, decay_rate: step decay after warmup, lr * decay_rate ** (step // decay_every)
      (VEDJE A.3: x0.9 per epoch); not with total_steps.
    b1, b2, eps: Adam moments and epsilon.
    mask: optional pytree / function of params saying which leaves get weight decay.
  """
  if not learning_rate > 0:
    raise ValueError(f"adamw: learning_rate must be > 0, got {learning_rate}.")
  if weight_decay < 0:
    raise ValueError(f"adamw: weight_decay must be >= 0, got {weight_decay}.")
  if warmup_steps < 0:
    raise ValueError(f"adamw: warmup_steps must be >= 0, got {warmup_steps}.")
  schedule = lr_schedule(learning_rate, warmup_steps, total_steps, warmup_init=warmup_init,
                         decay_every=decay_every, decay_rate=decay_rate)
  return optax.adamw(schedule, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=mask)


def lr_schedule(learning_rate: float, warmup_steps: int = 0, total_steps: int | None = None, *,
                warmup_init: float = 0.0, decay_every: int | None = None, decay_rate: float = 1.0):
  """The learning-rate schedule of `adamw` (same arguments): a float or an optax schedule."""
  if decay_every is not None and (total_steps is not None or decay_every < 1 or not 0 < decay_rate <= 1):
    raise ValueError(f"adamw: step decay needs decay_every >= 1 and 0 < decay_rate <= 1 and no total_steps, "
                     f"got decay_every={decay_every}, decay_rate={decay_rate}, total_steps={total_steps}.")
  if decay_every is not None:
    def schedule(step):
      warm = warmup_init + (learning_rate - warmup_init) * step / max(warmup_steps, 1)
      decayed = learning_rate * decay_rate ** (step // decay_every)
      return jnp.where(step < warmup_steps, warm, decayed)
  elif total_steps is not None:
    if total_steps <= warmup_steps:
      raise ValueError(f"adamw: total_steps={total_steps} must exceed warmup_steps={warmup_steps}.")
    schedule = optax.warmup_cosine_decay_schedule(warmup_init, learning_rate, warmup_steps, total_steps, 0.0)
  elif warmup_steps:
    schedule = optax.join_schedules(
        [optax.linear_schedule(warmup_init, learning_rate, warmup_steps), optax.constant_schedule(learning_rate)],
        [warmup_steps])
  else:
    schedule = learning_rate
  return schedule


def param_path(path: Sequence[Any]) -> str:
  """'/'-joined name of a pytree key path, e.g. `encoder/layer_0/kernel`."""
  parts = []
  for key in path:
    if isinstance(key, jax.tree_util.DictKey):
      parts.append(str(key.key))
    elif isinstance(key, jax.tree_util.GetAttrKey):
      parts.append(key.name)
    elif isinstance(key, jax.tree_util.SequenceKey):
      parts.append(str(key.idx))
    else:
      parts.append(str(key))
  return "/".join(parts)


def param_labels(params: Any, rules: Sequence[tuple[str, str]]) -> Any:
  """Labels every parameter by the first rule whose regex fully matches its '/'-joined path.

  Args:
    params: a pytree of parameters (nested dicts from Flax).
    rules: `[(regex, label), ...]`, tried in order; end with `('.*', default)` to label the rest.

  Returns:
    A pytree with the structure of `params` holding one label (str) per leaf, as
    `optax.multi_transform` expects.
  """
  compiled = [(re.compile(pattern), label) for pattern, label in rules]

  def label(path, _):
    name = param_path(path)
    for regex, lab in compiled:
      if regex.fullmatch(name):
        return lab
    raise ValueError(f"param_labels: parameter '{name}' matches none of the rules "
                     f"{[p for p, _ in rules]}; add a catch-all rule such as ('.*', 'train').")

  return jax.tree_util.tree_map_with_path(label, params)


def _iterate(dataset: Any) -> Iterator[Any]:
  iterator = iter(dataset)
  if not (hasattr(iterator, "get_state") and hasattr(iterator, "set_state")):
    raise TypeError(f"fit: dataset must be a grain IterDataset or MapDataset (its iterator state "
                    f"is checkpointed), got {type(dataset).__name__}.")
  return iterator


# ----------------------------------------------------------------------------------------------
# The train step.


def init_state(init_fn: Callable[[jax.Array], Any], optimizer: optax.GradientTransformation,
               rng: jax.Array) -> TrainState:
  """Builds the initial `TrainState` (step 0) from `init_fn(rng) -> params`. Pure: jit it to create it sharded."""
  params = init_fn(rng)
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params))


def make_train_step(loss_fn: LossFn, optimizer: optax.GradientTransformation):
  """Builds the pure `train_step(state, batch, rng) -> (state, metrics)` for one loss.

  Args:
    loss_fn: `loss_fn(params, batch, rng) -> (loss, aux)` with a scalar `loss` and `aux` a dict
      of scalar metrics (must not use the names 'loss' or 'grad_norm').
    optimizer: the optax transformation applied to the gradients.

  Returns:
    `train_step(state, batch, rng)`: `batch` is a pytree of `[B, ...]` arrays; `rng` is the run's
    base key, folded with `state.step` so every step draws fresh, reproducible randomness.
    `metrics` holds `loss` and `grad_norm` (float32 scalars) plus the entries of `aux`.
  """

  def train_step(state: TrainState, batch: Any, rng: jax.Array):
    step_rng = jax.random.fold_in(rng, state.step)
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch, step_rng)
    clash = set(aux) & set(CHECKED_METRICS)
    if clash:
      raise ValueError(f"loss_fn aux metrics must not be named {sorted(clash)}; the train step "
                       "adds these itself.")
    for name, value in aux.items():
      if jnp.ndim(value) != 0:
        raise ValueError(f"loss_fn aux metric '{name}' has shape {jnp.shape(value)}; "
                         "expected a scalar.")
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {name: jnp.asarray(v, jnp.float32) for name, v in aux.items()}
    metrics["loss"] = jnp.asarray(loss, jnp.float32)
    metrics["grad_norm"] = optax.tree.norm(grads).astype(jnp.float32)
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return train_step


def jit_train_step(train_step: Callable, mesh: jax.sharding.Mesh):
  """Jits `train_step` for `mesh`: state and rng replicated, batch split on 'data', state donated."""
  repl = sharding_lib.replicated(mesh)
  return jax.jit(train_step, in_shardings=(repl, sharding_lib.data_sharded(mesh), repl),
                 out_shardings=(repl, repl), donate_argnums=0)


# Optimizer steps per compiled call of `fit` (a `lax.scan` over that many batches) when the caller does not say.
# On CPU one step per call: dispatch costs little beside a step there (bench/cast_train.py --loop measures both). On an
# accelerator a small model's step is shorter than the host's per-call work (fetch, transfer, dispatch), so calls carry
# several steps: at most `DEFAULT_STEPS_PER_CALL`, fitted to the log, eval and checkpoint intervals
# (`fitted_steps_per_call`), so that every call of a run is the same one program.
STEPS_PER_CALL = {"cpu": 1}
DEFAULT_STEPS_PER_CALL = 8


def default_steps_per_call() -> int:
  return STEPS_PER_CALL.get(jax.devices()[0].platform, DEFAULT_STEPS_PER_CALL)


def fitted_steps_per_call(most: int, intervals: Sequence[int]) -> int:
  """Steps per call at most `most` that divide every interval (log, eval, checkpoint): the largest divisor of their
  gcd up to `most`, when that is at least half of `most`; else `most` itself (the calls that end at a boundary then
  run some masked steps, `jit_train_steps`). E.g. 8 with intervals 50 and 1000 gives 5; with 64 and 1000, 8."""
  g = 0
  for every in intervals:
    g = math.gcd(g, int(every))
  divisor = max((d for d in range(1, most + 1) if g % d == 0), default=1)
  return divisor if 2 * divisor >= most else most


# Platforms where a masked step is skipped by a conditional rather than computed and discarded (`jit_train_steps`).
SKIP_MASKED_STEPS = ("cpu",)

# The name of every compiled train program (`jit_train_steps`): XLA's module `jit(vidjax_train_steps)`, what
# `programs_compiled` counts as a train program.
TRAIN_PROGRAM = "vidjax_train_steps"


def jit_train_steps(train_step: Callable, mesh: jax.sharding.Mesh, gather: pipeline.Gather | None = None,
                    num_steps: int = 1):
  """Jits `num_steps` applications of `train_step` as one program: `steps(state, tables, batches, rng, active)`.

  `tables`: `gather.device_tables(mesh)` (or `{}`), replicated; each batch's device-side fields are gathered from
  them inside the program (`pipeline.Gather.apply`). With `num_steps` 1, `batches` is one batch split on 'data',
  `active` is ignored and the metrics are scalars; otherwise every leaf has a leading `[num_steps]` axis (split on
  'data' along the next), the steps run as a `lax.scan`, and the metrics come back stacked `[num_steps]`. The state
  is donated.

  `active` (an int32 scalar, a traced value): the steps at positions >= `active` are masked, they leave the state as
  it was (their batches are padding and their metrics are to be dropped), so a call that must stop early at a log,
  eval or checkpoint step runs the same program as the others. A masked step is skipped (`lax.cond`) on a CPU, where a
  conditional costs nothing; on an accelerator it runs and a select keeps the old state (fused into the update),
  because a conditional there can cost a device-to-host sync per step. Masked or not, a step computes the same
  numbers: a resumed run equals a straight one bit for bit.
  """
  def one(state, tables, batch, rng):
    return train_step(state, gather.apply(tables, batch) if gather is not None else batch, rng)

  repl = sharding_lib.replicated(mesh)
  if num_steps == 1:
    def vidjax_train_steps(state, tables, batches, rng, active):  # pylint: disable=unused-argument
      return one(state, tables, batches, rng)
    batch_sharding = sharding_lib.data_sharded(mesh)
  else:
    skip = mesh.devices.flat[0].platform in SKIP_MASKED_STEPS

    def vidjax_train_steps(state, tables, batches, rng, active):
      _, shapes = jax.eval_shape(one, state, tables, jax.tree.map(lambda x: x[0], batches), rng)
      skipped = lambda s: (s, jax.tree.map(lambda m: jnp.zeros(m.shape, m.dtype), shapes))  # noqa: E731

      def body(s, xs):
        batch, position = xs
        if skip:
          return jax.lax.cond(position < active, lambda t: one(t, tables, batch, rng), skipped, s)
        new, metrics = one(s, tables, batch, rng)
        return jax.tree.map(lambda n, o: jnp.where(position < active, n, o), new, s), metrics
      return jax.lax.scan(body, state, (batches, jnp.arange(num_steps, dtype=jnp.int32)))
    batch_sharding = sharding_lib.data_sharded(mesh, axis=1)
  return jax.jit(vidjax_train_steps, in_shardings=(repl, repl, batch_sharding, repl, repl),
                 out_shardings=(repl, repl), donate_argnums=0)


# ----------------------------------------------------------------------------------------------
# Compiled programs: how many a run compiled, and the persistent compilation cache.

_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"  # jax's event per XLA program compiled or loaded
_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_COUNTS = {"programs": 0, "train_programs": 0, "compile_seconds": 0.0, "cache_hits": 0}
_FITS: list[dict[str, Any]] = []  # one record per `fit` call: its description and the train programs it compiled
_RUNS: list[tuple[dict[str, Any], int]] = []  # the open `counting_programs` contexts: (counts, len(_FITS)) at entry


def _on_duration(event: str, duration: float, **kwargs) -> None:
  if event == _BACKEND_COMPILE:
    _COUNTS["programs"] += 1
    _COUNTS["compile_seconds"] += duration
    if TRAIN_PROGRAM in str(kwargs.get("fun_name", "")):
      _COUNTS["train_programs"] += 1


def _on_event(event: str, **kwargs) -> None:  # pylint: disable=unused-argument
  if event == _CACHE_HIT:
    _COUNTS["cache_hits"] += 1


jax.monitoring.register_event_duration_secs_listener(_on_duration)
jax.monitoring.register_event_listener(_on_event)


@contextlib.contextmanager
def counting_programs():
  """Within it, `programs_compiled()` counts from its entry (a run: `experiments.common.precision_policy`)."""
  _RUNS.append((dict(_COUNTS), len(_FITS)))
  try:
    yield
  finally:
    _RUNS.pop()


def programs_compiled() -> dict[str, Any]:
  """The XLA programs compiled since the innermost `counting_programs` entry (else since the process started):
  {"programs": every program jax compiled or loaded from the persistent cache (jax's backend-compile event),
   "train_programs": those of them that are `fit`'s train programs, "per_fit": [[description, train programs],
   ...] per `fit` call, "compile_seconds", "cache_hits": programs the persistent cache supplied}."""
  start, first = _RUNS[-1] if _RUNS else ({k: 0 for k in _COUNTS}, 0)
  out = {k: _COUNTS[k] - start[k] for k in ("programs", "train_programs", "cache_hits")}
  return {**out, "per_fit": [[f["description"], f["train_programs"]] for f in _FITS[first:]],
          "compile_seconds": round(_COUNTS["compile_seconds"] - start["compile_seconds"], 2)}


def compilation_cache_dir(setting: str | None, platform: str | None = None) -> str | None:
  """The persistent compilation cache folder `setting` (a config's `compilation_cache`) asks for on `platform` (the
  default backend's when None): "auto" = `$VIDJAX_CACHE_DIR` or `~/.cache/vidjax`, then `/xla`, on an accelerator
  (each model's train program is compiled once per machine, not once per run) and none on a CPU (there
  `JAX_COMPILATION_CACHE_DIR`, jax's own variable, is left to the user); "" or "off" = none; a path = that folder on
  any platform."""
  if setting in (None, "", "off"):
    return None
  if setting != "auto":
    return str(Path(setting).expanduser())
  if (platform or jax.default_backend()) == "cpu":
    return None
  root = os.environ.get("VIDJAX_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "vidjax")
  return os.path.join(root, "xla")


def use_compilation_cache(setting: str | None) -> str | None:
  """Points jax's persistent compilation cache at `compilation_cache_dir(setting)` unless a folder is already set
  (`JAX_COMPILATION_CACHE_DIR` or an earlier call: the user's wins); returns the folder in use (None: no cache).
  It takes effect for a process that has compiled nothing yet (jax decides once, at its first compile): `vidjax.main`
  calls it before the run compiles anything."""
  current = jax.config.jax_compilation_cache_dir
  if current:
    return current
  folder = compilation_cache_dir(setting)
  if folder:
    Path(folder).mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", folder)
  return folder


# ----------------------------------------------------------------------------------------------
# Metric logs.


class MetricWriter:
  """Writes `<workdir>/metrics.jsonl` and TensorBoard events under `<workdir>/tb` (process 0).

  On resume (`resume_step > 0`) records after `resume_step` that a crashed run had already logged
  are dropped from metrics.jsonl, and TensorBoard is told to purge them, so the logs read as one
  clean run. `history` holds every record of the run (earlier ones read back from the file).
  """

  def __init__(self, workdir: Path, resume_step: int = 0, enabled: bool = True):
    self.path = workdir / "metrics.jsonl"
    self.enabled = enabled
    self.history: list[dict[str, Any]] = []
    self._tb = None
    if not enabled:
      return
    if self.path.exists():
      lines = self.path.read_text(encoding="utf-8").splitlines()
      kept_lines = []
      for n, line in enumerate(lines, 1):
        if not line.strip():
          continue
        try:
          record = json.loads(line)
        except json.JSONDecodeError:
          if n == len(lines):
            continue  # the last line, cut short by a crash
          raise ValueError(f"{self.path} line {n} is not valid JSON: {line[:80]!r}") from None
        if record.get("step", 0) <= resume_step:
          self.history.append(record)
          kept_lines.append(line)
      io.atomic_write_text(self.path, "".join(l + "\n" for l in kept_lines))
    import tensorboardX  # pylint: disable=g-import-not-at-top
    self._tb = tensorboardX.SummaryWriter(
        str(workdir / "tb"), purge_step=resume_step + 1 if resume_step else None, flush_secs=30)
    self._file = open(self.path, "a", encoding="utf-8")

  def write(self, step: int, metrics: Mapping[str, float]) -> None:
    record = {"step": int(step), **{k: float(v) for k, v in metrics.items()}}
    self.history.append(record)
    if not self.enabled:
      return
    self._file.write(json.dumps(record, sort_keys=True) + "\n")
    self._file.flush()
    for name, value in metrics.items():
      self._tb.add_scalar(name, float(value), int(step))

  def sync(self) -> None:
    """Flushes metrics.jsonl to disk (fsync): called at every checkpoint, so the log covers what it does."""
    if self.enabled:
      self._file.flush()
      os.fsync(self._file.fileno())
      self._tb.flush()

  def close(self) -> None:
    if self.enabled:
      self._file.close()
      self._tb.close()


def _scalar_dict(metrics: Mapping[str, Any], prefix: str, where: str) -> dict[str, float]:
  out = {}
  for name, value in metrics.items():
    value = np.asarray(jax.device_get(value))
    if value.size != 1:
      raise ValueError(f"{where} metric '{name}' has shape {value.shape}; expected a scalar.")
    out[f"{prefix}{name}"] = float(value.reshape(()))
  return out


# ----------------------------------------------------------------------------------------------
# The loop.


def _checkpoint_manager(workdir: Path, max_to_keep: int) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
  directory = (workdir / "checkpoints").absolute()
  _remove_partial_checkpoints(directory)
  return ocp.CheckpointManager(directory, options=options)


# ----------------------------------------------------------------------------------------------
# A full disk while a checkpoint is written: one message, nothing half-written left behind.

PARTIAL_CHECKPOINT = "*.orbax-checkpoint-tmp*"  # a step orbax was still writing (it renames it when complete)


def _remove_partial_checkpoints(directory: Path) -> None:
  """Removes the steps orbax left half-written (a full disk, a killed process): never restored, only taking space.
  Process 0, before the manager opens the folder (or when a save has just failed)."""
  if jax.process_index() != 0 or not directory.is_dir():
    return
  for path in directory.glob(PARTIAL_CHECKPOINT):
    if path.is_dir():
      shutil.rmtree(path, ignore_errors=True)
    else:
      path.unlink(missing_ok=True)


def _is_disk_full(error: BaseException | None) -> bool:
  """Whether `error` or what caused it is a full disk (orbax and tensorstore wrap the OSError in their own types)."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if (isinstance(error, OSError) and error.errno == errno.ENOSPC) or "no space left on device" in str(error).lower():
      return True
    error = error.__cause__ or error.__context__
  return False


@contextlib.contextmanager
def _checkpoint_disk_guard(directory: Path, step: int | None = None):
  """Turns a full disk while writing a checkpoint into one `OSError(ENOSPC)` naming the folder (instead of orbax's
  trace of hundreds of lines) and removes the half-written step; any other error passes through unchanged."""
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except  (orbax / tensorstore raise many types)
    if not _is_disk_full(e):
      raise
    _remove_partial_checkpoints(Path(directory))
    what = f"checkpoint step {step}" if step is not None else "a checkpoint"
    raise OSError(errno.ENOSPC, f"no space left on device while writing {what} to {directory}: free some space "
                  "and rerun the same command (it resumes from the newest complete checkpoint)") from e


def _restore_latest_good(manager: ocp.CheckpointManager, abstract: TrainState, data_iter, description: str):
  """(state, step) of the newest checkpoint that restores whole (train state and data-iterator position). A step
  that does not (a truncated array file, a garbage iterator state) is reported, removed so that training can save
  that step again, and the next older one is tried; none restoring is one clear error."""
  skipped = []
  for step in sorted(manager.all_steps(), reverse=True):
    try:
      # Grain's orbax handler sets the iterator's position in place (one file per process).
      restored = manager.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(abstract), data=grain.checkpoint.CheckpointRestore(data_iter)))
    except Exception as e:  # pylint: disable=broad-except  (orbax / tensorstore / grain raise many types)
      reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}"
      skipped.append((step, reason))
      continue
    for bad, reason in skipped:
      print(f"{description}: checkpoint step {bad} in {manager.directory} cannot be restored ({reason}); removed it "
            f"and resumed from step {step}", flush=True)
      manager.delete(bad)
    return restored.state, step
  raise ValueError(f"{description}: no checkpoint in {manager.directory} can be restored: "
                   + "; ".join(f"step {s}: {r}" for s, r in skipped) + ". Move the checkpoints/ folder away to start "
                   "over.")


_BEFORE_TRAINING: list[Callable[[], None]] = []


@contextlib.contextmanager
def before_training(hook: Callable[[], None]):
  """Within it, every `fit` calls `hook()` once its arguments are checked, before it writes or trains anything (a
  check run, `vidjax.main --check`, stops there by raising)."""
  _BEFORE_TRAINING.append(hook)
  try:
    yield
  finally:
    _BEFORE_TRAINING.remove(hook)


def fit(*, init_fn: Callable[[jax.Array], Any], loss_fn: LossFn,
        optimizer: optax.GradientTransformation, dataset: Any, num_steps: int,
        workdir: str | Path, seed: int = 0, mesh: jax.sharding.Mesh | None = None,
        checkpoint_every: int = 1000, log_every: int = 50, max_to_keep: int = 2,
        eval_fn: EvalFn | None = None, eval_every: int | None = None, progress: bool = True,
        description: str = "train", gather: pipeline.Gather | None = None,
        steps_per_call: int | None = None) -> tuple[TrainState, list[dict[str, Any]]]:
  """Trains for `num_steps` optimizer steps, resuming from `<workdir>/checkpoints` if present.

  Args:
    init_fn: `init_fn(rng) -> params`.
    loss_fn: `loss_fn(params, batch, rng) -> (loss, aux_metrics)`; see `make_train_step`.
    optimizer: an optax transformation (e.g. `adamw(...)`, or a `multi_transform`).
    dataset: a Grain `IterDataset` (or `MapDataset`) whose items are batches, i.e. dicts of
      `[B_local, ...]` numpy arrays for this process; usually
      `vidjax.data.pipeline.loader(make_index_batches(...))`, which sets vidjax's read options
      (a bare `MapDataset` is read with Grain's defaults). Its iterator position is checkpointed
      with the state.
    num_steps: total number of steps of the run (counting steps done before a resume).
    workdir: directory for checkpoints/, tb/ and metrics.jsonl.
    seed: seeds param init and the per-step rngs (data order is seeded by the dataset).
    mesh: the `('data',)` mesh; all devices (`sharding.make_mesh()`) when None.
    checkpoint_every: save every this many steps; a final checkpoint is always saved.
    log_every: log training metrics (means over the steps since the last log) every this many
      steps and at the last step.
    max_to_keep: number of checkpoints kept.
    eval_fn: optional `eval_fn(params, step) -> {name: scalar}`, logged as `eval/<name>`.
    eval_every: call `eval_fn` every this many steps and at the last step.
    progress: report progress (process 0 only; `vidjax.progress.bar`).
    description: label of the bar and of error messages.
    gather: the batch fields gathered on the device from tables put there once (`vidjax.data.pipeline.Gather`);
      the dataset's batches then carry row indices for them (build it with `gather.host(batch_fn)`).
    steps_per_call: optimizer steps per compiled call (a `lax.scan` over that many batches; a call stops at a
      log, eval or checkpoint step, so checkpoints and resumes fall on the same steps, and masks the steps it does
      not run, so every call is the same one program); None = the platform's default (`STEPS_PER_CALL`) fitted to
      the intervals (`fitted_steps_per_call`). The steps and their randomness are the same whatever the value.
      `programs_compiled()` counts the train programs compiled: one per `fit` (none where the persistent cache or
      an earlier `fit` with the same functions and shapes supplied it).

  Returns:
    `(state, history)`: the final `TrainState` and every logged record
    (`{'step': s, 'train/loss': ..., 'train/grad_norm': ..., 'train/examples_per_sec': ...,
    'train/steps_per_sec': ..., 'train/host_ms_per_step': ..., 'train/h2d_bytes_per_step': ..., 'eval/...': ...}`;
    host ms and bytes: the host's own work per step, fetching batches and handing them to the device), including
    those logged before a resume.

  Raises:
    FloatingPointError: the loss or gradient norm became NaN/Inf; names the first bad step.
  """
  for name, value in (("num_steps", num_steps), ("checkpoint_every", checkpoint_every),
                      ("log_every", log_every), ("max_to_keep", max_to_keep),
                      ("steps_per_call", 1 if steps_per_call is None else steps_per_call)):
    if not isinstance(value, (int, np.integer)) or value < 1:
      raise ValueError(f"fit: {name} must be a positive integer, got {value!r}.")
  if eval_fn is not None and (eval_every is None or eval_every < 1):
    raise ValueError(f"fit: eval_fn is given, so eval_every must be a positive integer, "
                     f"got {eval_every!r}.")
  for hook in _BEFORE_TRAINING:
    hook()
  workdir = Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  mesh = sharding_lib.make_mesh() if mesh is None else mesh
  is_main = jax.process_index() == 0

  init_rng, step_rng = jax.random.split(jax.random.PRNGKey(seed))
  # The user's functions are closed over here, once per call (never static jit arguments).
  make_state = functools.partial(init_state, init_fn, optimizer)
  train_step = make_train_step(loss_fn, optimizer)
  if steps_per_call is None:  # the platform's default, fitted to the intervals: no call ends early
    steps_per_call = fitted_steps_per_call(default_steps_per_call(), [log_every, checkpoint_every]
                                           + ([eval_every] if eval_fn is not None else []))
  # One program for the whole run: a call that stops early at a log, eval or checkpoint step masks its last steps.
  steps_fn = jit_train_steps(train_step, mesh, gather, steps_per_call)
  active = {}  # the device scalar `active` of a call of that many live steps
  programs_at_start = _COUNTS["train_programs"]
  tables = gather.device_tables(mesh) if gather is not None else {}
  data_iter = _iterate(dataset)
  manager = _checkpoint_manager(workdir, max_to_keep)
  writer = None
  pbar = None
  try:
    start = manager.latest_step()
    if start is None:
      start = 0
      state = sharding_lib.create_replicated(make_state, mesh, init_rng)
    else:
      abstract = sharding_lib.abstract_replicated(jax.eval_shape(make_state, init_rng), mesh)
      state, start = _restore_latest_good(manager, abstract, data_iter, description)
      if int(state.step) != start:
        raise ValueError(f"Checkpoint {manager.directory}/{start} holds a state at step "
                         f"{int(state.step)}; expected {start}.")
      logging.info("%s: resumed from %s at step %d.", description, manager.directory, start)
    step_rng = jax.device_put(step_rng, sharding_lib.replicated(mesh))
    writer = MetricWriter(workdir, resume_step=start, enabled=is_main)

    pbar = progress_lib.bar(num_steps, description, "step", initial=start, disable=not progress or not is_main)
    # Metrics not yet read back to host: (first step, live steps, metrics; stacked [steps_per_call] when > 1).
    pending: list[tuple[int, int, dict[str, jax.Array]]] = []
    interval_start, interval_examples = time.perf_counter(), 0
    host_seconds, host_bytes, host_steps = 0.0, 0, 0  # the host's own work per step: fetch, stack, transfer

    def check_pending() -> list[dict[str, float]]:
      values = []
      for (first, count, _), metrics in zip(pending, jax.device_get([m for _, _, m in pending])):
        # A multi-step call's metrics are stacked [steps_per_call]; those of its masked steps are dropped.
        values += [metrics] if steps_per_call == 1 else [{k: v[j] for k, v in metrics.items()} for j in range(count)]
      for step, metrics in enumerate(values, pending[0][0] if pending else 0):
        for name in CHECKED_METRICS:
          if not np.isfinite(metrics[name]):
            raise FloatingPointError(
                f"{description}: {name} is {float(metrics[name])} at step {step} (the update "
                f"from step {step - 1} to {step}; workdir {workdir}). Training stopped; the last "
                f"checkpoint (step {manager.latest_step()}) in {manager.directory} is kept.")
      pending.clear()
      return values

    def steps_until_boundary(step: int) -> int:  # a call never runs past a log, eval or checkpoint step
      every = [log_every, checkpoint_every] + ([eval_every] if eval_fn is not None else [])
      return min([num_steps - step] + [e - step % e for e in every])

    step = start
    while step < num_steps:
      count = min(steps_per_call, steps_until_boundary(step))
      host_start = time.perf_counter()
      local = []
      for _ in range(count):
        try:
          local.append(next(data_iter))
        except StopIteration:
          raise ValueError(f"{description}: the dataset ran out of batches after {step + len(local)} "
                           f"steps; num_steps={num_steps}. Repeat it (num_epochs=None) or train "
                           "fewer steps.") from None
      if steps_per_call == 1:
        host_batch = local[0]
      else:  # masked steps get copies of the last batch (any batch of the right shape would do)
        host_batch = jax.tree.map(lambda *x: np.stack(x), *(local + local[-1:] * (steps_per_call - count)))
      batch = sharding_lib.shard_batch(host_batch, mesh, axis=int(steps_per_call > 1))
      host_seconds += time.perf_counter() - host_start
      host_bytes += sum(np.asarray(x).nbytes for x in jax.tree.leaves(host_batch))
      host_steps += count
      if count not in active:
        active[count] = jax.device_put(np.int32(count), sharding_lib.replicated(mesh))
      state, metrics = steps_fn(state, tables, batch, step_rng, active[count])
      interval_examples += count * jax.tree.leaves(batch)[0].shape[int(steps_per_call > 1)]
      pending.append((step + 1, count, metrics))
      step += count
      pbar.update(count)
      last = step == num_steps
      record = {}

      if step % log_every == 0 or last:
        values = check_pending()
        elapsed = time.perf_counter() - interval_start
        record.update({f"train/{k}": float(np.mean([v[k] for v in values])) for k in values[-1]})
        record["train/examples_per_sec"] = interval_examples / max(elapsed, 1e-9)
        record["train/steps_per_sec"] = len(values) / max(elapsed, 1e-9)
        record["train/host_ms_per_step"] = 1e3 * host_seconds / max(host_steps, 1)
        record["train/h2d_bytes_per_step"] = host_bytes / max(host_steps, 1)
        pbar.set_postfix(loss=f"{record['train/loss']:.4g}",
                         ex_per_s=f"{record['train/examples_per_sec']:.0f}")
        interval_start, interval_examples = time.perf_counter(), 0
        host_seconds, host_bytes, host_steps = 0.0, 0, 0

      if eval_fn is not None and (step % eval_every == 0 or last):
        record.update(_scalar_dict(eval_fn(state.params, step), "eval/", "eval_fn"))

      if record:
        writer.write(step, record)

      if step % checkpoint_every == 0 or last:
        check_pending()  # never checkpoint a state that has gone non-finite
        # The iterator state is written synchronously (grain's handler is not async), so it is
        # the position after exactly `step` batches even though the arrays are written async.
        with _checkpoint_disk_guard(manager.directory, step):
          manager.save(step, args=ocp.args.Composite(
              state=ocp.args.StandardSave(state), data=grain.checkpoint.CheckpointSave(data_iter)))
        writer.sync()
    _FITS.append({"description": description, "train_programs": _COUNTS["train_programs"] - programs_at_start})
    return state, writer.history
  finally:
    # Finish writing the checkpoints already started, whatever stopped the loop.
    with _checkpoint_disk_guard(manager.directory):
      manager.wait_until_finished()
    manager.close()
    if pbar is not None:
      pbar.close()
    if writer is not None:
      writer.close()
    release_host_memory()


def release_host_memory() -> bool:
  """Hands the host heap's free pages back to the system (glibc's `malloc_trim`; True where it ran). A train step's
  host buffers, freed when the loop ends, otherwise stay in glibc's arenas: on CPU each paper-size VidCLIP training
  left 0.5-1.2 GB resident behind it (VideoComp trains eight in one run: 9.3 GB resident by the fifth), none of it
  live (BENCHMARKS.md, "Small corpora"). A no-op without glibc (macOS, musl)."""
  try:
    trim = ctypes.CDLL("libc.so.6").malloc_trim
  except (OSError, AttributeError):
    return False
  trim(0)
  return True


def fit_epochs(*, name: str, init_fn: Callable[[jax.Array], Any], loss_fn: LossFn, num_examples: int,
               batch_fn: Callable[[np.ndarray], Any], tcfg, seed: int, workdir: str | Path,
               mesh: jax.sharding.Mesh | None = None, optimizer: optax.GradientTransformation | None = None,
               description: str = "", batch_key: str = "train.batch_size",
               gather: pipeline.Gather | None = None) -> TrainState:
  """Trains `tcfg.epochs` epochs of `num_examples // tcfg.batch_size` steps with `fit`.

  Batches come from `pipeline.make_index_batches(num_examples, batch_size, seed, batch_fn)`; the
  optimizer defaults to AdamW with `tcfg.lr` and `tcfg.weight_decay`. Resumes from `workdir`.
  `tcfg` also gives `checkpoint_every`, `log_every` and `progress`; `batch_key` is where the config sets the batch size (what a too-small training set's error names). With `gather`,
  `batch_fn` returns row indices for its fields, gathered on the device (`fit`).

  Returns:
    the final `TrainState` (device arrays; fetch what you need, e.g. `jax.device_get(state.params)`).
  """
  steps_per_epoch = num_examples // tcfg.batch_size
  if steps_per_epoch < 1:
    raise ValueError(f"{name}: the training set has {num_examples} examples, fewer than "
                     f"{batch_key}={tcfg.batch_size}")
  num_steps = steps_per_epoch * tcfg.epochs
  state, _ = fit(
      init_fn=init_fn, loss_fn=loss_fn,
      optimizer=optimizer if optimizer is not None else adamw(tcfg.lr, tcfg.weight_decay),
      dataset=pipeline.loader(pipeline.make_index_batches(num_examples, tcfg.batch_size, seed,
                                                          gather.host(batch_fn) if gather is not None else batch_fn)),
      num_steps=num_steps, workdir=workdir, seed=seed, mesh=mesh,
      checkpoint_every=tcfg.checkpoint_every, log_every=min(tcfg.log_every, num_steps),
      progress=tcfg.progress, description=description or name, gather=gather)
  return state


def load_params(workdir: str | Path) -> Any:
  """The params of the latest checkpoint in `<workdir>/checkpoints` (host arrays), without the optimizer
  state or the data iterator: how a finished run's model is read back for evaluation."""
  directory = (Path(workdir) / "checkpoints").absolute()
  if not directory.is_dir():
    raise FileNotFoundError(f"{workdir}: no checkpoints/ (the model was never trained there)")
  with ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(read_only=True)) as manager:
    step = manager.latest_step()
    if step is None:
      raise FileNotFoundError(f"{directory}: no finished checkpoint")
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
  return jax.device_get(restored.state["params"])
