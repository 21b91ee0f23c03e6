"""GRDR: multi-view tokenizer + generative retriever (progressive co-training), trie recall, dense rerank.

`run(config, workdir)`:
  1. data: the embedded SYNTHETIC polysemous world (`vidjax.worlds.polysemous`, the `world` variant), or a user's
     feature store and the dataset's release files (`methods.grdr.store_corpus`: training captions as pseudo
     queries, the store's text embeddings for the intents and the rerank, the query text for the T5 encoder);
  2. query intents: each training video's queries are clustered by k-means into N_v intents (§3.2), once per N_v;
  3. training, one row of Tables 1-3 at a time (`methods.grdr.recipes`: the config's schedule, Algorithm 1, N_v = 1,
     TIGER, T2VIndexer, Table 3's ablations), each phase one call of the train loop, checkpointed under
     `<workdir>/models/<row>/<phase>/` (a killed run resumes into its phase); equal recipes train once;
  4. indexing: every pool video's semantic IDs -> `SemanticIdTrie`;
  5. retrieval per setting ("inductive": the test videos; "full_corpus": all videos): generative
     recall (beam search, de-duplication, at most `eval.candidates` videos) then dense cosine rerank
     through `TwoStage`; R@1/5/10, candidate recall, mean candidates, latency per stage at batch 1, index bytes;
     exact dense retrieval beside it;
  6. codebook health, index bytes per video (Figure 4), the optional Figure 7 sweep (`:sweep`), a plot of candidate
     recall against the candidate budget, and `<workdir>/results.json`.
"""
from __future__ import annotations

import time
from pathlib import Path
import ml_collections
import numpy as np

from vidjax import evaluate, metrics
from vidjax.experiments import common
from vidjax.methods.grdr import (GenerativeRecall, PseudoQueries, Recipe, TrainingSet, check_budget,
                                 checked_queries, id_coder, load_trained, make_recall, query_intents, recipe_model,
                                 recipes, store_corpus, train_grdr)
from vidjax.retrieval import DenseIndex, TwoStage
from vidjax.worlds.polysemous import PolysemousWorld, PolysemousWorldConfig, WorldQueries, make_polysemous_world

RESUMABLE = ("sweep",)  # besides `common.is_resumable` (eval.*): a finished run re-evaluates, or adds the sweep, without retraining
KEYS = ("t2v_r1", "t2v_r5", "t2v_r10")
SETTINGS = ("inductive", "full_corpus")


def validate(config) -> None:
  common.check_index(config)
  common.check_positive_int(config, ("train.batch_size", "train.first_align_epochs",
                                     "train.cotrain_epochs", "train.kmeans_iters", "eval.beam_width",
                                     "eval.candidates", "eval.latency_queries"))
  common.check_positive(config, ("train.lr",))
  if config.train.align_epochs < 0 or config.train.weight_decay < 0:
    common.bad_value("train.align_epochs / train.weight_decay", (config.train.align_epochs, config.train.weight_decay),
                     "non-negative")
  if len(config.train.loss_weights) != 4:
    common.bad_value("train.loss_weights", config.train.loss_weights, "four weights (lambda_1..4)")
  common.check_data_source(config, bool(config.data.features), f"configs/grdr_{config.dataset}.py")
  if config.data.features:
    for key in ("data.annotations", "data.train_annotations"):
      if not common.get_key(config, key):
        common.bad_value(key, "", "the test / training split's annotation file with data.features")
  if config.model.num_codes < 2:
    common.bad_value("model.num_codes", config.model.num_codes, "at least 2 codes per codebook")
  common.check_choice(config, "model.query_encoder", ("t5", "minilm", "t5_features"))
  if "world" in config and config.model.query_encoder == "t5":
    common.bad_value("model.query_encoder", "t5", "'minilm' or 't5_features' on the embedded world: its queries are "
                     "vectors, not text")
  common.check_choice(config, "train.schedule", ("progressive", "tokenizer_first"))
  if config.train.schedule == "tokenizer_first":
    common.check_positive_int(config, ("train.view_epochs", "train.view_batch_size", "train.retriever_epochs"))
    common.check_positive(config, ("train.view_lr", "train.retriever_lr"))
    mc = config.model
    if mc.latent_dim != mc.query_dim:
      common.bad_value("model.latent_dim", mc.latent_dim,
                       f"equal to model.query_dim={mc.query_dim}: train.schedule='tokenizer_first' aligns the "
                       "views with query-cluster centres in the query space")


def _recall(ids: np.ndarray, target: np.ndarray, ks=(1, 5, 10)) -> dict[str, float]:
  """`metrics.recall_from_ranked` (percent), keys t2v_r<k>."""
  return {f"t2v_{k}": v for k, v in metrics.recall_from_ranked(ids, target, ks).items()}


