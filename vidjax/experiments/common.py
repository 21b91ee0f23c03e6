"""What every experiment shares: config loading and checks, the workdir, shared files, results and plots.

An experiment module (`vidjax/experiments/<kind>.py`) reads as validate -> data -> fit -> evaluate -> write; it
calls

  @precision_policy                      on `run`: the run traces at `config.precision.eval`; its training
  precision(config, "train" | "extract")   and extraction calls run inside these contexts (docs/scaling.md)
  start_run(config, workdir, validate)   one clear error per bad config value (the `check_*` helpers of
                                         `vidjax.defaults.common`) or missing input, then the workdir, refusing
                                         one made by a different config (`RESUMABLE` says what may change between
                                         runs; `record_config` says when a failed run's record binds)
  check_data_source(config, has_data)    the :world variant and a user's data exclude each other
  world_data(config, workdir, write)     a world writes a user's files once; the run reads them as a user's
  recorded_world_data(config, workdir)   a finished world run's config with the files it read (for suites)
  clip_to_data(config, limits)           (`vidjax.defaults.common`) once the data are known: a batch size or budget
                                         larger than they hold is clipped (one printed line, results.json's
                                         `clipped`: {key: [asked, used]}), or refused with `config.strict`
  write_results(config, workdir, ...)    results.json (process 0) + printed tables
  pyplot() / save_figure(fig, path)      the one matplotlib setup (Agg, atomic PNG)

`results.json` always holds `{"experiment", "dataset", "synthetic", "config", "variants", "metrics": {method:
{metric: value}}}` (and, through `results_dict`, `clipped`; `variants`: the config file's variants the run was
started with), recalls and accuracies in percent; synthetic results say so
in the file, in the printed tables and in plot titles. The config carries the precision policy; on the real path `provenance.precision` also records it
with the platform and device it ran on.
"""
from __future__ import annotations

import contextlib
import datetime
import functools
import importlib.util
import json
import os
from pathlib import Path
import socket
from typing import Any, Callable, Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp

from vidjax import io, train
from vidjax.sharding import is_writer, on_writer
from vidjax.defaults.common import (DataFits, bad_value, check_choice, check_heads, check_precision, check_ranges,
                                    MAX_SEED, check_seed, check_strict, checking, get_key, with_values)
from vidjax.data.provenance import PREPARE

REQUIRED_KEYS = ("experiment", "dataset", "synthetic", "path", "skipped_videos", "config", "metrics")
# Keys that may change between runs in one workdir, by one rule: nothing written there depends on them.
# Logging anywhere (a section's progress / log_every / checkpoint_every) and evaluation (`eval.*`: a finished
# run re-evaluates without retraining); an experiment adds what else its own files do not depend on.
RESUMABLE_LEAVES = ("progress", "log_every", "checkpoint_every")
RESUMABLE_SECTIONS = ("eval",)
RESUMABLE_KEYS = ("precision.eval",  # evaluation's precision, by the same rule as `eval.*`
                  "strict",  # refuses or clips (`clip_to_data`): the files depend on the values used, not on it
                  "variants",  # the names (`apply_variants`): the values they set are compared one by one
                  "compilation_cache")  # where compiled programs are kept, not what they compute


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
  same precision as `python -m vidjax.main`. When the run returns (or fails) the workdir locks it took
  (`lock_workdir`, through `start_run`) are released. The run uses the persistent compilation cache its
  `compilation_cache` asks for (`train.use_compilation_cache`) and counts the programs it compiles from its start
  (`train.counting_programs`: results.json's `programs`)."""
  @functools.wraps(run)
  def run_at_policy(config, workdir, *args, **kwargs):
    held = set(_LOCKS)  # a run nested in another (the stack's CAST half) leaves the outer run's lock alone
    train.use_compilation_cache(config.get("compilation_cache", "auto"))
    try:
      with precision(config, "eval"), train.counting_programs():
        return run(config, workdir, *args, **kwargs)
    finally:
      release_locks(held)
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
  """What every experiment's `run` does first, in this order, so that a run refused for a bad value or a missing
  input writes nothing (and in particular records no config that would refuse the corrected rerun):

    1. the config: `seed`, `precision`, every rate / probability / fraction in its range and attention heads that
       divide their width (`check_ranges`, `check_heads`), then the experiment's own `validate(config)`;
    2. the inputs: every file or folder a `data.*` key names exists (`check_inputs`), and a feature store holds
       every kind the run reads (`check_store_kinds`);
    3. the workdir: created (a file of that name is one clear error), locked for this run (`lock_workdir`: a
       second run there fails at once, naming the first's pid), and refused when it holds the files of a different
       config (`record_config`).

  `resumable`: the experiment's own keys, besides the `RESUMABLE_*` rule, that its files do not depend on."""
  if "seed" not in config:
    bad_value("seed", None, "an integer in [0, 2**32 - 1] (it seeds every random choice of the run)")
  check_seed(config)
  check_variants(config)
  check_precision(config)
  check_strict(config)
  check_ranges(config)
  check_heads(config)
  validate(config)
  check_inputs(config)
  check_store_kinds(config)
  workdir = make_workdir(workdir)
  lock_workdir(config, workdir, resumable)
  record_config(config, workdir, resumable)
  return workdir


def check_variants(config) -> None:
  """`config.variants` (what `apply_variants` recorded), where a config has it, is a tuple of names."""
  value = config.get("variants", ())
  if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) and v for v in value):
    bad_value("variants", value, "the tuple of variant names the config file applied (set by the file: give "
              "variants after its name, --config FILE:a,b)")


