"""Consistent Video Retrieval (CVR) benchmark and training-set builder (CAST §2.2, §3.1, App. B).

From annotated procedural videos (`vidjax.data.annotations`) this module builds, deterministically:

* the fixed **1-vs-9 evaluation benchmark** (§2.2 "Formal Protocol", App. B "Benchmark Mining
  Details", Table 9): one query per step of every video except its first; the context is up to
  L = 5 preceding clips; the pool holds the target plus 9 negatives: up to 3 *state* negatives
  (same video, different step), up to 3 *identity* negatives (other videos, by a matching rule),
  backfilled from the other hard pool when one is short, then *easy* negatives up to 9;
* the **training instances** (App. B "Training Candidate Construction"): up to 3 state and up to 3
  identity negatives, each list falling back to the other pool when short; a list that stays short
  is padded with zero vectors by the training pipeline;
* a **held-out subset** of the training videos (video-disjoint, seeded) built as 1-vs-9 pools, used
  only to select the Full Ensemble coefficients (Table 8) and excluded from the training instances;
* the **statistics** of paper Table 1 (videos, step-clips, queries) plus the negative-type
  composition and how many pools needed backfill.

Mining rules (parameters, not dataset names; `DATASET_RULES` holds the paper's choice per dataset):

* state negatives: clips of the query's own video whose step differs from the target's (different
  step id where ids exist, always a different caption), in a temporally diverse order: one past
  step, one future step, then the remaining past/future steps; the immediate predecessor (already
  the last context clip) is used only when nothing else is left;
* `identity_rule='caption_similarity'` (YouCook2): the ranked cross-video caption neighbours by
  cosine similarity of `embed_fn(captions)`; up to 3 are drawn from the top `caption_topk` (3: the
  top-3 of Table 9), backfill continues down the ranking; equal similarities (a caption many clips share) are
  ranked in a random order drawn from `seed`, so no video is everyone's neighbour by its position;
* `identity_rule='task_step'` (COIN, CrossTask, the procedural world's COIN / CrossTask): other videos with the same task
  and the same step id; with `task_fallback=True` (CrossTask) then other videos of the same task
  with a different step;
* `easy_rule='different_video'` (YouCook2) or `'different_task'` (COIN, CrossTask): uniform over
  the allowed clips; only if that pool cannot fill the slots, any clip of another video (counted
  as `pools_easy_relaxed`).

Every candidate pool has `pool_size` unique clip ids, the target exactly once, in a random order.
All randomness comes from one `numpy.random.default_rng([seed, role, crc32(video_id)])` per video,
so the draws do not depend on iteration order, and the same videos and seed give byte-identical files.

Files written by `build_cvr(videos_train, videos_eval, out_dir, ...)`::

    benchmark.json   list of benchmark records (final evaluation; CrossTask: crosstask_test.json)
    heldout.json     list of benchmark records from the held-out training videos (coefficient tuning)
    train.json       list of training instances (CrossTask: crosstask_train.json)
    clips.json       {clip_id: {video_id, index, start, end, text, task, step, split}} for every clip used
    splits.json      {"train": [...], "heldout": [...], "eval": [...]} video ids
    stats.json       {"benchmark": ..., "heldout": ..., "train": ..., "config": ...}

Benchmark record schema (one per query)::

    query_id        str   the target clip id (unique)
    video_id, task  str   the query's source video and its task
    text            str   the target step caption (the query q_t)
    context         [str] up to L preceding clip ids of the same video, oldest first (>= 1)
    target          str   the ground-truth clip id
    candidates      [str] pool_size (10) unique clip ids, target included once, shuffled
    negative_types  {clip_id: "state" | "identity" | "easy"} for the pool_size - 1 negatives
    backfilled      bool  a hard pool was short, so the pool is not the nominal 3 state + 3 identity
                          (slots backfilled from the other hard pool and/or extra easy negatives)

Training instance schema (one per query of the training videos)::

    query_id, video_id, task, text, context, target   as above
    state_negatives     [str] up to 3 clip ids (same video; identity clips if the state pool is short)
    identity_negatives  [str] up to 3 clip ids (other videos; state clips if the identity pool is short)
    fallback            bool  a list took clips from the other pool

Statistics (`stats.json`; `format_stats` prints them as a Table-1-style table)::

    benchmark / heldout: videos, videos_without_queries, step_clips, queries, pool_size,
        negatives {state, identity, easy} (counts over all pools), pools_backfilled (records with
        backfilled=true), pools_hard_backfill (hard slots filled from the other hard pool),
        pools_easy_fill (more than pool_size - 1 - num_state - num_identity easy negatives),
        pools_easy_relaxed (easy rule pool too small; other-video clips used)
    train: videos, videos_without_queries, step_clips, instances, state_negatives,
        identity_negatives, instances_state_fallback, instances_identity_fallback, padded_slots
    config: every mining parameter and the file names

Model inputs (App. B) from these records and `vidjax.data.pipeline.FeatureTable`s of clip and text
embeddings: `CVRTrainSource` (training batches; its `collate` is the pipeline's `batch_fn`) and
`cvr_eval_arrays` (dense arrays of a 1-vs-9 benchmark for `vidjax.evaluate.evaluate_cvr`). History
convention (shared with `vidjax.models.cast`): the context is *left-padded* to `context_len` with
zeros and a 0 mask, oldest first, so the last slot is the anchor state v_{t-1}. Missing training
negatives (App. B: "if both are unavailable, we use zero vectors") are zero vectors;
`zero_negatives_in_loss` says whether their (constant) similarity stays in the loss denominators as
in the paper (mask 1) or is dropped (mask 0).

The paper builds YouCook2 only from clips "with valid video files" (Table 1: 414 of 457 validation
videos): filter `videos` to those with extracted features before calling the builders.
"""
from __future__ import annotations

