"""What every experiment shares: config loading and checks, the workdir, training by epochs, results.

An experiment module (`vidjax/experiments/<kind>.py`) holds method logic only; it calls

  validate with `check(...)` helpers      one clear error per bad config value, before any work
  check_workdir(config, workdir)          refuses a workdir made by a different config
  is_writer() / barrier(name)             multi-host: process 0 writes shared files, the others wait
  train_epochs(...)                       epochs -> steps, then the one train loop (`vidjax.train.fit`)
  write_results(workdir, results, tables) results.json + printed tables

`results.json` always holds at least
`{"experiment", "dataset", "synthetic", "metrics": {method: {metric: value}}}`; synthetic results
say so in the file, in the printed tables and in plot titles.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidjax import io
from vidjax import train
from vidjax.data import pipeline
from vidjax.ops import is_positive_int

REQUIRED_KEYS = ("experiment", "dataset", "synthetic", "metrics")


def load_config(spec: str | Path):
  """Loads `"configs/cast_coin.py[:arg]"` as `--config` does, locked (for notebooks and tests).

  The file's `get_config(arg)` builds the `ConfigDict`; locking makes a mistyped field an error.
  """
  path, _, arg = str(spec).partition(":")
  if not Path(path).is_file():
    raise FileNotFoundError(f"config file not found: {path}")
  module_spec = importlib.util.spec_from_file_location(f"vidjax_config_{Path(path).stem}", path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  config = module.get_config(arg or None)
  config.lock()
  return config


# ----------------------------------------------------------------------------------------------
# Config checks.


def bad_value(key: str, value: Any, expected: str) -> None:
  """Raises the one clear error for a bad config value."""
  raise ValueError(f"config.{key}={value!r} is invalid: expected {expected}")


def get_key(config, key: str) -> Any:
  """`config['a.b.c']` for a dotted key."""
  node = config
  for part in key.split("."):
    node = node[part]
  return node


def check_choice(config, key: str, choices: Sequence[Any]) -> None:
  if get_key(config, key) not in choices:
    bad_value(key, get_key(config, key), f"one of {tuple(choices)}")


def check_positive_int(config, keys: Iterable[str]) -> None:
  for key in keys:
    value = get_key(config, key)
    if not is_positive_int(value):
      bad_value(key, value, "a positive integer")


def check_positive(config, keys: Iterable[str]) -> None:
  for key in keys:
    value = get_key(config, key)
    if not (isinstance(value, (int, float, np.number)) and value > 0):
      bad_value(key, value, "a positive number")


def check_fraction(config, key: str) -> None:
  value = get_key(config, key)
  if not (isinstance(value, (int, float)) and 0.0 < value < 1.0):
    bad_value(key, value, "a fraction in (0, 1)")


def compute_dtype(config, key: str) -> Any:
  """The jnp dtype named by a 'float32' | 'bfloat16' config field."""
  check_choice(config, key, ("float32", "bfloat16"))
  return jnp.dtype(get_key(config, key))


# ----------------------------------------------------------------------------------------------
# Workdir and processes.


def is_writer() -> bool:
  """Whether this process writes shared files (process 0; the others wait at a `barrier`)."""
  return jax.process_index() == 0


def barrier(name: str) -> None:
  """Waits for every process (no-op on one host)."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)


def _flat(d: Mapping, prefix: str = "") -> dict[str, Any]:
  out = {}
  for k, v in d.items():
    out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, Mapping) else {f"{prefix}{k}": v})
  return out


def start_run(config, workdir: str | Path, validate, resumable: Iterable[str] = ()) -> Path:
  """What every experiment's `run` does first: `validate(config)` (one clear error per bad value, before
  any work), create the workdir and refuse one made by a different config (`check_workdir`)."""
  validate(config)
  workdir = Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  check_workdir(config, workdir, resumable)
  return workdir


def check_workdir(config, workdir: str | Path, resumable: Iterable[str] = ()) -> None:
  """Refuses to reuse a workdir made by a different config: its files and checkpoints would be stale.

  Args:
    config: the run's config; written to `<workdir>/config.json` on first use.
    workdir: the run directory.
    resumable: dotted keys that may change between runs in one workdir (logging, longer training).
  """
  path = Path(workdir) / "config.json"
  current = json.loads(config.to_json_best_effort())
  if path.exists():
    old, new = _flat(io.read_json(path)), _flat(current)
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k) and k not in set(resumable))
    if changed:
      raise ValueError(f"workdir {workdir} was made by a different config (changed: {', '.join(changed[:8])}); "
                       "use a new --workdir (its features, benchmark files and checkpoints belong to that config)")
  if is_writer():
    io.atomic_write_json(path, current)


# ----------------------------------------------------------------------------------------------
# Training.


