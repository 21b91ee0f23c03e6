"""Every trained model on every benchmark (`configs/evaluate_all.py`): one comparison table.

`run(config, workdir)`:
  1. with no `config.workdirs`, trains `config.runs` (the embedded worlds, smoke-sized) under
     `<workdir>/runs/<config name>` -- each through its method's `run` (`vidjax.methods.METHODS`), resumable;
  2. checks the run list before loading anything (`check_runs`): every workdir a finished run of a method with
     models, none named twice, none the comparison's own workdir or inside it (evaluate_all writes only in its own
     workdir, never in the runs it reads);
  3. loads every run: its config (`config.json`), its trained models restored from its checkpoints and its
     benchmarks, through its method's `suite(config, workdir)` -> ([evaluate.Model], [evaluate.Benchmark]).
     Which methods there are is the table's business: this module names none and imports no experiment.
  4. evaluates every model on every benchmark (`evaluate.Model.evaluate`: metrics, or {"n/a": reason} when the
     model cannot score it, decided before scoring: another feature space, a kind it has no evaluator for, items
     keyed in another key space (a suite that names none keys its run's own items: `load_run`) or keys its
     encoders lack; any error while scoring stays an error) and writes `comparison.json` (model -> benchmark ->
     metrics), `comparison.md` and `results.json`, and prints the table.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import ml_collections

import vidjax
from vidjax import evaluate, io, metrics
from vidjax.data import provenance
from vidjax.defaults.common import bad_value
from vidjax.sharding import is_writer
from vidjax.experiments import common
from vidjax.methods import METHODS


def validate(config) -> None:
  for key in ("workdirs", "runs"):
    value = config[key]
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) and v for v in value):
      bad_value(key, value, "a tuple of non-empty strings")
  if isinstance(config.seed, bool) or not isinstance(config.seed, int) or config.seed < 0:
    bad_value("seed", config.seed, "a non-negative integer")
  if not config.workdirs and not config.runs:
    bad_value("runs", config.runs, "at least one config to train when config.workdirs is empty")


def config_path(spec: str) -> str:
  """`configs/x.py[:arg]` relative to the working directory, else to the repository vidjax was installed from."""
  path, sep, arg = spec.partition(":")
  if not Path(path).is_file():
    repo = Path(vidjax.__file__).resolve().parent.parent / path
    if not repo.is_file():
      raise FileNotFoundError(f"config.runs: config file {path!r} not found (neither here nor in {repo.parent})")
    path = str(repo)
  return path + sep + arg


def train_runs(specs: Sequence[str], root: Path, seed: int) -> list[Path]:
  """Runs each config with `seed` (skipping finished ones) under `root/<config name>`; returns the workdirs."""
  out = []
  for spec in specs:
    config = common.load_config(config_path(spec))
    config.seed = seed
    if config.experiment not in METHODS:
      raise ValueError(f"config.runs: {spec} is a {config.experiment!r} run, which has no models to compare "
                       f"(known: {sorted(METHODS)})")
    workdir = root / config.name
    if not (workdir / "results.json").is_file():
      print(f"evaluate_all: training {spec} in {workdir}", flush=True)
      METHODS[config.experiment].run(config, workdir)
    out.append(workdir)
  return out


def run_config(workdir: str | Path):
  """A finished run's recorded config (locked), after checking that it is one of a method with models: one error
  naming the workdir otherwise."""
  workdir = Path(workdir)
  if not (workdir / "results.json").is_file() or not (workdir / "config.json").is_file():
    raise FileNotFoundError(f"{workdir}: not a finished vidjax run (no results.json / config.json); run it to the "
                            "end first")
  config = ml_collections.ConfigDict(io.read_json(workdir / "config.json", "workdir config record"))
  config.lock()
  kind = config.get("experiment")
  if kind not in METHODS:
    raise ValueError(f"{workdir}: experiment {kind!r} has no models to compare (known: {sorted(METHODS)})")
  return config


def check_runs(dirs: Sequence[Path], workdir: Path) -> None:
  """Refuses, before any run is loaded, a run list that cannot be compared: a workdir that is not a finished run
  of a method with models (`run_config`), one given twice or two runs of one name (their models' names would
  collide), and the comparison's own workdir among them or inside one (it would write into a run it reads)."""
  seen: dict[str, Path] = {}
  names: dict[str, Path] = {}
  own = workdir.resolve()
  for d in dirs:
    config = run_config(d)
    key = str(d.resolve())
    if key in seen:
      raise ValueError(f"config.workdirs: {d} is given twice")
    seen[key] = d
    if config.name in names:
      raise ValueError(f"config.workdirs: {names[config.name]} and {d} are both runs named {config.name!r}; their "
                       "models' names would collide: compare one of them (or rerun one with another config.name)")
    names[config.name] = d
    if own == d.resolve() or d.resolve() in own.parents:
      raise ValueError(f"--workdir {workdir} is inside the run {d} it reads: evaluate_all writes only in its own "
                       "workdir, never in the runs it compares; use a folder outside them")