import dataclasses
import os
import zlib
from pathlib import Path
from typing import Callable, Mapping, NamedTuple, Sequence

import numpy as np

from vidjax import io
from vidjax.data.features import FeatureStore
from vidjax.data.pipeline import FeatureTable, Gather
from vidjax.metrics import NEG_TYPE_CODES
from vidjax.ops import l2_normalize
from vidjax.data.annotations.types import Video
from vidjax.data.annotations.types import split_by_video

IDENTITY_RULES = ("caption_similarity", "task_step")
EASY_RULES = ("different_video", "different_task")
DEFAULT_EASY_RULE = {"caption_similarity": "different_video", "task_step": "different_task"}
# The paper's rules per dataset (App. B, Table 9), to splat into the builders.
DATASET_RULES = {
    "youcook2": {"identity_rule": "caption_similarity", "easy_rule": "different_video"},
    "coin": {"identity_rule": "task_step", "task_fallback": False, "easy_rule": "different_task"},
    "crosstask": {"identity_rule": "task_step", "task_fallback": True, "easy_rule": "different_task"},
}

EmbedFn = Callable[[list[str]], np.ndarray]

_BENCHMARK_ROLE, _TRAIN_ROLE = 1, 2


@dataclasses.dataclass(frozen=True)
class _Rules:
  identity_rule: str
  easy_rule: str
  task_fallback: bool
  context_len: int
  num_state: int
  num_identity: int
  caption_topk: int


def _rules(identity_rule, easy_rule, task_fallback, context_len, num_state, num_identity, caption_topk,
           embed_fn) -> _Rules:
  if identity_rule not in IDENTITY_RULES:
    raise ValueError(f"identity_rule must be one of {IDENTITY_RULES}, got {identity_rule!r}")
  easy_rule = DEFAULT_EASY_RULE[identity_rule] if easy_rule is None else easy_rule
  if easy_rule not in EASY_RULES:
    raise ValueError(f"easy_rule must be one of {EASY_RULES}, got {easy_rule!r}")
  if identity_rule == "caption_similarity" and embed_fn is None:
    raise ValueError("identity_rule='caption_similarity' needs embed_fn(list[str]) -> [N, D] "
                     "(e.g. the all-MiniLM-L6-v2 text encoder wired in by the experiment)")
  for name, value in [("context_len", context_len), ("num_state", num_state),
                      ("num_identity", num_identity), ("caption_topk", caption_topk)]:
    if not isinstance(value, int) or value < (1 if name == "context_len" else 0):
      raise ValueError(f"{name} must be a non-negative integer (context_len >= 1), got {value!r}")
  return _Rules(identity_rule, easy_rule, bool(task_fallback), context_len, num_state, num_identity,
                caption_topk)


def _tie_order(seed: int, rows: np.ndarray, n: int) -> np.ndarray:
  """[len(rows), n] numbers in [0, 1), a hash of (seed, row, column) (splitmix64's finaliser): each row's own random
  order of the columns, whatever rows are computed together."""
  with np.errstate(over="ignore"):
    x = (np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + rows.astype(np.uint64)[:, None] * np.uint64(0xBF58476D1CE4E5B9)
         + np.arange(n, dtype=np.uint64)[None, :] * np.uint64(0x94D049BB133111EB))
    for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
      x = (x ^ (x >> np.uint64(shift))) * np.uint64(mult)
    x ^= x >> np.uint64(31)
  return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def caption_neighbours(texts: Sequence[str], video: np.ndarray, embed_fn: EmbedFn, k: int,
                       chunk: int = 512, tie_seed: int | None = None) -> np.ndarray:
  """Ranked cross-video caption neighbours by cosine similarity.

  Args:
    texts: N captions.
    video: [N] int video index per caption; neighbours are taken from other videos only.
    embed_fn: maps a list of U unique captions to [U, D] embeddings (normalised here).
    k: neighbours per caption.
    chunk: rows of the [N, N] similarity matrix held at once.
    tie_seed: None: equal similarities in index order; an int: in a random order per caption drawn from it (the
      same for the same inputs), so that captions many clips share (a YouCook2 "add salt", every caption of a
      world that names its steps) take their neighbours from all of those videos, not always the first ones.

  Returns:
    [N, k] int32 clip indices, most similar first (ties: lower index first, or `tie_seed`'s order), -1 where
    fewer than k clips of other videos exist. Similarities are rounded to 1e-5 first so that BLAS rounding
    differences cannot reorder near-ties between runs.
  """
  n = len(texts)
  out = np.full((n, k), -1, np.int32)
  if n == 0 or k == 0:
    return out
  unique = sorted(set(texts))
  position = {t: i for i, t in enumerate(unique)}
  inverse = np.array([position[t] for t in texts])
  emb = np.asarray(embed_fn(list(unique)), dtype=np.float32)
  if emb.ndim != 2 or emb.shape[0] != len(unique) or not np.isfinite(emb).all():
    raise ValueError(f"embed_fn must return finite [{len(unique)}, D] embeddings for {len(unique)} captions, "
                     f"got shape {emb.shape}" + ("" if np.isfinite(emb).all() else " with non-finite values"))
  emb = l2_normalize(emb)
  emb = emb[inverse]
  kk = min(k, n)
  video = np.asarray(video)
  for s in range(0, n, chunk):
    e = min(n, s + chunk)
    sim = np.round(emb[s:e] @ emb.T, 5)
    if tie_seed is not None:  # below the rounding step: reorders equal values only
      sim += 1e-6 * _tie_order(tie_seed, np.arange(s, e), n)
    sim[video[s:e, None] == video[None, :]] = -np.inf
    # Canonical top-kk: all values above the kk-th largest, then the lowest indices among ties.
    thr = np.partition(sim, n - kk, axis=1)[:, n - kk][:, None]
    above = sim > thr
    tied = sim == thr
    need = kk - above.sum(axis=1, keepdims=True)
    select = above | (tied & (np.cumsum(tied, axis=1, dtype=np.int32) <= need))
    cols = np.nonzero(select)[1].reshape(e - s, kk)
    vals = np.take_along_axis(sim, cols, axis=1)
    order = np.lexsort((cols, -vals), axis=-1)
    cols = np.take_along_axis(cols, order, axis=1)
    vals = np.take_along_axis(vals, order, axis=1)
    out[s:e, :kk] = np.where(np.isneginf(vals), -1, cols)
  return out


