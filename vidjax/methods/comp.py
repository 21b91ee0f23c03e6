"""VideoComp as a method (../shared/papers/videocomp.txt): its data, examples, fits, evaluation and `suite`.

`vidjax/experiments/comp.py` runs these in order (validate -> data -> fit -> evaluate -> write):

  data      `load(config, workdir)`: the dataset's dense captions through their readers (ActivityNet Captions, or
            YouCook2; or official VideoComp release files), the Comp triplets built from them
            (`vidjax.data.comp.build_comp`) and a feature store of per-frame tokens, as `CompData`. A world's
            files are read the same way: `write_world` writes the embedded SYNTHETIC moving-object world as a user
            has their data (`vidjax.worlds.moving_objects.write_comp`), once, under `<workdir>/world`;
  fit       `Prepared(config, data)` (the VidCLIP, its tokenizer, every training's examples and the evaluation
            set), then `fit`: pretraining `base` (stack size 1, contrastive) and `comppretrain` (stacks of
            `pretrain.stack` clips, L_con + lambda L_pref), then each fine-tuning of `finetunes` (Table 2's, and
            those of `config.ablations` unless the test split is too small to read them: `fit_rows`);
  evaluate  `evaluate_model`: binary accuracy per disruption type and the comprehensive product, R@1 both ways on
            the positive pairs, and the hierarchy score (`metrics.hierarchy_accuracy`); `tables` (Tables 5 and 6).

Each example is a video given as rows into the frozen features (`video_rows [T]`, `frame_rows [T]`: a span of one
video, or k stacked clips of several) plus its texts. `suite(config, workdir)` gives a finished run's models and
benchmarks to `vidjax.experiments.evaluate_all`.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from vidjax import evaluate, io, metrics, train
from vidjax.data import comp, pipeline
from vidjax.data.annotations import read_activitynet_captions, read_youcook2
from vidjax.data.features import FeatureStore
from vidjax.defaults.common import bad_value, clip_to_data, fit_tables, steps_in_passes, with_values
from vidjax.data import provenance
from vidjax.methods.vidclip import Encoder, Examples, TextTable, text_tokenizer, train_model, vidclip_setup
from vidjax.worlds import moving_objects

# What results.json reports: the methods (rows) and the metrics (columns) of Tables 2-4.
METHODS = ("zero_shot", "contrastive", "negclip", "comploss", "negclip_pref", "comppretrain_comploss",
           "comppretrain_negclip_pref")
METRICS = ("temp_reorder", "action_replace", "seg_mismatch", "all", "t2v_r1", "v2t_r1", "hierarchy")
TABLE5 = (*METRICS[:4], "hierarchy")  # the columns of Table 5 (the CompPretrain stack size)
# Fine-tuning runs: (method, loss mode, initial model).
FINETUNES = (("contrastive", "contrastive", "base"), ("negclip", "negclip", "base"), ("comploss", "comploss", "base"),
             ("negclip_pref", "negclip_pref", "base"), ("comppretrain_comploss", "comploss", "comppretrain"),
             ("comppretrain_negclip_pref", "negclip_pref", "comppretrain"))
PRETRAINS = ("base", "comppretrain")
# The fine-tunings each `config.ablations` entry adds to Table 2's (contrastive, comploss, comppretrain_comploss).
ABLATIONS = {"negclip": ("negclip",), "negclip_pref": ("negclip_pref", "comppretrain_negclip_pref")}


# ----------------------------------------------------------------------------------------------
# Data.


def write_world(config, root: Path) -> dict[str, str]:
  """The embedded SYNTHETIC moving-object world of `config.world` (seed `config.seed`) written under `root` as
  `config.dataset`'s release files, its lexicon and a token store (`moving_objects.write_comp`); returns their
  `data.*` keys (`vidjax.experiments.common.world_data`)."""
  world = moving_objects.make_moving_object_world(moving_objects.world_config_from(config.world), seed=config.seed)
  return moving_objects.write_comp(world, root, seed=config.seed, world_fields=config.world, dataset=config.dataset)


@dataclasses.dataclass
class CompData:
  """Everything the runs read: frozen features, the triplets and the pretraining clips.

  Attributes:
    synthetic: the store says its features are SYNTHETIC (a world's, or the rendered corpus's).
    video_ids: rows of the features; durations: seconds per row.
    gather: (video_rows [B, T], frame_rows [B, T]) -> float32 [B, T, N, D].
    num_frames: stored frames per video.
    train, eval: Comp triplets (both with multi: the evaluation's only for the hierarchy score); clips: pretraining
      (video id, span, caption) short clips.
    counts: Table-1-shaped counts of the triplets the run uses, per split (`used_counts`).
    rewriter: joins captions into paragraphs (CompPretrain uses it too).
    path: results.json's `path`, `provenance` and `skipped_videos` (`vidjax.methods.provenance.real_path`).
    tokens: the features of every row in memory, float32 [V, T, N, D], when they fit the memory budget (training
      then gathers them on the device: `vidjax.methods.vidclip.train_model`); None: `gather` streams them.
    description: what the features are, for the printed tables; note: results.json's `note` (the store's).
  """
  synthetic: bool
  video_ids: list[str]
  durations: np.ndarray
  gather: Callable[[np.ndarray, np.ndarray], np.ndarray]
  num_frames: int
  train: list[comp.CompTriplet]
  eval: list[comp.CompTriplet]
  clips: list[tuple[str, tuple[float, float], str]]
  counts: list[dict]
  rewriter: Any
  path: dict
  tokens: np.ndarray | None = None
  description: str = ""
  note: str = ""


def _clips(videos: Sequence[comp.EventVideo], drop_global: bool, iou_threshold: float):
  return [(v.video_id, (s, e), text) for v in videos
          for s, e, text in comp.positive_events(v, drop_global=drop_global, iou_threshold=iou_threshold)]


def _events(config) -> dict[str, list[comp.EventVideo]]:
  d = config.data
  if config.dataset == "activitynet":
    out = {"eval": comp.events_from_activitynet(read_activitynet_captions(d.annotations))}
    if d.train_annotations:
      out["train"] = comp.events_from_activitynet(read_activitynet_captions(d.train_annotations))
    return out
  out = {"eval": comp.events_from_youcook2(read_youcook2(d.annotations, d.eval_split))}
  out["train"] = comp.events_from_youcook2(read_youcook2(d.annotations, "train"))
  return out


def rewriter(config) -> comp.TemplateRewriter:
  """The benchmark's rewriter: the lexicon of `data.lexicon` (or the shipped one) and `benchmark.connectives`."""
  lexicon = comp.load_lexicon(config.data.lexicon) if config.data.lexicon else None
  return comp.TemplateRewriter(lexicon, connectives=config.benchmark.connectives)


