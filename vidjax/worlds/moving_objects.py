"""The moving-object world: the patch-level embedded default for retrieval (SYNTHETIC).

ARCHITECTURE.md, "synthetic worlds". It stands in for frozen per-frame patch tokens of a video backbone
(VideoPrism: `[T, P, d]`) so that the retrieval methods that read frame-local evidence (VEDJE's cache,
VideoComp's order negatives, GenState's state triplets) run end to end on a fresh machine with no data.
Everything it produces is labelled synthetic; its numbers demonstrate mechanisms, never the papers'.

Generative story (dimension `dim`, unit vectors marked ^):
  * a vocabulary of real English words (colours, shapes, directions, relations, function words), each
    with a random word vector e_w^ (`WORDS`; every word is in the BERT uncased WordPiece vocabulary);
  * an object is a (colour, shape) pair with code o = (e_colour + e_shape)^, so a video that shows the
    red cube and a caption that says "red cube" meet in one space;
  * a video has 2-3 distinct objects on a `grid` x `grid` board and `num_events` sequential events
    ("the red cube moves left" by 1-2 cells), each taking an equal share of the T frames; every cell has a
    zero-mean position code p_c^ and a per-video background b (the scene);
  * patch tokens X[t, c] = p_c + sum of the codes of the objects in cell c at frame t + bg_weight * b
    + noise * N(0, I) (`tokens` kind, `[T, P, dim]`, P = grid²);
  * the stage-1 video embedding is order-blind by construction: clip = (mean_t sum_c X[t, c])^ (`clip`);
  * the caption comes from a template grammar ("the red cube moves left, then the blue ball moves up,
    ending above the green cone"), and its stage-1 embedding is a bag of its object words (colours and
    shapes), (sum_w e_w)^ (`text`): blind to order and direction, it finds the videos with the right
    objects and leaves the rest to a second stage.

Every video belongs to a group of four (`KINDS`), each a real corpus video with its own caption:
  * `base`;
  * `twin`: the same frames in reverse order (its caption reverses the events and flips every
    direction) -- identical frame-mean, so stage 1 cannot rank it below the base (temporal negative);
  * `end_state`: the same objects, start and first events, but the last event goes another way, so the
    end state differs (GenState's temporal negative);
  * `semantic`: one object substituted by another colour or shape at the same place doing the same
    (GenState's semantic negative).

Calibration (defaults; `python -m vidjax.worlds.moving_objects`, tests/test_moving_objects.py): the
linear probe of `twin_probe_accuracy` (caption event clauses x per-slot late-minus-early patch tokens)
tells the base from its time-reversed twin on held-out groups with 96.7-99.3% accuracy (defaults, seeds
0-2), and the same probe on frame-mean tokens sits at exactly 50% (the twin's frame mean equals the
base's). Two choices
came from that measurement: the token noise is 0.05 per dimension (at 0.1 the probe reached only
73-80%), and "palindromes" (one object moving one way and then back) are never drawn, because their
twin is the same video (they capped even an oracle probe, built from the true codes, at about 90%).
Stage 1 (bag of object words against the frame mean; test groups of seeds 0-1, 120 videos) reaches
T2V R@10 of 79-88%; the background weight is 0.05 because at 0.3 the scene vector dominated the frame
mean and R@10 fell to 18-23%, and the bag leaves out function and direction words (with them R@10 was
56-63%). The twin ties its base at stage 1 for every query.

The world is data (`write_world`, what `vidjax.experiments.common.world_data` calls): it writes what a user of
the dataset a config names would have, under one folder, and the runs read it through the real path:

  * release-format annotation files (`RELEASE_FILES`): MSR-VTT's JSFusion test csv (test videos, one caption each)
    and `MSRVTT_data.json` (every video written, split "train" / "test"); DiDeMo's `test_data.json` / `train_data.json`;
    ActivityNet Captions' `val_1.json` / `train.json`; MSVD's `youtube_mapping.txt` + `AllVideoDescriptions.txt`
    (clip names `<world id>_0_<T>`, numbered vid1.. for training and vid1301.. for test, so at most 1,200 training
    and 670 test videos); LSMDC's `LSMDC16_challenge_1000_publictect.csv` / `LSMDC16_annos_training.csv` (a line
    per caption, the clip spanning the whole video). Every video has one caption describing the whole video. The
    files hold the test split, and the training split when the run trains (a config with `data.train_annotations`);
  * `features/`: a feature store with kinds `tokens` [T, P, dim], `clip` [dim] (keyed by video id as the reader
    names it) and `text` [dim] (keyed by every caption id the reader gives, and by video id: a one-caption video's
    paragraph is its caption), its manifest SYNTHETIC and naming the world (`world`, `seed`, `label`, `truth`);
  * `world_truth.json` (`TRUTH_FILE`), the world truth no release file holds, for world-only diagnostics:
    {"note", "dataset", "kinds": KINDS, "videos": {video id (reader's): {"group", "kind", "split"}}} (a group is
    a base video, its time-reversed twin, its end-state variant and its semantic variant).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from vidjax import io
from vidjax.data import comp, genstate
from vidjax.data.retrieval import read_dataset
from vidjax.data.features import write_arrays
from vidjax.data.annotations import lsmdc
from vidjax.data.annotations.types import Caption, RetrievalData, RetrievalVideo
from vidjax.ops import l2_normalize

SYNTHETIC_NOTE = "SYNTHETIC moving-object world (vidjax.worlds.moving_objects): demonstrates mechanisms, not paper numbers"

COLOURS = ("red", "blue", "green", "yellow", "purple", "orange")
SHAPES = ("cube", "ball", "cone", "cylinder")
DIRECTIONS = {"left": (0, -1), "right": (0, 1), "up": (-1, 0), "down": (1, 0)}
OPPOSITE = {"left": "right", "right": "left", "up": "down", "down": "up"}
RELATIONS = {"left": "left of", "right": "right of", "up": "above", "down": "below"}
FUNCTION_WORDS = ("the", "moves", "then", "ending", "of", "above", "below", "at", "same", "place", "as")
WORDS = tuple(dict.fromkeys(COLOURS + SHAPES + tuple(DIRECTIONS) + FUNCTION_WORDS))
KINDS = ("base", "twin", "end_state", "semantic")
OBJECT_WORDS = frozenset(COLOURS + SHAPES)


@dataclasses.dataclass(frozen=True)
class MovingObjectWorldConfig:
  """Sizes and noise of the moving-object world (see module docstring)."""
  num_train_groups: int = 1000    # groups of four videos (base, twin, end_state, semantic)
  num_eval_groups: int = 150
  frames: int = 16                # T (VEDJE App. A.2: T = 16)
  grid: int = 4                   # P = grid² patches per frame
  dim: int = 32                   # d_v of the patch tokens and of the stage-1 embeddings
  min_objects: int = 2
  max_objects: int = 3
  num_events: int = 2
  noise: float = 0.05             # per-dimension std of the token noise (unit-norm codes)
  bg_weight: float = 0.05         # per-video background (scene) vector, in every patch

  def validate(self):
    for name in ("num_train_groups", "num_eval_groups", "dim", "num_events"):
      if getattr(self, name) < 1:
        raise ValueError(f"world.{name} must be >= 1, got {getattr(self, name)}")
    if self.grid < 3:
      raise ValueError(f"world.grid must be >= 3 (objects move up to 2 cells), got {self.grid}")
    if self.frames < 2 * self.num_events:
      raise ValueError(f"world.frames must be >= 2 * num_events, got {self.frames} < 2 * {self.num_events}")
    if not 1 <= self.min_objects <= self.max_objects <= min(len(COLOURS), self.grid ** 2 // 2):
      raise ValueError(f"world needs 1 <= min_objects <= max_objects <= {len(COLOURS)}, got "
                       f"{self.min_objects}, {self.max_objects}")
    if self.noise < 0 or self.bg_weight < 0:
      raise ValueError(f"world.noise and world.bg_weight must be >= 0, got {self.noise}, {self.bg_weight}")


@dataclasses.dataclass(frozen=True)
class Scene:
  """One video's content: objects (colour, shape), their start cells and the events in order."""
  objects: tuple[tuple[str, str], ...]
  start: tuple[tuple[int, int], ...]
  events: tuple[tuple[int, str, int], ...]  # (object index, direction, cells)

  def positions(self, frames: int) -> np.ndarray:
    """[frames, num_objects, 2] cell (row, col) of every object at every frame.

    Event i owns frames [i·T/E, (i+1)·T/E); its object moves one cell at evenly spaced frames of it.
    """
    pos = np.tile(np.asarray(self.start), (frames, 1, 1))
    span = frames // len(self.events)
    for i, (o, direction, cells) in enumerate(self.events):
      step = np.asarray(DIRECTIONS[direction])
      for c in range(cells):
        t = i * span + (c + 1) * span // (cells + 1)
        pos[t:, o] += step
    return pos