# ----------------------------------------------------------------------------------------------
# One run per workdir: an exclusive lock on `<workdir>/LOCK_FILE` for as long as the run lives.

LOCK_FILE = ".vidjax.lock"  # holds the holder's pid, host and start time (JSON), while the lock is held
_LOCKS: dict[str, int] = {}  # resolved workdir -> this process's open, locked LOCK_FILE


class WorkdirBusyError(OSError):
  """Another live run holds the workdir's lock (`lock_workdir`)."""


def _holder(path: Path) -> str:
  """What the lock file says of the run holding it: "pid N on HOST since T" (or "pid unknown")."""
  try:
    info = json.loads(path.read_text())
    return f"pid {info['pid']} on {info['host']} since {info['since']}"
  except (OSError, ValueError, KeyError, TypeError):
    return "pid unknown: it has just started"


def lock_workdir(config, workdir: str | Path, resumable: Iterable[str] = ()) -> None:
  """Takes an exclusive `fcntl.flock` on `<workdir>/.vidjax.lock` for this run (process 0 of a multi-process run;
  the others write nothing there). The kernel releases it when the process dies, even by SIGKILL, so a stale file
  never blocks; `precision_policy` releases it (and removes the file) when the run returns or fails.

  A second live run in the same workdir fails at once, naming the holder's pid and host: with a different config
  it says what changed (its files would be another config's); with the same config it says so (the rerun would
  resume or re-evaluate the same files: wait for the first to finish). Nobody waits: a queued run would start on
  files another process is writing. The same process may take it again (a run nested in another: a no-op)."""
  import fcntl  # pylint: disable=g-import-not-at-top  (POSIX)
  if not is_writer():
    return
  key = str(Path(workdir).resolve())
  if key in _LOCKS:
    return
  path = Path(key) / LOCK_FILE
  while True:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      os.close(fd)
      raise WorkdirBusyError(f"workdir {workdir} is in use by another run ({_holder(path)})"
                             + _same(config, key, resumable)) from None
    try:  # the holder before us may have removed the file after we opened it: lock the one at the path
      same = os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
      same = False
    if same:
      break
    os.close(fd)
  os.ftruncate(fd, 0)
  os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                           "since": datetime.datetime.now().isoformat(timespec="seconds")}).encode())
  _LOCKS[key] = fd


def _same(config, key: str, resumable: Iterable[str]) -> str:
  """The end of the busy error: whether the holder runs this config (by its pending or final config record)."""
  workdir = Path(key)
  record = next((workdir / r for r in (PENDING_RECORD, CONFIG_RECORD) if (workdir / r).is_file()), None)
  if record is None:
    return "; wait for it to finish, or use another --workdir"
  try:
    _compare(io.read_json(record, "workdir config record"), json.loads(config.to_json_best_effort()), workdir,
             resumable)
  except ValueError as e:
    changed = str(e).partition("(changed: ")[2].partition(")")[0]
    return f" with a different config (changed: {changed}); use another --workdir"
  return "; it runs this same config: wait for it to finish (a rerun then resumes or re-evaluates it)"


