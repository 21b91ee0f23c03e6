"""Data model shared by the procedural-video annotation readers (CAST paper §2.2, §3.1).

A `Video` is an ordered tuple of annotated step segments (`Clip`s). The YouCook2, COIN and
CrossTask readers all produce this model, and the CVR builder (`vidjax/data/cvr.py`) consumes it:
step segments are the clip units, the step text is the query q_t, and the preceding clips of the
same video form the context history H_t.

Also here: the small validation helpers the readers share (so every malformed file yields one
`ValueError` naming the file, the record and what was expected), what each release format looks like (so a file
of another dataset's format is named as such: `refuse_other_json`, `refuse_other_text`), and `split_by_video`,
the seeded video-disjoint split used for CrossTask's 80/20 split and for held-out subsets.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from vidjax import io

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
  """The lines of a UTF-8 text file (a BOM is dropped; lines end at "\n", "\r\n" or "\r" only, so a line
  number is the one an editor shows); FileNotFoundError naming `what`, or one clear ValueError when the file is
  not UTF-8 or is a folder."""
  path = Path(path)
  if not path.exists():
    raise FileNotFoundError(f"{what} not found: {path}")
  if path.is_dir():
    fail(path, "file", f"expected the {what}, got a folder")
  try:
    lines = path.read_text(encoding="utf-8-sig").split("\n")  # read_text turns "\r\n" and "\r" into "\n"
  except UnicodeDecodeError as e:
    fail(path, "file", f"expected UTF-8 text ({e})")
  return lines[:-1] if lines[-1] == "" else lines


def csv_rows(path, lines: Sequence[str], delimiter: str = ",") -> Iterator[tuple[int, list[str]]]:
  """(line number, fields) of every non-blank line of a delimited text file, each line one row.

  The csv module lets a quote that opens a field run on past the line end, so one stray quote swallows every
  line after it into one field (the file then reads as fewer rows). No release file has a field over two lines:
  a quoted field must close on its line, and a line that is not one well-formed row (an unclosed quote, text
  after a closing quote) is one error naming the file and the line."""
  for n, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      (row,) = csv.reader([line], delimiter=delimiter, strict=True)
    except csv.Error as e:
      fail(path, f"line {n}", f"not one {delimiter!r}-delimited row ({e}): a quoted field must close on its line "
           f"(a stray quote?), got {short_repr(line)}")
    yield n, row


def check_split_arg(split: str | None, allowed: Sequence[str], reader: str) -> None:
  if split is not None and split not in allowed:
    raise ValueError(f"{reader}: split must be one of {list(allowed)} or None, got {split!r}")


def clean_id(value: str, path, where: str, name: str, kind: str = "id") -> str:
  """`value` stripped; one error when it is empty, only whitespace, or holds a control character (a NUL from a
  binary or corrupted file, a line break: ids name files and store rows, one line each)."""
  bad = next((ch for ch in value if ord(ch) < 32 or ord(ch) == 127), None)
  if bad is not None:
    fail(path, where, f"{name} must be a {kind} without control characters, got {short_repr(value)} (holds "
         f"{bad!r}: a binary or corrupted file?)")
  text = value.strip()
  if not text:
    fail(path, where, f"{name} must be a non-empty {kind}, got {value!r}")
  return text


def clean_text(value: str, path, where: str, name: str, kind: str = "caption") -> str:
  """`value` stripped; one error when it is empty, only whitespace, or holds a NUL character (a binary or
  corrupted file read as text)."""
  if "\x00" in value:
    fail(path, where, f"{name} holds a NUL character (a binary or corrupted file?): {short_repr(value)}")
  text = value.strip()
  if not text:
    fail(path, where, f"{name} must be a non-empty {kind}, got {value!r}")
  return text


def is_number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# No video of these datasets lasts a day (YouTube's limit is 12 h; a movie is 2 h): a time or duration past it is a
# broken file (a unit mix-up, a corrupted number), never a video.
MAX_SECONDS = 24 * 3600.0


def check_seconds(value: float, path, where: str, name: str) -> float:
  """`value` as seconds: a finite number in [0, MAX_SECONDS] (24 h); else one error naming `name`."""
  if not is_number(value) or not 0 <= value <= MAX_SECONDS:
    fail(path, where, f"{name} must be seconds in [0, {MAX_SECONDS:.0f}] (24 h), got {value!r}")
  return float(value)


def parse_segment(segment: Any, path, where: str) -> tuple[float, float]:
  """Validates a `[start, end]` pair of seconds with 0 <= start <= end <= MAX_SECONDS (24 h)."""
  if (not isinstance(segment, (list, tuple)) or len(segment) != 2
      or not all(is_number(x) for x in segment)):
    fail(path, where, f"'segment' must be [start, end] in seconds (two finite numbers), got {segment!r}")
  start, end = float(segment[0]), float(segment[1])
  if start < 0 or start > end:
    fail(path, where, f"'segment' must satisfy 0 <= start <= end, got [{start}, {end}]")
  if end > MAX_SECONDS:
    fail(path, where, f"'segment' [{start}, {end}] ends past {MAX_SECONDS:.0f} s (24 h): no video is that long")
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


# What a release file of each format looks like. Every reader checks the file it is given against these first and
# names the format of another dataset's file ("this looks like ..."), instead of failing on its first record.
FORMATS = {  # name -> what it is and how to read it
    "youcook2": "a YouCook2 release file ({'database': {video_id: {..., 'annotations': [...]}}}): read it with "
                "read_youcook2",
    "coin": "a COIN release file ({'database': {video_id: {..., 'annotation': [...]}}} or a list of {video_id: "
            "entry}): read it with read_coin",
    "youcook2_coin": "a YouCook2 / COIN release file ({'database': {video_id: ...}}): read it with read_youcook2 / "
                     "read_coin",
    "activitynet": "an ActivityNet Captions file: read it with read_activitynet_captions",
    "msrvtt": "an MSR-VTT MSRVTT_data.json: read it with read_msrvtt",
    "didemo": "a DiDeMo file: read it with read_didemo",
    "grdr": "a GRDR release annotation file: read it with read_grdr",
    "genstate": "a GenState metadata file: read it with vidjax.data.genstate.read_triplets",
    "gzip": "a gzip-compressed file (GRDR's release annotation files are): read it with read_grdr",
    "msrvtt_csv": "an MSR-VTT JSFusion csv (header key,vid_key,video_id,sentence): read it with read_msrvtt",
    "msrvtt_list": "an MSR-VTT video id list (one 'video<N>' a line, or a 'video_id' csv): give it as "
                   "read_msrvtt's video_list",
    "lsmdc": "an LSMDC annotation file (six tab-separated fields): read it with read_lsmdc",
    "msvd_mapping": "an MSVD youtube_mapping.txt ('<clip name> vid<N>' lines): read_msvd's first file",
    "msvd_captions": "an MSVD caption file ('<clip name> <description>' lines, AllVideoDescriptions.txt): "
                     "read_msvd's second file",
    "crosstask_annotation": "a CrossTask annotation csv ('step,start,end' lines): read the release folder with "
                            "read_crosstask",
    "crosstask_videos": "a CrossTask videos.csv ('task_id,youtube_id,url' lines): read the release folder with "
                        "read_crosstask",
    "crosstask_tasks": "a CrossTask tasks_primary.txt (blocks of id, name, url, step count, steps): read the "
                       "release folder with read_crosstask",
    "crosstask_folder": "the CrossTask release folder: read it with read_crosstask",
}


def _first_entry(d):
  return next(iter(d.values()), None) if isinstance(d, dict) and d else None


def _is_youcook2(d):  # {"database": {video_id: {"annotations": [{"sentence", ...}], ...}}}
  return isinstance(d, dict) and isinstance(_first_entry(d.get("database")), dict) and (
      "annotations" in _first_entry(d["database"]))


def _is_coin(d):  # {"database": {video_id: {"annotation": [{"label", ...}], ...}}} or [{video_id: entry}, ...]
  if isinstance(d, list) and d and isinstance(d[0], dict) and len(d[0]) == 1:
    return isinstance(_first_entry(d[0]), dict) and "annotation" in _first_entry(d[0])
  return isinstance(d, dict) and isinstance(_first_entry(d.get("database")), dict) and (
      "annotation" in _first_entry(d["database"]))


def _is_step_release(d):  # YouCook2 / COIN, entries not telling which: {"database": {...}}
  return isinstance(d, dict) and isinstance(d.get("database"), dict)


def _is_activitynet(d):  # {video_id: {"duration", "timestamps", "sentences"}}
  first = _first_entry(d)
  return isinstance(first, dict) and {"timestamps", "sentences"} <= set(first)


def _is_msrvtt(d):  # {"videos": [...], "sentences": [...]}
  return isinstance(d, dict) and "videos" in d and "sentences" in d


def _rows_with(d, keys) -> bool:  # a list of objects, the first with `keys`
  return isinstance(d, list) and bool(d) and isinstance(d[0], dict) and set(keys) <= set(d[0])


JSON_FORMATS = (  # (name, test) in the order they are tried
    ("youcook2", _is_youcook2),
    ("coin", _is_coin),
    ("youcook2_coin", _is_step_release),
    ("activitynet", _is_activitynet),
    ("msrvtt", _is_msrvtt),
    ("didemo", lambda d: _rows_with(d, ("video", "description"))),  # [{"video", "description", "times", ...}]
    ("grdr", lambda d: _rows_with(d, ("video", "caption"))),         # [{"video", "caption"}, ...]
    ("genstate", lambda d: _rows_with(d, ("query", "main"))),        # [{"id", "query", "main", ...}, ...]
)

_CLIP_NAME = r"\S+_\d+_\d+"  # MSVD: <youtube id>_<start>_<end>
_LSMDC_TIME = re.compile(r"\d+\.\d{1,2}\.\d{1,2}\.\d{1,3}")


def _is_jsfusion(lines):
  return tuple(h.strip() for h in re.split("[,;]", lines[0])) == ("key", "vid_key", "video_id", "sentence")


def _is_lsmdc(lines):
  fields = lines[0].split("\t")
  return len(fields) == 6 and all(_LSMDC_TIME.fullmatch(f.strip()) for f in fields[1:5])


def _is_crosstask_tasks(lines):
  return len(lines) >= 5 and lines[0].strip().isdigit() and lines[2].strip().startswith("http") and (
      lines[3].strip().isdigit())


def _no_comments(lines):
  return [line for line in lines if not line.lstrip().startswith("#")]


TEXT_FORMATS = (  # (name, test on the first non-blank lines) in the order they are tried; a test reads the first
    # line only where it can (a file of the format with a broken line further down is still that format)
    ("msrvtt_csv", _is_jsfusion),
    ("msrvtt_list", lambda lines: lines[0].strip() == "video_id" or all(
        re.fullmatch(r"video\d+", line.strip()) for line in lines)),
    ("lsmdc", _is_lsmdc),
    ("msvd_mapping", lambda lines: bool(re.fullmatch(_CLIP_NAME + r"\s+vid\d+", lines[0].strip()))),
    ("msvd_captions", lambda lines: bool(_no_comments(lines)) and bool(
        re.fullmatch(_CLIP_NAME + r"\s+\S.*", _no_comments(lines)[0].strip()))),
    ("crosstask_annotation", lambda lines: bool(re.fullmatch(r"\d+(\.0*)?\s*,\s*[\d.]+\s*,\s*[\d.]+",
                                                             lines[0].strip()))),
    ("crosstask_videos", lambda lines: bool(re.fullmatch(r"\d+,[^,]+,\s*https?://\S*", lines[0].strip()))),
    ("crosstask_tasks", _is_crosstask_tasks),
)


def json_format(data: Any) -> str | None:
  """The name of the release format the parsed JSON `data` looks like (`JSON_FORMATS`), None when none."""
  return next((name for name, test in JSON_FORMATS if test(data)), None)


def looks_like(data: Any) -> str | None:
  """What the parsed JSON `data` looks like and how to read it (`FORMATS`), None when no known format."""
  name = json_format(data)
  return FORMATS[name] if name else None


def sniff(path: str | os.PathLike) -> str | None:
  """The name of the release format (`FORMATS`) the file (or folder) at `path` looks like, None when none: gzip by
  its magic bytes, JSON (a file whose text starts with '{' or '[') by its parsed top level (`JSON_FORMATS`), other
  text by its first non-blank lines (`TEXT_FORMATS`)."""
  path = Path(path)
  if path.is_dir():
    return "crosstask_folder" if (path / "tasks_primary.txt").is_file() else None
  if not path.is_file():
    return None
  with open(path, "rb") as f:
    head = f.read(1 << 16)
  if head[:2] == b"\x1f\x8b":
    return "gzip"
  text = head.decode("utf-8-sig", errors="replace")
  if text.lstrip()[:1] in ("{", "["):
    try:
      return json_format(io.read_json(path))
    except ValueError:
      return None
  lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
  if len(head) == 1 << 16:
    lines = lines[:-1]  # the head may end inside a line
  lines = [line for line in lines if line.strip()][:8]
  if not lines:
    return None
  return next((name for name, test in TEXT_FORMATS if test(lines)), None)


def refuse_other_json(data: Any, path, own: Sequence[str], expected: str) -> None:
  """One error when the parsed JSON `data` of `path` looks like a release format not in `own`: the file is another
  dataset's, named by its format and how to read it, before its first record fails."""
  name = json_format(data)
  if name is not None and name not in own:
    fail(path, "top level", f"expected {expected}; found {describe_json(data)}")