def load(config, workdir: Path) -> CompData:
  """The run's data from its files: `data.annotations` (and `data.train_annotations`) or the release files
  (`data.release_eval` / `data.release_train`), and the per-frame tokens of `data.features`."""
  d, b = config.data, config.benchmark
  if not d.annotations and not d.release_eval:
    bad_value("data.annotations", "", "the dataset's annotation file (or data.release_eval) with data.features")
  events = _events(config) if d.annotations else {}
  rewrite = rewriter(config)
  counts, built = [], {}
  for split, videos in events.items():
    triplets, c = comp.build_comp(videos, split=split, types=comp.TRAIN_TYPES, seed=config.seed,
                                  drop_global=b.drop_global, iou_threshold=b.iou_threshold,
                                  min_overlap=b.min_overlap, name=f"{config.dataset}-comp", rewriter=rewrite)
    built[split] = triplets
    counts.append(c)
  if d.release_eval:
    built["eval"] = comp.read_release(d.release_eval)
  if d.release_train:
    built["train"] = comp.read_release(d.release_train)
  for split, triplets in built.items():
    absent = sorted(set(comp.EVAL_TYPES) - {t.type for t in triplets})
    if split == "eval" and absent:
      raise ValueError(f"the {config.dataset} evaluation triplets have no {absent} entries (VideoComp evaluates all of "
                       f"{comp.EVAL_TYPES}); action_replace needs words of the lexicon (data.lexicon="
                       f"{d.lexicon or 'the shipped one'!r}) in the captions, or give a release file (data.release_eval)")
  if not built.get("train"):
    bad_value("data.train_annotations", d.train_annotations,
              "the training split's annotation file (or data.release_train) to fine-tune on")
  durations = {v.video_id: v.duration for vs in events.values() for v in vs}
  for t in built["train"] + built["eval"]:
    durations.setdefault(t.video_id, t.original[1])
  store = FeatureStore(d.features)
  provenance.check_store(workdir, store, [d.tokens_kind])
  ids, skipped = provenance.present_videos(config, store, [d.tokens_kind], sorted(durations), "benchmark videos")
  keep = set(ids)
  built = {split: [t for t in triplets if t.video_id in keep] for split, triplets in built.items()}
  events = {split: [v for v in videos if v.video_id in keep] for split, videos in events.items()}
  counts = used_counts(built, events, {c["split"]: c for c in counts}, released={
      split for split, path in (("eval", d.release_eval), ("train", d.release_train)) if path})
  shape = store.item_shape(d.tokens_kind)
  if len(shape) not in (2, 3):
    raise ValueError(f"feature store {d.features}: kind {d.tokens_kind!r} has items of shape {shape}; expected "
                     "per-frame tokens [T, N, D] or per-frame embeddings [T, D]")

  item = shape if len(shape) == 3 else (shape[0], 1, shape[1])
  table = pipeline.FeatureTable(store, d.tokens_kind, ids)
  # `ids` are sorted and distinct, as the table's rows are: then its rows without the padding row, not a copy.
  rows = slice(len(ids)) if table.ids == list(ids) else table.rows(ids)
  tokens = table.padded()[rows].reshape(len(ids), *item) if table.in_memory else None

  def gather(vr, fr):  # a row of vr may name several videos (CompPretrain stacks): read each once
    vr, fr = np.asarray(vr), np.asarray(fr)
    out = np.empty(vr.shape + item[1:], np.float32)
    for b in range(len(vr)):
      for r in np.unique(vr[b]):
        sel = vr[b] == r
        out[b, sel] = store.get_one(d.tokens_kind, ids[r]).reshape(item)[fr[b, sel]]
    return out

  clips = _clips(events.get("train", []), b.drop_global, b.iou_threshold) or [
      (t.video_id, t.positive_span, t.positive) for t in built["train"]]
  synthetic = bool(store.metadata.get("synthetic", False))
  description = store.metadata.get("description") or (
      f"{config.dataset}, SYNTHETIC rendered videos" if synthetic else config.dataset)
  return CompData(synthetic, ids, np.array([durations[v] for v in ids]),
                  gather if tokens is None else lambda vr, fr: tokens[vr, fr], shape[0], built["train"], built["eval"],
                  clips, counts, rewrite, provenance.real_path(workdir, store, skipped), tokens, description,
                  store.metadata.get("note", ""))


