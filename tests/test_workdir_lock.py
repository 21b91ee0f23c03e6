"""One run per workdir: a run holds an exclusive lock on its workdir for as long as it lives (released by the kernel
when the process dies, even by SIGKILL); a second run there fails at once, naming the holder's pid."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import ml_collections
import pytest

from vidjax.defaults.common import precision_section
from vidjax.experiments import common

ROOT = Path(__file__).resolve().parents[1]

# A run that takes the workdir's lock and stays alive (a training run, as far as the lock can tell).
_HOLDER = """
import sys, time
import ml_collections
from vidjax.defaults.common import precision_section
from vidjax.experiments import common
config = ml_collections.ConfigDict(dict(experiment="toy", seed=int(sys.argv[2]), precision=precision_section()))
common.start_run(config, sys.argv[1], lambda c: None)
print("locked", flush=True)
time.sleep(120)
"""


def _config(seed=0):
  return ml_collections.ConfigDict(dict(experiment="toy", seed=seed, precision=precision_section()))


@pytest.fixture
def holder(tmp_path):
  """A live process holding the lock of `tmp_path / "run"` (seed 0); killed with SIGKILL at the end."""
  proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path / "run"), "0"], cwd=ROOT, text=True,
                          stdout=subprocess.PIPE, env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.stdout.readline().strip() == "locked"
  yield proc
  proc.kill()
  proc.wait()


def test_a_second_run_fails_at_once_naming_the_holder_then_runs_once_it_is_killed(tmp_path, holder):
  run = tmp_path / "run"
  # A different config: refused at once (it used to go ahead and write its files beside the first run's).
  with pytest.raises(common.WorkdirBusyError, match=rf"workdir .*run is in use by another run \(pid {holder.pid} on "
                                                    r".*\) with a different config \(changed: seed\)"):
    common.start_run(_config(seed=1), run, lambda c: None)
  # The same config: refused too, saying so (it would resume the files the first is writing).
  with pytest.raises(common.WorkdirBusyError, match=rf"pid {holder.pid} .*it runs this same config: wait for it"):
    common.start_run(_config(seed=0), run, lambda c: None)
  assert (run / common.LOCK_FILE).is_file()
  # kill -9: the kernel drops the lock; the file left behind blocks nothing.
  holder.send_signal(signal.SIGKILL)
  holder.wait()
  assert (run / common.LOCK_FILE).is_file()
  held = set(common._LOCKS)  # pylint: disable=protected-access
  try:
    common.start_run(_config(seed=0), run, lambda c: None)  # the killed run's config resumes
  finally:
    common.release_locks(held)
  assert not (run / common.LOCK_FILE).exists()


def test_a_run_releases_its_lock_when_it_returns_or_fails(tmp_path):
  """`precision_policy` (every experiment's `run`) releases the locks the run took; a nested run in the same
  workdir (the stack's CAST half) takes nothing new and the outer lock stays until the outer run ends."""
  seen = []

  @common.precision_policy
  def inner(config, workdir):
    common.start_run(config, workdir, lambda c: None)
    seen.append(sorted(common._LOCKS))  # pylint: disable=protected-access

  @common.precision_policy
  def outer(config, workdir, fail=False):
    workdir = common.start_run(config, workdir, lambda c: None)
    inner(config, workdir)
    assert (workdir / common.LOCK_FILE).is_file()  # still held by the outer run
    if fail:
      raise ValueError("a failed run")

  before = set(common._LOCKS)  # pylint: disable=protected-access
  outer(_config(), tmp_path / "a")
  assert seen == [sorted(before | {str((tmp_path / "a").resolve())})]
  assert set(common._LOCKS) == before  # pylint: disable=protected-access
  assert not (tmp_path / "a" / common.LOCK_FILE).exists()
  with pytest.raises(ValueError, match="a failed run"):
    outer(_config(), tmp_path / "b", fail=True)
  assert set(common._LOCKS) == before  # pylint: disable=protected-access
  assert not (tmp_path / "b" / common.LOCK_FILE).exists()