class _Miner:
  """Flat arrays over every clip of a set of videos, and the per-query negative pools."""

  def __init__(self, videos: Sequence[Video], rules: _Rules, embed_fn: EmbedFn | None, seed: int = 0):
    videos = sorted(videos, key=lambda v: v.video_id)
    seen = set()
    for v in videos:
      if v.video_id in seen:
        raise ValueError(f"CVR builder: video id {v.video_id!r} appears more than once")
      seen.add(v.video_id)
    self.videos = videos
    self.rules = rules
    self.clips = [c for v in videos for c in v.clips]
    self.ids = [c.clip_id for c in self.clips]
    if len(set(self.ids)) != len(self.ids):
      raise ValueError("CVR builder: clip ids are not unique")
    self.offsets = np.cumsum([0] + [len(v.clips) for v in videos])
    self.video = np.repeat(np.arange(len(videos), dtype=np.int32), [len(v.clips) for v in videos])
    task_codes = {t: i for i, t in enumerate(sorted({c.task for c in self.clips}))}
    step_codes = {s: i for i, s in enumerate(sorted({(c.task, c.step) for c in self.clips if c.step}))}
    self.task = np.array([task_codes[c.task] for c in self.clips], np.int32)
    self.step_key = np.array([step_codes[(c.task, c.step)] if c.step else -1 for c in self.clips], np.int32)
    self.by_task = _group(self.task)
    self.by_step = _group(self.step_key)
    self._not_task: dict[int, np.ndarray] = {}
    self._not_video: tuple[int, np.ndarray] | None = None
    self.neighbours = None
    if rules.identity_rule == "caption_similarity":
      k = max(rules.caption_topk, rules.num_state + rules.num_identity)
      self.neighbours = caption_neighbours([c.text for c in self.clips], self.video, embed_fn, k, tie_seed=seed)

  def queries(self):
    """Yields (video index, position t, global clip index) for every step but each video's first."""
    for vi, v in enumerate(self.videos):
      for t in range(1, len(v.clips)):
        yield vi, t, int(self.offsets[vi]) + t

  def query_fields(self, vi: int, t: int, g: int) -> dict:
    """The fields shared by benchmark records and training instances of query clip `g`."""
    clip = self.clips[g]
    return {"query_id": self.ids[g], "video_id": clip.video_id, "task": clip.task, "text": clip.text,
            "context": self.context(vi, t), "target": self.ids[g]}

  def context(self, vi: int, t: int) -> list[str]:
    off = int(self.offsets[vi])
    return self.ids[off + max(0, t - self.rules.context_len): off + t]

  def state_order(self, vi: int, t: int, rng: np.random.Generator) -> list[int]:
    """Same-video mismatched steps, temporally diverse first, the predecessor last."""
    clips = self.videos[vi].clips
    target = clips[t]
    def mismatched(c):
      same_step = bool(target.step) and c.step == target.step
      return not same_step and c.text.strip().lower() != target.text.strip().lower()
    past = [j for j in range(t - 1) if mismatched(clips[j])]
    future = [j for j in range(t + 1, len(clips)) if mismatched(clips[j])]
    past = [past[i] for i in rng.permutation(len(past))]
    future = [future[i] for i in rng.permutation(len(future))]
    order = past[:1] + future[:1]
    rest = past[1:] + future[1:]
    order += [rest[i] for i in rng.permutation(len(rest))]
    if mismatched(clips[t - 1]):
      order.append(t - 1)
    off = int(self.offsets[vi])
    return [off + j for j in order]

  def identity_order(self, g: int, rng: np.random.Generator, need: int) -> list[int]:
    """Up to `need` clips of other videos, in the order they fill identity slots."""
    v = self.video[g]
    if self.neighbours is not None:
      ranked = self.neighbours[g]
      ranked = ranked[ranked >= 0]
      k = min(self.rules.caption_topk, len(ranked))
      return [int(x) for x in np.concatenate([rng.permutation(ranked[:k]), ranked[k:]])[:need]]
    order = []
    if self.step_key[g] >= 0:
      primary = self.by_step[self.step_key[g]]
      primary = primary[self.video[primary] != v]
      order = list(rng.choice(primary, min(need, len(primary)), replace=False)) if len(primary) else []
    if len(order) < need and self.rules.task_fallback:
      pool = self.by_task[self.task[g]]
      keep = self.video[pool] != v
      if self.step_key[g] >= 0:
        keep &= self.step_key[pool] != self.step_key[g]
      pool = pool[keep]
      if len(pool):
        order += list(rng.choice(pool, min(need - len(order), len(pool)), replace=False))
    return [int(x) for x in order]

  def _easy_pool(self, g: int) -> np.ndarray:
    if self.rules.easy_rule == "different_task":
      task = int(self.task[g])
      if task not in self._not_task:
        self._not_task[task] = np.flatnonzero(self.task != task).astype(np.int32)
      return self._not_task[task]
    return self._other_videos(int(self.video[g]))

  def _other_videos(self, v: int) -> np.ndarray:
    # Queries come video by video, so one cached complement suffices.
    if self._not_video is None or self._not_video[0] != v:
      self._not_video = (v, np.flatnonzero(self.video != v).astype(np.int32))
    return self._not_video[1]

  def easy(self, g: int, rng: np.random.Generator, need: int, exclude: set[int]) -> tuple[list[int], int]:
    """`need` easy negatives not in `exclude`; returns (clips, how many came from the relaxed pool)."""
    out = _draw(self._easy_pool(g), rng, need, exclude)
    relaxed = 0
    if len(out) < need:
      extra = _draw(self._other_videos(int(self.video[g])), rng, need - len(out), exclude | set(out))
      relaxed = len(extra)
      out += extra
    if len(out) < need:
      raise ValueError(
          f"CVR builder: query {self.ids[g]!r} needs {need} easy negatives but only {len(out)} unused "
          f"clips of other videos exist ({len(self.clips)} clips in {len(self.videos)} videos); "
          "use more videos or a smaller pool_size")
    return out, relaxed


