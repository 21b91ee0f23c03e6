"""GRDR: multi-view tokenizer + generative retriever (progressive co-training), trie recall, dense rerank.

`run(config, workdir)`:
  1. data: release-format caption files and a feature store (`methods.grdr.read_corpus`: training captions as
     pseudo queries, the store's text embeddings for the intents and the rerank, the query text for the T5
     encoder, the per-frame features `data.frames_kind` of the dense rows and the X-Pool rerank), a user's or the
     ones the embedded SYNTHETIC polysemous world writes under `<workdir>/world` (the `world` variant:
     `vidjax.worlds.polysemous.write_world` through `common.world_data`). A store without the frames kind is one
     error naming `data.frames_kind` before any training, unless the run needs none (`eval.reranker=
     "dense_backbone"` and `eval.dense_rows=()`: the backbone's cosine alone, as before the trained rows existed);
  2. Tables 1-2's dense rows (`eval.dense_rows`, and X-Pool when it reranks): CLIP4Clip (seqTransf, the paper's
     CLIP4Clip row; each row's results name its model, `model`) and X-Pool trained on the training captions with
     the one loop (`methods.dense.fit_dense`, section `dense`), checkpointed under `<workdir>/models/<row>/`; each
     row alone over the pool, beside the frozen backbone's cosine (`dense_backbone`);
  3. query intents: each training video's queries are clustered by k-means into N_v intents (§3.2), once per N_v;
  4. training, one row of Tables 1-3 at a time (`methods.grdr.recipes`: the config's schedule, Algorithm 1 as its
     authors run it (`train.algorithm1`; results.json's `algorithm1` lists every official setting it follows, with
     its source), N_v = 1, Table 3's ablations), each phase one call of the train loop, checkpointed under
     `<workdir>/models/<row>/<phase>/` (a killed run resumes into its phase); equal recipes train once; then the GR
     baselines TIGER, AVG and T2VIndexer (`methods.grdr_baselines`, `eval.baselines`);
  5. indexing: every pool video's semantic IDs -> `SemanticIdTrie`;
  6. retrieval per setting ("inductive": the test videos; "full_corpus": all videos): generative
     recall (beam search of `eval.beam_width` routes, their IDs expanded to videos and de-duplicated in beam order, at
     most `eval.candidates` handed on, or every one when 0; `grdr_cap<N>`: the main model capped) then the rerank of
     every candidate by `eval.reranker` (X-Pool by default, over the candidates' frames; results' `reranker`) through
     `TwoStage`, the other reranker a second reading of the same candidates (`readings.<name>`: R@1/5/10,
     latency_ms); R@1/5/10,
     candidate recall, mean candidates, latency per stage at batch 1 ("total" = T_recall + T_rerank, §4.1), index
     bytes;
  7. codebook health, index bytes per video (Figure 4), the optional Figure 7 sweep (`:sweep`), a plot of candidate
     recall against the candidate budget, and `<workdir>/results.json`.
"""
from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import ml_collections
import numpy as np

from vidjax import evaluate, metrics
from vidjax.data.features import FeatureStore
from vidjax.defaults.common import (bad_value, check_choice, check_index, check_positive, check_positive_int,
                                    clip_to_data, fit_tables, get_key, with_values)
from vidjax.experiments import common
from vidjax.methods import grdr_baselines, grdr_release
from vidjax.methods import dense as dense_method
from vidjax.methods.grdr import (BACKBONE, DENSE_ROWS, HC_TARGETS, KMEANS_METRICS, LOSS_TERMS, PHASES, RERANKERS,
                                 SETTINGS, VIEW_ASSIGNMENTS, check_budget, dense_rows, dense_setting, evaluate_row,
                                 frames_reranker, limits, needs_frames, pair_setting, read_corpus, recall_curve,
                                 recipes, sweep_rows, train_dense, trained_row)
from vidjax.worlds.polysemous import write_world

