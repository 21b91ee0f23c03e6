"""GRDR (../shared/papers/grdr.txt) on activitynet: the paper's settings; vidjax/defaults/grdr.py has them and the variants.

    python -m vidjax.main --config configs/grdr_activitynet.py:world --workdir /tmp/grdr_activitynet   # embedded SYNTHETIC world
    python -m vidjax.main --config configs/grdr_activitynet.py:smoke --workdir /tmp/grdr_smoke  # seconds (tests)
"""
from vidjax.defaults import grdr


def get_config(arg=None):
  return grdr.get_config("activitynet", arg)