def _group(codes: np.ndarray) -> dict[int, np.ndarray]:
  order = np.argsort(codes, kind="stable")
  values, starts = np.unique(codes[order], return_index=True)
  bounds = list(starts) + [len(codes)]
  return {int(val): order[bounds[i]:bounds[i + 1]].astype(np.int32) for i, val in enumerate(values) if val >= 0}


def _draw(pool: np.ndarray, rng: np.random.Generator, need: int, exclude: set[int]) -> list[int]:
  """Uniformly draws up to `need` distinct clips of `pool` that are not in `exclude`."""
  if need <= 0 or len(pool) == 0:
    return []
  out: list[int] = []
  taken = set(exclude)
  if len(pool) > 4 * (need + len(exclude)):
    # Big pool: rejection sampling is cheaper than permuting it, and rarely needs a second round.
    while len(out) < need:
      for x in pool[rng.integers(len(pool), size=2 * need)]:
        x = int(x)
        if x not in taken and len(out) < need:
          taken.add(x)
          out.append(x)
    return out
  return [x for x in (int(y) for y in rng.permutation(pool)) if x not in taken][:need]


def _rng(seed: int, role: int, video_id: str) -> np.random.Generator:
  return np.random.default_rng([seed, role, zlib.crc32(video_id.encode("utf-8"))])


def _base_stats(miner: _Miner) -> dict:
  return {
      "videos": len(miner.videos),
      "videos_without_queries": sum(len(v.clips) < 2 for v in miner.videos),
      "step_clips": len(miner.clips),
  }


