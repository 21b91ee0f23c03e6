"""Reader for COIN step annotations, a CVR source for CAST §3.1.

Two layouts of the same per-video entries are accepted:

* the official `COIN.json`: ``{"database": {video_id: entry}}``;
* a JSON list of one-key dicts ``[{video_id: entry}, ...]`` (the PDPP re-split files
  `coin_train_70.json` / `coin_test_30.json`).

An entry is ``{"recipe_type": int, "annotation": [{"id": "325", "segment": [s, e], "label": str}],
"subset": "training" | "testing", "duration": float, "class": str, ...}``. Each annotation becomes
one `Clip` with task = recipe_type, step = annotation id and text = label; CVR's identity negatives
for COIN share task and step id (CAST App. B, Table 9). Subsets map 'training' -> 'train',
'testing' -> 'test' ('validation' -> 'val' if present).
"""
from __future__ import annotations

import os

from vidjax import io
from vidjax.data.annotations import types

SUBSETS = types.SUBSETS


def _entries(data, path) -> dict:
  """Returns {video_id: entry} from either layout."""
  if isinstance(data, dict):
    return types.require(data, "database", dict, path, "top level")
  if isinstance(data, list):
    entries = {}
    for i, item in enumerate(data):
      if not isinstance(item, dict) or len(item) != 1:
        types.fail(path, f"list item #{i}",
                   f"expected a one-key object {{video_id: entry}}, got {str(item)[:80]!r}")
      (video_id, entry), = item.items()
      if video_id in entries:
        types.fail(path, f"list item #{i}", f"video {video_id!r} appears more than once")
      entries[video_id] = entry
    return entries
  types.fail(path, "top level",
             f"expected {{'database': {{...}}}} or a list of {{video_id: entry}}, got {type(data).__name__}")


def read_coin(path: str | os.PathLike, split: str | None = None) -> list[types.Video]:
  """Reads COIN annotations (either layout); returns videos sorted by id, optionally one split.

  Args:
    path: `COIN.json` or a list-layout file such as `coin_test_30.json`.
    split: 'train' | 'val' | 'test' | None (all).

  Raises:
    ValueError: naming the file, the video / annotation and what was expected, on malformed input; naming the
      format of another dataset's file; saying which splits the file holds when it has none of `split`.
  """
  types.check_split_arg(split, types.SPLITS, "read_coin")

  def step_of(ann, at):
    step = types.clean_id(str(types.require(ann, "id", (str, int), path, at)), path, at, "'id'", "step id")
    return types.clean_text(types.require(ann, "label", str, path, at), path, at, "'label'", "step label"), step

  data = io.read_json(path, "COIN annotation file")
  types.refuse_other_json(data, path, ("coin", "youcook2_coin"), "a COIN release file ({'database': {video_id: "
                          "entry}} or a list of {video_id: entry})")
  return types.step_videos(_entries(data, path), path, split, annotations_key="annotation", step_of=step_of,
                           task_types=(int, str))
