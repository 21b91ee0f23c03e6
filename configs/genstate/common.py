"""GenState-AI: the benchmark's protocol and the models vidjax evaluates on it, in one file
(../shared/papers/genstate_ai.txt §4.3, §5.1).

`configs/genstate_rendered.py` loads this file (`vidjax.defaults.common.config_module`); `vidjax.experiments.genstate`
runs the result. Light on purpose (no jax, no flax): loading a config is instant.

GenState-AI is a benchmark, not a model: its protocol is §4.3 (R@1/5/10, Acc_temp, Acc_sem, Acc_tri, the
relative-order histogram) over the candidate pools of §5.1. Its clips are not released, so the default run renders
its own (`vidjax.worlds.rendered`, SYNTHETIC: the world writes its mp4 clips, GenState metadata files and a feature
store under `<workdir>/world`, and the run reads them as it reads a user's) and evaluates

  * `zero_shot`: an order-blind dual encoder -- the store's `data.video_kind` per clip against its `data.text_kind`
    per query: on the rendered world the frame mean of the stand-in backbone's patch tokens against the bag of the
    prompt's colour words (the stand-in space's counterpart of the moving-object world's bag-of-words baseline), or
    VideoPrism's LvT clip and text embeddings when a checkpoint is given;
  * `vidclip`: an order-aware model trained on the training triplets: VideoComp's VidCLIP (learned temporal
    positions + attention pooling over the per-frame patch tokens; a small random-init text tower over
    all-MiniLM-L6-v2's WordPiece vocabulary) with NegCLIP hard negatives -- each training clip's positive is its own
    prompt and its negatives the prompts of the other two clips of its triplet, which share its batch
    (`train.group`).

Why VidCLIP and not VEDJE as the order-aware model: GenState scores a prompt against every clip of a pool with
one score per (prompt, clip), which a dual encoder gives directly; VEDJE is a reranker of a stage-1 shortlist.

Deviations: the backbone is the STAND-IN pixel-statistics model (`vidjax.models.pixelstats`) unless
`extract.model.checkpoint` names a VideoPrism checkpoint; the subsets are the world's four kinds of change
(Position, Quantity, Actor, Relation) instead of the paper's content groups (Home, Toy, Cartoon,
Manipulation), which a user's own metadata file can name freely.

Variants (`configs/genstate_rendered.py:<variant>`): `smoke` (a tiny world, seconds on a CPU, for tests).
"""
from __future__ import annotations

import dataclasses

import ml_collections

from vidjax.defaults import common
from vidjax.worlds.rendered import RenderedWorldConfig


def default_config(name: str = "genstate") -> ml_collections.ConfigDict:
  """The shared GenState config: the rendered world by default, a user's benchmark with `data.*` set."""
  c = ml_collections.ConfigDict()
  c.experiment = "genstate"
  c.name = name
  c.seed = 0  # drives the world, the model's initialization and the data order
  c.precision = common.precision_section()  # matmul precision per phase (README "Precision")
  c.strict = common.STRICT  # True: a batch size / budget larger than the data is an error, not clipped
  # A user's own benchmark: a GenState metadata file (vidjax.data.genstate) + a feature store holding `video_kind`
  # for every video id and `text_kind` for every query id (e.g. VideoPrism LvT `clip` and `text`). Left empty: the
  # rendered world writes both (and sets these keys) under <workdir>/world.
  c.data = ml_collections.ConfigDict(dict(
      metadata="", features="", video_kind="clip", text_kind="text",
      train_metadata="",  # a user's training triplets (their videos' `tokens` in the store): VidCLIP trains on them
      name="",            # how results.json and tables name the benchmark ("": the metadata file's path / name)
      skip_missing=True))  # queries with a video the store lacks are skipped (counted, listed in skipped_videos.txt)
  # 800 training queries per category (9,600 training clips): fewer and the model memorizes its training triplets
  # (BENCHMARKS.md, "GenState", has the measurements).
  c.world = ml_collections.ConfigDict({**dataclasses.asdict(RenderedWorldConfig()), "num_train": 800})
  # How the world's clips are extracted (`vidjax.extract.extract_into`; frames and resolution are the world's).
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
      # `steps` is at most this many passes over the training items (`clip_to_data`; 0: no limit): the most the
      # measured runs trained for and still generalized. The rendered corpus's 1,600 triplets (4,800 clips) train
      # 2,500 x 48 = 25 passes and lead the zero-shot by 6.5-20 Acc_tri on three seeds; at 400 triplets the same
      # steps were 100 passes, memorized, and fell below it on seed 0 (BENCHMARKS.md, "The whole real path on the v2
      # corpus"); the world trains 12.5. A user's few dozen triplets then train 25 passes, not thousands.
      max_passes=25.0,
      checkpoint_every=200, log_every=100, progress=True))
  c.eval = ml_collections.ConfigDict(dict(chunk=256))
  c.progress = True
  return c


def smoke(c: ml_collections.ConfigDict) -> None:
  """A tiny rendered world, seconds on a CPU (tests)."""
  c.world.update(num_train=2, num_test=3, frames=8, hold=2)
  c.model.update(frames=8, width=32, pool_queries=4, pool_heads=2, pool_mlp=32, embed_dim=32, text_hidden=32,
                 text_heads=2, text_mlp=32, text_layers=1)
  c.train.update(batch_size=6, steps=4, warmup_steps=1, checkpoint_every=2, log_every=2, progress=False)
  c.extract.update(batch_size=8)
  c.eval.update(chunk=16)
  c.progress = False


VARIANTS = {"smoke": smoke}


def get_config(arg: str | None = None, where: str = "configs/genstate_rendered.py") -> ml_collections.ConfigDict:
  """The default config with the variants of `arg` ("smoke") applied."""
  return common.apply_variants(default_config(), arg, VARIANTS, where)
