"""Data model shared by the procedural-video annotation readers (CAST paper §2.2, §3.1).

A `Video` is an ordered tuple of annotated step segments (`Clip`s). The YouCook2, COIN and
CrossTask readers all produce this model, and the CVR builder (`vidjax/data/cvr.py`) consumes it:
step segments are the clip units, the step text is the query q_t, and the preceding clips of the
same video form the context history H_t.

Also here: the small validation helpers the readers share (so every malformed file yields one
`ValueError` naming the file, the record and what was expected) and `split_by_video`, the seeded
video-disjoint split used for CrossTask's 80/20 split and for held-out subsets.
"""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

SPLITS = ("train", "val", "test")


@dataclasses.dataclass(frozen=True)
class Clip:
  """One annotated step segment.

  Attributes:
    clip_id: unique across the dataset: f"{video_id}#{index:03d}".
    video_id: the source video.
    index: 0-based temporal position within the video.
    start: segment start in seconds.
    end: segment end in seconds (>= start).
    text: step caption (YouCook2 sentence, COIN step label, CrossTask step name).
    task: recipe type / task id as a string.
    step: dataset step id as a string (COIN step id, CrossTask 1-based step index; YouCook2: "").
  """
  clip_id: str
  video_id: str
  index: int
  start: float
  end: float
  text: str
  task: str
  step: str


@dataclasses.dataclass(frozen=True)
class Video:
  """One annotated video; `clips` are in temporal order (by start, then end)."""
  video_id: str
  task: str
  split: str  # "train" | "val" | "test"
  clips: tuple[Clip, ...]
  duration: float | None = None


def clip_id(video_id: str, index: int) -> str:
  return f"{video_id}#{index:03d}"


def make_video(video_id: str, task: str, split: str,
               segments: Iterable[tuple[float, float, str, str]],
               duration: float | None = None) -> Video:
  """Builds a `Video` from (start, end, text, step) tuples in any order.

  Segments are sorted by (start, end); exact ties keep their file order (stable sort), so the
  clip indices are a deterministic function of the file.
  """
  ordered = sorted(segments, key=lambda s: (s[0], s[1]))
  clips = tuple(
      Clip(clip_id=clip_id(video_id, i), video_id=video_id, index=i, start=float(s), end=float(e),
           text=text, task=task, step=step)
      for i, (s, e, text, step) in enumerate(ordered))
  return Video(video_id=video_id, task=task, split=split, clips=clips, duration=duration)


def fail(path: str | os.PathLike, where: str, message: str) -> None:
  """Raises the one error a malformed annotation produces: file, record, what was expected."""
  raise ValueError(f"{path}: {where}: {message}")


def read_lines(path: str | os.PathLike, what: str) -> list[str]:
  """The lines of a UTF-8 text file (a BOM is dropped); FileNotFoundError naming `what`, or one clear
  ValueError when the file is not UTF-8."""
  path = Path(path)
  if not path.exists():
    raise FileNotFoundError(f"{what} not found: {path}")
  try:
    return path.read_text(encoding="utf-8-sig").splitlines()
  except UnicodeDecodeError as e:
    fail(path, "file", f"expected UTF-8 text ({e})")


def check_split_arg(split: str | None, allowed: Sequence[str], reader: str) -> None:
  if split is not None and split not in allowed:
    raise ValueError(f"{reader}: split must be one of {list(allowed)} or None, got {split!r}")


def is_number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_segment(segment: Any, path, where: str) -> tuple[float, float]:
  """Validates a `[start, end]` pair of seconds with 0 <= start <= end."""
  if (not isinstance(segment, (list, tuple)) or len(segment) != 2
      or not all(is_number(x) for x in segment)):
    fail(path, where, f"'segment' must be [start, end] in seconds (two finite numbers), got {segment!r}")
  start, end = float(segment[0]), float(segment[1])
  if start < 0 or start > end:
    fail(path, where, f"'segment' must satisfy 0 <= start <= end, got [{start}, {end}]")
  return start, end


def short_repr(value: Any, limit: int = 200) -> str:
  """`repr(value)`, cut to `limit` characters for an error message."""
  text = repr(value)
  return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def some_keys(entry: dict, shown: int = 8) -> str:
  """The keys of `entry` for an error message: all of a few, else the first `shown` and how many there are (a
  release file mistaken for another format has thousands: a message must not list them all)."""
  keys = sorted(map(str, entry))
  return str(keys) if len(keys) <= shown else f"{len(keys)} keys, first {keys[:shown]}"


# What a JSON release file of each format looks like at its top level. The readers say
# which format a file of the wrong one looks like, instead of failing on its first record.
def _is_step_release(d):  # YouCook2 / COIN: {"database": {video_id: {"annotations": [...], ...}}}
  return isinstance(d, dict) and isinstance(d.get("database"), dict)


