"""CAST as a method (../shared/papers/cast.txt §2.2-2.4, App. B): the CVR data of a run, its models and baselines
built from a config, their type-aware contrastive loss in the one train loop, and the Full-Ensemble scorer (eq. 13).

    data, clips, texts, bench, heldout, source = setup(config, workdir)      # CVR files + feature tables
    models = build_models(config, clips.dim)                                  # Table 2 / Table 4's trainable methods
    params = train_method("cast", models["cast"], source, config, workdir, mesh)   # <workdir>/train/cast
    scorer, held = ensemble(models["cast"], params, heldout, config)          # (w_v, w_p) on held-out data only
    evaluation = evaluate_methods(models, params, data, bench, heldout, config)   # Tables 2, 4, 5, Figure 5
    models, benchmarks = suite(config, workdir)                                 # a finished run, for evaluate_all

`configs/cast_*.py` (the CAST experiment) and `configs/stack_*.py` (its CAST half) both read a run this way. The data
are always release-format annotations + a feature store (`config.data.annotations` / `data.features`): a user's, or
the ones the embedded procedural world wrote (`vidjax.worlds.procedural.write_world`, through
`vidjax.experiments.common.world_data`); the world's truth for the world-only diagnostics (the history world's
reuse queries) is the side file `world_truth.json` beside its store (`procedural.read_truth`).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidjax import evaluate, io, losses, metrics, sharding, train
from vidjax.data import cvr
from vidjax.data.annotations import read_annotations
from vidjax.data.features import FeatureStore
from vidjax.data.pipeline import FeatureTable
from vidjax.defaults import common
from vidjax.data import provenance
from vidjax.models import cast as cast_models
from vidjax.scorers import cast as cast_scorers
from vidjax.worlds import procedural

DATASETS = ("youcook2", "coin", "crosstask")
# The rows of Table 2 / Table 4, in results.json's order.
METHODS = ("zero_shot", "late_fusion_heuristic", "late_fusion_learned", "early_fusion",
           "early_fusion_residual", "cast")
# The next-state predictors, compared like with like (prediction alone; the same ensemble rule).
ADAPTERS = ("early_fusion", "early_fusion_residual", "cast")


# ----------------------------------------------------------------------------------------------
# Config checks: one clear error per bad value, before any work.


def validate(config) -> None:
  """The CVR config checks (`configs/cast_*.py`, and the stack's CAST half): one clear error per bad value."""
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
  if bool(config.data.annotations) != bool(config.data.features):
    common.bad_value("data.annotations / data.features", (config.data.annotations, config.data.features),
                     "both (annotations and their feature store) or neither (the embedded world)")
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
  for key in ("eval.w_v_grid", "eval.w_p_grid"):  # eq. 13's weights of B and C: a NaN or a string fails after training
    grid = common.get_key(config, key)
    if not all(isinstance(w, (int, float)) and not isinstance(w, bool) and np.isfinite(w) and w >= 0 for w in grid):
      common.bad_value(key, tuple(grid), "finite numbers >= 0 (eq. 13's ensemble weights)")
  for key in ("train.num_state_negatives", "train.num_identity_negatives"):
    value = common.get_key(config, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
      common.bad_value(key, value, "an integer >= 0 (negatives per training instance, App. B)")
  if not config.data.features and config.data.source == "store":  # the world's width is known before any work
    check_heads(config, config.world.dim, "world.dim")


def check_heads(config, dim: int, what: str) -> None:
  """CAST's cross-attention splits the features' width `dim` into `model.num_heads` heads (Table 10): a count that
  does not divide it would silently leave dimensions out of every head."""
  heads = config.model.num_heads
  if not common.is_positive_int(heads) or dim % heads:
    common.bad_value("model.num_heads", heads, f"a positive integer dividing {what}={dim}")


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
  skipped: list = dataclasses.field(default_factory=list)  # ids of the annotated videos left out (no features)

  def tables(self, config) -> tuple[FeatureTable, FeatureTable]:
    """(clip table, text table) over every id the records use."""
    if self.arrays is not None:
      return (FeatureTable.from_arrays(config.data.clip_kind, *self.arrays["clip"]),
              FeatureTable.from_arrays(config.data.text_kind, *self.arrays["text"]))
    clip_ids, text_ids = cvr.feature_ids(self.benchmark + self.heldout + self.instances)
    budget = int(config.data.memory_budget_mb * 2**20)
    return (FeatureTable(self.store, config.data.clip_kind, sorted(clip_ids), budget),
            FeatureTable(self.store, config.data.text_kind, text_ids, budget))


def limits(instances: Sequence[Mapping], dataset: str) -> dict[str, tuple[int, str]]:
  """What must fit the data (`common.clip_to_data`): a training batch at most the benchmark's training instances,
  and the state / identity negatives of an instance at most the most its records hold (the CVR files mine up to 3
  of each, App. B): more would only add zero-vector slots to every instance's loss."""
  most = {key: max((len(r[key]) for r in instances), default=0) for key in ("state_negatives", "identity_negatives")}
  fits = {f"train.num_{key}": (n, f"the most {key.replace('_', ' ')} a training instance of this {dataset} benchmark "
                                  f"holds: {n}", 0) for key, n in most.items()}
  return {"train.batch_size": (len(instances), f"the {len(instances)} training instances of this {dataset} benchmark"),
          **fits}


def fit_to_data(config, data) -> tuple[Any, dict]:
  """(config, clipped): the training batch clipped to the instances (`limits`), and the held-out subset if it grew
  to build its pools (`cvr.build_dataset_cvr(grow_heldout=...)`), both in results.json's `clipped`."""
  held = data.stats.get("config", {})
  grown = {}
  if held.get("heldout_fraction_asked", held.get("heldout_fraction")) != held.get("heldout_fraction"):
    grown["data.heldout_fraction"] = [held["heldout_fraction_asked"], held["heldout_fraction"]]
    config = common.with_values(config, {"data.heldout_fraction": held["heldout_fraction"]})
  return common.clip_to_data(config, limits(data.instances, config.dataset), fitted=grown)


def _embed_fn(config):
  if config.data.identity_rule != "caption_similarity":
    return None
  from vidjax import checkpoints  # heavy import only when YouCook2-style mining needs it
  encoder = checkpoints.load_minilm(config.data.minilm_dir or None)
  return encoder.encode


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


def prepare_data(config, workdir: Path, finished: bool = False) -> CVRData:
  """Reads the annotations (`data.annotations`) and the store (`data.features`), drops the videos without
  features (`data.skip_missing`, `data.available_videos`), writes the CVR files to `<workdir>/cvr` by the paper's
  rules (process 0; the others read them) and opens the store. `finished`: a finished run's files are read as they
  are, nothing is written. With `data.source = "tfds"`: the records and embeddings of a built VidjaxCvr dataset."""
  if config.data.source == "tfds":
    return tfds_data(config)
  out = workdir / "cvr"
  kinds = (config.data.clip_kind, config.data.text_kind)
  store = FeatureStore(config.data.features)
  videos, dropped = cvr.available_videos(read_annotations(config.dataset, config.data.annotations), store, kinds,
                                         config.data.available_videos, config.data.skip_missing)
  build = lambda: cvr.build_dataset_cvr(  # noqa: E731  (the check (strict: batch size) runs before any file)
      config.dataset, videos, out, source=config.data.annotations, train_split=config.data.train_split,
      eval_split=config.data.eval_split, crosstask_split_seed=config.data.crosstask_split_seed,
      crosstask_test_fraction=config.data.crosstask_test_fraction, identity_rule=config.data.identity_rule,
      embed_fn=_embed_fn(config), context_len=config.model.context_len,
      heldout_fraction=config.data.heldout_fraction, seed=config.seed, grow_heldout=not common.is_strict(config),
      check=lambda files: common.clip_to_data(config, limits(files.train, config.dataset), say=False))
  files = (None if finished else sharding.on_writer("vidjax_cast_cvr", build)) or cvr.read_cvr(out, config.dataset)
  provenance.check_store(workdir, store, kinds)  # after the CVR files' checks (a run refused there writes nothing)
  is_synthetic = bool(store.metadata.get("synthetic", False))
  stats = dict(files.stats)
  used, asked = stats["config"]["heldout_fraction"], stats["config"].get("heldout_fraction_asked")
  if asked is not None and used != asked:
    print(f"clipped config.data.heldout_fraction: asked {asked}, used {used} (the smallest held-out subset of the "
          f"training videos that builds its 1-vs-{stats['config']['pool_size']} pools; --config.strict=True refuses "
          "instead)", flush=True)
  stats["dropped_videos"] = {"count": len(dropped), "ids": dropped[:100],
                             "rule": config.data.available_videos or
                             ("no features in the store" if config.data.skip_missing else "")}
  if dropped:
    print(f"dropped {len(dropped)} videos before building the benchmark ({stats['dropped_videos']['rule']}): "
          f"{', '.join(dropped[:5])}{' ...' if len(dropped) > 5 else ''}", flush=True)
  print(("SYNTHETIC DATA: " if is_synthetic else "") + "CVR benchmark statistics (Table 1 shape)")
  print(cvr.format_stats(stats), end="\n\n", flush=True)
  truth = procedural.read_truth(store.root)  # a world's side file beside its store; {} beside a user's
  return CVRData(is_synthetic, store, files.benchmark, files.heldout, files.train, stats,
                 {k: int(v) for k, v in truth.get("reuse_gap", {}).items()},
                 features=store.metadata, videos=list(videos), skipped=dropped)


def result_path(config, workdir, data) -> dict:
  """results.json's `path` keys: a store's (`provenance.real_path`: "world" for a store a world wrote), or a TFDS
  dataset's."""
  del config  # the data say where they came from
  if data.arrays is not None:
    return {"path": "real", "provenance": dict(data.features), "skipped_videos": {"count": 0, "file": ""}}
  return provenance.real_path(workdir, data.store, data.skipped)


def names(config, data) -> dict[str, str]:
  """How a run names its data: {"dataset": results.json's and the tables' dataset label, "space": the feature
  space, as `evaluate_all` compares runs}. A store that says how it wants to be named (`description`, `space`: the
  procedural world's do) is named so; a synthetic one without (the rendered corpus's) says so."""
  meta = data.features
  description = meta.get("description") or ("synthetic rendered videos" if data.synthetic else "")
  space = meta.get("space") or (f"{meta.get('backbone') or 'stored'} features of "
                                f"{config.data.features or config.dataset}")
  return {"dataset": config.dataset + (f" ({description})" if description else ""), "space": space}


def setup(config, workdir: Path, finished: bool = False):
  """(data, clip table, text table, benchmark arrays, held-out arrays, training source) of a run (`finished`: read
  a finished run's files, write nothing)."""
  data = prepare_data(config, workdir, finished)
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


# ----------------------------------------------------------------------------------------------
# Models and training.


def build_models(config, dim: int) -> dict[str, Any]:
  """The trainable methods of Table 2 / Table 4, keyed by results.json method name."""
  dtype = jnp.dtype(config.model.compute_dtype)
  m = config.model
  check_heads(config, dim, "the features' width")
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
  state = train.fit_epochs(
      name=name, init_fn=lambda rng: model.init(rng, *dummy)["params"], loss_fn=make_loss_fn(model, config.train),
      num_examples=len(source), batch_fn=source.rows, gather=source.gather, tcfg=config.train, seed=config.seed,
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
  """Benchmark queries split by whether the target reuses a carried object (the world truth's `reuse_gap`: history
  worlds only; {} without)."""
  if not data.reuse_gap:
    return {}
  reuse = np.array([r["target"] in data.reuse_gap for r in data.benchmark])
  return {"reuse": reuse, "non_reuse": ~reuse}


def gap_accuracy(scores: np.ndarray, arrays, data: CVRData) -> dict[str, float]:
  """Acc on reuse queries by the gap from "prepare m" to "use m" (history worlds; {} without reuse queries)."""
  gaps = np.array([data.reuse_gap.get(r["target"], 0) for r in data.benchmark])
  ranks = metrics.rank_of_target(scores, arrays["target_index"])
  return {f"gap={g}": round(float(100.0 * np.mean(ranks[gaps == g] == 1)), 4) for g in sorted(set(gaps) - {0})}


def evaluate_methods(models: Mapping[str, Any], params: Mapping[str, Any], data: CVRData, bench, heldout,
                     config) -> dict:
  """Every method of Table 2 / Table 4 on the benchmark, CAST as its Full Ensemble with (w_v, w_p) selected on the
  held-out subset only; every next-state predictor (`ADAPTERS`) also under both rules, each with its own held-out
  coefficients: its prediction alone (S = C) and the Full Ensemble (S = A + w_v·B + w_p·C, eq. 13).

  Returns {"scores": {method: [Q, C]}, "metrics", "top1_breakdown", "inference_ablation" (Table 5),
  "fair_comparison", "subsets" (reuse / non-reuse queries, history worlds; else {}), "scorer" (CAST's
  EnsembleScorer)}."""
  chunk = config.eval.chunk
  late = models["late_fusion_learned"]
  scorers = {
      "zero_shot": cast_scorers.ZeroShotScorer(),
      "late_fusion_heuristic": cast_scorers.LateFusionHeuristicScorer(config.model.late_fusion_alpha),
      "late_fusion_learned": cast_scorers.LateFusionLearnedScorer(
          lambda p, *args: late.apply({"params": p}, *args, method="score"), params["late_fusion_learned"]),
  }
  inputs = {k: v for k, v in bench.items() if k not in evaluate.CVR_LABEL_KEYS}
  scores = {name: evaluate.score_pools(scorers[name], inputs, chunk) for name in scorers}
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
  w_v, w_p, held = weights["cast"]
  fair = {"prediction_only": {n: pool_metrics(prediction_only[n], bench)[0] for n in ADAPTERS},
          "same_ensemble": {n: dict(pool_metrics(same_ensemble[n], bench)[0], w_v=weights[n][0], w_p=weights[n][1])
                            for n in ADAPTERS}}
  subsets = {subset: {
      "n": int(mask.sum()),
      "metrics": {n: pool_metrics(scores[n], bench, mask)[0] for n in METHODS},
      "prediction_only": {n: pool_metrics(prediction_only[n], bench, mask)[0] for n in ADAPTERS},
      "same_ensemble": {n: pool_metrics(same_ensemble[n], bench, mask)[0] for n in ADAPTERS},
  } for subset, mask in query_subsets(data).items()}
  return {"scores": scores, "metrics": {name: m for name, (m, _) in evaluated.items()},
          "top1_breakdown": {name: b for name, (_, b) in evaluated.items()},
          "inference_ablation": inference_ablation(comps["cast"], held, w_v, w_p, heldout, bench, config),
          "fair_comparison": fair, "subsets": subsets, "scorer": scorers["cast"]}


def train_source(data: CVRData, clips: FeatureTable, texts: FeatureTable, context_len: int,
                 config) -> cvr.CVRTrainSource:
  """The training instances with `context_len` context clips (the Figure-6 sweep trains one CAST per L)."""
  t = config.train
  return cvr.CVRTrainSource(data.instances, clips, texts, context_len, t.num_state_negatives,
                            t.num_identity_negatives, t.zero_negatives_in_loss)


def evaluate_context_length(model, params, bench, heldout, context_len: int, config) -> tuple[dict, np.ndarray]:
  """(metrics, scores [Q, C]) of a CAST trained with `context_len` context clips, as its Full Ensemble with its own
  held-out (w_v, w_p), on the benchmark cut to that many context clips (Figure 6)."""
  scorer, _ = ensemble(model, params, cvr.truncate_context(heldout, context_len), config)
  short = cvr.truncate_context(bench, context_len)
  scores = evaluate.score_pools(scorer, {k: v for k, v in short.items() if k not in evaluate.CVR_LABEL_KEYS},
                                config.eval.chunk)
  return pool_metrics(scores, short)[0], scores


def diagnostics(evaluation: Mapping[str, Any], sweep_gaps: Mapping[int, Mapping[str, float]]) -> dict:
  """results.json's world-only keys: the reuse / non-reuse query split and CAST's Acc on reuse queries by gap for
  each context length; {} on data without the world truth they read."""
  if not evaluation["subsets"]:
    return {}
  return {"subsets": evaluation["subsets"],
          "context_sweep_reuse_by_gap": {str(k): v for k, v in sorted(sweep_gaps.items())}}


def tables(results: Mapping[str, Any], synthetic: bool) -> list[str]:
  """The printed tables of a run's results: Table 2 / 4, the like-with-like comparison, Figure 5, Table 5,
  Figure 6 and, with world truth, the reuse-query tables."""
  dataset, fair, w = results["dataset"], results["fair_comparison"], results["ensemble"]
  fair_rows = {f"{n} ({rule})": m for rule, rows in (("C only", fair["prediction_only"]),
                                                       ("ensemble", fair["same_ensemble"]))
               for n, m in rows.items()}
  breakdown = results["top1_breakdown"]
  out = [
      evaluate.format_table(results["metrics"], f"CVR benchmark ({dataset}), Table 2 / Table 4 shape", synthetic),
      evaluate.format_table(fair_rows, f"Adapters compared like with like ({dataset}): prediction alone and the "
                            "same Full-Ensemble rule, each with its own held-out (w_v, w_p)", synthetic),
      evaluate.format_table(breakdown, f"Top-1 choice ({dataset}), Figure 5 shape (% of queries)", synthetic,
                            columns=list(breakdown["cast"])),
      evaluate.format_table(results["inference_ablation"], f"Inference components ({dataset}), Table 5 shape; "
                            f"w_v={w['w_v']}, w_p={w['w_p']}", synthetic),
      evaluate.format_table({f"L={k}": v for k, v in results["context_sweep"].items()},
                            f"Context length sweep ({dataset}), Figure 6 shape", synthetic),
  ]
  for subset, values in results.get("subsets", {}).items():
    rows = dict(values["metrics"], **{f"{n} (C only)": m for n, m in values["prediction_only"].items()})
    out.append(evaluate.format_table(rows, f"{subset} queries only (n={values['n']}) ({dataset})", synthetic))
  gaps = results.get("context_sweep_reuse_by_gap", {})
  if gaps:
    out.append(evaluate.format_table({f"L={k}": v for k, v in gaps.items()},
                                     f"CAST Acc on reuse queries by prepare-to-use gap ({dataset}); the "
                                     "prepare clip is in the context when gap <= L", synthetic))
  return out


def suite(config, workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """A finished run's CAST (Full Ensemble, with the (w_v, w_p) its results.json recorded, restored from its
  checkpoint) and the zero-shot dual encoder on its CVR benchmark (`configs/evaluate_all.py`). Nothing trains.

  `config` names the data the run read (a world run's files: `experiments.common.recorded_world_data`). CAST's scorer
  reads the query's visual history, so it takes the CVR pools only; the zero-shot cosine reads the space's raw
  embeddings, so it takes them too."""
  workdir = Path(workdir)
  results = io.read_json(workdir / "results.json", "results file")
  data, clips, _, bench, _, _ = setup(config, workdir, finished=True)
  params = train.load_params(workdir / "train" / "cast")
  w = results["ensemble"]
  scorer = cast_scorers.EnsembleScorer(predictor_scorer(build_models(config, clips.dim)["cast"], params),
                                       w["w_v"], w["w_p"])
  space = names(config, data)["space"]
  no_history = "CAST scores a candidate from the query's visual history (CVR pools); this benchmark has none"
  cvr_of = lambda s: (lambda arrays: evaluate.evaluate_cvr(s, arrays, config.eval.chunk))  # noqa: E731
  return ([evaluate.Model("cast", space, {"cvr": cvr_of(scorer)},
                          {k: no_history for k in evaluate.BENCHMARK_KINDS if k != "cvr"}, evaluate.EMBEDDINGS),
           evaluate.Model("zero_shot", space, {"cvr": cvr_of(cast_scorers.ZeroShotScorer())},
                          keys=evaluate.EMBEDDINGS)],
          [evaluate.Benchmark(f"CVR ({config.dataset})", "cvr", space, bench, data.synthetic, evaluate.EMBEDDINGS)])
