"""The comparison's settings (`configs/evaluate_all.py`): every trained model on every benchmark (jax-free, instant
to load; loaded by path, `vidjax.defaults.common.config_module`).

`workdirs` names finished runs (of any method's configs); each run's models are restored from its checkpoints and its
benchmarks rebuilt from its config. With no `workdirs` the run first trains `runs` (the embedded worlds,
smoke-sized: a few CPU minutes) under `<workdir>/runs/` and compares those. A model takes a benchmark only in its own
feature space (the world or feature store it was trained on); every other cell says why it is empty.
"""
from __future__ import annotations

import ml_collections

from vidjax.defaults import common
from vidjax.methods import METHODS


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """What `configs/evaluate_all.py` returns; `arg` may be "smoke" (only the rendered world: seconds; for tests)."""
  c = ml_collections.ConfigDict()
  c.experiment = "evaluate_all"
  c.name = "evaluate_all"
  c.seed = 0        # the seed of every run trained from `runs` (their worlds and models)
  c.precision = common.precision_section()  # matmul precision per phase (README "Precision")
  c.workdirs = ()   # finished runs to compare; empty: train `runs` first
  # The embedded default: every method's smoke run (the table of methods), config files relative to the repository.
  c.runs = tuple(m.smoke for m in METHODS.values())
  return common.apply_variants(c, arg, {"smoke": smoke}, "configs/evaluate_all.py")


def smoke(c: ml_collections.ConfigDict) -> None:
  """Only the rendered world (seconds; tests)."""
  c.runs = ("configs/genstate_rendered.py:smoke",)