def build_benchmark(videos: Sequence[Video], *, identity_rule: str, embed_fn: EmbedFn | None = None,
                    easy_rule: str | None = None, task_fallback: bool = True, context_len: int = 5,
                    num_state: int = 3, num_identity: int = 3, pool_size: int = 10, caption_topk: int = 3,
                    seed: int = 0) -> tuple[list[dict], dict]:
  """Builds the fixed 1-vs-(pool_size - 1) CVR benchmark over `videos` (§2.2, App. B).

  All candidates come from `videos` (the evaluation split). See the module docstring for the
  mining rules and the record schema.

  Returns:
    (records, stats): one record per query, sorted by video id then step; stats in the shape of
    Table 1 plus negative-type counts and backfill counts.
  """
  rules = _rules(identity_rule, easy_rule, task_fallback, context_len, num_state, num_identity,
                 caption_topk, embed_fn)
  if pool_size - 1 < num_state + num_identity:
    raise ValueError(f"pool_size={pool_size} leaves fewer than num_state + num_identity = "
                     f"{num_state + num_identity} negative slots")
  miner = _Miner(videos, rules, embed_fn, seed)
  hard_slots = num_state + num_identity
  stats = _base_stats(miner) | {
      "queries": 0, "pool_size": pool_size, "negatives": {"state": 0, "identity": 0, "easy": 0},
      "pools_backfilled": 0, "pools_hard_backfill": 0, "pools_easy_fill": 0, "pools_easy_relaxed": 0}
  records = []
  for vi, t, g in miner.queries():
    query_id = miner.ids[g]
    if t == 1:  # One generator per video: its draws do not depend on the other videos' order.
      rng = _rng(seed, _BENCHMARK_ROLE, miner.clips[g].video_id)
    state_pool = miner.state_order(vi, t, rng)
    identity_pool = miner.identity_order(g, rng, hard_slots)
    state = state_pool[:num_state]
    identity = identity_pool[:num_identity]
    # One hard pool short: backfill its slots from the other one (§2.2 Formal Protocol).
    short = hard_slots - len(state) - len(identity)
    more_identity = identity_pool[len(identity):len(identity) + short]
    more_state = state_pool[len(state):len(state) + short - len(more_identity)]
    state, identity = state + more_state, identity + more_identity
    n_easy = pool_size - 1 - len(state) - len(identity)
    easy, relaxed = miner.easy(g, rng, n_easy, {g, *state, *identity})
    kinds = {**{c: "state" for c in state}, **{c: "identity" for c in identity}, **{c: "easy" for c in easy}}
    pool = [g] + state + identity + easy
    assert len(set(pool)) == pool_size, query_id  # Disjoint by construction (video / exclusion rules).
    candidates = [miner.ids[pool[i]] for i in rng.permutation(pool_size)]
    backfilled = len(state_pool) < num_state or len(identity_pool) < num_identity
    records.append({
        **miner.query_fields(vi, t, g),
        "candidates": candidates,
        "negative_types": {miner.ids[c]: kind for c, kind in kinds.items()},
        "backfilled": backfilled,
    })
    stats["queries"] += 1
    for kind in kinds.values():
      stats["negatives"][kind] += 1
    stats["pools_backfilled"] += backfilled
    stats["pools_hard_backfill"] += bool(more_state or more_identity)
    stats["pools_easy_fill"] += n_easy > pool_size - 1 - hard_slots
    stats["pools_easy_relaxed"] += relaxed > 0
  return records, stats


def build_training_instances(videos: Sequence[Video], *, identity_rule: str, embed_fn: EmbedFn | None = None,
                             task_fallback: bool = True, context_len: int = 5, num_state: int = 3,
                             num_identity: int = 3, caption_topk: int = 3,
                             seed: int = 0) -> tuple[list[dict], dict]:
  """Builds CAST training instances over `videos` (App. B "Training Candidate Construction").

  Each list takes up to `num_state` / `num_identity` clips of its own pool and falls back to the
  other pool when short; lists that stay short are padded with zero vectors downstream (the
  `padded_slots` stat counts those slots).

  Returns:
    (instances, stats): one instance per query (schema in the module docstring).
  """
  rules = _rules(identity_rule, None, task_fallback, context_len, num_state, num_identity,
                 caption_topk, embed_fn)
  miner = _Miner(videos, rules, embed_fn, seed)
  stats = _base_stats(miner) | {
      "instances": 0, "state_negatives": 0, "identity_negatives": 0, "instances_state_fallback": 0,
      "instances_identity_fallback": 0, "padded_slots": 0}
  instances = []
  for vi, t, g in miner.queries():
    if t == 1:  # One generator per video: its draws do not depend on the other videos' order.
      rng = _rng(seed, _TRAIN_ROLE, miner.clips[g].video_id)
    state_pool = miner.state_order(vi, t, rng)
    identity_pool = miner.identity_order(g, rng, num_state + num_identity)
    state = state_pool[:num_state]
    identity = identity_pool[:num_identity]
    # A short pool has no extras, so a fallback never repeats a clip of the other list.
    state_fb = identity_pool[num_identity:num_identity + num_state - len(state)]
    identity_fb = state_pool[num_state:num_state + num_identity - len(identity)]
    state, identity = state + state_fb, identity + identity_fb
    instances.append({
        **miner.query_fields(vi, t, g),
        "state_negatives": [miner.ids[c] for c in state],
        "identity_negatives": [miner.ids[c] for c in identity],
        "fallback": bool(state_fb or identity_fb),
    })
    stats["instances"] += 1
    stats["state_negatives"] += len(state)
    stats["identity_negatives"] += len(identity)
    stats["instances_state_fallback"] += bool(state_fb)
    stats["instances_identity_fallback"] += bool(identity_fb)
    stats["padded_slots"] += num_state + num_identity - len(state) - len(identity)
  return instances, stats


def _clip_table(videos: Sequence[Video]) -> dict:
  return {c.clip_id: {"video_id": c.video_id, "index": c.index, "start": c.start, "end": c.end,
                      "text": c.text, "task": c.task, "step": c.step, "split": v.split}
          for v in videos for c in v.clips}


class CVRFiles(NamedTuple):
  """What `build_cvr` wrote: the benchmark records, the held-out pools, the training instances and the statistics."""
  benchmark: list[dict]
  heldout: list[dict]
  train: list[dict]
  stats: dict