def _is_activitynet(d):  # {video_id: {"duration", "timestamps", "sentences"}}
  first = next(iter(d.values()), None) if isinstance(d, dict) and d else None
  return isinstance(first, dict) and {"timestamps", "sentences"} <= set(first)


def _is_msrvtt(d):  # {"videos": [...], "sentences": [...]}
  return isinstance(d, dict) and "videos" in d and "sentences" in d


def _is_didemo(d):  # [{"video", "description", "times", ...}, ...]
  return isinstance(d, list) and bool(d) and isinstance(d[0], dict) and {"video", "description"} <= set(d[0])


def _is_grdr(d):  # [{"video", "caption"}, ...]
  return isinstance(d, list) and bool(d) and isinstance(d[0], dict) and {"video", "caption"} <= set(d[0])


JSON_FORMATS = (  # (name, test, what it is and how to read it)
    ("youcook2_coin", _is_step_release, "a YouCook2 / COIN release file ({'database': {video_id: ...}}): read it "
     "with read_youcook2 / read_coin"),
    ("activitynet", _is_activitynet, "an ActivityNet Captions file: read it with read_activitynet_captions"),
    ("msrvtt", _is_msrvtt, "an MSR-VTT MSRVTT_data.json: read it with read_msrvtt"),
    ("didemo", _is_didemo, "a DiDeMo file: read it with read_didemo"),
    ("grdr", _is_grdr, "a GRDR release annotation file: read it with read_grdr"),
)


def json_format(data: Any) -> str | None:
  """The name of the release format the parsed JSON `data` looks like (`JSON_FORMATS`), None when none."""
  return next((name for name, test, _ in JSON_FORMATS if test(data)), None)


def looks_like(data: Any) -> str | None:
  """What the parsed JSON `data` looks like and how to read it (`JSON_FORMATS`), None when no known format."""
  return next((what for _, test, what in JSON_FORMATS if test(data)), None)


def describe_json(data: Any) -> str:
  """A short description of a parsed JSON file's top level for an error message: its type and size, its first
  keys (`some_keys`), and the release format it looks like, if any."""
  if isinstance(data, dict):
    shape = f"a JSON object of {some_keys(data)}"
  elif isinstance(data, list):
    shape = f"a JSON list of {len(data)} {type(data[0]).__name__ if data else 'item'}s"
  else:
    shape = f"a JSON {type(data).__name__}"
  what = looks_like(data)
  return shape + (f"; it looks like {what}" if what else "")


def require(entry: Any, key: str, types: type | tuple[type, ...], path, where: str) -> Any:
  """Returns `entry[key]`, failing clearly when `entry` is not a dict, or the key is missing or mistyped."""
  if not isinstance(entry, dict):
    fail(path, where, f"expected a JSON object, got {type(entry).__name__}")
  if key not in entry:
    what = looks_like(entry) if where == "top level" else None
    fail(path, where, f"missing key {key!r} (keys present: {some_keys(entry)})"
         + (f"; the file looks like {what}" if what else ""))
  value = entry[key]
  if not isinstance(value, types) or isinstance(value, bool):
    names = types.__name__ if isinstance(types, type) else " or ".join(t.__name__ for t in types)
    fail(path, where, f"{key!r} must be {names}, got {type(value).__name__} {short_repr(value)}")
  return value


def optional_duration(entry: dict, path, where: str) -> float | None:
  value = entry.get("duration")
  if value is None:
    return None
  if not is_number(value) or value < 0:
    fail(path, where, f"'duration' must be a non-negative number, got {value!r}")
  return float(value)


# The official subset names of the step-annotated release files (YouCook2, COIN) -> vidjax split names.
SUBSETS = {"training": "train", "validation": "val", "testing": "test"}


def step_videos(entries: dict, path, split: str | None, *, annotations_key: str,
                step_of: Callable[[dict, str], tuple[str, str]], task_types: tuple = (str, int)) -> list[Video]:
  """The videos of a {video_id: entry} release (YouCook2, COIN), sorted by id, optionally one split.

  Every entry is validated whatever split is asked for (so a broken file fails for every split): its
  'subset', 'recipe_type' (the task), optional 'duration' and the list `annotations_key` of
  {"segment": [start, end], ...}; `step_of(annotation, where)` returns the annotation's (text, step id).
  """
  videos = []
  for video_id in sorted(entries):
    entry = entries[video_id]
    where = f"video {video_id!r}"
    subset = require(entry, "subset", str, path, where)
    if subset not in SUBSETS:
      fail(path, where, f"'subset' must be one of {sorted(SUBSETS)}, got {subset!r}")
    task = str(require(entry, "recipe_type", task_types, path, where))
    duration = optional_duration(entry, path, where)
    segments = []
    for i, ann in enumerate(require(entry, annotations_key, list, path, where)):
      at = f"{where} annotation #{i}"
      start, end = parse_segment(require(ann, "segment", list, path, at), path, at)
      if duration is not None and end > duration:  # the real YouCook2 and COIN files have none
        fail(path, at, f"segment [{start}, {end}] ends after the video (duration = {duration} s)")
      segments.append((start, end, *step_of(ann, at)))
    if split is None or SUBSETS[subset] == split:
      videos.append(make_video(video_id, task, SUBSETS[subset], segments, duration))
  return videos


