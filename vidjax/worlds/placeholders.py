"""Placeholder videos for real release files: walk the real path before the videos are downloaded.

`write_videos(dataset, annotations, videos_dir, per_split)` reads a dataset's release annotation files (as published:
YouCook2, COIN, ActivityNet Captions, MSR-VTT, DiDeMo) through the project's own readers, picks the first
`per_split` videos of each split in sorted id order and writes one small mp4 per picked video, named by its id the way
`configs/prepare.py` finds it (`vidjax.data.video.index_videos`), as long as the release says the video is, and marks the folder above the
videos SYNTHETIC (`vidjax.worlds.release.MARKER`, which `configs/prepare.py` reads). The
pixels are SYNTHETIC (a few coloured squares drifting, seeded by the id), so every number a method reports on them is
at chance: what the walk checks is the plumbing, with the release files exactly as published.

    python -m vidjax.worlds.placeholders --dataset youcook2 \
        --annotations youcookii_annotations_trainval.json --videos VIDEOS --per_split 16

`tests/test_readme_commands.py` runs every README "Real data" command on such videos.
"""
from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np

from vidjax import io
from vidjax.data import video as video_lib
from vidjax.worlds import release

FPS = 2          # frames per second of a placeholder (prepare samples 8-16 frames per clip)
SIZE = 32        # pixels per side (prepare resizes to its backbone's resolution)
DEFAULT_SECONDS = 30.0  # a video whose release gives no duration (MSR-VTT's CSV, DiDeMo: 6 x 5 s chunks)


def _seed(video_id: str) -> int:
  return int.from_bytes(hashlib.sha256(video_id.encode()).digest()[:4], "little")


def frames(video_id: str, seconds: float) -> np.ndarray:
  """uint8 [T, SIZE, SIZE, 3]: three squares of the id's colours, each drifting at its own speed."""
  rng = np.random.default_rng(_seed(video_id))
  t = max(2, int(np.ceil(seconds * FPS)) + 1)
  colours = rng.integers(40, 256, (3, 3))
  pos, vel = rng.uniform(0, SIZE - 8, (3, 2)), rng.uniform(-1.5, 1.5, (3, 2))
  out = np.zeros((t, SIZE, SIZE, 3), np.uint8)
  out[:] = rng.integers(0, 40, 3)
  for i in range(t):
    for c in range(3):
      y, x = (np.abs((pos[c] + vel[c] * i) % (2 * (SIZE - 8)) - (SIZE - 8))).astype(int)
      out[i, y:y + 8, x:x + 8] = colours[c]
  return out


def release_videos(dataset: str, annotations: str) -> dict[str, dict[str, float]]:
  """{split: {file stem: seconds}} of the videos a release names, through the project's readers."""
  from vidjax.data import annotations as readers  # pylint: disable=g-import-not-at-top
  from vidjax.data.retrieval import read_dataset  # pylint: disable=g-import-not-at-top
  out: dict[str, dict[str, float]] = {}
  if dataset in readers.READERS:  # procedure datasets: every annotated video, its duration or last segment
    for v in readers.read_annotations(dataset, annotations):
      seconds = v.duration or max((c.end for c in v.clips), default=DEFAULT_SECONDS)
      out.setdefault(v.split, {})[v.video_id] = float(seconds) + 1.0
    return out
  data = read_dataset(dataset, annotations)
  for v in data.videos:
    seconds = getattr(v, "duration", None) or DEFAULT_SECONDS
    out.setdefault(getattr(v, "split", "") or "test", {})[Path(v.video_id).stem] = float(seconds) + 1.0
  return out


def write_clip(path: str | Path, video_id: str, seconds: float) -> None:
  """One placeholder mp4 at `path` (`<id>.mp4`), unless it is there; the folder above its folder gets the SYNTHETIC
  marker `configs/prepare.py` reads, so the store and every result from it say synthetic."""
  path = Path(path)
  if not path.exists():
    path.parent.mkdir(parents=True, exist_ok=True)
    video_lib.write_video(path, frames(video_id, seconds), fps=FPS)
  marker = path.parent.parent / release.MARKER
  if not marker.exists():
    io.atomic_write_text(marker, "SYNTHETIC placeholder videos (vidjax.worlds.placeholders) for real release files\n")


def write_videos(dataset: str, annotations: str, videos_dir: str | Path, per_split: int) -> list[str]:
  """Writes the placeholder mp4s (skipping ones already there); returns the ids written or found, sorted."""
  picked = []
  for split, videos in sorted(release_videos(dataset, annotations).items()):
    for vid in sorted(videos)[:per_split]:
      write_clip(Path(videos_dir) / f"{vid}.mp4", vid, videos[vid])
      picked.append(vid)
  return sorted(picked)


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--dataset", required=True)
  p.add_argument("--annotations", required=True, help="the release file(s), comma-separated, as data.annotations")
  p.add_argument("--videos", required=True, help="the folder to write <id>.mp4 into")
  p.add_argument("--per_split", type=int, default=16)
  a = p.parse_args(argv)
  ids = write_videos(a.dataset, a.annotations, a.videos, a.per_split)
  print(f"{len(ids)} SYNTHETIC placeholder videos for {a.dataset} in {a.videos}")


if __name__ == "__main__":
  main()
