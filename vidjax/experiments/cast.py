"""CAST end to end: CVR benchmark, adapter and baselines, training, Full-Ensemble evaluation.

CAST paper (../shared/papers/cast.txt): §2.2 benchmark protocol, §2.3 adapter, §2.4 loss and
inference, §3.1 baselines and metrics, §3.3 ablations (Tables 4, 5, Figure 6), App. B settings.

`run(config, workdir)`:
  1. data: the embedded procedural world (`vidjax.data.synthetic`, when `config.data.annotations`
     is empty) or real annotations + a feature store;
  2. the CVR files by the paper's rules (`vidjax.data.cvr`): the 1-vs-9 evaluation benchmark, the
     training instances and a held-out subset of the training split for ensemble selection;
  3. trains Late Fusion (Learned), Early Fusion (direct / residual) and CAST with the one train loop
     (`vidjax.train.fit`), each in `<workdir>/train/<method>` (resumable);
  4. selects the Full-Ensemble coefficients on the held-out subset only, then evaluates every
     method on the benchmark; the context-length sweep L in {0..5} (Figure 6);
  5. writes `<workdir>/results.json`, prints the tables and saves `context_sweep.png`.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import time
from pathlib import Path
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import ml_collections

from vidjax import evaluate, io, losses, sharding, train
from vidjax.data import cvr, synthetic
from vidjax.data.annotations import read_annotations, split_by_video
from vidjax.data.features import FeatureStore, write_arrays
from vidjax.data.pipeline import CVRTrainSource, EmbeddingTable, cvr_eval_arrays, truncate_context
from vidjax.experiments import common
from vidjax.models import cast as cast_models

DATASETS = ("youcook2", "coin", "crosstask")
IDENTITY_RULES = ("caption_similarity", "task_step")
METHODS = ("zero_shot", "late_fusion_heuristic", "late_fusion_learned", "early_fusion",
           "early_fusion_residual", "cast")
# The paper's ensemble grid (App. B, "Inference Details").
W_V_GRID = tuple(round(0.1 * i, 1) for i in range(6))
W_P_GRID = tuple(round(0.2 + 0.1 * i, 1) for i in range(14))


def default_config(*, dataset: str, epochs: int, eval_split: str, identity_rule: str) -> ml_collections.ConfigDict:
  """Shared CAST config; `configs/cast_<dataset>.py` fill in the dataset-specific values."""
  c = ml_collections.ConfigDict()
  c.experiment = "cast"
  c.name = f"cast_{dataset}"
  c.seed = 0  # drives the world, splits, negative sampling, initialization and data order
  c.dataset = dataset
  c.data = ml_collections.ConfigDict(dict(
      annotations="",          # annotation file (YouCook2/COIN) or release folder (CrossTask); "" = synthetic world
      features="",             # feature store directory (vidjax.data.features); required with annotations
      clip_kind="clip",        # store kind of clip embeddings (VideoPrism LvT: "clip")
      text_kind="text",        # store kind of caption embeddings, keyed by clip id
      train_split="train",
      eval_split=eval_split,
      heldout_fraction=0.1,    # of training videos, for Full-Ensemble selection only (App. B)
      identity_rule=identity_rule,
      minilm_dir="",           # all-MiniLM-L6-v2 folder for caption_similarity ("" = the installed package)
      crosstask_test_fraction=0.2,
      crosstask_split_seed=42,  # paper App. B: 80/20 video-disjoint split with seed 42
  ))
  c.world = ml_collections.ConfigDict(dataclasses.asdict(synthetic.ProceduralWorldConfig()))
  c.model = ml_collections.ConfigDict(dict(
      context_len=5,            # L (Table 11)
      num_heads=8,              # cross-attention heads (Table 10)
      dropout_rate=0.1,         # Path-1 dropout (Table 10)
      residual_init_std=1e-3,   # init std of the residual branches' last layers; 0 = Flax default (see README)
      compute_dtype="float32",  # or "bfloat16" (params and optimizer state stay float32)
      late_fusion_alpha=1.0,    # heuristic late fusion S = A + alpha * B (the paper gives no alpha)
      late_fusion_hidden=64,
  ))
  c.train = ml_collections.ConfigDict(dict(
      epochs=epochs, batch_size=512, lr=1e-4, weight_decay=1e-3,  # Table 11
      tau=0.07, lambda_s=5.0, lambda_i=1.0,                          # eq. 6-9
      num_state_negatives=3, num_identity_negatives=3,
      zero_negatives_in_loss=True,  # App. B: missing negatives are zero vectors (kept in the loss)
      log_every=50, checkpoint_every=1000, progress=True,
  ))
  c.eval = ml_collections.ConfigDict(dict(w_v_grid=W_V_GRID, w_p_grid=W_P_GRID, chunk=1024))
  c.sweep = ml_collections.ConfigDict(dict(context_lengths=(0, 1, 2, 3, 4, 5)))
  return c


def smoke(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Shrinks a CAST config to seconds on a CPU (tests): tiny world, few steps, L in {0, 1, 2}."""
  c.world.update(num_tasks=6, min_steps=4, max_steps=6, num_train_videos=160, num_eval_videos=40, dim=32)
  c.model.context_len = 2
  c.train.update(epochs=2, batch_size=64, log_every=5, progress=False)
  c.eval.chunk = 128
  c.sweep.context_lengths = (0, 1, 2)
  return c


