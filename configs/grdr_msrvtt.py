"""GRDR (../shared/papers/grdr.txt) for msrvtt: multi-view semantic IDs, generative recall, dense rerank.

    python -m vidjax.main --config configs/grdr_msrvtt.py --workdir /tmp/grdr_msrvtt              # embedded SYNTHETIC world
    python -m vidjax.main --config configs/grdr_msrvtt.py:smoke --workdir /tmp/grdr_msrvtt_smoke  # seconds (tests)

The run uses the embedded SYNTHETIC polysemous world (vidjax.worlds.polysemous) and labels every output
synthetic. Defaults and deviations: vidjax/defaults/grdr.py. results.json: per setting ("inductive",
"full_corpus") methods dense / grdr / grdr_nv1 with t2v_r1/5/10, candidate_recall, num_candidates and
latency_ms per stage; "codebook"; "index_bytes_per_video".
"""
from vidjax.defaults import grdr


def get_config(arg=None):
  """`arg`: None (the defaults) or "smoke" (a tiny world, seconds on a CPU)."""
  return grdr.get_config("msrvtt", arg)