def release_locks(held: Iterable[str] = ()) -> None:
  """Releases this process's workdir locks except those of `held` (the workdirs locked before a run began), each
  file removed first, then closed: a run that opened it meanwhile finds it gone and locks a new one
  (`lock_workdir`)."""
  for key in set(_LOCKS) - set(held):
    fd = _LOCKS.pop(key)
    try:
      os.unlink(Path(key) / LOCK_FILE)
    except FileNotFoundError:
      pass
    os.close(fd)


def make_workdir(workdir: str | Path) -> Path:
  """Creates `workdir` (and its parents); a file in the way is one clear error naming it."""
  workdir = Path(workdir)
  for path in (workdir, *workdir.parents):
    if path.exists() and not path.is_dir():
      raise FileExistsError(f"--workdir {workdir}: {path} is a file, not a folder; name a new or existing folder")
  try:
    workdir.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise type(e)(f"--workdir {workdir}: cannot create it: {e.strerror or e}") from e
  return workdir


# `data.*` keys that name a file or folder the run reads (comma-separated lists where the readers take several).
INPUT_KEYS = ("annotations", "train_annotations", "video_list", "train_video_list", "features", "metadata",
              "train_metadata", "available_videos", "captions", "release_eval", "release_train", "videos", "tokenizer",
              "import_features", "import_frames")
LIST_KEYS = ("annotations", "train_annotations")
# What each names: a folder (a store, a release's feature folders) or a file (an annotation or id list, a tokenizer);
# the others (`videos`: a folder, a video or a clip list) may be either. `annotations` is a file but for CrossTask,
# whose release is a folder.
FOLDER_KEYS = ("features", "import_features", "import_frames")
FILE_KEYS = ("annotations", "train_annotations", "video_list", "train_video_list", "metadata", "train_metadata",
             "available_videos", "captions", "release_eval", "release_train", "tokenizer")


def check_inputs(config) -> None:
  """Every file or folder a `data.*` key of `INPUT_KEYS` names exists and is a file or a folder as the key says
  (`FOLDER_KEYS`, `FILE_KEYS`; a remote `gs://...` path is left to its reader): one error naming the key and the
  path, before the workdir is touched (a folder given as a file used to fail deep in a reader, after work)."""
  data = config.get("data")
  if not hasattr(data, "get"):  # a config without a data section
    return
  crosstask = "crosstask" in (config.get("dataset"), data.get("format"))
  for key in INPUT_KEYS:
    value = data.get(key)
    if not isinstance(value, str) or not value:
      continue
    for path in ([p.strip() for p in value.split(",") if p.strip()] if key in LIST_KEYS else [value]):
      if "://" in path:
        continue
      if not Path(path).exists():
        raise FileNotFoundError(f"config.data.{key}: no such file or folder: {path}")
      if key in FOLDER_KEYS and not Path(path).is_dir():
        raise NotADirectoryError(f"config.data.{key}: {path} is a file; it names a folder")
      if key in FILE_KEYS and Path(path).is_dir() and not (key == "annotations" and crosstask):
        raise IsADirectoryError(f"config.data.{key}: {path} is a folder; it names a file")
  for key, value in _config_leaves(config):  # model files and folders in any section, where they exist
    name = key.rpartition(".")[2]
    if not isinstance(value, str) or not value or "://" in value or not Path(value).exists():
      continue
    if name in MODEL_FILES and Path(value).is_dir():
      raise IsADirectoryError(f"config.{key}: {value} is a folder; it names a file")
    if name in MODEL_FOLDERS and not Path(value).is_dir():
      raise NotADirectoryError(f"config.{key}: {value} is a file; it names a folder")


# Leaf names, in any section, of a model's files (a VideoPrism / LvT .npz, a SentencePiece model, a word-group
# file) and folders (all-MiniLM-L6-v2's, a converted orbax checkpoint); their readers check that they exist.
MODEL_FILES = ("checkpoint", "lvt_checkpoint", "spm_path", "lexicon")
MODEL_FOLDERS = ("minilm_dir", "init_checkpoint")


def _config_leaves(config, prefix: str = ""):
  for name, value in config.items():
    if hasattr(value, "items"):
      yield from _config_leaves(value, f"{prefix}{name}.")
    else:
      yield f"{prefix}{name}", value


# `data.*_kind` keys a run reads from `data.features`, and what each holds (a run writes `cache_kind` itself).
KIND_ROLES = {"clip_kind": "the videos' (clips') embeddings", "text_kind": "the query texts' embeddings",
              "tokens_kind": "the videos' per-frame patch tokens", "video_kind": "the videos' embeddings"}


