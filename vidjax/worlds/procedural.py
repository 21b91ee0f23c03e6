"""Embedded default worlds: procedural worlds generated from a seed in seconds (SYNTHETIC).

ARCHITECTURE.md, "synthetic worlds". The *procedural world* stands in for frozen backbone features of
YouCook2 / COIN / CrossTask so that every CAST experiment runs on a fresh machine with no data. Its
results demonstrate mechanisms and exercise the code; they are never the paper's numbers, and every
output that comes from it is labelled synthetic.

A run reads the world as it reads a user's data (`write_world`, called by `vidjax.experiments.common.world_data`):
the world writes the config's dataset's release annotation files (YouCook2 / COIN / CrossTask, `write_release`),
a feature store with kinds `clip` and `text` (`write_store`, float32 as generated: the store holds the world's
arrays bit for bit) and `world_truth.json` beside the store (`write_truth`: what only the world knows, e.g. the
history world's `reuse_gap`, read by the world-only diagnostics through `read_truth`).

Generative story (all vectors in R^dim, unit-normalized where marked ^):
  * task k has a centroid c_k^ and S_k ordered steps. Step semantics s_kj^ = (c_k + spread u_kj)^ with a
    small `spread`, so steps of one task are semantically close, as real recipe steps are.
  * step (k, j) has a fixed state transition d_kj (norm `transition`); a video of task k starts in a
    state z_0 = (b_k + start_noise e)^ and every executed step moves it: z_j = z_{j-1} + d_kj + e'.
    Steps are skipped with probability `skip_prob` (never the first), so the context does not pin the
    step down and the state carries which steps really happened.
  * video identity (actor / scene) i_v^ persists over the whole video.
  * clip embedding v = (w_id i_v + w_state z^ + w_sem s_kj + w_noise n)^, n ~ N(0, I/dim) per clip.
  * caption embedding t = (s_kj + text_noise m)^: step texts are shared across videos (a fresh m
    per clip models different phrasings of the same step).

So text matching cannot tell identity negatives (same task and step, other video) apart, and visual
continuity with v_{t-1} cannot tell the past from the future (z_{t-2} and z_t are both one transition
away from z_{t-1}): exactly the CVR difficulty. Predicting z_t = z_{t-1} + d(q_t) from the instruction
and the anchor state -- CAST's residual transition -- resolves both.

Calibration (defaults; 1-vs-9 pools by the paper's rules with the task+step identity rule; seeds 0-2;
re-check with `python -m vidjax.worlds.procedural`): zero-shot Acc 15-16% (paper Table 2, CLIP rows: 14-25%)
with State Acc 37-38%; late fusion A + B 56-57% Acc (the issue's bound: at most 60%); a *linear* ridge
predictor of v_t from [q; v_{t-1}] already reaches about 75% with its C score alone and 68% inside the
Full Ensemble, so a learned transition has a real but not free margin to earn; trained CAST with the
default configs reaches 79-84% (BENCHMARKS.md). The world is first-order (the next state depends on the
current state and the step only), so history beyond v_{t-1} carries no extra signal here. How the knobs move it:
a larger `spread` or `w_sem` (or smaller `text_noise`) makes steps textually distinct and zero-shot State
Acc rises past 60%; a larger `w_id` or smaller `w_noise` makes B decisive and late fusion climbs past
60%; a larger `dim` shrinks the random cross terms and makes everything easier.

The *history world* (`--config.data.world=history`, `WORLDS`) adds what the first-order world lacks:
evidence that sits in the history beyond v_{t-1}, at a variable position (CAST's Table 4 claim).
  * carried objects: each video carries 2-3 objects of distinct types m (6 types). A "prepare m" clip
    shows object m's type appearance o_m and a variant u_r drawn from a codebook of 8 shared by every
    type and video; the clips in between show neither; "use m", `gap` clips later (2-5, with probability
    0.1 a gap of 6-7, beyond L = 5), is a close-up showing o_m and the variant transformed, T u_r (T a
    fixed rotation). The captions name the task and m ("task 03 prepare object 3", "task 03 use object 3") but never the variant, and
    their texts share the task centroid as step texts do (`object_spread`), so the words tell the steps
    apart but not which variant the video carries;
  * cutaways: with probability 0.3 a clip is a close-up whose identity and state are faint (x 0.3), so
    when v_{t-1} is one, identity must come from earlier clips; the persistent identity is weighted 1.2.
Why query-driven attention should win: the variant needed for "use m" sits in the "prepare m" clip, at a
position that varies with the gap. mean(H), what EF + residual sees, adds it to the other clips and, when
two objects are carried at once, to the other object's variant: the sum cannot say which variant belongs
to which type. CAST's instruction-as-query attention can find the clip whose type matches the query's
object and read its variant. `history_control` keeps each carried variant visible in every clip up to
its use, v_{t-1} included, so the anchor path alone sees it and CAST has nothing extra to find.

Calibration of the history world (seed 0, the 1-vs-9 benchmark; tests/test_synthetic.py checks the
bounds): 30% of queries are reuse queries; text-only Acc 19%, late fusion A + B 25%, B's Ident Acc 77%.
How it was reached, measured with trained models on the COIN config (`bench/cast_synthetic.py`,
BENCHMARKS.md): the issue's suggested design (variant only, no type appearance, "use" clips as ordinary
clips) gave CAST's prediction only +0.8 Acc over EF + residual's (+3.5 on reuse queries), because
identity and state already separated most candidates of a use step and the key that CAST's attention
must find was faint. Two changes with a stated reason each: "use" clips are close-ups (so the carried
variant, not identity, is what tells a use step's candidates apart) and prepare/use clips show the
object's type (so the clip the query asks for can be found). Things that did not help: a codebook of 32
or 64 variants (harder to learn T u for both), clutter variants in random clips (both models fell to
the same accuracy), 3-4 objects per video.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from vidjax import io
from vidjax.data.annotations.types import Clip, Video
from vidjax.data.features import write_arrays
from vidjax.ops import l2_normalize

SYNTHETIC_NOTE = "SYNTHETIC procedural world (vidjax.worlds.procedural): demonstrates mechanisms, not paper numbers"


@dataclasses.dataclass(frozen=True)
class ProceduralWorldConfig:
  """Sizes and signal/noise levels of the procedural world (see module docstring).

  The fields after `text_noise` add history (the *history world*, `WORLDS["history"]`); their
  defaults switch it off, and the first-order world draws exactly what it drew before they existed.
  """
  num_tasks: int = 24
  min_steps: int = 6
  max_steps: int = 10
  num_train_videos: int = 2400
  num_eval_videos: int = 480
  dim: int = 128
  spread: float = 0.25
  skip_prob: float = 0.15
  transition: float = 0.9
  start_noise: float = 0.6
  state_noise: float = 0.15
  w_id: float = 0.8
  w_state: float = 1.0
  w_sem: float = 0.6
  w_noise: float = 0.9
  text_noise: float = 0.15
  # Carried objects: "prepare m" shows variant u_r of object type m, "use m" shows T u_r `gap` clips later.
  num_objects: int = 0          # object types m (0 = no carried objects)
  min_objects: int = 2          # carried objects per video (distinct types)
  max_objects: int = 3
  num_variants: int = 8         # the variant codebook u_1..u_R, shared by every object type and video
  w_obj: float = 1.0            # weight of the object component in a clip
  object_spread: float = 0.0    # > 0: "prepare/use m" texts are (task centroid + this * object direction)^
  min_gap: int = 2              # clips from "prepare m" to "use m": uniform in [min_gap, max_gap] ...
  max_gap: int = 5
  long_gap_prob: float = 0.0    # ... or, with this probability, in [max_gap + 1, long_gap]
  long_gap: int = 7
  w_type: float = 0.0           # weight of object m's type appearance in its prepare and use clips
  use_closeup: bool = False     # "use m" clips are close-ups of the object (identity and state faint)
  carry_visible: bool = False   # control world: the object stays visible in every clip in between
  # Cutaways: close-ups in which identity and state are faint.
  cutaway_prob: float = 0.0
  cutaway_scale: float = 0.2    # identity and state weights are multiplied by this in a cutaway

  def validate(self):
    for name in ("num_tasks", "min_steps", "num_train_videos", "num_eval_videos", "dim", "num_variants"):
      if getattr(self, name) < 1:
        raise ValueError(f"world.{name} must be >= 1, got {getattr(self, name)}")
    if self.min_steps < 2 or self.max_steps < self.min_steps:
      raise ValueError(f"world needs 2 <= min_steps <= max_steps, got {self.min_steps}, {self.max_steps}")
    for name in ("skip_prob", "long_gap_prob", "cutaway_prob"):
      if not 0.0 <= getattr(self, name) < 1.0:
        raise ValueError(f"world.{name} must be in [0, 1), got {getattr(self, name)}")
    if self.num_objects < 0:
      raise ValueError(f"world.num_objects must be >= 0, got {self.num_objects}")
    if self.num_objects and not 1 <= self.min_objects <= self.max_objects <= self.num_objects:
      raise ValueError("world needs 1 <= min_objects <= max_objects <= num_objects, got "
                       f"{self.min_objects}, {self.max_objects}, {self.num_objects}")
    if self.carry_visible and not self.num_objects:
      raise ValueError("world.carry_visible needs carried objects (world.num_objects >= 1)")
    if self.num_objects and not (1 <= self.min_gap <= self.max_gap and
                                 (self.long_gap_prob == 0 or self.long_gap > self.max_gap)):
      raise ValueError("world needs 1 <= min_gap <= max_gap < long_gap, got "
                       f"{self.min_gap}, {self.max_gap}, {self.long_gap}")


# The worlds `--config.data.world` selects: field values on top of the first-order defaults. Values a
# config sets away from the first-order defaults (e.g. --config.world.w_id=0.5) win over the preset.
# "history": measured with `python -m vidjax.worlds.procedural history` (see the module docstring).
HISTORY = dict(min_steps=3, max_steps=6, w_id=1.2, num_objects=6, min_objects=2, max_objects=3, object_spread=0.4,
               w_type=1.5, long_gap_prob=0.1, use_closeup=True, cutaway_prob=0.3, cutaway_scale=0.3)
WORLDS = {
    "first_order": {},
    "history": HISTORY,
    "history_control": dict(HISTORY, carry_visible=True),
}


@dataclasses.dataclass
class ProceduralWorld:
  """Videos (annotation structures, as the real readers return) and their embeddings.

  Attributes:
    train_videos, eval_videos: `Video` lists (splits "train" / "val").
    clip_ids: `[M]` ids of all clips; `clip_emb` `[M, dim]` unit clip embeddings.
    text_emb: `[M, dim]` unit caption embeddings of the same clips (keyed by clip id).
    reuse_gap: {clip id of a "use m" clip: clips since its "prepare m"} (history world; else empty).
  """
  config: ProceduralWorldConfig
  train_videos: list[Video]
  eval_videos: list[Video]
  clip_ids: list[str]
  clip_emb: np.ndarray
  text_emb: np.ndarray
  reuse_gap: dict[str, int] = dataclasses.field(default_factory=dict)


def _layout(num_task_steps: int, cfg: ProceduralWorldConfig, rng) -> list[tuple]:
  """Clip order of one history-world video: ("step", i) task steps in order, ("prepare", o) and
  ("use", o) for carried object o, each use exactly its gap after its prepare."""
  n_obj = int(rng.integers(cfg.min_objects, cfg.max_objects + 1))
  while True:
    gaps = [int(rng.integers(cfg.max_gap + 1, cfg.long_gap + 1)) if rng.random() < cfg.long_gap_prob
            else int(rng.integers(cfg.min_gap, cfg.max_gap + 1)) for _ in range(n_obj)]
    n = num_task_steps + 2 * n_obj
    slots: list = [None] * n
    for o, gap in enumerate(gaps):
      free = [p for p in range(n - gap) if slots[p] is None and slots[p + gap] is None]
      if not free:
        break
      p = int(rng.choice(free))
      slots[p], slots[p + gap] = ("prepare", o), ("use", o)
    else:
      steps = iter(range(num_task_steps))
      return [s if s is not None else ("step", next(steps)) for s in slots]
    n_obj -= 1  # no room for this gap: one object fewer (always fits with 0)


def make_procedural_world(config: ProceduralWorldConfig | None = None, seed: int = 0) -> ProceduralWorld:
  """Generates the world deterministically from `seed` (a few seconds for the defaults)."""
  cfg = config or ProceduralWorldConfig()
  cfg.validate()
  rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
  d = cfg.dim
  gauss = lambda *shape: rng.normal(size=shape) / np.sqrt(d)  # noqa: E731  (unit-norm in expectation)

  num_steps = rng.integers(cfg.min_steps, cfg.max_steps + 1, size=cfg.num_tasks)
  centroids = l2_normalize(rng.normal(size=(cfg.num_tasks, d)))
  state_base = l2_normalize(rng.normal(size=(cfg.num_tasks, d)))
  semantics = [l2_normalize(centroids[k] + cfg.spread * l2_normalize(rng.normal(size=(n, d)))) for k, n in enumerate(num_steps)]
  transitions = [cfg.transition * l2_normalize(rng.normal(size=(n, d))) for n in num_steps]
  step_names = [[f"task {k:02d} step {j:02d}" for j in range(n)] for k, n in enumerate(num_steps)]
  # History-world draws come from their own stream, so the first-order world is unchanged.
  hrng = np.random.default_rng(np.random.SeedSequence([seed, 0x415]))
  # "prepare m" and "use m" share object m's direction and differ in the action's.
  obj_dir = l2_normalize(hrng.normal(size=(max(cfg.num_objects, 1), d)))
  obj_sem = {kind: l2_normalize(obj_dir + l2_normalize(hrng.normal(size=d))) for kind in ("prepare", "use")}
  variants = l2_normalize(hrng.normal(size=(cfg.num_variants, d)))
  transform = np.linalg.qr(hrng.normal(size=(d, d)))[0]  # "use" shows the variant rotated: T u_r

  videos = {"train": [], "val": []}
  clip_ids, clip_rows, text_rows, reuse_gap = [], [], [], {}
  total = cfg.num_train_videos + cfg.num_eval_videos
  for v in range(total):
    split = "train" if v < cfg.num_train_videos else "val"
    k = int(rng.integers(cfg.num_tasks))
    executed = [0] + [j for j in range(1, num_steps[k]) if rng.random() >= cfg.skip_prob]
    if len(executed) < 2:
      executed.append(1)
    identity = l2_normalize(rng.normal(size=d))
    z = l2_normalize(state_base[k] + cfg.start_noise * l2_normalize(rng.normal(size=d)))
    video_id = f"syn{v:05d}"
    if cfg.num_objects:
      layout = _layout(len(executed), cfg, hrng)
      n_obj = 1 + max([o for kind, o in layout if kind != "step"], default=-1)
      types = hrng.choice(cfg.num_objects, size=n_obj, replace=False)
      chosen = hrng.integers(cfg.num_variants, size=n_obj)
      where = {(kind, o): i for i, (kind, o) in enumerate(layout) if kind != "step"}
    else:
      layout = [("step", i) for i in range(len(executed))]
    clips, t = [], 0.0
    for index, (kind, i) in enumerate(layout):
      scale = cfg.cutaway_scale if cfg.cutaway_prob and hrng.random() < cfg.cutaway_prob else 1.0
      if kind == "use" and cfg.use_closeup:
        scale = cfg.cutaway_scale
      if kind == "step":
        j = executed[i]
        z = z + transitions[k][j] + cfg.state_noise * gauss(d)
        sem, name, step = semantics[k][j], step_names[k][j], str(j)
        obj = np.zeros(d)
      else:
        m = int(types[i])
        sem = (l2_normalize(centroids[k] + cfg.object_spread * obj_sem[kind][m]) if cfg.object_spread
               else obj_sem[kind][m])
        name, step = f"task {k:02d} {kind} object {m}", f"{kind}{m}"
        obj = variants[chosen[i]] if kind == "prepare" else transform @ variants[chosen[i]]
        obj = obj + cfg.w_type * obj_dir[m]
      if cfg.carry_visible:  # control: every carried object shows between its prepare and its use
        obj = obj + sum((variants[chosen[o]] for (kd, o), p in where.items()
                         if kd == "prepare" and p < index < where[("use", o)]), np.zeros(d))
      emb = (scale * (cfg.w_id * identity + cfg.w_state * l2_normalize(z)) + cfg.w_sem * sem
             + cfg.w_obj * obj + cfg.w_noise * gauss(d))
      text = sem + cfg.text_noise * gauss(d)
      duration = float(rng.uniform(4.0, 20.0))
      clip = Clip(clip_id=f"{video_id}#{index:03d}", video_id=video_id, index=index, start=round(t, 2),
                  end=round(t + duration, 2), text=name, task=f"{k:02d}", step=step)
      if kind == "use":
        reuse_gap[clip.clip_id] = index - where[("prepare", i)]
      t += duration + 1.0
      clips.append(clip)
      clip_ids.append(clip.clip_id)
      clip_rows.append(emb)
      text_rows.append(text)
    videos[split].append(Video(video_id=video_id, task=f"{k:02d}", split=split, clips=tuple(clips),
                               duration=round(t, 2)))
  return ProceduralWorld(cfg, videos["train"], videos["val"], clip_ids,
                         l2_normalize(np.asarray(clip_rows)).astype(np.float32),
                         l2_normalize(np.asarray(text_rows)).astype(np.float32), reuse_gap)


def world_config_from(fields, world: str = "first_order") -> ProceduralWorldConfig:
  """Builds the config of `world` (a `WORLDS` name) from any mapping / ConfigDict of dataclass fields.

  The world's preset is applied on top of the first-order defaults; a field in `fields` that differs
  from the first-order default is a deliberate setting and wins over the preset.
  """
  if world not in WORLDS:
    raise ValueError(f"unknown procedural world {world!r}; known: {', '.join(WORLDS)}")
  defaults = dataclasses.asdict(ProceduralWorldConfig())
  given = dict(fields)
  unknown = sorted(set(given) - set(defaults))
  if unknown:
    raise ValueError(f"unknown procedural-world fields {unknown}; known: {sorted(defaults)}")
  chosen = dict(WORLDS[world])
  chosen.update({k: v for k, v in given.items() if v != defaults[k]})
  return ProceduralWorldConfig(**{**defaults, **chosen})


def calibration(world: ProceduralWorld, seed: int = 0) -> dict:
  """Text-only (A), visual continuity (B) and late fusion (A + B) on the world's 1-vs-9 benchmark
  (task+step identity rule), and the share of reuse queries: what the calibration notes quote."""
  from vidjax import metrics
  from vidjax.data import cvr
  index = {c: i for i, c in enumerate(world.clip_ids)}
  records, _ = cvr.build_benchmark(world.eval_videos, identity_rule="task_step", seed=seed)
  codes = {"state": metrics.STATE, "identity": metrics.IDENTITY, "easy": metrics.EASY}
  types = np.array([[metrics.GT if c == r["target"] else codes[r["negative_types"][c]] for c in r["candidates"]]
                    for r in records])
  target = np.array([r["candidates"].index(r["target"]) for r in records])
  cands = world.clip_emb[[[index[c] for c in r["candidates"]] for r in records]]
  a = np.einsum("qd,qcd->qc", world.text_emb[[index[r["target"]] for r in records]], cands)
  b = np.einsum("qd,qcd->qc", world.clip_emb[[index[r["context"][-1]] for r in records]], cands)
  out = {name: metrics.cvr_metrics(sc, target, types) for name, sc in (("A", a), ("B", b), ("A+B", a + b))}
  out["reuse_fraction"] = float(np.mean([r["target"] in world.reuse_gap for r in records]))
  return out


def write_store(world: ProceduralWorld, root, *, seed: int, world_name: str = "first_order", dataset: str = ""):
  """Writes the world as a user's extraction would: a feature store with kinds `clip` and `text` (a caption
  embedding per clip id), its manifest saying SYNTHETIC. Besides the backbone, seed and world, the manifest says how
  results name this data: `description` (the tables' dataset label) and `space` (the feature space, as
  `evaluate_all` compares runs)."""
  return write_arrays(root, {"clip": (world.clip_ids, world.clip_emb), "text": (world.clip_ids, world.text_emb)},
                      {"backbone": "synthetic-procedural-world", "synthetic": True, "seed": seed,
                       "world": dataclasses.asdict(world.config), "world_name": world_name,
                       "description": "synthetic procedural world",
                       "space": f"the {dataset or 'procedural'} procedural world (synthetic, seed {seed})"})


# ----------------------------------------------------------------------------------------------
# The world as files: release-format annotations, a feature store and the world's truth.

RELEASE_DATASETS = ("youcook2", "coin", "crosstask")
TRUTH_FILE = "world_truth.json"  # beside the store: what only the world knows (`write_truth`)
_SUBSET = {"train": "training", "val": "validation", "test": "testing"}  # vidjax split -> release subset name


def _step_lists(videos) -> dict[str, list[tuple[str, str]]]:
  """{task: [(step id, step text), ...]}: every step a task's videos show, in order of first appearance."""
  steps: dict[str, dict[str, str]] = {}
  for v in videos:
    for c in v.clips:
      steps.setdefault(c.task, {}).setdefault(c.step, c.text)
  return {task: list(s.items()) for task, s in steps.items()}