def limits(config, data: CompData) -> dict[str, tuple[int, str]]:
  """What must fit the data (`clip_to_data`): each pretraining batch at most the training clips (one example per
  clip, `pretrain_examples`), the fine-tuning batch at most its training groups (`finetune_examples`)."""
  groups = len(comp.training_groups(data.train, tuple(config.finetune.hierarchy)))
  out = {"pretrain.batch_size": (len(data.clips), f"the {len(data.clips)} training clips, one pretraining example "
                                                  "each"),
         "finetune.batch_size": (groups, f"the {groups} fine-tuning groups (a training video input with its "
                                         "positive and hard negatives)")}
  for section, n, what in (("pretrain", len(data.clips), "training clips"), ("finetune", groups, "fine-tuning groups")):
    out.update(steps_in_passes(config, section, n, what, "the paper's budget in passes over its own data"))
  return out


def used_counts(built: dict[str, list], events: dict[str, list], made: dict[str, dict], released: set[str]) -> list:
  """Table-1-shaped counts of the triplets the run uses (`built`: per split, after the videos without features
  are left out), not of everything the annotation files could give: per split its videos, triplets per type, total,
  and, for a split built from the annotations (`made`: `comp.build_comp`'s counts), what the builder dropped;
  `released`: the splits read from a release file."""
  out = []
  for split, triplets in built.items():
    from_files = split in released or split not in made
    videos = len({t.video_id for t in triplets}) if from_files else len(events.get(split, []))
    out.append({"split": split, "source": "release file" if from_files else "annotations",
                "videos": videos, **{t: sum(x.type == t for x in triplets) for t in comp.TRAIN_TYPES},
                "total": len(triplets), "dropped_validation": {} if from_files else made[split]["dropped_validation"],
                "skipped": {} if from_files else made[split]["skipped"]})
  return out


