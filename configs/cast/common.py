"""CAST: the paper's settings in one file (../shared/papers/cast.txt Tables 10-11, App. B).

`configs/cast_<dataset>.py` load this file (`vidjax.defaults.common.config_module`) and fill in a few
dataset-specific values; `vidjax.experiments.cast` runs the result. Light on purpose (no jax, no flax): loading a
config is instant.

    AdamW lr 1e-4, weight decay 1e-3, batch 512 (Table 11); tau 0.07, lambda_s 5, lambda_i 1 (eq. 6-9);
    L = 5 context clips, 8 cross-attention heads, Path-1 dropout 0.1 (Tables 10-11);
    the Full-Ensemble grid w_v in {0, 0.1, .., 0.5}, w_p in {0.2, 0.3, .., 1.5}, chosen on held-out training
    videos only (App. B "Inference Details").

Variants (`configs/cast_<dataset>.py:<variant>[,<variant>]`): `clip` (the paper's CLIP-feature epochs), `smoke`
(seconds on a CPU, for tests) and the dataset's own (`real` for YouCook2).
"""
from __future__ import annotations

import dataclasses

import ml_collections

from vidjax.defaults import common
from vidjax.worlds.procedural import ProceduralWorldConfig

# Training epochs (Table 11 / App. B): the VideoPrism rows are vidjax's defaults (its backbone);
# the CLIP rows (the paper's main experiments) are the `clip` variant.
EPOCHS = {"videoprism": {"youcook2": 30, "coin": 30, "crosstask": 50},
          "clip": {"youcook2": 30, "coin": 20, "crosstask": 50}}


def default_config(*, dataset: str, epochs: int, eval_split: str, identity_rule: str) -> ml_collections.ConfigDict:
  """Shared CAST config; `configs/cast_<dataset>.py` fill in the dataset-specific values."""
  c = ml_collections.ConfigDict()
  c.experiment = "cast"
  c.name = f"cast_{dataset}"
  c.seed = 0  # drives the world, splits, negative sampling, initialization and data order
  c.precision = common.precision_section()  # matmul precision per phase (README "Precision")
  c.strict = common.STRICT  # True: a batch size / budget larger than the data is an error, not clipped
  c.dataset = dataset
  c.data = ml_collections.ConfigDict(dict(
      world="first_order",     # synthetic world when annotations == "": first_order | history | history_control
      annotations="",          # annotation file (YouCook2/COIN) or release folder (CrossTask); "" = synthetic world,
                               # written as this dataset's release files + a store under <workdir>/world
      features="",             # feature store directory (vidjax.data.features); required with annotations
      clip_kind="clip",        # store kind of clip embeddings (VideoPrism LvT: "clip")
      text_kind="text",        # store kind of caption embeddings, keyed by clip id
      train_split="train",
      eval_split=eval_split,
      heldout_fraction=0.1,    # of training videos, for Full-Ensemble selection only (App. B)
      identity_rule=identity_rule,
      minilm_dir="",           # all-MiniLM-L6-v2 folder for caption_similarity ("" = the installed package)
      crosstask_test_fraction=0.2,
      crosstask_split_seed=42,  # paper App. B: 80/20 video-disjoint split with seed 42
      skip_missing=True,        # skip videos without (valid) features before building the benchmark: counted and
                                # listed in <workdir>/skipped_videos.txt; False: a missing video is an error
      available_videos="",      # or: a file of available video ids, one a line (the paper's valid-file rule)
      source="store",          # or "tfds": records + embeddings from a built VidjaxCvr dataset (data.tfds)
      tfds="",                 # with source="tfds": <data_dir>/vidjax_cvr/<config>/<version>
      memory_budget_mb=4096.0,  # feature kinds larger than this stream from the store (vidjax.data.pipeline)
  ))
  c.world = ml_collections.ConfigDict(dataclasses.asdict(ProceduralWorldConfig()))
  c.model = ml_collections.ConfigDict(dict(
      context_len=5,            # L (Table 11)
      num_heads=8,              # cross-attention heads (Table 10)
      dropout_rate=0.1,         # Path-1 dropout (Table 10)
      residual_init_std=1e-3,   # init std of the residual branches' last layers; 0 = Flax default (see README)
      compute_dtype="float32",  # or "bfloat16" (params and optimizer state stay float32)
      late_fusion_alpha=1.0,    # heuristic late fusion S = A + alpha * B (the paper gives no alpha)
      late_fusion_hidden=64,
  ))
  c.train = ml_collections.ConfigDict(dict(
      epochs=epochs, batch_size=512, lr=1e-4, weight_decay=1e-3,  # Table 11
      tau=0.07, lambda_s=5.0, lambda_i=1.0,                          # eq. 6-9
      num_state_negatives=3, num_identity_negatives=3,
      zero_negatives_in_loss=True,  # App. B: missing negatives are zero vectors (kept in the loss)
      log_every=50, checkpoint_every=1000, progress=True,
  ))
  c.eval = ml_collections.ConfigDict(dict(
      w_v_grid=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5),  # App. B: the Full Ensemble's w_v ...
      w_p_grid=tuple(round(0.2 + 0.1 * i, 1) for i in range(14)),  # ... and w_p in {0.2, 0.3, .., 1.5}
      chunk=1024,               # queries scored per jitted call
  ))
  c.sweep = ml_collections.ConfigDict(dict(context_lengths=(0, 1, 2, 3, 4, 5)))  # Figure 6
  return c


def smoke(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Shrinks a CAST config to seconds on a CPU (tests): tiny world, few steps, L in {0, 1, 2}."""
  c.world.update(num_tasks=6, min_steps=4, max_steps=6, num_train_videos=160, num_eval_videos=40, dim=32)
  c.model.context_len = 2
  c.train.update(epochs=2, batch_size=64, log_every=5, progress=False)
  c.eval.chunk = 128
  c.sweep.context_lengths = (0, 1, 2)
  return c


def known_variants(dataset: str, extra: dict | None = None) -> dict:
  """The variants of `configs/cast_<dataset>.py`: `smoke` (seconds on a CPU, for tests), `clip` (the paper's
  CLIP-feature epochs) and any dataset-specific ones in `extra` ({name: function(config) -> None}), in the order
  they apply whatever their order in `arg` (`common.apply_variants`): `smoke` last, so `smoke,clip` is smoke-sized."""
  return {"clip": lambda cfg: cfg.train.update(epochs=EPOCHS["clip"][dataset]), **(extra or {}), "smoke": smoke}


def get_config(dataset: str, arg: str | None, *, eval_split: str, identity_rule: str,
               variants: dict | None = None) -> ml_collections.ConfigDict:
  """What `configs/cast_<dataset>.py` return: the defaults plus the comma-separated variants in `arg`."""
  c = default_config(dataset=dataset, epochs=EPOCHS["videoprism"][dataset], eval_split=eval_split,
                     identity_rule=identity_rule)
  return common.apply_variants(c, arg, known_variants(dataset, variants), f"configs/cast_{dataset}.py")