def test_inputs(world, rows=None):
  """The test queries as the recall and the rerank read them: the embeddings (`text`) and, on a store with query
  text, its token ids (`tokens`: query_encoder "t5"); `rows` selects queries."""
  sel = slice(None) if rows is None else rows
  out = {"text": world.test_queries[sel]}
  if getattr(world, "test_tokens", None) is not None:
    out["tokens"] = world.test_tokens[sel]
  return out


def evaluate_setting(world: PolysemousWorld, recall: GenerativeRecall, ecfg) -> tuple[dict, np.ndarray]:
  """GR + dense rerank on the world's test queries over the recall's pool.

  Returns the metrics and the recalled ids [Q, candidates] (beam order, "" past a query's candidates).
  """
  queries = test_inputs(world)
  target = world.video_ids[world.test_query_video]
  stack = TwoStage(recall, k_recall=ecfg.candidates, reranker=evaluate.CosineScorer())
  result = stack.search(queries, k=min(10, ecfg.candidates))
  found = result.recall_ids  # every candidate: k_recall is the candidate limit
  out = {**_recall(result.ids, target), "candidate_recall": 100.0 * float(np.mean((found == target[:, None]).any(1))),
         "num_candidates": float(np.mean(np.sum(found != "", axis=1))),
         "index_bytes_per_video": recall.trie.nbytes / len(recall.trie)}
  single = TwoStage(recall, k_recall=ecfg.candidates, reranker=evaluate.CosineScorer(), query_batch=1)
  single.search(test_inputs(world, slice(0, 1)), k=1)  # compile
  recall.reset_latency()
  t = single.search(test_inputs(world, slice(0, min(ecfg.latency_queries, len(target)))), k=1)
  out["latency_ms"] = {**recall.mean_latency_ms(), "rerank": t.latency_ms["rerank"], "total": t.latency_ms["total"]}
  return out, found


def dense_setting(world: PolysemousWorld, pool: np.ndarray, ecfg, index_config) -> dict:
  """Exact dense retrieval over the pool's video embeddings (the reranker alone: Table 1's ceiling row); its
  candidate recall is R@`eval.candidates`, the GR rows' budget."""
  index = DenseIndex.from_config(world.video_ids[pool], world.features[pool], index_config)
  target = world.video_ids[world.test_query_video]
  budget = min(max(100, ecfg.candidates), len(pool))
  ids = np.asarray(index.retrieve(world.test_queries, budget)[0])
  hit = ids == target[:, None]
  # R@100 over a pool of fewer than 100 videos is recall over all of them
  out = {**_recall(ids[:, :10], target), "t2v_r100": 100.0 * float(np.mean(hit[:, :100].any(1))),
         "candidate_recall": 100.0 * float(np.mean(hit[:, :ecfg.candidates].any(1))),
         "num_candidates": float(min(ecfg.candidates, len(pool))),
         "index_bytes_per_video": 4.0 * world.features.shape[1]}
  n = min(ecfg.latency_queries, len(target))
  index.retrieve(world.test_queries[:1], 10)
  t = time.perf_counter()
  for i in range(n):
    index.retrieve(world.test_queries[i:i + 1], 10)
  out["latency_ms"] = {"total": 1e3 * (time.perf_counter() - t) / n}
  return out


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
  """Figure 7's sensitivity panels: candidate recall and R@1 (inductive) against N_v, K and the beam width."""
  plt = common.pyplot()
  fig, axes = plt.subplots(1, len(sweep), figsize=(4 * len(sweep), 3.2), squeeze=False)
  for ax, (axis, rows) in zip(axes[0], sweep.items()):
    xs = [float(x) for x in rows]
    for key, label in (("candidate_recall", "candidate recall"), ("t2v_r1", "R@1")):
      ax.plot(xs, [r[key] for r in rows.values()], marker="o", label=label)
    ax.set_xlabel(axis)
    ax.set_ylabel("%")
    ax.legend(fontsize=7)
  fig.suptitle("GRDR sensitivity (inductive)" + (" [SYNTHETIC]" if synthetic else ""))
  return common.save_figure(fig, path)


def recall_curve(found: np.ndarray, target: np.ndarray, budgets) -> list[float]:
  """Candidate recall within the first b recalled ids [Q, K], for each budget b."""
  hit = found == target[:, None]
  return [100.0 * float(np.mean(hit[:, :b].any(1))) for b in budgets]


# ----------------------------------------------------------------------------------------------


def world_of(config, workdir: Path | None = None):
  """The run's corpus: the polysemous world (`world` variant) or a user's store (`methods.grdr.store_corpus`)."""
  if "world" not in config:
    return store_corpus(config, Path(workdir))
  w = config.world
  return make_polysemous_world(PolysemousWorldConfig(num_videos=w.num_videos, dim=w.dim, train_queries=w.train_queries,
                                                     test_queries=w.test_queries), seed=config.seed)