def write_benchmark(config, workdir: Path, data: CompData) -> None:
  """The run's Comp triplets in the release format (`<workdir>/benchmark/`) and their Table-1 counts. The
  evaluation's multi triplets (the hierarchy score's top level) go to their own file, `<name>_eval_multi.json`, so
  `<name>_eval.json` holds the benchmark's three types."""
  files = (("train", data.train), ("eval", [t for t in data.eval if t.type != "multi"]),
           ("eval_multi", [t for t in data.eval if t.type == "multi"]))
  for split, triplets in files:
    if not triplets and split == "eval_multi":  # release files have none
      continue
    comp.write_release(workdir / "benchmark" / f"{config.name}_{split}.json", triplets)
  if data.counts:
    io.atomic_write_json(workdir / "benchmark" / "counts.json", data.counts)
    print(("SYNTHETIC " if data.synthetic else "") + f"{config.name} benchmark (Table 1 shape): the triplets this run "
          f"uses, of its {len(data.video_ids)} videos with features\n"
          + comp.format_counts([dict(c, split=f"{c['split']} ({c['source']})") for c in data.counts]), flush=True)


# ----------------------------------------------------------------------------------------------
# Examples: video rows + texts.


def span_rows(data: CompData, row: dict, video_id: str, span, frames: int) -> tuple[np.ndarray, np.ndarray]:
  r = row[video_id]
  return np.full(frames, r), comp.span_frames(data.num_frames, float(data.durations[r]), span, frames)


def finetune_examples(data: CompData, hierarchy, frames: int, texts: TextTable) -> Examples:
  row = {v: i for i, v in enumerate(data.video_ids)}
  groups = comp.training_groups(data.train, tuple(hierarchy))
  vr, fr = zip(*(span_rows(data, row, g.video_id, g.span, frames) for g in groups))
  return Examples(np.stack(vr), np.stack(fr), np.array([texts(g.positive) for g in groups]),
                  np.array([[texts(n) for n in g.negatives] for g in groups]).reshape(len(groups), len(hierarchy)))


def pretrain_examples(data: CompData, stack: int, hierarchy, frames: int, texts: TextTable, seed: int) -> Examples:
  """Stack size 1: each clip alone (no negatives); k > 1: as many stacks of k random clips as there are clips."""
  row = {v: i for i, v in enumerate(data.video_ids)}
  rng = np.random.default_rng([seed, 0xC0DE, stack])
  per = frames // stack
  vrs, frs, pos, negs = [], [], [], []
  n = len(data.clips)
  for i in range(n):
    chosen = [data.clips[i]] if stack == 1 else [data.clips[j] for j in rng.choice(n, stack, replace=False)]
    parts = [span_rows(data, row, vid, span, per) for vid, span, _ in chosen]
    vrs.append(np.concatenate([p[0] for p in parts]))
    frs.append(np.concatenate([p[1] for p in parts]))
    positive, reordered, partial = comp.stacked_example(chosen, rng, data.rewriter)
    pos.append(texts(positive))
    by_kind = {"reorder": reordered, "partial": partial}
    negs.append([texts(by_kind[k]) for k in hierarchy] if stack > 1 else [])
  return Examples(np.stack(vrs), np.stack(frs), np.array(pos), np.array(negs, np.int64).reshape(n, -1))


# ----------------------------------------------------------------------------------------------
# Evaluation set.


@dataclasses.dataclass
class EvalSet:
  """The evaluation triplets as rows: per type the video input row and the two text rows; the positives; the
  hierarchy rows (one per video input: its positive, then one text per type of `levels`, -1 = none) and the test
  video each comes from (the hierarchy score's group: a full video and its seg-mismatch crop are one)."""
  video_rows: np.ndarray
  frame_rows: np.ndarray
  by_type: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # type -> (video idx, pos text, neg text)
  pairs: tuple[np.ndarray, np.ndarray]                           # (video idx, text idx) of the positive pairs
  hierarchy: tuple[np.ndarray, np.ndarray]                       # (video idx [G], text idx [G, 1 + H])
  levels: np.ndarray                                             # [1 + H] disruption levels, the positive's 0
  hierarchy_videos: np.ndarray                                   # [G] source test video (row of data.video_ids)


