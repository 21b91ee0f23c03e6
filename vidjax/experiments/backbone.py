"""Experiment `backbone`: a release's videos + step captions -> a small VideoPrism-LvT-shaped backbone trained on its
training subset, saved as an official-format checkpoint, and how well it retrieves on the held-out subset.

    python -m vidjax.main --config configs/backbone_rendered.py --workdir RUN \
        --config.data.videos=CORPUS/youcook2/videos \
        --config.data.annotations=CORPUS/youcook2/youcookii_annotations_trainval.json

`run(config, workdir)`:
  1. reads the annotations (`data.format`: YouCook2, COIN or CrossTask) and finds each video's file by id; decodes
     every video once into its steps and itself (`vidjax.methods.backbone.pairs_of`, `num_frames` x `resolution`);
  2. trains `FactorizedVideoCLIP` at `model.overrides`' shape with `losses.grouped_infonce` (whole clips),
     `train.frame_weight` x `losses.frame_text_infonce` (single frames of step clips) and `train.identity_weight` x
     `losses.instance_infonce` through the one train loop (`<workdir>/model`, resumable);
  3. writes the video and text towers as `<workdir>/backbone.npz` (or `output`) in the official layout;
  4. reads it back through `vidjax.extract.load_model` (the loader `configs/prepare.py` uses), embeds the held-out
     subset with the extraction's own functions, and writes `<workdir>/corpus_summary.json`:
     {"synthetic", "checkpoint", "checkpoint_hash", "model", "train", "test", "skipped_videos",
      "retrieval": {"trained"|"random_init": {"step"|"video": {t2v_r1, t2v_r5, v2t_r1, v2t_r5, chance_t2v_r1,
      chance_v2t_r1, texts, clips}}}, "prepare"} -- "step" also holds the frame level, t2f_r1, t2f_r5,
     chance_t2f_r1, frames (a step caption retrieves single frames, the store's `frame_clip`:
     `vidjax.methods.backbone.retrieval_summary`); the random row is the same shape with the seeded random weights
     a store gets without a checkpoint; and results.json with the same numbers under "metrics".
"""
from __future__ import annotations

import copy
from pathlib import Path

import jax
import numpy as np

from vidjax import checkpoints, evaluate, io, train
from vidjax import extract as engine
from vidjax.data.annotations import read_annotations
from vidjax.defaults.common import bad_value, check_choice, check_positive, check_positive_int, get_key
from vidjax.sharding import barrier, is_writer
from vidjax.experiments import common
from vidjax.methods import backbone as B
from vidjax.data import provenance
from vidjax.data.video import video_finder
from vidjax.models import videoprism as vp

FORMATS = ("youcook2", "coin", "crosstask")  # releases whose annotations give timed step captions per video
RESUMABLE = ("eval.batch_size", "decode_workers", "output")
SUMMARY = "corpus_summary.json"


def validate(config) -> None:
  check_choice(config, "data.format", FORMATS)
  for key in ("data.videos", "data.annotations"):
    if not get_key(config, key):
      bad_value(key, "", "a path (the release's video folder / annotation files)")
  if not config.model.name.startswith("videoprism_lvt"):
    bad_value("model.name", config.model.name, "an LvT model (videoprism_lvt_*): the backbone needs both towers")
  if not Path(config.model.spm_path).is_file():
    bad_value("model.spm_path", config.model.spm_path, "a local SentencePiece model file")
  check_positive_int(config, ["num_frames", "resolution", "train.epochs", "train.batch_size",
                                     "eval.batch_size"])
  check_positive(config, ["train.lr", "train.tau"])
  for key in ("train.identity_weight", "train.frame_weight"):
    weight = get_key(config, key)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0:
      bad_value(key, weight, "a number >= 0")
  check_choice(config, "train.identity_positive", ("video", "clip"))


def _skipped(config, skipped: dict[str, str]) -> None:
  if skipped and not config.data.skip_missing:
    raise ValueError(f"{len(skipped)} videos have no decodable file under {config.data.videos} (e.g. "
                     f"{list(skipped.items())[:3]}); with data.skip_missing=True they are skipped and counted")
  if skipped:
    print(f"skipping {len(skipped)} videos without a decodable file: {', '.join(list(skipped)[:5])}", flush=True)


