"""VideoComp: build the Comp benchmarks, pretrain and fine-tune VidCLIP, evaluate compositionality.

`run(config, workdir)`:
  1. data: the dataset's dense captions through their readers (or official release files) and a feature
     store of per-frame tokens, or, with the `world` variant, the embedded SYNTHETIC
     moving-object world with four events per video; the training and evaluation triplets are built
     with `vidjax.data.comp.build_comp` and written to `<workdir>/benchmark/` (release format + counts);
  2. pretraining (§3.3, §4.1) on short clips: `base` (stack size 1, contrastive: VidCLIP-base) and
     `comppretrain` (stacks of `pretrain.stack` clips with reordered and partial negatives, L_con + λ·L_pref);
  3. fine-tuning on the Comp training triplets (§4.2) from `base` with the contrastive loss, NegCLIP, CompLoss
     (eq. 2 on L_con) and CompLoss extending NegCLIP (`negclip_pref`: eq. 2 on NegCLIP's L_con), and from
     `comppretrain` with each CompLoss (`FINETUNES`);
  4. evaluation (§3.4): binary accuracy per disruption type and the comprehensive product
     (`evaluate.evaluate_comp`), R@1 both ways on the positive pairs, and the hierarchy score: per test video,
     the share of its text pairs at different disruption levels (the positive 0, then `finetune.levels`: the single
     disruptions 1, multi 2; the evaluation split is built with multi for this) that the model orders, each pair
     scored on its own video input (the full video, or its seg-mismatch crop) and every pair of a video's inputs
     pooled into that video's share, then averaged over test videos (`metrics.hierarchy_accuracy`);
  5. `<workdir>/results.json`: methods `METHODS` (`zero_shot`, `contrastive`, `negclip`, `comploss`,
     `negclip_pref`, `comppretrain_comploss`, `comppretrain_negclip_pref`) x `temp_reorder`, `action_replace`,
     `seg_mismatch`, `all`, `t2v_r1`, `v2t_r1`, `hierarchy`; "tables" holds Table 5 (pretraining ablation) and
     Table 6 (zero-shot retrieval) rows.

Every training runs through the one loop (`vidjax.train.fit`) in `<workdir>/models/<name>/`, so a killed
run resumes. Each example is a video given as rows into the frozen features (`video_rows [T]`,
`frame_rows [T]`: a span of one video, or k stacked clips of several) plus its texts.
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
from vidjax.defaults.comp import METHODS, METRICS
from vidjax.experiments import common
from vidjax.methods.vidclip import (Encoder, Examples, TextTable, check_text_tower, train_model, vidclip_setup)
from vidjax.models import vidclip as V
from vidjax.worlds import moving_objects

RESUMABLE = ()  # the rule of `common.is_resumable` covers the logging and evaluation keys
# Fine-tuning runs: (method, loss mode, initial model).
FINETUNES = (("contrastive", "contrastive", "base"), ("negclip", "negclip", "base"), ("comploss", "comploss", "base"),
             ("negclip_pref", "negclip_pref", "base"), ("comppretrain_comploss", "comploss", "comppretrain"),
             ("comppretrain_negclip_pref", "negclip_pref", "comppretrain"))


# ----------------------------------------------------------------------------------------------
# Config checks.


def validate(config) -> None:
  common.check_choice(config, "dataset", ("activitynet", "youcook2"))
  common.check_data_source(config, bool(config.data.features), f"configs/comp_{config.dataset}.py")
  common.check_positive_int(config, [f"model.{k}" for k in (
      "frames", "width", "pool_queries", "pool_heads", "pool_mlp", "embed_dim", "text_hidden", "text_layers",
      "text_heads", "text_mlp", "max_text_len")])
  check_text_tower(config, "model")
  common.compute_dtype(config, "model.dtype")
  common.check_fraction(config, "model.init_temperature")
  common.check_choice(config, "model.pool_init", ("mean", "random"))
  for section in ("pretrain", "finetune"):
    common.check_positive_int(config, [f"{section}.{k}" for k in ("batch_size", "steps", "checkpoint_every",
                                                                  "log_every")])
    common.check_positive(config, [f"{section}.lr", f"{section}.video_lr", f"{section}.lam"])
    tc = common.get_key(config, section)
    if tc.weight_decay < 0 or tc.warmup_steps < 0:
      common.bad_value(f"{section}.weight_decay", (tc.weight_decay, tc.warmup_steps), "weight decay and warm-up >= 0")
  for section in ("pretrain",):
    common.check_positive_int(config, [f"{section}.stack"])
    if tuple(common.get_key(config, f"{section}.hierarchy")) not in (("reorder", "partial"), ("partial", "reorder")):
      common.bad_value(f"{section}.hierarchy", common.get_key(config, f"{section}.hierarchy"),
                       "an order of ('reorder', 'partial')")
  for section in ("finetune",):
    h = tuple(common.get_key(config, f"{section}.hierarchy"))
    if not h or len(set(h)) != len(h) or not set(h) <= set(comp.TRAIN_TYPES):
      common.bad_value(f"{section}.hierarchy", h, f"distinct types of {comp.TRAIN_TYPES}, less disrupted first")
  for section in ("pretrain", "finetune"):
    levels, h = tuple(common.get_key(config, f"{section}.levels")), common.get_key(config, f"{section}.hierarchy")
    if len(levels) != len(h) or list(levels) != sorted(levels):
      common.bad_value(f"{section}.levels", levels, f"one non-decreasing disruption level per entry of {section}.hierarchy")
  if config.model.frames % config.pretrain.stack:
    common.bad_value("model.frames", config.model.frames, "a multiple of the CompPretrain stack size")
  common.check_positive_int(config, ["eval.chunk"])
  if config.data.features:
    if not config.data.annotations and not config.data.release_eval:
      common.bad_value("data.annotations", "", "the dataset's annotation file (or data.release_eval) with data.features")


# ----------------------------------------------------------------------------------------------
# Data.


@dataclasses.dataclass
class CompData:
  """Everything the runs read: frozen features, the triplets and the pretraining clips.

  Attributes:
    synthetic: the embedded world.
    video_ids: rows of the features; durations: seconds per row.
    gather: (video_rows [B, T], frame_rows [B, T]) -> float32 [B, T, N, D].
    num_frames: stored frames per video.
    train, eval: Comp triplets (both with multi: the evaluation's only for the hierarchy score); clips: pretraining
      (video id, span, caption) short clips.
    counts: Table-1-shaped counts of the built splits ([] for release files).
    rewriter: joins captions into paragraphs (CompPretrain uses it too).
    tokens: the features of every row in memory, float32 [V, T, N, D], when they fit the memory budget (training
      then gathers them on the device: `vidjax.methods.vidclip.train_model`); None: `gather` streams them.
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
  path: dict = dataclasses.field(default_factory=lambda: dict(common.WORLD_PATH))  # results.json's path keys
  tokens: np.ndarray | None = None


def _clips(videos: Sequence[comp.EventVideo], drop_global: bool, iou_threshold: float):
  return [(v.video_id, (s, e), text) for v in videos
          for s, e, text in comp.positive_events(v, drop_global=drop_global, iou_threshold=iou_threshold)]


def world_data(config) -> CompData:
  world = moving_objects.make_moving_object_world(moving_objects.world_config_from(config.world), seed=config.seed)
  rewriter = comp.TemplateRewriter(moving_objects.COMP_LEXICON, connectives=False)
  splits = {s: moving_objects.comp_events(world, s) for s in ("train", "test")}
  b = config.benchmark
  built = {s: comp.build_comp(v, split=s, types=comp.TRAIN_TYPES, seed=config.seed, drop_global=False,
                              rewriter=rewriter, iou_threshold=b.iou_threshold, min_overlap=b.min_overlap,
                              name="world-comp") for s, v in splits.items()}
  ids = world.ids()
  tokens = moving_objects.motion_tokens(world, config.seed, world.config.noise)
  return CompData(True, ids, np.full(len(ids), float(world.config.frames)),
                  lambda vr, fr: tokens[vr, fr], world.config.frames, built["train"][0], built["test"][0],
                  _clips(splits["train"], False, 1.0), [built["train"][1], built["test"][1]], rewriter, tokens=tokens)


def _real_events(config) -> dict[str, list[comp.EventVideo]]:
  d = config.data
  if config.dataset == "activitynet":
    out = {"eval": comp.events_from_activitynet(read_activitynet_captions(d.annotations))}
    if d.train_annotations:
      out["train"] = comp.events_from_activitynet(read_activitynet_captions(d.train_annotations))
    return out
  out = {"eval": comp.events_from_youcook2(read_youcook2(d.annotations, d.eval_split))}
  out["train"] = comp.events_from_youcook2(read_youcook2(d.annotations, "train"))
  return out


def real_data(config, workdir: Path) -> CompData:
  d, b = config.data, config.benchmark
  events = _real_events(config) if d.annotations else {}
  counts, built = [], {}
  for split, videos in events.items():
    triplets, c = comp.build_comp(videos, split=split, types=comp.TRAIN_TYPES, seed=config.seed,
                                  drop_global=b.drop_global,
                                  iou_threshold=b.iou_threshold, min_overlap=b.min_overlap, name=f"{config.dataset}-comp",
                                  rewriter=comp.TemplateRewriter(comp.load_lexicon(b.lexicon)) if b.lexicon else None)
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
                       f"{comp.EVAL_TYPES}); action_replace needs words of the lexicon (benchmark.lexicon="
                       f"{b.lexicon or 'the shipped one'!r}) in the captions, or give a release file (data.release_eval)")
  if not built.get("train"):
    common.bad_value("data.train_annotations", d.train_annotations,
                     "the training split's annotation file (or data.release_train) to fine-tune on")
  durations = {v.video_id: v.duration for vs in events.values() for v in vs}
  for t in built["train"] + built["eval"]:
    durations.setdefault(t.video_id, t.original[1])
  store = FeatureStore(d.features)
  common.check_store(workdir, store, [d.tokens_kind])
  ids, skipped = common.present_videos(config, store, [d.tokens_kind], sorted(durations), "benchmark videos")
  keep = set(ids)
  built = {split: [t for t in triplets if t.video_id in keep] for split, triplets in built.items()}
  events = {split: [v for v in videos if v.video_id in keep] for split, videos in events.items()}
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
  return CompData(bool(store.metadata.get("synthetic", False)), ids, np.array([durations[v] for v in ids]),
                  gather if tokens is None else lambda vr, fr: tokens[vr, fr], shape[0], built["train"], built["eval"],
                  clips, counts, comp.TemplateRewriter(), common.real_path(workdir, store, skipped), tokens)


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
# ----------------------------------------------------------------------------------------------
# Evaluation.


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


