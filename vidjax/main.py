"""vidjax entry point.

    python -m vidjax.main --config configs/cast_coin.py[:smoke] --workdir DIR [--config.train.epochs=5 ...]

Reads an ml_collections config file (locked: an unknown `--config.<key>` is an error), initializes
multi-host JAX when the environment asks for it, logs hosts and devices and calls the experiment's
`run(config, workdir)`. Everything else is importable, so notebooks and tests call `run` directly.

Errors about the user's input (a bad flag, config value or variant, a missing config file or input, a file where
the workdir should be, a malformed annotation file, a full disk) print one line, `vidjax: ...`, on stderr and exit
with status 2; `--debug` (or `VIDJAX_DEBUG=1`) shows the traceback. Anything else keeps its traceback (`entry`).
"""
from __future__ import annotations

import errno
import os
from pathlib import Path
import re
import sys
from typing import Sequence

from absl import app, flags, logging
import jax
from ml_collections import config_flags

from vidjax import methods, sharding
from vidjax.experiments import backbone as backbone_experiment
from vidjax.experiments import common
from vidjax.experiments import evaluate_all as evaluate_all_experiment
from vidjax.experiments import extract as extract_experiment
from vidjax.experiments import prepare as prepare_experiment
from vidjax.experiments import retrieval as retrieval_experiment
from vidjax.experiments import stack as stack_experiment

# The experiments that are not a method (config.experiment -> run): the tools around the methods (a store, a
# backbone, the stack, the comparison). Plain imports: they are few, fixed and no other module lists them. A
# method's run comes from the one table of methods (`vidjax.methods.METHODS`), imported when it is asked for.
TOOLS = {
    "backbone": backbone_experiment.run,
    "evaluate_all": evaluate_all_experiment.run,
    "extract_videoprism": extract_experiment.run,
    "prepare": prepare_experiment.run,
    "retrieval": retrieval_experiment.run,
    "stack": stack_experiment.run,
}
DEBUG_ENV = "VIDJAX_DEBUG"  # set to 1: an error shows its traceback (as --debug does)

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a config file, e.g. configs/cast_coin.py:smoke.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results, checkpoints and logs.")
_DEBUG = flags.DEFINE_bool("debug", False, f"Show the full traceback of an error (also: {DEBUG_ENV}=1).")
_CHECK = flags.DEFINE_bool("check", False, "Read the data, fit every size to them (clipped or refused as in a run), run "
                           "every check up to the first training step and stop there: WORKDIR/check.json holds what "
                           "would run.")


def experiment(kind: str):
  """The run function of `config.experiment` = `kind`: a tool's (`TOOLS`) or a method's (`methods.METHODS`)."""
  if kind in TOOLS:
    return TOOLS[kind]
  if kind in methods.METHODS:
    return methods.METHODS[kind].run
  raise ValueError(f"config.experiment={kind!r} is not one of {sorted([*TOOLS, *methods.METHODS])}")


def experiments() -> dict:
  """Every experiment kind -> its run function (imports every method's experiment)."""
  return {**TOOLS, **{name: m.run for name, m in methods.METHODS.items()}}


def run(config, workdir: str, check: bool = False):
  """Dispatches to the experiment named by `config.experiment`; returns its results dict. `check`: stop where the
  first training would start, once the data are read, every size fits them and every check on the way has run
  (`experiments.common.check_run`): returns and writes `WORKDIR/check.json` ({"experiment", "check": "the data
  fit", "clipped", "config"}) instead of training; an experiment that trains nothing (retrieval, prepare) runs
  whole."""
  fn = experiment(config.experiment)
  if check:
    return common.check_run(fn, config, workdir)
  if "seeds" in config:  # several seeds, mean ± std (e.g. `:seeds3`)
    return common.run_seeds(fn, config, workdir)
  return fn(config, workdir)


_PARSED = []  # set once absl has parsed the flags: errors before that are the command line's


def main(argv):
  _PARSED.append(True)
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if _CONFIG.value is None or not _WORKDIR.value:
    raise app.UsageError("both --config and --workdir are required")
  if not flags.FLAGS["verbosity"].present:  # library INFO logs (orbax) drown the tables; -v 0 restores
    logging.set_verbosity(logging.WARNING)
  sharding.initialize_distributed()
  if jax.process_index() == 0:
    print(f"vidjax: {jax.process_count()} process(es), devices: {jax.devices()}", flush=True)
  run(_CONFIG.value, _WORKDIR.value, check=_CHECK.value)