# ----------------------------------------------------------------------------------------------
# Config checks: one clear error per bad value, before any work.


def validate(config) -> None:
  def bad(key, value, expected):
    raise ValueError(f"config.{key}={value!r} is invalid: expected {expected}")
  if config.dataset not in DATASETS:
    bad("dataset", config.dataset, f"one of {DATASETS}")
  if config.data.identity_rule not in IDENTITY_RULES:
    bad("data.identity_rule", config.data.identity_rule, f"one of {IDENTITY_RULES}")
  if not 0.0 < config.data.heldout_fraction < 1.0:
    bad("data.heldout_fraction", config.data.heldout_fraction, "a fraction in (0, 1)")
  if config.data.annotations and not config.data.features:
    bad("data.features", config.data.features, "a feature store directory when data.annotations is set")
  for key in ("epochs", "batch_size", "log_every", "checkpoint_every"):
    if int(config.train[key]) < 1:
      bad(f"train.{key}", config.train[key], "a positive integer")
  for key in ("lr", "tau"):
    if not config.train[key] > 0:
      bad(f"train.{key}", config.train[key], "a positive number")
  if config.model.compute_dtype not in ("float32", "bfloat16"):
    bad("model.compute_dtype", config.model.compute_dtype, "'float32' or 'bfloat16'")
  if not 1 <= config.model.context_len <= 64:
    bad("model.context_len", config.model.context_len, "an integer in [1, 64] (the sweep covers L = 0)")
  for length in config.sweep.context_lengths:
    if not 0 <= length <= config.model.context_len:
      bad("sweep.context_lengths", tuple(config.sweep.context_lengths),
          f"lengths in [0, model.context_len={config.model.context_len}]")
  if not config.eval.w_v_grid or not config.eval.w_p_grid:
    bad("eval.w_v_grid / eval.w_p_grid", (config.eval.w_v_grid, config.eval.w_p_grid), "non-empty grids")


# ----------------------------------------------------------------------------------------------
# Data.


@dataclasses.dataclass
class CVRData:
  """Everything the training and evaluation stages need, built once per run."""
  synthetic: bool
  store: FeatureStore
  benchmark: list[dict]
  heldout: list[dict]
  instances: list[dict]
  stats: dict


def _embed_fn(config):
  if config.data.identity_rule != "caption_similarity":
    return None
  from vidjax import checkpoints  # heavy import only when YouCook2-style mining needs it
  encoder = checkpoints.load_minilm(config.data.minilm_dir or None)
  return encoder.encode