def write_release(world: ProceduralWorld, root, dataset: str, *, train_split: str = "train",
                  eval_split: str = "val") -> Path:
  """Writes the world's videos as `dataset`'s release files (the layouts `vidjax.data.annotations` reads) under
  `root/<dataset>/`; returns what `data.annotations` names (a file, or CrossTask's folder).

  The training videos carry the subset of `train_split`, the evaluation videos that of `eval_split`:
    youcook2  youcookii_annotations_trainval.json {"database": {id: {subset, recipe_type, duration,
              annotations: [{segment, id, sentence}]}}}. The release has no step ids: the reader's clips have
              step "", as a user's YouCook2 clips do.
    coin      COIN.json {"database": {id: {subset, recipe_type, class, duration, annotation: [{id, segment,
              label}]}}}: step ids as the world names them ("0", "1", ..., "prepare3", "use3").
    crosstask tasks_primary.txt (a task's step list: every step its videos show), videos.csv (training videos),
              videos_val.csv (evaluation videos), annotations/<task>_<video>.csv (1-based step index, start,
              end). The CrossTask reader labels the videos with CAST's 80/20 seed-42 split whatever the lists
              say, as it does for a user's CrossTask.
  Times are the world's seconds (two decimals), written exactly (JSON / repr floats)."""
  if dataset not in RELEASE_DATASETS:
    raise ValueError(f"the procedural world writes the release formats of {RELEASE_DATASETS}, not {dataset!r}")
  out = Path(root) / dataset
  split_of = {**{v.video_id: train_split for v in world.train_videos},
              **{v.video_id: eval_split for v in world.eval_videos}}
  videos = world.train_videos + world.eval_videos
  for split in (train_split, eval_split):
    if split not in _SUBSET:
      raise ValueError(f"data split {split!r} has no release subset name (known: {sorted(_SUBSET)})")
  if dataset in ("youcook2", "coin"):
    entries = {}
    for v in videos:
      entry = {"subset": _SUBSET[split_of[v.video_id]], "recipe_type": v.task, "duration": v.duration,
               "video_url": f"synthetic://procedural/{v.video_id}"}
      if dataset == "youcook2":
        entry["annotations"] = [{"segment": [c.start, c.end], "id": c.index, "sentence": c.text} for c in v.clips]
      else:
        entry["class"] = f"task {v.task}"
        entry["annotation"] = [{"id": c.step, "segment": [c.start, c.end], "label": c.text} for c in v.clips]
      entries[v.video_id] = entry
    path = out / ("youcookii_annotations_trainval.json" if dataset == "youcook2" else "COIN.json")
    io.atomic_write_json(path, {"database": entries, "note": SYNTHETIC_NOTE})
    return path
  steps = _step_lists(videos)
  index = {task: {step: i + 1 for i, (step, _) in enumerate(s)} for task, s in steps.items()}
  blocks = [f"{task}\nsynthetic task {task}\nsynthetic://procedural/task/{task}\n{len(s)}\n"
            + ",".join(text for _, text in s) for task, s in sorted(steps.items())]
  io.atomic_write_text(out / "tasks_primary.txt", "\n\n".join(blocks) + "\n")
  for name, vids in (("videos.csv", world.train_videos), ("videos_val.csv", world.eval_videos)):
    io.atomic_write_text(out / name, "".join(f"{v.task},{v.video_id},synthetic://procedural/{v.video_id}\n"
                                             for v in vids))
  for v in videos:
    io.atomic_write_text(out / "annotations" / f"{v.task}_{v.video_id}.csv",
                         "".join(f"{index[v.task][c.step]},{c.start!r},{c.end!r}\n" for c in v.clips))
  return out