def check_store_kinds(config) -> None:
  """A run on a feature store (`data.features`) finds there every kind its `data.*_kind` keys name: else one error
  naming the store, the kinds it lacks, the keys and `configs/prepare.py` (which writes them), before any file is
  written."""
  from vidjax.data.features import FeatureStore  # pylint: disable=g-import-not-at-top
  data = config.get("data")
  if not hasattr(data, "get") or not data.get("features") or data.get("source", "store") != "store":
    return
  store = FeatureStore(data.features)
  have = store.kinds()
  missing = {key: data[key] for key in KIND_ROLES if data.get(key) and data[key] not in have}
  if missing:
    roles = "; ".join(f"config.data.{key}: {KIND_ROLES[key]}" for key in missing)
    raise ValueError(f"feature store {store.root} has no kind {sorted(set(missing.values()))} ({roles}; it has "
                     f"{have}): write it with `{PREPARE} --config.data.videos=... --config.data.annotations=...` "
                     "(configs/prepare.py), or name the store's kind with --config.data.<key>")


def is_resumable(key: str, extra: Iterable[str] = ()) -> bool:
  """Whether the dotted config `key` may change between runs in one workdir (see `RESUMABLE_LEAVES`)."""
  parts = key.split(".")
  return (parts[-1] in RESUMABLE_LEAVES or parts[0] in RESUMABLE_SECTIONS
          or any(key == e or key.startswith(e + ".") for e in (*RESUMABLE_KEYS, *extra)))


CONFIG_RECORD = "config.json"
PENDING_RECORD = "config.pending.json"


def _compare(saved: Mapping, current: Mapping, workdir: Path, resumable: Iterable[str]) -> None:
  old, new = _flat(saved), _flat(current)
  # A workdir made before the precision policy ran at JAX's default precision; it resumes under the policy.
  predates = () if "precision" in saved else ("precision",)
  changed = sorted(k for k in old.keys() | new.keys()
                   if old.get(k) != new.get(k) and not is_resumable(k, (*resumable, *predates)))
  if changed:
    raise ValueError(f"workdir {workdir} was made by a different config (changed: {', '.join(changed[:8])}); "
                     "use a new --workdir (its features, benchmark files and checkpoints belong to that config)")


def check_workdir(config, workdir: str | Path, resumable: Iterable[str] = ()) -> None:
  """Refuses to reuse a workdir made by a different config: its files and checkpoints would be stale.

  Args:
    config: the run's config; written to `<workdir>/config.json` on first use.
    workdir: the run directory.
    resumable: the experiment's own keys that may change between runs besides `is_resumable`'s rule.
  """
  path = Path(workdir) / CONFIG_RECORD
  current = json.loads(config.to_json_best_effort())
  if path.exists():
    _compare(io.read_json(path, "workdir config record"), current, Path(workdir), resumable)
  if is_writer():
    io.atomic_write_json(path, current)


def _holds_outputs(workdir: Path) -> bool:
  """Whether `workdir` holds any file besides the pending config record (empty folders do not count) and a world's
  files (`world_data`: inputs, rewritten when the world section or seed changes, so they bind nothing)."""
  world = workdir / WORLD_DIR
  return any(p.name not in (PENDING_RECORD, LOCK_FILE) and not p.is_dir() and world not in p.parents
             for p in workdir.rglob("*"))


def record_config(config, workdir: str | Path, resumable: Iterable[str] = ()) -> None:
  """A run's config record, which refuses a later run of a different config in the same workdir (`check_workdir`).

  A finished run's record is `config.json`. A run in progress records `config.pending.json`; it binds a later run
  as `config.json` does as soon as the workdir holds any other file (features, benchmark files, checkpoints: a
  killed run resumes only under its own config), while a run that stopped before writing anything (a bad input
  found late, a malformed annotation file) leaves a record that binds nothing: the corrected rerun goes ahead.
  `commit_config` (called by `write_results`) turns the pending record into `config.json`."""
  workdir = Path(workdir)
  if (workdir / CONFIG_RECORD).exists():
    check_workdir(config, workdir, resumable)
    return
  pending = workdir / PENDING_RECORD
  current = json.loads(config.to_json_best_effort())
  if pending.exists() and _holds_outputs(workdir):
    _compare(io.read_json(pending, "workdir config record"), current, workdir, resumable)
  if is_writer():
    io.atomic_write_json(pending, current)