# ----------------------------------------------------------------------------------------------
# The run.


@dataclasses.dataclass
class Trained:
  """A run's data, its VidCLIP and every trained method's params, and the evaluation set."""
  data: CompData
  model: V.VidClip
  params: dict[str, Any]
  es: EvalSet
  eval_texts: TextTable
  eval_tokens: dict[str, np.ndarray]
  tokenizer: Callable
  finetune: Examples


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
    print(("SYNTHETIC " if data.synthetic else "") + f"{config.name} benchmark (Table 1 shape)\n"
          + comp.format_counts(data.counts), flush=True)


def trained(config, workdir: Path, restore: bool = False) -> Trained:
  """Builds the benchmark and trains (or, from `workdir`'s checkpoints, resumes) every method; `restore` reads a
  finished run's final checkpoints instead (nothing trains)."""
  data = real_data(config, workdir) if config.data.features else world_data(config)
  mc = config.model
  ptc, ftc = config.pretrain, config.finetune
  common.on_writer("comp_benchmark", lambda: write_benchmark(config, workdir, data))

  visual = data.gather(np.zeros((1, 1), np.int64), np.zeros((1, 1), np.int64)).shape
  model, tokenizer, fresh = vidclip_setup(mc, visual[-1], visual[-2])
  texts = TextTable()
  frames = mc.frames
  pre = {"base": pretrain_examples(data, 1, ptc.hierarchy, frames, texts, config.seed),
         "comppretrain": pretrain_examples(data, ptc.stack, ptc.hierarchy, frames, texts, config.seed)}
  fine = finetune_examples(data, ftc.hierarchy, frames, texts)
  tokens = texts.tokens(tokenizer, mc.max_text_len)
  eval_texts = TextTable()  # its own table: evaluation encodes only the evaluation paragraphs
  es = eval_set(data, frames, eval_texts, dict(zip(ftc.hierarchy, ftc.levels)))
  eval_tokens = eval_texts.tokens(tokenizer, mc.max_text_len)
  params = {}
  if restore:
    names = [*pre, *(method for method, _, _ in FINETUNES)]
    return Trained(data, model, {n: train.load_params(workdir / "models" / n) for n in names}, es, eval_texts,
                   eval_tokens, tokenizer, fine)
  with common.precision(config, "train"):
    for name, ex in pre.items():
      params[name] = train_model(name, model, fresh, ex, data, tokens, ptc,
                                 "contrastive" if name == "base" else "comploss", config.seed, workdir,
                                 video_lr=ptc.video_lr)
    for method, mode, start in FINETUNES:
      params[method] = train_model(method, model, lambda rng, s=start: params[s], fine, data, tokens, ftc, mode,
                                   config.seed, workdir, video_lr=ftc.video_lr)
  return Trained(data, model, params, es, eval_texts, eval_tokens, tokenizer, fine)


