"""VEDJE (../shared/papers/vedje.txt) on activitynet: cached joint reranking of the stage-1 top K, both directions.

    python -m vidjax.main --config configs/vedje_activitynet.py --workdir /tmp/vedje_activitynet              # synthetic world: main + cache-structure and prior ablations
    python -m vidjax.main --config configs/vedje_activitynet.py:all --workdir /tmp/vedje_activitynet_all      # all five ablation tables
    python -m vidjax.main --config configs/vedje_activitynet.py:fast --workdir /tmp/vedje_activitynet_fast    # the main model only
    python -m vidjax.main --config configs/vedje_activitynet.py:smoke --workdir /tmp/vedje_activitynet_smoke  # seconds (tests)

With `data.features` empty the run uses the embedded SYNTHETIC moving-object world and labels every output
synthetic. Real data: `--config.data.features=<store with kinds tokens [16, 256, 768], clip, text>`,
`--config.data.annotations=<test file>` and `--config.data.train_annotations=<training file>` (see
configs/retrieval_activitynet.py for the file layouts). Defaults and deviations: vidjax/defaults/vedje.py
(the reranker starts from all-MiniLM-L6-v2, 6 layers, instead of the paper's MiniLM-L12, which is not
available offline). results.json: methods `stage1` and `vedje` (t2v_r1 .. v2t_r10), "ablations",
"cache_bytes".
"""
from vidjax.defaults import vedje


def get_config(arg=None):
  """`arg`: None (the defaults), "fast" (no ablations), "all" (every ablation table) or "smoke" (a tiny world, seconds on a CPU)."""
  return vedje.get_config("activitynet", arg)
