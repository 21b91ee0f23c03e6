"""Reader for GRDR's release annotation files (JasonCodeMaker/GRDR, `data/<dataset>/video_retreival_caption/`).

Format (`msrvtt_ret_{train,test}.json`, `lsmdc_ret_test.json`, `didemo_ret_{train,test}.json`,
`actnet_ret_{train,test}.json`; plain JSON, or gzip-compressed JSON)::

    [{"video": "video9770.mp4", "caption": "a person is connecting something to system"}, ...]        # MSR-VTT, LSMDC
    [{"video": "v_uqiMw7tQ1Cc.mp4", "caption": ["A weight lifting tutorial is given.", "  The coach ..."]}, ...]

One row per caption for MSR-VTT and LSMDC (a video recurs in as many rows as it has captions), one row per video
with its list of sentences for DiDeMo and ActivityNet (paragraph retrieval: `types.paragraphs` joins them).

Ids are the ones GRDR's own loader gives (`data/video_dataset.py`, `VideoTextDataset._load_annotations`), so that
its released feature pickles (`vidjax.data.grdr_release`) are keyed as these records are:

  * the video id is the file name without a final ".mp4" / ".avi" and without its folder (LSMDC's
    `3086_UGLY_TRUTH/3086_UGLY_TRUTH_00.23.23.000-00.23.28.886.avi` -> `3086_UGLY_TRUTH_00.23.23.000-00.23.28.886`;
    GRDR removes the two extensions wherever they occur in the name, vidjax only at its end: the release's names
    differ in neither);
  * a caption's id is f"{video id}_{i}", i counting that video's sentences in file order from 0 (a list row gives
    one caption per sentence, as GRDR's training split does; its test split embeds a video's joined sentences
    under f"{video id}_0", which vidjax's paragraph protocol keys by the video id).

The text is the stripped caption (GRDR strips the sentences of a list and keeps a string caption as written: 142 of
the 20,000 captions of `msrvtt_ret_train_addition.json` carry outer spaces). Two file names with one video id (the
same clip in two folders) are an error, as are an empty, whitespace-only or NUL-bearing video name or caption and a
file with no rows. Captions are whole-video captions (no times); the duration is None. The split is not in the file
but in its name, as the release writes it (`<dataset>_ret_train*.json`: "train", `<dataset>_ret_test*.json`:
"test"); a file of another name has split "".
"""
from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from pathlib import Path

from vidjax import io
from vidjax.data.annotations import types

EXTENSIONS = (".mp4", ".avi")  # what GRDR's loader removes from a file name to get the video id
_GZIP_MAGIC = b"\x1f\x8b"
_SPLIT_FILE = re.compile(r".+_ret_(train|test)(_\w+)?\.json(\.gz)?")


def video_id(name: str) -> str:
  """GRDR's video id of a release file name (see the module docstring)."""
  for ext in EXTENSIONS:
    if name.endswith(ext):
      name = name[: -len(ext)]
      break
  return name.rsplit("/", 1)[-1]


def caption_id(video: str, index: int) -> str:
  """GRDR's key of a video's `index`-th sentence (and of its release text embedding)."""
  return f"{video}_{index}"


def is_gzip(path: str | os.PathLike) -> bool:
  with open(path, "rb") as f:
    return f.read(2) == _GZIP_MAGIC


def load_json(path: str | os.PathLike, what: str = "GRDR annotation file"):
  """The parsed JSON of a plain or gzip-compressed file: one error naming the file (and, for a parse error, the
  line) when it does not read as a whole."""
  path = Path(path)
  if not path.exists():
    raise FileNotFoundError(f"{what} not found: {path}")
  if not is_gzip(path):
    return io.read_json(path, what)
  try:
    with gzip.open(path, "rb") as f:
      text = f.read().decode("utf-8")
  except (OSError, EOFError, zlib.error) as e:
    raise ValueError(f"{what} {path} is not a readable gzip file ({e}); is it truncated?") from None
  except UnicodeDecodeError as e:
    raise ValueError(f"{what} {path} is not valid JSON: its content is not UTF-8 ({e})") from None
  try:
    return io.loads_json(text, f"{what} {path}")
  except json.JSONDecodeError as e:
    raise ValueError(f"{what} {path} is not valid JSON: {e}") from None


def is_release_file(path: str | os.PathLike) -> bool:
  """Whether `path` is one of GRDR's annotation files: gzip-compressed (no other retrieval reader reads gzip; a
  gzip file of another content is then refused by `read_grdr`, naming what it looks like), or a `.json` file whose
  top level is a list of {"video", "caption"} rows."""
  path = Path(path)
  if not path.is_file():
    return False
  if is_gzip(path):
    return True
  return path.suffix.lower() == ".json" and types.json_format(load_json(path, "annotation file")) == "grdr"


def read_grdr(path: str | os.PathLike) -> types.RetrievalData:
  """Reads a GRDR annotation file (see the module docstring).

  Args:
    path: e.g. `msrvtt_ret_test.json` or `didemo_ret_train.json.gz`.

  Returns:
    `RetrievalData`: videos sorted by id, captions in file order (a list row's sentences in their order).

  Raises:
    FileNotFoundError: when the file does not exist.
    ValueError: naming the file (and the line, for a parse error; the row otherwise) and what was expected.
  """
  data = load_json(path)
  if not isinstance(data, list) or types.json_format(data) not in (None, "grdr"):
    types.fail(path, "top level", "expected a JSON list of {'video': file name, 'caption': str or list of str} rows "
               f"(a GRDR annotation file); found {types.describe_json(data)}")
  if not data:
    types.fail(path, "file", "expected at least one {'video', 'caption'} row, found none")
  named = _SPLIT_FILE.fullmatch(Path(path).name)
  split = named.group(1) if named else ""
  names: dict[str, tuple[str, int]] = {}  # video id -> (file name, first row)
  counts: dict[str, int] = {}
  captions = []
  for i, row in enumerate(data):
    where = f"row #{i}"
    name = types.require(row, "video", str, path, where)
    where = f"row #{i} (video {name.strip()!r})"
    vid = video_id(name.strip())
    if not vid.strip():
      types.fail(path, where, "'video' must name a video file (e.g. 'video9770.mp4')")
    name = types.clean_id(name, path, where, "'video'", "video file name")
    first = names.setdefault(vid, (name, i))
    if first[0] != name:
      types.fail(path, where, f"the file names {first[0]!r} (row #{first[1]}) and {name!r} give one video id {vid!r}: "
                 "a video is one file")
    caption = types.require(row, "caption", (str, list), path, where)
    sentences = caption if isinstance(caption, list) else [caption]
    if not sentences:
      types.fail(path, where, "'caption' must be a caption or a non-empty list of sentences, got []")
    for k, sentence in enumerate(sentences):
      at = where if isinstance(caption, str) else f"{where} sentence #{k}"
      if not isinstance(sentence, str):
        types.fail(path, at, f"a sentence must be str, got {type(sentence).__name__} {types.short_repr(sentence)}")
      text = types.clean_text(sentence, path, at, "'caption'")
      n = counts.get(vid, 0)
      counts[vid] = n + 1
      captions.append(types.Caption(caption_id=caption_id(vid, n), video_id=vid, text=text))
  return types.RetrievalData(source=f"GRDR {path}",
                             videos=tuple(types.RetrievalVideo(v, None, split) for v in sorted(names)),
                             captions=tuple(captions))