def write_truth(world: ProceduralWorld, path, *, seed: int, world_name: str) -> Path:
  """`world_truth.json`, what only the world knows, for the world-only diagnostics:

      {"world": name, "seed": seed, "note": ...,
       "reuse_gap": {clip id of a "use m" clip: clips since its "prepare m"}}   (history worlds; else {})

  The CAST experiment's reuse / non-reuse query split and its Acc by prepare-to-use gap read it."""
  path = Path(path)
  io.atomic_write_json(path, {"world": world_name, "seed": seed, "note": SYNTHETIC_NOTE,
                              "reuse_gap": dict(world.reuse_gap)})
  return path


# The CVR identity rule of each procedural world's benchmark (`write_world`): the dataset's own rule, read from the
# files the world writes as a user's are. COIN and CrossTask: task + step ids, which their files carry. YouCook2's
# release has no step ids; its rule (CAST App. B) is caption similarity by all-MiniLM-L6-v2, and the world's captions
# name the task and the step ("task 03 step 05", "task 03 use object 2"), so a caption's nearest captions of other
# videos are the same step of the same task, as a user's YouCook2 mines them. (The task + step rule on YouCook2's
# files falls back to other videos of the same task at any step: identity negatives whose captions differ, which
# the text alone rejects; measured in BENCHMARKS.md, "CAST on the history world".)
IDENTITY_RULES = {"youcook2": "caption_similarity", "coin": "task_step", "crosstask": "task_step"}


