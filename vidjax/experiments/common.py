"""What every experiment shares: config loading and checks, the workdir, shared files, results and plots.

An experiment module (`vidjax/experiments/<kind>.py`) reads as validate -> data -> fit -> evaluate -> write; it
calls

  @precision_policy                      on `run`: the run traces at `config.precision.eval`; its training
  precision(config, "train" | "extract")   and extraction calls run inside these contexts (README "Precision")
  start_run(config, workdir, validate)   one clear error per bad config value (the `check_*` helpers of
                                         `vidjax.defaults.common`), then the workdir, refusing one made by a
                                         different config (`RESUMABLE` says what may change between runs)
  check_data_source(config, has_data)    the :world variant and a user's data exclude each other
  on_writer(name, write)                 multi-host: process 0 writes the files every process needs, all wait
  write_results(config, workdir, ...)    results.json (process 0) + printed tables
  pyplot() / save_figure(fig, path)      the one matplotlib setup (Agg, atomic PNG)

`results.json` always holds `{"experiment", "dataset", "synthetic", "config", "metrics": {method: {metric:
value}}}`, recalls and accuracies in percent; synthetic results say so in the file, in the printed tables and
in plot titles. The config carries the precision policy; on the real path `provenance.precision` also records it
with the platform and device it ran on.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp

from vidjax import io
from vidjax.sharding import barrier, is_writer, on_writer  # noqa: F401  (the experiments' multi-host helpers)
from vidjax.defaults.common import (bad_value, check_choice, check_fraction, check_index, check_positive,  # noqa: F401
                                    check_positive_int, check_precision, get_key)
from vidjax.ops import is_positive_int  # noqa: F401  (re-exported for the experiments' checks)
from vidjax.methods.real import (SKIP_FILE, WORLD_PATH, check_store, present_videos,  # noqa: F401  (re-exported)
                                 real_path, store_benchmark)

REQUIRED_KEYS = ("experiment", "dataset", "synthetic", "path", "skipped_videos", "config", "metrics")
# Keys that may change between runs in one workdir, by one rule: nothing written there depends on them.
# Logging anywhere (a section's progress / log_every / checkpoint_every) and evaluation (`eval.*`: a finished
# run re-evaluates without retraining); an experiment adds what else its own files do not depend on.
RESUMABLE_LEAVES = ("progress", "log_every", "checkpoint_every")
RESUMABLE_SECTIONS = ("eval",)
RESUMABLE_KEYS = ("precision.eval",)  # evaluation's precision, by the same rule as `eval.*`


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


def compute_dtype(config, key: str) -> Any:
  """The jnp dtype named by a 'float32' | 'bfloat16' config field."""
  check_choice(config, key, ("float32", "bfloat16"))
  return jnp.dtype(get_key(config, key))


# ----------------------------------------------------------------------------------------------
# Precision: `config.precision` (vidjax.defaults.common.precision_section) applied where each phase is traced.


def precision_applies() -> bool:
  """Whether a matmul precision setting can change what this backend computes: not on a CPU, where XLA computes
  every float32 matmul in full float32 whatever is asked (bench/precision.py: bit-identical at all three). There
  `precision` enters no context: a context would only make every jitted and eager program compile once more per
  setting (the CAST experiment's tests: 20% more CPU time), for the same numbers."""
  return jax.default_backend() != "cpu"


def precision(config, phase: str) -> contextlib.AbstractContextManager:
  """The context every computation of `phase` ("train" | "extract" | "eval") is traced in:
  `jax.default_matmul_precision(config.precision.<phase>)` where the setting can matter (`precision_applies`).

  A jitted function's cache key includes this setting, so a function traced in training and called again in
  evaluation is traced again at evaluation's precision; an explicit `precision=` on an op (e.g. the dense index's
  float32 search) still wins. A bad value is one clear error naming the key, before anything is traced."""
  check_precision(config)
  if phase not in config.precision:
    raise ValueError(f"unknown precision phase {phase!r} (known: {', '.join(config.precision)})")
  if not precision_applies():
    return contextlib.nullcontext()
  return jax.default_matmul_precision(config.precision[phase])


def precision_policy(run: Callable[..., Any]) -> Callable[..., Any]:
  """Decorates an experiment's `run(config, workdir)`: all of it runs at `config.precision.eval`, and the run
  wraps its training calls in `precision(config, "train")` and its backbone extraction in
  `precision(config, "extract")` (inner contexts win). So notebooks and tests that call `run` directly get the
  same precision as `python -m vidjax.main`."""
  @functools.wraps(run)
  def run_at_policy(config, workdir, *args, **kwargs):
    with precision(config, "eval"):
      return run(config, workdir, *args, **kwargs)
  run_at_policy.precision_policy = True  # what tests/test_precision.py checks of every experiment
  return run_at_policy


def precision_record(config) -> dict[str, str]:
  """What results.json's `provenance.precision` says ran: each phase's setting, and the platform and device
  kind it ran on (on "cpu" every setting is full float32)."""
  check_precision(config)
  return {**{k: str(v) for k, v in config.precision.items()}, "platform": jax.default_backend(),
          "device_kind": jax.devices()[0].device_kind}


# ----------------------------------------------------------------------------------------------
# Workdir and processes.


def _flat(d: Mapping, prefix: str = "") -> dict[str, Any]:
  out = {}
  for k, v in d.items():
    out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, Mapping) else {f"{prefix}{k}": v})
  return out


