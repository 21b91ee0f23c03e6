"""CAST end to end: CVR benchmark, adapter and baselines, training, Full-Ensemble evaluation.

CAST paper (../shared/papers/cast.txt): §2.2 benchmark protocol, §2.3 adapter, §2.4 loss and
inference, §3.1 baselines and metrics, §3.3 ablations (Tables 4, 5, Figure 6), App. B settings.

`run(config, workdir)` reads as validate -> data -> fit -> evaluate -> write:
  1. data: release-format annotations + a feature store (`data.annotations`, `data.features`): a user's, or, when
     the config names none, the ones the embedded procedural world writes under `<workdir>/world` (its release
     files for `config.dataset`, its store, `world_truth.json`; `vidjax.worlds.procedural.write_world`); or
     (`data.source = "tfds"`) a built `vidjax.tfds.cvr.VidjaxCvr` dataset. From them the CVR files by the paper's
     rules (`vidjax.methods.cast.setup`): the 1-vs-9 benchmark, the training instances, a held-out subset;
  2. fit: Late Fusion (Learned), Early Fusion (direct / residual) and CAST with the one train loop
     (`vidjax.train.fit`), each in `<workdir>/train/<method>` (resumable);
  3. evaluate: the Full-Ensemble coefficients selected on the held-out subset only, every method on the benchmark
     (`methods.cast.evaluate_methods`), the context-length sweep L in {0..5} (Figure 6, one CAST per L);
  4. write: `<workdir>/results.json`, the tables, `context_sweep.png` and `top1_breakdown.png`.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping

import numpy as np

from vidjax import sharding
from vidjax.data import provenance
from vidjax.experiments import common
from vidjax.methods import cast
from vidjax.worlds import procedural

# What besides `common.is_resumable`'s rule may change between runs in one workdir: more epochs resume training.
RESUMABLE = ("train.epochs",)


@common.precision_policy
def run(config, workdir: str | Path) -> dict:
  """Runs the whole CAST experiment; returns (and writes) the results dict."""
  workdir = common.start_run(config, workdir, cast.validate, RESUMABLE)
  start = time.time()
  # A world is written as a user's files, once (a TFDS dataset carries its records and embeddings itself).
  data_config = config if config.data.source == "tfds" else common.world_data(config, workdir, procedural.write_world)
  data, clips, texts, bench, heldout, source = cast.setup(data_config, workdir)
  ran = config.copy_and_resolve_references()  # results.json's config: the identity rule that ran (a world's own)
  ran.data.identity_rule = data_config.data.identity_rule
  config, clipped = cast.fit_to_data(ran, data)  # sizes fit the data
  seconds = {"data": time.time() - start, "train": 0.0}  # host stages vs the training loops (BENCHMARKS "On one GPU")

  mesh = sharding.make_mesh()
  models = cast.build_models(config, clips.dim)
  clock = time.time()
  with common.precision(config, "train"):
    params = {name: cast.train_method(name, model, source, config, workdir, mesh) for name, model in models.items()}
  seconds["train"] += time.time() - clock

  evaluation = cast.evaluate_methods(models, params, data, bench, heldout, config)
  sweep, sweep_gaps = {}, {}
  for length in config.sweep.context_lengths:
    if length == config.model.context_len:
      sweep[length], scores = evaluation["metrics"]["cast"], evaluation["scores"]["cast"]
    else:
      clock = time.time()
      with common.precision(config, "train"):
        p = cast.train_method(f"cast_L{length}", models["cast"], cast.train_source(data, clips, texts, length, config),
                              config, workdir, mesh)
      seconds["train"] += time.time() - clock
      sweep[length], scores = cast.evaluate_context_length(models["cast"], p, bench, heldout, length, config)
    sweep_gaps[length] = cast.gap_accuracy(scores, bench, data)

  names = cast.names(data_config, data)
  scorer = evaluation["scorer"]
  results = common.results_dict(
      config, dataset=names["dataset"], synthetic=data.synthetic, metrics=evaluation["metrics"], clipped=clipped,
      ensemble={"w_v": scorer.w_v, "w_p": scorer.w_p, "selected_on": "heldout subset of train"},
      top1_breakdown=evaluation["top1_breakdown"],
      inference_ablation=evaluation["inference_ablation"],
      fair_comparison=evaluation["fair_comparison"],
      context_sweep={str(k): v for k, v in sorted(sweep.items())},
      **cast.diagnostics(evaluation, sweep_gaps),
      benchmark_stats=data.stats,
      features={**{k: data.features.get(k) for k in ("checkpoint_hash", "random_init")},
                "backbone": provenance.backbone_as_built(data.features)},
      data={"annotations": data_config.data.annotations, "features": data_config.data.features},
      **cast.result_path(data_config, workdir, data),
      seconds=round(time.time() - start, 1),
      stage_seconds={**{k: round(v, 1) for k, v in seconds.items()},
                     "evaluate": round(time.time() - start - sum(seconds.values()), 1)})
  print("stages (s): " + ", ".join(f"{k} {v}" for k, v in results["stage_seconds"].items()), flush=True)
  if len(sweep) > 1:
    plot_context_sweep(sweep, workdir / "context_sweep.png", title=names["dataset"], synthetic=data.synthetic)
  plot_top1_breakdown(results["top1_breakdown"], workdir / "top1_breakdown.png", title=names["dataset"],
                      synthetic=data.synthetic)
  common.write_results(workdir, results, cast.tables(results, data.synthetic))
  return results


def plot_context_sweep(sweep: Mapping[int, Mapping[str, float]], path: Path, title: str, synthetic: bool) -> Path:
  """Figure 6: Acc, State Acc and Ident Acc against the context length L, saved as PNG."""
  plt = common.pyplot()
  lengths = sorted(sweep)
  fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
  for key, label in (("acc", "Acc."), ("state_acc", "State Acc."), ("ident_acc", "Ident. Acc.")):
    ax.plot(lengths, [sweep[L][key] for L in lengths], marker="o", label=label)
  ax.set_xlabel("context length L")
  ax.set_ylabel("%")
  ax.set_xticks(lengths)
  ax.grid(alpha=0.3)
  ax.legend()
  ax.set_title(("SYNTHETIC: " if synthetic else "") + f"CAST vs context length, {title}", fontsize=9)
  return common.save_figure(fig, path)


def plot_top1_breakdown(breakdown: Mapping[str, Mapping[str, float]], path: Path, title: str, synthetic: bool) -> Path:
  """Figure 5: per method, the % of queries whose top-1 is exact / same video / another video."""
  plt = common.pyplot()
  methods = list(breakdown)
  parts = (("top1_exact", "Exact match", "tab:green"),
           ("top1_identity_consistent", "Identity consistent, state misaligned", "tab:blue"),
           ("top1_identity_inconsistent", "Identity inconsistent", "tab:gray"))
  fig, ax = plt.subplots(figsize=(6.5, 3.5), dpi=120)
  left = np.zeros(len(methods))
  for key, label, color in parts:
    values = np.array([breakdown[m][key] for m in methods])
    ax.barh(methods, values, left=left, color=color, label=label)
    left += values
  ax.set_xlim(0, 100)
  ax.set_xlabel("% of queries (top-1 choice)")
  ax.invert_yaxis()
  ax.legend(fontsize=7, loc="lower right")
  ax.set_title(("SYNTHETIC: " if synthetic else "") + f"Top-1 breakdown (CAST Fig. 5 shape), {title}", fontsize=9)
  return common.save_figure(fig, path)