def _barrier(name: str) -> None:
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices(name)


# Fields that may change between runs in one workdir (resuming, logging, longer training).
_RESUMABLE_CHANGES = {"train.progress", "train.log_every", "train.checkpoint_every", "train.epochs", "eval.chunk"}


def check_workdir(config, workdir: Path) -> None:
  """Refuses to reuse a workdir made by a different config: its store and checkpoints would be stale."""
  path = workdir / "config.json"
  current = json.loads(config.to_json_best_effort())
  if path.exists():
    flat = lambda d, p="": {k2: v2 for k, v in d.items()  # noqa: E731
                            for k2, v2 in (flat(v, f"{p}{k}.") if isinstance(v, dict) else {f"{p}{k}": v}).items()}
    old, new = flat(io.read_json(path)), flat(current)
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k) and k not in _RESUMABLE_CHANGES)
    if changed:
      raise ValueError(f"workdir {workdir} was made by a different config (changed: {', '.join(changed[:8])}); "
                       "use a new --workdir (its features, benchmark files and checkpoints belong to that config)")
  if jax.process_index() == 0:
    io.atomic_write_json(path, current)


def prepare_data(config, workdir: Path) -> CVRData:
  """Reads or generates the videos, writes the CVR files to `<workdir>/cvr`, opens the store."""
  out = workdir / "cvr"
  writer = jax.process_index() == 0  # one process writes shared files; the others wait, then read
  if not config.data.annotations:
    world = synthetic.make_procedural_world(synthetic.world_config_from(config.world), seed=config.seed)
    store_dir = workdir / "features"
    if writer:
      write_arrays(store_dir, {"clip": (world.clip_ids, world.clip_emb), "text": (world.clip_ids, world.text_emb)},
                   {"backbone": "synthetic-procedural-world", "synthetic": True, "seed": config.seed,
                    "world": dict(config.world)})
    _barrier("vidjax_cast_store")
    store = FeatureStore(store_dir)
    train_videos, eval_videos = world.train_videos, world.eval_videos
    if config.data.clip_kind != "clip" or config.data.text_kind != "text":
      raise ValueError("the synthetic world writes kinds 'clip' and 'text'; leave data.clip_kind/text_kind as is")
    is_synthetic = True
  else:
    videos = read_annotations(config.dataset, config.data.annotations)
    if config.dataset == "crosstask":  # App. B: split by video 80/20 with seed 42
      train_videos, eval_videos = split_by_video(videos, config.data.crosstask_test_fraction,
                                                 config.data.crosstask_split_seed)
    else:
      train_videos = [v for v in videos if v.split == config.data.train_split]
      eval_videos = [v for v in videos if v.split == config.data.eval_split]
    for split, vids in (("train", train_videos), ("eval", eval_videos)):
      if not vids:
        raise ValueError(f"{config.data.annotations}: no videos in the {split} split "
                         f"({config.data.train_split if split == 'train' else config.data.eval_split!r})")
    store = FeatureStore(config.data.features)
    is_synthetic = bool(store.metadata.get("synthetic", False))
  rules = dict(cvr.DATASET_RULES[config.dataset], identity_rule=config.data.identity_rule)
  names = ({"eval_name": "crosstask_test.json", "train_name": "crosstask_train.json"}
           if config.dataset == "crosstask" else {"eval_name": "benchmark.json", "train_name": "train.json"})
  if writer:
    cvr.build_cvr(train_videos, eval_videos, out, embed_fn=_embed_fn(config),
                  context_len=config.model.context_len, heldout_fraction=config.data.heldout_fraction,
                  seed=config.seed, **rules, **names)
  _barrier("vidjax_cast_cvr")
  stats = io.read_json(out / "stats.json")
  benchmark = io.read_json(out / names["eval_name"])
  heldout = io.read_json(out / "heldout.json")
  instances = io.read_json(out / names["train_name"])
  print(("SYNTHETIC DATA: " if is_synthetic else "") + "CVR benchmark statistics (Table 1 shape)")
  print(cvr.format_stats(stats), end="\n\n", flush=True)
  return CVRData(is_synthetic, store, benchmark, heldout, instances, stats)


