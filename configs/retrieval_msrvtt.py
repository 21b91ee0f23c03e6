"""Stage-1 zero-shot text-video retrieval on MSR-VTT 1k-A: R@1/5/10, MdR, MnR in both directions.

    python -m vidjax.main --config configs/retrieval_msrvtt.py --workdir /tmp/retrieval_msrvtt          # synthetic world
    python -m vidjax.main --config configs/retrieval_msrvtt.py:smoke --workdir /tmp/retrieval_msrvtt_smoke  # seconds (tests)
    python -m vidjax.main --config configs/retrieval_msrvtt.py --workdir DIR \
        --config.data.annotations=<MSRVTT_JSFUSION_test.csv (../shared/data/msrvtt; semicolon- or comma-delimited) or MSRVTT_data.json with --config.data.video_list> --config.data.features=<feature store>

Benchmark: 1,000 test videos, one caption each. The store holds kind `clip` (video embeddings keyed by video id) and kind `text`
(caption embeddings keyed by caption id; paragraph protocol: keyed by video id), e.g. VideoPrism-LvT
embeddings. With no store the run uses the embedded SYNTHETIC moving-object world (its test groups) and
labels every output synthetic. results.json: method `stage1`, keys t2v_r1 .. t2v_mnr and v2t_r1 .. v2t_mnr.
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "retrieval" / "common.py")


def get_config(arg=None):
  """`arg`: None (the defaults) or "smoke" (a tiny moving-object world, seconds on a CPU)."""
  return _common.get_config("msrvtt", arg)