def start_run(config, workdir: str | Path, validate, resumable: Iterable[str] = ()) -> Path:
  """What every experiment's `run` does first: `validate(config)` (one clear error per bad value, before
  any work), create the workdir and refuse one made by a different config (`check_workdir`).

  `resumable`: the experiment's own keys, besides the `RESUMABLE_*` rule, that its files do not depend on."""
  if isinstance(config.get("seed"), bool) or not isinstance(config.get("seed"), int) or config.seed < 0:
    bad_value("seed", config.get("seed"), "a non-negative integer (it seeds every random choice of the run)")
  check_precision(config)
  validate(config)
  workdir = Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  check_workdir(config, workdir, resumable)
  return workdir


def is_resumable(key: str, extra: Iterable[str] = ()) -> bool:
  """Whether the dotted config `key` may change between runs in one workdir (see `RESUMABLE_LEAVES`)."""
  parts = key.split(".")
  return (parts[-1] in RESUMABLE_LEAVES or parts[0] in RESUMABLE_SECTIONS
          or any(key == e or key.startswith(e + ".") for e in (*RESUMABLE_KEYS, *extra)))


def check_workdir(config, workdir: str | Path, resumable: Iterable[str] = ()) -> None:
  """Refuses to reuse a workdir made by a different config: its files and checkpoints would be stale.

  Args:
    config: the run's config; written to `<workdir>/config.json` on first use.
    workdir: the run directory.
    resumable: the experiment's own keys that may change between runs besides `is_resumable`'s rule.
  """
  path = Path(workdir) / "config.json"
  current = json.loads(config.to_json_best_effort())
  if path.exists():
    saved = io.read_json(path)
    old, new = _flat(saved), _flat(current)
    # A workdir made before the precision policy ran at JAX's default precision; it resumes under the policy.
    predates = () if "precision" in saved else ("precision",)
    changed = sorted(k for k in old.keys() | new.keys()
                     if old.get(k) != new.get(k) and not is_resumable(k, (*resumable, *predates)))
    if changed:
      raise ValueError(f"workdir {workdir} was made by a different config (changed: {', '.join(changed[:8])}); "
                       "use a new --workdir (its features, benchmark files and checkpoints belong to that config)")
  if is_writer():
    io.atomic_write_json(path, current)


def check_data_source(config, has_data: bool, where: str) -> None:
  """The `world` variant (a config with a `world` section) runs the embedded SYNTHETIC world; without it the
  run needs a user's data. One clear error for either mismatch; `where` names the config file."""
  if "world" in config and has_data:
    bad_value("data.features", config.data.features, f"empty with the :world variant of {where}, which runs the "
              "embedded SYNTHETIC world; drop :world to run the paper's settings on your data")
  if "world" not in config and not has_data:
    bad_value("data.features", config.data.features, f"a feature store (the paper's settings on your data), or run "
              f"the embedded SYNTHETIC world with its own small model: --config {where}:world")


# ----------------------------------------------------------------------------------------------
# Results and plots.


def with_precision_record(config, keys: Mapping) -> dict:
  """results.json `keys` whose real-path `provenance` (when there is one) also records `precision_record`."""
  keys = dict(keys)
  if isinstance(keys.get("provenance"), Mapping):
    keys["provenance"] = {**keys["provenance"], "precision": precision_record(config)}
  return keys


