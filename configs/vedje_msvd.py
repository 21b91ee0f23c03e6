"""VEDJE (../shared/papers/vedje.txt) on msvd: the paper's settings; vidjax/defaults/vedje.py has them and the variants.

    python -m vidjax.main --config configs/vedje_msvd.py --workdir DIR --config.data.features=STORE \
        --config.data.annotations=TEST_FILE --config.data.train_annotations=TRAIN_FILE   # a store: tokens, clip, text
    python -m vidjax.main --config configs/vedje_msvd.py:world --workdir DIR        # embedded SYNTHETIC world
    python -m vidjax.main --config configs/vedje_msvd.py:world,all --workdir DIR    # ... with all five ablation tables
    python -m vidjax.main --config configs/vedje_msvd.py:smoke --workdir DIR        # seconds (tests)
"""
from vidjax.defaults import vedje


def get_config(arg=None):
  return vedje.get_config("msvd", arg)