# ----------------------------------------------------------------------------------------------
# Training.


def _dtype(config):
  return jnp.bfloat16 if config.model.compute_dtype == "bfloat16" else jnp.float32


def build_models(config, dim: int) -> dict[str, Any]:
  """The trainable methods of Table 2 / Table 4, keyed by results.json method name."""
  dtype = _dtype(config)
  m = config.model
  return {
      "late_fusion_learned": cast_models.LateFusionLearned(dim, hidden=m.late_fusion_hidden, dtype=dtype),
      "early_fusion": cast_models.EarlyFusion(dim, residual=False, dropout_rate=m.dropout_rate, dtype=dtype),
      "early_fusion_residual": cast_models.EarlyFusion(dim, residual=True, dropout_rate=m.dropout_rate,
                                                       residual_init_std=m.residual_init_std or None, dtype=dtype),
      "cast": cast_models.CAST(dim, num_heads=m.num_heads, dropout_rate=m.dropout_rate,
                               residual_init_std=m.residual_init_std or None, dtype=dtype),
  }


def _unit(x):
  return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def make_loss_fn(model, tcfg):
  """Type-aware contrastive loss (eq. 6-9) for any of the trainable methods."""
  loss_kw = dict(tau=tcfg.tau, lambda_s=tcfg.lambda_s, lambda_i=tcfg.lambda_i)

  if isinstance(model, cast_models.LateFusionLearned):
    def loss_fn(params, batch, rng):
      del rng
      w = model.apply({"params": params}, batch["text"], batch["history"], batch["history_mask"])
      q, v_prev = _unit(batch["text"]), _unit(cast_models.last_context(batch["history"], batch["history_mask"]))
      fuse = lambda others: (w[:, :1] * jnp.einsum("bd,bkd->bk", q, others)  # noqa: E731
                             + w[:, 1:] * jnp.einsum("bd,bkd->bk", v_prev, others))
      pos = _unit(batch["positive"])
      sim_batch = w[:, :1] * (q @ pos.T) + w[:, 1:] * (v_prev @ pos.T)
      return losses.type_aware_contrastive(
          jnp.diagonal(sim_batch), sim_batch, fuse(_unit(batch["state_negs"])), batch["state_mask"],
          fuse(_unit(batch["ident_negs"])), batch["ident_mask"], **loss_kw)
    return loss_fn

  def loss_fn(params, batch, rng):
    v_hat = model.apply({"params": params}, batch["text"], batch["history"], batch["history_mask"],
                        deterministic=False, rngs={"dropout": rng})
    return losses.cast_loss(v_hat, batch["positive"], batch["state_negs"], batch["state_mask"],
                            batch["ident_negs"], batch["ident_mask"], **loss_kw)
  return loss_fn


def train_method(name: str, model, source: CVRTrainSource, config, workdir: Path, mesh) -> Any:
  """Trains one method with the shared loop; returns its params (resumes from its workdir)."""
  tcfg = config.train
  steps_per_epoch = len(source) // tcfg.batch_size
  if steps_per_epoch < 1:
    raise ValueError(f"{name}: the training set has {len(source)} instances, fewer than "
                     f"train.batch_size={tcfg.batch_size}")
  num_steps = steps_per_epoch * tcfg.epochs
  example = source[0]
  dummy = [jnp.asarray(example[k])[None] for k in ("text", "history", "history_mask")]
  init_fn = lambda rng: model.init(rng, *dummy)["params"]  # noqa: E731
  state, _ = train.fit(
      init_fn=init_fn, loss_fn=make_loss_fn(model, tcfg),
      optimizer=train.adamw(tcfg.lr, tcfg.weight_decay),
      dataset=train.make_index_batches(len(source), tcfg.batch_size, config.seed, source.collate),
      num_steps=num_steps, workdir=workdir / "train" / name, seed=config.seed, mesh=mesh,
      checkpoint_every=tcfg.checkpoint_every, log_every=min(tcfg.log_every, num_steps),
      progress=tcfg.progress, description=f"{config.name}/{name}")
  return jax.device_get(state.params)