def commit_config(workdir: str | Path) -> None:
  """Turns a run's pending config record into `config.json` (process 0); nothing when there is none."""
  pending = Path(workdir) / PENDING_RECORD
  if is_writer() and pending.exists():
    pending.replace(Path(workdir) / CONFIG_RECORD)


def check_data_source(config, has_data: bool, where: str) -> None:
  """The `world` variant (a config with a `world` section) runs the embedded SYNTHETIC world; without it the
  run needs a user's data. One clear error for either mismatch; `where` names the config file."""
  if "world" in config and has_data:
    bad_value("data.features", config.data.features, f"empty with the :world variant of {where}, which runs the "
              "embedded SYNTHETIC world; drop :world to run the paper's settings on your data")
  if "world" not in config and not has_data:
    bad_value("data.features", config.data.features, f"a feature store (the paper's settings on your data), or run "
              f"the embedded SYNTHETIC world with its own small model: --config {where}:world")


WORLD_DIR = "world"          # <workdir>/world: what a world writes (release-format files, a feature store, truth)
WORLD_RECORD = "world.json"  # in WORLD_DIR: the world section and seed it was written from, and its data keys


def runs_world(config) -> bool:
  """Whether `config` runs an embedded SYNTHETIC world: it has a `world` section and names no feature store."""
  return "world" in config and not (config.get("data") and config.data.get("features"))


def world_data(config, workdir: str | Path, write_world: Callable[[Any, Path], Mapping[str, str]]):
  """The one data path, for a world. A world is data: when `runs_world(config)`, `write_world(config, root)`
  writes what a user would have under `root = <workdir>/world` (release-format annotation files, a feature store
  whose manifest says SYNTHETIC and names the world, and where a diagnostic needs world truth a side file it
  documents) and returns the `data.*` keys that name them ({"annotations": ..., "features": ...}). The config
  returned is `config` with those keys set (an unlocked copy, locked again), so the experiment reads the world
  exactly as it reads a user's files. Written once per workdir by process 0 (the others wait); a rerun whose
  `world.json` records the same world section and seed reads the files as they are. Without a world: `config`."""
  if not runs_world(config):
    return config
  root = Path(workdir) / WORLD_DIR
  record_path = root / WORLD_RECORD
  wanted = {"seed": config.seed, "world": json.loads(config.world.to_json_best_effort())}

  def write():
    if record_path.exists():
      old = io.read_json(record_path, "world record")
      if {k: old.get(k) for k in wanted} == wanted:
        return old["data"]
    keys = {k: str(v) for k, v in write_world(config, root).items()}
    io.atomic_write_json(record_path, dict(wanted, data=keys))
    return keys

  keys = on_writer("vidjax_world_data", write) or io.read_json(record_path, "world record")["data"]
  return with_values(config, {f"data.{key}": value for key, value in keys.items()})


def recorded_world_data(config, workdir: str | Path):
  """The config a finished run read its data with: for a world's run, `config` (as `config.json` recorded it) with
  the `data.*` keys its `world_data` recorded in `<workdir>/world/world.json`; else `config`. What every suite
  reads (`vidjax.experiments.evaluate_all` applies it before calling one)."""
  record = Path(workdir) / WORLD_DIR / WORLD_RECORD
  if not runs_world(config) or not record.is_file():
    return config
  return with_values(config, {f"data.{k}": v for k, v in io.read_json(record, "world record")["data"].items()})