def refuse_other_text(path, own: Sequence[str], expected: str) -> None:
  """One error when the text file at `path` looks like a release format not in `own` (`sniff`): another dataset's
  file (or a JSON or gzip file), named by its format and how to read it, before its first line fails."""
  name = sniff(path)
  if name is not None and name not in own:
    fail(path, "file", f"expected {expected}; this looks like {FORMATS[name]}")


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
  return shape + (f"; this looks like {what}" if what else "")


def require(entry: Any, key: str, types: type | tuple[type, ...], path, where: str) -> Any:
  """Returns `entry[key]`, failing clearly when `entry` is not a dict, or the key is missing or mistyped."""
  if not isinstance(entry, dict):
    fail(path, where, f"expected a JSON object, got {type(entry).__name__}")
  if key not in entry:
    what = looks_like(entry) if where == "top level" else None
    fail(path, where, f"missing key {key!r} (keys present: {some_keys(entry)})"
         + (f"; this looks like {what}" if what else ""))
  value = entry[key]
  if not isinstance(value, types) or isinstance(value, bool):
    names = types.__name__ if isinstance(types, type) else " or ".join(t.__name__ for t in types)
    fail(path, where, f"{key!r} must be {names}, got {type(value).__name__} {short_repr(value)}")
  return value


def optional_duration(entry: dict, path, where: str) -> float | None:
  value = entry.get("duration")
  if value is None:
    return None
  if not is_number(value) or not 0 <= value <= MAX_SECONDS:
    fail(path, where, f"'duration' must be a non-negative number of seconds, at most {MAX_SECONDS:.0f} (24 h), "
         f"got {value!r}")
  return float(value)