# ----------------------------------------------------------------------------------------------
# Evaluation.


@functools.lru_cache(maxsize=None)
def _predict_fn(model):
  """A stable (hashable) apply function per model, so jitted evaluation compiles once per shape."""
  def apply(params, text, history, history_mask):
    return model.apply({"params": params}, text, history, history_mask)
  return apply


@functools.lru_cache(maxsize=None)
def _late_fusion_fn(model):
  def apply(params, text, history, history_mask, candidates):
    return model.apply({"params": params}, text, history, history_mask, candidates, method="score")
  return apply


def ensemble(model, params, heldout_arrays, config) -> evaluate.EnsembleScorer:
  """Full Ensemble (eq. 13) with (w_v, w_p) chosen on the held-out training subset only."""
  predictor = evaluate.EmbeddingPredictorScorer(_predict_fn(model), params)
  comp = evaluate.score_components(predictor, heldout_arrays, chunk=config.eval.chunk)
  w_v, w_p, _ = evaluate.select_ensemble_weights(comp["A"], comp["B"], comp["C"], heldout_arrays["target_index"],
                                                 tuple(config.eval.w_v_grid), tuple(config.eval.w_p_grid))
  return evaluate.EnsembleScorer(predictor, w_v, w_p)


def _round(metrics: Mapping[str, float]) -> dict[str, float]:
  return {k: round(float(v), 4) for k, v in metrics.items() if k in ("acc", "mnr", "state_acc", "ident_acc")}


def inference_ablation(scorer: evaluate.EnsembleScorer, bench, heldout, config) -> dict:
  """Table 5: the components A, B, C and the Semantic (A + C) and Full (A + B + C) ensembles."""
  comp = evaluate.score_components(scorer.predictor, bench, chunk=config.eval.chunk)
  held = evaluate.score_components(scorer.predictor, heldout, chunk=config.eval.chunk)
  _, w_p_sem, _ = evaluate.select_ensemble_weights(held["A"], held["B"], held["C"], heldout["target_index"],
                                                   (0.0,), tuple(config.eval.w_p_grid))
  from vidjax import metrics
  score = lambda s: _round(metrics.cvr_metrics(s, bench["target_index"], bench["neg_types"]))  # noqa: E731
  return {
      "A_text_matching": score(comp["A"]),
      "B_visual_continuity": score(comp["B"]),
      "C_cast_prediction": score(comp["C"]),
      "semantic_ensemble_A+C": score(comp["A"] + w_p_sem * comp["C"]),
      "full_ensemble_A+B+C": score(comp["A"] + scorer.w_v * comp["B"] + scorer.w_p * comp["C"]),
  }