def eval_set(data: CompData, frames: int, texts: TextTable, levels: dict[str, int]) -> EvalSet:
  """`levels`: {type: disruption level} of the hierarchy score (`finetune.hierarchy` and `finetune.levels`)."""
  row = {v: i for i, v in enumerate(data.video_ids)}
  inputs: dict[tuple, int] = {}
  vrs, frs = [], []
  by_type: dict[str, list] = {t: [] for t in comp.EVAL_TYPES}
  pairs = {}
  for t in data.eval:
    key = (t.video_id, t.video_span)
    if key not in inputs:
      inputs[key] = len(inputs)
      vr, fr = span_rows(data, row, t.video_id, t.video_span, frames)
      vrs.append(vr)
      frs.append(fr)
    if t.type not in by_type:  # multi: the hierarchy score only
      continue
    by_type[t.type].append((inputs[key], texts(t.positive), texts(t.negative)))
    if t.type != "seg_mismatch":  # the full video and its paragraph (§3.4: positive pairs only)
      pairs.setdefault(t.video_id, (inputs[key], texts(t.positive)))
  missing = [t for t, rows in by_type.items() if not rows]
  if missing:
    raise ValueError(f"the evaluation triplets have no {missing} entries; VideoComp evaluates all of {comp.EVAL_TYPES}")
  pv, pt = zip(*pairs.values())
  groups = comp.training_groups(data.eval, tuple(levels))  # the eval triplets grouped by video input as eq. 2's
  text_rows = [[texts(g.positive), *(texts(n) for n in g.negatives)] for g in groups]
  hierarchy = (np.array([inputs[(g.video_id, g.span)] for g in groups]), np.array(text_rows).reshape(len(groups), -1))
  return EvalSet(np.stack(vrs), np.stack(frs), {t: tuple(np.array(c) for c in zip(*rows)) for t, rows in by_type.items()},
                 (np.array(pv), np.array(pt)), hierarchy, np.array([0, *levels.values()]),
                 np.array([row[g.video_id] for g in groups]))


# ----------------------------------------------------------------------------------------------
# Fit.


class Prepared:
  """What the fits and the evaluation read, built from `data` in one fixed order (text rows are numbered in it): the
  VidCLIP and its tokenizer, every pretraining's and the fine-tunings' examples with their text tokens, and the
  evaluation set with its own text table (evaluation encodes only the evaluation paragraphs)."""

  def __init__(self, config, data: CompData):
    mc, ptc, ftc = config.model, config.pretrain, config.finetune
    texts = TextTable()
    self.pretrain = {"base": pretrain_examples(data, 1, ptc.hierarchy, mc.frames, texts, config.seed),
                     "comppretrain": pretrain_examples(data, ptc.stack, ptc.hierarchy, mc.frames, texts, config.seed)}
    self.finetune = finetune_examples(data, ftc.hierarchy, mc.frames, texts)
    self.eval_texts = TextTable()
    self.es = eval_set(data, mc.frames, self.eval_texts, dict(zip(ftc.hierarchy, ftc.levels)))
    # The run's text length: at most its longest text (`text_length`), recorded in `clipped` (`self.config`).
    tokenizer = text_tokenizer(mc)
    self.config, self.clipped = text_length(config, list(texts.rows) + list(self.eval_texts.rows), tokenizer)
    mc = self.config.model
    visual = data.gather(np.zeros((1, 1), np.int64), np.zeros((1, 1), np.int64)).shape
    self.model, self.tokenizer, self.fresh = vidclip_setup(mc, visual[-1], visual[-2], tokenizer)
    self.tokens = texts.tokens(self.tokenizer, mc.max_text_len)
    self.eval_tokens = self.eval_texts.tokens(self.tokenizer, mc.max_text_len)


def text_length(config, texts: Sequence[str], tokenizer=None):
  """(config, clipped): `model.max_text_len` at most the longest of the run's `texts` in tokens (with [CLS] and
  [SEP]), so no text is cut that was not cut before and no step pads past its longest text. With the MiniLM text
  tower (`model.init="minilm"`) its position table is MiniLM's 512 rows whatever the length and padding is masked,
  so the fit changes no embedding (a shorter batch: fewer FLOPs and less memory; `strict` does not refuse it). The
  random and LvT towers keep the configured length (the random tower's position table is that long). `tokenizer`:
  the text tower's (`vidclip.text_tokenizer`), when the caller has it already."""
  mc = config.model
  if mc.init != "minilm" or not texts:
    return config, {}
  longest = pipeline.longest_tokens(tokenizer if tokenizer is not None else text_tokenizer(mc), texts,
                                    mc.max_text_len)
  return clip_to_data(config, {"model.max_text_len": (longest, f"the run's longest text is {longest} tokens with "
                                                               "[CLS] and [SEP]", 3)}, exact=("model.max_text_len",))


