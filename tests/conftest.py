"""Shared fixtures: each experiment's smoke run happens once per test session, across xdist workers.

The experiment tests check their own run's files; `test_evaluate_all.py` loads the same finished runs, so the
suite trains every smoke model once: the first worker to ask runs it under a file lock in the directory the
workers share, the others wait for it and read its results.

Compiled XLA programs are shared too: the session (the xdist controller, before its workers start) points
JAX's persistent compilation cache at a fresh temporary directory, which the workers, notebook kernels and
subprocesses inherit through the environment. The suite compiles many identical programs (a tiny train step
in a test and again in a notebook, a fresh closure per test): each is compiled once per session. A cache
directory the user already set is left alone.
"""
import os
import pickle
import shutil
import tempfile
from pathlib import Path

import filelock
import pytest

# Before anything imports jax (it reads the variables at import).
if "PYTEST_XDIST_WORKER" not in os.environ and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="vidjax-tests-xla-cache-")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
  _OWN_CACHE = os.environ["JAX_COMPILATION_CACHE_DIR"]
else:
  _OWN_CACHE = None

from vidjax.experiments.common import load_config  # noqa: E402  pylint: disable=wrong-import-position

ROOT = Path(__file__).resolve().parents[1]


def pytest_unconfigure(config):  # pylint: disable=unused-argument
  if _OWN_CACHE:
    shutil.rmtree(_OWN_CACHE, ignore_errors=True)


def grdr_smoke_config():
  """The GRDR smoke world without the N_v = 1 model (its training is the same code with n_views=1; half the time)."""
  c = load_config(ROOT / "configs/grdr_msrvtt.py:smoke")
  with c.unlocked():
    c.eval.compare_single_view = False
  return c


# name -> (its config, the experiment module's run)
SMOKE = {
    "cast": lambda: load_config(ROOT / "configs/cast_coin.py:smoke"),
    "comp": lambda: load_config(ROOT / "configs/comp_activitynet.py:smoke"),
    "genstate": lambda: load_config(ROOT / "configs/genstate_rendered.py:smoke"),
    "grdr": grdr_smoke_config,
    "stack": lambda: load_config(ROOT / "configs/stack_coin.py:smoke"),
    "vedje": lambda: load_config(ROOT / "configs/vedje_msrvtt.py:smoke"),
}


@pytest.fixture(scope="session")
def smoke_runs(tmp_path_factory, worker_id):
  """`smoke_runs(name)` -> (workdir, results) of that experiment's smoke config, run on first request."""
  from vidjax import main  # pylint: disable=g-import-not-at-top
  base = tmp_path_factory.getbasetemp()
  root = base.parent if worker_id != "master" else base  # xdist: the workers' basetemps share a parent

  def get(name: str):
    workdir = root / f"{name}_smoke"
    with filelock.FileLock(str(workdir) + ".lock"):
      saved = workdir / "results.pkl"
      if not saved.exists():
        results = main.run(SMOKE[name](), workdir)
        saved.write_bytes(pickle.dumps(results))
      return workdir, pickle.loads(saved.read_bytes())
  return get