def suite(config, workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """Every method as a dual encoder on the Comp benchmark and on paragraph-to-video R@K over its positive
  pairs (`configs/evaluate_all.py`), each read from the run's final checkpoint. Videos are keyed by
  evaluation-input row, texts by paragraph."""
  t = trained(config, Path(workdir), restore=True)
  enc = Encoder(t.model, t.data, config.eval.chunk)
  space = (f"the moving-object world of {config.name} (synthetic, seed {config.seed})" if not config.data.features
           else f"the feature store {config.data.features}")

  def encoders(params):
    texts = lambda strings: enc.strings(params, strings, t.tokenizer, config.model.max_text_len)  # noqa: E731
    return texts, lambda rows: enc.videos(params, t.es.video_rows[list(rows)], t.es.frame_rows[list(rows)])

  models = [evaluate.dual_encoder(m, space, *encoders(t.params["base" if m == "zero_shot" else m]),
                                  chunk=config.eval.chunk) for m in METHODS]
  paragraph = {row: text for text, row in t.eval_texts.rows.items()}
  by_type = {k: ([int(x) for x in v], [paragraph[int(x)] for x in p], [paragraph[int(x)] for x in n])
             for k, (v, p, n) in t.es.by_type.items()}
  pv, pt = t.es.pairs
  gallery = ([paragraph[int(x)] for x in pt], [int(x) for x in pv], np.arange(len(pv)))
  return models, [evaluate.Benchmark(f"Comp ({config.name})", "comp", space, by_type, t.data.synthetic),
                  evaluate.Benchmark(f"R@K ({config.name})", "gallery", space, gallery, t.data.synthetic)]


@common.precision_policy
def run(config, workdir: str | Path) -> dict:
  workdir = common.start_run(config, workdir, validate, RESUMABLE)
  t = trained(config, workdir)
  data, model, params, es, eval_tokens = t.data, t.model, t.params, t.es, t.eval_tokens
  ptc = config.pretrain
  fine = t.finetune
  enc = Encoder(model, data, config.eval.chunk)
  scores = {"zero_shot": evaluate_model(enc, params["base"], es, eval_tokens)}
  comppretrain_zero_shot = evaluate_model(enc, params["comppretrain"], es, eval_tokens)
  for method, _, _ in FINETUNES:
    scores[method] = evaluate_model(enc, params[method], es, eval_tokens)
  table_metrics = {m: {k: scores[m][k] for k in METRICS} for m in METHODS}
  t5 = (*METRICS[:4], "hierarchy")
  tables = {
      "pretraining_ablation": {  # Table 5
          "zero_shot_stack1": {k: scores["zero_shot"][k] for k in t5},
          f"zero_shot_stack{ptc.stack}": {k: comppretrain_zero_shot[k] for k in t5},
          "comploss_stack1": {k: scores["comploss"][k] for k in t5},
          f"comploss_stack{ptc.stack}": {k: scores["comppretrain_comploss"][k] for k in t5},
          "negclip_pref_stack1": {k: scores["negclip_pref"][k] for k in t5},
          f"negclip_pref_stack{ptc.stack}": {k: scores["comppretrain_negclip_pref"][k] for k in t5}},
      "zero_shot_retrieval": {  # Table 6
          "vidclip_base": {k: scores["zero_shot"][k] for k in ("t2v_r1", "v2t_r1")},
          "comppretrain": {k: comppretrain_zero_shot[k] for k in ("t2v_r1", "v2t_r1")}},
  }
  where = ("SYNTHETIC moving-object world" if not config.data.features else
           f"{config.dataset}, SYNTHETIC rendered videos" if data.synthetic else config.dataset)
  printed = [
      evaluate.format_table(table_metrics, f"VideoComp on {config.name} ({where}): binary accuracy % (Tables 2-4), "
                            "R@1 on the positive pairs (Table 3) and the hierarchy score % (disruption levels "
                            "ordered per test video)", data.synthetic, list(METRICS)),
      evaluate.format_table(tables["pretraining_ablation"], "CompPretrain stack size (Table 5)", data.synthetic,
                            list(t5)),
      evaluate.format_table(tables["zero_shot_retrieval"], "zero-shot retrieval R@1 after pretraining (Table 6)",
                            data.synthetic, ["t2v_r1", "v2t_r1"]),
  ]
  results = common.results_dict(
      config, dataset=config.dataset, synthetic=data.synthetic, metrics=table_metrics,
      note=moving_objects.SYNTHETIC_NOTE if "world" in config else "", tables=tables, **data.path,
      counts={"eval": {t: len(es.by_type[t][0]) for t in comp.EVAL_TYPES}, "train_groups": len(fine.positive),
              "pretrain_clips": len(data.clips), "hierarchy_inputs": len(es.hierarchy[0]),
              "hierarchy_videos": len(np.unique(es.hierarchy_videos))})
  common.write_results(workdir, results, printed)
  return results
