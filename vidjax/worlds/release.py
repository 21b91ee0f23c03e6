"""A SYNTHETIC rendered video corpus written in the release formats of the real datasets.

The real path of vidjax starts from video files and a dataset's own annotation files (the official release
layouts that `vidjax.data.annotations`, `vidjax.data.comp` and `vidjax.data.genstate` read), goes through
decoding and feature extraction (`vidjax.experiments.extract`) and ends in the methods. This module writes a
small corpus that looks like those releases, so the whole path runs offline on a fresh machine. Nothing in it
is real data: every video is rendered by `vidjax.worlds.rendered` (flat coloured shapes on a grey board) and
every text is a template prompt; the manifest says `"synthetic": true`.

Content: procedure videos. `tasks` tasks are drawn from the seed; a task is a fixed sequence of `steps` step
scenes, each a `rendered` state-transition scene (its category -- Position, Quantity, Actor, Relation -- and
objects) with its English prompt, e.g. "a second red circle appears next to the blue square"; the steps of a
task have distinct prompts and cover the categories in a seed-drawn order. Every video of a task renders
that task's steps in order, `frames_per_step` frames each, concatenated into one mp4, with its own variation:
the board tint, a translation of each step's scene on the grid (one that keeps every relation the prompt
names) and the pixel noise. Step k of a video is one timed event, [k, k + 1] * frames_per_step / fps
seconds. Its caption is the step's prompt followed by where this video draws the step's scene, in words
(`place`: "a second red circle appears next to the blue square in the top left"). A video's paragraph is its
captions in order, each ending with a period (`vidjax.data.comp.plain_paragraph`). Tasks give the CVR
structure: the videos of one task share its task id and step ids (YouCook2 recipe_type; COIN recipe_type + step
ids; CrossTask task + step list); COIN's step labels and CrossTask's step names are the bare prompts (a
task-level step list, as in those releases), every other format gets the per-video captions.
Why the place: real captions describe their own video. When every video of a task shared one caption per step,
a caption matched all of its task's test videos equally well: 40 distinct paragraphs for 600 test videos
capped exact-video R@1 (VEDJE's rerank could not move it off stage 1's 6.5%), and a backbone trained on shared
captions learnt nothing that tells one video of a step from another. The place is seen in the pixels and is
drawn per video and step, so most videos of a task get a paragraph of their own (`manifest.json` counts the
distinct paragraphs among each split's videos).

Layout (`write_corpus(root)`)::

    root/manifest.json              the paths to pass for each dataset, seed, config, "synthetic": true
    root/.corpus.json               seed + config stamp (a second write must use the same ones)
    root/clips/task0000_video0000.mp4             every procedure video, rendered once
    root/youcook2/youcookii_annotations_trainval.json, train_list.txt, val_list.txt, label_foodtype.csv
    root/coin/coin_train_70.json, coin_test_30.json                        (PDPP two-file list layout)
    root/crosstask/tasks_primary.txt, videos.csv, videos_val.csv, annotations/<task>_<id>.csv
    root/msrvtt/MSRVTT_data.json, train_list_jsfusion.txt, val_list_jsfusion.txt, MSRVTT_JSFUSION_test.csv,
                                    MSRVTT_facets_test.csv (one step caption per test video: `facet_queries`),
                                    MSRVTT_order_test.csv, train_list_order.txt (the ordered-event clips)
    root/clips/order_test0000_a.mp4                the ordered-event clips (`make_ordered`), MSR-VTT only
    root/corpus_summary.json        per mechanism, the share of its queries only it decides (`corpus_summary`)
    root/didemo/train_data.json, test_data.json
    root/activitynet/train.json, val_1.json
    root/msvd/youtube_mapping.txt, AllVideoDescriptions.txt
    root/<dataset>/videos/<file>.mp4  relative symlinks to ../../clips/<clip>.mp4 under the dataset's ids
    root/genstate/train.json, test.json, videos/<clip id>.mp4       (`rendered.make_world`, real files)
    root/videocomp/activitynet_comp_train.json, activitynet_comp_test.json, counts.json

Splits: within each task, video v is a test video when v % test_every == test_every - 1 (default 3: 2/3
train), so the split of a video never changes when the counts grow. Per format:

* YouCook2: subset "training" / "validation" (-> reader splits train / val); recipe_type "101", "102", ...;
  segments in whole seconds as in the release; `train_list.txt` / `val_list.txt` as `recipe_type/video_id`.
  Ids: 11-character YouTube-like strings (as COIN and CrossTask, each dataset its own).
* COIN: `coin_train_70.json` (subset "training") and `coin_test_30.json` ("testing"), lists of one-key dicts;
  recipe_type 1, 2, ...; step ids are global strings ("1", "2", ... one per (task, step)).
* CrossTask: task ids 10000 + t, one block each in `tasks_primary.txt` (the steps are the prompts, which
  hold no comma); `videos.csv` lists the training videos and `videos_val.csv` the test videos. QUIRK: the
  reader ignores both lists for splitting and labels every annotated video with the CAST 80/20 seed-42 split
  (`types.split_by_video`), so its train/test counts are round(0.8 N) / round(0.2 N), not 2/3.
* MSR-VTT: `MSRVTT_data.json` with videos `video<N>` (N = t * videos_per_task + v), split "train" / "test",
  "start time" / "end time" spanning the video's duration, and sentences = the paragraph then each step
  prompt; `train_list_jsfusion.txt` lists the training ids, `val_list_jsfusion.txt` the test ids (in the real
  data it is the 1k-A test list) and `MSRVTT_JSFUSION_test.csv` (comma-delimited, header
  key,vid_key,video_id,sentence) holds one caption -- the paragraph -- per test video. `MSRVTT_facets_test.csv`
  (the same layout) holds the facet queries instead: one step caption per test video (`facet_queries`), for the
  dense rows' line where a query names one part of its video (pass it as `data.annotations` to the dense config).
  The ordered-event clips (`order_train` / `order_test` pairs, `make_ordered`) are MSR-VTT videos numbered after the
  procedure videos, in `MSRVTT_data.json` with their caption ("A, then B"); `train_list_order.txt` lists the training
  clips and `MSRVTT_order_test.csv` holds one query per test clip (keys order0, ...), whose gallery holds its twin:
  the same events in another order. The JSFUSION lists and csv are as without them.
* DiDeMo: `train_data.json` / `test_data.json`, one description per step. Timing: the config requires a step
  to last a whole number of 5-second chunks and a video at most 6 chunks (30 s), so step k is exactly the
  chunk moment [k c, (k + 1) c - 1] (c chunks per step) and `num_segments` is the video's chunk count; three
  annotators mark that moment and a fourth sometimes a neighbouring one (the consensus rule picks the step).
  Video ids are flickr-style names WITH an extension as in the release (".mov", ".avi", ...); the file is
  `<name without extension>.mp4`, which is how extraction resolves a DiDeMo id (by its stem).
* ActivityNet Captions: `train.json` / `val_1.json`, ids `v_<11 characters>`, one timestamp + sentence per step.
* MSVD: clip names `<youtube id>_<start>_<end>` (whole seconds, end - start = the video's duration) mapped to
  `vid<N>` in `youtube_mapping.txt`; the reader's video id is the clip name, so files are `<clip name>.mp4`.
  The reader splits by number (vid1-1200 train, 1201-1300 val, 1301-1970 test): training videos are
  numbered vid1, vid2, ... and test videos vid1301, vid1302, ...; no val. A corpus with more than 1200
  training or 670 test videos cannot be written for MSVD (a clear error). Captions
  (`AllVideoDescriptions.txt` layout, '#' header) are the paragraph then each step prompt, keyed by clip name.
* GenState: `rendered.make_world` with `genstate_train` / `genstate_test` queries per category and its
  metadata (`rendered.write_metadata`) as `train.json` / `test.json`; the clips are written directly into
  `genstate/videos/` (ids `train00000_main`, ...).
* VideoComp: `build_comp` over the ActivityNet-format records (`events_from_activitynet`), train (with
  `multi`) and test, `write_release`. The shipped action lexicon holds none of the rendered grammar's verbs,
  so the builder's `TemplateRewriter` gets `COMP_LEXICON` (appears <-> disappears, onto <-> off): with 4 or more
  steps every task has a Quantity and a Relation step, so every video has an action to replace (with fewer,
  a video may have none and its action_replace is skipped and counted). Its videos are the ActivityNet videos.

Mechanisms. Three kinds of query need something a frame-mean model cannot do, and `corpus_summary.json` says how
often (`corpus_summary`, `vidjax.worlds.oracles`): the ordered-event queries need order (a clip and its twin hold the
same frames), the facet queries need per-frame attention (a step is a quarter of its video), and GenState's temporal
negatives that reverse the main clip need order too.

Determinism: task t draws from `np.random.default_rng([seed, 1, t])`, video (t, v) its variation from `[seed, 2, t,
v]` and step k's noise from `[seed, 3, t, v, k]`; dataset ids and annotation details from `[seed, 4, dataset, t, v]`;
facet queries from `[seed, 5, t, v]`; ordered-event pair i of a split from `[seed, 6, split, i]` (so adding them left
every procedure clip, and every dataset's files but MSR-VTT's, as before). So the same seed gives the same annotation
bytes and (PyAV's single-threaded MPEG-4 encoder, `vidjax.data.video.encode_video`) the same mp4 bytes, and a larger
config renders the same videos for the (t, v) it shares with a smaller one (ids numbered by position -- MSR-VTT, MSVD
-- follow the counts). Every file is written atomically and a clip or link already in place is skipped, so a killed
write resumes; a root stamped with another seed or config is refused.

CLI: `python -m vidjax.worlds.release --root DIR [--size smoke|full] [--seed 0] [--datasets a,b,...]`.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from vidjax import io
from vidjax.data import comp
from vidjax.data import video as video_lib
from vidjax.data.annotations import read_activitynet_captions
from vidjax.worlds import oracles
from vidjax.worlds import rendered

DATASETS = ("youcook2", "coin", "crosstask", "msrvtt", "didemo", "activitynet", "msvd", "genstate", "videocomp")
PROCEDURE_DATASETS = DATASETS[:7]
SYNTHETIC_NOTE = ("SYNTHETIC release-format corpus (vidjax.worlds.release): rendered shapes and template prompts "
                  "in the layouts of the real releases; exercises the real path, not real data")
DIDEMO_CHUNK_S = 5
DIDEMO_MAX_CHUNKS = 6
MSVD_TRAIN_MAX = 1200  # vid1-1200 train, vid1301-1970 test (vidjax.data.annotations.msvd)
MSVD_TEST_FIRST, MSVD_TEST_MAX = 1301, 670
MSRVTT_MAX = 10000
# The rendered grammar's opposite actions, for VideoComp's action-replace edits (module docstring).
COMP_LEXICON = {"appears": ("disappears",), "disappears": ("appears",), "onto": ("off",), "off": ("onto",)}
_YT_ALPHABET = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"))
_DIDEMO_EXTS = ("mov", "avi", "mp4", "mpg", "wmv", "m4v", "3gp")
_DATASET_CODE = {name: i + 1 for i, name in enumerate(DATASETS)}
_TASK, _VARIATION, _NOISE, _DATASET, _FACET, _ORDER = 1, 2, 3, 4, 5, 6
_SPLIT_CODE = {"train": 1, "test": 2}


@dataclasses.dataclass(frozen=True)
class ReleaseCorpusConfig:
  """Sizes of the corpus (module docstring). A procedure video lasts steps * frames_per_step / fps seconds."""
  tasks: int = 4
  videos_per_task: int = 6
  steps: int = 4
  frames_per_step: int = 20     # 5 s at 4 fps: one DiDeMo chunk per step
  fps: int = 4
  test_every: int = 3           # video v of a task is a test video when v % test_every == test_every - 1
  size: int = 64
  grid: int = 4
  object_px: int = 10
  hold: int = 3                 # still frames at each end of a step
  noise: float = 4.0
  genstate_train: int = 1       # GenState queries per category (3 clips each)
  genstate_test: int = 2
  genstate_frames: int = 16
  order_train: int = 0          # ordered-event twin pairs in MSR-VTT's training split (2 clips each: `make_ordered`)
  order_test: int = 0           # ... in its order test file, MSRVTT_order_test.csv

  def __post_init__(self):
    def bad(message):
      raise ValueError(f"ReleaseCorpusConfig: {message}")
    for name in ("tasks", "videos_per_task", "steps", "frames_per_step", "fps", "test_every", "genstate_frames"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        bad(f"{name} must be a positive integer, got {value!r}")
    if self.test_every < 2:
      bad(f"test_every must be >= 2 (every test_every-th video of a task is a test video), got {self.test_every}")
    if self.videos_per_task < self.test_every:
      bad(f"videos_per_task {self.videos_per_task} < test_every {self.test_every} leaves a task without a test "
          "video")
    if self.steps < 2:
      bad(f"steps must be >= 2 (a procedure, and VideoComp needs two events), got {self.steps}")
    if self.frames_per_step % self.fps or (self.frames_per_step // self.fps) % DIDEMO_CHUNK_S:
      bad(f"a step must last a whole number of DiDeMo's {DIDEMO_CHUNK_S}-second chunks, got frames_per_step "
          f"{self.frames_per_step} at fps {self.fps} = {self.frames_per_step / self.fps:g} s")
    if self.steps * self.step_seconds > DIDEMO_CHUNK_S * DIDEMO_MAX_CHUNKS:
      bad(f"{self.steps} steps of {self.step_seconds} s last {self.steps * self.step_seconds} s; DiDeMo videos "
          f"hold at most {DIDEMO_MAX_CHUNKS} chunks ({DIDEMO_CHUNK_S * DIDEMO_MAX_CHUNKS} s)")
    for name in ("genstate_train", "genstate_test", "order_train", "order_test"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        bad(f"{name} must be a non-negative integer, got {value!r}")
    msrvtt = self.tasks * self.videos_per_task + 2 * (self.order_train + self.order_test)
    if msrvtt > MSRVTT_MAX:
      bad(f"{msrvtt} videos (procedure videos and ordered-event clips) exceed MSR-VTT's id range "
          f"video0..video{MSRVTT_MAX - 1}")
    if isinstance(self.hold, bool) or not isinstance(self.hold, int) or self.hold < 0:
      bad(f"hold must be a non-negative integer, got {self.hold!r}")
    if not isinstance(self.noise, (int, float)) or isinstance(self.noise, bool) or not 0 <= self.noise < float("inf"):
      bad(f"noise must be a finite non-negative pixel std, got {self.noise!r}")
    try:  # the drawing constraints (size, grid, object_px, hold, noise) are the rendered world's
      self.step_config()
      self.genstate_config()
    except ValueError as e:
      bad(str(e))

  @property
  def step_seconds(self) -> int:
    return self.frames_per_step // self.fps

  @property
  def video_seconds(self) -> int:
    return self.steps * self.step_seconds

  @property
  def video_frames(self) -> int:
    return self.steps * self.frames_per_step

  def step_config(self) -> rendered.RenderedWorldConfig:
    """The rendered-world config that draws one step."""
    return rendered.RenderedWorldConfig(num_train=0, num_test=1, frames=self.frames_per_step, size=self.size,
                                        grid=self.grid, object_px=self.object_px, hold=self.hold, noise=self.noise,
                                        fps=self.fps)

  def genstate_config(self) -> rendered.RenderedWorldConfig:
    return rendered.RenderedWorldConfig(num_train=self.genstate_train, num_test=self.genstate_test,
                                        frames=self.genstate_frames, size=self.size, grid=self.grid,
                                        object_px=self.object_px, hold=self.hold, noise=self.noise, fps=self.fps)

  def is_test(self, video: int) -> bool:
    return video % self.test_every == self.test_every - 1


SIZES = {
    # 4 tasks x 12 videos = 48 procedure videos (80 frames of 64x64) + 36 GenState clips: a few seconds on CPU,
    # and enough for every method's smoke/tiny settings (CAST's batch of 64 training instances, its held-out pools).
    "smoke": ReleaseCorpusConfig(videos_per_task=12, order_train=4, order_test=4),
    # 40 x 24 = 960 procedure videos (640 train / 320 test; 3,840 step clips) + 5,400 GenState clips: sized so that
    # `launch/real_path.sh OUT full` (render, train the backbone, prepare, every method) runs in about 45 minutes
    # on 2 CPU cores (BENCHMARKS.md, "The whole real path on the v2 corpus"); 45 videos a task (1,800) took ~2.5 hours.
    # 300 / 60 ordered-event pairs for VEDJE's line (`make_ordered`): 600 training clips, 120 test queries.
    # GenState: 400 training queries a category (1,600 triplets, 4,800 clips), 50 test: at 100 a category its VidCLIP
    # memorized the triplets over the 2,500 steps (100 passes) and its line moved by 13 points with the dropout
    # draws alone, below the zero-shot on seed 0; at 400 it leads by 20 points on seeds 0 and 1 (BENCHMARKS.md).
    "full": ReleaseCorpusConfig(tasks=40, videos_per_task=24, genstate_train=400, genstate_test=50, order_train=300,
                                order_test=60),
}


# ----------------------------------------------------------------------------------------------
# Tasks and videos.


@dataclasses.dataclass(frozen=True)
class Step:
  """One step of a task: its prompt, category and scene (drawn at the board's origin; videos shift it)."""
  prompt: str
  category: str
  objects: tuple[rendered.Obj, ...]


@dataclasses.dataclass(frozen=True)
class Task:
  index: int
  steps: tuple[Step, ...]

  @property
  def name(self) -> str:
    return f"Synthetic procedure {self.index}"


@dataclasses.dataclass(frozen=True)
class ProcedureVideo:
  """One rendered procedure video: its task and index in the task, split, clip file stem and step events."""
  task: Task
  index: int
  split: str  # "train" | "test"
  clip: str
  duration: float
  events: tuple[tuple[float, float, str], ...]  # (start s, end s, prompt) per step
  places: tuple[str, ...]  # where each step's scene is drawn in this video ("in the top left", ...)

  @property
  def key(self) -> tuple[int, int]:
    return (self.task.index, self.index)

  @property
  def prompts(self) -> list[str]:
    """The task's step prompts (the step labels COIN and CrossTask list; the same in every video of a task)."""
    return [e[2] for e in self.events]

  @property
  def captions(self) -> list[str]:
    """This video's step captions: each prompt with where the video draws that step ("... in the top left")."""
    return [f"{prompt} {where}" for prompt, where in zip(self.prompts, self.places)]

  @property
  def paragraph(self) -> str:
    """This video's description: its captions in order."""
    return comp.plain_paragraph(self.captions)


def _rng(seed: int, *keys: int) -> np.random.Generator:
  return np.random.default_rng([seed, *keys])


def make_task(config: ReleaseCorpusConfig, seed: int, index: int) -> Task:
  """Task `index`: `steps` scenes with distinct prompts, categories cycling through a seed-drawn order."""
  rng = _rng(seed, _TASK, index)
  order = [rendered.CATEGORIES[i] for i in rng.permutation(len(rendered.CATEGORIES))]
  cfg = config.step_config()
  steps: list[Step] = []
  for k in range(config.steps):
    category = order[k % len(order)]
    for _ in range(100):
      clip = rendered.make_triplet_clips(category, cfg, rng, f"task{index}_step{k}")[0]
      if clip.prompt not in {s.prompt for s in steps}:
        break
    else:
      raise RuntimeError(f"task {index}: no new {category} prompt after 100 draws")  # cannot happen at grid >= 4
    steps.append(Step(clip.prompt, category, clip.objects))
  return Task(index, tuple(steps))


def make_videos(config: ReleaseCorpusConfig, seed: int) -> list[ProcedureVideo]:
  """Every procedure video, in (task, video) order."""
  out = []
  d = float(config.step_seconds)
  for t in range(config.tasks):
    task = make_task(config, seed, t)
    for v in range(config.videos_per_task):
      events = tuple((k * d, (k + 1) * d, s.prompt) for k, s in enumerate(task.steps))
      places = tuple(place(scene, config.grid) for scene in _variation(config, seed, task, v)[1])
      out.append(ProcedureVideo(task, v, "test" if config.is_test(v) else "train", f"task{t:04d}_video{v:04d}",
                                float(config.video_seconds), events, places))
  return out


def _shifted(objects: Sequence[rendered.Obj], rng: np.random.Generator, grid: int) -> tuple[rendered.Obj, ...]:
  """The scene translated by a random offset that keeps every cell on the board (relations and sides hold)."""
  cells = np.array([c for o in objects for c in o.keys])
  dr = int(rng.integers(-cells[:, 0].min(), grid - cells[:, 0].max()))
  dc = int(rng.integers(-cells[:, 1].min(), grid - cells[:, 1].max()))
  return tuple(dataclasses.replace(o, keys=tuple((r + dr, c + dc) for r, c in o.keys)) for o in objects)


def _variation(config: ReleaseCorpusConfig, seed: int, task: Task, v: int):
  """Video v of a task: its board tint and each step's scene as this video draws it (shifted on the grid)."""
  var = _rng(seed, _VARIATION, task.index, v)
  tint = tuple(int(x) for x in 150 + var.integers(-12, 13, 3))
  return tint, [_shifted(step.objects, var, config.grid) for step in task.steps]


def place(objects: Sequence[rendered.Obj], grid: int) -> str:
  """Where a scene sits on the board, in words, from the centre of the cells its objects use: "in the top left",
  "at the bottom", "on the right", "in the middle" (a third of a cell either side of the board's centre line
  counts as the middle)."""
  cells = np.array([c for o in objects for c in o.keys], np.float64)
  mid = (grid - 1) / 2
  r, c = cells.mean(axis=0) - mid
  vertical = "top" if r < -1 / 3 else "bottom" if r > 1 / 3 else ""
  horizontal = "left" if c < -1 / 3 else "right" if c > 1 / 3 else ""
  if vertical and horizontal:
    return f"in the {vertical} {horizontal}"
  return f"at the {vertical}" if vertical else f"on the {horizontal}" if horizontal else "in the middle"


def video_frames(config: ReleaseCorpusConfig, seed: int, video: ProcedureVideo) -> np.ndarray:
  """uint8 `[steps * frames_per_step, size, size, 3]`: the task's steps in order with the video's variation."""
  t, v = video.key
  tint, scenes = _variation(config, seed, video.task, v)
  cfg = config.step_config()
  parts = []
  for k, (step, scene) in enumerate(zip(video.task.steps, scenes)):
    clip = rendered.Clip(f"{video.clip}_step{k}", step.prompt, step.category, tint, scene)
    parts.append(rendered.render(clip, cfg, _rng(seed, _NOISE, t, v, k)))
  return np.concatenate(parts)


# ----------------------------------------------------------------------------------------------
# Ordered-event clips: the same events in another order are each other's hard negative.


@dataclasses.dataclass(frozen=True)
class OrderedClip:
  """One ordered-event clip: two or three rendered events one after another (`frames_per_step` frames each), its
  caption naming them in that order ("the red square moves onto the blue circle, then a second green triangle
  appears next to the yellow square"). `twin` is the other clip of its pair: the same events, drawn the same way on
  the same board, in another order, so the two clips hold the same frames in another order (their frame means are
  equal) and only the order tells them apart."""
  pair: int
  split: str              # "train" | "test"
  clip: str               # file stem: order_<split><pair>_a | _b
  twin: str
  tint: tuple[int, int, int]
  events: tuple[Step, ...]  # in this clip's order
  step_seconds: int

  @property
  def caption(self) -> str:
    return ", then ".join(e.prompt for e in self.events)

  @property
  def duration(self) -> float:
    return float(len(self.events) * self.step_seconds)


def make_ordered(config: ReleaseCorpusConfig, seed: int) -> list[OrderedClip]:
  """The ordered-event pairs, `order_train` then `order_test`, two clips each (pair i's "a" clip in the drawn order,
  its "b" clip in another: reversed for two events, one of the five other orders for three). Pair i of a split draws
  from `[seed, 6, split, i]` alone, so today's procedure videos and every other pair are unchanged by the counts."""
  cfg = config.step_config()
  out = []
  for split, count in (("train", config.order_train), ("test", config.order_test)):
    for i in range(count):
      rng = _rng(seed, _ORDER, _SPLIT_CODE[split], i)
      k = 2 + int(rng.integers(2))
      categories = [rendered.CATEGORIES[c] for c in rng.permutation(len(rendered.CATEGORIES))[:k]]
      events = []
      for category in categories:
        clip = rendered.make_triplet_clips(category, cfg, rng, f"order{i}")[0]
        events.append(Step(clip.prompt, category, clip.objects))
      others = list(itertools.permutations(range(k)))[1:]  # every order but the drawn one
      perm = others[int(rng.integers(len(others)))]
      tint = tuple(int(x) for x in 150 + rng.integers(-12, 13, 3))
      a, b = f"order_{split}{i:04d}_a", f"order_{split}{i:04d}_b"
      out.append(OrderedClip(i, split, a, b, tint, tuple(events), config.step_seconds))
      out.append(OrderedClip(i, split, b, a, tint, tuple(events[j] for j in perm), config.step_seconds))
  return out


def ordered_frames(config: ReleaseCorpusConfig, seed: int, clip: OrderedClip, noise: bool = True) -> np.ndarray:
  """uint8 `[events * frames_per_step, size, size, 3]`: the clip's events in its order, each with its own noise
  (`noise=False`: none, for the oracles)."""
  cfg = config.step_config() if noise else dataclasses.replace(config.step_config(), noise=0.0)
  role = 1 + (clip.clip.endswith("_b"))
  parts = [rendered.render(rendered.Clip(f"{clip.clip}_{k}", e.prompt, e.category, clip.tint, e.objects), cfg,
                           _rng(seed, _ORDER, _SPLIT_CODE[clip.split], clip.pair, role, k))
           for k, e in enumerate(clip.events)]
  return np.concatenate(parts)


# ----------------------------------------------------------------------------------------------
# Ids.


def _youtube_id(rng: np.random.Generator) -> str:
  return "".join(_YT_ALPHABET[rng.integers(len(_YT_ALPHABET), size=11)])


def _id_rng(seed: int, dataset: str, video: ProcedureVideo) -> np.random.Generator:
  return _rng(seed, _DATASET, _DATASET_CODE[dataset], *video.key)


def dataset_ids(config: ReleaseCorpusConfig, seed: int, videos: Sequence[ProcedureVideo]) -> dict[str, dict]:
  """{dataset: {(task, video): video id as the reader names it}} for the procedure datasets."""
  ids: dict[str, dict] = {name: {} for name in PROCEDURE_DATASETS}
  train_n = test_n = 0
  for g, video in enumerate(videos):
    k = video.key
    for name in ("youcook2", "coin", "crosstask"):
      ids[name][k] = _youtube_id(_id_rng(seed, name, video))
    ids["activitynet"][k] = "v_" + _youtube_id(_id_rng(seed, "activitynet", video))
    ids["msrvtt"][k] = f"video{g}"
    rng = _id_rng(seed, "didemo", video)
    ids["didemo"][k] = (f"{int(rng.integers(10 ** 6, 10 ** 9))}@N{int(rng.integers(100)):02d}_"
                        f"{int(rng.integers(10 ** 9, 10 ** 10))}_{int(rng.integers(16 ** 10)):010x}."
                        f"{_DIDEMO_EXTS[rng.integers(len(_DIDEMO_EXTS))]}")
    rng = _id_rng(seed, "msvd", video)
    start = int(rng.integers(0, 300))
    number = MSVD_TEST_FIRST + test_n if video.split == "test" else 1 + train_n
    test_n, train_n = test_n + (video.split == "test"), train_n + (video.split == "train")
    ids["msvd"][k] = (f"{_youtube_id(rng)}_{start}_{start + config.video_seconds}", f"vid{number}")
  for name, table in ids.items():
    values = list(table.values())
    if len(set(values)) != len(values):  # 64^11 ids: never in practice, but a clash would merge two videos
      raise RuntimeError(f"{name}: two videos drew the same id; use another seed")
  return ids


def _file_stem(dataset: str, video_id) -> str:
  """The file name (without .mp4) under which `index_videos` finds the reader's video id."""
  if dataset == "didemo":
    return Path(video_id).stem  # extraction resolves a DiDeMo id with an extension by its stem
  if dataset == "msvd":
    return video_id[0]  # the reader's video id is the clip name
  return video_id


# ----------------------------------------------------------------------------------------------
# Writers, one per release format. Each returns the manifest entry and the split counts.


def _text(path: Path, lines: Sequence[str]) -> None:
  io.atomic_write_text(path, "".join(f"{line}\n" for line in lines))


def _counts(videos) -> dict[str, int]:
  return {"train": sum(v.split == "train" for v in videos), "test": sum(v.split == "test" for v in videos)}


def _num(x: float):
  return int(x) if float(x).is_integer() else x


def _write_youcook2(d: Path, videos, ids):
  database, lists = {}, {"train": [], "test": []}
  for v in videos:
    vid, recipe = ids[v.key], str(101 + v.task.index)
    database[vid] = {"duration": v.duration, "subset": "training" if v.split == "train" else "validation",
                     "recipe_type": recipe, "video_url": f"synthetic://youcook2/{vid}",
                     "annotations": [{"segment": [_num(s), _num(e)], "id": k, "sentence": text}
                                     for k, ((s, e, _), text) in enumerate(zip(v.events, v.captions))]}
    lists[v.split].append(f"{recipe}/{vid}")
  ann = d / "youcookii_annotations_trainval.json"
  io.atomic_write_json(ann, {"database": database, "note": SYNTHETIC_NOTE})
  _text(d / "train_list.txt", lists["train"])
  _text(d / "val_list.txt", lists["test"])
  tasks = sorted({v.task.index: v.task for v in videos}.items())
  io.atomic_write_text(d / "label_foodtype.csv", io.csv_text([(101 + t, task.name) for t, task in tasks]))
  return {"annotations": ann, "train_list": d / "train_list.txt", "val_list": d / "val_list.txt"}


def _write_coin(d: Path, videos, ids, steps: int):
  files = {"train": d / "coin_train_70.json", "test": d / "coin_test_30.json"}
  for split, path in files.items():
    entries = []
    for v in videos:
      if v.split != split:
        continue
      vid = ids[v.key]
      entries.append({vid: {
          "recipe_type": 1 + v.task.index, "class": f"SyntheticProcedure{v.task.index:03d}",
          "subset": "training" if split == "train" else "testing", "duration": v.duration,
          "start": v.events[0][0], "end": v.events[-1][1], "video_url": f"synthetic://coin/{vid}",
          "annotation": [{"id": str(1 + v.task.index * steps + k), "segment": [s, e], "label": text}
                         for k, (s, e, text) in enumerate(v.events)]}})
    io.atomic_write_json(path, entries)
  return {"annotations": f"{files['train']},{files['test']}", "train_annotations": files["train"],
          "test_annotations": files["test"]}


def _write_crosstask(d: Path, videos, ids):
  tasks = sorted({v.task.index: v.task for v in videos}.items())
  blocks = []
  for t, task in tasks:
    names = [s.prompt for s in task.steps]
    assert not any("," in n for n in names), names  # the step line is comma-separated
    blocks += [str(10000 + t), task.name, f"synthetic://crosstask/task/{10000 + t}", str(len(names)), ",".join(names),
               ""]
  _text(d / "tasks_primary.txt", blocks[:-1])
  lists = {"train": [], "test": []}
  for v in videos:
    vid, task_id = ids[v.key], 10000 + v.task.index
    lists[v.split].append((task_id, vid, f"synthetic://crosstask/{vid}"))
    io.atomic_write_text(d / "annotations" / f"{task_id}_{vid}.csv",
                         "".join(f"{k + 1},{s:.2f},{e:.2f}\n" for k, (s, e, _) in enumerate(v.events)))
  io.atomic_write_text(d / "videos.csv", io.csv_text(lists["train"]))
  io.atomic_write_text(d / "videos_val.csv", io.csv_text(lists["test"]))
  return {"annotations": d, "tasks": d / "tasks_primary.txt", "train_list": d / "videos.csv",
          "test_list": d / "videos_val.csv"}


def facet_queries(videos: Sequence[ProcedureVideo], seed: int) -> list[tuple[ProcedureVideo, str]]:
  """One facet query per test video: the caption of one of its steps (drawn from the seed's own stream), among the
  steps whose caption no other test video has, so each query has one target. A video whose every step caption is
  another test video's too gets none. The query names one quarter of the video (one step's frames), which the whole
  video's mean embedding dilutes and text-conditioned frame pooling (X-Pool) can find."""
  test = [v for v in videos if v.split == "test"]
  seen: dict[str, int] = {}
  for v in test:
    for c in v.captions:
      seen[c] = seen.get(c, 0) + 1
  out = []
  for v in test:
    own = [c for c in v.captions if seen[c] == 1]
    if own:
      out.append((v, own[int(_rng(seed, _FACET, *v.key).integers(len(own)))]))
  return out


def ordered_ids(videos: Sequence[ProcedureVideo], ordered: Sequence[OrderedClip]) -> dict[str, str]:
  """{ordered clip stem: its MSR-VTT id}: numbered after the procedure videos (video<N>, N = len(videos) + j)."""
  return {c.clip: f"video{len(videos) + j}" for j, c in enumerate(ordered)}


def _write_msrvtt(d: Path, videos, ids, seed, ordered):
  entries, sentences, train, test, rows = [], [], [], [], [["key", "vid_key", "video_id", "sentence"]]
  for v in videos:
    vid = ids[v.key]
    number = int(vid[len("video"):])
    start = round(float(_id_rng(seed, "msrvtt", v).uniform(0, 300)), 2)
    entries.append({"category": v.task.index % 20, "url": f"synthetic://msrvtt/{vid}", "video_id": vid,
                    "start time": start, "end time": round(start + v.duration, 2), "split": v.split, "id": number})
    for text in [v.paragraph, *v.captions]:
      sentences.append({"caption": text, "video_id": vid, "sen_id": len(sentences)})
    (train if v.split == "train" else test).append(vid)
    if v.split == "test":
      rows.append([f"ret{len(rows) - 1}", f"msr{number}", vid, v.paragraph])
  order_ids = ordered_ids(videos, ordered)
  for c in ordered:
    vid = order_ids[c.clip]
    number = int(vid[len("video"):])
    entries.append({"category": 19, "url": f"synthetic://msrvtt/{vid}", "video_id": vid, "start time": 0.0,
                    "end time": c.duration, "split": c.split, "id": number})
    sentences.append({"caption": c.caption, "video_id": vid, "sen_id": len(sentences)})
  ann = d / "MSRVTT_data.json"
  io.atomic_write_json(ann, {"info": {"description": SYNTHETIC_NOTE}, "videos": entries, "sentences": sentences})
  _text(d / "train_list_jsfusion.txt", train)
  _text(d / "val_list_jsfusion.txt", test)
  io.atomic_write_text(d / "MSRVTT_JSFUSION_test.csv", io.csv_text(rows))
  facets = [["key", "vid_key", "video_id", "sentence"]]
  for v, caption in facet_queries(videos, seed):
    # keys of their own: one store embeds both files' captions by key (the JSFUSION file's are ret0, ret1, ...)
    facets.append([f"facet{len(facets) - 1}", f"msr{ids[v.key][len('video'):]}", ids[v.key], caption])
  io.atomic_write_text(d / "MSRVTT_facets_test.csv", io.csv_text(facets))
  out = {"annotations": ann, "train_list": d / "train_list_jsfusion.txt", "val_list": d / "val_list_jsfusion.txt",
         "test_csv": d / "MSRVTT_JSFUSION_test.csv", "facets_csv": d / "MSRVTT_facets_test.csv"}
  if ordered:  # their own lists: the JSFUSION lists, and every run that reads them, stay as without them
    order_rows, order_train = [["key", "vid_key", "video_id", "sentence"]], []
    for c in ordered:
      vid = order_ids[c.clip]
      if c.split == "train":
        order_train.append(vid)
      else:
        order_rows.append([f"order{len(order_rows) - 1}", f"msr{vid[len('video'):]}", vid, c.caption])
    _text(d / "train_list_order.txt", order_train)
    io.atomic_write_text(d / "MSRVTT_order_test.csv", io.csv_text(order_rows))
    out.update(order_csv=d / "MSRVTT_order_test.csv", order_train_list=d / "train_list_order.txt")
  return out


def _write_didemo(d: Path, videos, ids, config, seed):
  per_step = config.step_seconds // DIDEMO_CHUNK_S
  chunks = config.steps * per_step
  files = {"train": d / "train_data.json", "test": d / "test_data.json"}
  annotation_id = 1
  for split, path in files.items():
    entries = []
    for v in videos:
      if v.split != split:
        continue
      vid = ids[v.key]
      rng = _rng(seed, _DATASET, _DATASET_CODE["didemo"], *v.key, 1)
      for k, text in enumerate(v.captions):
        s, e = k * per_step, (k + 1) * per_step - 1
        near = [p for p in ((s - 1, e), (s, e + 1), (s + 1, e), (s, e - 1)) if 0 <= p[0] <= p[1] < chunks]
        fourth = near[rng.integers(len(near))] if rng.random() < 0.5 else (s, e)
        entries.append({"annotation_id": annotation_id, "video": vid, "description": text,
                        "times": [[s, e]] * 3 + [list(fourth)], "num_segments": chunks,
                        "dl_link": f"synthetic://didemo/{vid}"})
        annotation_id += 1
    io.atomic_write_json(path, entries)
  return {"annotations": files["test"], "train_annotations": files["train"], "test_annotations": files["test"]}


def activitynet_records(videos, ids, split: str) -> dict:
  """The ActivityNet Captions entries ({id: {duration, timestamps, sentences}}) of one split."""
  return {ids[v.key]: {"duration": v.duration, "timestamps": [[s, e] for s, e, _ in v.events],
                       "sentences": v.captions} for v in videos if v.split == split}


def _write_activitynet(d: Path, videos, ids):
  files = {"train": d / "train.json", "test": d / "val_1.json"}
  for split, path in files.items():
    io.atomic_write_json(path, activitynet_records(videos, ids, split))
  return {"annotations": files["test"], "train_annotations": files["train"], "test_annotations": files["test"]}


def _write_msvd(d: Path, videos, ids):
  mapping, captions = [], ["# SYNTHETIC MSVD-format captions (vidjax.worlds.release)",
                           "# <clip name> <description>, English, one a line"]
  for v in sorted(videos, key=lambda v: int(ids[v.key][1][3:])):
    name, vid = ids[v.key]
    mapping.append(f"{name} {vid}")
    captions += [f"{name} {text}" for text in [v.paragraph, *v.captions]]
  _text(d / "youtube_mapping.txt", mapping)
  _text(d / "AllVideoDescriptions.txt", captions)
  return {"annotations": d / "youtube_mapping.txt", "captions": d / "AllVideoDescriptions.txt"}


def _write_genstate(d: Path, config: ReleaseCorpusConfig, seed: int):
  world = rendered.make_world(config.genstate_config(), seed, d / "videos")
  for clip in world.all_clips():
    if not world.path(clip.clip_id).exists():
      video_lib.write_video(world.path(clip.clip_id), rendered.clip_frames(world, clip), fps=world.config.fps)
  for split in ("train", "test"):
    rendered.write_metadata(world, d / f"{split}.json", split)
  counts = {**{split: len(world.triplets[split]) for split in ("train", "test")},
            "clips": sum(len(c) for c in world.clips.values())}
  return ({"videos": d / "videos", "annotations": d / "test.json", "train_annotations": d / "train.json",
           "test_annotations": d / "test.json"}, counts)


def _write_videocomp(d: Path, videos, ids, seed, activitynet_dir: Path):
  rewriter = comp.TemplateRewriter(lexicon=COMP_LEXICON)
  files, all_counts, counts = {}, [], {}
  for split, source in (("train", "train.json"), ("test", "val_1.json")):
    events = comp.events_from_activitynet(read_activitynet_captions(activitynet_dir / source))
    triplets, split_counts = comp.build_comp(events, split=split, seed=seed, rewriter=rewriter,
                                             name="activitynet-comp")
    files[split] = d / f"activitynet_comp_{split}.json"
    comp.write_release(files[split], triplets)
    all_counts.append(split_counts)
    counts[split] = len(triplets)
  io.atomic_write_json(d / "counts.json", all_counts)
  # The lexicon, for building Comp benchmarks from the corpus's annotation files (`benchmark.lexicon`).
  groups = [sorted({w, *alts}) for w, alts in COMP_LEXICON.items()]
  io.atomic_write_json(d / "lexicon.json", {"groups": [g for i, g in enumerate(groups) if g not in groups[:i]]})
  return ({"videos": activitynet_dir / "videos", "annotations": files["test"], "train_annotations": files["train"],
           "test_annotations": files["test"], "lexicon": d / "lexicon.json"}, counts)


# ----------------------------------------------------------------------------------------------
# corpus_summary.json: which mechanism decides each kind of query (`vidjax.worlds.oracles`).

_BLACK = (0, 0, 0)


def _content(config: ReleaseCorpusConfig, scenes: Sequence[Sequence[rendered.Obj]], frames: int | None = None,
             cfg: rendered.RenderedWorldConfig | None = None) -> np.ndarray:
  """The pooled noise-free frames of scenes one after another on a black board (what a caption can describe)."""
  cfg = dataclasses.replace(cfg or config.step_config(), noise=0.0)
  rng = np.random.default_rng(0)  # unused at noise 0
  return np.concatenate([oracles.pooled(rendered.render(rendered.Clip("oracle", "", "", _BLACK, tuple(s)), cfg, rng))
                         for s in scenes])


def corpus_summary(config: ReleaseCorpusConfig, seed: int, videos: Sequence[ProcedureVideo],
                   ordered: Sequence[OrderedClip], genstate: bool = True) -> dict:
  """For each mechanism, the share of its queries that only it decides (`oracles.needs`), with both oracles' R@1:

  * "order" (MSRVTT_order_test.csv; gallery: the order test clips): the frame-mean oracle ties each clip with its
    twin, the order-aware oracle (frames at the same times) tells them apart;
  * "facets" (MSRVTT_facets_test.csv; gallery: the test procedure videos): a query names one step of its video;
    the aligned oracle finds that step's frames, the frame-mean oracle compares the step with the whole video;
  * "states" (GenState test queries; gallery: each query's main clip and its two negatives): the temporal negatives
    that hold the main clip's frames in another order (a reversal) tie with it under the frame mean.
  """
  out: dict = {"synthetic": True, "note": SYNTHETIC_NOTE}
  test = [c for c in ordered if c.split == "test"]
  if test:
    clips = [_content(config, [e.objects for e in c.events]) for c in test]
    targets = np.arange(len(test))
    out["order"] = {**oracles.needs(oracles.frame_mean_scores(clips, clips), oracles.sequence_scores(clips, clips),
                                    targets), "file": "msrvtt/MSRVTT_order_test.csv",
                    "gallery": "the order test clips (each pair's two clips)"}
  facets = facet_queries(videos, seed)
  if facets:
    gallery = [v for v in videos if v.split == "test"]
    row = {v.key: i for i, v in enumerate(gallery)}
    scenes = {v.key: _variation(config, seed, v.task, v.index)[1] for v in gallery}
    clips = [_content(config, scenes[v.key]) for v in gallery]
    queries = [_content(config, [scenes[v.key][v.captions.index(caption)]]) for v, caption in facets]
    targets = np.array([row[v.key] for v, _ in facets])
    out["facets"] = {**oracles.needs(oracles.frame_mean_scores(queries, clips),
                                     oracles.aligned_scores(queries, clips, config.frames_per_step), targets),
                     "file": "msrvtt/MSRVTT_facets_test.csv", "gallery": "the test procedure videos"}
  if genstate and config.genstate_test:
    world = rendered.make_world(config.genstate_config(), seed, "unused")
    cfg = config.genstate_config()
    decided = {"frame_mean": [], "aligned": []}
    for i in range(len(world.triplets["test"])):
      three = [_content(config, [c.objects], cfg=cfg) for c in world.clips["test"][3 * i: 3 * i + 3]]
      for name, scores in (("frame_mean", oracles.frame_mean_scores(three[:1], three)),
                           ("aligned", oracles.sequence_scores(three[:1], three))):
        decided[name].append(bool(oracles.decided(scores, np.array([0]))[0]))
    m, a = np.array(decided["frame_mean"]), np.array(decided["aligned"])
    pct = lambda x: round(100.0 * float(np.sum(x)) / len(m), 2)  # noqa: E731
    out["states"] = {"queries": len(m), "frame_mean_r1": pct(m), "aligned_r1": pct(a), "share": pct(a & ~m),
                     "file": "genstate/test.json", "gallery": "each query's main clip and its two negatives"}
  return out


# ----------------------------------------------------------------------------------------------
# The corpus.


def _link(link: Path, target: Path) -> None:
  """A relative symlink `link` -> `target`, replaced atomically unless it already points there."""
  rel = os.path.relpath(target, link.parent)
  if link.is_symlink() and os.readlink(link) == rel:
    return
  link.parent.mkdir(parents=True, exist_ok=True)
  tmp = link.with_name(f".{link.name}.tmp{os.getpid()}")
  if tmp.is_symlink() or tmp.exists():
    tmp.unlink()
  os.symlink(rel, tmp)
  os.replace(tmp, link)


def _check_stamp(root: Path, config: ReleaseCorpusConfig, seed: int) -> None:
  stamp = {"seed": seed, "config": dataclasses.asdict(config), "synthetic": True}
  path = root / ".corpus.json"
  if path.exists():
    old = io.read_json(path, "corpus stamp")
    if old != json.loads(json.dumps(stamp)):
      raise ValueError(f"{root} already holds a corpus of seed {old.get('seed')} and config {old.get('config')}; "
                       f"asked for seed {seed} and {stamp['config']}: write into another root (or delete it)")
  else:
    io.atomic_write_json(path, stamp)


MARKER = "SYNTHETIC"  # a file beside each dataset's videos folder; vidjax.experiments.prepare.is_rendered reads it


def write_corpus(root: str | os.PathLike, config: ReleaseCorpusConfig = SIZES["smoke"], seed: int = 0,
                 datasets: Sequence[str] = DATASETS) -> dict:
  """Writes the corpus (module docstring) under `root` and returns the manifest (also `root/manifest.json`).

  Args:
    root: output folder (created); a second call with the same seed and config resumes / rewrites the same bytes.
    config: sizes, e.g. `SIZES["smoke"]`.
    seed: drives every random choice.
    datasets: a subset of `DATASETS`; "videocomp" needs "activitynet" (its videos and source records).

  Returns:
    The manifest: {dataset: {"videos": folder, "annotations": ..., ...} with absolute paths as strings,
    "counts": {dataset: {"train": n, "test": n}}, "distinct_paragraphs": {"train": n, "test": n} (videos with a
    paragraph of their own, at most), "seed", "config", "synthetic": True, "note"}.

  Raises:
    ValueError: unknown datasets, videocomp without activitynet, more videos than MSVD's split holds, or a
      root already stamped with another seed or config.
  """
  datasets = tuple(dict.fromkeys(datasets))
  unknown = [d for d in datasets if d not in DATASETS]
  if unknown or not datasets:
    raise ValueError(f"write_corpus: datasets must be a non-empty subset of {DATASETS}, got {list(datasets)}")
  if "videocomp" in datasets and "activitynet" not in datasets:
    raise ValueError("write_corpus: 'videocomp' is built from the ActivityNet-format records and uses their "
                     "videos: add 'activitynet' to datasets")
  if not isinstance(config, ReleaseCorpusConfig):
    raise ValueError(f"write_corpus: config must be a ReleaseCorpusConfig, got {type(config).__name__}")
  videos = make_videos(config, seed)
  counts = _counts(videos)
  if "msvd" in datasets and (counts["train"] > MSVD_TRAIN_MAX or counts["test"] > MSVD_TEST_MAX):
    raise ValueError(f"write_corpus: MSVD's split by number holds at most {MSVD_TRAIN_MAX} training and "
                     f"{MSVD_TEST_MAX} test clips, the config has {counts['train']} and {counts['test']}; "
                     "drop 'msvd' from datasets or shrink the config")
  root = Path(root).resolve()
  root.mkdir(parents=True, exist_ok=True)
  _check_stamp(root, config, seed)

  procedure = [d for d in datasets if d in PROCEDURE_DATASETS]
  if procedure:
    for v in videos:
      path = root / "clips" / f"{v.clip}.mp4"
      if not path.exists():
        video_lib.write_video(path, video_frames(config, seed, v), fps=config.fps)
  ordered = make_ordered(config, seed) if "msrvtt" in datasets else []
  for c in ordered:
    path = root / "clips" / f"{c.clip}.mp4"
    if not path.exists():
      video_lib.write_video(path, ordered_frames(config, seed, c), fps=config.fps)
  ids = dataset_ids(config, seed, videos)
  manifest: dict = {}
  all_counts: dict = {}
  for name in datasets:
    d = root / name
    if name in PROCEDURE_DATASETS:
      for v in videos:
        _link(d / "videos" / f"{_file_stem(name, ids[name][v.key])}.mp4", root / "clips" / f"{v.clip}.mp4")
      if name == "msrvtt":
        for stem, vid in ordered_ids(videos, ordered).items():
          _link(d / "videos" / f"{vid}.mp4", root / "clips" / f"{stem}.mp4")
      table = ids[name]
      entry = {"youcook2": lambda: _write_youcook2(d, videos, table),
               "coin": lambda: _write_coin(d, videos, table, config.steps),
               "crosstask": lambda: _write_crosstask(d, videos, table),
               "msrvtt": lambda: _write_msrvtt(d, videos, table, seed, ordered),
               "didemo": lambda: _write_didemo(d, videos, table, config, seed),
               "activitynet": lambda: _write_activitynet(d, videos, table),
               "msvd": lambda: _write_msvd(d, videos, table)}[name]()
      entry = {"videos": d / "videos", **entry}
      all_counts[name] = dict(counts)
      if name == "msrvtt" and ordered:
        all_counts[name]["order"] = {split: sum(c.split == split for c in ordered) for split in ("train", "test")}
    elif name == "genstate":
      entry, all_counts[name] = _write_genstate(d, config, seed)
    else:
      entry, all_counts[name] = _write_videocomp(d, videos, ids["activitynet"], seed, root / "activitynet")
    manifest[name] = {k: str(v) for k, v in entry.items()}
    # The marker `configs/prepare.py` reads (beside the videos folder): the store, and every result from it, says
    # synthetic.
    io.atomic_write_text(d / MARKER, SYNTHETIC_NOTE + "\n")
  if "crosstask" in all_counts:  # what the reader reports (CAST's 80/20 seed-42 split), not the release lists
    n = len(videos)
    test = int(round(0.2 * n))
    all_counts["crosstask"] = {"train": n - test, "test": test, "release_lists": dict(counts)}
  distinct = {split: len({v.paragraph for v in videos if v.split == split}) for split in ("train", "test")}
  manifest.update({"counts": all_counts, "distinct_paragraphs": distinct, "seed": seed,
                   "config": dataclasses.asdict(config), "synthetic": True, "note": SYNTHETIC_NOTE})
  if "msrvtt" in datasets or "genstate" in datasets:
    io.atomic_write_json(root / "corpus_summary.json", corpus_summary(
        config, seed, videos if "msrvtt" in datasets else [], ordered, genstate="genstate" in datasets))
    manifest["corpus_summary"] = str(root / "corpus_summary.json")
  io.atomic_write_json(root / "manifest.json", manifest)
  return manifest


def main(argv: Sequence[str] | None = None) -> dict:
  """`python -m vidjax.worlds.release --root DIR [--size smoke|full] [--seed 0] [--datasets a,b]`."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--root", required=True, help="output folder")
  parser.add_argument("--size", choices=sorted(SIZES), default="smoke")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--datasets", default=",".join(DATASETS), help=f"comma-separated subset of {DATASETS}")
  args = parser.parse_args(argv)
  started = time.perf_counter()
  manifest = write_corpus(args.root, SIZES[args.size], args.seed, [d for d in args.datasets.split(",") if d])
  for name in DATASETS:
    if name in manifest:
      c = manifest["counts"][name]
      unit = {"genstate": "queries", "videocomp": "triplets"}.get(name, "videos")
      extra = f"  + ordered-event clips {c['order']['train']} / {c['order']['test']}" if "order" in c else ""
      print(f"{name:<12} {unit:<8} train {c['train']:>5}  test {c['test']:>5}{extra}  videos {manifest[name]['videos']}  "
            f"annotations {manifest[name]['annotations']}")
  print(f"SYNTHETIC corpus ({args.size}, seed {args.seed}) in {Path(args.root).resolve()} "
        f"({time.perf_counter() - started:.1f} s); manifest {Path(args.root).resolve() / 'manifest.json'}")
  return manifest


if __name__ == "__main__":
  main()