def train_epochs(*, name: str, init_fn: Callable, loss_fn: Callable, num_examples: int,
                 batch_fn: Callable[[np.ndarray], Any], tcfg, seed: int, workdir: str | Path,
                 mesh=None, optimizer=None, stateful: bool = False, description: str = "") -> train.TrainState:
  """Trains `tcfg.epochs` epochs of `num_examples // tcfg.batch_size` steps with the one train loop.

  Batches come from `pipeline.make_index_batches(num_examples, batch_size, seed, batch_fn)`; the
  optimizer defaults to AdamW with `tcfg.lr` and `tcfg.weight_decay`. Resumes from `workdir`.
  `tcfg` also gives `checkpoint_every`, `log_every` and `progress`.

  Returns:
    the final `TrainState` (device arrays; fetch what you need, e.g. `jax.device_get(state.params)`).
  """
  steps_per_epoch = num_examples // tcfg.batch_size
  if steps_per_epoch < 1:
    raise ValueError(f"{name}: the training set has {num_examples} examples, fewer than "
                     f"train.batch_size={tcfg.batch_size}")
  num_steps = steps_per_epoch * tcfg.epochs
  state, _ = train.fit(
      init_fn=init_fn, loss_fn=loss_fn,
      optimizer=optimizer if optimizer is not None else train.adamw(tcfg.lr, tcfg.weight_decay),
      dataset=pipeline.loader(pipeline.make_index_batches(num_examples, tcfg.batch_size, seed, batch_fn)),
      num_steps=num_steps, workdir=workdir, seed=seed, mesh=mesh,
      checkpoint_every=tcfg.checkpoint_every, log_every=min(tcfg.log_every, num_steps),
      progress=tcfg.progress, description=description or name, stateful=stateful)
  return state


# ----------------------------------------------------------------------------------------------
# Results.


def write_results(workdir: str | Path, results: Mapping, tables: Sequence[str] = ()) -> Path:
  """Checks the common keys, prints `tables` and writes `<workdir>/results.json` atomically."""
  missing = [k for k in REQUIRED_KEYS if k not in results]
  if missing:
    raise ValueError(f"results lack the required keys {missing}")
  for table in tables:
    print(table, end="\n\n", flush=True)
  path = io.atomic_write_json(Path(workdir) / "results.json", dict(results))
  print(f"results written to {path}" + ("  [SYNTHETIC]" if results["synthetic"] else ""), flush=True)
  return path


def plot_context_sweep(sweep: Mapping[int, Mapping[str, float]], path: str | Path, title: str,
                       synthetic: bool) -> Path:
  """Figure 6: Acc, State Acc and Ident Acc against the context length L, saved as PNG."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  lengths = sorted(sweep)
  fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
  for key, label in (("acc", "Acc."), ("state_acc", "State Acc."), ("ident_acc", "Ident. Acc.")):
    ax.plot(lengths, [sweep[L][key] for L in lengths], marker="o", label=label)
  ax.set_xlabel("context length L")
  ax.set_ylabel("%")
  ax.set_xticks(lengths)
  ax.grid(alpha=0.3)
  ax.legend()
  ax.set_title(("SYNTHETIC: " if synthetic else "") + f"CAST vs context length, {title}", fontsize=9)
  return save_figure(fig, path)


def save_figure(fig, path: str | Path) -> Path:
  """Writes a matplotlib figure as PNG atomically and closes it."""
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig.tight_layout()
  path = Path(path)
  tmp = path.with_name("." + path.name + ".tmp.png")
  fig.savefig(tmp)
  plt.close(fig)
  tmp.replace(path)
  return path


def plot_top1_breakdown(breakdown: Mapping[str, Mapping[str, float]], path: str | Path, title: str,
                        synthetic: bool) -> Path:
  """CAST Figure 5: per method, the % of queries whose top-1 is exact / same video / another video."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  methods = list(breakdown)
  parts = (("top1_exact", "Exact match", "tab:green"),
           ("top1_identity_consistent", "Identity consistent, state misaligned", "tab:blue"),
           ("top1_identity_inconsistent", "Identity inconsistent", "tab:gray"))
  fig, ax = plt.subplots(figsize=(6.5, 3.5), dpi=120)
  left = np.zeros(len(methods))
  for key, label, color in parts:
    values = np.array([breakdown[m][key] for m in methods])
    ax.barh(methods, values, left=left, color=color, label=label)
    left += values
  ax.set_xlim(0, 100)
  ax.set_xlabel("% of queries (top-1 choice)")
  ax.invert_yaxis()
  ax.legend(fontsize=7, loc="lower right")
  ax.set_title(("SYNTHETIC: " if synthetic else "") + f"Top-1 breakdown (CAST Fig. 5 shape), {title}", fontsize=9)
  return save_figure(fig, path)