def build_cvr(videos_train: Sequence[Video], videos_eval: Sequence[Video], out_dir: str | os.PathLike, *,
              identity_rule: str, embed_fn: EmbedFn | None = None, easy_rule: str | None = None,
              task_fallback: bool = True, context_len: int = 5, num_state: int = 3, num_identity: int = 3,
              pool_size: int = 10, caption_topk: int = 3, heldout_fraction: float = 0.1, seed: int = 0,
              train_name: str = "train.json", eval_name: str = "benchmark.json",
              verbose: bool = False, check: Callable[[CVRFiles], None] | None = None,
              grow_heldout: bool = False) -> CVRFiles:
  """Builds and writes the CVR benchmark, held-out pools and training instances (Table 8).

  Args:
    videos_train: training-split videos; `heldout_fraction` of them (seeded, video-disjoint) become
      the held-out 1-vs-9 pools for coefficient selection, the rest the training instances.
    videos_eval: evaluation-split videos, the benchmark (its pools use only these videos).
    out_dir: where the files listed in the module docstring are written.
    identity_rule, embed_fn, easy_rule, task_fallback, context_len, num_state, num_identity,
    pool_size, caption_topk, seed: see `build_benchmark` / the module docstring.
    train_name, eval_name: file names of the training instances and the benchmark.
    verbose: print the statistics table.
    grow_heldout: a held-out subset too small to build its pools (a small corpus) grows one video at a time, up
      to half the training videos, to the smallest that builds them; stats["config"] then holds the fraction used
      (`heldout_fraction`) beside the one asked (`heldout_fraction_asked`). Off: one error naming the setting.
    check: called with the built records before anything is written (e.g. a batch size against the training
      set), so a config error leaves no files behind.

  Returns:
    `CVRFiles`: the records written, and the statistics also written to `<out_dir>/stats.json`.
  """
  overlap = {v.video_id for v in videos_train} & {v.video_id for v in videos_eval}
  if overlap:
    raise ValueError(f"build_cvr: {len(overlap)} videos are in both the training and the evaluation "
                     f"split (e.g. {sorted(overlap)[:3]}); CVR splits must be video-disjoint")
  mining = dict(identity_rule=identity_rule, embed_fn=embed_fn, task_fallback=task_fallback,
                context_len=context_len, num_state=num_state, num_identity=num_identity,
                caption_topk=caption_topk, seed=seed)
  benchmark, benchmark_stats = build_benchmark(videos_eval, easy_rule=easy_rule, pool_size=pool_size, **mining)
  asked, count = heldout_fraction, int(round(heldout_fraction * len(videos_train)))
  while True:  # a held-out subset too small for its pools grows one video at a time (grow_heldout), seeded
    train_videos, heldout_videos = split_by_video(videos_train, count / max(len(videos_train), 1), seed)
    try:
      heldout, heldout_stats = build_benchmark(heldout_videos, easy_rule=easy_rule, pool_size=pool_size, **mining)
      break
    except ValueError as e:  # name the subset and the setting that sized it (config.data.heldout_fraction)
      if grow_heldout and count < len(videos_train) // 2:
        count += 1
        continue
      raise ValueError(f"the held-out subset ({len(heldout_videos)} of the {len(videos_train)} training videos: "
                       f"config.data.heldout_fraction={asked}, the subset the Full-Ensemble weights are "
                       f"selected on) cannot build its 1-vs-{pool_size} pools: {e}; raise data.heldout_fraction or "
                       "use more training videos") from None
  if count != int(round(asked * len(videos_train))):
    heldout_fraction = round(count / len(videos_train), 4)
  train, train_stats = build_training_instances(train_videos, **mining)
  out = Path(out_dir)
  config = {k: v for k, v in mining.items() if k != "embed_fn"}
  config |= {"easy_rule": easy_rule or DEFAULT_EASY_RULE[identity_rule], "pool_size": pool_size,
             "heldout_fraction": heldout_fraction, "heldout_fraction_asked": asked, "train_file": train_name, "eval_file": eval_name}
  stats = {"benchmark": benchmark_stats, "heldout": heldout_stats, "train": train_stats, "config": config}
  if check is not None:
    check(CVRFiles(benchmark, heldout, train, stats))
  io.atomic_write_json(out / eval_name, benchmark)
  io.atomic_write_json(out / "heldout.json", heldout)
  io.atomic_write_json(out / train_name, train)
  io.atomic_write_json(out / "clips.json", _clip_table([*videos_train, *videos_eval]))
  io.atomic_write_json(out / "splits.json", {
      "train": [v.video_id for v in train_videos], "heldout": [v.video_id for v in heldout_videos],
      "eval": sorted(v.video_id for v in videos_eval)})
  io.atomic_write_json(out / "stats.json", stats)
  if verbose:
    print(format_stats(stats))
  return CVRFiles(benchmark, heldout, train, stats)


def read_cvr(out_dir: str | os.PathLike, dataset: str) -> CVRFiles:
  """The CVR files `build_dataset_cvr` wrote for `dataset` in `out_dir`, read back."""
  out = Path(out_dir)
  eval_name, train_name = file_names(dataset)
  return CVRFiles(io.read_json(out / eval_name), io.read_json(out / "heldout.json"), io.read_json(out / train_name),
                  io.read_json(out / "stats.json"))