# The official subset names of the step-annotated release files (YouCook2, COIN) -> vidjax split names.
SUBSETS = {"training": "train", "validation": "val", "testing": "test"}


def split_counts(splits: Iterable[str]) -> str:
  """'val (1,065 videos)' / 'train (10 videos) and test (3 videos)': which splits a file holds, for a message."""
  counts: dict[str, int] = {}
  for s in splits:
    counts[s] = counts.get(s, 0) + 1
  return " and ".join(f"{s or 'no named split'} ({n:,} video{'s' * (n != 1)})" for s, n in sorted(counts.items()))


def step_videos(entries: dict, path, split: str | None, *, annotations_key: str,
                step_of: Callable[[dict, str], tuple[str, str]], task_types: tuple = (str, int)) -> list[Video]:
  """The videos of a {video_id: entry} release (YouCook2, COIN), sorted by id, optionally one split.

  Every entry is validated whatever split is asked for (so a broken file fails for every split): its
  'subset', 'recipe_type' (the task), optional 'duration' and the list `annotations_key` of
  {"segment": [start, end], ...}; `step_of(annotation, where)` returns the annotation's (text, step id).
  A file without videos, or without a video of the split asked for, is one error saying which splits it holds.
  """
  if not entries:
    fail(path, "file", "expected at least one video, the file has none")
  videos, held = [], []
  for video_id in sorted(entries):
    entry = entries[video_id]
    where = f"video {video_id!r}"
    clean_id(video_id, path, where, "the video id", "video id")
    subset = require(entry, "subset", str, path, where)
    if subset not in SUBSETS:
      fail(path, where, f"'subset' must be one of {sorted(SUBSETS)}, got {subset!r}")
    task = str(require(entry, "recipe_type", task_types, path, where))
    clean_id(task, path, where, "'recipe_type'", "task id")
    duration = optional_duration(entry, path, where)
    segments = []
    for i, ann in enumerate(require(entry, annotations_key, list, path, where)):
      at = f"{where} annotation #{i}"
      start, end = parse_segment(require(ann, "segment", list, path, at), path, at)
      if duration is not None and end > duration:  # the real YouCook2 and COIN files have none
        fail(path, at, f"segment [{start}, {end}] ends after the video (duration = {duration} s)")
      segments.append((start, end, *step_of(ann, at)))
    held.append(SUBSETS[subset])
    if split is None or SUBSETS[subset] == split:
      videos.append(make_video(video_id, task, SUBSETS[subset], segments, duration))
  if not videos:
    fail(path, "file", f"no video of the {split!r} split asked for: the file holds {split_counts(held)}")
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
