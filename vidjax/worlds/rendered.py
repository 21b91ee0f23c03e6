"""The rendered state-transition world: real mp4 clips for GenState-style triplets (SYNTHETIC).

GenState-AI (../shared/papers/genstate_ai.txt §3) generates its clips with a text-to-video model from
controlled prompts, each with a temporal hard negative (same scene and objects, another end state or
order) and a semantic hard negative (same motion structure, another object or target). vidjax renders its
own: flat coloured shapes on a grey background, 16 frames of 64x64 by default, written as mp4 with PyAV,
so that the whole pipeline (video files -> decoding -> a frozen backbone -> a feature store -> models ->
triplet metrics) runs on a fresh machine. Everything it produces is labelled synthetic.

Scenes. A `grid` x `grid` board of cells (16 px each at the defaults); objects are a colour (`COLOURS`,
six well-separated hues) and a shape (`SHAPES`) of `object_px` pixels centred on a cell. An object has
key cells; it holds still for the first and last `hold` frames and moves linearly through its keys in
between; it may appear or vanish at the middle frame. The background is a per-scene grey tint (low
saturation, so the stand-in backbone never counts it as a colour) plus per-pixel noise.

Prompts come from a template grammar in plain English, one category (= subset) per kind of change:

  Position   "the red square moves from left of the blue circle to above the blue circle"
             temporal: reversed (moves from above to left of) or wrong end state (ends below);
             semantic: another object (the green square) makes the same move.
  Quantity   "a second red circle appears next to the blue square" (or "one of the two ... disappears")
             temporal: reversed (the other change) or no change; semantic: another colour appears.
  Actor      "the yellow triangle moves from the left side to the right side" (a bystander stays put)
             temporal: it stays where it starts, or moves the other way; semantic: the bystander makes
             the same crossing while the named object stays.
  Relation   "the purple square moves onto the orange circle" (a second target of another colour is near)
             temporal: stops next to it, or starts on it and moves off; semantic: moves onto the other target.

Every clip (main and both negatives) has its own prompt that describes it, so the negatives are real
training videos too. Clip ids are `<split><index>_main|_temp|_sem`; one query per main clip.

Determinism: each query's three clips come from `np.random.default_rng([seed, split, index])`, so the
same seed gives the same frames whatever the counts, and PyAV encodes single-threaded, so the same
frames give the same mp4 bytes (tests/test_rendered.py decodes them to identical arrays).

Text in the stand-in feature space (`colour_words` -> `vidjax.models.pixelstats.colour_bag`): the
order-blind baseline, like the moving-object world's bag of object words -- the prompt's colour words as
the stand-in backbone's hue-histogram entries, blind to order, motion and shape.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
import numpy as np

from vidjax import io
from vidjax.data import genstate
from vidjax.data import video as video_lib

SYNTHETIC_NOTE = ("SYNTHETIC rendered state-transition world (vidjax.worlds.rendered) through the STAND-IN pixel-statistics "
                  "backbone: demonstrates mechanisms, not paper numbers")
# Well-separated hues (0, 33, 54, 129, 233, 274 degrees): each falls inside one bin of the stand-in's histogram.
COLOURS = {"red": (220, 40, 40), "orange": (235, 140, 20), "yellow": (230, 210, 30), "green": (40, 170, 60),
           "blue": (40, 60, 220), "purple": (140, 50, 210)}
SHAPES = ("square", "circle", "triangle")
CATEGORIES = ("Position", "Quantity", "Actor", "Relation")
RELATIONS = {"left of": (0, -1), "right of": (0, 1), "above": (-1, 0), "below": (1, 0)}
SIDES = {"left side": (None, 0), "right side": (None, -1), "top": (0, None), "bottom": (-1, None)}
OPPOSITE_SIDE = {"left side": "right side", "right side": "left side", "top": "bottom", "bottom": "top"}
ROLES = ("main", "temp", "sem")
_SPLIT_CODE = {"train": 1, "test": 2}


@dataclasses.dataclass(frozen=True)
class RenderedWorldConfig:
  """Sizes of the rendered world (module docstring)."""
  num_train: int = 200        # training queries per category (each with its two negatives: 3 clips)
  num_test: int = 50          # evaluation queries per category (§5.1 pools: the 150 clips of a category)
  frames: int = 16
  size: int = 64              # H = W in pixels
  grid: int = 4               # cells per side (also the stand-in backbone's patch grid)
  object_px: int = 10
  hold: int = 3               # still frames at the start and at the end
  noise: float = 4.0          # per-pixel Gaussian noise std, in 0-255 units
  fps: int = 8
  categories: tuple[str, ...] = CATEGORIES

  def __post_init__(self):
    if self.size % self.grid or (self.size // self.grid) % 2 or self.size % 2:
      raise ValueError(f"rendered world: size {self.size} must split into {self.grid} cells of an even width")
    if not 0 < self.object_px <= self.size // self.grid:
      raise ValueError(f"rendered world: object_px {self.object_px} must be in (0, {self.size // self.grid}]")
    if self.frames < 2 * self.hold + 2:
      raise ValueError(f"rendered world: {self.frames} frames leave no motion after holding {self.hold} at each end")
    if self.grid < 4:
      raise ValueError(f"rendered world: grid {self.grid} < 4 leaves no room for the scenes")
    unknown = set(self.categories) - set(CATEGORIES)
    if unknown or not self.categories:
      raise ValueError(f"rendered world: categories must be a non-empty subset of {CATEGORIES}, got {self.categories}")
    if self.num_train < 0 or self.num_test < 1:
      raise ValueError(f"rendered world: num_train {self.num_train} must be >= 0 and num_test {self.num_test} >= 1")


@dataclasses.dataclass(frozen=True)
class Obj:
  """One object: colour and shape names, key cells (row, col) in order, visible frames [appear, vanish)."""
  colour: str
  shape: str
  keys: tuple[tuple[int, int], ...]
  appear: int = 0
  vanish: int = 10 ** 6

  @property
  def name(self) -> str:
    return f"{self.colour} {self.shape}"


@dataclasses.dataclass(frozen=True)
class Clip:
  """One rendered clip: its id, the prompt that describes it, its category and scene."""
  clip_id: str
  prompt: str
  category: str
  tint: tuple[int, int, int]
  objects: tuple[Obj, ...]  # drawn in this order (later on top)


# ----------------------------------------------------------------------------------------------
# Drawing.


def _shape_mask(shape: str, px: int) -> np.ndarray:
  y, x = np.mgrid[0:px, 0:px] + 0.5
  if shape == "square":
    return np.ones((px, px), bool)
  if shape == "circle":
    return (y - px / 2) ** 2 + (x - px / 2) ** 2 <= (px / 2) ** 2
  if shape == "triangle":  # apex up
    return np.abs(x - px / 2) <= y / 2
  raise ValueError(f"unknown shape {shape!r}; known: {SHAPES}")


def _track(obj: Obj, frames: int, hold: int) -> np.ndarray:
  """`[frames, 2]` float cell coordinates of an object over time."""
  keys = np.asarray(obj.keys, np.float64)
  if len(keys) == 1:
    return np.repeat(keys, frames, axis=0)
  t = np.clip((np.arange(frames) - hold) / max(frames - 1 - 2 * hold, 1), 0.0, 1.0) * (len(keys) - 1)
  i = np.minimum(np.floor(t).astype(int), len(keys) - 2)
  w = (t - i)[:, None]
  return keys[i] * (1 - w) + keys[i + 1] * w


def render(clip: Clip, cfg: RenderedWorldConfig, rng: np.random.Generator) -> np.ndarray:
  """uint8 `[T, size, size, 3]` frames of a clip (noise drawn from `rng`)."""
  cell = cfg.size // cfg.grid
  frames = np.empty((cfg.frames, cfg.size, cfg.size, 3), np.float64)
  frames[:] = np.asarray(clip.tint, np.float64)
  masks = {s: _shape_mask(s, cfg.object_px) for s in SHAPES}
  for obj in clip.objects:
    track = _track(obj, cfg.frames, cfg.hold)
    mask = masks[obj.shape]
    for t in range(cfg.frames):
      if not obj.appear <= t < obj.vanish:
        continue
      top = int(round((track[t, 0] + 0.5) * cell - cfg.object_px / 2))
      left = int(round((track[t, 1] + 0.5) * cell - cfg.object_px / 2))
      y0, x0 = max(top, 0), max(left, 0)
      y1, x1 = min(top + cfg.object_px, cfg.size), min(left + cfg.object_px, cfg.size)
      sub = mask[y0 - top:y1 - top, x0 - left:x1 - left]
      frames[t, y0:y1, x0:x1][sub] = COLOURS[obj.colour]
  frames += rng.normal(0.0, cfg.noise, frames.shape)
  return np.clip(np.round(frames), 0, 255).astype(np.uint8)


# ----------------------------------------------------------------------------------------------
# The grammar: one generator per category, each returning (main, temporal, semantic) clips.


def _pick(rng, seq, n=1, exclude=()):
  pool = [x for x in seq if x not in exclude]
  idx = rng.choice(len(pool), n, replace=False)
  return [pool[i] for i in idx]


def _add(cell, off):
  return (cell[0] + off[0], cell[1] + off[1])


def _free_cell(rng, grid, taken):
  cells = [(r, c) for r in range(grid) for c in range(grid) if (r, c) not in taken]
  return cells[rng.integers(len(cells))]


def _position(rng, cfg, base):
  g = cfg.grid
  a_col, b_col, c_col = _pick(rng, list(COLOURS), 3)
  a_shape, b_shape, c_shape = (_pick(rng, SHAPES)[0] for _ in range(3))
  b_cell = (int(rng.integers(1, g - 1)), int(rng.integers(1, g - 1)))
  r1 = _pick(rng, list(RELATIONS))[0]
  perp = [r for r in RELATIONS if np.dot(RELATIONS[r], RELATIONS[r1]) == 0]
  r2, r3 = _pick(rng, perp, 2)
  start, end, wrong = (_add(b_cell, RELATIONS[r]) for r in (r1, r2, r3))
  bystander = Obj(c_col, c_shape, (_free_cell(rng, g, {b_cell, start, end, wrong}),))
  b, a = Obj(b_col, b_shape, (b_cell,)), Obj(a_col, a_shape, (start, end))
  say = lambda obj, x, y: f"the {obj.name} moves from {x} the {b.name} to {y} the {b.name}"  # noqa: E731
  main = (say(a, r1, r2), (bystander, b, a))
  if rng.random() < 0.5:
    temp = (say(a, r2, r1), (bystander, b, dataclasses.replace(a, keys=(end, start))))
  else:
    temp = (say(a, r1, r3), (bystander, b, dataclasses.replace(a, keys=(start, wrong))))
  other = dataclasses.replace(a, colour=_pick(rng, list(COLOURS), exclude=(a_col, b_col, c_col))[0])
  sem = (say(other, r1, r2), (bystander, b, other))
  return main, temp, sem


def _quantity(rng, cfg, base):
  g = cfg.grid
  a_col, b_col = _pick(rng, list(COLOURS), 2)
  a_shape, b_shape = _pick(rng, SHAPES)[0], _pick(rng, SHAPES)[0]
  b_cell = (int(rng.integers(1, g - 1)), int(rng.integers(1, g - 1)))
  c1, c2 = (_add(b_cell, RELATIONS[r]) for r in _pick(rng, list(RELATIONS), 2))
  mid = cfg.frames // 2
  b = Obj(b_col, b_shape, (b_cell,))

  def scene(colour, change):
    first = Obj(colour, a_shape, (c1,))
    second = {"appear": Obj(colour, a_shape, (c2,), appear=mid), "disappear": Obj(colour, a_shape, (c2,), vanish=mid),
              "none": None}[change]
    return (b, first) + ((second,) if second else ())

  def say(colour, change):
    obj = f"{colour} {a_shape}"
    return {"appear": f"a second {obj} appears next to the {b.name}",
            "disappear": f"one of the two {obj}s disappears from next to the {b.name}",
            "none": f"one {obj} stays next to the {b.name}"}[change]

  change = "appear" if rng.random() < 0.5 else "disappear"
  flipped = "disappear" if change == "appear" else "appear"
  t_change = flipped if rng.random() < 0.5 else "none"
  other = _pick(rng, list(COLOURS), exclude=(a_col, b_col))[0]
  return ((say(a_col, change), scene(a_col, change)), (say(a_col, t_change), scene(a_col, t_change)),
          (say(other, change), scene(other, change)))


def _actor(rng, cfg, base):
  g = cfg.grid
  side = _pick(rng, list(SIDES))[0]
  lane = int(rng.integers(g))
  fixed_row, fixed_col = SIDES[side]
  if fixed_row is None:  # left / right: move along row `lane`
    start, end = (lane, fixed_col % g), (lane, (g - 1) - fixed_col % g)
  else:
    start, end = (fixed_row % g, lane), ((g - 1) - fixed_row % g, lane)
  path = {(lane, k) for k in range(g)} if fixed_row is None else {(k, lane) for k in range(g)}
  a_col, b_col = _pick(rng, list(COLOURS), 2)
  a_shape, b_shape = _pick(rng, SHAPES)[0], _pick(rng, SHAPES)[0]
  b_cell = _free_cell(rng, g, path)
  a = Obj(a_col, a_shape, (start, end))
  b = Obj(b_col, b_shape, (b_cell,))
  to = OPPOSITE_SIDE[side]
  say = lambda obj, x, y: f"the {obj.name} moves from the {x} to the {y}"  # noqa: E731
  main = (say(a, side, to), (b, a))
  if rng.random() < 0.5:
    temp = (f"the {a.name} stays on the {side}", (b, dataclasses.replace(a, keys=(start,))))
  else:
    temp = (say(a, to, side), (b, dataclasses.replace(a, keys=(end, start))))
  # Semantic: the bystander makes the crossing, the named object stays where the bystander was.
  sem = (say(b, side, to), (dataclasses.replace(a, keys=(b_cell,)), dataclasses.replace(b, keys=(start, end))))
  return main, temp, sem


def _relation(rng, cfg, base):
  g = cfg.grid
  while True:
    a_cell, b_cell, c_cell = (tuple(int(v) for v in x) for x in rng.integers(0, g, (3, 2)))
    if abs(a_cell[0] - b_cell[0]) + abs(a_cell[1] - b_cell[1]) < 2 or len({a_cell, b_cell, c_cell}) < 3:
      continue
    dr, dc = a_cell[0] - b_cell[0], a_cell[1] - b_cell[1]
    near = (b_cell[0] + int(np.sign(dr)), b_cell[1]) if abs(dr) >= abs(dc) else (b_cell[0], b_cell[1] + int(np.sign(dc)))
    if near not in (a_cell, c_cell) and abs(c_cell[0] - b_cell[0]) + abs(c_cell[1] - b_cell[1]) >= 2:
      break
  a_col, b_col, c_col = _pick(rng, list(COLOURS), 3)
  a_shape, t_shape = _pick(rng, SHAPES)[0], _pick(rng, SHAPES)[0]
  b, c = Obj(b_col, t_shape, (b_cell,)), Obj(c_col, t_shape, (c_cell,))
  a = Obj(a_col, a_shape, (a_cell, b_cell))
  main = (f"the {a.name} moves onto the {b.name}", (b, c, a))
  if rng.random() < 0.5:
    temp = (f"the {a.name} moves next to the {b.name}", (b, c, dataclasses.replace(a, keys=(a_cell, near))))
  else:
    temp = (f"the {a.name} moves off the {b.name}", (b, c, dataclasses.replace(a, keys=(b_cell, a_cell))))
  sem = (f"the {a.name} moves onto the {c.name}", (b, c, dataclasses.replace(a, keys=(a_cell, c_cell))))
  return main, temp, sem


_GENERATORS = {"Position": _position, "Quantity": _quantity, "Actor": _actor, "Relation": _relation}


def make_triplet_clips(category: str, cfg: RenderedWorldConfig, rng: np.random.Generator, base: str) -> list[Clip]:
  """The (main, temporal, semantic) clips of one query of `category`, ids `<base>_main|_temp|_sem`."""
  tint = tuple(int(v) for v in 150 + rng.integers(-12, 13, 3))
  return [Clip(f"{base}_{role}", text, category, tint, tuple(objs))
          for role, (text, objs) in zip(ROLES, _GENERATORS[category](rng, cfg, base))]


# ----------------------------------------------------------------------------------------------
# The world.


@dataclasses.dataclass
class RenderedWorld:
  """Clips by split (three per query, main first), their triplets and where the mp4 files are."""
  config: RenderedWorldConfig
  seed: int
  clips: dict[str, list[Clip]]
  triplets: dict[str, list[genstate.Triplet]]
  video_dir: Path

  def path(self, clip_id: str) -> Path:
    return self.video_dir / f"{clip_id}.mp4"

  def all_clips(self) -> list[Clip]:
    return [c for split in ("train", "test") for c in self.clips[split]]


def _rng(seed: int, split: str, index: int) -> np.random.Generator:
  return np.random.default_rng([seed, _SPLIT_CODE[split], index])


def make_world(cfg: RenderedWorldConfig, seed: int, video_dir: str | Path) -> RenderedWorld:
  """The clips and triplets of a world (nothing rendered yet; see `render_world`)."""
  clips: dict[str, list[Clip]] = {}
  triplets: dict[str, list[genstate.Triplet]] = {}
  for split, count in (("train", cfg.num_train), ("test", cfg.num_test)):
    clips[split], triplets[split] = [], []
    index = 0
    for category in cfg.categories:
      for _ in range(count):
        base = f"{split}{index:05d}"
        three = make_triplet_clips(category, cfg, _rng(seed, split, index), base)
        clips[split] += three
        triplets[split].append(genstate.Triplet(base, three[0].prompt, *(c.clip_id for c in three), category,
                                                negative_prompts=(three[1].prompt, three[2].prompt)))
        index += 1
  return RenderedWorld(cfg, seed, clips, triplets, Path(video_dir))


def clip_frames(world: RenderedWorld, clip: Clip) -> np.ndarray:
  """The clip's uint8 frames (its noise seeded by the clip's query and role)."""
  split = "train" if clip.clip_id.startswith("train") else "test"
  index = int(clip.clip_id[len(split):len(split) + 5])
  noise = np.random.default_rng([world.seed, _SPLIT_CODE[split], index, ROLES.index(clip.clip_id.rsplit("_", 1)[1])])
  return render(clip, world.config, noise)


def write_metadata(world: RenderedWorld, path: str | Path, split: str = "test") -> Path:
  """The split's GenState metadata file (`vidjax.data.genstate` format), readable by `read_triplets`."""
  entries = [{"id": t.query_id, "query": t.query, "main": t.main, "temporal_negative": t.temporal_negative,
              "semantic_negative": t.semantic_negative, "subset": t.subset,
              **dict(zip(genstate.PROMPT_KEYS, t.negative_prompts))} for t in world.triplets[split]]
  return io.atomic_write_text(path, json.dumps(entries, indent=1) + "\n")


