"""Experiment `extract_videoprism`: videos (+ annotations) -> VideoPrism feature store.

Wires the Flax VideoPrism models (`vidjax/models/videoprism.py`) and the SentencePiece tokenizer
into the model-agnostic engine `vidjax/extract.py`, following the VideoPrism protocol of CAST
App. A: the LvT checkpoint, T uniformly sampled frames (8 on YouCook2, 4 on COIN / CrossTask) at
288x288 in [0, 1] NHWC, the pooled LvT video embedding as the clip feature in the native text-video
space, caption embeddings from the LvT text tower, L2-normalized.

Clip list (`config.data`):
  * `annotations` + `format` ('youcook2' | 'coin' | 'crosstask'): one clip per annotated step
    (clip id `video_id#index`, caption = step text), videos looked up by id in the folder
    `videos` (searched recursively, any common video extension). Videos not found are skipped,
    counted and reported (`missing_videos`).
  * `videos` alone: a folder (every video file is one whole-video clip, id = file stem), a single
    video file, a `.txt` list (a video path per line, or tab-separated `clip_id, path, start, end`),
    or a `.json` list of `{"clip_id", "video", "start"?, "end"?, "text"?}` (texts become captions
    keyed by clip id). Relative paths are relative to the list file.
  * `annotations` + `format` ('msrvtt' | 'didemo' | 'activitynet' | 'lsmdc', the retrieval readers):
    whole videos (`unit='video'`, clip id = video id) with their captions keyed by caption id, or one
    paragraph per video keyed by video id (`protocol='paragraphs'`); or every timed caption's segment
    (`unit='segment'`, clip id = caption id), e.g. ActivityNet segments for VideoComp.
  * `captions`: optional JSON `{caption_id: text}` merged into the captions.

Outputs: the store at `config.store` (default `<workdir>/features`) and `<workdir>/results.json`.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any


from vidjax import extract as engine
from vidjax import io
from vidjax.data.annotations import READERS, RETRIEVAL_READERS, paragraphs, read_annotations
from vidjax.experiments import common
from vidjax.data.video import VIDEO_EXTENSIONS, index_videos, is_video
from vidjax.extract import extract_into

_LOG = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- clip lists

def _read_list(path: Path) -> tuple[list[engine.VideoSegment], dict[str, str]]:
  base = path.parent
  resolve = lambda p: str(p if Path(p).is_absolute() else base / p)
  clips, captions = [], {}
  if path.suffix == ".json":
    entries = io.read_json(path, "clip list")
    if not isinstance(entries, list):
      raise ValueError(f"clip list {path} must be a JSON list of objects, got {type(entries).__name__}")
    for n, e in enumerate(entries):
      if not isinstance(e, dict) or "video" not in e:
        raise ValueError(f"clip list {path}: entry {n} must be an object with at least 'video', got {e!r}")
      if ("start" in e) != ("end" in e):
        raise ValueError(f"clip list {path}: entry {n} must give both 'start' and 'end' or neither, got {e!r}")
      clip_id = str(e.get("clip_id", Path(e["video"]).stem))
      clips.append(engine.VideoSegment(clip_id, resolve(e["video"]), e.get("start"), e.get("end")))
      if e.get("text") is not None:
        captions[clip_id] = str(e["text"])
    return clips, captions
  with open(path, encoding="utf-8") as f:
    for n, line in enumerate(f, 1):
      line = line.rstrip("\n")
      if not line.strip() or line.startswith("#"):
        continue
      fields = line.split("\t")
      if len(fields) == 1:
        clips.append(engine.VideoSegment(Path(fields[0].strip()).stem, resolve(fields[0].strip())))
      elif len(fields) == 4:
        try:
          start, end = float(fields[2]), float(fields[3])
        except ValueError:
          raise ValueError(f"clip list {path}:{n}: start/end must be numbers, got {fields[2:]!r}") from None
        clips.append(engine.VideoSegment(fields[0], resolve(fields[1]), start, end))
      else:
        raise ValueError(f"clip list {path}:{n}: expected a video path or 4 tab-separated fields "
                         f"(clip_id, path, start, end), got {len(fields)} fields: {line!r}")
  return clips, captions


UNITS = ("video", "segment")


def _retrieval_clips(data, index: dict[str, str]):
  """Clips of a retrieval dataset: whole videos (`data.unit='video'`, clip id = video id, captions keyed
  by caption id, or by video id with `data.protocol='paragraphs'`) or timed caption segments
  (`data.unit='segment'`, clip id = caption id). A video id with a file extension (DiDeMo) also matches
  a file by its stem."""
  if data.unit not in UNITS:
    raise ValueError(f"config.data.unit must be one of {UNITS}, got {data.unit!r}")
  records = RETRIEVAL_READERS[data.format](data.annotations)
  if data.protocol == "paragraphs":
    records = paragraphs(records)
  elif data.protocol != "captions":
    raise ValueError(f"config.data.protocol must be 'captions' or 'paragraphs', got {data.protocol!r}")
  split = {v.video_id: v.split for v in records.videos}
  path_of = lambda vid: index.get(vid) or index.get(Path(vid).stem)  # noqa: E731
  wanted = [v for v in records.video_ids() if not data.split or split[v] == data.split]
  missing = [v for v in wanted if path_of(v) is None]
  keep = set(wanted) - set(missing)
  captions = {c.caption_id: c.text for c in records.captions if c.video_id in keep}
  if data.unit == "video":
    clips = [engine.VideoSegment(v, path_of(v)) for v in wanted if v in keep]
  else:
    clips = [engine.VideoSegment(c.caption_id, path_of(c.video_id), c.start, c.end)
             for c in records.captions if c.video_id in keep]
  return clips, captions, missing, len(wanted)


def build_clips(data) -> tuple[list[engine.VideoSegment], dict[str, str], dict[str, Any]]:
  """Clips, captions `{id: text}` and bookkeeping (`missing_videos`) from `config.data`."""
  info: dict[str, Any] = {"missing_videos": 0}
  if not data.videos:
    raise ValueError("config.data.videos is empty: give a video folder, a video file or a clip list (.txt/.json)")
  videos = Path(data.videos)
  captions: dict[str, str] = {}
  if data.annotations and data.format in RETRIEVAL_READERS:
    clips, captions, missing, total = _retrieval_clips(data, index_videos(videos))
    engine.one_file_per_video(videos, {Path(c.video).stem for c in clips})
    if missing:
      _LOG.warning("%d of %d annotated videos have no file under %s and are skipped (e.g. %s)",
                   len(missing), total, videos, ", ".join(missing[:5]))
    info["missing_videos"] = len(missing)
    info["missing_video_ids"] = missing[:100]
  elif data.annotations:
    if not data.format:
      raise ValueError(f"config.data.annotations={data.annotations!r} needs config.data.format "
                       "('youcook2', 'coin' or 'crosstask')")
    if data.format not in READERS:
      raise ValueError(f"config.data.format must be one of {sorted(READERS) + sorted(RETRIEVAL_READERS)} or '', "
                       f"got {data.format!r}")
    annotated = read_annotations(data.format, data.annotations, data.split or None)
    index = index_videos(videos)
    engine.one_file_per_video(videos, [v.video_id for v in annotated])
    clips, missing = [], []
    for v in annotated:
      if v.video_id not in index:
        missing.append(v.video_id)
        continue
      for c in v.clips:
        clips.append(engine.VideoSegment(c.clip_id, index[v.video_id], c.start, c.end))
        captions[c.clip_id] = c.text
    if missing:
      _LOG.warning("%d of %d annotated videos have no file under %s and are skipped (e.g. %s)",
                   len(missing), len(annotated), videos, ", ".join(missing[:5]))
    info["missing_videos"] = len(missing)
    info["missing_video_ids"] = missing[:100]
  elif videos.is_dir():
    engine.one_file_per_video(videos)
    clips = [engine.VideoSegment(stem, path) for stem, path in sorted(index_videos(videos).items())]
  elif is_video(videos):
    clips = [engine.VideoSegment(videos.stem, str(videos))]
  elif videos.suffix in (".txt", ".json") and videos.is_file():
    clips, captions = _read_list(videos)
  else:
    raise FileNotFoundError(f"config.data.videos={str(videos)!r} is not a video folder, a video file "
                            f"({', '.join(VIDEO_EXTENSIONS)}) or a .txt/.json clip list")
  if data.captions:
    extra = io.read_json(data.captions, "caption file")
    if not isinstance(extra, dict):
      raise ValueError(f"caption file {data.captions} must be a JSON object {{caption_id: text}}")
    captions.update({str(k): str(v) for k, v in extra.items()})
  seen = set()
  for c in clips:
    if c.clip_id in seen:
      raise ValueError(f"clip id {c.clip_id!r} occurs twice in the clip list from {data.videos}; ids must be unique")
    seen.add(c.clip_id)
  if not clips:
    raise ValueError(f"no clips to extract from config.data.videos={data.videos!r}")
  return clips, captions, info


# ----------------------------------------------------------------------------- run

def validate(config) -> None:
  """The extraction's own keys, before anything is decoded: one clear error naming the key."""
  from vidjax.defaults.common import bad_value, check_choice, check_positive_int  # pylint: disable=g-import-not-at-top
  if not config.data.videos:
    bad_value("data.videos", "", "a video folder, a video file or a clip list (.txt/.json)")
  check_positive_int(config, ["num_frames", "resolution", "batch_size", "text_batch_size"])
  if isinstance(config.decode_workers, bool) or not isinstance(config.decode_workers, int) or config.decode_workers < 0:
    bad_value("decode_workers", config.decode_workers, "an integer >= 0 (0 = every usable host core but one)")
  check_choice(config, "aspect", ("squash", "center_crop"))
  check_choice(config, "store_dtype", ("float32", "bfloat16"))
  check_choice(config, "data.unit", UNITS)
  check_choice(config, "data.protocol", ("captions", "paragraphs"))
  check_choice(config, "data.format", ("", *READERS, *RETRIEVAL_READERS))