PREF_ORDERS = ("paper", "levels")  # the readings of eq. 2's order (configs/comp/common.py)


def pref_levels(section) -> tuple[int, ...]:
  """The disruption level of each column of a train section's `hierarchy` that eq. 2 (§3.2) hinges by
  (`losses.comp_preference_loss`: pairs i, j with level_i < level_j): with `pref_order="paper"` each column its own
  level, 0..N-1, so EVERY pair i < j of the hierarchy is hinged as eq. 2's second sum writes (temp-reorder above
  action-replace included); with "levels" the section's `levels` (vidjax's earlier reading: hinges only across
  levels)."""
  if section.pref_order not in PREF_ORDERS:
    bad_value("pref_order", section.pref_order, f"one of {PREF_ORDERS}")
  return tuple(range(len(section.hierarchy))) if section.pref_order == "paper" else tuple(section.levels)


def eq2_pairs(section) -> list[list[str]]:
  """[[less disrupted, more disrupted], ...]: the pairs of negatives whose order eq. 2's second sum trains in a
  train section (results.json `eq2_pairs`); the first sum's (every negative below the positive) are always there."""
  h, lv = list(section.hierarchy), pref_levels(section)
  return [[h[i], h[j]] for i in range(len(h)) for j in range(len(h)) if lv[i] < lv[j]]


def training_section(section):
  """The train section as the loop reads it: `levels` set to eq. 2's levels of its reading (`pref_levels`)."""
  return with_values(section, {"levels": pref_levels(section)})


def finetunes(config) -> tuple[tuple[str, str, str], ...]:
  """The fine-tunings of `FINETUNES` a run trains: Table 2's and those `config.ablations` adds (`ABLATIONS`)."""
  optional = {m for ms in ABLATIONS.values() for m in ms}
  asked = {m for a in config.ablations for m in ABLATIONS[a]}
  return tuple(f for f in FINETUNES if f[0] not in optional or f[0] in asked)


def methods(config) -> tuple[str, ...]:
  """The rows of `METHODS` a run reports: zero-shot and its fine-tunings (`finetunes`)."""
  trained = {m for m, _, _ in finetunes(config)}
  return tuple(m for m in METHODS if m == "zero_shot" or m in trained)


def fit_rows(config, p: Prepared, say: bool = True):
  """`config.ablations` left out on fewer test videos (the positive pairs R@1 ranks) than `table_min_queries`
  (`vidjax.defaults.common.fit_tables`): (config, clipped)."""
  return fit_tables(config, len(p.es.pairs[0]), {"ablations": ()}, say)


def fit(config, workdir: Path, data: CompData, p: Prepared) -> dict[str, Any]:
  """Trains (or, from `workdir`'s checkpoints, resumes) the pretrainings, then each fine-tuning of `finetunes`,
  each through the one loop in `<workdir>/models/<name>/`, with eq. 2 in each section's reading
  (`training_section`); returns the pretrainings' host params {name: params}. A fine-tuning's params stay in its
  checkpoint (`load_model`): evaluation reads them one model at a time, so the run holds two models' params, not
  eight (BENCHMARKS.md, "Small corpora": resident memory)."""
  ptc, ftc = training_section(config.pretrain), training_section(config.finetune)
  params = {}
  for name, ex in p.pretrain.items():
    params[name] = train_model(name, p.model, p.fresh, ex, data, p.tokens, ptc,
                               "contrastive" if name == "base" else "comploss", config.seed, workdir,
                               video_lr=ptc.video_lr)
  for method, mode, start in finetunes(config):
    train_model(method, p.model, lambda rng, s=start: params[s], p.finetune, data, p.tokens, ftc, mode, config.seed,
                workdir, video_lr=ftc.video_lr)
  return params


def load_model(workdir: Path, name: str) -> Any:
  """A finished training's final params (`<workdir>/models/<name>`; nothing trains)."""
  return train.load_params(Path(workdir) / "models" / name)


# ----------------------------------------------------------------------------------------------
# Evaluation.


