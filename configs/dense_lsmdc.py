"""Dense baselines (CLIP4Clip meanP / seqTransf, X-Pool, the backbone's cosine) on lsmdc: the papers' settings;
configs/dense/common.py has them and the variants.

    python -m vidjax.main --config configs/dense_lsmdc.py --workdir DIR --config.data.features=STORE \
        --config.data.annotations=TEST_FILE --config.data.train_annotations=TRAIN_FILE   # a store: tokens, clip, text
    python -m vidjax.main --config configs/dense_lsmdc.py:world --workdir DIR        # embedded SYNTHETIC world
    python -m vidjax.main --config configs/dense_lsmdc.py:smoke --workdir DIR        # seconds (tests)
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "dense" / "common.py")


def get_config(arg=None):
  return _common.get_config("lsmdc", arg)
