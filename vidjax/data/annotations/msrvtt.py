"""Reader for MSR-VTT (Xu et al. 2016) text-video retrieval annotations, in the layouts CLIP4Clip uses.

Accepted layouts of `path`, told apart by the file suffix and, for csv, by the header line:

* `MSRVTT_JSFUSION_test.csv`, the 1k-A test set (Yu et al. 2018, "JSFusion"): a header and one
  row per caption::

      key,vid_key,video_id,sentence
      ret0,msr9770,video9770,a person is connecting something to system

  `key` (ret0 .. ret999) is the caption id, `video_id` the video and `sentence` the caption (csv
  quoting as written by pandas; a row is one line, so a quoted field closes on its line: a stray quote is an
  error naming the line, never a field that swallows the rows after it). `vid_key` is `msr<N>` beside
  `video<N>` (checked: a row whose two disagree describes an unknown video), one per video. The same columns SEMICOLON-delimited (with CRLF line ends, as in
  the re-saved copy in `shared/data/msrvtt`) are read too: the delimiter is detected from the header
  line (';' when the header has one, else ','). Videos get split "test".
* `MSRVTT_train.9k.csv` / `MSRVTT_train.7k.csv`, training id lists: a single column with header
  `video_id`. Videos get split "train" and have no captions (their sentences live in the json).
* `MSRVTT_data.json` (the official annotations re-packed by CLIP4Clip)::

      {"videos": [{"video_id": "video0", "category": 9, "url": str, "start time": 137.72,
                   "end time": 149.44, "split": "train" | "validate" | "test", "id": 0}, ...],
       "sentences": [{"caption": str, "video_id": "video0", "sen_id": 0}, ...]}

  20 sentences per video. The caption id is `str(sen_id)`; the video's duration is
  `end time - start time` (the clip's span in its YouTube source); 'validate' maps to split "val".

`video_list` optionally restricts the videos (and their captions): a text file with one video id a
line (e.g. `val_list_jsfusion.txt`), or a one-column csv with a `video_id` header (the train lists
above). Every listed id must be a video of `path`. Captions are whole-video captions (no times).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from vidjax import io
from vidjax.data.annotations import types

TEST_COLUMNS = ("key", "vid_key", "video_id", "sentence")
LIST_COLUMNS = ("video_id",)
JSON_SPLITS = {"train": "train", "validate": "val", "val": "val", "test": "test"}


def read_msrvtt(path: str | os.PathLike, video_list: str | os.PathLike | None = None) -> types.RetrievalData:
  """Reads MSR-VTT annotations (any layout in the module docstring).

  Args:
    path: `MSRVTT_JSFUSION_test.csv` (comma or semicolon), `MSRVTT_train.{9k,7k}.csv` or
      `MSRVTT_data.json`.
    video_list: optional id-list file restricting the videos (one id a line, or a `video_id` csv).

  Returns:
    `RetrievalData`: videos sorted by id, captions in file order.

  Raises:
    FileNotFoundError: when a file does not exist.
    ValueError: naming the file, the line / entry and what was expected, on malformed input (a file that does not
      parse as a whole, an empty or NUL-bearing id or caption, a vid_key of another video, no rows); naming the
      format of another dataset's file.
  """
  path = Path(path)
  if path.suffix.lower() == ".json" or types.sniff(path) == "msrvtt":  # MSRVTT_data.json, whatever its name
    videos, captions = _read_json(path)
  else:
    videos, captions = _read_csv(path)
  if video_list is not None:
    keep = read_video_list(video_list)
    missing = [v for v in keep if v not in videos]
    if missing:
      types.fail(video_list, "video list",
                 f"{len(missing)} listed video ids are not videos of {path}, e.g. {missing[:3]}")
    keep_set = set(keep)
    videos = {v: videos[v] for v in keep}
    captions = [c for c in captions if c.video_id in keep_set]
  return types.RetrievalData(source=f"MSR-VTT {path}",
                             videos=tuple(videos[v] for v in sorted(videos)),
                             captions=tuple(captions))


def read_video_list(path: str | os.PathLike) -> list[str]:
  """Video ids of an id-list file (one a line; an optional first line `video_id` is a csv header)."""
  path = Path(path)
  lines = types.read_lines(path, "MSR-VTT video list")
  types.refuse_other_text(path, ("msrvtt_list",), "an MSR-VTT video id list (one id a line)")
  ids, seen = [], {}
  for n, line in enumerate(lines, start=1):
    token = line.strip()
    if not token or (token == "video_id" and not ids):  # blank line, or the csv header
      continue
    token = types.clean_id(token, path, f"line {n}", "a video id")
    if any(ch in token for ch in ",;\t \"'"):
      types.fail(path, f"line {n}", f"expected one video id per line (no delimiter or spaces), got {line!r}")
    if token in seen:
      types.fail(path, f"line {n}", f"video id {token!r} is listed twice (first at line {seen[token]})")
    seen[token] = n
    ids.append(token)
  if not ids:
    types.fail(path, "video list", "expected at least one video id, the file lists none")
  return ids


_VIDEO = re.compile(r"video(\d+)")
_VID_KEY = re.compile(r"msr(\d+)")


def _check_vid_key(vid_key: str, video_id: str, path, where: str) -> None:
  """`vid_key` names the clip `video_id` names: the release writes `msr<N>` beside `video<N>` (a row whose two
  disagree is a broken or hand-edited file: which video its caption describes is unknown)."""
  video = _VIDEO.fullmatch(video_id)
  key = _VID_KEY.fullmatch(vid_key)
  if video and not (key and int(key.group(1)) == int(video.group(1))):
    types.fail(path, where, f"'vid_key' {vid_key!r} does not name the video {video_id!r}: expected "
               f"'msr{video.group(1)}' (the release writes msr<N> beside video<N>)")


def _read_csv(path: Path) -> tuple[dict[str, types.RetrievalVideo], list[types.Caption]]:
  lines = types.read_lines(path, "MSR-VTT annotation file")
  types.refuse_other_text(path, ("msrvtt_csv", "msrvtt_list"), "an MSR-VTT csv (header key,vid_key,video_id,"
                          "sentence, or video_id)")
  first_n = next((n for n, line in enumerate(lines) if line.strip()), None)
  first = lines[first_n] if first_n is not None else ""
  delimiter = ";" if ";" in first else ","
  rows = list(types.csv_rows(path, lines, delimiter))
  header = tuple(h.strip() for h in rows[0][1]) if rows else ()
  if header not in (TEST_COLUMNS, LIST_COLUMNS):
    types.fail(path, "header line", f"expected the columns {','.join(TEST_COLUMNS)} (comma- or semicolon-"
               f"delimited) or the single column {LIST_COLUMNS[0]}, got {first!r}")
  videos: dict[str, types.RetrievalVideo] = {}
  captions: list[types.Caption] = []
  keys: dict[str, int] = {}
  video_of_key: dict[str, tuple[str, int]] = {}  # vid_key -> (its video id, first line)
  key_of_video: dict[str, tuple[str, int]] = {}  # video id -> (its vid_key, first line)
  split = "test" if header == TEST_COLUMNS else "train"
  for n, row in rows[1:]:
    where = f"line {n}"
    if len(row) != len(header):
      types.fail(path, where, f"expected {len(header)} {delimiter!r}-delimited fields "
                 f"({delimiter.join(header)}), got {len(row)}: {delimiter.join(row)!r}")
    fields = dict(zip(header, row))
    video_id = types.clean_id(fields["video_id"], path, where, "'video_id'", "video id")
    if header == LIST_COLUMNS:
      if video_id in videos:
        types.fail(path, where, f"video {video_id!r} is listed twice")
      videos[video_id] = types.RetrievalVideo(video_id, None, split)
      continue
    key = types.clean_id(fields["key"], path, where, "'key'", "caption id")
    if key in keys:
      types.fail(path, where, f"caption key {key!r} appears twice (first at line {keys[key]})")
    vid_key = types.clean_id(fields["vid_key"], path, where, "'vid_key'", "video key")
    _check_vid_key(vid_key, video_id, path, where)
    for table, a, b in ((video_of_key, vid_key, video_id), (key_of_video, video_id, vid_key)):
      first, line = table.setdefault(a, (b, n))
      if first != b:
        types.fail(path, where, f"{a!r} goes with {b!r} here but with {first!r} at line {line}: a video has one "
                   "vid_key")
    sentence = types.clean_text(fields["sentence"], path, where, "'sentence'", f"caption (key {key!r})")
    keys[key] = n
    videos.setdefault(video_id, types.RetrievalVideo(video_id, None, split))
    captions.append(types.Caption(caption_id=key, video_id=video_id, text=sentence))
  if not videos:
    types.fail(path, "file", "expected at least one row after the header, found none")
  return videos, captions


def _read_json(path: Path) -> tuple[dict[str, types.RetrievalVideo], list[types.Caption]]:
  data = io.read_json(path, "MSR-VTT annotation file")
  types.refuse_other_json(data, path, ("msrvtt",), "an MSR-VTT MSRVTT_data.json ({'videos': [...], 'sentences': "
                          "[...]})")
  entries = types.require(data, "videos", list, path, "top level")
  sentences = types.require(data, "sentences", list, path, "top level")
  if not entries or not sentences:
    types.fail(path, "top level", f"expected at least one video and one sentence, got {len(entries)} videos and "
               f"{len(sentences)} sentences")
  videos: dict[str, types.RetrievalVideo] = {}
  for i, entry in enumerate(entries):
    where = f"videos[{i}]"
    video_id = types.clean_id(types.require(entry, "video_id", str, path, where), path, where, "'video_id'",
                              "video id")
    where = f"videos[{i}] ({video_id!r})"
    if video_id in videos:
      types.fail(path, where, f"video {video_id!r} appears twice")
    split = types.require(entry, "split", str, path, where)
    if split not in JSON_SPLITS:
      types.fail(path, where, f"'split' must be one of {sorted(JSON_SPLITS)}, got {split!r}")
    start = types.require(entry, "start time", (int, float), path, where)
    end = types.require(entry, "end time", (int, float), path, where)
    if not (types.is_number(start) and types.is_number(end) and 0 <= start <= end):
      types.fail(path, where, f"'start time' and 'end time' must be seconds with 0 <= start <= end, "
                 f"got {start!r} and {end!r}")
    types.check_seconds(end, path, where, "'end time'")
    videos[video_id] = types.RetrievalVideo(video_id, round(float(end) - float(start), 6), JSON_SPLITS[split])
  captions, sen_ids = [], {}
  for i, entry in enumerate(sentences):
    where = f"sentences[{i}]"
    sen_id = types.clean_id(str(types.require(entry, "sen_id", (int, str), path, where)), path, where, "'sen_id'",
                            "caption id")
    video_id = types.require(entry, "video_id", str, path, where).strip()
    where = f"sentences[{i}] (sen_id {sen_id})"
    if sen_id in sen_ids:
      types.fail(path, where, f"sen_id {sen_id} appears twice (first at sentences[{sen_ids[sen_id]}])")
    if video_id not in videos:
      types.fail(path, where, f"unknown video {video_id!r}: not in 'videos'")
    caption = types.clean_text(types.require(entry, "caption", str, path, where), path, where, "'caption'")
    sen_ids[sen_id] = i
    captions.append(types.Caption(caption_id=sen_id, video_id=video_id, text=caption))
  return videos, captions
