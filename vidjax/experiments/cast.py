"""CAST end to end: CVR benchmark, adapter and baselines, training, Full-Ensemble evaluation.

CAST paper (../shared/papers/cast.txt): §2.2 benchmark protocol, §2.3 adapter, §2.4 loss and
inference, §3.1 baselines and metrics, §3.3 ablations (Tables 4, 5, Figure 6), App. B settings.

`run(config, workdir)`:
  1. data: the embedded procedural world (`vidjax.worlds.procedural`, when `config.data.annotations`
     is empty) or real annotations + a feature store; or (`data.source = "tfds"`) a CVR dataset built
     by `vidjax.tfds.cvr.VidjaxCvr` with its embeddings, read through TFDS' data source;
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
import json
import time
from pathlib import Path
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from vidjax import evaluate, io, losses, metrics, sharding
from vidjax.data import cvr
from vidjax.worlds import procedural
from vidjax.data.annotations import read_annotations
from vidjax.data.features import FeatureStore, write_arrays
from vidjax.data.pipeline import FeatureTable
from vidjax.defaults.cast import ADAPTERS, DATASETS, METHODS, W_P_GRID, W_V_GRID  # noqa: F401  (re-exported)
from vidjax.experiments import common
from vidjax.models import cast as cast_models
from vidjax.scorers import cast as cast_scorers


# ----------------------------------------------------------------------------------------------
# Config checks: one clear error per bad value, before any work.


def validate(config) -> None:
  common.check_choice(config, "dataset", DATASETS)
  common.check_choice(config, "data.identity_rule", cvr.IDENTITY_RULES)
  common.check_choice(config, "data.world", tuple(procedural.WORLDS))
  if config.data.annotations and config.data.world != "first_order":
    common.bad_value("data.world", config.data.world, "'first_order' (the default) when data.annotations is set: "
                     "worlds are synthetic and replace the annotations")
  common.check_fraction(config, "data.heldout_fraction")
  common.check_choice(config, "data.source", ("store", "tfds"))
  if config.data.source == "tfds" and not config.data.tfds:
    common.bad_value("data.tfds", config.data.tfds, "the folder of a built VidjaxCvr dataset version when "
                     "data.source='tfds' (<data_dir>/vidjax_cvr/<config>/<version>)")
  if config.data.source == "tfds" and (config.data.annotations or config.data.features):
    common.bad_value("data.annotations / data.features", (config.data.annotations, config.data.features),
                     "empty when data.source='tfds': the TFDS dataset carries the records and embeddings")
  if config.data.annotations and not config.data.features:
    common.bad_value("data.features", config.data.features, "a feature store directory when data.annotations is set")
  common.check_positive(config, ("data.memory_budget_mb",))
  common.check_positive_int(config, ("train.epochs", "train.batch_size", "train.log_every", "train.checkpoint_every"))
  common.check_positive(config, ("train.lr", "train.tau"))
  common.check_choice(config, "model.compute_dtype", ("float32", "bfloat16"))
  if not 1 <= config.model.context_len <= 64:
    common.bad_value("model.context_len", config.model.context_len,
                     "an integer in [1, 64] (the sweep covers L = 0)")
  for length in config.sweep.context_lengths:
    if not 0 <= length <= config.model.context_len:
      common.bad_value("sweep.context_lengths", tuple(config.sweep.context_lengths),
                       f"lengths in [0, model.context_len={config.model.context_len}]")
  if not config.eval.w_v_grid or not config.eval.w_p_grid:
    common.bad_value("eval.w_v_grid / eval.w_p_grid", (config.eval.w_v_grid, config.eval.w_p_grid),
                     "non-empty grids")


# ----------------------------------------------------------------------------------------------
# Data.


@dataclasses.dataclass
class CVRData:
  """Everything the training and evaluation stages need, built once per run."""
  synthetic: bool
  store: FeatureStore | None  # None when the embeddings come with the records (TFDS)
  benchmark: list[dict]
  heldout: list[dict]
  instances: list[dict]
  stats: dict
  reuse_gap: dict[str, int] = dataclasses.field(default_factory=dict)  # history world: "use m" clip -> gap
  # TFDS source: {"clip": (ids, [N, D]), "text": (ids, [M, D])} and the store manifest fields it recorded.
  arrays: dict | None = None
  features: dict = dataclasses.field(default_factory=dict)
  videos: list = dataclasses.field(default_factory=list)  # every Video of both splits (not with TFDS)

  def tables(self, config) -> tuple[FeatureTable, FeatureTable]:
    """(clip table, text table) over every id the records use."""
    if self.arrays is not None:
      return (FeatureTable.from_arrays(config.data.clip_kind, *self.arrays["clip"]),
              FeatureTable.from_arrays(config.data.text_kind, *self.arrays["text"]))
    clip_ids, text_ids = cvr.feature_ids(self.benchmark + self.heldout + self.instances)
    budget = int(config.data.memory_budget_mb * 2**20)
    return (FeatureTable(self.store, config.data.clip_kind, sorted(clip_ids), budget),
            FeatureTable(self.store, config.data.text_kind, text_ids, budget))


def _embed_fn(config):
  if config.data.identity_rule != "caption_similarity":
    return None
  from vidjax import checkpoints  # heavy import only when YouCook2-style mining needs it
  encoder = checkpoints.load_minilm(config.data.minilm_dir or None)
  return encoder.encode


# Fields that may change between runs in one workdir (resuming, logging, longer training).
RESUMABLE_CHANGES = ("train.progress", "train.log_every", "train.checkpoint_every", "train.epochs", "eval.chunk")


def tfds_data(config) -> CVRData:
  """The CVR records and embeddings of a built `VidjaxCvr` dataset (`data.source = "tfds"`)."""
  from vidjax.tfds import common as tfds_common, cvr as tfds_cvr  # the [tfds] extra, only when asked for
  builder = tfds_common.open_dataset(config.data.tfds)
  meta = builder.info.metadata
  if meta.get("dataset") != config.dataset:
    raise ValueError(f"data.tfds {config.data.tfds} holds the {meta.get('dataset')!r} CVR benchmark, "
                     f"not {config.dataset!r}")
  if "features" not in meta:
    raise ValueError(f"data.tfds {config.data.tfds} was built without a feature store (CvrConfig.features): "
                     "it has ids and texts but no embeddings to train on")
  examples = {split: tfds_common.read_split(builder, split) for split in builder.info.splits}
  records = {split: tfds_cvr.as_cvr_records(ex, split) for split, ex in examples.items()}
  eval_split = tfds_cvr.EVAL_SPLIT_NAMES[config.dataset]
  stats = dict(meta["stats"], dropped_videos=meta["source"].get("dropped_videos", {"count": 0}))
  synthetic = bool(meta["features"].get("synthetic", False))
  print(("SYNTHETIC DATA: " if synthetic else "") + f"CVR benchmark statistics (Table 1 shape), from TFDS "
        f"{builder.info.full_name}")
  print(cvr.format_stats(stats), end="\n\n", flush=True)
  return CVRData(synthetic, None, records[eval_split], records["heldout"], records["train"], stats,
                 arrays=tfds_cvr.embedding_arrays(examples), features=dict(meta["features"]))


def prepare_data(config, workdir: Path) -> CVRData:
  """Reads or generates the videos, writes the CVR files to `<workdir>/cvr`, opens the store."""
  if config.data.source == "tfds":
    return tfds_data(config)
  out = workdir / "cvr"
  writer = common.is_writer()  # one process writes shared files; the others wait, then read
  if not config.data.annotations:
    world = procedural.make_procedural_world(procedural.world_config_from(config.world, config.data.world),
                                            seed=config.seed)
    store_dir = workdir / "features"
    if writer:
      write_arrays(store_dir, {"clip": (world.clip_ids, world.clip_emb), "text": (world.clip_ids, world.text_emb)},
                   {"backbone": "synthetic-procedural-world", "synthetic": True, "seed": config.seed,
                    "world": dataclasses.asdict(world.config), "world_name": config.data.world})
    common.barrier("vidjax_cast_store")
    store = FeatureStore(store_dir)
    train_videos, eval_videos = world.train_videos, world.eval_videos
    if config.data.clip_kind != "clip" or config.data.text_kind != "text":
      raise ValueError("the synthetic world writes kinds 'clip' and 'text'; leave data.clip_kind/text_kind as is")
    is_synthetic = True
    dropped = []
    reuse_gap = world.reuse_gap
    videos = world.train_videos + world.eval_videos
  else:
    videos = read_annotations(config.dataset, config.data.annotations)
    store = FeatureStore(config.data.features)
    videos, dropped = cvr.available_videos(videos, store, (config.data.clip_kind, config.data.text_kind),
                                           config.data.available_videos, config.data.skip_missing_videos)
    is_synthetic = bool(store.metadata.get("synthetic", False))
    reuse_gap = {}
  rules = dict(identity_rule=config.data.identity_rule, embed_fn=_embed_fn(config) if writer else None,
               context_len=config.model.context_len, heldout_fraction=config.data.heldout_fraction, seed=config.seed)
  names = cvr.file_names(config.dataset)
  if writer and config.data.annotations:
    cvr.build_dataset_cvr(config.dataset, videos, out, source=config.data.annotations,
                          train_split=config.data.train_split, eval_split=config.data.eval_split,
                          crosstask_split_seed=config.data.crosstask_split_seed,
                          crosstask_test_fraction=config.data.crosstask_test_fraction, **rules)
  elif writer:
    cvr.build_cvr(train_videos, eval_videos, out, eval_name=names[0], train_name=names[1],
                  **(cvr.DATASET_RULES[config.dataset] | rules))
  common.barrier("vidjax_cast_cvr")
  stats = io.read_json(out / "stats.json")
  stats["dropped_videos"] = {"count": len(dropped), "ids": dropped[:100],
                             "rule": config.data.available_videos or
                             ("no features in the store" if config.data.skip_missing_videos else "")}
  if dropped:
    print(f"dropped {len(dropped)} videos before building the benchmark ({stats['dropped_videos']['rule']}): "
          f"{', '.join(dropped[:5])}{' ...' if len(dropped) > 5 else ''}", flush=True)
  benchmark = io.read_json(out / names[0])
  heldout = io.read_json(out / "heldout.json")
  instances = io.read_json(out / names[1])
  print(("SYNTHETIC DATA: " if is_synthetic else "") + "CVR benchmark statistics (Table 1 shape)")
  print(cvr.format_stats(stats), end="\n\n", flush=True)
  return CVRData(is_synthetic, store, benchmark, heldout, instances, stats, reuse_gap, features=store.metadata,
                 videos=list(videos))


# ----------------------------------------------------------------------------------------------
# Training.


def build_models(config, dim: int) -> dict[str, Any]:
  """The trainable methods of Table 2 / Table 4, keyed by results.json method name."""
  dtype = common.compute_dtype(config, "model.compute_dtype")
  m = config.model
  return {
      "late_fusion_learned": cast_models.LateFusionLearned(dim, hidden=m.late_fusion_hidden, dtype=dtype),
      "early_fusion": cast_models.EarlyFusion(dim, residual=False, dropout_rate=m.dropout_rate, dtype=dtype),
      "early_fusion_residual": cast_models.EarlyFusion(dim, residual=True, dropout_rate=m.dropout_rate,
                                                       residual_init_std=m.residual_init_std or None, dtype=dtype),
      "cast": cast_models.CAST(dim, num_heads=m.num_heads, dropout_rate=m.dropout_rate,
                               residual_init_std=m.residual_init_std or None, dtype=dtype),
  }


def make_loss_fn(model, tcfg):
  """Type-aware contrastive loss (eq. 6-9) for any of the trainable methods."""
  loss_kw = dict(tau=tcfg.tau, lambda_s=tcfg.lambda_s, lambda_i=tcfg.lambda_i)

  if isinstance(model, cast_models.LateFusionLearned):
    def loss_fn(params, batch, rng):
      del rng
      w = model.apply({"params": params}, batch["text"], batch["history"], batch["history_mask"])
      v_prev = cast_models.last_context(batch["history"], batch["history_mask"])
      score = lambda cands: cast_models.late_fusion_learned_scores(w, batch["text"], v_prev, cands)  # noqa: E731
      sim_batch = score(batch["positive"])  # [B, B]: every row's positive against every query
      return losses.type_aware_contrastive(
          jnp.diagonal(sim_batch), sim_batch, score(batch["state_negs"]), batch["state_mask"],
          score(batch["ident_negs"]), batch["ident_mask"], **loss_kw)
    return loss_fn

  def loss_fn(params, batch, rng):
    v_hat = model.apply({"params": params}, batch["text"], batch["history"], batch["history_mask"],
                        deterministic=False, rngs={"dropout": rng})
    return losses.cast_loss(v_hat, batch["positive"], batch["state_negs"], batch["state_mask"],
                            batch["ident_negs"], batch["ident_mask"], **loss_kw)
  return loss_fn


def train_method(name: str, model, source: cvr.CVRTrainSource, config, workdir: Path, mesh) -> Any:
  """Trains one method with the shared loop; returns its params (resumes from its workdir)."""
  example = source[0]
  dummy = [jnp.asarray(example[k])[None] for k in ("text", "history", "history_mask")]
  state = common.train_epochs(
      name=name, init_fn=lambda rng: model.init(rng, *dummy)["params"], loss_fn=make_loss_fn(model, config.train),
      num_examples=len(source), batch_fn=source.collate, tcfg=config.train, seed=config.seed,
      workdir=Path(workdir) / "train" / name, mesh=mesh, description=f"{config.name}/{name}")
  return jax.device_get(state.params)  # the optimizer state stays on the device


# ----------------------------------------------------------------------------------------------
# Evaluation.


def predictor_scorer(model, params) -> cast_scorers.PredictorScorer:
  """S = C = sim(v̂, v_c) for a next-state predictor (CAST, Early Fusion)."""
  return cast_scorers.PredictorScorer(lambda p, *args: model.apply({"params": p}, *args), params)


def ensemble(model, params, heldout_arrays, config) -> tuple[cast_scorers.EnsembleScorer, dict]:
  """Full Ensemble (eq. 13) with (w_v, w_p) chosen on the held-out training subset only.

  Returns the scorer and the held-out components {"A", "B", "C"} it was selected on.
  """
  predictor = predictor_scorer(model, params)
  held = cast_scorers.score_components(predictor, heldout_arrays, chunk=config.eval.chunk)
  w_v, w_p, _ = cast_scorers.select_ensemble_weights(held["A"], held["B"], held["C"], heldout_arrays["target_index"],
                                                     tuple(config.eval.w_v_grid), tuple(config.eval.w_p_grid))
  return cast_scorers.EnsembleScorer(predictor, w_v, w_p), held


def _round(values: Mapping[str, float]) -> dict[str, float]:
  return {k: round(float(v), 4) for k, v in values.items()
          if k in ("acc", "r5", "mnr", "state_acc", "ident_acc") or k.startswith("top1_")}


def pool_metrics(scores: np.ndarray, arrays, mask: np.ndarray | None = None) -> tuple[dict, dict]:
  """CVR metrics (§3.1, plus R@5) and the Figure-5 top-1 breakdown of `scores` [Q, C] on a benchmark,
  or on the queries where `mask` [Q] is true."""
  target, types = arrays["target_index"], arrays["neg_types"]
  if mask is not None:
    scores, target, types = scores[mask], target[mask], types[mask]
  values = metrics.cvr_metrics(scores, target, types)
  values["r5"] = metrics.retrieval_metrics(metrics.rank_of_target(scores, target), ks=(5,))["r5"]
  return _round(values), _round(metrics.cvr_top1_breakdown(scores, target, types))


def inference_ablation(comp: Mapping[str, np.ndarray], held: Mapping[str, Any], w_v: float, w_p: float,
                       heldout, bench, config) -> dict:
  """Table 5: the components A, B, C and the Semantic (A + C) and Full (A + B + C) ensembles.

  `comp` are CAST's benchmark components, `held` the held-out ones the Full Ensemble (w_v, w_p) was
  selected on; the Semantic Ensemble's w_p is selected on `held` with w_v = 0.
  """
  _, w_p_sem, _ = cast_scorers.select_ensemble_weights(held["A"], held["B"], held["C"], heldout["target_index"],
                                                       (0.0,), tuple(config.eval.w_p_grid))
  score = lambda s: _round(metrics.cvr_metrics(s, bench["target_index"], bench["neg_types"]))  # noqa: E731
  return {
      "A_text_matching": score(comp["A"]),
      "B_visual_continuity": score(comp["B"]),
      "C_cast_prediction": score(comp["C"]),
      "semantic_ensemble_A+C": score(comp["A"] + w_p_sem * comp["C"]),
      "full_ensemble_A+B+C": score(comp["A"] + w_v * comp["B"] + w_p * comp["C"]),
  }


def query_subsets(data: CVRData) -> dict[str, np.ndarray]:
  """Benchmark queries split by whether the target reuses a carried object (history world only)."""
  if not data.reuse_gap:
    return {}
  reuse = np.array([r["target"] in data.reuse_gap for r in data.benchmark])
  return {"reuse": reuse, "non_reuse": ~reuse}


def gap_accuracy(scores: np.ndarray, arrays, data: CVRData) -> dict[str, float]:
  """Acc on reuse queries by the gap from "prepare m" to "use m" (history world)."""
  gaps = np.array([data.reuse_gap.get(r["target"], 0) for r in data.benchmark])
  ranks = metrics.rank_of_target(scores, arrays["target_index"])
  return {f"gap={g}": round(float(100.0 * np.mean(ranks[gaps == g] == 1)), 4) for g in sorted(set(gaps) - {0})}


def setup(config, workdir: Path):
  """(data, clip table, text table, benchmark arrays, held-out arrays, training source) of a run."""
  data = prepare_data(config, workdir)
  clips, texts = data.tables(config)
  if clips.dim != texts.dim:
    raise ValueError(f"clip embeddings have width {clips.dim} but text embeddings {texts.dim}: "
                     "CAST needs one joint text-video space")
  L, tcfg = config.model.context_len, config.train
  bench = cvr.cvr_eval_arrays(data.benchmark, clips, texts, L)
  heldout = cvr.cvr_eval_arrays(data.heldout, clips, texts, L)
  source = cvr.CVRTrainSource(data.instances, clips, texts, L, tcfg.num_state_negatives, tcfg.num_identity_negatives,
                              tcfg.zero_negatives_in_loss)
  return data, clips, texts, bench, heldout, source


def suite(config, workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """CAST (Full Ensemble) and the zero-shot dual encoder on the CVR benchmark (`configs/evaluate_all.py`).

  CAST's scorer reads the query's visual history, so it takes the CVR pools only; the zero-shot cosine reads
  the space's raw embeddings, so it takes them too."""
  workdir = Path(workdir)
  data, clips, _, bench, heldout, source = setup(config, workdir)
  model = build_models(config, clips.dim)["cast"]
  params = train_method("cast", model, source, config, workdir, sharding.make_mesh())
  scorer, _ = ensemble(model, params, heldout, config)
  space = (f"the {config.dataset} procedural world (synthetic, seed {config.seed})" if data.synthetic else
           f"{data.features.get('backbone') or 'stored'} features of {config.data.features or config.dataset}")
  no_history = "CAST scores a candidate from the query's visual history (CVR pools); this benchmark has none"
  cvr_of = lambda s: (lambda arrays: evaluate.evaluate_cvr(s, arrays, config.eval.chunk))  # noqa: E731
  return ([evaluate.Model("cast", space, {"cvr": cvr_of(scorer)}, {k: no_history for k in evaluate.BENCHMARK_KINDS if k != "cvr"}),
           evaluate.Model("zero_shot", space, {"cvr": cvr_of(cast_scorers.ZeroShotScorer())})],
          [evaluate.Benchmark(f"CVR ({config.dataset})", "cvr", space, bench, data.synthetic)])


