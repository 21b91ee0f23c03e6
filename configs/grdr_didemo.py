"""GRDR (../shared/papers/grdr.txt) on didemo: the paper's settings; configs/grdr/common.py has them and the variants.

    python -m vidjax.main --config configs/grdr_didemo.py:world --workdir /tmp/grdr_didemo   # embedded SYNTHETIC world
    python -m vidjax.main --config configs/grdr_didemo.py:smoke --workdir /tmp/grdr_smoke  # seconds (tests)
    python -m vidjax.main --config configs/grdr_didemo.py --workdir /tmp/grdr_didemo --config.data.features=STORE \\
        --config.data.annotations=TEST_FILE --config.data.train_annotations=TRAIN_FILE   # your data
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "grdr" / "common.py")


def get_config(arg=None):
  return _common.get_config("didemo", arg)