def check_informative(vectors, what: str, where: str) -> None:
  """Refuses embeddings that cannot rank anything: every row zero, or every row the same vector (a store written
  from placeholders, an extraction that failed quietly). Cosine scores would then tie everywhere and R@K read as
  numbers (R@1 0, R@5 100) instead of an error. One `ValueError` naming `where` (the store and kind) and `what`.
  A few zero rows among informative ones are reported on stdout (each ties with every candidate)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  x = np.asarray(vectors)
  if x.ndim < 2 or len(x) < 2:
    return
  flat = x.reshape(len(x), -1)
  high, low = flat.max(axis=0), flat.min(axis=0)  # no [N, D] temporary: galleries can be large
  if not (high.any() or low.any()):
    raise ValueError(f"{where}: all {len(x)} {what} vectors are zero; they rank nothing (every score ties): "
                     "re-extract them")
  if np.array_equal(high, low):
    raise ValueError(f"{where}: all {len(x)} {what} vectors are the same vector; they rank nothing (every score "
                     "ties): re-extract them")
  zero = int(np.count_nonzero(~flat.any(axis=1)))
  if zero:
    print(f"WARNING: {where}: {zero} of {len(x)} {what} vectors are zero (each ties with every candidate)",
          flush=True)


# ----------------------------------------------------------------------------------------------
# Results and plots.


def with_precision_record(config, keys: Mapping) -> dict:
  """results.json `keys` whose real-path `provenance` (when there is one) also records `precision_record`."""
  keys = dict(keys)
  if isinstance(keys.get("provenance"), Mapping):
    keys["provenance"] = {**keys["provenance"], "precision": precision_record(config)}
  return keys


def results_dict(config, *, dataset: str, synthetic: bool, metrics: Mapping, clipped: Mapping | None = None,
                 **extra) -> dict:
  """The results contract: {"experiment", "dataset", "synthetic", "config", "metrics", "clipped", "precision",
  "programs", ...extra}; `precision` (every run, a world's too) and a real-path `provenance`'s record the precision
  the run used and the platform and device kind it ran on (`precision_record`); `programs`: the XLA programs the run
  compiled so far (`train.programs_compiled`: all, the train programs, one count per `fit`). `clipped`: what
  `clip_to_data` fitted to the data, {key: [asked, used]} ({} when nothing was)."""
  extra = with_precision_record(config, extra)
  return {"experiment": config.get("name") or config.experiment, "dataset": dataset, "synthetic": bool(synthetic),
          "metrics": dict(metrics), "clipped": dict(clipped or {}), "variants": list(config.get("variants", ())),
          "precision": precision_record(config), "programs": train.programs_compiled(),
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
  commit_config(workdir)  # the run wrote its results: its config record is final
  record = {**results, "variants": results.get("variants", list(results["config"].get("variants", ())))}
  path = io.atomic_write_json(Path(workdir) / "results.json", record)
  print(f"results written to {path}" + ("  [SYNTHETIC]" if results["synthetic"] else ""), flush=True)
  return path


def run_seeds(run, config, workdir: str | Path) -> dict:
  """`config.seeds` (e.g. the `:seeds3` variant): `run` once per seed into `<workdir>/seed_<s>/`, then one
  results.json of the same shape whose numbers are the means over seeds, with a `"std"` tree of the same shape
  (population std, as "± std" in the papers' tables), `"seeds"` and each seed's workdir. A finished seed resumes
  like any run; non-numeric values are the first seed's. The seeds' runs lock their own folders; `workdir` (the
  means' results.json) is locked too, from the start when it exists, else once the first seed's run made it (a
  bad config is refused before anything is made)."""
  seeds = list(config.seeds)
  if (len(seeds) < 2 or len(set(seeds)) != len(seeds)
      or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_SEED for s in seeds)):
    bad_value("seeds", tuple(config.seeds), "two or more distinct integers in [0, 2**32 - 1] (or drop the key)")
  held = set(_LOCKS)
  try:
    return _run_seeds(run, config, Path(workdir), seeds)
  finally:
    release_locks(held)


def _run_seeds(run, config, workdir: Path, seeds: list[int]) -> dict:
  """`run_seeds` after its checks."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  per_seed = []
  for seed in seeds:
    if workdir.is_dir():
      lock_workdir(config, workdir)
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


def check_run(fn, config, workdir) -> dict:
  """`vidjax.main --check`: runs `fn(config, workdir)` until its first training would start (`train.fit`, the one
  loop every method trains with): the data are read, every size is fitted to them (`defaults.common.clip_to_data`
  records what it clipped) and every check on the way has run; then stops (`defaults.common.DataFits`) and writes
  and returns `WORKDIR/check.json` {"experiment", "check": "the data fit", "clipped", "config": what would run}. An
  experiment that trains nothing (retrieval, prepare) runs whole and returns its results."""

  def stop(plan):
    raise DataFits({"clipped": plan["clipped"], "config": plan["config"] or config.to_dict()})

  try:
    with checking() as plan, train.before_training(lambda: stop(plan)):
      return fn(config, workdir)
  except DataFits as fits:
    plan = {"experiment": config.get("name") or config.experiment, "check": "the data fit", **fits.plan}
    if jax.process_index() == 0:
      io.atomic_write_json(Path(workdir) / "check.json", plan)
      print(f"check: the data fit{'; clipped ' + str(plan['clipped']) if plan['clipped'] else ''}; nothing was "
            f"trained ({Path(workdir) / 'check.json'})", flush=True)
    return plan
