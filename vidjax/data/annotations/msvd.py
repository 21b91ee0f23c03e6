"""Reader for MSVD (the Microsoft Research Video Description Corpus, Chen & Dolan 2011).

Two files:

* `youtube_mapping.txt` (the 1,970-clip release used since Venugopalan et al. 2015 / Yao et al.
  2015): one clip a line, `<youtube clip name> vid<N>`::

      -4wsuPCjDBc_5_15 vid1
      -7KMZQEsJW4_205_208 vid2

  A clip name is `<youtube id>_<start>_<end>` with the clip's start / end in whole seconds of its
  YouTube source (YouTube ids may themselves contain '_' and '-': the last two '_' split it), 0 <= start < end
  <= 24 h. Numbers are written without leading zeros (as the release does), so one source clip has one name and
  one number: `x_05_15` beside `x_5_15`, or `vid01` beside `vid1`, would give one clip two ids or two clips one
  id, and are errors.
* optional English captions in the layout of the official `AllVideoDescriptions.txt` (from the
  MSVD project page; the English subset of the corpus): lines starting with '#' are comments (the
  file's header), blank lines are skipped, every other line is `<clip name> <description>`, the
  description running to the end of the line::

      # (header comment lines)
      -4wsuPCjDBc_5_15 a squirrel is eating a peanut in it's shell
      -4wsuPCjDBc_5_15 a chipmunk is eating

  The key may also be the clip's `vid<N>` alias from the mapping (the "vid<N> caption" text layout
  of several re-packings). Every key must be a clip of the mapping; a caption of another clip is an
  error, not silently dropped.

Videos: `video_id` is the clip name (the name of the clip's video file, `YouTubeClips/<name>.avi`,
and the key of the captions), `duration` is end - start, and the split is the standard one by the
vid number: vid1-1200 "train", vid1201-1300 "val", vid1301-1970 "test". Captions: `caption_id` is
f"{video_id}#{i:03d}" with i the caption's index among its clip's captions in file order; captions
describe the whole clip (no times).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from vidjax.data.annotations import types

NUM_CLIPS = 1970
SPLIT_BOUNDS = ((1200, "train"), (1300, "val"), (NUM_CLIPS, "test"))
_VID = re.compile(r"vid(\d+)")


def split_of(number: int) -> str:
  """The standard MSVD split of clip vid<number> (1-1200 train, 1201-1300 val, 1301-1970 test)."""
  return next(split for bound, split in SPLIT_BOUNDS if number <= bound)


def _lines(path: Path, what: str) -> list[str]:
  return types.read_lines(path, f"MSVD {what}")


def _is_whole(text: str) -> bool:
  """Whether `text` is a whole number as the release writes one: ASCII digits, no leading zero."""
  return text.isascii() and text.isdigit() and (text == "0" or not text.startswith("0"))


def _clip_source(name: str) -> tuple[str, int, int] | None:
  """(youtube id, start, end) of a `<youtube id>_<start>_<end>` clip name, None when it is not one."""
  parts = name.rsplit("_", 2)
  if len(parts) != 3 or not parts[0] or not parts[1].isascii() or not parts[1].isdigit() or (
      not parts[2].isascii() or not parts[2].isdigit()):
    return None
  return parts[0], int(parts[1]), int(parts[2])


def read_msvd(mapping_path: str | os.PathLike,
              captions_path: str | os.PathLike | None = None) -> types.RetrievalData:
  """Reads the MSVD clip mapping and, optionally, its English captions (see the module docstring).

  Args:
    mapping_path: `youtube_mapping.txt`.
    captions_path: `AllVideoDescriptions.txt` layout; None gives the videos without captions.

  Returns:
    `RetrievalData`: videos (clip names) sorted by id with duration and split, captions in file order.

  Raises:
    FileNotFoundError: when a file does not exist.
    ValueError: naming the file, the line and what was expected, on malformed input, and when the
      captions are the mapping file itself (or a copy of it: every "caption" a vid<N> alias).
  """
  mapping_path = Path(mapping_path)
  lines = _lines(mapping_path, "clip mapping")
  types.refuse_other_text(mapping_path, ("msvd_mapping",), "an MSVD youtube_mapping.txt ('<clip name> vid<N>' "
                          "lines)")
  videos, alias, lines_of = {}, {}, {}
  for n, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    where = f"line {n}"
    fields = line.split()
    match = _VID.fullmatch(fields[-1]) if len(fields) == 2 else None
    if match is None:
      types.fail(mapping_path, where, f"expected '<youtube clip name> vid<N>', got {line!r}")
    name, vid = types.clean_id(fields[0], mapping_path, where, "the clip name", "clip name"), fields[1]
    source = _clip_source(name)
    if source is None:
      types.fail(mapping_path, where, f"clip name must be '<youtube id>_<start>_<end>' (whole seconds), got {name!r}")
    _, start, end = source
    if not all(_is_whole(x) for x in name.rsplit("_", 2)[1:] + [match.group(1)]):
      types.fail(mapping_path, where, f"{line.strip()!r}: numbers must be written without leading zeros, as the "
                 "release writes them (else one clip has two names, or two clips one number)")
    if start >= end:
      types.fail(mapping_path, where, f"clip {name!r} must satisfy start < end (seconds of its YouTube source)")
    if end > types.MAX_SECONDS:
      types.fail(mapping_path, where, f"clip {name!r} ends past {types.MAX_SECONDS:.0f} s (24 h): no video is that "
                 "long")
    number = int(match.group(1))
    if not 1 <= number <= NUM_CLIPS:
      types.fail(mapping_path, where, f"clip number must be vid1..vid{NUM_CLIPS}, got {vid!r}")
    if name in lines_of or vid in alias:
      first = lines_of[name] if name in lines_of else lines_of[alias[vid]]
      types.fail(mapping_path, where, f"clip {name!r} / {vid} is mapped twice (first at line {first})")
    lines_of[name] = n
    alias[vid] = name
    videos[name] = types.RetrievalVideo(name, float(end - start), split_of(number))
  if not videos:
    types.fail(mapping_path, "file", "expected at least one '<youtube clip name> vid<N>' line, found none")
  captions = []
  if captions_path is not None:
    captions_path = Path(captions_path)
    if captions_path.exists() and captions_path.resolve() == mapping_path.resolve():
      types.fail(captions_path, "file", f"the caption file is the clip mapping ({mapping_path}) itself: give the "
                 "captions (AllVideoDescriptions.txt layout) as the second file")
    caption_lines = _lines(captions_path, "caption file")
    types.refuse_other_text(captions_path, ("msvd_captions", "msvd_mapping"), "an MSVD caption file ('<clip name> "
                            "<description>' lines, AllVideoDescriptions.txt)")
    counts: dict[str, int] = {}
    for n, line in enumerate(caption_lines, start=1):
      if not line.strip() or line.lstrip().startswith("#"):
        continue
      where = f"line {n}"
      key, *rest = line.split(None, 1)
      video_id = alias.get(key, key)
      if video_id not in videos:
        types.fail(captions_path, where, f"unknown video {key!r}: expected a clip name (or vid<N>) of {mapping_path}")
      if not rest or not rest[0].strip():
        types.fail(captions_path, where, f"expected '<clip name> <description>', got an empty description for {key!r}")
      text = types.clean_text(rest[0], captions_path, where, f"the description of {key!r}")
      i = counts.get(video_id, 0)
      counts[video_id] = i + 1
      captions.append(types.Caption(caption_id=f"{video_id}#{i:03d}", video_id=video_id, text=text))
    if not captions:
      types.fail(captions_path, "file", "expected '<clip name> <description>' lines, the file has none (only "
                 "comments or blank lines)")
    # A copy of the mapping given as the captions: every "caption" is its clip's own vid<N> alias.
    if all(_VID.fullmatch(c.text) and alias.get(c.text) == c.video_id for c in captions):
      types.fail(captions_path, "file", f"every line is '<clip name> vid<N>', the clip mapping's layout (as in "
                 f"{mapping_path}), not '<clip name> <description>': give the captions file as the second file")
  return types.RetrievalData(source=f"MSVD {mapping_path}",
                             videos=tuple(videos[v] for v in sorted(videos)),
                             captions=tuple(captions))
