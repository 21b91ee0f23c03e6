"""The composed retrieval stack on COIN-shaped data: corpus-scale Consistent Video Retrieval (SYNTHETIC by default).

    python -m vidjax.main --config configs/stack_coin.py --workdir /tmp/stack_coin
    python -m vidjax.main --config configs/stack_coin.py:smoke --workdir /tmp/stack_coin_smoke   # seconds, tests
    python -m vidjax.main --config configs/stack_coin.py --workdir /tmp/stack_coin --config.stack.recall=grdr
    python -m vidjax.search --index /tmp/stack_coin/index "task 03 step 02" --context syn02400#000 syn02400#001

CAST's benchmark asks for the next clip among 10 candidates; here the pool is every clip of every evaluation
video. Dense recall (text -> clip cosine, K = 100) -> rerank (K = 20) -> CAST Full-Ensemble consistency with
the query's context clips (eq. 13) -> top 10. The CAST half is `configs/cast_coin.py` unchanged (its world,
benchmark, training and ensemble grid); see `configs/stack/common.py` for the stack's fields and why the rerank
stage on one-embedding-per-clip features is a pair reranker rather than VEDJE.

Data: with `data.annotations` empty, the embedded SYNTHETIC procedural world; for real COIN pass
`--config.data.annotations` and `--config.data.features` as for configs/cast_coin.py.
"""
from pathlib import Path

from vidjax.defaults.common import config_module

stack = config_module(Path(__file__).parent / "stack" / "common.py")


def get_config(arg=None):
  return stack.get_config("coin", arg, eval_split="test", identity_rule="task_step")