def evaluate_model(enc: Encoder, params, es: EvalSet, tokens) -> dict[str, float]:
  """Binary accuracies, comprehensive score, R@1 both ways and the hierarchy score of one VidCLIP."""
  v = enc.videos(params, es.video_rows, es.frame_rows)
  t = enc.texts(params, tokens)
  inputs = {kind: {"video": v[vi], "candidates": np.stack([t[pi], t[ni]], axis=1)}
            for kind, (vi, pi, ni) in es.by_type.items()}
  out = evaluate.evaluate_comp(evaluate.CosineScorer("video"), inputs, enc.chunk)
  pv, pt = es.pairs
  # Paragraph-to-video over the positive pairs; videos are unique per pair.
  r = metrics.two_way_retrieval_metrics(t[pt] @ v[pv].T, np.arange(len(pv)))
  hv, ht = es.hierarchy
  sims = np.einsum("gd,gkd->gk", v[hv], t[np.maximum(ht, 0)])
  # Each pair on its own input; a test video's inputs (full video, seg-mismatch crop) pool into one share.
  hierarchy = metrics.hierarchy_accuracy(sims, es.levels, ht >= 0, es.hierarchy_videos)["acc"]
  return {**out, "t2v_r1": r["t2v_r1"], "v2t_r1": r["v2t_r1"], "hierarchy": hierarchy}


def tables(scores: dict[str, dict], stack: int) -> dict[str, dict]:
  """Table 5 (the CompPretrain stack size: zero-shot and each CompLoss from stack 1 and stack `stack`) and Table 6
  (zero-shot retrieval after each pretraining) from the scores of every method and of `comppretrain` itself."""
  rows = {"zero_shot": ("zero_shot", "comppretrain"), "comploss": ("comploss", "comppretrain_comploss"),
          "negclip_pref": ("negclip_pref", "comppretrain_negclip_pref")}
  return {
      "pretraining_ablation": {f"{name}_stack{k}": {m: scores[method][m] for m in TABLE5}
                               for name, pair in rows.items() if all(m in scores for m in pair)
                               for k, method in zip((1, stack), pair)},
      "zero_shot_retrieval": {"vidclip_base": {k: scores["zero_shot"][k] for k in ("t2v_r1", "v2t_r1")},
                              "comppretrain": {k: scores["comppretrain"][k] for k in ("t2v_r1", "v2t_r1")}},
  }


# ----------------------------------------------------------------------------------------------
# The finished run's models and benchmarks (`vidjax.experiments.evaluate_all`).


def suite(config, workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """Every method as a dual encoder on the Comp benchmark and on paragraph-to-video R@K over its positive
  pairs (`configs/evaluate_all.py`), each read from the run's final checkpoint. Videos are keyed by
  evaluation-input row, texts by paragraph: keys of this run alone (the benchmarks' and the models' `keys` are
  left to evaluate_all, which names them by the run), so another run's benchmark on the same store is not read."""
  workdir = Path(workdir)
  data = load(config, workdir)
  p = Prepared(config, data)
  config, _ = fit_rows(config, p, say=False)
  names = methods(config)
  params = {m: load_model(workdir, "base" if m == "zero_shot" else m) for m in names}
  enc = Encoder(p.model, data, config.eval.chunk)
  space = f"the feature store {config.data.features}"

  def encoders(params):
    texts = lambda strings: enc.strings(params, strings, p.tokenizer, config.model.max_text_len)  # noqa: E731
    return texts, lambda rows: enc.videos(params, p.es.video_rows[list(rows)], p.es.frame_rows[list(rows)])

  rows = range(len(p.es.video_rows))  # the video keys the encoders have; texts: any paragraph (a text tower)
  models = [evaluate.dual_encoder(m, space, *encoders(params[m]), chunk=config.eval.chunk, videos=rows)
            for m in names]
  paragraph = {row: text for text, row in p.eval_texts.rows.items()}
  by_type = {k: ([int(x) for x in v], [paragraph[int(x)] for x in pos], [paragraph[int(x)] for x in neg])
             for k, (v, pos, neg) in p.es.by_type.items()}
  pv, pt = p.es.pairs
  gallery = ([paragraph[int(x)] for x in pt], [int(x) for x in pv], np.arange(len(pv)))
  return models, [evaluate.Benchmark(f"Comp ({config.name})", "comp", space, by_type, data.synthetic),
                  evaluate.Benchmark(f"R@K ({config.name})", "gallery", space, gallery, data.synthetic)]
