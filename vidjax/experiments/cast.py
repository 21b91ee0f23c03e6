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

import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from vidjax import evaluate, metrics, sharding, train
from vidjax.data import cvr
from vidjax.defaults.cast import ADAPTERS, DATASETS, METHODS, W_P_GRID, W_V_GRID  # noqa: F401  (re-exported)
from vidjax.experiments import common
from vidjax.methods.cast import (CVRData, build_models, ensemble, predictor_scorer, result_path, setup, train_method,
                                 validate)
from vidjax.scorers import cast as cast_scorers

# What besides `common.is_resumable`'s rule may change between runs in one workdir: more epochs resume training.
RESUMABLE = ("train.epochs",)


# ----------------------------------------------------------------------------------------------
# Evaluation.


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


def suite(config, workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """A finished run's CAST (Full Ensemble, with the (w_v, w_p) its results.json recorded, restored from its
  checkpoint) and the zero-shot dual encoder on its CVR benchmark (`configs/evaluate_all.py`). Nothing trains.

  CAST's scorer reads the query's visual history, so it takes the CVR pools only; the zero-shot cosine reads
  the space's raw embeddings, so it takes them too."""
  workdir = Path(workdir)
  data, clips, _, bench, _, _ = setup(config, workdir, finished=True)
  params = train.load_params(workdir / "train" / "cast")
  w = common.read_results(workdir)["ensemble"]
  scorer = cast_scorers.EnsembleScorer(predictor_scorer(build_models(config, clips.dim)["cast"], params),
                                       w["w_v"], w["w_p"])
  space = (f"the {config.dataset} procedural world (synthetic, seed {config.seed})" if not config.data.annotations else
           f"{data.features.get('backbone') or 'stored'} features of {config.data.features or config.dataset}")
  no_history = "CAST scores a candidate from the query's visual history (CVR pools); this benchmark has none"
  cvr_of = lambda s: (lambda arrays: evaluate.evaluate_cvr(s, arrays, config.eval.chunk))  # noqa: E731
  return ([evaluate.Model("cast", space, {"cvr": cvr_of(scorer)}, {k: no_history for k in evaluate.BENCHMARK_KINDS if k != "cvr"}),
           evaluate.Model("zero_shot", space, {"cvr": cvr_of(cast_scorers.ZeroShotScorer())})],
          [evaluate.Benchmark(f"CVR ({config.dataset})", "cvr", space, bench, data.synthetic)])


@common.precision_policy
def run(config, workdir: str | Path) -> dict:
  """Runs the whole CAST experiment; returns (and writes) the results dict."""
  workdir = common.start_run(config, workdir, validate, RESUMABLE)
  start = time.time()
  data, clips, texts, bench, heldout, source = setup(config, workdir)
  seconds = {"data": time.time() - start, "train": 0.0}  # host stages vs the training loops (BENCHMARKS "On one GPU")
  L, tcfg = config.model.context_len, config.train
  mesh = sharding.make_mesh()
  models = build_models(config, clips.dim)
  chunk = config.eval.chunk

  scorers = {
      "zero_shot": cast_scorers.ZeroShotScorer(),
      "late_fusion_heuristic": cast_scorers.LateFusionHeuristicScorer(config.model.late_fusion_alpha),
  }
  clock = time.time()
  with common.precision(config, "train"):
    params = {name: train_method(name, model, source, config, workdir, mesh) for name, model in models.items()}
  seconds["train"] += time.time() - clock
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
      clock = time.time()
      with common.precision(config, "train"):
        p = train_method(f"cast_L{length}", models["cast"], src, config, workdir, mesh)
      seconds["train"] += time.time() - clock
      scorer, _ = ensemble(models["cast"], p, cvr.truncate_context(heldout, length), config)
      short = cvr.truncate_context(bench, length)
      sweep_scores = evaluate.score_pools(scorer, {k: v for k, v in short.items()
                                                   if k not in evaluate.CVR_LABEL_KEYS}, chunk)
      sweep[length], _ = pool_metrics(sweep_scores, short)
    if data.reuse_gap:
      sweep_gaps[length] = gap_accuracy(sweep_scores, bench, data)

  dataset = config.dataset + (" (synthetic procedural world)" if not config.data.annotations else
                              " (synthetic rendered videos)" if data.synthetic else "")
  results = common.results_dict(
      config, dataset=dataset, synthetic=data.synthetic, metrics=method_metrics,
      ensemble={"w_v": scorers["cast"].w_v, "w_p": scorers["cast"].w_p, "selected_on": "heldout subset of train"},
      top1_breakdown=breakdown,
      inference_ablation=ablation,
      fair_comparison=fair,
      context_sweep={str(k): v for k, v in sorted(sweep.items())},
      **({"subsets": subsets, "context_sweep_reuse_by_gap": {str(k): v for k, v in sorted(sweep_gaps.items())}}
         if subsets else {}),
      benchmark_stats=data.stats,
      features={k: data.features.get(k) for k in ("backbone", "checkpoint_hash", "random_init")},
      **result_path(config, workdir, data),
      seconds=round(time.time() - start, 1),
      stage_seconds={**{k: round(v, 1) for k, v in seconds.items()},
                     "evaluate": round(time.time() - start - sum(seconds.values()), 1)})
  print("stages (s): " + ", ".join(f"{k} {v}" for k, v in results["stage_seconds"].items()), flush=True)
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
  if len(sweep) > 1:
    plot_context_sweep(sweep, workdir / "context_sweep.png", title=dataset, synthetic=data.synthetic)
  plot_top1_breakdown(breakdown, workdir / "top1_breakdown.png", title=dataset, synthetic=data.synthetic)
  common.write_results(workdir, results, tables)
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