def _debug(argv: Sequence[str]) -> bool:
  """--debug (read from argv too: an error may come before absl has parsed it) or VIDJAX_DEBUG=1."""
  return os.environ.get(DEBUG_ENV, "") not in ("", "0", "false", "False") or any(
      a in ("--debug", "-debug", "--debug=true", "--debug=True", "--debug=1") for a in argv)


def _config_file(argv: Sequence[str]) -> str | None:
  """The file part of --config (`--config X[:variants]` or `--config=X[:variants]`), None when not given."""
  for i, a in enumerate(argv):
    if a in ("--config", "-config") and i + 1 < len(argv):
      return argv[i + 1].split(":", 1)[0]
    if a.startswith(("--config=", "-config=")):
      return a.split("=", 1)[1].split(":", 1)[0]
  return None


def _raised_by_vidjax(error: BaseException) -> bool:
  """Whether the innermost frame of `error`'s traceback is vidjax's own code (a package module or a config file),
  i.e. a check the project makes, not a library failing inside."""
  tb = error.__traceback__
  if tb is None:
    return False
  while tb.tb_next is not None:
    tb = tb.tb_next
  name = tb.tb_frame.f_globals.get("__name__", "")
  return name == "vidjax" or name.startswith(("vidjax.", "vidjax_config_")) or name == "config_config"


def user_error(error: BaseException) -> str | None:
  """The one line to print for an error about the user's input, None for anything else (a bug: its traceback).

  User input: a `ValueError` / `KeyError` / `OSError` (file not found, a file in the way, ...) or
  `FloatingPointError` that vidjax's own checks raise (`_raised_by_vidjax`), and a full disk wherever it is found."""
  if isinstance(error, OSError) and error.errno == errno.ENOSPC:
    text = str(error)  # e.g. "[Errno 28] No space left on device: '<path>'"
    return text if "no space left" in text.lower() else f"no space left on device: {text}"
  if not isinstance(error, (ValueError, KeyError, OSError, FloatingPointError)) or not _raised_by_vidjax(error):
    return None
  text = error.args[0] if isinstance(error, KeyError) and error.args else error
  return " ".join(str(text).split("\n")).strip() or type(error).__name__


def _fail(message: str) -> None:
  print(f"vidjax: error: {message}", file=sys.stderr, flush=True)
  sys.exit(2)


def _flag_error_line(error: Exception) -> str:
  """A flag error as one line. ml_collections passes a config file's ValueError (an unknown variant) on with the
  whole traceback in its text: its last line is the message."""
  text = str(error)
  if "Error whilst parsing config file" in text:
    last = [line for line in text.splitlines() if line.strip()][-1]
    text = re.sub(r"^\w+(Error|Exception): ", "", last.strip())
  return " ".join(text.split("\n"))


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with a flag error as one line and exit status 2 (absl prints it under a usage banner)."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    if _debug(argv[1:]):
      raise
    print(f"vidjax: {_flag_error_line(e)}", file=sys.stderr, flush=True)
    sys.exit(2)


def entry():
  """`python -m vidjax.main`: every error about the user's input (a bad flag or config value, a missing or
  malformed file, a full disk) is one line on stderr, `vidjax: ...`, and exit status 2; `--debug` or
  `VIDJAX_DEBUG=1` shows the traceback instead. Anything else (a bug) keeps its traceback."""
  argv = sys.argv[1:]
  debug = _debug(argv)
  path = _config_file(argv)
  if path is not None and not debug and not Path(path).is_file():
    _fail(f"--config {path}: no such config file" + (" (it is a folder)" if Path(path).is_dir() else ""))
  try:
    app.run(main, flags_parser=_parse_flags)
  except (AttributeError, KeyError) as e:
    # ml_collections raises a chained AttributeError for an unknown --config.<key> (its "did you mean" hint
    # inside): one line naming the key.
    if _PARSED:
      message = None if debug else user_error(e)
      if message is None:
        raise
      _fail(message)
    if debug:
      raise
    text = str(e.args[0] if e.args else e)
    key = re.search(r"([A-Za-z0-9_]+)", text.replace("\\", ""))
    hint = re.search(r'(Did you mean "[^"]+" instead of "[^"]+"\?)', text)
    print(f"vidjax: unknown config key {key.group(1) if key else text!r}" + (f"; {hint.group(1)}" if hint else ""),
          file=sys.stderr)
    sys.exit(2)
  except Exception as e:  # pylint: disable=broad-except
    message = None if debug else user_error(e)
    if message is None:
      raise
    _fail(message)


if __name__ == "__main__":
  entry()
