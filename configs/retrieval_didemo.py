"""Stage-1 zero-shot text-video retrieval on DiDeMo: R@1/5/10, MdR, MnR in both directions.

    python -m vidjax.main --config configs/retrieval_didemo.py --workdir /tmp/retrieval_didemo          # synthetic world
    python -m vidjax.main --config configs/retrieval_didemo.py:smoke --workdir /tmp/retrieval_didemo_smoke  # seconds (tests)
    python -m vidjax.main --config configs/retrieval_didemo.py --workdir DIR \
        --config.data.annotations=<test_data.json (../shared/data/didemo)> --config.data.features=<feature store>

Benchmark: paragraph-to-video: 1,037 test videos, one paragraph each. The store holds kind `clip` (video embeddings keyed by video id) and kind `text`
(caption embeddings keyed by caption id; paragraph protocol: keyed by video id), e.g. VideoPrism-LvT
embeddings. With no store the run uses the embedded SYNTHETIC moving-object world (its test groups) and
labels every output synthetic. results.json: method `stage1`, keys t2v_r1 .. t2v_mnr and v2t_r1 .. v2t_mnr.
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "retrieval" / "common.py")


def get_config(arg=None):
  """`arg`: None (the defaults) or "smoke" (a tiny moving-object world, seconds on a CPU)."""
  return _common.get_config("didemo", arg)
