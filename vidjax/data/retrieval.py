"""Text-video retrieval benchmarks built from the readers' records (the standard R@K protocol).

A `RetrievalBenchmark` is a query set and a corpus:

  * queries: one per caption (T2V): its id, text and the one video it is relevant to;
  * corpus: video ids, sorted; every video of the chosen split is in it, captioned or not (an
    uncaptioned video is a distractor for T2V and has no V2T rank).

Multi-caption rules (MSR-VTT's 20 sentences per video in the `MSRVTT_data.json` layout, DiDeMo's and
ActivityNet's per-moment captions): T2V ranks every caption's query against the whole corpus; V2T
counts a video as a hit at K when ANY of its captions ranks in the top K among all queries. Ties count
against the model in both directions. `vidjax.evaluate.evaluate_gallery` applies the rules;
`vidjax.metrics.two_way_ranks` is the same computation on a full score matrix.

The paragraph-to-video protocol (DiDeMo, ActivityNet Captions) joins every caption of a video in time
order first (`vidjax.data.annotations.paragraphs`), so there is one query per video.
"""
from __future__ import annotations

import dataclasses
import numpy as np

from vidjax.data.annotations.types import Caption, RetrievalData, paragraphs, split_counts

PROTOCOLS = ("captions", "paragraphs")
# dataset -> (reader protocol, evaluation split) of its standard text-to-video benchmark (`read_dataset` reads each).
DATASETS = {
    "msrvtt": ("captions", ""),         # 1k-A: 1,000 test videos, one caption each (JSFusion csv)
    "didemo": ("paragraphs", ""),       # test_data.json: all descriptions of a video, in time order
    "activitynet": ("paragraphs", ""),  # val_1.json: paragraph-to-video
    "msvd": ("captions", "test"),       # youtube_mapping.txt,AllVideoDescriptions.txt: the 670 test clips
}


@dataclasses.dataclass(frozen=True)
class RetrievalBenchmark:
  """Queries (captions) and the corpus (video ids) they are ranked against.

  Attributes:
    name: where it came from (file, split, protocol), printed with the results.
    queries: one `Caption` per query; `caption_id` is the query id, `video_id` its relevant video.
    corpus: sorted video ids.
  """
  name: str
  queries: tuple[Caption, ...]
  corpus: tuple[str, ...]

  def __post_init__(self):
    if len(set(self.corpus)) != len(self.corpus):
      raise ValueError(f"{self.name}: the corpus repeats video ids")
    ids = [q.caption_id for q in self.queries]
    if len(set(ids)) != len(ids):
      raise ValueError(f"{self.name}: query ids repeat")
    known = set(self.corpus)
    stray = sorted({q.video_id for q in self.queries} - known)
    if stray:
      raise ValueError(f"{self.name}: {len(stray)} queries point at videos outside the corpus, e.g. {stray[:3]}")
    if not self.queries:
      raise ValueError(f"{self.name}: no queries")

  @property
  def query_ids(self) -> list[str]:
    return [q.caption_id for q in self.queries]

  def relevant(self) -> np.ndarray:
    """int64 [Q]: the corpus row of each query's video."""
    row = {v: i for i, v in enumerate(self.corpus)}
    return np.array([row[q.video_id] for q in self.queries], np.int64)

  def restrict(self, videos) -> "RetrievalBenchmark":
    """The benchmark on `videos` only (e.g. those a feature store has): the others leave the corpus, and so do
    their queries."""
    keep = set(videos)
    return RetrievalBenchmark(self.name, tuple(q for q in self.queries if q.video_id in keep),
                              tuple(v for v in self.corpus if v in keep))

  def stats(self) -> dict:
    captioned = len({q.video_id for q in self.queries})
    return {"name": self.name, "queries": len(self.queries), "corpus_videos": len(self.corpus),
            "videos_with_queries": captioned,
            "queries_per_video": round(len(self.queries) / max(captioned, 1), 3)}