def write_world(config, root) -> dict[str, Path | str]:
  """The procedural world of a CAST (or stack) config as the files a user has: `config.dataset`'s release
  annotations (`write_release`), the feature store (`write_store`, kinds clip and text) and `world_truth.json`
  beside it (`write_truth`), all under `root`. Returns the `data.*` keys naming them, for
  `vidjax.experiments.common.world_data`, and the dataset's CVR identity rule for the world's files
  (`data.identity_rule`, `IDENTITY_RULES`: caption similarity on YouCook2, whose captions here name task and step;
  task + step on COIN and CrossTask). The world is `config.data.world` with `config.world`'s fields, drawn from
  `config.seed`."""
  if config.data.clip_kind != "clip" or config.data.text_kind != "text":
    raise ValueError("the synthetic world writes kinds 'clip' and 'text'; leave data.clip_kind/text_kind as is")
  root = Path(root)
  world = make_procedural_world(world_config_from(config.world, config.data.world), seed=config.seed)
  annotations = write_release(world, root, config.dataset, train_split=config.data.train_split,
                              eval_split=config.data.eval_split)
  write_store(world, root / "features", seed=config.seed, world_name=config.data.world, dataset=config.dataset)
  write_truth(world, root / TRUTH_FILE, seed=config.seed, world_name=config.data.world)
  return {"annotations": annotations, "features": root / "features", "identity_rule": IDENTITY_RULES[config.dataset]}


def read_truth(store_root) -> dict:
  """The `world_truth.json` beside a store a world wrote (`write_world`); {} beside any other store."""
  path = Path(store_root).parent / TRUTH_FILE
  return io.read_json(path, "world truth") if path.is_file() else {}


if __name__ == "__main__":  # pragma: no cover - a calibration aid: python -m vidjax.worlds.procedural [world]
  import sys
  name = sys.argv[1] if len(sys.argv) > 1 else "first_order"
  for seed in (0, 1, 2):
    report = calibration(make_procedural_world(world_config_from({}, name), seed=seed), seed)
    print(f"{name} seed {seed}: reuse {100 * report['reuse_fraction']:.1f}% | " + " | ".join(
        f"{k} acc={m['acc']:.1f} state={m['state_acc']:.1f} ident={m['ident_acc']:.1f}"
        for k, m in report.items() if k != "reuse_fraction"))
