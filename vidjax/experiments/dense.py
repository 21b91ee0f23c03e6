"""Dense baselines: CLIP4Clip (meanP, seqTransf) and X-Pool trained on a store's frame features, each evaluated alone
over the whole test corpus beside the frozen backbone's cosine.

`run(config, workdir)`:
  1. data: the dataset's test and training annotations through their readers and a feature store (kinds `frame_clip`
     per-frame features, `clip`, `text`); with no `data.features` the run first writes the embedded SYNTHETIC
     moving-object world as the dataset's release files and store under `<workdir>/world`
     (`vidjax.worlds.moving_objects.write_world`) and reads them the same way (`vidjax.methods.dense.session`);
  2. fit: each trained row of `config.rows` through the one loop (`vidjax.methods.dense.fit_dense`: the training
     captions as pseudo queries of their videos, symmetric InfoNCE), its checkpoints in `<workdir>/models/<row>`
     (a killed run resumes);
  3. evaluate: every row over the whole test corpus, T2V and V2T R@1/5/10, MdR, MnR (`backbone`: the store's text
     and clip embeddings by cosine; meanP / seqTransf: each video pooled once, then cosine; X-Pool: per (text,
     video) pair, in blocks of `eval.query_chunk` x `eval.gallery_chunk`);
  4. write: `<workdir>/results.json` with `metrics.<row>` and `train.<row>` (steps, batch, epochs, lr, seconds,
     parameters, evaluation seconds), and the table.
"""
from __future__ import annotations

import time
from pathlib import Path

from vidjax import evaluate
from vidjax.data import provenance
from vidjax.data.retrieval import PROTOCOLS
from vidjax.defaults.common import bad_value, check_choice, clip_to_data
from vidjax.experiments import common
from vidjax.methods.dense import (DATASETS, KEYS, backbone_metrics, check_config, checkpoint_row, fit_dense,
                                  from_checkpoint, limits, rounded, row_metrics, session)
from vidjax.worlds import moving_objects

RESUMABLE = ("rows",)  # a row added later trains in its own folder; finished rows resume from their checkpoints


def validate(config) -> None:
  check_choice(config, "dataset", tuple(DATASETS))
  check_choice(config, "data.protocol", PROTOCOLS)
  if not config.data.features and "world" not in config:
    bad_value("data.features", "", f"a feature store: the moving-object world writes no {config.dataset} release "
              "files")
  if config.data.features and not (config.data.annotations and config.data.train_annotations):
    bad_value("data.annotations / data.train_annotations", (config.data.annotations, config.data.train_annotations),
              "the test and training splits' annotation files when data.features is set")
  check_config(config)
  if config.init_checkpoint:  # a converted checkpoint of one of the rows (read before any work)
    released = checkpoint_row(config.init_checkpoint)[0]
    if released not in config.rows:
      bad_value("init_checkpoint", config.init_checkpoint, f"a checkpoint of one of the rows {tuple(config.rows)} "
                f"(it holds {released}'s weights)")


@common.precision_policy
def run(config, workdir: str | Path) -> dict:
  """Trains and evaluates every row of `config.rows`; returns (and writes) the results dict."""
  workdir = common.start_run(config, workdir, validate, RESUMABLE)
  start = time.time()
  # Data: annotations + a store (a user's, or those the moving-object world writes first).
  config = common.world_data(config, workdir, moving_objects.write_world)
  s = session(config, workdir)
  config, clipped = clip_to_data(config, limits(len(s.train.query_ids)))  # batch sizes past the training set
  s.config = config
  where = f"feature store {config.data.features}"
  common.check_informative(s.test.text, "query text", f"{where} kind {config.data.text_kind!r}")
  common.check_informative(s.test.frames, "video frame", f"{where} kind {config.data.frames_kind!r}")
  print(("SYNTHETIC DATA: " if s.synthetic else "") + f"dense baselines on {s.dataset}: " +
        ", ".join(f"{k}={v}" for k, v in s.stats.items()) + f", {s.test.frames.shape[1]} frames of width "
        f"{s.test.frames.shape[2]}", flush=True)

  # Fit (or take a converted official checkpoint's weights) and evaluate each row.
  released = checkpoint_row(config.init_checkpoint)[0] if config.init_checkpoint else None
  metrics, trained = {}, {}
  for row in config.rows:
    if row == "backbone":
      metrics[row] = rounded(backbone_metrics(s))
      continue
    if row == released:
      model, params, info = from_checkpoint(config, row, s.train, config.init_checkpoint)
    else:
      with common.precision(config, "train"):
        model, params, info = fit_dense(config, row, s.train, config.seed, workdir / "models" / row)
    begin = time.time()
    metrics[row] = rounded(row_metrics(s, model, params))
    trained[row] = {**info, "eval_seconds": round(time.time() - begin, 1)}
    done = (f"trained {info['steps']} steps in {info['seconds']} s" if info.get("trained", True) else
            f"the released weights of {info['checkpoint']} (converted from {info['from']}), not trained")
    print(f"{row}: T2V R@1 {metrics[row]['t2v_r1']}, {done}", flush=True)

  # Write.
  results = common.results_dict(
      config, dataset=s.dataset, synthetic=s.synthetic, metrics=metrics, clipped=clipped, **s.path,
      benchmark={**s.stats, "frames": int(s.test.frames.shape[1]), "frame_dim": int(s.test.frames.shape[2]),
                 "text_dim": int(s.test.text.shape[1])},
      train=trained, features={**{k: s.store.metadata.get(k) for k in ("checkpoint_hash", "random_init")},
                               "backbone": provenance.backbone_as_built(s.store.metadata)})
  results["seconds"] = round(time.time() - start, 1)
  title = (f"Dense baselines on {s.dataset}, each alone over the whole corpus: {len(s.test.query_ids)} queries x "
           f"{len(s.test.video_ids)} videos")
  tables = [evaluate.format_table(metrics, title, s.synthetic, columns=list(KEYS))]
  if trained:
    tables.append(evaluate.format_table(trained, "Training (the one loop)", s.synthetic,
                                        columns=["steps", "batch_size", "epochs", "params", "seconds",
                                                 "eval_seconds"]))
  common.write_results(workdir, results, tables)
  return results
