"""Reader for ActivityNet Captions (Krishna et al. 2017) as a text-video retrieval dataset.

Format (`train.json`, `val_1.json`, `val_2.json`; also PDVC's `train_modified.json`)::

    {"v_uqiMw7tQ1Cc": {"duration": 55.15,
                       "timestamps": [[0.28, 55.15], [13.79, 54.32]],
                       "sentences": ["A weight lifting tutorial is given.", "  The coach helps ..."]},
     ...}

Timestamps are seconds, one [start, end] per sentence. One `Caption` per sentence, in file order:
`caption_id` is f"{video_id}#{i:03d}" with i the sentence's index in its video's list, the text is
the stripped sentence (they often start with a space), and start / end are the timestamps clipped
to [0, duration]. Video ids are the keys as written (with their "v_" prefix); `duration` is the
video's (0 < duration <= 24 h). The split is not in the file but in its name, as the release writes it
(`train.json` / `train_modified.json`: "train"; `val_1.json` / `val_2.json`: "val"); a file of another name has
split "". A file without videos is an error.

Out-of-range times, decided on the real files (measured on val_1 / val_2 / train_modified):

* times are clipped to [0, duration] within `OVERRUN_TOLERANCE` (0.5 s) and counted
  (`RetrievalData.clipped`). Ends after `duration`: 134 / 111 / 261 segments, each at most 0.01 s over
  (float rounding of the same number), so clipping is the faithful reading. A larger overrun (or a negative
  start beyond the tolerance) is an error naming the sentence: it is no rounding, and clipping it would
  silently move the moment;
* a start after its end (a reversed pair) is an error: the real files have none. Clipping is
  monotone, so a pair in order stays in order (start <= end) after it, and a reversed pair is
  caught before clipping;
* a segment lying wholly outside the video (start > duration, or end < 0) is an error: clipping
  would turn it into an empty moment at the boundary; the real files have none. Zero-length
  segments (start == end) are kept: train_modified has 2.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from vidjax import io
from vidjax.data.annotations import types


# Seconds a timestamp may run past [0, duration] and still be clipped (the release files: at most 0.01 s).
OVERRUN_TOLERANCE = 0.5
_SPLIT_FILES = ((re.compile(r"train(_modified)?\.json"), "train"), (re.compile(r"val_[12]\.json"), "val"))


def read_activitynet_captions(path: str | os.PathLike) -> types.RetrievalData:
  """Reads an ActivityNet Captions json; one caption per sentence (see the module docstring).

  Args:
    path: `train.json` / `val_1.json` / `val_2.json` (or `train_modified.json`).

  Returns:
    `RetrievalData`: videos sorted by id (with durations), captions in file order.

  Raises:
    FileNotFoundError: when the file does not exist.
    ValueError: naming the file, the video / sentence and what was expected, on malformed input; a file of another
      release (YouCook2's {"database": ...}) is named by the format it looks like, not key by key.
  """
  data = io.read_json(path, "ActivityNet Captions file")
  if not isinstance(data, dict) or types.json_format(data) not in (None, "activitynet"):
    # Another release's file (YouCook2's {"database": ...} read as ActivityNet named every one of its keys).
    types.fail(path, "top level", "expected a JSON object mapping video ids to {'duration', 'timestamps', "
               f"'sentences'}} (an ActivityNet Captions file); found {types.describe_json(data)}")
  if not data:
    types.fail(path, "top level", "expected at least one video, the file has none")
  name = Path(path).name
  split = next((s for pattern, s in _SPLIT_FILES if pattern.fullmatch(name)), "")
  videos, captions = [], []
  clipped = 0
  for video_id, entry in data.items():
    where = f"video {video_id!r}"
    types.clean_id(video_id, path, where, "the video id", "video id")
    duration = types.require(entry, "duration", (int, float), path, where)
    if not types.is_number(duration) or not 0 < duration <= types.MAX_SECONDS:
      types.fail(path, where, f"'duration' must be a positive number of seconds, at most {types.MAX_SECONDS:.0f} "
                 f"(24 h), got {duration!r}")
    duration = float(duration)
    timestamps = types.require(entry, "timestamps", list, path, where)
    sentences = types.require(entry, "sentences", list, path, where)
    if len(timestamps) != len(sentences):
      types.fail(path, where, f"'timestamps' and 'sentences' must have the same length, "
                 f"got {len(timestamps)} and {len(sentences)}")
    for i, (pair, sentence) in enumerate(zip(timestamps, sentences)):
      at = f"{where} sentence #{i}"
      if not isinstance(pair, list) or len(pair) != 2 or not all(types.is_number(x) for x in pair):
        types.fail(path, at, f"timestamp must be [start, end] in seconds (two finite numbers), got {pair!r}")
      start, end = float(pair[0]), float(pair[1])
      if start > end:
        types.fail(path, at, f"timestamp must satisfy start <= end, got reversed [{start}, {end}]")
      if start > duration or end < 0:
        types.fail(path, at, f"timestamp [{start}, {end}] must overlap the video [0, duration = {duration}]")
      overrun = max(end - duration, -start, 0.0)
      if overrun > OVERRUN_TOLERANCE:
        types.fail(path, at, f"timestamp [{start}, {end}] runs {overrun:.3f} s past the video [0, duration = "
                   f"{duration}]; at most {OVERRUN_TOLERANCE} s is clipped (the release's float rounding)")
      clipped += overrun > 0
      if not isinstance(sentence, str):
        types.fail(path, at, f"sentence must be str, got {type(sentence).__name__} {sentence!r}")
      text = types.clean_text(sentence, path, at, "sentence")
      captions.append(types.Caption(caption_id=f"{video_id}#{i:03d}", video_id=video_id, text=text,
                                    start=max(start, 0.0), end=min(end, duration)))
    videos.append(types.RetrievalVideo(video_id, duration, split))
  return types.RetrievalData(source=f"ActivityNet Captions {path}",
                             videos=tuple(sorted(videos, key=lambda v: v.video_id)),
                             captions=tuple(captions), clipped=clipped)
