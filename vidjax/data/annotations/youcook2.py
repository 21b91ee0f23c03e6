"""Reader for YouCook2 (YouCookII) step annotations, the CVR source for CAST §3.1.

Format (`youcookii_annotations_trainval.json`, official release)::

    {"database": {video_id: {"duration": float, "subset": "training" | "validation",
                             "recipe_type": "113",
                             "annotations": [{"segment": [start, end], "id": 0, "sentence": str}, ...],
                             "video_url": str}}}

Each annotated segment becomes one `Clip` whose text is the sentence; the task is the recipe type
and the step id is empty (YouCook2 captions are free text, so CVR mines its identity negatives by
caption similarity, CAST App. B). Subsets map 'training' -> 'train', 'validation' -> 'val' (and
'testing' -> 'test' for the segments-only test file, should it be given sentences).
"""
from __future__ import annotations

import os

from vidjax import io
from vidjax.data.annotations import types

SUBSETS = {"training": "train", "validation": "val", "testing": "test"}


def read_youcook2(path: str | os.PathLike, split: str | None = None) -> list[types.Video]:
  """Reads YouCook2 annotations; returns videos sorted by id, optionally only one split.

  Args:
    path: `youcookii_annotations_trainval.json`.
    split: 'train' | 'val' | 'test' | None (all).

  Raises:
    ValueError: naming the file, the video / annotation and what was expected, on malformed input.
  """
  types.check_split_arg(split, types.SPLITS, "read_youcook2")
  data = io.read_json(path, "YouCook2 annotation file")
  database = types.require(data, "database", dict, path, "top level")
  videos = []
  for video_id in sorted(database):
    entry = database[video_id]
    where = f"video {video_id!r}"
    subset = types.require(entry, "subset", str, path, where)
    if subset not in SUBSETS:
      types.fail(path, where, f"'subset' must be one of {sorted(SUBSETS)}, got {subset!r}")
    task = str(types.require(entry, "recipe_type", (str, int), path, where))
    duration = types.optional_duration(entry, path, where)
    annotations = types.require(entry, "annotations", list, path, where)
    segments = []
    for i, ann in enumerate(annotations):
      at = f"{where} annotation #{i}"
      start, end = types.parse_segment(types.require(ann, "segment", list, path, at), path, at)
      sentence = types.require(ann, "sentence", str, path, at).strip()
      if not sentence:
        types.fail(path, at, "'sentence' must be a non-empty caption")
      segments.append((start, end, sentence, ""))
    # Validate every entry (so a broken file fails whatever split is asked for), keep the split's.
    if split is None or SUBSETS[subset] == split:
      videos.append(types.make_video(video_id, task, SUBSETS[subset], segments, duration))
  return videos
