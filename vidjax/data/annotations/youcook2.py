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

SUBSETS = types.SUBSETS


def read_youcook2(path: str | os.PathLike, split: str | None = None) -> list[types.Video]:
  """Reads YouCook2 annotations; returns videos sorted by id, optionally only one split.

  Args:
    path: `youcookii_annotations_trainval.json`.
    split: 'train' | 'val' | 'test' | None (all).

  Raises:
    ValueError: naming the file, the video / annotation and what was expected, on malformed input; naming the
      format of another dataset's file; saying which splits the file holds when it has none of `split`.
  """
  types.check_split_arg(split, types.SPLITS, "read_youcook2")

  def step_of(ann, at):  # free-text captions, no step labels
    return types.clean_text(types.require(ann, "sentence", str, path, at), path, at, "'sentence'"), ""

  data = io.read_json(path, "YouCook2 annotation file")
  types.refuse_other_json(data, path, ("youcook2", "youcook2_coin"), "a YouCook2 release file ({'database': "
                          "{video_id: {..., 'annotations': [...]}}})")
  database = types.require(data, "database", dict, path, "top level")
  return types.step_videos(database, path, split, annotations_key="annotations", step_of=step_of)