RESUMABLE = ("sweep",)  # besides `common.is_resumable` (eval.*): a finished run re-evaluates, or adds the sweep, without retraining
# Tables 1-3's rows beside the main ones (GRDR, its capped reading, the backbone's cosine and the X-Pool that reranks),
# and the value that runs none: left out on too few test queries to read them (`fit_tables`)
TABLE_ROWS = {"eval.table3": False, "eval.baselines": False, "eval.compare_single_view": False, "eval.dense_rows": ()}
KEYS = ("t2v_r1", "t2v_r5", "t2v_r10", "candidate_recall", "num_candidates")


def validate(config) -> None:
  check_index(config)
  a1 = "train.algorithm1."
  check_positive_int(config, ("train.batch_size", a1 + "first_align_epochs", a1 + "cotrain_epochs", a1 + "kmeans_iters",
                              "train.kmeans_iters", "eval.beam_width", "eval.dense_candidates", "eval.latency_queries"))
  if config.eval.candidates < 0:
    bad_value("eval.candidates", config.eval.candidates, "0 (every video the beams bring) or a cap > 0")
  if config.eval.capped_row:
    check_positive_int(config, ("eval.capped_beam_width", "eval.capped_candidates"))
  check_choice(config, a1 + "hc_targets", HC_TARGETS)
  check_choice(config, a1 + "view_assignment", VIEW_ASSIGNMENTS)
  check_choice(config, a1 + "kmeans_metric", KMEANS_METRICS)
  check_choice(config, "eval.reranker", RERANKERS)
  bad = [r for r in config.eval.dense_rows if r not in DENSE_ROWS]
  if bad or len(set(config.eval.dense_rows)) != len(config.eval.dense_rows):
    bad_value("eval.dense_rows", tuple(config.eval.dense_rows), f"distinct rows of {tuple(DENSE_ROWS)}")
  if needs_frames(config):  # the dense rows' section (configs/dense/common.py)
    dense_method.check_section(config, "dense.")
  check_positive(config, (a1 + "lr", a1 + "codebook_lr_scale"))
  for key in (a1 + "align_epochs", a1 + "fit_epochs", a1 + "weight_decay", a1 + "grad_clip", a1 + "beta",
              "train.weight_decay"):
    if get_key(config, key) < 0:
      bad_value(key, get_key(config, key), "non-negative")
  if not 0 <= config.train.algorithm1.label_smoothing < 1:
    bad_value(a1 + "label_smoothing", config.train.algorithm1.label_smoothing, "in [0, 1)")
  for phase in PHASES:
    weights = tuple(config.train.algorithm1.phase_weights[phase])
    if len(weights) != len(LOSS_TERMS) or min(weights) < 0:
      bad_value(f"{a1}phase_weights.{phase}", weights, f"{len(LOSS_TERMS)} non-negative weights {LOSS_TERMS}")
  common.check_data_source(config, bool(config.data.features), f"configs/grdr_{config.dataset}.py")
  if config.model.num_codes < 2:
    bad_value("model.num_codes", config.model.num_codes, "at least 2 codes per codebook")
  check_choice(config, "model.query_encoder", ("t5", "minilm", "t5_features"))
  check_choice(config, "train.schedule", ("progressive", "tokenizer_first"))
  # The tokenizer's own training (tokenizer_first; TIGER's RQ-VAE row in every schedule): checked before any file.
  check_positive_int(config, ("train.view_epochs", "train.view_batch_size", "train.retriever_epochs"))
  check_positive(config, ("train.view_lr", "train.retriever_lr"))
  if config.init_checkpoint:  # converted official checkpoints (read before any work)
    grdr_release.vocab_size(config.init_checkpoint)
    if config.dense.init_checkpoint and dense_method.checkpoint_row(config.dense.init_checkpoint)[0] != "xpool":
      bad_value("dense.init_checkpoint", config.dense.init_checkpoint, "an X-Pool conversion (GRDR's reranker)")
  elif config.dense.get("init_checkpoint"):
    bad_value("dense.init_checkpoint", config.dense.init_checkpoint, "empty unless init_checkpoint names a released "
              "GRDR checkpoint (the X-Pool conversion reranks its candidates)")
  if config.train.schedule == "tokenizer_first":
    mc = config.model
    if mc.latent_dim != mc.query_dim:
      bad_value("model.latent_dim", mc.latent_dim,
                       f"equal to model.query_dim={mc.query_dim}: train.schedule='tokenizer_first' aligns the "
                       "views with query-cluster centres in the query space")


