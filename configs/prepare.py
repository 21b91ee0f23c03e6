"""Config: prepare one dataset's feature store from its videos and release annotation files (every kind every
method reads, in one resumable run; vidjax/experiments/prepare.py says what it writes and the valid-video rule).

  python -m vidjax.main --config configs/prepare.py --workdir RUN --config.dataset=msrvtt \
      --config.data.videos=VIDEOS --config.data.annotations=MSRVTT_data.json,MSRVTT_JSFUSION_test.csv \
      --config.model.checkpoint=/ckpt/flax_lvt_base_f16r288_repeated.npz --config.model.spm_path=/ckpt/c4_en.model

The store is `RUN/features` (or `--config.store`). Datasets: youcook2, coin, crosstask, msrvtt, didemo,
activitynet, msvd, lsmdc, genstate (README "Real data" lists each one's files). `data.import_features` imports GRDR's
released features instead of extracting (msrvtt, didemo, activitynet, lsmdc; docs/real_data.md, section 4). With
`model.checkpoint` empty the weights are random and every results.json downstream says `random_init: true`.
`smoke`: a tiny random VideoPrism (36 px, 4 frames) for the plumbing tests. `rendered`: the shape
`configs/backbone_rendered.py` trains on the rendered corpus (pass its checkpoint as `model.checkpoint`).
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "prepare" / "common.py")  # the settings: configs/prepare/common.py


def get_config(arg: str | None = None):
  """`arg`: None (the paper's extraction settings), "smoke" (a tiny random VideoPrism) or "rendered"."""
  return _common.get_config(arg)