def build_crosstask_cvr(videos: Sequence[Video], out_dir: str | os.PathLike, *, split_seed: int = 42,
                        test_fraction: float = 0.2, **kwargs) -> CVRFiles:
  """CrossTask variant (App. B): 80/20 video-disjoint split with seed 42, then `build_cvr`.

  Writes `crosstask_train.json` (training instances) and `crosstask_test.json` (the benchmark)
  in place of train.json / benchmark.json. Mining defaults to `DATASET_RULES['crosstask']`.
  """
  train, test = split_by_video(videos, test_fraction, split_seed)
  kwargs = DATASET_RULES["crosstask"] | kwargs
  return build_cvr(train, test, out_dir, train_name="crosstask_train.json",
                   eval_name="crosstask_test.json", **kwargs)


def available_videos(videos: Sequence[Video], store: FeatureStore | None, kinds: Sequence[str] = ("clip", "text"),
                     available_file: str | os.PathLike = "", skip_missing: bool = False) -> tuple[list[Video], list[str]]:
  """The paper's rule for unavailable videos (Table 1: YouCook2 keeps the 414 validation videos with files).

  With `available_file` (a file of video ids, one a line) only those videos are kept; with
  `skip_missing` a video is kept only when `store` has (valid, `FeatureStore.complete`) features of every kind in
  `kinds` for every one of its clips. Either way this runs before the benchmark is built, so no pool points at a missing
  clip, and the dropped videos are counted and reported (never silently). With neither, every video is
  kept and a missing feature later stops the run with one error naming the ids.

  Returns:
    (kept videos, dropped video ids).
  """
  keep = None
  if available_file:
    path = Path(available_file)
    if not path.is_file():
      raise FileNotFoundError(f"available_videos: no such file {path}")
    keep = {line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}
  if skip_missing:
    if store is None:
      raise ValueError("skip_missing needs a feature store")
    have = store.complete(kinds, [c.clip_id for v in videos for c in v.clips])
    complete = {v.video_id for v in videos if all(c.clip_id in have for c in v.clips)}
    keep = complete if keep is None else keep & complete
  if keep is None:
    return list(videos), []
  kept = [v for v in videos if v.video_id in keep]
  if not kept:
    raise ValueError(f"no annotated video is available ({len(videos)} annotated; available_videos="
                     f"{str(available_file)!r}, skip_missing={skip_missing})")
  return kept, sorted(v.video_id for v in videos if v.video_id not in keep)


def feature_ids(records: Sequence[Mapping]) -> tuple[set[str], set[str]]:
  """(clip ids, text ids) that benchmark records and training instances need embeddings for."""
  clips, texts = set(), set()
  for r in records:
    clips.add(r["target"])
    texts.add(r["target"])
    for key in ("context", "candidates", "state_negatives", "identity_negatives"):
      clips.update(r.get(key, ()))
  return clips, texts


def file_names(dataset: str) -> tuple[str, str]:
  """(benchmark file, training-instance file) that `build_dataset_cvr` writes for `dataset`."""
  return ("crosstask_test.json", "crosstask_train.json") if dataset == "crosstask" else ("benchmark.json", "train.json")


def build_dataset_cvr(dataset: str, videos: Sequence[Video], out_dir: str | os.PathLike, *, source: str = "",
                      train_split: str = "train", eval_split: str = "val", crosstask_split_seed: int = 42,
                      crosstask_test_fraction: float = 0.2, **rules) -> CVRFiles:
  """The paper's CVR files for one annotated dataset: its own split rule, then `build_cvr`.

  CrossTask is split 80/20 by video with seed 42 (App. B, `build_crosstask_cvr`); YouCook2 and COIN
  use the annotation splits `train_split` (training + held-out) and `eval_split` (the benchmark).
  `rules` are `build_cvr`'s mining arguments over `DATASET_RULES[dataset]`; `source` names the
  annotation file in errors. Returns the `CVRFiles` written.
  """
  if dataset not in DATASET_RULES:
    raise ValueError(f"unknown CVR dataset {dataset!r}; expected one of {sorted(DATASET_RULES)}")
  rules = DATASET_RULES[dataset] | rules
  if dataset == "crosstask":
    return build_crosstask_cvr(videos, out_dir, split_seed=crosstask_split_seed,
                               test_fraction=crosstask_test_fraction, **rules)
  train_videos = [v for v in videos if v.split == train_split]
  eval_videos = [v for v in videos if v.split == eval_split]
  for split, vids in ((train_split, train_videos), (eval_split, eval_videos)):
    if not vids:
      raise ValueError(f"{source or dataset}: no videos in the {split!r} split")
  return build_cvr(train_videos, eval_videos, out_dir, **rules)


def format_stats(stats: dict) -> str:
  """Table-1-style text table of `build_cvr` statistics."""
  header = (f"{'set':<10}{'videos':>8}{'clips':>8}{'queries':>9}{'state':>8}{'ident':>8}{'easy':>8}"
            f"{'backfill':>10}{'easyfill':>10}")
  lines = [header, "-" * len(header)]
  for name in ("benchmark", "heldout"):
    s = stats[name]
    n = s["negatives"]
    lines.append(f"{name:<10}{s['videos']:>8}{s['step_clips']:>8}{s['queries']:>9}{n['state']:>8}"
                 f"{n['identity']:>8}{n['easy']:>8}{s['pools_hard_backfill']:>10}{s['pools_easy_fill']:>10}")
  s = stats["train"]
  fallback = s["instances_state_fallback"] + s["instances_identity_fallback"]
  lines.append(f"{'train':<10}{s['videos']:>8}{s['step_clips']:>8}{s['instances']:>9}{s['state_negatives']:>8}"
               f"{s['identity_negatives']:>8}{'-':>8}{fallback:>10}{'-':>10}")
  lines.append("(train: 'queries' = instances, 'backfill' = instances whose lists fell back to the other pool)")
  return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Model inputs.


