"""CAST on CrossTask (CAST paper §3.1, Tables 2/11, App. B).

    python -m vidjax.main --config configs/cast_crosstask.py --workdir /tmp/cast_ct
    python -m vidjax.main --config configs/cast_crosstask.py:smoke --workdir /tmp/cast_ct_smoke   # tests

Paper settings: AdamW lr 1e-4, weight decay 1e-3, batch 512, 50 epochs, tau 0.07, lambda_s 5, lambda_i 1,
L = 5. The benchmark is built from annotated videos and split 80/20 by video with seed 42 into
crosstask_train.json / crosstask_test.json; identity negatives share task and step index (falling back
to the same task), easy negatives come from other tasks (Table 9).

Data: with `data.annotations` empty the run uses the embedded SYNTHETIC procedural world, written as a CrossTask
release (tasks_primary.txt, videos.csv, annotations/) + a store under <workdir>/world and read like a user's (so
its videos are split 80/20 with seed 42 too); every output says synthetic. For real CrossTask: `--config.data.annotations=<crosstask_release folder>
--config.data.features=<feature store>`.
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "cast" / "common.py")


def get_config(arg=None):
  return _common.get_config("crosstask", arg, eval_split="test", identity_rule="task_step")
