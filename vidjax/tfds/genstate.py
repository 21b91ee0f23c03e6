"""TFDS builder of GenState triplet benchmarks (../shared/papers/genstate_ai.txt §3-§5).

The GenState-AI clips are not released, so the examples are the user's own metadata file in the
format of `vidjax.data.genstate` (one query with its main video, temporal and semantic hard negatives,
subset and optional distractors), validated by its reader. Split `test` (the paper evaluates only).

Fields: query_id, query, main, temporal_negative, semantic_negative, subset, distractors [str],
`index` (file order). With a feature store (`features=...`): text_embedding [D] (text kind, keyed by
query id), video_embeddings [3, D] (main, temporal, semantic; clip kind keyed by video id) and
distractor_embeddings [n, D]. `as_triplets(builder)` gives back the `Triplet`s; the §5.1 pools follow
from them with `vidjax.data.genstate.pools`.

Manual-download style: `genstate.json` in `manual_dir`, or `metadata=path` in the config.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from vidjax.data.features import FeatureStore
from vidjax.data.genstate import Triplet, read_triplets
from vidjax.tfds.common import (Builder, embedding, features_metadata, lookup, read_split, sha256, source_path,
                                store_dim, tables, tfds)


@dataclasses.dataclass
class GenstateConfig(tfds.core.BuilderConfig):
  """metadata: the triplet file ("" = genstate.json in manual_dir); features, clip_kind, text_kind as elsewhere."""
  metadata: str = ""
  features: str = ""
  clip_kind: str = "clip"
  text_kind: str = "text"


class VidjaxGenstate(Builder):
  """State-centric triplet queries with their candidate videos (see the module docstring)."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "First release: vidjax.data.genstate metadata, optional store embeddings."}
  BUILDER_CONFIGS = [GenstateConfig(name="default", description="ids and texts")]
  MANUAL_DOWNLOAD_INSTRUCTIONS = ("Write your clips' triplet metadata (README 'GenState metadata format') to "
                                  "manual_dir/genstate.json, or set GenstateConfig.metadata. Nothing is downloaded.")

  def _info(self) -> tfds.core.DatasetInfo:
    c = self.builder_config
    text = tfds.features.Text()
    fields = {"index": np.int64, "query_id": text, "query": text, "main": text, "temporal_negative": text,
              "semantic_negative": text, "subset": text, "distractors": tfds.features.Sequence(text)}
    if c.features:
      d = store_dim(c.features, c.clip_kind)
      fields |= {"text_embedding": embedding(d), "video_embeddings": embedding(d, rows=True),
                 "distractor_embeddings": embedding(d, rows=True)}
    return tfds.core.DatasetInfo(
        builder=self, description=__doc__, features=tfds.features.FeaturesDict(fields),
        citation="GenState-AI: State-Aware Dataset for Text-to-Video Retrieval on AI-Generated Videos.",
        metadata=tfds.core.MetadataDict())

  def _split_generators(self, dl_manager):
    c = self.builder_config
    path = source_path(c.metadata, self.manual_dir(dl_manager), "genstate.json", "GenState metadata")
    triplets = read_triplets(path)
    subsets = {}
    for t in triplets:
      subsets[t.subset] = subsets.get(t.subset, 0) + 1
    self.info.metadata.update(paper="GenState-AI §3-§5", source={"file": str(path.resolve()), "sha256": sha256(path)},
                              subsets=subsets)
    store_tables = None
    if c.features:
      store = FeatureStore(c.features)
      store_tables = tables(store, {c.text_kind: [t.query_id for t in triplets],
                                    c.clip_kind: [v for t in triplets for v in (*t.videos, *t.distractors)]})
      self.info.metadata["features"] = features_metadata(store, {"clip": c.clip_kind, "text": c.text_kind})
    return {"test": self._generate_examples(triplets, store_tables)}

  def _generate_examples(self, triplets, store_tables):
    c = self.builder_config
    for n, t in enumerate(triplets):
      ex = {"index": n, "query_id": t.query_id, "query": t.query, "main": t.main,
            "temporal_negative": t.temporal_negative, "semantic_negative": t.semantic_negative,
            "subset": t.subset, "distractors": list(t.distractors)}
      if store_tables is not None:
        ex["text_embedding"] = lookup(store_tables[c.text_kind], [t.query_id])[0]
        ex["video_embeddings"] = lookup(store_tables[c.clip_kind], list(t.videos))
        ex["distractor_embeddings"] = lookup(store_tables[c.clip_kind], list(t.distractors))
      yield t.query_id, ex


def as_triplets(builder, split: str = "test") -> list[Triplet]:
  """The `Triplet`s of a built `VidjaxGenstate` dataset, in file order."""
  return [Triplet(r["query_id"], r["query"], r["main"], r["temporal_negative"], r["semantic_negative"], r["subset"],
                  tuple(r["distractors"])) for r in read_split(builder, split)]