def write_videos(world: RenderedWorld, bar=None) -> int:
  """Writes every clip not yet on disk as `<video_dir>/<clip id>.mp4` (atomic files, so a killed run resumes);
  returns how many it wrote. `bar(total)`: an optional progress bar (a context manager with `update(n)`)."""
  world.video_dir.mkdir(parents=True, exist_ok=True)
  todo = [c for c in world.all_clips() if not world.path(c.clip_id).exists()]
  with (bar(len(todo)) if bar and todo else contextlib.nullcontext()) as progress:
    for clip in todo:
      video_lib.write_video(world.path(clip.clip_id), clip_frames(world, clip), fps=world.config.fps)
      if progress:
        progress.update(1)
  return len(todo)


def write_release(world: RenderedWorld, root: str | Path, bar=None) -> dict[str, Path]:
  """The world as a user's GenState data: its mp4 clips (`write_videos`, into `world.video_dir`) and one metadata
  file per split, `<root>/genstate_train.json` and `<root>/genstate_test.json` (`write_metadata`); returns
  {"videos", "metadata" (test), "train_metadata"}. The metadata carries everything the world knows of a query
  (its three clips, its subset, every clip's prompt): no side file of world truth is needed."""
  write_videos(world, bar)
  root = Path(root)
  files = {split: write_metadata(world, root / f"genstate_{split}.json", split) for split in ("train", "test")}
  return {"videos": world.video_dir, "metadata": files["test"], "train_metadata": files["train"]}


def colour_words(text: str) -> list[tuple[int, int, int]]:
  """The RGB of every colour word of a prompt, in order (the order-blind text baseline reads only these:
  `vidjax.models.pixelstats.colour_bag` puts them in the stand-in backbone's hue-histogram space)."""
  return [COLOURS[w] for w in text.lower().replace(",", " ").split() if w in COLOURS]
