"""What every experiment does at the end: results.json, printed tables, plots.

`results.json` always holds at least
`{"experiment", "dataset", "synthetic", "metrics": {method: {metric: value}}}`; synthetic results
say so in the file, in the printed tables and in plot titles.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Mapping, Sequence

from vidjax import io

REQUIRED_KEYS = ("experiment", "dataset", "synthetic", "metrics")


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


def write_results(workdir: str | Path, results: Mapping, tables: Sequence[str] = ()) -> Path:
  """Checks the common keys, prints `tables` and writes `<workdir>/results.json` atomically."""
  missing = [k for k in REQUIRED_KEYS if k not in results]
  if missing:
    raise ValueError(f"results lack the required keys {missing}")
  for table in tables:
    print(table, end="\n\n", flush=True)
  path = io.atomic_write_json(Path(workdir) / "results.json", dict(results))
  print(f"results written to {path}" + ("  [SYNTHETIC]" if results["synthetic"] else ""), flush=True)
  return path


def plot_context_sweep(sweep: Mapping[int, Mapping[str, float]], path: str | Path, title: str,
                       synthetic: bool) -> Path:
  """Figure 6: Acc, State Acc and Ident Acc against the context length L, saved as PNG."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  lengths = sorted(sweep)
  fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
  for key, label in (("acc", "Acc."), ("state_acc", "State Acc."), ("ident_acc", "Ident. Acc.")):
    ax.plot(lengths, [sweep[L][key] for L in lengths], marker="o", label=label)
  ax.set_xlabel("context length L")
  ax.set_ylabel("%")
  ax.set_xticks(lengths)
  ax.grid(alpha=0.3)
  ax.legend()
  ax.set_title(("SYNTHETIC: " if synthetic else "") + f"CAST vs context length, {title}", fontsize=9)
  fig.tight_layout()
  path = Path(path)
  tmp = path.with_name("." + path.name + ".tmp.png")
  fig.savefig(tmp)
  plt.close(fig)
  tmp.replace(path)
  return path