def build_benchmark(data: RetrievalData, *, protocol: str = "captions", split: str | None = None,
                    name: str | None = None) -> RetrievalBenchmark:
  """The benchmark of `data`'s videos in `split` (None = all) under `protocol` (see module docstring).

  A reader labels each video with the split its file holds: from the file itself (MSR-VTT's JSON, MSVD's clip
  numbers) or from the name the release gives the file (DiDeMo's `val_data.json` holds "val"). Videos whose file
  says no split ("": a file under another name) are taken as the split asked for. A split asked for that the file
  does not hold is one error saying which split(s) it holds (DiDeMo's `val_data.json` given as training data)."""
  if protocol not in PROTOCOLS:
    raise ValueError(f"retrieval protocol must be one of {PROTOCOLS}, got {protocol!r}")
  videos = [v for v in data.videos if split is None or v.split in (split, "")]
  if not videos:
    splits = sorted({v.split for v in data.videos})
    raise ValueError(f"{data.source}: no videos in split {split!r} (splits present: {splits}): the file holds "
                     f"{split_counts(v.split for v in data.videos)}, not the {split} split asked for")
  keep = {v.video_id for v in videos}
  source = paragraphs(data) if protocol == "paragraphs" else data
  queries = tuple(c for c in source.captions if c.video_id in keep)
  label = name or f"{data.source} [{split or 'all'}, {protocol}]"
  return RetrievalBenchmark(label, queries, tuple(sorted(keep)))


def read_dataset(dataset: str, annotations: str, video_list: str = "") -> RetrievalData:
  """A retrieval dataset's records through its reader (`video_list`: MSR-VTT's optional id list). GRDR's release
  files (`{video, caption}` lists, plain or gzipped) are read by `read_grdr` for any of its datasets (MSR-VTT,
  DiDeMo, ActivityNet, LSMDC); every other file by its dataset's own reader."""
  from vidjax.data import annotations as readers  # pylint: disable=g-import-not-at-top
  from vidjax.data.annotations import grdr  # pylint: disable=g-import-not-at-top
  paths = readers.annotation_paths(annotations)
  if dataset == "msvd":  # two files: the clip mapping and the descriptions
    if len(paths) != 2:
      raise ValueError(f"config.data.annotations={annotations!r}: MSVD takes its two files, comma-separated: "
                       "youtube_mapping.txt,AllVideoDescriptions.txt")
    return readers.read_msvd(*paths)
  if len(paths) != 1:
    raise ValueError(f"config.data.annotations={annotations!r}: {dataset} takes one annotation file here")
  if grdr.is_release_file(paths[0]):
    if video_list:
      raise ValueError(f"config.data.video_list={video_list!r} is invalid with GRDR's annotation file {paths[0]}: "
                       "expected '' (the file is the split)")
    return readers.read_grdr(paths[0])
  if dataset == "msrvtt":
    return readers.read_msrvtt(paths[0], video_list or None)
  if video_list:
    raise ValueError(f"config.data.video_list={video_list!r} is invalid: expected '' (only MSR-VTT reads an id list)")
  return readers.RETRIEVAL_READERS[dataset](paths[0])


def embeddings(store, kind: str, ids, what: str) -> np.ndarray:
  """float32 [N, D] rows of `kind` for `ids` from a feature store; a missing id names `what` they are."""
  from vidjax.data.features import MissingFeatureError  # pylint: disable=g-import-not-at-top
  try:
    return np.asarray(store.get(kind, list(ids)), np.float32)
  except MissingFeatureError as e:
    raise MissingFeatureError(f"{what}: {e}") from None


def dataset_label(dataset: str, store_metadata) -> str:
  """How results name a run's dataset: `dataset`, marked synthetic where its store's manifest says so, with the
  manifest's own `label` (a world's store: "msrvtt (synthetic moving-object world)"), else "synthetic rendered
  videos" (the rendered release corpus's store)."""
  if not store_metadata.get("synthetic", False):
    return dataset
  return f"{dataset} ({store_metadata.get('label') or 'synthetic rendered videos'})"
