"""CAST as a method (../shared/papers/cast.txt §2.2-2.4, App. B): the CVR data of a run, its models and baselines
built from a config, their type-aware contrastive loss in the one train loop, and the Full-Ensemble scorer (eq. 13).

    data, clips, texts, bench, heldout, source = setup(config, workdir)      # CVR files + feature tables
    models = build_models(config, clips.dim)                                  # Table 2 / Table 4's trainable methods
    params = train_method("cast", models["cast"], source, config, workdir, mesh)   # <workdir>/train/cast
    scorer, held = ensemble(models["cast"], params, heldout, config)          # (w_v, w_p) on held-out data only

`configs/cast_*.py` (the CAST experiment) and `configs/stack_*.py` (its CAST half) both read a run this way.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from vidjax import losses, sharding, train
from vidjax.data import cvr
from vidjax.data.annotations import read_annotations
from vidjax.data.features import FeatureStore
from vidjax.data.pipeline import FeatureTable
from vidjax.defaults import common
from vidjax.methods import real
from vidjax.defaults.cast import DATASETS
from vidjax.models import cast as cast_models
from vidjax.scorers import cast as cast_scorers
from vidjax.worlds import procedural


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
  if not config.data.annotations and config.data.source == "store":  # the world's width is known before any work
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


def _check_batch_size(config, files: cvr.CVRFiles) -> None:
  if len(files.train) < config.train.batch_size:
    raise ValueError(f"config.train.batch_size={config.train.batch_size} is invalid: expected at most the "
                     f"{len(files.train)} training instances of this {config.dataset} benchmark (checked before any "
                     "file is written)")


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
  """Reads or generates the videos, writes the CVR files to `<workdir>/cvr` (process 0; the others read them),
  opens the store. `finished`: a finished run's files are read as they are, nothing is written."""
  if config.data.source == "tfds":
    return tfds_data(config)
  out = workdir / "cvr"
  names = cvr.file_names(config.dataset)
  rules = lambda: dict(identity_rule=config.data.identity_rule, embed_fn=_embed_fn(config),  # noqa: E731
                       context_len=config.model.context_len, heldout_fraction=config.data.heldout_fraction,
                       seed=config.seed, check=lambda files: _check_batch_size(config, files))
  if not config.data.annotations:
    world = procedural.make_procedural_world(procedural.world_config_from(config.world, config.data.world),
                                             seed=config.seed)
    if config.data.clip_kind != "clip" or config.data.text_kind != "text":
      raise ValueError("the synthetic world writes kinds 'clip' and 'text'; leave data.clip_kind/text_kind as is")
    videos, dropped, reuse_gap = world.train_videos + world.eval_videos, [], world.reuse_gap

    def build():  # the CVR files first: their check (batch size) runs before anything is written
      files = cvr.build_cvr(world.train_videos, world.eval_videos, out, eval_name=names[0], train_name=names[1],
                            **(cvr.DATASET_RULES[config.dataset] | rules()))
      procedural.write_store(world, workdir / "features", seed=config.seed, world_name=config.data.world)
      return files
    store = None
  else:
    store = FeatureStore(config.data.features)
    real.check_store(workdir, store, (config.data.clip_kind, config.data.text_kind))
    videos, dropped = cvr.available_videos(read_annotations(config.dataset, config.data.annotations), store,
                                           (config.data.clip_kind, config.data.text_kind),
                                           config.data.available_videos, config.data.skip_missing)
    reuse_gap = {}
    build = lambda: cvr.build_dataset_cvr(  # noqa: E731
        config.dataset, videos, out, source=config.data.annotations, train_split=config.data.train_split,
        eval_split=config.data.eval_split, crosstask_split_seed=config.data.crosstask_split_seed,
        crosstask_test_fraction=config.data.crosstask_test_fraction, **rules())
  files = (None if finished else sharding.on_writer("vidjax_cast_cvr", build)) or cvr.read_cvr(out, config.dataset)
  store = store or FeatureStore(workdir / "features")
  is_synthetic = not config.data.annotations or bool(store.metadata.get("synthetic", False))
  stats = dict(files.stats)
  stats["dropped_videos"] = {"count": len(dropped), "ids": dropped[:100],
                             "rule": config.data.available_videos or
                             ("no features in the store" if config.data.skip_missing else "")}
  if dropped:
    print(f"dropped {len(dropped)} videos before building the benchmark ({stats['dropped_videos']['rule']}): "
          f"{', '.join(dropped[:5])}{' ...' if len(dropped) > 5 else ''}", flush=True)
  print(("SYNTHETIC DATA: " if is_synthetic else "") + "CVR benchmark statistics (Table 1 shape)")
  print(cvr.format_stats(stats), end="\n\n", flush=True)
  return CVRData(is_synthetic, store, files.benchmark, files.heldout, files.train, stats, reuse_gap,
                 features=store.metadata, videos=list(videos), skipped=dropped)


def result_path(config, workdir, data) -> dict:
  """results.json's `path` keys: the embedded world, a user's store, or a TFDS dataset built from one."""
  if data.arrays is not None:
    return {"path": "real", "provenance": dict(data.features), "skipped_videos": {"count": 0, "file": ""}}
  if not config.data.annotations:
    return real.WORLD_PATH
  return real.real_path(workdir, data.store, data.skipped)


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
