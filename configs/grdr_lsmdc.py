"""GRDR (../shared/papers/grdr.txt) on lsmdc: the paper's settings; vidjax/defaults/grdr.py has them and the variants.

    python -m vidjax.main --config configs/grdr_lsmdc.py:world --workdir /tmp/grdr_lsmdc   # embedded SYNTHETIC world
    python -m vidjax.main --config configs/grdr_lsmdc.py:smoke --workdir /tmp/grdr_smoke  # seconds (tests)
"""
from vidjax.defaults import grdr


def get_config(arg=None):
  return grdr.get_config("lsmdc", arg)
