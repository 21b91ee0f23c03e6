"""CAST on COIN (CAST paper §3.1, Tables 2/11, App. A/B).

    python -m vidjax.main --config configs/cast_coin.py --workdir /tmp/cast_coin
    python -m vidjax.main --config configs/cast_coin.py:smoke --workdir /tmp/cast_coin_smoke   # seconds, tests
    python -m vidjax.main --config configs/cast_coin.py:clip --workdir /tmp/cast_coin_clip     # CLIP-row epochs

Paper settings: AdamW lr 1e-4, weight decay 1e-3, batch 512, tau 0.07, lambda_s 5, lambda_i 1, L = 5,
Full-Ensemble grid w_v in {0..0.5}, w_p in {0.2..1.5}. Epochs: 30, the paper's VideoPrism row (Table 11,
App. A: VideoPrism / InternVideo2 / GME / Qwen3-VL features), since vidjax's backbone is VideoPrism; the
`clip` variant restores the 20 epochs of the paper's main CLIP experiments. Benchmark from the official *test* split, training on the official train split;
identity negatives share task and step id (Table 9).

Data: with `data.annotations` empty the run uses the embedded SYNTHETIC procedural world, written as a user's
files under <workdir>/world (COIN.json, a store, world_truth.json) and read like them; every output says
synthetic. For real COIN: `--config.data.annotations=.../COIN.json` (official
`{"database": ...}` or the list-of-dicts layout) and `--config.data.features=<feature store>` with
kinds `clip` and `text` (text keyed by clip id), e.g. from configs/extract_videoprism.py.
Deviation note: the partial COIN copy in ../shared/data/coin uses PDPP's 70/30 re-split, not the
official split; results on it are not comparable with the paper's.
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "cast" / "common.py")


def get_config(arg=None):
  return _common.get_config("coin", arg, eval_split="test", identity_rule="task_step")
