"""The composed retrieval stack on YouCook2: corpus-scale Consistent Video Retrieval.

    python -m vidjax.main --config configs/stack_youcook2.py --workdir /tmp/stack_yc2 \
        --config.data.annotations=../shared/data/youcook2/youcookii_annotations_trainval.json \
        --config.data.features=<store with kinds clip and text>
    python -m vidjax.main --config configs/stack_youcook2.py:smoke --workdir /tmp/stack_yc2_smoke   # seconds, tests

Without `data.annotations` the run uses the embedded SYNTHETIC procedural world, as configs/cast_youcook2.py
does, with YouCook2's rule on the world's captions, which name task and step (set by the data keys it writes). On a
user's store the plain config mines identity negatives by caption similarity (all-MiniLM-L6-v2, CAST App. B), the paper's rule; `real` names
the same and is kept for old commands.
See configs/stack_coin.py and `configs/stack/common.py`.
"""
from pathlib import Path

from vidjax.defaults.common import config_module

stack = config_module(Path(__file__).parent / "stack" / "common.py")


def get_config(arg=None):
  real = lambda c: c.data.update(identity_rule="caption_similarity")  # noqa: E731
  return stack.get_config("youcook2", arg, eval_split="val", identity_rule="caption_similarity", variants={"real": real})