@common.precision_policy
def run(config, workdir: str) -> dict:
  """Extracts features for `config.data` into `config.store`; writes and returns `results.json`'s dict."""
  workdir = common.start_run(config, workdir, validate)
  clips, captions, info = build_clips(config.data)
  store_root = config.store or str(workdir / "features")
  with common.precision(config, "extract"):
    metrics, meta = extract_into(config, store_root, clips, captions, _dataset_name(config), info["missing_videos"])
  results = common.results_dict(
      config, dataset=_dataset_name(config), synthetic=False, random_init=meta["random_init"], store=str(store_root),
      path="real", skipped_videos={"count": info["missing_videos"], "file": ""}, metrics={"extract": metrics})
  table = _table(results)
  common.write_results(workdir, results, [table])
  return results


def _dataset_name(config) -> str:
  return config.data.format or Path(str(config.data.videos)).name


def _table(results: dict) -> str:
  rows = results["metrics"]["extract"]
  width = max(len(k) for k in rows)
  lines = [f"extract_videoprism ({results['dataset']}) -> {results['store']}"
           + ("  [RANDOM WEIGHTS]" if results["random_init"] else "")]
  for k, v in rows.items():
    lines.append(f"  {k:<{width}}  {v:.2f}" if isinstance(v, float) else f"  {k:<{width}}  {v}")
  return "\n".join(lines)