def results_dict(config, *, dataset: str, synthetic: bool, metrics: Mapping, **extra) -> dict:
  """The results contract: {"experiment", "dataset", "synthetic", "config", "metrics", ...extra}; a real-path
  `provenance` also records the precision the run used (`precision_record`)."""
  extra = with_precision_record(config, extra)
  return {"experiment": config.get("name") or config.experiment, "dataset": dataset, "synthetic": bool(synthetic), "metrics": dict(metrics),
          **extra, "config": json.loads(config.to_json_best_effort())}


def write_results(workdir: str | Path, results: Mapping, tables: Sequence[str] = ()) -> Path | None:
  """Checks the contract's keys, prints `tables` and (process 0) writes `<workdir>/results.json` atomically."""
  missing = [k for k in REQUIRED_KEYS if k not in results]
  if missing:
    raise ValueError(f"results lack the required keys {missing}")
  for table in tables:
    print(table, end="\n\n", flush=True)
  if not is_writer():
    return None
  path = io.atomic_write_json(Path(workdir) / "results.json", dict(results))
  print(f"results written to {path}" + ("  [SYNTHETIC]" if results["synthetic"] else ""), flush=True)
  return path


def run_seeds(run, config, workdir: str | Path) -> dict:
  """`config.seeds` (e.g. the `:seeds3` variant): `run` once per seed into `<workdir>/seed_<s>/`, then one
  results.json of the same shape whose numbers are the means over seeds, with a `"std"` tree of the same shape
  (population std, as "± std" in the papers' tables), `"seeds"` and each seed's workdir. A finished seed resumes
  like any run; non-numeric values are the first seed's."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  seeds = [int(s) for s in config.seeds]
  if len(seeds) < 2 or len(set(seeds)) != len(seeds) or min(seeds) < 0:
    bad_value("seeds", tuple(config.seeds), "two or more distinct non-negative integers (or drop the key)")
  workdir = Path(workdir)
  per_seed = []
  for seed in seeds:
    c = config.copy_and_resolve_references()
    with c.unlocked():
      del c["seeds"]
      c.seed = seed
    print(f"seeds {seeds}: running seed {seed} in {workdir / f'seed_{seed}'}", flush=True)
    per_seed.append(run(c, workdir / f"seed_{seed}"))

  def numeric(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)

  def merge(values, stat):
    first = values[0]
    if isinstance(first, Mapping):
      keys = [k for k in first if all(isinstance(v, Mapping) and k in v for v in values)]
      return {k: merge([v[k] for v in values], stat) for k in keys}
    if all(numeric(v) for v in values):
      return round(float(stat(np.asarray(values, np.float64))), 4)
    return first if stat is np.mean else None

  def prune(tree):  # the std tree keeps numbers only
    if isinstance(tree, Mapping):
      kept = {k: prune(v) for k, v in tree.items()}
      return {k: v for k, v in kept.items() if v not in (None, {})}
    return tree

  results = merge(per_seed, np.mean)
  results.update(seeds=seeds, seed_workdirs=[str(workdir / f"seed_{s}") for s in seeds],
                 std=prune({k: merge([r[k] for r in per_seed], np.std) for k in ("metrics", "ablations")
                            if all(k in r for r in per_seed)}),
                 synthetic=any(r["synthetic"] for r in per_seed), config=json.loads(config.to_json_best_effort()))
  table = [f"{'SYNTHETIC ' if results['synthetic'] else ''}mean ± std over seeds {seeds} ({config.name}):"]
  flat_mean, flat_std = _flat(results["metrics"]), _flat(results["std"].get("metrics", {}))
  table += [f"  {k}: {v:.2f} ± {flat_std[k]:.2f}" for k, v in flat_mean.items() if k in flat_std]
  write_results(workdir, results, ["\n".join(table)])
  return results


def read_results(workdir: str | Path) -> dict:
  """A finished run's results.json (what `evaluate_all` reads besides its checkpoints)."""
  path = Path(workdir) / "results.json"
  if not path.is_file():
    raise FileNotFoundError(f"{workdir}: no results.json; not a finished vidjax run (run it to the end first)")
  return io.read_json(path, "results file")


def pyplot():
  """matplotlib.pyplot on the file-only Agg backend (the one matplotlib setup of every plot)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def save_figure(fig, path: str | Path) -> Path | None:
  """Writes a matplotlib figure as PNG atomically (process 0) and closes it."""
  plt = pyplot()
  fig.tight_layout()
  path = Path(path)
  if is_writer():
    tmp = path.with_name("." + path.name + ".tmp.png")
    fig.savefig(tmp)
    tmp.replace(path)
  plt.close(fig)
  return path
