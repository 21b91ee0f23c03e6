"""CAST on CrossTask (CAST paper §3.1, Tables 2/11, App. B).

    python -m vidjax.main --config configs/cast_crosstask.py --workdir /tmp/cast_ct
    python -m vidjax.main --config configs/cast_crosstask.py:smoke --workdir /tmp/cast_ct_smoke   # tests

Paper settings: AdamW lr 1e-4, weight decay 1e-3, batch 512, 50 epochs, tau 0.07, lambda_s 5, lambda_i 1,
L = 5. The benchmark is built from annotated videos and split 80/20 by video with seed 42 into
crosstask_train.json / crosstask_test.json; identity negatives share task and step index (falling back
to the same task), easy negatives come from other tasks (Table 9).

Data: with `data.annotations` empty the run uses the embedded SYNTHETIC procedural world and labels every
output synthetic. For real CrossTask: `--config.data.annotations=<crosstask_release folder>
--config.data.features=<feature store>`.
"""
from vidjax.defaults import cast


def get_config(arg=None):
  return cast.get_config("crosstask", arg, eval_split="test", identity_rule="task_step")
