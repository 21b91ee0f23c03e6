"""GenState-AI experiment defaults (`configs/genstate_rendered.py`): jax-free, instant to load.

GenState-AI (../shared/papers/genstate_ai.txt) is a benchmark, not a model: its protocol is §4.3 (R@1/5/10,
Acc_temp, Acc_sem, Acc_tri, the relative-order histogram) over the candidate pools of §5.1. Its clips are
not released, so the default run renders its own (`vidjax.worlds.rendered`, SYNTHETIC) and evaluates

  * `zero_shot`: an order-blind dual encoder -- the frame mean of the backbone's patch tokens against the
    bag of the prompt's colour words (the stand-in space's counterpart of the moving-object world's
    bag-of-words baseline), or VideoPrism's LvT clip and text embeddings when a checkpoint is given;
  * `vidclip`: an order-aware model trained on the world's training prompts: VideoComp's VidCLIP (learned
    temporal positions + attention pooling over the per-frame patch tokens; a small random-init text tower
    over all-MiniLM-L6-v2's WordPiece vocabulary) with NegCLIP hard negatives -- each training clip's
    positive is its own prompt and its negatives the prompts of the other two clips of its triplet, which
    share its batch (`train.group`).

Why VidCLIP and not VEDJE as the order-aware model: GenState scores a prompt against every clip of a pool with
one score per (prompt, clip), which a dual encoder gives directly; VEDJE is a reranker of a stage-1 shortlist.

Deviations: the backbone is the STAND-IN pixel-statistics model (`vidjax.models.pixelstats`) unless
`extract.model.checkpoint` names a VideoPrism checkpoint; the subsets are the world's four kinds of change
(Position, Quantity, Actor, Relation) instead of the paper's content groups (Home, Toy, Cartoon,
Manipulation), which a user's own metadata file can name freely.
"""
from __future__ import annotations

import dataclasses

import ml_collections

from vidjax.defaults import common
from vidjax.worlds.rendered import RenderedWorldConfig

METHODS = ("zero_shot", "vidclip")
METRICS = ("r1", "r5", "r10", "acc_temp", "acc_sem", "acc_tri")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """What `configs/genstate_rendered.py` returns; `arg` may be "smoke" (a tiny world, seconds; for tests)."""
  c = ml_collections.ConfigDict()
  c.experiment = "genstate"
  c.name = "genstate_rendered"
  c.seed = 0
  c.precision = common.precision_section()  # matmul precision per phase (README "Precision")
  # A user's own benchmark: a GenState metadata file (vidjax.data.genstate) + a feature store holding `video_kind`
  # for every video id and `text_kind` for every query id (e.g. VideoPrism LvT `clip` and `text`): zero-shot only.
  c.data = ml_collections.ConfigDict(dict(
      metadata="", features="", video_kind="clip", text_kind="text",
      train_metadata="",  # a user's training triplets (their videos' `tokens` in the store): VidCLIP trains on them
      skip_missing=True))  # queries with a video the store lacks are skipped (counted, listed in skipped_videos.txt)
  # 800 training queries per category (9,600 training clips): fewer and the model memorizes its training triplets
  # (BENCHMARKS.md, "GenState", has the measurements).
  c.world = ml_collections.ConfigDict({**dataclasses.asdict(RenderedWorldConfig()), "num_train": 800})
  c.extract = ml_collections.ConfigDict(dict(
      seed=0,
      model=ml_collections.ConfigDict(dict(
          name="pixel_stats",   # the STAND-IN backbone; "videoprism_lvt_public_v1_base" with a checkpoint
          checkpoint="",        # a VideoPrism LvT .npz: extract with VideoPrism instead of the stand-in
          spm_path="",          # its SentencePiece model (prompts through the LvT text tower)
          fprop_dtype="float32",
          overrides=ml_collections.ConfigDict(dict(grid=4)))),
      batch_size=16, text_batch_size=64, decode_workers=2, store_dtype="float32"))
  c.model = ml_collections.ConfigDict(dict(
      frames=16, width=64, pool_queries=16, pool_heads=4, pool_mlp=128, embed_dim=64,
      init="random",            # "minilm": the real all-MiniLM-L6-v2 text tower (needs its shape below) | "lvt"
      minilm_dir="", lvt_checkpoint="", spm_path="",   # "lvt": an official LvT .npz and its SentencePiece model
      text_hidden=64, text_layers=2, text_heads=4, text_mlp=128, max_text_len=32,
      init_temperature=0.07, dropout_rate=0.1, dtype="float32",
      frame_input="frame",      # "frame": each frame's patch tokens concatenated (one token per frame) | "patches"
      standardize=True))        # z-score every input feature over the training clips
  c.train = ml_collections.ConfigDict(dict(
      batch_size=48,            # 16 triplets of 3 clips
      group=3, steps=2500, lr=5e-4, weight_decay=1e-4, warmup_steps=50, mode="negclip", lam=10.0, levels=(1, 1),
      checkpoint_every=200, log_every=100, progress=True))
  c.eval = ml_collections.ConfigDict(dict(chunk=256))
  c.progress = True
  return common.apply_variants(c, arg, {"smoke": smoke}, "configs/genstate_rendered.py")


def smoke(c: ml_collections.ConfigDict) -> None:
  """A tiny rendered world, seconds on a CPU (tests)."""
  c.world.update(num_train=2, num_test=3, frames=8, hold=2)
  c.model.update(frames=8, width=32, pool_queries=4, pool_heads=2, pool_mlp=32, embed_dim=32, text_hidden=32,
                 text_heads=2, text_mlp=32, text_layers=1)
  c.train.update(batch_size=6, steps=4, warmup_steps=1, checkpoint_every=2, log_every=2, progress=False)
  c.extract.update(batch_size=8)
  c.eval.update(chunk=16)
  c.progress = False