def run(config, workdir: str | Path) -> dict:
  """Runs the whole CAST experiment; returns (and writes) the results dict."""
  workdir = common.start_run(config, workdir, validate, RESUMABLE_CHANGES)
  start = time.time()
  data, clips, texts, bench, heldout, source = setup(config, workdir)
  L, tcfg = config.model.context_len, config.train
  mesh = sharding.make_mesh()
  models = build_models(config, clips.dim)
  chunk = config.eval.chunk

  scorers = {
      "zero_shot": cast_scorers.ZeroShotScorer(),
      "late_fusion_heuristic": cast_scorers.LateFusionHeuristicScorer(config.model.late_fusion_alpha),
  }
  params = {name: train_method(name, model, source, config, workdir, mesh) for name, model in models.items()}
  late = models["late_fusion_learned"]
  scorers["late_fusion_learned"] = cast_scorers.LateFusionLearnedScorer(
      lambda p, *args: late.apply({"params": p}, *args, method="score"), params["late_fusion_learned"])
  inputs = {k: v for k, v in bench.items() if k not in evaluate.CVR_LABEL_KEYS}
  scores = {name: evaluate.score_pools(scorers[name], inputs, chunk) for name in scorers}
  # Every next-state predictor under both rules, each with its own held-out coefficients: its
  # prediction alone (S = C) and the Full Ensemble (S = A + w_v·B + w_p·C, eq. 13).
  prediction_only, same_ensemble, weights, comps = {}, {}, {}, {}
  for name in ADAPTERS:
    ens, held = ensemble(models[name], params[name], heldout, config)
    comps[name] = cast_scorers.score_components(ens.predictor, bench, chunk=chunk)
    weights[name] = (ens.w_v, ens.w_p, held)
    prediction_only[name] = comps[name]["C"]
    same_ensemble[name] = comps[name]["A"] + ens.w_v * comps[name]["B"] + ens.w_p * comps[name]["C"]
    if name == "cast":
      scorers["cast"] = ens
  # Table 2 / Table 4 rows as the paper reports them: the baselines' own predictions, CAST's ensemble.
  scores.update({name: prediction_only[name] for name in ADAPTERS if name != "cast"}, cast=same_ensemble["cast"])
  evaluated = {name: pool_metrics(scores[name], bench) for name in METHODS}
  method_metrics = {name: m for name, (m, _) in evaluated.items()}
  breakdown = {name: b for name, (_, b) in evaluated.items()}
  w_v, w_p, held = weights["cast"]
  ablation = inference_ablation(comps["cast"], held, w_v, w_p, heldout, bench, config)
  fair = {"prediction_only": {n: pool_metrics(prediction_only[n], bench)[0] for n in ADAPTERS},
          "same_ensemble": {n: dict(pool_metrics(same_ensemble[n], bench)[0], w_v=weights[n][0], w_p=weights[n][1])
                            for n in ADAPTERS}}
  subsets = {}
  for subset, mask in query_subsets(data).items():
    subsets[subset] = {
        "n": int(mask.sum()),
        "metrics": {n: pool_metrics(scores[n], bench, mask)[0] for n in METHODS},
        "prediction_only": {n: pool_metrics(prediction_only[n], bench, mask)[0] for n in ADAPTERS},
        "same_ensemble": {n: pool_metrics(same_ensemble[n], bench, mask)[0] for n in ADAPTERS},
    }

  sweep, sweep_gaps = {}, {}
  for length in config.sweep.context_lengths:
    if length == L:
      sweep[length], sweep_scores = method_metrics["cast"], scores["cast"]
    else:
      src = cvr.CVRTrainSource(data.instances, clips, texts, length, tcfg.num_state_negatives,
                               tcfg.num_identity_negatives, tcfg.zero_negatives_in_loss)
      p = train_method(f"cast_L{length}", models["cast"], src, config, workdir, mesh)
      scorer, _ = ensemble(models["cast"], p, cvr.truncate_context(heldout, length), config)
      short = cvr.truncate_context(bench, length)
      sweep_scores = evaluate.score_pools(scorer, {k: v for k, v in short.items()
                                                   if k not in evaluate.CVR_LABEL_KEYS}, chunk)
      sweep[length], _ = pool_metrics(sweep_scores, short)
    if data.reuse_gap:
      sweep_gaps[length] = gap_accuracy(sweep_scores, bench, data)

  dataset = config.dataset + (" (synthetic procedural world)" if data.synthetic else "")
  results = {
      "experiment": config.name,
      "dataset": dataset,
      "synthetic": data.synthetic,
      "metrics": method_metrics,
      "ensemble": {"w_v": scorers["cast"].w_v, "w_p": scorers["cast"].w_p, "selected_on": "heldout subset of train"},
      "top1_breakdown": breakdown,
      "inference_ablation": ablation,
      "fair_comparison": fair,
      "context_sweep": {str(k): v for k, v in sorted(sweep.items())},
      **({"subsets": subsets, "context_sweep_reuse_by_gap": {str(k): v for k, v in sorted(sweep_gaps.items())}}
         if subsets else {}),
      "benchmark_stats": data.stats,
      "features": {k: data.features.get(k) for k in ("backbone", "checkpoint_hash", "random_init")},
      "seconds": round(time.time() - start, 1),
      "config": json.loads(config.to_json_best_effort()),
  }
  fair_rows = {f"{n} ({rule})": m for rule, rows in (("C only", fair["prediction_only"]),
                                                       ("ensemble", fair["same_ensemble"]))
               for n, m in rows.items()}
  tables = [
      evaluate.format_table(method_metrics, f"CVR benchmark ({dataset}), Table 2 / Table 4 shape", data.synthetic),
      evaluate.format_table(fair_rows, f"Adapters compared like with like ({dataset}): prediction alone and the "
                            "same Full-Ensemble rule, each with its own held-out (w_v, w_p)", data.synthetic),
      evaluate.format_table(breakdown, f"Top-1 choice ({dataset}), Figure 5 shape (% of queries)", data.synthetic,
                            columns=list(breakdown["cast"])),
      evaluate.format_table(ablation, f"Inference components ({dataset}), Table 5 shape; "
                            f"w_v={w_v}, w_p={w_p}", data.synthetic),
      evaluate.format_table({f"L={k}": v for k, v in sorted(sweep.items())},
                            f"Context length sweep ({dataset}), Figure 6 shape", data.synthetic),
  ]
  for subset, values in subsets.items():
    rows = dict(values["metrics"], **{f"{n} (C only)": m for n, m in values["prediction_only"].items()})
    tables.append(evaluate.format_table(rows, f"{subset} queries only (n={values['n']}) ({dataset})", data.synthetic))
  if sweep_gaps:
    tables.append(evaluate.format_table({f"L={k}": v for k, v in sorted(sweep_gaps.items())},
                                        f"CAST Acc on reuse queries by prepare-to-use gap ({dataset}); the "
                                        "prepare clip is in the context when gap <= L", data.synthetic))
  if common.is_writer():
    if len(sweep) > 1:
      common.plot_context_sweep(sweep, workdir / "context_sweep.png", title=dataset, synthetic=data.synthetic)
    common.plot_top1_breakdown(breakdown, workdir / "top1_breakdown.png", title=dataset, synthetic=data.synthetic)
    common.write_results(workdir, results, tables)
  return results