def _history_rows(clips: FeatureTable, context: Sequence[str], context_len: int) -> np.ndarray:
  if context_len == 0:
    return np.zeros((0,), np.int32)
  return clips.rows(context, context_len, left_pad=True)


class CVRTrainSource:
  """Training examples (App. B "Training Candidate Construction") as a random-access sequence.

  Item `i` is a dict of float32 arrays: text [D], history [L, D], history_mask [L], positive [D],
  state_negs [Ks, D], state_mask [Ks], ident_negs [Ki, D], ident_mask [Ki].

  For training, `rows(indices)` gives the same batch with the feature fields as row indices into the clip and text
  tables (`gather`, a `vidjax.data.pipeline.Gather`: on the device, the vectors are gathered inside the step).
  """

  def __init__(self, instances: Sequence[Mapping], clips: FeatureTable, texts: FeatureTable,
               context_len: int, num_state: int = 3, num_identity: int = 3,
               zero_negatives_in_loss: bool = True, device_budget_bytes: int | None = None):
    self.clips, self.texts = clips, texts
    self.zero_in_loss = zero_negatives_in_loss
    self.text = np.array([texts.index[r["target"]] for r in instances], np.int32)
    self.pos = clips.rows([r["target"] for r in instances])
    self.hist = np.stack([_history_rows(clips, r["context"], context_len) for r in instances]) \
        if instances else np.zeros((0, context_len), np.int32)
    self.state = np.stack([clips.rows(r["state_negatives"], num_state) for r in instances])
    self.ident = np.stack([clips.rows(r["identity_negatives"], num_identity) for r in instances])
    self.gather = Gather({"clip": clips, "text": texts},
                         {"text": "text", "history": "clip", "positive": "clip", "state_negs": "clip",
                          "ident_negs": "clip"}, device_budget_bytes)

  def __len__(self) -> int:
    return len(self.text)

  def __getitem__(self, i: int) -> dict[str, np.ndarray]:
    """One example (arrays without a batch dimension)."""
    return {k: v[0] for k, v in self.collate([i]).items()}

  def rows(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
    """The batch of examples `indices` with its feature fields as int32 row indices (-1 = a zero vector): text [B]
    and positive [B] (text / clip rows), history [B, L], state_negs [B, Ks], ident_negs [B, Ki] (clip rows), and the
    float32 masks. `gather.host(rows)` is the `batch_fn` of `vidjax.train.fit_epochs(..., gather=gather)`."""
    i = np.asarray(indices, np.int64)
    hist, state, ident = self.hist[i], self.state[i], self.ident[i]
    neg_mask = lambda rows: (np.ones(rows.shape, np.float32) if self.zero_in_loss  # noqa: E731
                             else (rows >= 0).astype(np.float32))
    return {"text": self.text[i], "history": hist, "history_mask": (hist >= 0).astype(np.float32),
            "positive": self.pos[i], "state_negs": state, "state_mask": neg_mask(state),
            "ident_negs": ident, "ident_mask": neg_mask(ident)}

  def collate(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
    """The batch of examples `indices`, gathered on the host: `[len(indices), ...]` arrays."""
    return self.gather.gather_all(self.rows(indices))


def cvr_eval_arrays(records: Sequence[Mapping], clips: FeatureTable, texts: FeatureTable,
                    context_len: int) -> dict[str, np.ndarray]:
  """Dense arrays of a 1-vs-9 benchmark (records as written by `build_cvr`).

  Returns:
    {text [Q, D], history [Q, L, D], history_mask [Q, L], candidates [Q, C, D], target_index [Q],
     neg_types [Q, C] (`vidjax.metrics.NEG_TYPE_CODES`: 0 = GT, 1 = state, 2 = identity, 3 = easy)}.
  """
  if not records:
    raise ValueError("the CVR benchmark has no queries")
  hist = np.stack([_history_rows(clips, r["context"], context_len) for r in records]) \
      if context_len else np.zeros((len(records), 0), np.int32)
  cand = np.stack([clips.rows(r["candidates"]) for r in records])
  target = np.array([r["candidates"].index(r["target"]) for r in records], np.int32)
  types = np.array([[NEG_TYPE_CODES["gt"] if c == r["target"] else NEG_TYPE_CODES[r["negative_types"][c]]
                     for c in r["candidates"]] for r in records], np.int32)
  return {
      "text": texts.gather(np.array([texts.index[r["target"]] for r in records])),
      "history": clips.gather(hist),
      "history_mask": (hist >= 0).astype(np.float32),
      "candidates": clips.gather(cand),
      "target_index": target,
      "neg_types": types,
  }


def truncate_context(arrays: Mapping[str, np.ndarray], context_len: int) -> dict[str, np.ndarray]:
  """Keeps only the last `context_len` history slots (the Figure 6 sweep); L = 0 drops all."""
  out = dict(arrays)
  length = arrays["history"].shape[1]
  keep = slice(length - context_len, length) if context_len else slice(length, length)
  out["history"] = arrays["history"][:, keep]
  out["history_mask"] = arrays["history_mask"][:, keep]
  return out
