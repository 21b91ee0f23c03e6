"""VideoComp: build the Comp benchmarks, pretrain and fine-tune VidCLIP, evaluate compositionality.

`run(config, workdir)`:
  1. data: the dataset's dense captions through their readers (or official release files) and a feature store
     of per-frame tokens (`vidjax.methods.comp.load`); the `world` variant first writes the embedded SYNTHETIC
     moving-object world (four events per video) as those files under `<workdir>/world`, and the run reads them
     as it reads a user's. The training and evaluation triplets are built with `vidjax.data.comp.build_comp` and
     written to `<workdir>/benchmark/` (release format + counts);
  2. pretraining (§3.3, §4.1) on short clips: `base` (stack size 1, contrastive: VidCLIP-base) and
     `comppretrain` (stacks of `pretrain.stack` clips with reordered and partial negatives, L_con + λ·L_pref);
  3. fine-tuning on the Comp training triplets (§4.2) from `base` with the contrastive loss, NegCLIP, CompLoss
     (eq. 2 on L_con) and CompLoss extending NegCLIP (`negclip_pref`: eq. 2 on NegCLIP's L_con), and from
     `comppretrain` with each CompLoss (`vidjax.methods.comp.FINETUNES`); on fewer test videos than
     `table_min_queries` only Table 2's (contrastive, comploss, comppretrain_comploss), recorded in `clipped`;
  4. evaluation (§3.4): binary accuracy per disruption type and the comprehensive product
     (`evaluate.evaluate_comp`), R@1 both ways on the positive pairs, and the hierarchy score: per test video,
     the share of its text pairs at different disruption levels (the positive 0, then `finetune.levels`: the single
     disruptions 1, multi 2; the evaluation split is built with multi for this) that the model orders, each pair
     scored on its own video input (the full video, or its seg-mismatch crop) and every pair of a video's inputs
     pooled into that video's share, then averaged over test videos (`metrics.hierarchy_accuracy`);
  5. `<workdir>/results.json`: methods `METHODS` (`zero_shot`, `contrastive`, `negclip`, `comploss`,
     `negclip_pref`, `comppretrain_comploss`, `comppretrain_negclip_pref`; those the run trained:
     `vidjax.methods.comp.methods`) x `temp_reorder`, `action_replace`,
     `seg_mismatch`, `all`, `t2v_r1`, `v2t_r1`, `hierarchy`; "tables" holds Table 5 (pretraining ablation) and
     Table 6 (zero-shot retrieval) rows; `comploss_reading` / `comppretrain_reading` say which reading of eq. 2's
     order the fine-tunings / CompPretrain trained with ("paper": every pair of the hierarchy; "levels": only
     across `levels`) and `eq2_pairs` the pairs of negatives each hinged.

Every training runs through the one loop (`vidjax.train.fit`) in `<workdir>/models/<name>/`, so a killed
run resumes. The library code (data, examples, fits, evaluation, `suite`) is `vidjax.methods.comp`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vidjax import evaluate
from vidjax.data import comp
from vidjax.defaults.common import (bad_value, check_choice, check_fraction, check_passes, check_positive,
                                    check_positive_int, clip_to_data, get_key)
from vidjax.sharding import on_writer
from vidjax.experiments import common
from vidjax.methods import comp as method
from vidjax.methods.comp import METRICS, TABLE5
from vidjax.methods.vidclip import Encoder, check_text_tower

RESUMABLE = ("ablations", "table_min_queries")  # and, by `common.is_resumable`'s rule, the logging and evaluation keys


def validate(config) -> None:
  check_choice(config, "dataset", ("activitynet", "youcook2"))
  common.check_data_source(config, bool(config.data.features), f"configs/comp_{config.dataset}.py")
  check_positive_int(config, [f"model.{k}" for k in (
      "frames", "width", "pool_queries", "pool_heads", "pool_mlp", "embed_dim", "text_hidden", "text_layers",
      "text_heads", "text_mlp", "max_text_len")])
  check_text_tower(config, "model")
  memory = config.model.get("memory_gb", 0.0)
  if isinstance(memory, bool) or not isinstance(memory, (int, float)) or memory < 0:
    bad_value("model.memory_gb", memory, "GB of text-tower activations per training block, >= 0 (0: one pass)")
  common.compute_dtype(config, "model.dtype")
  check_fraction(config, "model.init_temperature")
  check_choice(config, "model.pool_init", ("mean", "random"))
  for section in ("pretrain", "finetune"):
    check_positive_int(config, [f"{section}.{k}" for k in ("batch_size", "steps", "checkpoint_every",
                                                                  "log_every")])
    check_positive(config, [f"{section}.lr", f"{section}.video_lr", f"{section}.lam"])
    tc = get_key(config, section)
    if tc.weight_decay < 0 or tc.warmup_steps < 0:
      bad_value(f"{section}.weight_decay", (tc.weight_decay, tc.warmup_steps), "weight decay and warm-up >= 0")
    check_passes(config, section)
  if tuple(config.pretrain.hierarchy) not in (("reorder", "partial"), ("partial", "reorder")):
    bad_value("pretrain.hierarchy", config.pretrain.hierarchy, "an order of ('reorder', 'partial')")
  h = tuple(config.finetune.hierarchy)
  if not h or len(set(h)) != len(h) or not set(h) <= set(comp.TRAIN_TYPES):
    bad_value("finetune.hierarchy", h, f"distinct types of {comp.TRAIN_TYPES}, less disrupted first")
  for section in ("pretrain", "finetune"):
    check_choice(config, f"{section}.pref_order", method.PREF_ORDERS)
    levels, h = tuple(get_key(config, f"{section}.levels")), get_key(config, f"{section}.hierarchy")
    if len(levels) != len(h) or list(levels) != sorted(levels):
      bad_value(f"{section}.levels", levels, f"one non-decreasing disruption level per entry of {section}.hierarchy")
  check_positive_int(config, ["pretrain.stack"])
  if config.model.frames % config.pretrain.stack:
    bad_value("model.frames", config.model.frames, "a multiple of the CompPretrain stack size")
  check_positive_int(config, ["eval.chunk"])
  if isinstance(config.ablations, str) or not set(config.ablations) <= set(method.ABLATIONS):
    bad_value("ablations", config.ablations, f"a subset of {tuple(method.ABLATIONS)} (() = Table 2's rows only)")
  check_choice(config, "benchmark.connectives", (True, False))


@common.precision_policy
def run(config, workdir: str | Path) -> dict:
  workdir = common.start_run(config, workdir, validate, RESUMABLE)
  # Data: the annotation files and the token store (a world's are written first, under <workdir>/world).
  data = method.load(common.world_data(config, workdir, method.write_world), workdir)
  config, clipped = clip_to_data(config, method.limits(config, data))  # sizes fit the data, before any file
  on_writer("comp_benchmark", lambda: method.write_benchmark(config, workdir, data))
  prepared = method.Prepared(config, data)
  config, clipped = prepared.config, {**clipped, **prepared.clipped}  # the text length too (`method.text_length`)
  config, tables_left_out = method.fit_rows(config, prepared)  # Table 2's rows only on a few test videos
  clipped.update(tables_left_out)

  # Fit: the two pretrainings, then each fine-tuning (each resumes from its checkpoints).
  with common.precision(config, "train"):
    params = method.fit(config, workdir, data, prepared)

  # Evaluate: every method, and CompPretrain itself (zero-shot, for Tables 5 and 6); a fine-tuning's params are read
  # from its checkpoint when it is evaluated (one model at a time).
  enc = Encoder(prepared.model, data, config.eval.chunk)
  scores = {"zero_shot": method.evaluate_model(enc, params["base"], prepared.es, prepared.eval_tokens),
            "comppretrain": method.evaluate_model(enc, params["comppretrain"], prepared.es, prepared.eval_tokens)}
  for name, _, _ in method.finetunes(config):
    scores[name] = method.evaluate_model(enc, method.load_model(workdir, name), prepared.es, prepared.eval_tokens)
  table_metrics = {m: {k: scores[m][k] for k in METRICS} for m in method.methods(config)}
  tables = method.tables(scores, config.pretrain.stack)

  # Write: the tables and results.json.
  es = prepared.es
  printed = [
      evaluate.format_table(table_metrics, f"VideoComp on {config.name} ({data.description}): binary accuracy % "
                            "(Tables 2-4), R@1 on the positive pairs (Table 3) and the hierarchy score % (disruption "
                            f"levels ordered per test video); eq. 2's order: {config.finetune.pref_order!r} reading",
                            data.synthetic, list(METRICS)),
      evaluate.format_table(tables["pretraining_ablation"], "CompPretrain stack size (Table 5)", data.synthetic,
                            list(TABLE5)),
      evaluate.format_table(tables["zero_shot_retrieval"], "zero-shot retrieval R@1 after pretraining (Table 6)",
                            data.synthetic, ["t2v_r1", "v2t_r1"]),
  ]
  results = common.results_dict(
      config, dataset=config.dataset, synthetic=data.synthetic, metrics=table_metrics, clipped=clipped, note=data.note,
      tables=tables, **data.path,
      # which reading of eq. 2's order each training used (configs/comp/common.py) and the pairs it hinged
      comploss_reading=config.finetune.pref_order, comppretrain_reading=config.pretrain.pref_order,
      eq2_pairs={"finetune": method.eq2_pairs(config.finetune), "pretrain": method.eq2_pairs(config.pretrain)},
      counts={"eval": {t: len(es.by_type[t][0]) for t in comp.EVAL_TYPES},
              "train_groups": len(prepared.finetune.positive), "pretrain_clips": len(data.clips),
              "hierarchy_inputs": len(es.hierarchy[0]), "hierarchy_videos": len(np.unique(es.hierarchy_videos))})
  common.write_results(workdir, results, printed)
  return results