def training_set(config, world, n_views: int, queries: PseudoQueries | None = None) -> TrainingSet:
  """The training videos and their pseudo queries (default: the world's own), clustered into `n_views` intents."""
  q, video = checked_queries(queries or (world if callable(world) else WorldQueries(world)), world.train,
                             config.model.query_dim)
  intent, valid = query_intents(q, video, len(world.train), n_views, config.seed)
  inputs = world.train_tokens_of(world.train) if config.model.query_encoder == "t5" else q
  return TrainingSet(world.features[world.train], inputs, video, intent, valid, query_vectors=q)


def trained_row(config, workdir: Path, world, recipe: Recipe, name: str, train: bool = True,
                queries: PseudoQueries | None = None, sets: dict | None = None):
  """(model, params, id coder) of `recipe` trained on the training videos' pseudo queries (`queries`, default the
  corpus's own), in `workdir/models/name` (restored when trained there before; `train=False` only restores).
  `sets` caches the training sets by N_v across the rows of one run."""
  model = recipe_model(config, recipe, world.features.shape[1], getattr(world, "query_vocab", 0))
  sets = {} if sets is None else sets
  if recipe.num_views not in sets:
    sets[recipe.num_views] = training_set(config, world, recipe.num_views, queries)
  data = sets[recipe.num_views]
  if train:
    with common.precision(config, "train"):
      params = train_grdr(model, data, config.train, workdir / "models" / name, config.seed, recipe)
  else:
    params = load_trained(config.train, model.tokenizer.num_layers, workdir / "models" / name, recipe)
  return model, params, id_coder(model, params, recipe, data.features, config.train, config.seed)


