"""Annotation readers for the public video datasets.

Procedural video (CAST §2.2, §3.1): `read_annotations(fmt, path, split)` dispatches on the format name
through `READERS`; each reader returns `Video`s (sorted by id) of `Clip`s (temporal order), the model
in `types.py`.

Text-video retrieval: `read_msrvtt`, `read_didemo`, `read_activitynet_captions`, `read_msvd` and
`read_lsmdc` return one `RetrievalData` (`RetrievalVideo`s sorted by id, `Caption`s in file order);
`paragraphs` turns one into the paragraph-to-video protocol (one query per video). `read_grdr` reads GRDR's
release files, one format for its four datasets (`grdr.is_release_file` tells them from each dataset's own).
"""
from __future__ import annotations

import os

from vidjax.data.annotations.activitynet import read_activitynet_captions
from vidjax.data.annotations.coin import read_coin
from vidjax.data.annotations.crosstask import read_crosstask
from vidjax.data.annotations.crosstask import read_crosstask_tasks
from vidjax.data.annotations.didemo import read_didemo
from vidjax.data.annotations.grdr import read_grdr
from vidjax.data.annotations.lsmdc import read_lsmdc
from vidjax.data.annotations.msrvtt import read_msrvtt
from vidjax.data.annotations.msvd import read_msvd
from vidjax.data.annotations import types
from vidjax.data.annotations.types import Caption
from vidjax.data.annotations.types import Clip
from vidjax.data.annotations.types import RetrievalData
from vidjax.data.annotations.types import RetrievalVideo
from vidjax.data.annotations.types import Video
from vidjax.data.annotations.types import paragraphs
from vidjax.data.annotations.types import split_by_video
from vidjax.data.annotations.youcook2 import read_youcook2

READERS = {
    "youcook2": read_youcook2,
    "coin": read_coin,
    "crosstask": read_crosstask,
}


# Retrieval dataset name -> reader of its one annotation file (MSVD needs two files: call read_msvd).
RETRIEVAL_READERS = {
    "msrvtt": read_msrvtt,
    "didemo": read_didemo,
    "activitynet": read_activitynet_captions,
    "lsmdc": read_lsmdc,
}


def annotation_paths(path: str | os.PathLike) -> list[str]:
  """The files of a `data.annotations` value: one path, or several joined by commas (COIN's
  `coin_train_70.json,coin_test_30.json`, ActivityNet's `train.json,val_1.json`)."""
  paths = [p.strip() for p in str(path).split(",") if p.strip()]
  if not paths:
    raise ValueError("config.data.annotations is empty: give the dataset's annotation file(s), comma-separated")
  return paths


def read_annotations(fmt: str, path: str | os.PathLike, split: str | None = None) -> list[Video]:
  """Reads annotations of format 'youcook2' | 'coin' | 'crosstask' (a file, or CrossTask's folder); several
  files joined by commas are read in turn and merged (a video in two of them is an error naming both). A `split`
  none of the files holds is one error saying which splits each holds."""
  if fmt not in READERS:
    raise ValueError(f"unknown annotation format {fmt!r}; expected one of {sorted(READERS)}")
  types.check_split_arg(split, types.SPLITS, "read_annotations")
  paths = annotation_paths(path)
  if len(paths) == 1:
    return READERS[fmt](paths[0], split)
  seen: dict[str, str] = {}
  videos, held = [], []
  for p in paths:
    read = READERS[fmt](p, None)  # every file whole: one of them may hold none of `split`
    held.append(f"{p} holds {types.split_counts(v.split for v in read)}")
    for v in read:
      if v.video_id in seen:
        raise ValueError(f"{p}: video {v.video_id!r} is also in {seen[v.video_id]}; each video belongs to one file")
      seen[v.video_id] = p
      if split is None or v.split == split:
        videos.append(v)
  if not videos:
    raise ValueError(f"no video of the {split!r} split asked for in {', '.join(paths)}: {'; '.join(held)}")
  return sorted(videos, key=lambda v: v.video_id)


__all__ = ["Caption", "Clip", "READERS", "annotation_paths", "RETRIEVAL_READERS", "RetrievalData", "RetrievalVideo", "Video", "paragraphs",
           "read_activitynet_captions", "read_annotations", "read_coin", "read_crosstask",
           "read_crosstask_tasks", "read_didemo", "read_grdr", "read_lsmdc", "read_msrvtt", "read_msvd",
           "read_youcook2", "split_by_video"]
