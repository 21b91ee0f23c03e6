"""`configs/evaluate_all.py` defaults: every trained model on every benchmark (jax-free, instant to load).

`workdirs` names finished runs (any of `configs/cast_*.py`, `comp_*.py`, `genstate_*.py`, `vedje_*.py`,
`grdr_*.py`); each run's models are restored from its checkpoints and its benchmarks rebuilt from its config.
With no `workdirs` the run first trains `runs` (the embedded worlds, smoke-sized: a few CPU minutes) under
`<workdir>/runs/` and compares those. A model takes a benchmark only in its own feature space (the world or
feature store it was trained on); every other cell says why it is empty.
"""
from __future__ import annotations

import ml_collections

from vidjax.defaults import common

# The embedded default: one smoke-sized run per method, config files relative to the repository root.
RUNS = ("configs/cast_coin.py:smoke", "configs/comp_activitynet.py:smoke", "configs/genstate_rendered.py:smoke",
        "configs/vedje_msrvtt.py:smoke", "configs/grdr_msrvtt.py:smoke")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """What `configs/evaluate_all.py` returns; `arg` may be "smoke" (only the rendered world: seconds; for tests)."""
  c = ml_collections.ConfigDict()
  c.experiment = "evaluate_all"
  c.name = "evaluate_all"
  c.seed = 0        # the seed of every run trained from `runs` (their worlds and models)
  c.precision = common.precision_section()  # matmul precision per phase (README "Precision")
  c.workdirs = ()   # finished runs to compare; empty: train `runs` first
  c.runs = RUNS
  return common.apply_variants(c, arg, {"smoke": smoke}, "configs/evaluate_all.py")


def smoke(c: ml_collections.ConfigDict) -> None:
  """Only the rendered world (seconds; tests)."""
  c.runs = ("configs/genstate_rendered.py:smoke",)