def released_run(config, workdir: Path, corpus, pools: dict, clipped: dict) -> dict:
  """The run of `config.init_checkpoint` (`vidjax.methods.grdr_release.evaluate`): its GRDR row (and X-Pool's alone
  with `dense.init_checkpoint`) in each setting, results.json's `released` says what was read."""
  table, info = grdr_release.evaluate(config, corpus, pools)
  synthetic = corpus.synthetic
  results = common.results_dict(config, dataset=config.dataset + (f" (synthetic {corpus.source})" if synthetic else ""),
                                synthetic=synthetic, metrics=table, clipped=clipped, released=info,
                                **{s: table[s] for s in SETTINGS}, **corpus.path)
  tables = [evaluate.format_table({m: table_row(v) for m, v in table[s].items()},
                                  f"{config.name} {s}: the released checkpoint {info['checkpoint']} (reranked by "
                                  f"{info['reranker']})", synthetic=synthetic) for s in SETTINGS]
  common.write_results(workdir, results, tables)
  return results


def _plain(x):
  return json.loads(json.dumps(x.to_dict() if hasattr(x, "to_dict") else x))


def algorithm1_record(config) -> dict:
  """results.json's `algorithm1`: every official setting Algorithm 1 follows (`config.official.followed`), each with
  its source (file@commit), the value this run used and the official one (`scaled`: the run's variant changes it),
  what it does not follow (`not_followed`: official value, source, vidjax's, why), and the rows it trains."""
  o = config.official
  followed = {}
  for name, s in o.followed.items():
    value = _plain(get_key(config, s.key)) if s.key else _plain(s.official)
    followed[name] = {"key": s.key or "methods/grdr.py (not a setting)", "source": s.source, "value": value,
                      "official": _plain(s.official), "scaled": value != _plain(s.official)}
  rows = [name for name, recipe in recipes(config).items() if recipe.schedule == "progressive"]
  return {"repo": o.repo, "commits": _plain(o.commits), "rows": rows, "followed": followed,
          "not_followed": _plain(o.not_followed)}


def plot_candidate_recall(curves: dict, path: Path, synthetic: bool) -> Path:
  """Candidate recall (%) against the candidate budget, one line per model (inductive pool)."""
  plt = common.pyplot()
  fig, ax = plt.subplots(figsize=(5, 3.5))
  for name, (budgets, values) in curves.items():
    ax.plot(budgets, values, label=name)
  ax.set_xlabel("candidate videos per query")
  ax.set_ylabel("candidate recall (%)")
  ax.set_title("GRDR recall (inductive)" + (" [SYNTHETIC]" if synthetic else ""))
  ax.legend(fontsize=7)
  return common.save_figure(fig, path)


def plot_sweep(sweep: dict, path: Path, synthetic: bool) -> Path:
  """Figure 7's sensitivity panels: candidate recall and R@1 (top) and latency at batch 1 (bottom), inductive,
  against N_v, K, the codebook layers M, the T5 size and the beam width."""
  plt = common.pyplot()
  fig, axes = plt.subplots(2, len(sweep), figsize=(4 * len(sweep), 6), squeeze=False)
  for col, (axis, rows) in enumerate(sweep.items()):
    xs = list(range(len(rows))) if axis == "t5_size" else [float(x) for x in rows]
    for key, label in (("candidate_recall", "candidate recall"), ("t2v_r1", "R@1")):
      axes[0, col].plot(xs, [r[key] for r in rows.values()], marker="o", label=label)
    axes[1, col].plot(xs, [r["latency_ms"]["total"] for r in rows.values()], marker="o", color="k")
    for ax in axes[:, col]:
      ax.set_xlabel(axis)
      if axis == "t5_size":
        ax.set_xticks(xs, list(rows))
    axes[0, col].set_ylabel("%")
    axes[1, col].set_ylabel("latency (ms, batch 1)")
    axes[0, col].legend(fontsize=7)
  fig.suptitle("GRDR sensitivity (inductive)" + (" [SYNTHETIC]" if synthetic else ""))
  return common.save_figure(fig, path)


