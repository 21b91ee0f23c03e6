r"""Reader for LSMDC (the Large Scale Movie Description Challenge, Rohrbach et al. 2017).

Format (`LSMDC16_annos_training.csv`, `LSMDC16_annos_val.csv`, `LSMDC16_challenge_1000_publictect.csv`,
as read by CLIP4Clip): no header, one sentence a line, six TAB-separated fields (the second
line shows the shape only; its extracted times are illustrative)::

    <CLIP_ID>\t<START_ALIGNED>\t<END_ALIGNED>\t<START_EXTRACTED>\t<END_EXTRACTED>\t<SENTENCE>
    0001_American_Beauty_00.00.51.926-00.00.54.129\t00.00.51.926\t00.00.54.129\t00.00.51.000\t00.00.55.000\tSomeone ...

Times are positions in the movie written `hh.mm.ss.mmm` (e.g. 00.02.17.945 = 137.945 s): the
ALIGNED pair is the sentence's alignment to the movie, the EXTRACTED pair the span cut out into the
clip's video file. A clip id is not necessarily unique: one clip may carry several sentences (the
1,000-clip test file has one each).

The retrieval unit is the clip: `video_id` is the clip id and `duration` the length of the
extracted span (END_EXTRACTED - START_EXTRACTED); a clip's lines must agree on that span. One
`Caption` per line, in file order: `caption_id` is f"{clip_id}#{i:03d}" with i the sentence's index
among its clip's lines, the text is the stripped sentence, and start / end are None (a sentence
describes its whole clip; the movie-time columns are validated, 0 <= start <= end <= 24 h in both pairs,
but are not clip times). The split is not in the file but in its name, as the release writes it
(`LSMDC16_annos_training.csv`: "train", `LSMDC16_annos_val.csv`: "val", `LSMDC16_annos_test.csv` and
`LSMDC16_challenge_1000_publictect.csv`: "test"); a file of another name has split "".
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from vidjax.data.annotations import types

COLUMNS = ("clip_id", "start_aligned", "end_aligned", "start_extracted", "end_extracted", "sentence")
_TIME = re.compile(r"(\d+)\.(\d{1,2})\.(\d{1,2})\.(\d{1,3})")
_SPLIT_FILES = ((re.compile(r"LSMDC\d*_annos_training\.csv"), "train"), (re.compile(r"LSMDC\d*_annos_val\.csv"), "val"),
                (re.compile(r"LSMDC\d*_(annos_test|challenge_1000_publictect)\.csv"), "test"))


def parse_time(text: str) -> float | None:
  """Seconds of an LSMDC `hh.mm.ss.mmm` timestamp; None when `text` is not one."""
  match = _TIME.fullmatch(text.strip())
  if match is None:
    return None
  h, m, s, frac = match.groups()
  if int(m) >= 60 or int(s) >= 60:
    return None
  return int(h) * 3600 + int(m) * 60 + int(s) + int(frac) / 10 ** len(frac)


def format_time(seconds: float) -> str:
  """The LSMDC `hh.mm.ss.mmm` timestamp of `seconds` (>= 0, to the millisecond): `parse_time`'s inverse."""
  ms = int(round(seconds * 1000))
  return f"{ms // 3_600_000:02d}.{ms // 60_000 % 60:02d}.{ms // 1000 % 60:02d}.{ms % 1000:03d}"


def read_lsmdc(path: str | os.PathLike) -> types.RetrievalData:
  """Reads an LSMDC tab-separated annotation file (see the module docstring).

  Args:
    path: e.g. `LSMDC16_annos_val.csv` or `LSMDC16_challenge_1000_publictect.csv`.

  Returns:
    `RetrievalData`: clips sorted by id with their extracted length, captions in file order.

  Raises:
    FileNotFoundError: when the file does not exist.
    ValueError: naming the file, the line and what was expected, on malformed input.
  """
  path = Path(path)
  lines = types.read_lines(path, "LSMDC annotation file")
  types.refuse_other_text(path, ("lsmdc",), "an LSMDC annotation file (six tab-separated fields a line)")
  split = next((s for pattern, s in _SPLIT_FILES if pattern.fullmatch(path.name)), "")
  videos: dict[str, types.RetrievalVideo] = {}
  spans: dict[str, tuple[float, float, int]] = {}
  counts: dict[str, int] = {}
  captions = []
  for n, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    where = f"line {n}"
    fields = line.split("\t")
    if len(fields) != len(COLUMNS):
      types.fail(path, where, f"expected {len(COLUMNS)} tab-separated fields ({', '.join(COLUMNS)}), "
                 f"got {len(fields)}: {line[:120]!r}")
    clip_id = types.clean_id(fields[0], path, where, "'clip_id'", "clip name")
    times = []
    for name, value in zip(COLUMNS[1:5], fields[1:5]):
      seconds = parse_time(value)
      if seconds is None:
        types.fail(path, where, f"{name!r} must be a timestamp hh.mm.ss.mmm (e.g. 00.02.17.945), got {value!r}")
      times.append(types.check_seconds(seconds, path, where, f"{name!r} ({value.strip()})"))
    for (a, b), label in (((0, 1), "aligned"), ((2, 3), "extracted")):
      if times[a] > times[b]:
        types.fail(path, where, f"the {label} times must satisfy start <= end, got reversed "
                   f"{fields[1 + a]!r} > {fields[1 + b]!r}")
    sentence = types.clean_text(fields[5], path, where, "'sentence'", f"caption (clip {clip_id!r})")
    first = spans.setdefault(clip_id, (times[2], times[3], n))
    if first[:2] != (times[2], times[3]):
      types.fail(path, where, f"clip {clip_id!r} is extracted from {fields[3]!r} to {fields[4]!r} here but "
                 f"with other times at line {first[2]}: a clip has one extracted span")
    videos.setdefault(clip_id, types.RetrievalVideo(clip_id, round(times[3] - times[2], 6), split))
    i = counts.get(clip_id, 0)
    counts[clip_id] = i + 1
    captions.append(types.Caption(caption_id=f"{clip_id}#{i:03d}", video_id=clip_id, text=sentence))
  if not captions:
    types.fail(path, "file", "expected at least one annotation line, found none")
  return types.RetrievalData(source=f"LSMDC {path}",
                             videos=tuple(videos[v] for v in sorted(videos)),
                             captions=tuple(captions))
