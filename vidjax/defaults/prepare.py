"""Preparation defaults (`configs/prepare.py`): one store per dataset from its videos and release files.

Light on purpose (no jax). The backbone section is the extraction's (`vidjax.defaults.extract`: VideoPrism LvT
base, 288 x 288); frames per clip follow each paper (`FRAMES`).
"""
from __future__ import annotations

from pathlib import Path

import ml_collections

from vidjax.defaults import common, extract

CVR = ("youcook2", "coin", "crosstask")
RETRIEVAL = ("msrvtt", "didemo", "activitynet", "msvd", "lsmdc")
DATASETS = CVR + RETRIEVAL + ("genstate",)
PARAGRAPHS = ("didemo", "activitynet")  # tested paragraph-to-video: their stores also hold each video's paragraph
# Frames per clip: CAST App. A (8 on YouCook2, 4 on COIN / CrossTask); VEDJE A.2 (T = 16) for the retrieval
# datasets (VideoComp and GRDR read the same store); GenState: VideoPrism's 16.
FRAMES = {"youcook2": 8, "coin": 4, "crosstask": 4, **{d: 16 for d in RETRIEVAL}, "genstate": 16}


def get_config(arg: str | None = None, shared: Path | None = None) -> ml_collections.ConfigDict:
  """What `configs/prepare.py` returns; `arg` may be "smoke" (a tiny random VideoPrism, seconds on CPU)."""
  c = extract.default_config()
  c.experiment = "prepare"
  c.dataset = ""             # one of DATASETS
  c.data = ml_collections.ConfigDict(dict(
      videos="",             # the dataset's video folder (searched recursively; files named by video id)
      annotations="",        # the release annotation file(s), comma-separated (CrossTask: its release folder)
  ))
  c.num_frames = 0           # 0 = the dataset's paper setting (FRAMES)
  c.save_tokens = True       # per-frame tokens: VEDJE's caches, VideoComp and GenState's VidCLIP read them
  # `smoke` and `rendered` each set the backbone's shape: one of them.
  return common.apply_variants(c, arg, {"rendered": lambda c: extract.rendered_model(c, shared),
                                       "smoke": lambda c: smoke(c, shared)}, "configs/prepare.py",
                               exclusive=(("smoke", "rendered"),))


def frames(c) -> int:
  return c.num_frames or FRAMES.get(c.dataset, 16)


def smoke(c: ml_collections.ConfigDict, shared: Path | None) -> None:
  """A tiny random VideoPrism (the extraction's smoke model, its temporal positions widened to VEDJE's 16 frames)
  at 36 px: plumbing, seconds on CPU."""
  extract.tiny_model(c, shared)
  c.model.overrides.pos_emb_shape = (16, 2, 2)
  c.batch_size = 4
  c.text_batch_size = 16
  c.progress = False
