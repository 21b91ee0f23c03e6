"""vidjax entry point.

    python -m vidjax.main --config configs/cast_coin.py[:smoke] --workdir DIR [--config.train.epochs=5 ...]

Reads an ml_collections config file (locked: an unknown `--config.<key>` is an error), initializes
multi-host JAX when the environment asks for it, logs hosts and devices and calls the experiment's
`run(config, workdir)`. Everything else is importable, so notebooks and tests call `run` directly.

Errors about the user's input (a bad flag, config value or variant, a missing config file or input, a config file
that does not load or returns no ConfigDict, a missing or empty --workdir, an extra argument, a file where the
workdir should be, a malformed annotation file, a full disk) print one line, `vidjax: ...`, on stderr and exit with
status 2, the command line's and the config file's before JAX starts; orbax / TensorStore failures print one summary
line (`storage_error`). `--debug` (or `VIDJAX_DEBUG=1`) shows the traceback. Anything else keeps its traceback
(`entry`).
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
import ml_collections
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
  raise ValueError(f"config.experiment={kind!r} is not one of {experiments_known()}")


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


def check_command_line(argv: Sequence[str], config, workdir: str | None, path: str | None) -> None:
  """The command line and the config file's result, before any work (JAX is not initialized yet): one
  `UsageProblem` naming what is wrong (an extra argument, a missing or empty --config / --workdir, a config file
  whose get_config returned no ConfigDict, an unknown or missing `experiment`)."""
  if len(argv) > 1:
    raise UsageProblem(f"unexpected argument(s) {' '.join(map(repr, argv[1:]))}: give every value as a flag "
                       "(--config FILE[:variants] --workdir DIR --config.<key>=VALUE)")
  if config is None:
    raise UsageProblem("--config is required: --config configs/<experiment>.py[:variants]")
  if workdir is None:
    raise UsageProblem("--workdir is required: the folder for the run's results, checkpoints and logs")
  if not workdir.strip():
    raise UsageProblem(f"--workdir is empty ({workdir!r}): name the folder for the run's results")
  if not isinstance(config, ml_collections.ConfigDict):
    try:  # ml_collections keeps an OSError raised while loading the file and raises it on first use
      getattr(config, "experiment")
    except OSError as e:
      raise UsageProblem(f"--config {path}: {e.__cause__ or e}") from None
    except AttributeError:
      pass
    raise UsageProblem(f"--config {path}: get_config returned a {type(config).__name__}, not an "
                       "ml_collections.ConfigDict")
  if "experiment" not in config:
    raise UsageProblem(f"--config {path}: the config has no `experiment` key (one of {sorted(experiments_known())})")
  try:
    experiment(config.experiment)
  except ValueError as e:
    raise UsageProblem(f"--config {path}: {e}") from None


class UsageProblem(ValueError):
  """An error in the command line or in what the config file returned (`check_command_line`)."""


def experiments_known() -> list[str]:
  """The names `config.experiment` may take (no method module imported)."""
  return sorted([*TOOLS, *methods.METHODS])


def main(argv):
  _PARSED.append(True)
  try:
    check_command_line(argv, _CONFIG.value, _WORKDIR.value, _config_file(sys.argv[1:]))
  except UsageProblem as e:
    if _debug(sys.argv[1:]):
      raise
    _fail(str(e))
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
  spec = tb.tb_frame.f_globals.get("__spec__")  # `python -m vidjax.main` runs this module as __main__
  name = getattr(spec, "name", None) or tb.tb_frame.f_globals.get("__name__", "")
  return name == "vidjax" or name.startswith(("vidjax.", "vidjax_config_")) or name == "config_config"


def user_error(error: BaseException) -> str | None:
  """The one line to print for an error about the user's input, None for anything else (a bug: its traceback).

  User input: a `ValueError` / `KeyError` / `OSError` (file not found, a file in the way, ...) or
  `FloatingPointError` that vidjax's own checks raise (`_raised_by_vidjax`), and a full disk wherever it is found."""
  if isinstance(error, OSError) and error.errno == errno.ENOSPC:
    text = str(error)  # e.g. "[Errno 28] No space left on device: '<path>'"
    return text if "no space left" in text.lower() else f"no space left on device: {text}"
  storage = storage_error(error)
  if storage is not None:
    return storage
  if not isinstance(error, (ValueError, KeyError, OSError, FloatingPointError)) or not _raised_by_vidjax(error):
    return None
  text = error.args[0] if isinstance(error, KeyError) and error.args else error
  return " ".join(str(text).split("\n")).strip() or type(error).__name__


STORAGE_LIBRARIES = ("orbax", "tensorstore")  # checkpoint I/O: their failures are the disk's or the files'


def storage_error(error: BaseException) -> str | None:
  """One summary line for an error raised inside orbax or TensorStore (a checkpoint that does not read, a folder
  that cannot be written): what failed, where vidjax called it, and the first line of the library's message, its
  tensorstore spec dropped; their traces run to hundreds of lines (`--debug` shows it). None for other errors."""
  frames = list(_frames(error.__traceback__))
  modules = [tb.tb_frame.f_globals.get("__name__", "") for tb in frames]
  if not any(m.split(".")[0] in STORAGE_LIBRARIES for m in [*modules, type(error).__module__]):
    return None
  ours = [tb for tb, m in zip(frames, modules) if m == "vidjax" or m.startswith("vidjax.")]
  where = ""
  if ours:
    code = ours[-1].tb_frame.f_code
    where = f" in {Path(code.co_filename).name}:{ours[-1].tb_lineno} ({code.co_name})"
  text = str(error).strip().splitlines()[0] if str(error).strip() else ""
  text = re.sub(r"\s*\[tensorstore_spec=.*$", "", text)
  if len(text) > 400:
    text = text[:400] + " ..."
  return (f"checkpoint storage failed{where}: {type(error).__name__}: {text} (orbax / TensorStore; --debug or "
          f"{DEBUG_ENV}=1 shows the trace)")


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


def config_file_error(error: BaseException, path: str) -> str | None:
  """The one line for an error raised while the config file `path` was loaded (a syntax error, a module without
  get_config, any exception its code raised), naming the file and line; None when `error` did not come from it."""
  if isinstance(error, SyntaxError):
    where = f"{error.filename}:{error.lineno}" if error.filename else path
    return f"--config {path}: {where}: {type(error).__name__}: {error.msg}"
  if isinstance(error, AttributeError) and "has no attribute 'get_config'" in str(error):
    return f"--config {path}: the file defines no get_config(arg) (a config file returns its ConfigDict from it)"
  resolved = str(Path(path).resolve())
  frames = [tb for tb in _frames(error.__traceback__) if str(Path(tb.tb_frame.f_code.co_filename).resolve())
            == resolved]
  if not frames:
    return None
  line = frames[-1].tb_lineno
  return f"--config {path}:{line}: {type(error).__name__}: {' '.join(str(error).split())}"


def _frames(tb):
  while tb is not None:
    yield tb
    tb = tb.tb_next


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with a flag error as one line and exit status 2 (absl prints it under a usage banner),
  and so an error raised while loading the config file (`config_file_error`)."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    if _debug(argv[1:]):
      raise
    print(f"vidjax: {_flag_error_line(e)}", file=sys.stderr, flush=True)
    sys.exit(2)
  except Exception as e:  # pylint: disable=broad-except
    path = _config_file(argv[1:])
    message = None if _debug(argv[1:]) or path is None else config_file_error(e, path)
    if message is None:
      raise
    _fail(message)


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
