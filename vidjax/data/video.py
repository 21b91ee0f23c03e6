"""Video decoding and uniform frame sampling for feature extraction (PyAV).

Implements the video side of the feature-extraction protocol of CAST App. A (Table 7, VideoPrism
row): T frames sampled uniformly over a clip (8 for YouCook2, 4 for COIN / CrossTask), resized to
288x288, RGB scaled to [0, 1] in NHWC layout, and black frames substituted when a video cannot be
decoded ("If decoding fails or a video is corrupted, we pad missing frames with black images to
keep the input shape fixed").

Sampling. For a clip [start, end) (seconds, measured from the first frame of the stream) the
target times are ``start + i * (end - start) / T`` for i = 0..T-1 and each target takes the frame
on screen at that time (the last frame whose timestamp is <= the target). Over a whole video this
equals the official VideoPrism demo's ``floor(linspace(0, n_frames, T, endpoint=False))`` for
constant-frame-rate video.

Resizing. ``aspect="squash"`` (default) resizes the whole frame to ``resolution x resolution``
without keeping the aspect ratio, as the official VideoPrism demo does; ``aspect="center_crop"``
first crops the central square. Scaling uses swscale's area filter (anti-aliased downsampling).

Failures never raise: an unreadable file gives all-black frames, a stream that breaks midway or a
segment that runs past the end of the video gives black frames for the missing targets. Every
black frame is flagged in the returned ``padded`` mask and the reason is in ``error``, so a long
extraction job can count and report them.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Sequence

import io

import av
import numpy as np

from vidjax import io as io_lib

ASPECT_MODES = ("squash", "center_crop")
# Frame timestamps are exact rationals but targets are floats; a tolerance keeps a target that
# lands exactly on a frame boundary (e.g. frame 25 of a 12 fps video at 25/12 s) on that frame.
_TIME_EPS = 1e-6
# Seeking costs a keyframe search; only worth it when the first target is far into the video.
_SEEK_MIN_S = 5.0
_LOG = logging.getLogger(__name__)


@dataclasses.dataclass
class DecodedClips:
  """Frames of several clips of one video.

  Attributes:
    frames: `[S, T, H, W, 3]`, float32 in [0, 1] (or uint8 in [0, 255] when asked for).
    padded: `[S, T]` bool, True where a frame is black padding (undecodable or past the end).
    error: why decoding failed or stopped early, None when the file decoded cleanly.
  """
  frames: np.ndarray
  padded: np.ndarray
  error: str | None = None

  @property
  def num_padded(self) -> int:
    return int(self.padded.sum())


def sample_times(start: float, end: float, num_frames: int) -> np.ndarray:
  """Uniform target times `[T]` over [start, end): start + i * (end - start) / T."""
  if num_frames <= 0:
    raise ValueError(f"num_frames must be positive, got {num_frames}")
  if not end >= start:
    raise ValueError(f"segment end {end} is before its start {start}")
  return start + np.arange(num_frames, dtype=np.float64) * ((end - start) / num_frames)


def _stream_duration(container, stream) -> float | None:
  if stream.duration is not None and stream.time_base is not None:
    return float(stream.duration * stream.time_base)
  if container.duration is not None:
    return container.duration / av.time_base
  if stream.frames and stream.average_rate:
    return stream.frames / float(stream.average_rate)
  return None


def _to_rgb(frame: av.VideoFrame, resolution: int, aspect: str) -> np.ndarray:
  if aspect == "center_crop" and frame.width != frame.height:
    rgb = frame.to_ndarray(format="rgb24")
    h, w = rgb.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb[top:top + side, left:left + side]), format="rgb24")
  return frame.reformat(width=resolution, height=resolution, format="rgb24", interpolation="AREA").to_ndarray()


def decode_clips(path: str | os.PathLike, segments: Sequence[tuple[float, float] | None], num_frames: int,
                 resolution: int = 288, aspect: str = "squash", uint8: bool = False, threads: int = 0,
                 log: bool = True) -> DecodedClips:
  """Decodes one video once and samples `num_frames` frames for each segment.

  Args:
    path: video file.
    segments: S entries, each `(start_s, end_s)` or None for the whole video.
    num_frames: T frames per segment.
    resolution: output side H = W.
    aspect: "squash" or "center_crop" (see the module docstring).
    uint8: return raw uint8 [0, 255] (4x less memory; the extractor scales on the device).
    threads: the decoder's threads (0 = FFmpeg's choice, about one per core). Decoding is exact whatever the
      count; a pool of decoding processes gives each a share of the cores instead.
    log: log a warning naming the file when it did not decode cleanly (`warn_if_failed`); a decoding worker
      process passes False and its parent logs, so the message reaches the job's own log.

  Returns:
    `DecodedClips` with frames `[S, T, H, W, 3]` and padded `[S, T]`. Never raises for a bad file.
  """
  if aspect not in ASPECT_MODES:
    raise ValueError(f"aspect must be one of {ASPECT_MODES}, got {aspect!r}")
  if resolution <= 0:
    raise ValueError(f"resolution must be positive, got {resolution}")
  for seg in segments:
    if seg is not None:
      sample_times(seg[0], seg[1], num_frames)  # validates the segment early, with a clear message
  n_seg = len(segments)
  frames = np.zeros((n_seg, num_frames, resolution, resolution, 3), np.uint8)
  filled = np.zeros((n_seg, num_frames), bool)
  error = None
  if threads < 0:
    raise ValueError(f"threads must be >= 0 (0 = FFmpeg's choice), got {threads}")
  try:
    error = _decode_into(str(path), segments, num_frames, resolution, aspect, frames, filled, allow_seek=True,
                         threads=threads)
  except Exception as e:  # pylint: disable=broad-except  # a bad file must not stop a long job
    error = f"{type(e).__name__}: {e}"
  if error is None and not filled.all():
    error = "segment extends past the end of the video"
  out = DecodedClips(frames if uint8 else frames.astype(np.float32) / 255.0, ~filled, error)
  if log:
    warn_if_failed(path, out)
  return out


def warn_if_failed(path: str | os.PathLike, decoded: DecodedClips) -> None:
  """Logs a warning naming `path`, the reason and the black-frame count when `decoded` has an error."""
  if decoded.error is not None:
    _LOG.warning("video %s: %s (%d of %d frames are black padding)", path, decoded.error, decoded.num_padded,
                 decoded.padded.size)


def _decode_into(path, segments, num_frames, resolution, aspect, frames, filled, allow_seek, threads=0) -> str | None:
  """Fills `frames` / `filled` in place; returns an error string when decoding stopped early."""
  with av.open(path) as container:
    if not container.streams.video:
      return "no video stream"
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    if threads:
      stream.thread_count = threads
    t0 = float(stream.start_time * stream.time_base) if stream.start_time is not None else 0.0
    duration = _stream_duration(container, stream)
    if duration is None and any(s is None for s in segments):
      return "video duration unknown (no duration or frame count in the container)"
    rate = float(stream.average_rate) if stream.average_rate else None

    # All targets of all segments, in time order: (absolute time, segment, frame slot).
    targets = []
    for s, seg in enumerate(segments):
      start, end = (0.0, duration) if seg is None else seg
      for i, t in enumerate(sample_times(start, end, num_frames)):
        targets.append((t0 + t, s, i))
    targets.sort()
    if not targets:
      return None

    first = targets[0][0]
    seeked = allow_seek and first - t0 > _SEEK_MIN_S
    if seeked:
      container.seek(int((first - 1.0) / stream.time_base), stream=stream, backward=True, any_frame=False)

    k = 0  # next unassigned target
    prev, prev_rgb, prev_time, index, error = None, None, None, 0, None

    def assign(frame_rgb_fn, until):
      nonlocal k
      while k < len(targets) and targets[k][0] < until:
        _, s, i = targets[k]
        frames[s, i] = frame_rgb_fn()
        filled[s, i] = True
        k += 1

    try:
      for frame in container.decode(stream):
        ft = float(frame.time) if frame.time is not None else (t0 + index / rate if rate else None)
        index += 1
        if ft is None:
          return "frame without timestamp and no frame rate"
        if seeked and prev is None and ft > first + _TIME_EPS:
          # The seek overshot the first target: decode again from the start (rare, slow path).
          return _decode_into(path, segments, num_frames, resolution, aspect, frames, filled, allow_seek=False,
                              threads=threads)
        if prev is not None:
          def prev_frame():
            nonlocal prev_rgb
            if prev_rgb is None:
              prev_rgb = _to_rgb(prev, resolution, aspect)
            return prev_rgb
          assign(prev_frame, ft - _TIME_EPS)
        elif targets[k][0] < ft - _TIME_EPS:
          # Targets before the first frame (stream starting late) take the first frame.
          first_rgb = _to_rgb(frame, resolution, aspect)
          assign(lambda: first_rgb, ft - _TIME_EPS)
        prev, prev_rgb, prev_time = frame, None, ft
        if k == len(targets):
          return None
    except Exception as e:  # pylint: disable=broad-except
      error = f"decoding stopped at {prev_time if prev_time is not None else 0.0:.3f} s: {type(e).__name__}: {e}"
    if prev is None:
      return error or "no decodable frames"
    # The last frame stays on screen for one frame period (or until the stated duration).
    frame_period = 1.0 / rate if rate else 0.0
    end_time = prev_time + frame_period
    if duration is not None and error is None:
      end_time = max(end_time, t0 + duration)
    rgb = _to_rgb(prev, resolution, aspect)
    assign(lambda: rgb, end_time - _TIME_EPS)
    return error


def decode_video(path: str | os.PathLike, num_frames: int, resolution: int = 288,
                 segment: tuple[float, float] | None = None, aspect: str = "squash"
                 ) -> tuple[np.ndarray, np.ndarray, str | None]:
  """Decodes `num_frames` uniformly sampled frames of a video or of one segment of it.

  Args:
    path: video file.
    num_frames: T.
    resolution: output side H = W (288 for VideoPrism).
    segment: `(start_s, end_s)` or None for the whole video.
    aspect: "squash" or "center_crop".

  Returns:
    frames `[T, H, W, 3]` float32 in [0, 1], padded `[T]` bool (black padding frames), and the
    error string (None when the video decoded cleanly).
  """
  out = decode_clips(path, [segment], num_frames, resolution, aspect)
  return out.frames[0], out.padded[0], out.error


def encode_video(frames: np.ndarray, fps: int = 8, quantizer: int = 2) -> bytes:
  """mp4 bytes of `frames` (uint8 `[T, H, W, 3]` RGB, H and W even): MPEG-4 Part 2 at a fixed quantizer
  (2 = finest, 31 = coarsest), one thread, so the same frames always give the same bytes.

  Why not H.264: libx264 gave different bytes for the same frames in 20 of 240 encodes on a loaded 2-core
  machine, even with `threads=1` in its own parameters; FFmpeg's MPEG-4 encoder gave none in 360.
  """
  frames = np.asarray(frames)
  if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[1] % 2 or frames.shape[2] % 2:
    raise ValueError(f"encode_video: frames must be uint8 [T, H, W, 3] with even H and W, got {frames.dtype} "
                     f"{frames.shape}")
  if not 2 <= quantizer <= 31:
    raise ValueError(f"encode_video: quantizer must be in [2, 31], got {quantizer}")
  buf = io.BytesIO()
  with av.open(buf, "w", format="mp4") as container:
    stream = container.add_stream("mpeg4", rate=fps)
    stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
    ctx = stream.codec_context
    ctx.thread_count = 1
    ctx.qmin = ctx.qmax = quantizer
    for img in frames:
      for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
        container.mux(packet)
    for packet in stream.encode():
      container.mux(packet)
  return buf.getvalue()


def write_video(path: str | os.PathLike, frames: np.ndarray, fps: int = 8, quantizer: int = 2) -> None:
  """Writes `frames` as an mp4 file atomically (`encode_video`)."""
  io_lib.atomic_write_bytes(path, encode_video(frames, fps, quantizer))


# ----------------------------------------------------------------------------------------------
# Finding a dataset's videos in a folder, by id.

VIDEO_EXTENSIONS = (".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v", ".mpg", ".mpeg", ".flv")
def is_video(path: Path) -> bool:
  return path.is_file() and path.suffix.lower() in VIDEO_EXTENSIONS


def index_videos(folder: str | os.PathLike) -> dict[str, str]:
  """`{file stem: path}` of every video under `folder` (recursive); the first extension in
  `VIDEO_EXTENSIONS` order wins when one id has several files."""
  folder = Path(folder)
  if not folder.is_dir():
    raise FileNotFoundError(f"config.data.videos: video folder not found: {folder}")
  rank = {ext: i for i, ext in enumerate(VIDEO_EXTENSIONS)}
  found: dict[str, Path] = {}
  for path in sorted(folder.rglob("*")):
    if is_video(path):
      old = found.get(path.stem)
      if old is None or rank[path.suffix.lower()] < rank[old.suffix.lower()]:
        found[path.stem] = path
  return {k: str(v) for k, v in found.items()}


def video_finder(folder: str | os.PathLike):
  """`video id -> path or None` over the videos under `folder` (`index_videos`), matched by id or by the id's stem
  (DiDeMo's ids carry an extension the files may not)."""
  index = index_videos(folder)
  return lambda video_id: index.get(video_id) or index.get(Path(video_id).stem)