def run(config, workdir: str | Path) -> dict:
  """Runs the whole CAST experiment; returns (and writes) the results dict."""
  validate(config)
  workdir = Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  check_workdir(config, workdir)
  start = time.time()
  data = prepare_data(config, workdir)
  clip_ids = set()
  for r in data.benchmark + data.heldout:
    clip_ids.update(r["candidates"], r["context"])
  for r in data.instances:
    clip_ids.update(r["context"], r["state_negatives"], r["identity_negatives"], [r["target"]])
  text_ids = [r["target"] for r in data.benchmark + data.heldout + data.instances]
  clips = EmbeddingTable(data.store, config.data.clip_kind, sorted(clip_ids))
  texts = EmbeddingTable(data.store, config.data.text_kind, text_ids)
  if clips.dim != texts.dim:
    raise ValueError(f"clip embeddings have width {clips.dim} but text embeddings {texts.dim}: "
                     "CAST needs one joint text-video space")
  L = config.model.context_len
  bench = cvr_eval_arrays(data.benchmark, clips, texts, L)
  heldout = cvr_eval_arrays(data.heldout, clips, texts, L)
  tcfg = config.train
  source = CVRTrainSource(data.instances, clips, texts, L, tcfg.num_state_negatives, tcfg.num_identity_negatives,
                          tcfg.zero_negatives_in_loss)
  mesh = sharding.make_mesh()
  models = build_models(config, clips.dim)
  chunk = config.eval.chunk

  scorers = {
      "zero_shot": evaluate.ZeroShotScorer(),
      "late_fusion_heuristic": evaluate.LateFusionHeuristicScorer(config.model.late_fusion_alpha),
  }
  params = {name: train_method(name, model, source, config, workdir, mesh) for name, model in models.items()}
  scorers["late_fusion_learned"] = evaluate.LateFusionLearnedScorer(
      _late_fusion_fn(models["late_fusion_learned"]), params["late_fusion_learned"])
  for name in ("early_fusion", "early_fusion_residual"):
    scorers[name] = evaluate.EmbeddingPredictorScorer(_predict_fn(models[name]), params[name])
  scorers["cast"] = ensemble(models["cast"], params["cast"], heldout, config)
  method_metrics = {name: _round(evaluate.evaluate_cvr(scorers[name], bench, chunk=chunk)) for name in METHODS}

  ablation = inference_ablation(scorers["cast"], bench, heldout, config)
  sweep = {}
  for length in config.sweep.context_lengths:
    if length == L:
      sweep[length] = method_metrics["cast"]
      continue
    src = CVRTrainSource(data.instances, clips, texts, length, tcfg.num_state_negatives,
                         tcfg.num_identity_negatives, tcfg.zero_negatives_in_loss)
    p = train_method(f"cast_L{length}", models["cast"], src, config, workdir, mesh)
    scorer = ensemble(models["cast"], p, truncate_context(heldout, length), config)
    sweep[length] = _round(evaluate.evaluate_cvr(scorer, truncate_context(bench, length), chunk=chunk))

  dataset = config.dataset + (" (synthetic procedural world)" if data.synthetic else "")
  results = {
      "experiment": config.name,
      "dataset": dataset,
      "synthetic": data.synthetic,
      "metrics": method_metrics,
      "ensemble": {"w_v": scorers["cast"].w_v, "w_p": scorers["cast"].w_p, "selected_on": "heldout subset of train"},
      "inference_ablation": ablation,
      "context_sweep": {str(k): v for k, v in sorted(sweep.items())},
      "benchmark_stats": data.stats,
      "features": {k: data.store.metadata.get(k) for k in ("backbone", "checkpoint_hash", "random_init")},
      "seconds": round(time.time() - start, 1),
      "config": json.loads(config.to_json_best_effort()),
  }
  tables = [
      evaluate.format_table(method_metrics, f"CVR benchmark ({dataset}), Table 2 / Table 4 shape", data.synthetic),
      evaluate.format_table(ablation, f"Inference components ({dataset}), Table 5 shape; "
                            f"w_v={scorers['cast'].w_v}, w_p={scorers['cast'].w_p}", data.synthetic),
      evaluate.format_table({f"L={k}": v for k, v in sorted(sweep.items())},
                            f"Context length sweep ({dataset}), Figure 6 shape", data.synthetic),
  ]
  if jax.process_index() == 0:
    if len(sweep) > 1:
      common.plot_context_sweep(sweep, workdir / "context_sweep.png", title=dataset, synthetic=data.synthetic)
    common.write_results(workdir, results, tables)
  return results
