"""The preparation's settings (`configs/prepare.py`): one store per dataset from its videos and release files.

Light on purpose (no jax); loaded by path (`vidjax.defaults.common.config_module`). The backbone section is the
extraction's (`configs/extract/common.py`: VideoPrism LvT base, 288 x 288); frames per clip follow each paper
(`vidjax.experiments.prepare.FRAMES`: CAST App. A, 8 on YouCook2 and 4 on COIN / CrossTask; VEDJE A.2, T = 16 on the
retrieval datasets, which VideoComp and GRDR read too; GenState: VideoPrism's 16).
"""
from __future__ import annotations

from pathlib import Path

import ml_collections

from vidjax.defaults import common

extract = common.config_module(Path(__file__).parents[1] / "extract" / "common.py")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """What `configs/prepare.py` returns; `arg` may be "smoke" (a tiny random VideoPrism, seconds on CPU) or
  "rendered" (the shape `configs/backbone_rendered.py` trains)."""
  c = extract.default_config()
  c.experiment = "prepare"
  c.dataset = ""             # youcook2, coin, crosstask, msrvtt, didemo, activitynet, msvd, lsmdc or genstate
  c.data = ml_collections.ConfigDict(dict(
      videos="",             # the dataset's video folder (searched recursively; files named by video id)
      annotations="",        # the release annotation file(s), comma-separated (CrossTask: its release folder)
      import_features="",    # GRDR's released InternVideo2 features instead of extracting: the folder holding
                             # InternVideo2/<dataset>/ (download_features.py --features-dir); data.videos stays ''
      import_frames="",      # with import_features: the X-Pool video features folder (<video id>.npz files)
  ))
  c.num_frames = 0           # 0 = the dataset's paper setting (FRAMES)
  c.save_tokens = True       # per-frame tokens: VEDJE's caches, VideoComp and GenState's VidCLIP read them
  # `smoke` and `rendered` each set the backbone's shape: one of them.
  return common.apply_variants(c, arg, {"rendered": extract.rendered_model, "smoke": smoke}, "configs/prepare.py",
                               exclusive=(("smoke", "rendered"),))


def smoke(c: ml_collections.ConfigDict) -> None:
  """A tiny random VideoPrism (the extraction's smoke model, its temporal positions widened to VEDJE's 16 frames)
  at 36 px: plumbing, seconds on CPU."""
  extract.tiny_model(c)
  c.model.overrides.pos_emb_shape = (16, 2, 2)
  c.batch_size = 4
  c.text_batch_size = 16
  c.progress = False
