"""Config: extract VideoPrism features (CAST App. A, Table 7) into a feature store.

Run:

  python -m vidjax.main --config configs/extract_videoprism.py --workdir DIR \
      --config.data.videos=/data/youcook2/raw_videos \
      --config.data.annotations=../shared/data/youcook2/youcookii_annotations_trainval.json \
      --config.data.format=youcook2 \
      --config.model.checkpoint=/ckpt/flax_lvt_base_f16r288_repeated.npz \
      --config.model.spm_path=/ckpt/c4_en.model

  python -m vidjax.main --config configs/extract_videoprism.py:smoke --workdir /tmp/extract_smoke

Defaults follow the paper's VideoPrism setting: the LvT base checkpoint, 8 frames per clip
(YouCook2; use 4 for COIN / CrossTask), 288x288, pooled LvT clip embeddings + mean-pooled encoder
tokens, L2-normalized. With `model.checkpoint` empty the weights are random (the manifest and
results say `random_init: true`); the official file is
`vidjax.models.videoprism.CHECKPOINTS[model.name]`. `smoke` runs a tiny random model on the real
demo mp4 at 36 px with the VideoPrism test SentencePiece model, in seconds on CPU.
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "extract" / "common.py")  # the settings: configs/extract/common.py


def get_config(arg: str | None = None):
  """`arg`: None (the defaults) or "smoke" (a tiny random model on the real demo mp4)."""
  return _common.get_config(arg)