def _name(obj: tuple[str, str]) -> str:
  return f"{obj[0]} {obj[1]}"


def caption(scene: Scene, frames: int) -> str:
  """The template caption: the events in order, then the end state of the last moved object."""
  clauses = [f"the {_name(scene.objects[o])} moves {d}" for o, d, _ in scene.events]
  end = scene.positions(frames)[-1]
  last = scene.events[-1][0]
  others = [o for o in range(len(scene.objects)) if o != last]
  rel = ""
  if others:
    ref = others[0]
    dr, dc = end[last] - end[ref]
    if dr == 0 and dc == 0:
      rel = f", ending at the same place as the {_name(scene.objects[ref])}"
    else:
      key = ("up" if dr < 0 else "down") if abs(dr) > abs(dc) else ("left" if dc < 0 else "right")
      rel = f", ending {RELATIONS[key]} the {_name(scene.objects[ref])}"
  return ", then ".join(clauses) + rel


def reverse(scene: Scene, frames: int) -> Scene:
  """The time-reversed twin: starts where the scene ends, events reversed with directions flipped."""
  end = scene.positions(frames)[-1]
  events = tuple((o, OPPOSITE[d], c) for o, d, c in reversed(scene.events))
  return Scene(scene.objects, tuple(map(tuple, end)), events)


def _fits(scene: Scene, frames: int, grid: int) -> bool:
  pos = scene.positions(frames)
  return bool(np.all((pos >= 0) & (pos < grid)))


