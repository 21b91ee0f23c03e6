"""Every model vidjax trains on every benchmark it builds: one comparison table (markdown + JSON).

    python -m vidjax.main --config configs/evaluate_all.py --workdir /tmp/all       # trains the embedded
                                                                                    # worlds smoke-sized, minutes
    python -m vidjax.main --config configs/evaluate_all.py --workdir /tmp/all \
        --config.workdirs="('/tmp/cast_coin', '/tmp/vedje_msrvtt')"                 # compare finished runs

Writes `<workdir>/comparison.json` (model -> benchmark -> metrics, or {"n/a": reason}), `comparison.md` and
`results.json`. Defaults: vidjax/defaults/evaluate_all.py.
"""
from vidjax.defaults import evaluate_all


def get_config(arg=None):
  """`arg`: None (every method's embedded world) or "smoke" (only the rendered GenState world; for tests)."""
  return evaluate_all.get_config(arg)
