"""TFDS builder of the text-video retrieval benchmarks: MSR-VTT 1k-A, DiDeMo and ActivityNet paragraphs.

One example per query of `vidjax.data.retrieval.build_benchmark` over the dataset's reader
(`vidjax.data.annotations`), with the protocol of the papers that use these sets:

    msrvtt       captions   split `test`: the 1k-A JSFusion csv (1,000 videos, 1,000 queries)
    didemo       paragraphs splits `train` / `validation` / `test`: {train,val,test}_data.json; every
                            description of a video joined in time order (test: 1,037 queries)
    activitynet  paragraphs splits `train` / `val_1` / `val_2`: train(_modified).json, val_1.json,
                            val_2.json; sentences joined in time order (val_1: 4,917 videos)

Fields: query_id, text, video_id, times [start, end] (float64 seconds; NaN for a query about the whole
video), `index` (query order). The corpus of each split (every video the file lists, sorted;
a video without a query is a distractor) is in `info.metadata["corpus"][split]`. With a feature store
(`features=...`): text_embedding [D] (text kind, keyed by query id) and video_embedding [D] (clip kind,
keyed by video id); a corpus video without a query carries no embedding here.

Manual-download style: the files above in `manual_dir` (those present are built; at least one), or
`files={split: path}` in the config. `as_benchmark(builder, split)` gives back the `RetrievalBenchmark`.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from vidjax.data.annotations import Caption, RETRIEVAL_READERS
from vidjax.data.features import FeatureStore
from vidjax.data.retrieval import RetrievalBenchmark, build_benchmark
from vidjax.tfds.common import (Builder, embedding, features_metadata, lookup, read_split, sha256, store_dim, tables,
                                tfds)

# dataset -> (protocol, {split: candidate file names in manual_dir, first found wins}).
DATASETS = {
    "msrvtt": ("captions", {"test": ("MSRVTT_JSFUSION_test.csv",)}),
    "didemo": ("paragraphs", {"train": ("train_data.json",), "validation": ("val_data.json",),
                              "test": ("test_data.json",)}),
    "activitynet": ("paragraphs", {"train": ("train.json", "train_modified.json"), "val_1": ("val_1.json",),
                                   "val_2": ("val_2.json",)}),
}
CITATIONS = {
    "msrvtt": "Xu, Mei, Yao, Rui. MSR-VTT: A Large Video Description Dataset for Bridging Video and Language. "
              "CVPR 2016. (1k-A split: Yu, Kim, Kim. A Joint Sequence Fusion Model. ECCV 2018.)",
    "didemo": "Hendricks et al. Localizing Moments in Video with Natural Language. ICCV 2017.",
    "activitynet": "Krishna et al. Dense-Captioning Events in Videos. ICCV 2017.",
}


@dataclasses.dataclass
class RetrievalConfig(tfds.core.BuilderConfig):
  """One retrieval dataset build.

  Attributes:
    dataset: "msrvtt" | "didemo" | "activitynet".
    files: {split: annotation file}; empty = the standard names found in manual_dir.
    protocol: "" = the dataset's ("captions" for MSR-VTT, "paragraphs" for DiDeMo / ActivityNet).
    features: feature store directory; "" = ids and texts only.
    clip_kind, text_kind: store kinds of video (keyed by video id) and query (keyed by query id) embeddings.
  """
  dataset: str = "msrvtt"
  files: dict = dataclasses.field(default_factory=dict)
  protocol: str = ""
  features: str = ""
  clip_kind: str = "clip"
  text_kind: str = "text"


class VidjaxRetrieval(Builder):
  """Standard text-to-video retrieval query sets (see the module docstring)."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "First release: vidjax.data.retrieval benchmarks, optional store embeddings."}
  BUILDER_CONFIGS = [RetrievalConfig(name=d, dataset=d, description=f"{d} ({p}), ids and texts")
                     for d, (p, _) in DATASETS.items()]
  MANUAL_DOWNLOAD_INSTRUCTIONS = ("Put the annotation files in manual_dir: MSR-VTT MSRVTT_JSFUSION_test.csv; "
                                  "DiDeMo {train,val,test}_data.json; ActivityNet Captions train.json, val_1.json, "
                                  "val_2.json. Or set the config's `files`. Nothing is downloaded.")

  def _info(self) -> tfds.core.DatasetInfo:
    c = self.builder_config
    if c.dataset not in DATASETS:
      raise ValueError(f"RetrievalConfig.dataset must be one of {sorted(DATASETS)}, got {c.dataset!r}")
    text = tfds.features.Text()
    # Times as raw float64 bytes: tfds' scalar floats go through float32 (211.53 would read back 211.52999877).
    fields = {"index": np.int64, "query_id": text, "text": text, "video_id": text,
              "times": tfds.features.Tensor(shape=(2,), dtype=np.float64, encoding=tfds.features.Encoding.BYTES)}
    if c.features:
      d = store_dim(c.features, c.clip_kind)
      fields |= {"text_embedding": embedding(d), "video_embedding": embedding(d)}
    return tfds.core.DatasetInfo(builder=self, description=__doc__, features=tfds.features.FeaturesDict(fields),
                                 citation=CITATIONS[c.dataset], metadata=tfds.core.MetadataDict())

  def _files(self, dl_manager) -> dict[str, Path]:
    c = self.builder_config
    if c.files:
      files = {split: Path(f) for split, f in c.files.items()}
      missing = {s: str(f) for s, f in files.items() if not f.exists()}
      if missing:
        raise FileNotFoundError(f"{c.dataset} annotation files not found: {missing}")
      return files
    manual = self.manual_dir(dl_manager)
    found = {}
    for split, names in DATASETS[c.dataset][1].items():
      hit = [manual / n for n in names if manual is not None and (manual / n).is_file()]
      if hit:
        found[split] = hit[0]
    if not found:
      expected = sorted(n for names in DATASETS[c.dataset][1].values() for n in names)
      raise FileNotFoundError(f"{c.dataset}: none of {expected} in manual_dir {manual} "
                              "(tfds.download.DownloadConfig(manual_dir=...) or RetrievalConfig.files)")
    return found

  def _split_generators(self, dl_manager):
    c = self.builder_config
    protocol = c.protocol or DATASETS[c.dataset][0]
    files = self._files(dl_manager)
    benches = {split: build_benchmark(RETRIEVAL_READERS[c.dataset](path), protocol=protocol, name=f"{path} [{split}]")
               for split, path in files.items()}
    self.info.metadata.update(
        dataset=c.dataset, protocol=protocol,
        source={split: {"file": str(Path(p).resolve()), "sha256": sha256(p)} for split, p in files.items()},
        corpus={split: list(b.corpus) for split, b in benches.items()},
        stats={split: b.stats() for split, b in benches.items()})
    store_tables = None
    if c.features:
      store = FeatureStore(c.features)
      store_tables = tables(store, {c.text_kind: [q.caption_id for b in benches.values() for q in b.queries],
                                    c.clip_kind: [q.video_id for b in benches.values() for q in b.queries]})
      self.info.metadata["features"] = features_metadata(store, {"clip": c.clip_kind, "text": c.text_kind})
    return {split: self._generate_examples(b, store_tables) for split, b in benches.items()}

  def _generate_examples(self, bench: RetrievalBenchmark, store_tables):
    c = self.builder_config
    for n, q in enumerate(bench.queries):
      ex = {"index": n, "query_id": q.caption_id, "text": q.text, "video_id": q.video_id,
            "times": np.array([np.nan if t is None else t for t in (q.start, q.end)], np.float64)}
      if store_tables is not None:
        ex["text_embedding"] = lookup(store_tables[c.text_kind], [q.caption_id])[0]
        ex["video_embedding"] = lookup(store_tables[c.clip_kind], [q.video_id])[0]
      yield q.caption_id, ex


def as_benchmark(builder, split: str) -> RetrievalBenchmark:
  """The `RetrievalBenchmark` of one split of a built `VidjaxRetrieval` dataset."""
  queries = tuple(Caption(r["query_id"], r["video_id"], r["text"],
                          *(None if np.isnan(t) else float(t) for t in r["times"])) for r in read_split(builder, split))
  return RetrievalBenchmark(f"{builder.info.full_name} [{split}]", queries,
                            tuple(builder.info.metadata["corpus"][split]))
