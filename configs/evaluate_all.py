"""Every model vidjax trains on every benchmark it builds: one comparison table (markdown + JSON).

    python -m vidjax.main --config configs/evaluate_all.py --workdir /tmp/all       # trains the embedded
                                                                                    # worlds smoke-sized, minutes
    python -m vidjax.main --config configs/evaluate_all.py --workdir /tmp/all \
        --config.workdirs="('/tmp/cast_coin', '/tmp/vedje_msrvtt')"                 # compare finished runs

Writes `<workdir>/comparison.json` (model -> benchmark -> metrics, or {"n/a": reason}), `comparison.md` and
`results.json`. Settings: configs/evaluate_all/common.py.
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "evaluate_all" / "common.py")


def get_config(arg=None):
  """`arg`: None (every method's embedded world) or "smoke" (only the rendered GenState world; for tests)."""
  return _common.get_config(arg)
