"""Reader for DiDeMo (Hendricks et al. 2017, "Localizing Moments in Video with Natural Language").

Format (`{train,val,test}_data.json`, official release, LisaAnne/LocalizingMoments)::

    [{"annotation_id": 1, "video": "26292851@N04_4253489686_265c3c8051.m4v",
      "description": "someone kicks the bug towards some rocks.",
      "times": [[4, 4], [4, 4], [0, 0], [4, 4]],      # one [start_chunk, end_chunk] per annotator
      "num_segments": 6, "dl_link": str}, ...]

Videos are cut into 5-second chunks (chunk i = seconds [5i, 5i + 5]; at most 6 chunks, the last one
possibly shorter than 5 s). A moment [s, e] in chunks is the seconds [5 * s, 5 * (e + 1)]. Usually 4
annotators mark each description (up to 7).

One `Caption` per description: `caption_id` is `str(annotation_id)` (unique in the file, else an
error), `video_id` is the `video` field as written (with its extension) and the text is the stripped
description. Its time is one [s, e] pair chosen by this rule:

  **the most common [s, e] pair among the annotators; ties go to the earliest pair (smallest s,
  then smallest e).**

The rule depends only on the multiset of pairs (not on annotator order). DiDeMo's own evaluation
scores a prediction against every annotator instead; the rule fixes the single moment a `Caption`
carries, e.g. for ordering captions into paragraphs (`types.paragraphs`). In the real files 312 of
the 4,021 test and 326 of the 4,180 val descriptions have such a tie.

Chunk indices must be integers with 0 <= s <= e < num_segments; `num_segments` is 1..6 (a DiDeMo video is cut
to at most 30 s) and 6 when the entry does not give it, so every moment lies in the first 30 s. Video durations
are not in the file (`num_segments` only bounds them), so `duration` is None. The split is not in the file but in
its name, as the release writes it (`train_data.json`, `val_data.json`, `test_data.json`); a file of another
name has split "".
"""
from __future__ import annotations

import collections
import os
import re
from pathlib import Path

from vidjax import io
from vidjax.data.annotations import types

CHUNK_SECONDS = 5.0
MAX_SEGMENTS = 6  # 5-second chunks of a video cut to at most 30 s: the release's num_segments is 5 or 6
_SPLIT_FILE = re.compile(r"(train|val|test)_data\.json")


def moment_seconds(start_chunk: int, end_chunk: int) -> tuple[float, float]:
  """The seconds [5 s, 5 (e + 1)] of a moment given in 5-second chunks [s, e]."""
  return CHUNK_SECONDS * start_chunk, CHUNK_SECONDS * (end_chunk + 1)


def consensus_moment(times: list[tuple[int, int]]) -> tuple[int, int]:
  """The most common [s, e] pair; ties to the earliest pair (smallest s, then e)."""
  counts = collections.Counter(times)
  return min(counts, key=lambda pair: (-counts[pair], pair))


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def read_didemo(path: str | os.PathLike) -> types.RetrievalData:
  """Reads a DiDeMo `*_data.json`; one caption per description (see the module docstring).

  Args:
    path: `train_data.json` / `val_data.json` / `test_data.json`.

  Returns:
    `RetrievalData`: videos sorted by id, captions in file order with their moment in seconds.

  Raises:
    FileNotFoundError: when the file does not exist.
    ValueError: naming the file, the description and what was expected, on malformed input; naming the format of
      another dataset's file.
  """
  data = io.read_json(path, "DiDeMo annotation file")
  types.refuse_other_json(data, path, ("didemo",), "a DiDeMo file (a JSON list of descriptions)")
  if not isinstance(data, list):
    types.fail(path, "top level", f"expected a JSON list of descriptions, got {type(data).__name__}")
  if not data:
    types.fail(path, "top level", "expected at least one description, the list is empty")
  named = _SPLIT_FILE.fullmatch(Path(path).name)
  split = named.group(1) if named else ""
  captions, seen, video_ids = [], {}, set()
  for i, entry in enumerate(data):
    where = f"description #{i}"
    annotation_id = types.require(entry, "annotation_id", (int, str), path, where)
    caption_id = types.clean_id(str(annotation_id), path, where, "'annotation_id'", "caption id")
    where = f"description #{i} (annotation_id {caption_id})"
    if caption_id in seen:
      types.fail(path, where, f"annotation_id {caption_id} appears twice (first at description #{seen[caption_id]})")
    seen[caption_id] = i
    video_id = types.clean_id(types.require(entry, "video", str, path, where), path, where, "'video'", "video name")
    text = types.clean_text(types.require(entry, "description", str, path, where), path, where, "'description'")
    num_segments = entry.get("num_segments", MAX_SEGMENTS)
    if not _is_int(num_segments) or not 1 <= num_segments <= MAX_SEGMENTS:
      types.fail(path, where, f"'num_segments' must be an integer in 1..{MAX_SEGMENTS} (5-second chunks of at most "
                 f"30 s), got {num_segments!r}")
    times = types.require(entry, "times", list, path, where)
    if not times:
      types.fail(path, where, "'times' must list at least one [start_chunk, end_chunk] pair")
    pairs = []
    for k, pair in enumerate(times):
      if not isinstance(pair, list) or len(pair) != 2 or not all(_is_int(x) for x in pair):
        types.fail(path, where, f"'times'[{k}] must be [start_chunk, end_chunk] (two integers), got {pair!r}")
      s, e = pair
      if s < 0 or s > e or e >= num_segments:
        types.fail(path, where, f"'times'[{k}] must satisfy 0 <= start_chunk <= end_chunk < num_segments = "
                   f"{num_segments}{'' if 'num_segments' in entry else ' (the default)'}, got {pair!r}")
      pairs.append((s, e))
    start, end = moment_seconds(*consensus_moment(pairs))
    video_ids.add(video_id)
    captions.append(types.Caption(caption_id=caption_id, video_id=video_id, text=text, start=start, end=end))
  return types.RetrievalData(source=f"DiDeMo {path}",
                             videos=tuple(types.RetrievalVideo(v, None, split) for v in sorted(video_ids)),
                             captions=tuple(captions))