def load_run(workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """A finished run's models (named `<run name>/<method>`) and benchmarks. Items a suite keys in no shared key
  space (`keys` ""; e.g. evaluation-input rows) are keyed as this run's own, so no other run's model reads them."""
  workdir = Path(workdir)
  config = run_config(workdir)
  with provenance.reading():  # the run's files are read as they are, none rewritten
    models, benchmarks = METHODS[config.experiment].suite(common.recorded_world_data(config, workdir), workdir)
  own = f"the items of run {workdir}"
  for m in models:
    m.name, m.keys = f"{config.name}/{m.name}", m.keys or own
  for b in benchmarks:
    b.keys = b.keys or own
  return models, benchmarks


def benchmark_key(bench: evaluate.Benchmark) -> str:
  return bench.name + (" [SYNTHETIC]" if bench.synthetic else "")


def compare(models: Sequence[evaluate.Model], benchmarks: Sequence[evaluate.Benchmark]) -> dict[str, dict[str, Any]]:
  """model name -> benchmark key -> metrics or {"n/a": reason}."""
  names = [m.name for m in models]
  keys = [benchmark_key(b) for b in benchmarks]
  for what, items in (("model", names), ("benchmark", keys)):
    twice = sorted({x for x in items if items.count(x) > 1})
    if twice:
      raise ValueError(f"evaluate_all: {what} names {twice} occur twice (two workdirs of one config?)")
  return {m.name: {benchmark_key(b): cell(m, b) for b in benchmarks} for m in models}


def cell(model: evaluate.Model, bench: evaluate.Benchmark) -> dict[str, Any]:
  """`model.evaluate(bench)`: metrics, or {"n/a": why} when the model cannot score the benchmark, decided before
  scoring (`evaluate.Model.cannot`: two runs on one store share a feature space, but each method keys its items its
  own way). An error while scoring is an error, never a cell."""
  return model.evaluate(bench)


def markdown(comparison: Mapping[str, Mapping[str, Mapping[str, Any]]], models: Sequence[evaluate.Model],
             benchmarks: Sequence[evaluate.Benchmark], synthetic: bool) -> str:
  """The comparison as one markdown table (models x benchmarks). Feature spaces are labelled S1, S2, ...: a cell
  of a model and a benchmark in different spaces reads "other space"; any other empty cell points at its
  numbered reason below the table."""
  spaces = list(dict.fromkeys([m.space for m in models] + [b.space for b in benchmarks]))
  label = {sp: f"S{i + 1}" for i, sp in enumerate(spaces)}
  reasons: list[str] = []
  notes: list[str] = []

  def note(text):  # an R@K no rank can miss (metrics.NOTES): marked, and said under the table
    if text is None:
      return ""
    if text not in notes:
      notes.append(text)
    return f" *{notes.index(text) + 1}"

  def cell(model: evaluate.Model, bench: evaluate.Benchmark) -> str:
    m = comparison[model.name][benchmark_key(bench)]
    if "n/a" not in m:
      return " · ".join(f"{k} {v:.1f}" + note(m.get(metrics.NOTES, {}).get(k)) for k, v in m.items()
                        if k != metrics.NOTES)
    if model.space != bench.space:
      return "other space"
    if m["n/a"] not in reasons:
      reasons.append(m["n/a"])
    return f"n/a [{reasons.index(m['n/a']) + 1}]"

  title = ("SYNTHETIC DATA (demonstrates mechanisms; not the papers' numbers): " if synthetic else "") + \
      "every model on every benchmark (%)"
  heads = [f"{benchmark_key(b)} ({label[b.space]})" for b in benchmarks]
  lines = [f"**{title}**", "", "| model (space) | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
  lines += [f"| {m.name} ({label[m.space]}) | " + " | ".join(cell(m, b) for b in benchmarks) + " |" for m in models]
  lines += [""] + [f"{label[sp]}: {sp}" for sp in spaces]
  lines += [""] * bool(reasons) + [f"[{i + 1}] {r}" for i, r in enumerate(reasons)]
  lines += [""] * bool(notes) + [f"*{i + 1} {n}" for i, n in enumerate(notes)]
  return "\n".join(lines)


@common.precision_policy
def run(config, workdir: str | Path) -> dict:
  dirs: list[Path] = []

  def checks(c):  # the run list too, before the workdir is made
    validate(c)
    dirs.extend(Path(d) for d in c.workdirs)
    check_runs(dirs, Path(workdir))

  workdir = common.start_run(config, workdir, checks)
  if not dirs:
    dirs = train_runs(config.runs, workdir / "runs", config.seed)
    check_runs(dirs, workdir)
  models, benchmarks = [], []
  for d in dirs:
    m, b = load_run(d)
    models += m
    benchmarks += b
  comparison = compare(models, benchmarks)
  synthetic = any(b.synthetic for b in benchmarks)
  table = markdown(comparison, models, benchmarks, synthetic)
  results = common.results_dict(config, dataset="every benchmark of " + ", ".join(str(d) for d in dirs),
                                synthetic=synthetic, metrics=comparison,
                                benchmarks={benchmark_key(b): {"kind": b.kind, "space": b.space} for b in benchmarks},
                                workdirs=[str(d) for d in dirs],
                                **provenance.runs_provenance(dirs, [common.read_results(d) for d in dirs]))
  if is_writer():
    io.atomic_write_json(workdir / "comparison.json", comparison)
    io.atomic_write_text(workdir / "comparison.md", table + "\n")
    common.write_results(workdir, results, [table])
  return results
