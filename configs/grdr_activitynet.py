"""GRDR (../shared/papers/grdr.txt) on activitynet: the paper's settings; configs/grdr/common.py has them and the variants.

    python -m vidjax.main --config configs/grdr_activitynet.py:world --workdir /tmp/grdr_activitynet   # embedded SYNTHETIC world
    python -m vidjax.main --config configs/grdr_activitynet.py:smoke --workdir /tmp/grdr_smoke  # seconds (tests)
    python -m vidjax.main --config configs/grdr_activitynet.py --workdir /tmp/grdr_activitynet --config.data.features=STORE \\
        --config.data.annotations=TEST_FILE --config.data.train_annotations=TRAIN_FILE   # your data
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "grdr" / "common.py")


def get_config(arg=None):
  return _common.get_config("activitynet", arg)
