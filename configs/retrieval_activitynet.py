"""Stage-1 zero-shot text-video retrieval on ActivityNet Captions: R@1/5/10, MdR, MnR in both directions.

    python -m vidjax.main --config configs/retrieval_activitynet.py --workdir /tmp/retrieval_activitynet          # synthetic world
    python -m vidjax.main --config configs/retrieval_activitynet.py:smoke --workdir /tmp/retrieval_activitynet_smoke  # seconds (tests)
    python -m vidjax.main --config configs/retrieval_activitynet.py --workdir DIR \
        --config.data.annotations=<val_1.json (../shared/data/activitynet_captions)> --config.data.features=<feature store>

Benchmark: paragraph-to-video on val_1: 4,917 videos. The store holds kind `clip` (video embeddings keyed by video id) and kind `text`
(caption embeddings keyed by caption id; paragraph protocol: keyed by video id), e.g. VideoPrism-LvT
embeddings. With no store the run uses the embedded SYNTHETIC moving-object world (its test groups) and
labels every output synthetic. results.json: method `stage1`, keys t2v_r1 .. t2v_mnr and v2t_r1 .. v2t_mnr.
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "retrieval" / "common.py")


def get_config(arg=None):
  """`arg`: None (the defaults) or "smoke" (a tiny moving-object world, seconds on a CPU)."""
  return _common.get_config("activitynet", arg)
