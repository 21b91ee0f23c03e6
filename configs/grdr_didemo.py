"""GRDR (../shared/papers/grdr.txt) on didemo: the paper's settings; vidjax/defaults/grdr.py has them and the variants.

    python -m vidjax.main --config configs/grdr_didemo.py:world --workdir /tmp/grdr_didemo   # embedded SYNTHETIC world
    python -m vidjax.main --config configs/grdr_didemo.py:smoke --workdir /tmp/grdr_smoke  # seconds (tests)
"""
from vidjax.defaults import grdr


def get_config(arg=None):
  return grdr.get_config("didemo", arg)