@common.precision_policy
def run(config, workdir: str) -> dict:
  """Trains the backbone, writes the checkpoint and the corpus summary; returns (and writes) the results."""
  workdir = common.start_run(config, workdir, validate, RESUMABLE)
  videos = read_annotations(config.data.format, config.data.annotations)
  train_videos = [v for v in videos if v.split == "train"]
  test_videos = [v for v in videos if v.split != "train"]
  if not train_videos or not test_videos:
    raise ValueError(f"{config.data.annotations}: the backbone needs training and held-out videos, the annotations "
                     f"have {len(train_videos)} and {len(test_videos)}")
  path_of = video_finder(config.data.videos)
  synthetic = provenance.is_rendered(config.data.videos)
  from vidjax.tokenizers.sentencepiece import SentencePieceTokenizer  # pylint: disable=g-import-not-at-top
  tokenizer = SentencePieceTokenizer(config.model.spm_path)
  model = engine.build_model(config)
  if tokenizer.vocab_size > model.vocabulary_size:
    bad_value("model.spm_path", config.model.spm_path, f"at most {model.vocabulary_size} pieces (the model's "
                     f"vocabulary_size), it has {tokenizer.vocab_size}")

  decode = dict(num_frames=config.num_frames, resolution=config.resolution, aspect=config.aspect,
                workers=config.decode_workers)
  train_pairs, skipped = B.pairs_of(train_videos, path_of, **decode)
  test_pairs, skipped_test = B.pairs_of(test_videos, path_of, **decode)
  skipped.update(skipped_test)
  _skipped(config, skipped)
  tag = "SYNTHETIC DATA: " if synthetic else ""
  print(f"{tag}backbone: {len(train_pairs)} training clips ({len(train_pairs.texts)} distinct texts) from "
        f"{len(set(train_pairs.video_ids))} videos; held out {len(test_pairs)} clips from "
        f"{len(set(test_pairs.video_ids))} videos", flush=True)

  ids, paddings = tokenizer.encode(train_pairs.texts, max_length=vp.TEXT_MAX_LEN)
  pixel_mean, pixel_std = B.pixel_stats(train_pairs.frames)
  batch_fn, gather = B.batch_rows(train_pairs, ids, paddings,
                                  partners=config.train.identity_positive if config.train.identity_weight else "")
  with common.precision(config, "train"):
    state = train.fit_epochs(name="backbone", init_fn=B.init_fn(model, config.train.tau),
                             loss_fn=B.loss_fn(model, pixel_mean=pixel_mean, pixel_std=pixel_std,
                                               identity_weight=config.train.identity_weight,
                                               frame_weight=config.train.frame_weight),
                             num_examples=len(train_pairs), batch_fn=batch_fn, gather=gather,
                             tcfg=config.train, seed=config.seed, workdir=workdir / "model",
                             description="backbone (contrastive)")
  params = jax.device_get(state.params)
  path = Path(config.output or workdir / "backbone.npz").absolute()
  if is_writer():
    checkpoints.save_npz({"params": B.fold_pixel_norm(params["model"], pixel_mean, pixel_std)}, path)
  barrier("backbone checkpoint written")

  # Read back through the loader a store's extraction uses, at extraction's precision: the summary is what
  # `configs/prepare.py` will see.
  trained = copy.deepcopy(config)
  trained.model.checkpoint = str(path)
  random_init = copy.deepcopy(config)
  random_init.model.checkpoint = ""
  retrieval = {}
  for name, cfg in (("trained", trained), ("random_init", random_init)):
    m, variables, _ = engine.load_model(cfg)
    with common.precision(config, "extract"):
      video, text, frame = B.embed(m, variables, tokenizer, test_pairs.frames, test_pairs.texts,
                                   config.eval.batch_size)
    retrieval[name] = B.retrieval_summary(video, text, test_pairs, frame)

  overrides = {k: list(v) if isinstance(v, tuple) else v for k, v in config.model.overrides.items()}
  summary = {
      "synthetic": synthetic, "checkpoint": str(path), "checkpoint_hash": checkpoints.file_hash(path),
      "model": {"name": config.model.name, "overrides": overrides, "spm_path": config.model.spm_path,
                "resolution": config.resolution, "num_frames": config.num_frames},
      "train": {"videos": len(set(train_pairs.video_ids)), "clips": len(train_pairs),
                "texts": len(train_pairs.texts), "steps": int(state.step), "tau": float(np.exp(params["log_tau"])),
                "pixel_mean": [float(x) for x in pixel_mean], "pixel_std": [float(x) for x in pixel_std]},
      "test": {"videos": len(set(test_pairs.video_ids)), "clips": len(test_pairs)},
      "skipped_videos": len(skipped), "retrieval": retrieval,
      "prepare": f"python -m vidjax.main --config configs/prepare.py:rendered --config.model.checkpoint={path}",
  }
  if is_writer():
    io.atomic_write_json(workdir / SUMMARY, summary)
  results = common.results_dict(config, dataset=config.data.format, synthetic=synthetic, metrics=retrieval,
                                path="real", checkpoint=str(path), skipped_videos={"count": len(skipped)})
  rows = {f"{name} ({kind})": row for name, kinds in retrieval.items() for kind, row in kinds.items()}
  common.write_results(workdir, results, [evaluate.format_table(
      rows, "Backbone retrieval on the held-out subset (text <-> clip, and text -> single frame of the step clips; a "
      "clip or frame is correct when its text is the query)", synthetic,
      columns=["t2v_r1", "t2v_r5", "v2t_r1", "v2t_r5", "chance_t2v_r1", "chance_v2t_r1", "clips", "t2f_r1",
               "chance_t2f_r1"])])
  return results