def table_row(row: dict) -> dict:
  """A printed row: R@1/5/10, candidate recall, candidates, total latency (ms, batch 1), its reranker ("-": a
  dense row alone), each second reading's R@1 and what a baseline leaves out of its published method (`note`)."""
  return {**{k: row[k] for k in KEYS}, "latency_ms": row["latency_ms"]["total"], "reranker": row["reranker"],
          **{f"R@1 ({name})": r["t2v_r1"] for name, r in row.get("readings", {}).items()},
          **({"note": row["note"]} if "note" in row else {})}


@common.precision_policy
def run(config, workdir) -> dict:
  workdir = common.start_run(config, workdir, validate, RESUMABLE)
  config = common.world_data(config, workdir, write_world)
  if not config.model.query_dim:  # the store's text width: its frozen query encoder's
    config = with_values(config, {"model.query_dim": FeatureStore(config.data.features).item_shape(
        config.data.text_kind)[-1]})
  corpus = read_corpus(config, workdir)
  config, clipped = clip_to_data(config, limits(config, corpus))  # sizes fit the data, before any training
  config, tables = fit_tables(config, len(corpus.test_query_video), TABLE_ROWS)  # the main rows only on few queries
  clipped = {**clipped, **tables}
  pools = {"inductive": corpus.test, "full_corpus": np.arange(len(corpus.video_ids))}
  if config.init_checkpoint:  # a released checkpoint evaluated as released: nothing trains (the budgets are its own)
    return released_run(config, workdir, corpus, pools, clipped)
  check_budget(config, corpus)
  grdr_baselines.check_budget(config, corpus)
  precision = functools.partial(common.precision, config, "train")
  # Tables 1-2's dense rows, each alone over the pool: the frozen backbone's cosine, then the trained ones
  table = {s: {"dense_backbone": dense_setting(corpus, pools[s], config.eval, config.index)} for s in SETTINGS}
  rerankers = {"dense_backbone": BACKBONE}
  for name in dense_rows(config):
    scorer = dense_method.scorer(*train_dense(config, workdir, corpus, name, precision))
    for s in SETTINGS:  # each row names the model it is (`DENSE_ROWS`: "clip4clip" is CLIP4Clip seqTransf)
      table[s][name] = {**(pair_setting(corpus, pools[s], config.eval, scorer) if scorer.per_pair else
                           dense_setting(corpus, pools[s], config.eval, config.index, scorer)),
                        "model": DENSE_ROWS[name]}
    if name == "xpool":
      rerankers["xpool"] = frames_reranker("xpool", scorer, corpus)
  # every GR row reranked by eval.reranker; the other reranker (when there is one) a second reading
  rerankers = (rerankers[config.eval.reranker],) + tuple(r for n, r in rerankers.items() if n != config.eval.reranker)
  trained, evaluated, sets, results = {}, {}, {}, {"seed": config.seed}
  curves = {}
  target = corpus.video_ids[corpus.test_query_video]
  for name, recipe in recipes(config).items():
    if recipe not in trained:  # equal recipes (grdr = grdr_paper when the config trains Algorithm 1) train once
      trained[recipe] = trained_row(config, workdir, corpus, recipe, name, sets=sets, precision=precision)
      evaluated[recipe] = evaluate_row(config, corpus, *trained[recipe], pools, rerankers=rerankers)
      budgets = list(range(10, evaluated[recipe][2].shape[1] + 1, 10)) or [evaluated[recipe][2].shape[1]]
      curves[f"{name} (N_v={recipe.num_views})"] = (budgets, recall_curve(evaluated[recipe][2], target, budgets))
    rows, recall, _ = evaluated[recipe]
    for s in SETTINGS:
      table[s][name] = rows[s]
    if name == "grdr" and config.eval.capped_row:  # the main model at a capped budget (configs/grdr/common.py)
      e = config.eval
      capped = ml_collections.ConfigDict({**e.to_dict(), "beam_width": e.capped_beam_width,
                                          "candidates": e.capped_candidates})
      # the same beams and no cap that can bind on any pool (a small corpus): the main rows are its rows exactly
      pool = max(len(v) for v in pools.values())
      same = e.capped_beam_width == e.beam_width and all(c == 0 or c >= pool for c in (e.candidates,
                                                                                        e.capped_candidates))
      capped_rows = (copy.deepcopy(rows) if same else
                     evaluate_row(config, corpus, *trained[recipe], pools, capped, rerankers=rerankers)[0])
      for s, row in capped_rows.items():
        table[s][f"grdr_cap{e.capped_candidates}"] = row
    if name == "grdr":  # every video's IDs (the full-corpus recall's)
      model = trained[recipe][0]
      results["codebook"] = metrics.codebook_health(trained[recipe][2](corpus.features), model.tokenizer.num_codes)
      results["index_bytes_per_video"] = {
          "grdr": recall.trie.nbytes / len(recall.trie),  # the trie and the ID -> video map
          "grdr_ids_int16": 2.0 * model.tokenizer.num_views * model.tokenizer.num_layers,
          "video_float32": 4.0 * corpus.features.shape[1],
          "frame_float32": 4.0 * corpus.features.shape[1] * config.eval.index_frames}
  if config.eval.baselines:  # Tables 1-2's GR baselines, each reranked like the GRDR rows
    for name, (rows, found) in grdr_baselines.baseline_rows(config, workdir, corpus, pools, sets, precision,
                                                            rerankers).items():
      for s in SETTINGS:
        table[s][name] = rows[s]
      curves[name] = (budgets, recall_curve(found, target, budgets))
  ablations = {s: {k.split("/", 1)[1]: v for k, v in table[s].items() if k.startswith("table3/")} for s in SETTINGS}
  for s in SETTINGS:
    table[s] = {k: v for k, v in table[s].items() if not k.startswith("table3/")}
    if ablations[s]:
      ablations[s] = {"grdr_paper": table[s]["grdr_paper"], **ablations[s]}
  if "sweep" in config:
    results["sweep"] = sweep_rows(config, workdir, corpus, pools, trained, precision, rerankers)
    table["sweep"] = results["sweep"]  # metrics.sweep.<axis>.<value> (Figure 7, inductive pool)

  synthetic = corpus.synthetic
  results = common.results_dict(config, dataset=config.dataset + (f" (synthetic {corpus.source})" if synthetic else ""),
                                synthetic=synthetic, metrics=table, clipped=clipped,
                                ablations={"table3": ablations if config.eval.table3 else {}},
                                algorithm1=algorithm1_record(config),
                                **{s: table[s] for s in SETTINGS}, **results, **corpus.path)
  tables = []
  title = f"GR rows reranked by {rerankers[0].name}" + "".join(
      f", R@1 ({r.name}): reranked by {r.name} instead" for r in rerankers[1:])
  for s in SETTINGS:
    tables.append(evaluate.format_table({m: table_row(v) for m, v in table[s].items()},
                                        f"{config.name} {s} ({title})", synthetic=synthetic))
    if config.eval.table3:
      tables.append(evaluate.format_table({m: table_row(v) for m, v in ablations[s].items()},
                                          f"{config.name} {s}: Table 3 ablations ({title})", synthetic=synthetic))
  for axis, rows in results.get("sweep", {}).items():
    tables.append(evaluate.format_table({f"{axis}={v}": {**{k: r[k] for k in ("t2v_r1", "candidate_recall",
                                                                              "num_candidates")},
                                                         "latency_ms": r["latency_ms"]["total"]}
                                         for v, r in rows.items()}, f"{config.name} sweep: {axis} (inductive)",
                                        synthetic=synthetic))
  plot_candidate_recall(curves, workdir / "candidate_recall.png", synthetic)
  if "sweep" in results:
    plot_sweep(results["sweep"], workdir / "sweep.png", synthetic)
  common.write_results(workdir, results, tables)
  return results
