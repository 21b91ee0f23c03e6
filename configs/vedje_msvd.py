"""VEDJE (../shared/papers/vedje.txt) on msvd: the paper's settings; configs/vedje/common.py has them and the variants.

    python -m vidjax.main --config configs/vedje_msvd.py --workdir DIR --config.data.features=STORE \
        --config.data.annotations=TEST_FILE --config.data.train_annotations=TRAIN_FILE   # a store: tokens, clip, text
    python -m vidjax.main --config configs/vedje_msvd.py:world --workdir DIR        # embedded SYNTHETIC world
    python -m vidjax.main --config configs/vedje_msvd.py:world,all --workdir DIR    # ... with all five ablation tables
    python -m vidjax.main --config configs/vedje_msvd.py:smoke --workdir DIR        # seconds (tests)
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "vedje" / "common.py")


def get_config(arg=None):
  return _common.get_config("msvd", arg)
