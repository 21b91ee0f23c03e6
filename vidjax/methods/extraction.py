"""Extraction as the experiments run it: the videos of a folder by id, and one call that embeds clips and captions
with the configured backbone into a store (`configs/extract_videoprism.py`, `configs/prepare.py`)."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from vidjax import extract as engine
from vidjax.extract import is_lvt, load_model, make_text_fn, make_video_fn

VIDEO_EXTENSIONS = (".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v", ".mpg", ".mpeg", ".flv")
_LOG = logging.getLogger(__name__)


def is_video(path: Path) -> bool:
  return path.is_file() and path.suffix.lower() in VIDEO_EXTENSIONS


def index_videos(folder: str | os.PathLike) -> dict[str, str]:
  """`{file stem: path}` of every video under `folder` (recursive); the first extension in
  `VIDEO_EXTENSIONS` order wins when one id has several files."""
  folder = Path(folder)
  if not folder.is_dir():
    raise FileNotFoundError(f"config.data.videos: video folder not found: {folder}")
  rank = {ext: i for i, ext in enumerate(VIDEO_EXTENSIONS)}
  found: dict[str, Path] = {}
  for path in sorted(folder.rglob("*")):
    if is_video(path):
      old = found.get(path.stem)
      if old is None or rank[path.suffix.lower()] < rank[old.suffix.lower()]:
        found[path.stem] = path
  return {k: str(v) for k, v in found.items()}


def video_finder(folder: str | os.PathLike):
  """`video id -> path or None` over the videos under `folder` (`index_videos`), matched by id or by the id's stem
  (DiDeMo's ids carry an extension the files may not)."""
  index = index_videos(folder)
  return lambda video_id: index.get(video_id) or index.get(Path(video_id).stem)


def extract_into(config, store_root: str, clips: list[engine.VideoSegment], captions: dict[str, str], dataset: str,
                 missing_videos: int = 0, num_frames: int | None = None, text_fn=None) -> tuple[dict, dict]:
  """The backbone of `config.model` embeds `clips` (kinds clip / clip_mean / tokens; `num_frames` each, default
  `config.num_frames`) and `captions` (kind text) into the store at `store_root`, resumably; returns (the
  extraction's counts, the backbone's metadata). `text_fn` (`texts [B] -> [B, D]`) embeds the captions when the
  backbone has no text tower (the rendered world's stand-in: `pixelstats.colour_bag` of the colour words)."""
  num_frames = num_frames or config.num_frames
  model, variables, meta = load_model(config)
  lvt = is_lvt(model)
  kinds = (["clip"] if lvt else []) + ["clip_mean"] + (["tokens"] if config.save_tokens else [])
  if captions and not lvt and text_fn is None:
    _LOG.warning("%s has no text tower; %d captions are not embedded", config.model.name, len(captions))
    captions = {}
  tokenizer = None
  if captions and lvt:
    if not config.model.spm_path:
      raise ValueError(f"{len(captions)} captions need the LvT SentencePiece model: set config.model.spm_path to a "
                       "local copy of the T5 c4_en model (gs://t5-data/vocabs/cc_en.32000/sentencepiece.model for the "
                       "public checkpoints; download it once, runs are offline)")
    if str(config.model.spm_path).startswith(("gs://", "http://", "https://")):
      raise ValueError(f"config.model.spm_path={config.model.spm_path!r} is a remote URL; runs read a local copy: "
                       "download it once and set config.model.spm_path to the file")
    from vidjax.tokenizers.sentencepiece import SentencePieceTokenizer  # pylint: disable=g-import-not-at-top
    tokenizer = SentencePieceTokenizer(config.model.spm_path)
    if tokenizer.vocab_size > model.vocabulary_size:
      raise ValueError(f"SentencePiece model {config.model.spm_path} has {tokenizer.vocab_size} pieces but "
                       f"{config.model.name} embeds only {model.vocabulary_size}")

  metadata = {**meta, "num_frames": num_frames, "resolution": config.resolution, "aspect": config.aspect,
              "dtype": config.store_dtype, "kinds": kinds + ([engine.TEXT_KIND] if captions else []),
              "spm_path": config.model.spm_path if captions else "", "dataset": dataset}
  store = engine.open_store(store_root, metadata)
  mesh = engine.local_mesh()

  stats = engine.extract_videos(
      store, clips, make_video_fn(model, variables, mesh, kinds), num_frames=num_frames,
      resolution=config.resolution, batch_size=config.batch_size, kinds=kinds, mesh=mesh, aspect=config.aspect,
      dtype=config.store_dtype, decode_workers=config.decode_workers, progress=config.progress)
  texts = 0
  if captions:
    texts = engine.extract_texts(store, captions, make_text_fn(model, variables, tokenizer, mesh) if lvt else text_fn,
                                 batch_size=config.text_batch_size, dtype=config.store_dtype,
                                 progress=config.progress)
  report = engine.finalize(store, {"missing_videos": missing_videos})
  engine.verify(store, [c.clip_id for c in clips], list(captions), kinds)
  return {"clips": len(clips), "texts": len(captions), "padded_videos": report["padded_videos"],
          "failed_videos": report["failed_videos"], "missing_videos": missing_videos,
          "frames_per_s": stats.frames_per_s, "compile_s": stats.compile_seconds, "clips_written": stats.clips,
          "clips_skipped": stats.skipped, "texts_written": texts}, meta


TEXT_TOWER_KEYS = ("backbone", "model_overrides", "fprop_dtype", "checkpoint", "random_init", "seed", "spm_path")


def text_tower(meta: dict) -> dict | None:
  """What rebuilds the text tower that embedded a store's captions (its manifest's backbone fields), or None when
  the store has none (no captions, or a backbone without a text tower)."""
  if not meta.get("spm_path") or not str(meta.get("backbone", "")).startswith("videoprism_lvt"):
    return None
  return {k: meta.get(k) for k in TEXT_TOWER_KEYS}


def make_query_encoder(tower: dict):
  """`texts -> [N, D]` with the text tower `text_tower` describes: the same weights (the checkpoint, or the same
  seeded random init), tokenizer and pooling as the extraction that embedded the captions."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  from vidjax.tokenizers.sentencepiece import SentencePieceTokenizer  # pylint: disable=g-import-not-at-top
  if tower["checkpoint"] and not Path(tower["checkpoint"]).is_file() and "://" not in tower["checkpoint"]:
    raise FileNotFoundError(f"the query encoder's checkpoint {tower['checkpoint']} (the one the store was extracted "
                            "with) is not there any more")
  if not Path(tower["spm_path"]).is_file():
    raise FileNotFoundError(f"the query encoder's SentencePiece model {tower['spm_path']} (the one the store was "
                            "extracted with) is not there any more")
  config = ml_collections.ConfigDict(dict(seed=int(tower.get("seed") or 0), model=dict(
      name=tower["backbone"], checkpoint=tower["checkpoint"] or "", fprop_dtype=tower["fprop_dtype"] or "float32",
      overrides=dict(tower["model_overrides"] or {}))))
  model, variables, _ = load_model(config)
  fn = make_text_fn(model, variables, SentencePieceTokenizer(tower["spm_path"]), engine.local_mesh())
  return lambda texts: np.asarray(fn(list(texts)))