@dataclasses.dataclass
class MovingObjectWorld:
  """Videos, captions and features of the moving-object world.

  Attributes:
    config: the generating config.
    data: `RetrievalData` (videos sorted by id, split "train" / "test"; one caption per video with the
      video's id as caption id).
    scenes: {video id: Scene}; `group` {video id: group id}; `kind` {video id: one of KINDS}.
    tokens: `[N, T, P, dim]` float32 patch tokens, rows in `data.videos` order.
    clip: `[N, dim]` unit order-blind stage-1 video embeddings; text: `[N, dim]` unit bag-of-words
      caption embeddings (same order: caption i describes video i).
  """
  config: MovingObjectWorldConfig
  data: RetrievalData
  scenes: dict[str, Scene]
  group: dict[str, str]
  kind: dict[str, str]
  tokens: np.ndarray
  clip: np.ndarray
  text: np.ndarray

  def ids(self, split: str | None = None, kinds: Sequence[str] = KINDS) -> list[str]:
    return [v.video_id for v in self.data.videos if (split is None or v.split == split) and self.kind[v.video_id] in kinds]


def _random_scene(cfg: MovingObjectWorldConfig, rng) -> Scene:
  while True:
    n = int(rng.integers(cfg.min_objects, cfg.max_objects + 1))
    colours = rng.choice(len(COLOURS), size=n, replace=False)
    objects = tuple((COLOURS[c], SHAPES[int(rng.integers(len(SHAPES)))]) for c in colours)
    cells = rng.choice(cfg.grid ** 2, size=n, replace=False)
    start = tuple((int(c) // cfg.grid, int(c) % cfg.grid) for c in cells)
    events = tuple((int(rng.integers(n)), str(rng.choice(list(DIRECTIONS))), int(rng.integers(1, 3)))
                   for _ in range(cfg.num_events))
    scene = Scene(objects, start, events)
    if _fits(scene, cfg.frames, cfg.grid):
      return scene


def _variants(scene: Scene, cfg: MovingObjectWorldConfig, rng) -> dict[str, Scene]:
  """The group of a base scene: its twin, an end-state variant and a semantic variant."""
  out = {"base": scene, "twin": reverse(scene, cfg.frames)}
  if caption(out["twin"], cfg.frames) == caption(scene, cfg.frames):
    return {}  # a palindrome ("moves left, then moves right" by one object): its twin is itself
  o, d, c = scene.events[-1]
  for new_d in rng.permutation([x for x in DIRECTIONS if x != d]):
    alt = Scene(scene.objects, scene.start, scene.events[:-1] + ((o, str(new_d), c),))
    if _fits(alt, cfg.frames, cfg.grid):
      out["end_state"] = alt
      break
  else:
    return {}
  moved = scene.events[0][0]  # substitute the first moving object: colour or shape
  used = {obj[0] for obj in scene.objects}
  colour, shape = scene.objects[moved]
  if rng.random() < 0.5:
    colour = str(rng.choice([x for x in COLOURS if x not in used]))
  else:
    shape = str(rng.choice([x for x in SHAPES if x != shape]))
  objects = tuple((colour, shape) if i == moved else obj for i, obj in enumerate(scene.objects))
  out["semantic"] = Scene(objects, scene.start, scene.events)
  return out


def make_moving_object_world(config: MovingObjectWorldConfig | None = None, seed: int = 0) -> MovingObjectWorld:
  """Generates the world deterministically from `seed` (about a second for the defaults)."""
  cfg = config or MovingObjectWorldConfig()
  cfg.validate()
  rng = np.random.default_rng(np.random.SeedSequence([seed, 0x0B1EC7]))
  d, g, t_len = cfg.dim, cfg.grid, cfg.frames
  word_vec = dict(zip(WORDS, l2_normalize(rng.normal(size=(len(WORDS), d)))))
  obj_code = {(c, s): l2_normalize(word_vec[c] + word_vec[s]) for c in COLOURS for s in SHAPES}
  pos_code = rng.normal(size=(g * g, d))
  pos_code = l2_normalize(pos_code - pos_code.mean(axis=0))

  scenes, group, kind, split_of = {}, {}, {}, {}
  total = cfg.num_train_groups + cfg.num_eval_groups
  g_index = 0
  while g_index < total:
    members = _variants(_random_scene(cfg, rng), cfg, rng)
    if not members:
      continue
    split = "train" if g_index < cfg.num_train_groups else "test"
    for k, scene in members.items():
      vid = f"mow{g_index:05d}_{k}"
      scenes[vid], group[vid], kind[vid], split_of[vid] = scene, f"mow{g_index:05d}", k, split
    g_index += 1

  ids = sorted(scenes)
  n, p = len(ids), g * g
  tokens = np.empty((n, t_len, p, d), np.float32)
  texts = []
  for i, vid in enumerate(ids):
    scene = scenes[vid]
    if kind[vid] == "twin":  # the base's frames reversed, noise included: an exact time-reversed twin
      continue
    x = np.broadcast_to(pos_code, (t_len, p, d)).copy()
    pos = scene.positions(t_len)
    for o, obj in enumerate(scene.objects):
      x[np.arange(t_len), pos[:, o, 0] * g + pos[:, o, 1]] += obj_code[obj]
    x += cfg.bg_weight * l2_normalize(rng.normal(size=d)) + cfg.noise * rng.normal(size=(t_len, p, d))
    tokens[i] = x
  index = {vid: i for i, vid in enumerate(ids)}
  for vid in ids:
    if kind[vid] == "twin":
      tokens[index[vid]] = tokens[index[group[vid] + "_base"]][::-1]
  for vid in ids:  # stage-1 text: a bag of the caption's object words, blind to order and direction
    words = [w for w in caption(scenes[vid], t_len).replace(",", "").split() if w in OBJECT_WORDS]
    texts.append(l2_normalize(np.sum([word_vec[w] for w in words], axis=0)))
  clip = l2_normalize(tokens.astype(np.float64).sum(axis=2).mean(axis=1))
  for vid in ids:  # the same frame mean up to summation order: make the tie exact
    if kind[vid] == "twin":
      clip[index[vid]] = clip[index[group[vid] + "_base"]]
  data = RetrievalData(
      source=f"moving-object world (synthetic, seed {seed})",
      videos=tuple(RetrievalVideo(vid, duration=float(t_len), split=split_of[vid]) for vid in ids),
      captions=tuple(Caption(vid, vid, caption(scenes[vid], t_len)) for vid in ids))
  return MovingObjectWorld(cfg, data, scenes, group, kind, tokens, clip.astype(np.float32),
                           np.asarray(texts, np.float32))


def world_config_from(fields) -> MovingObjectWorldConfig:
  """Builds the config from any mapping / ConfigDict with (a subset of) the dataclass fields."""
  names = {f.name for f in dataclasses.fields(MovingObjectWorldConfig)}
  given = dict(fields)
  unknown = sorted(set(given) - names)
  if unknown:
    raise ValueError(f"unknown moving-object-world fields {unknown}; known: {sorted(names)}")
  return MovingObjectWorldConfig(**given)


def motion_tokens(world: MovingObjectWorld, seed: int = 0, noise: float = 0.05) -> np.ndarray:
  """Per-frame object tokens that carry motion: `[N, T, max_objects, dim]` float32, rows in `data.videos` order.

  A stand-in for a video backbone's temporally contextualised frame tokens (VideoPrism's come out of
  temporal attention layers, so a token already says what moves where), for methods that pool frame
  tokens without attending across frames first (VideoComp's VidCLIP: one cross-attention pooler). Token o
  of frame t = (e_colour + e_shape)^ of object o + its cell code + e_direction when frame t lies in an
  event where object o moves that way + noise * N(0, I); unused object slots are noise only. Codes are
  drawn from `seed`, independent of the patch tokens' codes.
  """
  cfg = world.config
  rng = np.random.default_rng(np.random.SeedSequence([seed, 0x307104]))
  d, t_len = cfg.dim, cfg.frames
  code = dict(zip(COLOURS + SHAPES + tuple(DIRECTIONS), l2_normalize(rng.normal(size=(len(COLOURS) + len(SHAPES) + 4, d)))))
  cell = l2_normalize(rng.normal(size=(cfg.grid ** 2, d)))
  ids = [v.video_id for v in world.data.videos]
  out = noise * rng.normal(size=(len(ids), t_len, cfg.max_objects, d))
  for i, vid in enumerate(ids):
    scene = world.scenes[vid]
    pos = scene.positions(t_len)
    span = t_len // len(scene.events)
    for o, obj in enumerate(scene.objects):
      out[i, :, o] += l2_normalize(code[obj[0]] + code[obj[1]]) + cell[pos[:, o, 0] * cfg.grid + pos[:, o, 1]]
    for e, (o, direction, _) in enumerate(scene.events):
      out[i, e * span:(e + 1) * span, o] += code[direction]
  return out.astype(np.float32)


# ------------------------------------------------------------------------------------------------
# The learnability check: is the order of events readable from the features at all?


def _event_slots(text: str) -> list[tuple[str, str, str]]:
  """(colour, shape, direction) of each event clause of a template caption, in order."""
  slots = []
  for clause in text.split(", ending")[0].split(", then "):
    words = clause.split()  # "the <colour> <shape> moves <direction>"
    if len(words) != 5 or words[0] != "the" or words[3] != "moves":
      raise ValueError(f"not a moving-object caption clause: {clause!r}")
    slots.append((words[1], words[2], words[4]))
  return slots


def twin_probe_accuracy(world: MovingObjectWorld, features: str = "ordered",
                        ridges: Sequence[float] = (1.0, 10.0, 100.0, 1000.0)) -> float:
  """Held-out accuracy of a linear probe telling each base video from its time-reversed twin.

  The probe reads the caption's event clauses and, for event i, a descriptor of the video's i-th time
  slot (the world's events share the T frames equally): phi_i = sum_p (row_p, col_p, 1) (x) delta_i[p]
  with delta_i the late-minus-early half mean of the slot's patch tokens ("ordered"), or the frame mean
  of the whole video ("frame_mean": order-blind, identical for a twin). Its features are
  onehot(colour_i, direction_i) (x) phi_i and onehot(shape_i, direction_i) (x) phi_i summed over events,
  its score linear in them; it is fit by ridge regression (+1 the caption's own video, -1 its twin) on
  the training groups' base captions, the ridge picked on the last fifth of them. It is right on a test
  group when the base outscores the twin under the base's caption; a tie counts as half (chance).
  """
  if features not in ("ordered", "frame_mean"):
    raise ValueError(f"features must be 'ordered' or 'frame_mean', got {features!r}")
  cfg = world.config
  p = cfg.grid ** 2
  coord = np.stack([np.arange(p) // cfg.grid, np.arange(p) % cfg.grid, np.ones(p)], axis=1)
  span = cfg.frames // cfg.num_events
  directions = list(DIRECTIONS)
  index = {v.video_id: i for i, v in enumerate(world.data.videos)}
  text = {c.video_id: c.text for c in world.data.captions}

  def feature(caption_text: str, vid: str) -> np.ndarray:
    x = world.tokens[index[vid]].astype(np.float64)
    out = np.zeros((len(COLOURS) + len(SHAPES), len(directions), 3 * cfg.dim))
    for i, (colour, shape, direction) in enumerate(_event_slots(caption_text)):
      if features == "ordered":
        seg = x[i * span:(i + 1) * span]
        delta = seg[span // 2:].mean(axis=0) - seg[:span // 2].mean(axis=0)
      else:
        delta = x.mean(axis=0)
      phi = (coord.T @ delta).ravel()
      out[COLOURS.index(colour), directions.index(direction)] += phi
      out[len(COLOURS) + SHAPES.index(shape), directions.index(direction)] += phi
    return out.ravel()

  def pairs(vids):
    rows = [feature(text[v], other) for v in vids for other in (v, world.group[v] + "_twin")]
    return np.asarray(rows), np.tile([1.0, -1.0], len(vids))

  def accuracy(weights, x):
    s = x @ weights
    base, twin = s[0::2], s[1::2]
    return float(np.mean(base > twin) + 0.5 * np.mean(base == twin))

  def fit(x, y, ridge):  # ridge regression, in its dual form when there are fewer rows than features
    if len(x) < x.shape[1]:
      return x.T @ np.linalg.solve(x @ x.T + ridge * np.eye(len(x)), y)
    return np.linalg.solve(x.T @ x + ridge * np.eye(x.shape[1]), x.T @ y)

  train = world.ids("train", kinds=("base",))
  cut = len(train) - max(1, len(train) // 5)
  x_fit, y_fit = pairs(train[:cut])
  x_val, _ = pairs(train[cut:])
  best = max(ridges, key=lambda r: accuracy(fit(x_fit, y_fit, r), x_val))
  x_train, y_train = pairs(train)
  x_test, _ = pairs(world.ids("test", kinds=("base",)))
  return accuracy(fit(x_train, y_train, best), x_test)


if __name__ == "__main__":  # pragma: no cover - a calibration aid
  for s in (0, 1, 2):
    w = make_moving_object_world(seed=s)
    print(f"seed {s}: {len(w.data.videos)} videos; twin probe ordered "
          f"{twin_probe_accuracy(w, 'ordered'):.3f}, frame-mean {twin_probe_accuracy(w, 'frame_mean'):.3f}")


# ---------------------------------------------------------------------------------------------- the world in other
# benchmarks' formats: VideoComp's densely captioned videos and GenState-AI's triplets


# The moving-object world's action words are its directions of motion: action-replace makes an object
# move another way (`TemplateRewriter(COMP_LEXICON, connectives=False)`).
COMP_LEXICON = {d: tuple(x for x in ("left", "right", "up", "down") if x != d) for d in ("left", "right", "up", "down")}


def comp_events(world, split: str) -> list[comp.EventVideo]:
  """The moving-object world's base videos as densely captioned videos (SYNTHETIC): event i owns frames
  [i·T/E, (i+1)·T/E) (one frame per second) and its sentence is "The <colour> <shape> moves <direction>"."""
  frames = world.config.frames
  out = []
  for vid in world.ids(split, kinds=("base",)):
    scene = world.scenes[vid]
    span = frames // len(scene.events)
    out.append(comp.EventVideo(vid, float(frames), tuple(
        (float(i * span), float((i + 1) * span), f"The {' '.join(scene.objects[o])} moves {d}")
        for i, (o, d, _) in enumerate(scene.events))))
  return out


def genstate_triplets(world, split: str = "test", subset_by: str = "objects") -> list[genstate.Triplet]:
  """GenState triplets of the SYNTHETIC moving-object world (`vidjax.worlds.moving_objects`).

  Each base video is a main clip; its temporal negative is the end-state variant (same objects, start
  and first events; the last event ends elsewhere) and its semantic negative the substituted-object
  variant. Subsets group queries by the number of objects in the scene ("2 objects", "3 objects"), or
  all in one ("moving objects") with `subset_by="none"`.
  """
  text = {c.video_id: c.text for c in world.data.captions}
  out = []
  for vid in world.ids(split, kinds=("base",)):
    group = world.group[vid]
    subset = (f"{len(world.scenes[vid].objects)} objects" if subset_by == "objects" else "moving objects")
    out.append(genstate.Triplet(group, text[vid], vid, group + "_end_state", group + "_semantic", subset))
  return out


# ---------------------------------------------------------------------------------------------- the world as a
# user's copy of a retrieval dataset: release-format annotation files, a feature store, and the world truth

TRUTH_FILE = "world_truth.json"
LABEL = "synthetic moving-object world"  # the store manifest's `label`: results name the dataset "<dataset> (LABEL)"
# dataset -> (test annotation file(s), training annotation file(s)), as `vidjax.data.retrieval.read_dataset` takes them
RELEASE_FILES = {
    "msrvtt": ("MSRVTT_JSFUSION_test.csv", "MSRVTT_data.json"),
    "didemo": ("test_data.json", "train_data.json"),
    "activitynet": ("val_1.json", "train.json"),
    "msvd": ("youtube_mapping.txt,AllVideoDescriptions.txt",) * 2,
    "lsmdc": ("LSMDC16_challenge_1000_publictect.csv", "LSMDC16_annos_training.csv"),
}
MSVD_TEST_FIRST, MSVD_LIMITS = 1301, {"train": 1200, "test": 670}  # vidjax.data.annotations.msvd's split by number


def release_ids(world: MovingObjectWorld, dataset: str) -> dict[str, str]:
  """{world video id: its id in `dataset`'s release layout}: MSVD names a clip `<youtube id>_<start>_<end>`, so the
  world's `mow00012_twin` is `mow00012_twin_0_<T>` there (a common suffix: the ids sort as the world's do); the
  other layouts keep the world's ids."""
  check_fits(dataset, {})
  suffix = f"_0_{world.config.frames}" if dataset == "msvd" else ""
  return {vid: vid + suffix for vid in world.data.video_ids()}


def check_fits(dataset: str, counts: Mapping[str, int]) -> None:
  """One clear error when `counts` ({split: videos}) do not fit `dataset`'s release layout (MSVD's split by clip
  number: at most 1,200 training and 670 test clips), or a dataset whose layout the world does not write."""
  if dataset not in RELEASE_FILES:
    raise ValueError(f"the moving-object world writes the release files of {sorted(RELEASE_FILES)}, not {dataset!r}")
  if dataset == "msvd" and any(counts.get(s, 0) > MSVD_LIMITS[s] for s in MSVD_LIMITS):
    raise ValueError(f"MSVD's split by clip number holds at most {MSVD_LIMITS['train']} training and "
                     f"{MSVD_LIMITS['test']} test videos; this moving-object world has {counts.get('train', 0)} and "
                     f"{counts.get('test', 0)} ({len(KINDS)} a group): set --config.world.num_train_groups <= "
                     f"{MSVD_LIMITS['train'] // len(KINDS)} and --config.world.num_eval_groups <= "
                     f"{MSVD_LIMITS['test'] // len(KINDS)}, or name another dataset")


def write_release_files(world: MovingObjectWorld, root, dataset: str, splits: Sequence[str] = ("test", "train")) \
    -> dict[str, str]:
  """Writes the world's videos and captions of `splits` as `dataset`'s release annotation files under `root`
  (module docstring); returns the data keys naming them: {"annotations": test file(s)} and, with "train" in
  `splits`, {"train_annotations": training file(s)}."""
  root = Path(root)
  root.mkdir(parents=True, exist_ok=True)
  ids, frames = release_ids(world, dataset), world.config.frames
  split = {v.video_id: v.split for v in world.data.videos}
  rows = [(ids[c.video_id], c, split[c.video_id]) for c in world.data.captions  # one caption a video, sorted by id
          if split[c.video_id] in splits]
  files = dict(zip(("test", "train"), RELEASE_FILES[dataset]))
  if dataset == "msrvtt":
    io.atomic_write_text(root / "MSRVTT_JSFUSION_test.csv", io.csv_text(
        [("key", "vid_key", "video_id", "sentence")]
        + [(c.caption_id, f"msr{i}", vid, c.text) for i, (vid, c, s) in enumerate(rows) if s == "test"]))
    if "train" in splits:  # the training file: every video written, each with its split
      io.atomic_write_json(root / "MSRVTT_data.json", {
          "info": {"description": SYNTHETIC_NOTE},
          "videos": [{"video_id": vid, "category": 0, "url": f"synthetic://moving-objects/{vid}", "start time": 0,
                      "end time": frames, "split": s, "id": i} for i, (vid, _, s) in enumerate(rows)],
          "sentences": [{"caption": c.text, "video_id": vid, "sen_id": c.caption_id} for vid, c, _ in rows]})
  elif dataset == "didemo":  # 5-second chunks at one frame a second; every caption describes the whole video
    chunks = math.ceil(frames / 5)
    for s in splits:
      io.atomic_write_json(root / files[s], [
          {"annotation_id": c.caption_id, "video": vid, "description": c.text, "times": [[0, chunks - 1]] * 4,
           "num_segments": chunks, "dl_link": f"synthetic://moving-objects/{vid}"} for vid, c, v_split in rows
          if v_split == s])
  elif dataset == "activitynet":
    for s in splits:
      io.atomic_write_json(root / files[s], {vid: {"duration": float(frames), "timestamps": [[0.0, float(frames)]],
                                               "sentences": [c.text]} for vid, c, v_split in rows if v_split == s})
  elif dataset == "lsmdc":  # a tab-separated line per caption; the clip spans the whole video (a frame a second)
    span = "\t".join([lsmdc.format_time(0), lsmdc.format_time(frames)] * 2)
    for s in splits:
      io.atomic_write_text(root / files[s], "".join(f"{vid}\t{span}\t{c.text}\n" for vid, c, v_split in rows
                                                    if v_split == s))
  else:  # msvd
    check_fits(dataset, {s: sum(v_split == s for _, _, v_split in rows) for s in MSVD_LIMITS})
    number, mapping = {"train": 1, "test": MSVD_TEST_FIRST}, []
    for vid, _, v_split in rows:
      mapping.append(f"{vid} vid{number[v_split]}")
      number[v_split] += 1
    io.atomic_write_text(root / "youtube_mapping.txt", "".join(f"{line}\n" for line in mapping))
    io.atomic_write_text(root / "AllVideoDescriptions.txt", "".join(
        f"{line}\n" for line in ["# " + SYNTHETIC_NOTE, "# <clip name> <description>"]
        + [f"{vid} {c.text}" for vid, c, _ in rows]))
  test, train = (",".join(str(root / f) for f in files.split(",")) for files in RELEASE_FILES[dataset])
  return {"annotations": test, **({"train_annotations": train} if "train" in splits else {})}


def write_truth(world: MovingObjectWorld, path, dataset: str, splits: Sequence[str] = ("test", "train")) -> None:
  """`world_truth.json` (module docstring): each video's group, kind and split, keyed by its release id."""
  ids, split = release_ids(world, dataset), {v.video_id: v.split for v in world.data.videos}
  io.atomic_write_json(path, {"note": SYNTHETIC_NOTE, "dataset": dataset, "kinds": list(KINDS), "videos": {
      ids[v]: {"group": world.group[v], "kind": world.kind[v], "split": split[v]} for v in world.data.video_ids()
      if split[v] in splits}})


def read_truth(store) -> dict | None:
  """The world truth beside a world's feature store (its manifest's `truth`), None for any other store."""
  name = store.metadata.get("truth")
  return io.read_json(Path(store.root).parent / name, "moving-object world truth") if name else None


def world_checks(store, bench, text: np.ndarray, video: np.ndarray) -> dict:
  """Stage 1 on the moving-object world's hard cases, from the world truth beside `store` (`read_truth`): how often
  each negative of a base query scores at least as high as the base video, in % (ties count against the model;
  100% = chance or worse). `text` [Q, D] and `video` [N, D]: `bench`'s queries and corpus (cosine scores).
  {} for a store no world wrote."""
  truth = read_truth(store)
  if truth is None:
    return {}
  scores = text.astype(np.float64) @ video.astype(np.float64).T  # a world's test corpus is small
  videos = truth["videos"]
  member = {(t["group"], t["kind"]): vid for vid, t in videos.items()}
  col = {v: i for i, v in enumerate(bench.corpus)}
  rows = [i for i, q in enumerate(bench.queries) if videos[q.video_id]["kind"] == "base"]
  out = {}
  for kind in KINDS[1:]:
    hits = [scores[i, col[member[videos[bench.queries[i].video_id]["group"], kind]]]
            >= scores[i, col[bench.queries[i].video_id]] for i in rows]
    out[f"{kind}_scores_at_least_base_pct"] = round(100.0 * float(np.mean(hits)), 2)
  return {**out, "note": SYNTHETIC_NOTE}


def write_world(config, root) -> dict[str, str]:
  """What `vidjax.experiments.common.world_data` calls for a run whose config has a moving-object `world` section:
  the world of `config.world` and `config.seed` written under `root` as a user's copy of `config.dataset` would be
  (release annotation files, `features/`, `world_truth.json`: module docstring). What the run reads: the test
  split, and the training split when the config has `data.train_annotations`. Returns the `data.*` keys naming
  them (`annotations`, `train_annotations`, `features`)."""
  root, splits = Path(root), ("test", "train") if "train_annotations" in config.data else ("test",)
  cfg = world_config_from(config.world)
  check_fits(config.dataset, {"test": len(KINDS) * cfg.num_eval_groups,
                              **({"train": len(KINDS) * cfg.num_train_groups} if "train" in splits else {})})
  world = make_moving_object_world(cfg, seed=config.seed)
  keys = write_release_files(world, root, config.dataset, splits)
  # The store is keyed as the real reader names the files' videos and captions (read back, not assumed).
  records = [read_dataset(config.dataset, path) for path in dict.fromkeys(keys.values())]
  ids, text_of = release_ids(world, config.dataset), dict(zip(world.data.video_ids(), world.text))
  split = {v.video_id: v.split for v in world.data.videos}
  ids = {w: v for w, v in ids.items() if split[w] in splits}
  world_of = {v: w for w, v in ids.items()}
  texts = {c.caption_id: text_of[world_of[c.video_id]] for data in records for c in data.captions}
  texts.update({v: text_of[w] for w, v in ids.items()})  # paragraphs (DiDeMo, ActivityNet): keyed by video id
  write_store(world, root / "features", seed=config.seed, world_fields=config.world, videos=ids, texts=texts,
              metadata={"dataset": config.dataset, "label": LABEL, "truth": TRUTH_FILE})
  write_truth(world, root / TRUTH_FILE, config.dataset, splits)
  return {**keys, "features": str(root / "features")}


def frame_clip(tokens: np.ndarray) -> np.ndarray:
  """`[V, T, C, D]` tokens -> `[V, T, D]` each frame's embedding in the text space (its tokens summed and
  L2-normalized: the per-frame form of `clip`), what a prepared store's `frame_clip` kind holds."""
  return l2_normalize(tokens.astype(np.float64).sum(axis=2)).astype(np.float32)


def write_store(world: MovingObjectWorld, root, *, seed: int, world_fields, videos: Mapping[str, str] | None = None,
                texts: Mapping[str, np.ndarray] | None = None, metadata: Mapping = ()) -> None:
  """Writes the world as a user's extraction would: a feature store with kinds `tokens` (per-frame patch tokens),
  `clip` (the frame-mean embedding), `frame_clip` (each frame's embedding) per video id and `text` per caption id,
  its manifest saying SYNTHETIC.
  `videos` ({world video id: store id}, default every video as it is) and `texts` ({id: text embedding}, default
  every caption) choose and key them as a release layout names them (`write_world`); `metadata` adds manifest
  fields."""
  row = {v: i for i, v in enumerate(world.data.video_ids())}
  videos = videos if videos is not None else {v: v for v in row}
  ids, rows = list(videos.values()), [row[v] for v in videos]
  if texts is None:
    texts = dict(zip([c.caption_id for c in world.data.captions], world.text))
  write_arrays(root, {"tokens": (ids, world.tokens[rows]), "clip": (ids, world.clip[rows]),
                      "frame_clip": (ids, frame_clip(world.tokens[rows])),
                      "text": (list(texts), np.asarray(list(texts.values()), np.float32))},
               {"backbone": "synthetic-moving-object-world", "synthetic": True, "seed": seed, "world": dict(world_fields),
                **dict(metadata)})


def write_comp(world: MovingObjectWorld, root, *, seed: int, world_fields, dataset: str = "activitynet") -> dict:
  """Writes the world as a VideoComp user has it (SYNTHETIC), for the one data path of `configs/comp_*.py`:

    * the base videos' events (`comp_events`) as the dataset's dense-caption release: ActivityNet Captions
      (`train.json` = the world's train split, `val_1.json` = its test split; `dataset="activitynet"`) or YouCook2
      (`youcookii_annotations_trainval.json`, subsets training / validation; `dataset="youcook2"`);
    * `lexicon.json`, the action words of its captions for action-replace (`COMP_LEXICON`: the directions), in the
      format of `vidjax.data.comp.load_lexicon`;
    * `store/`: a feature store with kind `tokens`, the base videos' `motion_tokens` [T, max_objects, dim] float32
      (the values the world generates, stored at float32: exact), its manifest saying SYNTHETIC, naming the world
      (`world`: its fields) and carrying `note` and `description` for results.json.

  No world truth is written: no VideoComp diagnostic needs any. Returns the `data.*` keys naming the files
  (`annotations`, `train_annotations` for ActivityNet, `lexicon`, `features`)."""
  from pathlib import Path  # pylint: disable=g-import-not-at-top
  from vidjax import io  # pylint: disable=g-import-not-at-top
  root = Path(root)
  if dataset not in ("activitynet", "youcook2"):
    raise ValueError(f"write_comp: dataset must be 'activitynet' or 'youcook2', got {dataset!r}")
  events = {split: comp_events(world, split) for split in ("train", "test")}
  keys = {}
  if dataset == "activitynet":
    for split, name, key in (("train", "train.json", "train_annotations"), ("test", "val_1.json", "annotations")):
      io.atomic_write_json(root / name, {v.video_id: {"duration": v.duration,
                                                      "timestamps": [[s, e] for s, e, _ in v.events],
                                                      "sentences": [t for _, _, t in v.events]} for v in events[split]})
      keys[key] = root / name
  else:
    subset = {"train": "training", "test": "validation"}
    database = {v.video_id: {"duration": v.duration, "subset": subset[split], "recipe_type": "moving objects",
                             "video_url": f"synthetic://moving-objects/{v.video_id}",
                             "annotations": [{"segment": [s, e], "id": k, "sentence": t}
                                             for k, (s, e, t) in enumerate(v.events)]}
                for split, videos in events.items() for v in videos}
    keys["annotations"] = root / "youcookii_annotations_trainval.json"
    io.atomic_write_json(keys["annotations"], {"database": database, "note": SYNTHETIC_NOTE})
  keys["lexicon"] = root / "lexicon.json"
  io.atomic_write_json(keys["lexicon"], {"groups": [list(DIRECTIONS)]})
  ids = [v.video_id for vs in events.values() for v in vs]
  row = {v.video_id: i for i, v in enumerate(world.data.videos)}
  tokens = motion_tokens(world, seed, world.config.noise)[[row[i] for i in ids]]
  keys["features"] = root / "store"
  write_arrays(keys["features"], {"tokens": (ids, tokens)},
               {"backbone": "synthetic-moving-object-world-motion-tokens", "synthetic": True, "seed": seed,
                "world": dict(world_fields), "note": SYNTHETIC_NOTE, "description": "SYNTHETIC moving-object world"})
  return {k: str(v) for k, v in keys.items()}
