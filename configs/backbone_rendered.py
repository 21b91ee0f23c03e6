"""Config: train a small VideoPrism-shaped backbone on the rendered release corpus and save it as an official-format
checkpoint that `configs/prepare.py:rendered` loads (`--config.model.checkpoint=RUN/backbone.npz`).

    python -m vidjax.worlds.release --root CORPUS --size full                  # the SYNTHETIC corpus (CPU minutes)
    python -m vidjax.main --config configs/backbone_rendered.py --workdir RUN \
        --config.data.videos=CORPUS/youcook2/videos \
        --config.data.annotations=CORPUS/youcook2/youcookii_annotations_trainval.json

Trains on the training subset's steps (segment <-> caption) and whole videos (video <-> paragraph), then reads the
checkpoint back through the official loader and writes `RUN/corpus_summary.json`: text <-> clip R@1 / R@5 (and a
step caption -> single frame R@1 / R@5) on the held-out subset with the trained and with a random backbone, so a reader
sees how good the features are before any method's number. `smoke`: the extraction's tiny model for a few steps
(tests). Settings: configs/backbone/common.py.
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "backbone" / "common.py")


def get_config(arg=None):
  """`arg`: None (the rendered corpus's backbone) or "smoke"."""
  return _common.get_config(arg)