def split_by_video(videos: Sequence[Video], fraction: float, seed: int) -> tuple[list[Video], list[Video]]:
  """Seeded video-disjoint split: returns (rest, picked) with round(fraction * N) videos picked.

  The permutation is drawn over the sorted video ids, so the result depends only on the set of
  ids and the seed (not on input order). Both outputs are sorted by video id.
  """
  if not 0.0 <= fraction <= 1.0:
    raise ValueError(f"split fraction must be in [0, 1], got {fraction}")
  by_id = {v.video_id: v for v in videos}
  if len(by_id) != len(videos):
    raise ValueError("split_by_video: video ids must be unique")
  ids = sorted(by_id)
  order = np.random.default_rng(seed).permutation(len(ids))
  n_pick = int(round(fraction * len(ids)))
  picked = {ids[i] for i in order[:n_pick]}
  rest = [by_id[i] for i in ids if i not in picked]
  return rest, [by_id[i] for i in ids if i in picked]


# ------------------------------------------------------------------------------------------------
# Text-video retrieval records (MSR-VTT, DiDeMo, ActivityNet Captions, MSVD, LSMDC readers).


@dataclasses.dataclass(frozen=True)
class Caption:
  """One caption (or one paragraph) of one video.

  Attributes:
    caption_id: unique within a `RetrievalData`.
    video_id: the video it describes.
    text: the caption; never empty.
    start, end: the described moment in seconds (0 <= start <= end), None when the caption
      describes the whole video.
  """
  caption_id: str
  video_id: str
  text: str
  start: float | None = None
  end: float | None = None


@dataclasses.dataclass(frozen=True)
class RetrievalVideo:
  """One video of a retrieval dataset: its id, duration in seconds when known, and split."""
  video_id: str
  duration: float | None = None
  split: str = ""


@dataclasses.dataclass(frozen=True)
class RetrievalData:
  """What every retrieval reader returns: videos (sorted by id) and captions (file order).

  Every caption's video is among `videos`; a video may have no caption (e.g. an id-list file).
  """
  source: str
  videos: tuple[RetrievalVideo, ...]
  captions: tuple[Caption, ...]
  clipped: int = 0  # captions whose times a reader clipped to the video (within its stated tolerance)

  def video_ids(self) -> list[str]:
    return [v.video_id for v in self.videos]

  def captions_by_video(self) -> dict[str, list[Caption]]:
    out: dict[str, list[Caption]] = {v.video_id: [] for v in self.videos}
    for c in self.captions:
      out[c.video_id].append(c)
    return out


def paragraphs(data: RetrievalData) -> RetrievalData:
  """The paragraph-to-video protocol (DiDeMo, ActivityNet Captions): one query per video.

  Every video's captions are joined with single spaces in time order into one `Caption` whose
  `caption_id` is the video id. Time order: captions with times sorted by (start, end), exact ties
  in file order (stable sort), then the captions without times, in file order. The paragraph's
  `start` / `end` are the earliest start and the latest end when every caption has times, else None
  (a caption without times describes the whole video, and so does the paragraph).

  The videos are kept unchanged: a video without captions stays in `videos` (a corpus item, e.g. a
  distractor) and simply has no paragraph. Paragraphs come in video order (sorted by id).

  Args:
    data: a reader's records.

  Returns:
    `RetrievalData` with the same source label (suffixed " [paragraphs]") and videos, and one
    caption per captioned video.
  """
  out = []
  for video_id, captions in data.captions_by_video().items():
    if not captions:
      continue
    timed = sorted((c for c in captions if c.start is not None and c.end is not None),
                   key=lambda c: (c.start, c.end))
    untimed = [c for c in captions if c.start is None or c.end is None]
    ordered = timed + untimed
    start = min(c.start for c in timed) if not untimed else None
    end = max(c.end for c in timed) if not untimed else None
    out.append(Caption(caption_id=video_id, video_id=video_id,
                       text=" ".join(c.text.strip() for c in ordered), start=start, end=end))
  return RetrievalData(source=f"{data.source} [paragraphs]", videos=data.videos, captions=tuple(out))
