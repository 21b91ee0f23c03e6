"""vidjax entry point.

    python -m vidjax.main --config configs/cast_coin.py[:smoke] --workdir DIR [--config.train.epochs=5 ...]

Reads an ml_collections config file (locked: an unknown `--config.<key>` is an error), initializes
multi-host JAX when the environment asks for it, logs hosts and devices and calls the experiment's
`run(config, workdir)`. Everything else is importable, so notebooks and tests call `run` directly.
"""
from __future__ import annotations

import re
import sys

from absl import app, flags, logging
import jax
from ml_collections import config_flags

from vidjax import sharding
from vidjax.experiments import backbone as backbone_experiment
from vidjax.experiments import cast as cast_experiment
from vidjax.experiments import common
from vidjax.experiments import comp as comp_experiment
from vidjax.experiments import evaluate_all as evaluate_all_experiment
from vidjax.experiments import extract as extract_experiment
from vidjax.experiments import genstate as genstate_experiment
from vidjax.experiments import grdr as grdr_experiment
from vidjax.experiments import prepare as prepare_experiment
from vidjax.experiments import retrieval as retrieval_experiment
from vidjax.experiments import stack as stack_experiment
from vidjax.experiments import vedje as vedje_experiment

# Experiment kind (config.experiment) -> run function. Plain imports, no registry magic.
EXPERIMENTS = {
    "backbone": backbone_experiment.run,
    "cast": cast_experiment.run,
    "comp": comp_experiment.run,
    "evaluate_all": evaluate_all_experiment.run,
    "extract_videoprism": extract_experiment.run,
    "genstate": genstate_experiment.run,
    "grdr": grdr_experiment.run,
    "prepare": prepare_experiment.run,
    "retrieval": retrieval_experiment.run,
    "stack": stack_experiment.run,
    "vedje": vedje_experiment.run,
}

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a config file, e.g. configs/cast_coin.py:smoke.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results, checkpoints and logs.")


def run(config, workdir: str):
  """Dispatches to the experiment named by `config.experiment`; returns its results dict."""
  if config.experiment not in EXPERIMENTS:
    raise ValueError(f"config.experiment={config.experiment!r} is not one of {sorted(EXPERIMENTS)}")
  if "seeds" in config:  # several seeds, mean ± std (e.g. `:seeds3`)
    return common.run_seeds(EXPERIMENTS[config.experiment], config, workdir)
  return EXPERIMENTS[config.experiment](config, workdir)


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
  run(_CONFIG.value, _WORKDIR.value)


def entry():
  # absl prints a flag error with its own traceback, and ml_collections raises a chained AttributeError for an
  # unknown --config.<key> (its "did you mean" hint inside): either should read as one line.
  try:
    app.run(main)
  except flags.Error as e:  # pragma: no cover - exercised through the CLI test
    print(f"vidjax: {e}", file=sys.stderr)
    sys.exit(2)
  except (AttributeError, KeyError) as e:
    if _PARSED:
      raise
    text = str(e.args[0] if e.args else e)
    key = re.search(r"([A-Za-z0-9_]+)", text.replace("\\", ""))
    hint = re.search(r'(Did you mean "[^"]+" instead of "[^"]+"\?)', text)
    print(f"vidjax: unknown config key {key.group(1) if key else text!r}" + (f"; {hint.group(1)}" if hint else ""),
          file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
  entry()
