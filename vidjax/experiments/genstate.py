"""GenState-AI: order-blind zero-shot and an order-aware VidCLIP on state-transition triplets.

`run(config, workdir)` reads one kind of data: a GenState metadata file (`data.metadata`, `vidjax.data.genstate`)
and a feature store (`data.features`, e.g. prepared by `configs/prepare.py --config.dataset=genstate`), with
`data.train_metadata` the training triplets. Left empty, the rendered SYNTHETIC world writes exactly that under
`<workdir>/world` first (`experiments.common.world_data` -> `methods.genstate.write_world`: mp4 clips, the
metadata files `genstate_{train,test}.json`, a store extracted through the one extraction with the STAND-IN
pixel-statistics backbone, or VideoPrism when `extract.model.checkpoint` is given), then the run reads it as a
user's. Then:
  1. `zero_shot`: the cosine of the store's `data.text_kind` per query and `data.video_kind` per clip;
  2. `vidclip` (with training triplets): VidCLIP trained on their clips with NegCLIP hard negatives (one loop,
     `<workdir>/models/vidclip`, resumable);
  3. §5.1 pools per subset and the §4.3 metrics (`evaluate.evaluate_triplet_pools`), the Table-3-shaped
     table, the order histogram as `<workdir>/order_histogram.png` (Figures 3-4) and `results.json`:
     {"metrics": {method: {r1, r5, r10, acc_temp, acc_sem, acc_tri (%), order_histogram (counts)}},
      "subsets": {subset: {method: {...}}}, "counts", "decode", "path" ("world" | "real"), "provenance"}.
`evaluate_all` reads a finished run through `vidjax.methods.genstate.suite`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from vidjax import evaluate, losses
from vidjax import progress as progress_lib
from vidjax.defaults.common import (bad_value, check_choice, check_fraction, check_passes, check_positive,
                                    check_positive_int, clip_to_data)
from vidjax.experiments import common
from vidjax.methods import genstate as method
from vidjax.methods import vidclip
from vidjax.data.provenance import real_path
from vidjax.models import pixelstats

# Besides `common.is_resumable`'s rule: the extraction's batching does not change the features it writes.
RESUMABLE = ("extract.batch_size", "extract.decode_workers", "extract.text_batch_size")


def validate(config) -> None:
  if bool(config.data.metadata) != bool(config.data.features):
    bad_value("data.metadata", config.data.metadata, "set together with data.features (a user's benchmark) "
                     "or both empty (the rendered world)")
  if config.data.train_metadata and not config.data.metadata:
    bad_value("data.train_metadata", config.data.train_metadata, "set with data.metadata and data.features "
                     "(a user's benchmark); the rendered world brings its own training triplets")
  try:
    method.world_config(config)
  except (TypeError, ValueError) as e:
    raise ValueError(f"config.world: {e}") from None
  check_positive_int(config, [f"model.{k}" for k in (
      "frames", "width", "pool_queries", "pool_heads", "pool_mlp", "embed_dim", "text_hidden", "text_layers",
      "text_heads", "text_mlp", "max_text_len")])
  vidclip.check_text_tower(config, "model")
  check_choice(config, "model.frame_input", ("frame", "patches"))
  common.compute_dtype(config, "model.dtype")
  check_fraction(config, "model.init_temperature")
  check_positive_int(config, [f"train.{k}" for k in ("batch_size", "group", "steps", "checkpoint_every",
                                                           "log_every")])
  check_positive(config, ["train.lr"])
  check_passes(config, "train")
  check_choice(config, "train.mode", losses.COMP_MODES)
  if config.train.batch_size % config.train.group:
    bad_value("train.batch_size", config.train.batch_size, f"a multiple of train.group={config.train.group}")
  if config.train.group not in (1, 3):
    bad_value("train.group", config.train.group, "1 (shuffled clips) or 3 (a query's three clips together)")
  check_positive_int(config, ["eval.chunk", "extract.batch_size", "extract.decode_workers"])
  if config.extract.model.name == pixelstats.NAME and config.extract.model.checkpoint:
    bad_value("extract.model.name", pixelstats.NAME, "a VideoPrism model name with extract.model.checkpoint")
  if config.extract.model.name != pixelstats.NAME and not config.extract.model.checkpoint:
    bad_value("extract.model.checkpoint", "", f"a VideoPrism checkpoint for {config.extract.model.name!r} "
                     f"(or extract.model.name={pixelstats.NAME!r}, the stand-in)")


def write_world(config, root: Path) -> dict[str, str]:
  """The rendered world as a user's files (`methods.genstate.write_world`), extracted at `precision.extract`."""
  bar = None if not config.progress else lambda total: progress_lib.bar(total, "render clips", "clip")
  with common.precision(config, "extract"):
    return method.write_world(config, root, bar)


def plot_order_histogram(by_method: Mapping[str, Mapping[str, Mapping[str, int]]], path: Path, synthetic: bool) -> Path:
  """Figures 3-4: per panel (all queries, then each subset) the share of queries in each ordering, per method."""
  plt = common.pyplot()
  from vidjax import metrics  # pylint: disable=g-import-not-at-top

  panels = list(next(iter(by_method.values())))
  fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.2), dpi=110, sharey=True, squeeze=False)
  orders = metrics.TRIPLET_ORDERS
  width = 0.8 / len(by_method)
  for ax, panel in zip(axes[0], panels):
    for i, (name, hists) in enumerate(by_method.items()):
      counts = np.array([hists[panel][o] for o in orders], np.float64)
      ax.bar(np.arange(len(orders)) + (i - (len(by_method) - 1) / 2) * width, 100 * counts / max(counts.sum(), 1),
             width, label=name)
    ax.set_xticks(np.arange(len(orders)), [">".join(o) for o in orders], rotation=45, fontsize=7)
    ax.set_title(f"{panel} (n={int(sum(next(iter(by_method.values()))[panel].values()))})", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
  axes[0][0].set_ylabel("% of queries (M=main, T=temporal, S=semantic)")
  axes[0][0].legend(fontsize=7)
  fig.suptitle(("SYNTHETIC: " if synthetic else "") + "GenState relative-order histogram (Figs. 3-4 shape)", fontsize=9)
  return common.save_figure(fig, path)


@common.precision_policy
def run(config, workdir: str | Path) -> dict:
  workdir = common.start_run(config, workdir, validate, RESUMABLE)
  config = common.world_data(config, workdir, write_world)
  data = method.load(config)
  config, clipped = clip_to_data(config, method.limits(config, data))  # sizes fit the data, before any file
  encoders = method.encoders(config, workdir, data, precision=common.precision(config, "train"))
  overall, subsets = method.evaluate_methods(config, data.test, encoders)

  synthetic, dataset = bool(data.store.metadata.get("synthetic", False)), method.benchmark_name(config)
  rows = {"all": overall, **subsets}
  table = {f"{subset} / {name}": m for subset, by in rows.items() for name, m in by.items()}
  printed = [evaluate.format_table(table, f"GenState triplets on {dataset} ({data.store.metadata.get('backbone')} "
                                   "features; Table 3 shape; %)", synthetic, list(method.METRICS))]
  plot_order_histogram({m: {subset: by[m]["order_histogram"] for subset, by in rows.items()} for m in overall},
                       workdir / "order_histogram.png", synthetic)
  results = common.results_dict(config, dataset=dataset, synthetic=synthetic, metrics=overall, clipped=clipped,
                                subsets=subsets,
                                **method.results_keys(data), **real_path(workdir, data.store, data.skipped))
  common.write_results(workdir, results, printed)
  return results