def suite(config, workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """Dense cosine and GRDR (generative recall of `eval.candidates`, dense rerank) on the world's test queries
  over the whole corpus (`configs/evaluate_all.py`), the model read from the run's last checkpoint (nothing
  trains); queries and videos are keyed by row."""
  world = world_of(config, workdir)
  model, params, coder = trained_row(config, Path(workdir), world, recipes(config)["grdr"], "grdr", train=False)
  space = (f"the polysemous world (synthetic, seed {config.seed})" if "world" in config else
           f"the feature store {config.data.features}")
  dense = evaluate.dual_encoder("dense", space, lambda rows: world.test_queries[list(rows)],
                                lambda rows: world.features[list(rows)])

  def generative(data):
    queries, videos, relevant = data
    pool = np.asarray(videos, np.int64)
    recall, _ = make_recall(model, params, world.features[pool], world.video_ids[pool], config.eval,
                            coder(world.features[pool]))
    stack = TwoStage(recall, k_recall=config.eval.candidates, reranker=evaluate.CosineScorer())
    found = stack.search(test_inputs(world, np.asarray(queries, np.int64)), k=min(10, config.eval.candidates)).ids
    target = world.video_ids[pool][np.asarray(relevant)]
    return {f"t2v_{k}": v for k, v in metrics.recall_from_ranked(found, target, (1, 5, 10)).items()}

  grdr = evaluate.Model("grdr_rerank", space, {"gallery": generative},
                        {k: "GRDR is a recall stage over a corpus (R@K); fixed candidate pools leave it nothing to "
                            "recall" for k in evaluate.BENCHMARK_KINDS})
  name = "R@K (polysemous)" if "world" in config else f"R@K ({config.dataset})"
  return [dense, grdr], [evaluate.Benchmark(name, "gallery", space,
                                            (np.arange(len(world.test_queries)), np.arange(len(world.video_ids)),
                                             world.test_query_video), "world" in config or world.synthetic)]


def evaluate_row(config, world, model, params, coder, pools, ecfg=None, settings=SETTINGS):
  """{setting: row metrics}, the recall of each setting's pool, and the inductive recalled ids."""
  out, found = {}, None
  for s in settings:
    recall, _ = make_recall(model, params, world.features[pools[s]], world.video_ids[pools[s]], ecfg or config.eval,
                            coder(world.features[pools[s]]))
    out[s], f = evaluate_setting(world, recall, ecfg or config.eval)
    if s == "inductive":
      found = f
  return out, recall, found


def sweep_rows(config, workdir: Path, world, pools, trained: dict) -> dict:
  """Figure 7 on the inductive pool: a model per N_v and per K (the config's schedule) and the main model at each beam
  width (its candidates: every video the beams bring). A value equal to the main model's (or to another row's, e.g.
  N_v = 1 and `grdr_nv1`) reuses that model."""
  sw, schedule, n = config.sweep, config.train.schedule, config.model.num_views
  sets = {}
  out = {"num_views": {}, "num_codes": {}, "beam_width": {}}
  for axis, values, recipe_of in (("num_views", sw.num_views, lambda v: Recipe(schedule, v)),
                                  ("num_codes", sw.num_codes,
                                   lambda v: Recipe(schedule, n, num_codes=None if v == config.model.num_codes else v))):
    for v in values:
      recipe = recipe_of(int(v))
      if recipe not in trained:
        trained[recipe] = trained_row(config, workdir, world, recipe, f"sweep/{axis}{v}", sets=sets)
      out[axis][str(v)] = evaluate_row(config, world, *trained[recipe], pools, settings=("inductive",))[0]["inductive"]
  main = trained[Recipe(schedule, n)]
  for w in sw.beam_width:
    # every video the beams' IDs name (at least 10 slots, for R@10)
    ecfg = ml_collections.ConfigDict({**config.eval.to_dict(), "beam_width": int(w), "candidates": max(int(w), 10)})
    out["beam_width"][str(w)] = evaluate_row(config, world, *main, pools, ecfg, ("inductive",))[0]["inductive"]
  return out


@common.precision_policy
def run(config, workdir) -> dict:
  workdir = common.start_run(config, workdir, validate, RESUMABLE)
  world = world_of(config, workdir)
  synthetic = "world" in config or world.synthetic
  check_budget(config, world)
  pools = {"inductive": world.test, "full_corpus": np.arange(len(world.video_ids))}
  table = {s: {"dense": dense_setting(world, pools[s], config.eval, config.index)} for s in SETTINGS}
  trained, evaluated, sets, results = {}, {}, {}, {"seed": config.seed}
  curves, budgets = {}, list(range(10, config.eval.candidates + 1, 10)) or [config.eval.candidates]
  target = world.video_ids[world.test_query_video]
  for name, recipe in recipes(config).items():
    if recipe not in trained:  # equal recipes (grdr = grdr_paper when the config trains Algorithm 1) train once
      trained[recipe] = trained_row(config, workdir, world, recipe, name, sets=sets)
      evaluated[recipe] = evaluate_row(config, world, *trained[recipe], pools)
      rows, recall, found = evaluated[recipe]
      curves[f"{name} (N_v={recipe.num_views})"] = (budgets, recall_curve(found, target, budgets))
    rows, recall, _ = evaluated[recipe]
    for s in SETTINGS:
      table[s][name] = rows[s]
    if name == "grdr":  # every video's IDs (the full-corpus recall's)
      model = trained[recipe][0]
      results["codebook"] = metrics.codebook_health(trained[recipe][2](world.features), model.tokenizer.num_codes)
      results["index_bytes_per_video"] = {
          "grdr": recall.trie.nbytes / len(recall.trie),  # the trie and the ID -> video map
          "grdr_ids_int16": 2.0 * model.tokenizer.num_views * model.tokenizer.num_layers,
          "video_float32": 4.0 * world.features.shape[1],
          "frame_float32": 4.0 * world.features.shape[1] * config.eval.index_frames}
  ablations = {s: {k.split("/", 1)[1]: v for k, v in table[s].items() if k.startswith("table3/")} for s in SETTINGS}
  for s in SETTINGS:
    table[s] = {k: v for k, v in table[s].items() if not k.startswith("table3/")}
    if ablations[s]:
      ablations[s] = {"grdr_paper": table[s]["grdr_paper"], **ablations[s]}
  if "sweep" in config:
    results["sweep"] = sweep_rows(config, workdir, world, pools, trained)
  label = (" (synthetic polysemous world)" if "world" in config else " (synthetic rendered videos)" if synthetic else "")
  results = common.results_dict(config, dataset=config.dataset + label, synthetic=synthetic, metrics=table,
                                ablations={"table3": ablations if config.eval.table3 else {}},
                                **{s: table[s] for s in SETTINGS}, **results,
                                **(common.WORLD_PATH if "world" in config else world.path))
  tables = []
  for s in SETTINGS:
    cols = KEYS + ("candidate_recall", "num_candidates")
    tables.append(evaluate.format_table({m: {k: v[k] for k in cols} for m, v in table[s].items()},
                                        f"{config.name} {s}", synthetic=synthetic))
    if config.eval.table3:
      tables.append(evaluate.format_table({m: {k: v[k] for k in cols} for m, v in ablations[s].items()},
                                          f"{config.name} {s}: Table 3 ablations", synthetic=synthetic))
  for axis, rows in results.get("sweep", {}).items():
    tables.append(evaluate.format_table({f"{axis}={v}": {k: r[k] for k in ("t2v_r1", "candidate_recall",
                                                                              "num_candidates")}
                                         for v, r in rows.items()}, f"{config.name} sweep: {axis} (inductive)",
                                        synthetic=synthetic))
  plot_candidate_recall(curves, workdir / "candidate_recall.png", synthetic)
  if "sweep" in results:
    plot_sweep(results["sweep"], workdir / "sweep.png", synthetic)
  common.write_results(workdir, results, tables)
  return results
