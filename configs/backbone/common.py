"""The backbone's settings (`configs/backbone_rendered.py`): a small VideoPrism-LvT-shaped model trained contrastively on a
CVR-format release's own clips and captions (`vidjax.methods.backbone`), saved in the official checkpoint format.

Light on purpose (no jax); loaded by path (`vidjax.defaults.common.config_module`). Not a paper's method: VideoPrism's own pretraining (video-text contrastive on billions of
pairs, then masked distillation) is out of reach offline; this is the stand-in that gives the rendered corpus features
that mean something, trained as the LvT model's contrastive stage is (symmetric InfoNCE with a learnable
temperature, CLIP's initial 0.07; plus a per-frame image-text term, `train.frame_weight`) at a size that trains in CPU
minutes.
"""
from __future__ import annotations

from pathlib import Path

import ml_collections

from vidjax.defaults import common

extract = common.config_module(Path(__file__).parents[1] / "extract" / "common.py")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """What `configs/backbone_rendered.py` returns; `arg` may be "smoke" (the extraction's tiny model, a few steps)."""
  c = ml_collections.ConfigDict()
  c.experiment = "backbone"
  c.seed = 0
  c.precision = common.precision_section()  # matmul precision per phase (README "Precision")
  c.model = extract.default_config().model  # the extraction's model section: what configs/prepare.py will load
  c.resolution = 0
  extract.rendered_model(c)
  c.data = ml_collections.ConfigDict(dict(
      videos="",             # the release's video folder (files found by video id, recursively)
      annotations="",        # its annotation file(s): training and held-out subsets
      format="youcook2",     # youcook2, coin or crosstask: a release with timed step captions per video
      skip_missing=True,     # a video without a decodable file is skipped and counted (False: an error)
  ))
  c.num_frames = 8           # frames per clip (every step and every whole video); the store may use more
  c.aspect = "squash"
  c.decode_workers = 2
  c.train = ml_collections.ConfigDict(dict(
      epochs=8, batch_size=64, lr=5e-4, weight_decay=0.05, tau=0.07,
      # x losses.instance_infonce: a clip's embedding keeps which video it is from (half of each batch is another
      # clip of the first half's videos). Real VideoPrism embeddings keep a video's scene; the caption term alone
      # does not ask for it, and without it a step clip's nearest other-step clip of its task came from its own
      # video 2.9% of the time (chance 2.2%; the tokens: 73%), so CAST's context had nothing to carry. 0.1 keeps
      # it (97%) at 2.4 points of held-out step R@1; 1.0 kept 99.8% at 8.5 points (BENCHMARKS.md, seed 0).
      identity_weight=0.1,
      # the instance term's positives: "video" (another clip of the same video: the default above) or "clip" (the
      # same clip shifted by a few pixels: nothing pulls a video's clips together). On the rendered corpus (seed 0)
      # "clip" lifts GenState's VidCLIP Acc_tri from 56.5 to 77.5 but keeps the video only 7% of the time, and CAST
      # falls to its zero-shot (docs/benchmarks_history.md, "The whole real path in one go")
      identity_positive="video",
      # x losses.frame_text_infonce: each single frame of a step clip against the batch's step captions (CLIP's
      # image-text loss beside the clip-text one), so that the store's `frame_clip` (the pooler on one frame, what
      # X-Pool and CLIP4Clip attend over) lies in the text space; whole-video rows, whose frames show several steps,
      # are left out. 0.5: half the clip term, so the whole clip's embedding (`clip`, every other method's input)
      # stays the main objective while every frame gets a text gradient of its own; 0 is exactly the loss without it.
      frame_weight=0.5,
      checkpoint_every=200, log_every=20, progress=True))
  c.eval = ml_collections.ConfigDict(dict(batch_size=64))
  c.output = ""              # the checkpoint; '' = <workdir>/backbone.npz
  return common.apply_variants(c, arg, {"smoke": smoke}, "configs/backbone_rendered.py")


def smoke(c: ml_collections.ConfigDict) -> None:
  """The extraction's tiny model (width 32, 36 px), a few steps: plumbing, seconds on CPU."""
  extract.tiny_model(c)
  c.model.overrides.pos_emb_shape = (16, 2, 2)
  c.num_frames = 4
  c.decode_workers = 1
  c.train.update(epochs=1, batch_size=16, checkpoint_every=4, log_every=2, progress=False)
  c.eval.batch_size = 16
