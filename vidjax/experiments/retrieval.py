"""Stage-1 text-video retrieval: zero-shot dual-encoder R@K in both directions from a feature store.

`run(config, workdir)`:
  1. data: the dataset's annotations through its reader (`vidjax.data.annotations`) and a feature store; a config
     with a `world` section (`configs/retrieval_<dataset>.py`, the default) first writes the embedded SYNTHETIC
     moving-object world as that dataset's release files and store under `<workdir>/world`
     (`vidjax.worlds.moving_objects.write_world`: its test split, store kinds `tokens`, `clip`, `text`) and reads
     them the same way; or (`data.source = "tfds"`) one split of a built
     `vidjax.tfds.retrieval.VidjaxRetrieval` dataset with its embeddings;
  2. the benchmark by the standard protocol (`vidjax.data.retrieval`);
  3. cosine scores of every query against the whole corpus, in bounded memory
     (`vidjax.evaluate.evaluate_gallery`): R@1/5/10, MdR, MnR for T2V and V2T; with a non-default
     `index` section, also T2V R@1/5/10 of the videos searched through that `DenseIndex` (`stage1_index`);
     on a world's store, its hard negatives at stage 1 (`world_checks`, from the world truth beside the store);
  4. writes `<workdir>/results.json` (method `stage1`) and prints the table.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from vidjax import evaluate
from vidjax.data import provenance
from vidjax.data.features import FeatureStore, MissingFeatureError
from vidjax.data.retrieval import (DATASETS, PROTOCOLS, RetrievalBenchmark, build_benchmark, dataset_label, embeddings,
                                   read_dataset)
from vidjax.defaults.common import bad_value, check_choice, check_index, check_positive_int
from vidjax.experiments import common
from vidjax.data.provenance import store_benchmark
from vidjax.retrieval import DenseIndex
from vidjax.worlds import moving_objects

RESUMABLE = ()  # the rule of `common.is_resumable` covers eval.*


def validate(config) -> None:
  check_choice(config, "dataset", tuple(DATASETS))
  check_choice(config, "data.protocol", PROTOCOLS)
  check_positive_int(config, ("eval.query_chunk", "eval.gallery_chunk"))
  if config.data.features and not config.data.annotations:
    bad_value("data.annotations", config.data.annotations,
                     "the dataset's annotation file when data.features is set")
  check_choice(config, "data.source", ("store", "tfds"))
  check_index(config)
  if config.data.source == "tfds" and not (config.data.tfds and config.data.split):
    bad_value("data.tfds / data.split", (config.data.tfds, config.data.split),
                     "a built VidjaxRetrieval version folder and one of its splits when data.source='tfds'")
  if config.data.source == "tfds" and (config.data.annotations or config.data.features):
    bad_value("data.annotations / data.features", (config.data.annotations, config.data.features),
                     "empty when data.source='tfds': the TFDS dataset carries the queries and embeddings")


def tfds_data(config) -> tuple[RetrievalBenchmark, np.ndarray, np.ndarray, dict]:
  """(benchmark, text [Q, D], video [N, D], store manifest fields) of one split of a VidjaxRetrieval dataset."""
  from vidjax.tfds import common as tfds_common, retrieval as tfds_retrieval  # the [tfds] extra
  builder = tfds_common.open_dataset(config.data.tfds)
  meta = builder.info.metadata
  if meta.get("dataset") != config.dataset or "features" not in meta:
    raise ValueError(f"data.tfds {config.data.tfds} holds {meta.get('dataset')!r} "
                     f"{'with' if 'features' in meta else 'without'} embeddings; this run needs {config.dataset!r} "
                     "built with a feature store (RetrievalConfig.features)")
  bench = tfds_retrieval.as_benchmark(builder, config.data.split)
  records = tfds_common.read_split(builder, config.data.split)
  video = {r["video_id"]: r["video_embedding"] for r in records}
  missing = [v for v in bench.corpus if v not in video]
  if missing:
    raise MissingFeatureError(f"corpus videos: {len(missing)} of {len(bench.corpus)} have no query in "
                              f"{config.data.tfds} [{config.data.split}], so no embedding there "
                              f"(e.g. {missing[:3]}); use the feature store for this corpus")
  text = np.stack([r["text_embedding"] for r in records])
  return bench, text, np.stack([video[v] for v in bench.corpus]), dict(meta["features"])


@common.precision_policy
def run(config, workdir: str | Path) -> dict:
  """Runs stage-1 retrieval; returns (and writes) the results dict."""
  workdir = common.start_run(config, workdir, validate, RESUMABLE)
  start = time.time()
  store = None
  if config.data.source == "tfds":
    bench, text, video, manifest = tfds_data(config)
    path = {"path": "real", "provenance": manifest, "skipped_videos": {"count": 0, "file": ""}}
  else:  # annotations + a store: a user's, or those the world of a `world` section writes (`common.world_data`)
    config = common.world_data(config, workdir, moving_objects.write_world)
    store = FeatureStore(config.data.features)
    bench = build_benchmark(read_dataset(config.dataset, config.data.annotations, config.data.video_list),
                            protocol=config.data.protocol, split=config.data.split or None)
    bench, path = store_benchmark(config, workdir, store, bench, [config.data.clip_kind])
    text = embeddings(store, config.data.text_kind, bench.query_ids, "query texts")
    video = embeddings(store, config.data.clip_kind, bench.corpus, "corpus videos")
    manifest = store.metadata
  source = f"data.tfds {config.data.tfds}" if store is None else f"feature store {config.data.features}"
  common.check_informative(text, "query text", f"{source} kind {config.data.text_kind!r}")  # all-zero / constant: refused
  common.check_informative(video, "corpus video", f"{source} kind {config.data.clip_kind!r}")
  synthetic, dataset = bool(manifest.get("synthetic", False)), dataset_label(config.dataset, manifest)
  print(("SYNTHETIC DATA: " if synthetic else "") + "retrieval benchmark: " +
        ", ".join(f"{k}={v}" for k, v in bench.stats().items()), flush=True)
  if text.shape[-1] != video.shape[-1]:
    raise ValueError(f"text embeddings have width {text.shape[-1]} but video embeddings {video.shape[-1]}: "
                     "stage 1 needs one joint text-video space")
  relevant = bench.relevant()
  values = evaluate.evaluate_gallery(evaluate.CosineScorer(), {"text": text}, {"candidates": video}, relevant,
                                     query_chunk=config.eval.query_chunk, gallery_chunk=config.eval.gallery_chunk)
  stage1 = evaluate.rounded({k: v for k, v in values.items() if k != "v2t_videos"}, 4)  # with its notes
  metrics = {"stage1": stage1}
  index_info = {}
  if (config.index.backend, config.index.dtype) != ("jax", "float32"):  # the exact float32 index is stage1 itself
    index = DenseIndex.from_config(bench.corpus, video, config.index, query_batch=config.eval.query_chunk)
    k = min(10, len(bench.corpus))
    ranked = evaluate.evaluate_ranked(index, {index.query_key: text}, np.asarray(bench.corpus)[relevant], k,
                                      ks=[x for x in (1, 5, 10) if x <= k], chunk=config.eval.query_chunk)
    metrics["stage1_index"] = evaluate.rounded(ranked, 4, prefix="t2v_")
    index_info = {"index": {"backend": index.backend, "dtype": index.dtype, "params": index.params,
                            "exact": index.exact}}
  results = common.results_dict(
      config, dataset=dataset, synthetic=synthetic, metrics=metrics, **index_info,
      benchmark={**bench.stats(), "v2t_videos": values["v2t_videos"]},
      features={**{k: manifest.get(k) for k in ("checkpoint_hash", "random_init")},
                "backbone": provenance.backbone_as_built(manifest)}, **path)
  rows = {"stage1 (zero-shot cosine)": stage1}
  if "stage1_index" in metrics:
    rows[f"stage1 through the {config.index.backend} index"] = metrics["stage1_index"]
  tables = [evaluate.format_table(rows, f"Text-video retrieval ({dataset}), "
                                  f"{bench.stats()['queries']} queries x {len(bench.corpus)} videos", synthetic)]
  # World-only diagnostics: what the world truth beside a world's store says ({} for any other store).
  checks = moving_objects.world_checks(store, bench, text, video) if store is not None else {}
  if checks:
    results["world_checks"] = checks
    tables.append(evaluate.format_table({"stage1": checks}, "Hard negatives at stage 1 (% of base queries where the "
                                        "negative scores >= the base video)", synthetic,
                                        columns=[k for k in checks if k != "note"]))
  results["seconds"] = round(time.time() - start, 1)
  common.write_results(workdir, results, tables)
  return results
