"""Dense baselines as a method: CLIP4Clip (meanP, seqTransf) and X-Pool trained on a store's frame features, the
frozen backbone's cosine beside them; what another experiment needs to train one and rerank with it.

    split = read_split(store, bench, config.data, config.model.num_frames, "training queries")   # pairs from a store
    model, params = fit_dense(config, "xpool", split, seed, workdir / "models" / "xpool")        # the one loop
    scorer(model, params).score({"text": [Q, D], "candidates": [Q, K, T, D_v], "prior": [Q, K]})  # a rerank stage

`config` is any section with `model` and `train` as `configs/dense/common.py` builds them (`dense_section()`): GRDR's
rows and the composed stack can carry one. The training pairs are the training split's captions (or paragraphs) as
pseudo queries of their videos, as GRDR's and VEDJE's training sets; the text side is the store's frozen `text`
embedding of each, the video side the store's per-frame features (`data.frames_kind`: `frame_clip`, `[T, D_v]` frame
embeddings in the text space, or `[T, P, D_v]` patch tokens averaged over the P patches of a frame), `model.num_frames`
of them sampled uniformly (CLIP4Clip and X-Pool: 12).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from vidjax import convert, evaluate, losses, train
from vidjax.data import pipeline, provenance
from vidjax.data.features import FeatureStore
from vidjax.data.retrieval import DATASETS as RETRIEVAL_DATASETS
from vidjax.data.retrieval import build_benchmark, dataset_label, embeddings, read_dataset
from vidjax.defaults import common
from vidjax.models.dense import DenseConfig, DenseRetriever, init_params
from vidjax.scorers.dense import DenseScorer

# The rows of a run (config `rows`), in print order: the frozen backbone's cosine (the reference) and the trained
# retrievers. A trained row's pooling (`vidjax.models.dense.POOLINGS`) and the paper whose schedule it trains with
# (`train.<paper>`).
ROWS = ("backbone", "clip4clip_meanp", "clip4clip_seqtransf", "xpool")
POOLING = {"clip4clip_meanp": "meanp", "clip4clip_seqtransf": "seqtransf", "xpool": "xpool"}
PAPER = {"clip4clip_meanp": "clip4clip", "clip4clip_seqtransf": "clip4clip", "xpool": "xpool"}
# The datasets the papers report (CLIP4Clip: MSR-VTT, MSVD, LSMDC, ActivityNet, DiDeMo; X-Pool: MSR-VTT, MSVD,
# LSMDC): the foundation's retrieval protocols plus LSMDC's per-caption one.
DATASETS = {**RETRIEVAL_DATASETS, "lsmdc": ("captions", "")}
KEYS = ("t2v_r1", "t2v_r5", "t2v_r10", "t2v_mdr", "t2v_mnr", "v2t_r1", "v2t_r5", "v2t_r10", "v2t_mdr", "v2t_mnr")


@dataclasses.dataclass
class Split:
  """One split's queries (ids, frozen text embeddings `[Q, D]`, each one's video row) and videos (ids, frame
  features `[N, T, D_v]`, the backbone's clip embeddings `[N, D]`)."""
  query_ids: list[str]
  text: np.ndarray
  query_video: np.ndarray
  video_ids: list[str]
  frames: np.ndarray
  clip: np.ndarray


def frame_indices(total: int, num_frames: int) -> np.ndarray:
  """`num_frames` frame indices spread uniformly over `total` (CLIP4Clip's and X-Pool's uniform sampling); all
  `total` when `num_frames` is 0 or at least `total`."""
  if num_frames <= 0 or num_frames >= total:
    return np.arange(total)
  return np.round(np.linspace(0, total - 1, num_frames)).astype(np.int64)


def frame_features(store: FeatureStore, kind: str, ids, num_frames: int, chunk: int = 128) -> np.ndarray:
  """float32 `[N, T', D_v]` per-frame features of `ids`: the store's `[T, P, D_v]` patch tokens averaged over the
  patches of each frame (or its `[T, D_v]` frame embeddings as they are), `num_frames` frames (`frame_indices`)."""
  shape = store.item_shape(kind)
  if len(shape) not in (2, 3):
    raise ValueError(f"store kind {kind!r} must hold per-frame features [T, P, D_v] or [T, D_v] per video, got "
                     f"item shape {shape}")
  keep = frame_indices(shape[0], num_frames)
  out = np.empty((len(ids), len(keep), shape[-1]), np.float32)
  for start in range(0, len(ids), chunk):
    x = np.asarray(store.get(kind, list(ids[start:start + chunk])), np.float32)[:, keep]
    out[start:start + chunk] = x.mean(axis=2) if x.ndim == 4 else x
  return out


def read_split(store: FeatureStore, bench, data, num_frames: int) -> Split:
  """A benchmark's queries and corpus as arrays from `store` (kinds `data.text_kind`, `data.frames_kind`,
  `data.clip_kind`)."""
  videos = list(bench.corpus)
  return Split(bench.query_ids, embeddings(store, data.text_kind, bench.query_ids, "query texts"), bench.relevant(),
               videos, frame_features(store, data.frames_kind, videos, num_frames),
               embeddings(store, data.clip_kind, videos, "corpus videos"))


def model_config(section, row: str, embed_dim: int, frame_dim: int) -> DenseConfig:
  """The `DenseConfig` of a trained row from a section's `model` (widths from the data)."""
  mc = section.model
  return DenseConfig(pooling=POOLING[row], embed_dim=embed_dim, frame_dim=frame_dim, seq_layers=mc.seq_layers,
                     seq_head_dim=mc.seq_head_dim, max_positions=mc.max_positions, xpool_heads=mc.xpool_heads,
                     dropout=mc.xpool_dropout, temperature=mc.temperature, learn_logit_scale=mc.learn_logit_scale)


def pair_batch(query_video: np.ndarray, idx, mask_same_video: bool) -> dict:
  """A training batch of caption rows `idx`: {"text": the captions' rows, "frames": their videos' rows} (gathered on
  the device), and with `mask_same_video` "same" bool [B, B], True where captions i and j describe one video (the
  pairs `losses.similarity_infonce` leaves out of its softmaxes)."""
  idx = np.asarray(idx)
  video = np.asarray(query_video)[idx]
  batch = {"text": idx.astype(np.int32), "frames": video.astype(np.int32)}
  return {**batch, "same": video[:, None] == video[None, :]} if mask_same_video else batch


def fit_dense(section, row: str, split: Split, seed: int, workdir: str | Path) -> tuple[DenseRetriever, Any, dict]:
  """Trains `row` through the one loop on `split`'s (caption, video) pairs; returns (model, host params, info).

  A batch is `train.<paper>.batch_size` pairs drawn from the captions (an epoch visits every caption once); every
  other pair of the batch is a negative, a second caption of the same video included, as both papers train
  (`train.<paper>.mask_same_video`: True leaves such pairs out of the softmaxes, `losses.similarity_infonce`'s
  `same`). AdamW with linear warm-up over `warmup_fraction` of the steps then cosine decay (both papers), weight
  decay on the weight matrices only. The texts and the videos' frames are gathered on the device from tables put there once.
  Resumes from `workdir`'s checkpoints. `info`: steps, batch size, epochs, lr, parameters, and `seconds`, this
  call's wall time (a resumed or finished training counts only what this call did)."""
  tc = section.train[PAPER[row]]
  model = DenseRetriever(model_config(section, row, split.text.shape[1], split.frames.shape[2]))
  t = split.frames.shape[1]
  qv = np.asarray(split.query_video, np.int64)

  def batch_fn(idx):
    return pair_batch(qv, idx, tc.mask_same_video)

  def loss_fn(params, batch, rng):
    sims, scale = model.apply({"params": params}, batch["text"], batch["frames"], deterministic=False,
                              rngs={"dropout": rng})
    return losses.similarity_infonce(sims, scale, batch.get("same")), {"logit_scale": scale}

  steps = (len(qv) // tc.batch_size) * tc.epochs
  warmup = int(round(tc.warmup_fraction * steps))
  decay = lambda params: jax.tree.map(lambda x: x.ndim >= 2, params)  # noqa: E731
  optimizer = train.adamw(tc.lr, tc.weight_decay, warmup, max(steps, warmup + 1), mask=decay)
  gather = pipeline.Gather({"text": split.text, "frames": split.frames}, {"text": "text", "frames": "frames"})
  start = time.time()
  state = train.fit_epochs(
      name=f"dense {row}", init_fn=lambda rng: init_params(model, rng, t), loss_fn=loss_fn, num_examples=len(qv),
      batch_fn=batch_fn, tcfg=tc, seed=seed, workdir=workdir, optimizer=optimizer, gather=gather,
      batch_key=f"train.{PAPER[row]}.batch_size", description=f"dense {row}")
  params = jax.device_get(state.params)
  info = {"steps": steps, "batch_size": tc.batch_size, "epochs": tc.epochs, "lr": tc.lr,
          "seconds": round(time.time() - start, 1), "params": int(sum(np.size(x) for x in jax.tree.leaves(params)))}
  return model, params, info


def checkpoint_row(directory: str) -> tuple[str, dict]:
  """(the row, the conversion record) of a converted official checkpoint (`python -m vidjax.convert --from xpool` or
  `--from clip4clip`): X-Pool's is the `xpool` row, CLIP4Clip's the row of its pooling (meanP or seqTransf)."""
  _, record = convert.load(directory)
  kind, info = record.get("from"), record.get("info") or {}
  if kind == "xpool":
    return "xpool", record
  if kind == "clip4clip" and f"clip4clip_{info.get('pooling')}" in POOLING:
    return f"clip4clip_{info['pooling']}", record
  raise convert.ConversionError(f"{directory}: converted from {kind!r} (pooling {info.get('pooling')!r}); a dense "
                                "run takes an X-Pool or CLIP4Clip conversion")


def from_checkpoint(section, row: str, split: Split, directory: str) -> tuple[DenseRetriever, Any, dict]:
  """`row`'s model with the converted official weights at `directory` (`checkpoint_row`), evaluated as released:
  nothing trains. The model's `model.*` values are the ones the checkpoint fixes (`info["config"]`: heads, layers,
  position table, logit scale), recorded in the returned info beside the conversion's source and hash; the params'
  paths and shapes are checked against the model (`vidjax.convert.into`)."""
  found, record = checkpoint_row(directory)
  if found != row:
    raise convert.ConversionError(f"{directory}: a {found} checkpoint, not {row}'s")
  fixed = dict((record.get("info") or {}).get("config") or {})
  section = common.with_values(section, fixed)
  model = DenseRetriever(model_config(section, row, split.text.shape[1], split.frames.shape[2]))
  init = jax.device_get(init_params(model, jax.random.PRNGKey(0), split.frames.shape[1]))
  parts = (record.get("info") or {}).get("parts")
  params, _ = convert.into(init, directory, ("xpool", "clip4clip"), subtree=parts[0] if parts else None)
  info = {"steps": 0, "trained": False, "init_checkpoint": str(directory), "from": record.get("from"),
          "checkpoint": record.get("checkpoint"), "sha256": record.get("sha256"), "model": fixed,
          "params": int(sum(np.size(x) for x in jax.tree.leaves(params)))}
  return model, params, info


def load_dense(section, row: str, embed_dim: int, frame_dim: int, workdir: str | Path) -> tuple[DenseRetriever, Any]:
  """A finished `fit_dense`'s model and params, from its checkpoints in `workdir` (nothing trains)."""
  return DenseRetriever(model_config(section, row, embed_dim, frame_dim)), train.load_params(workdir)


def scorer(model: DenseRetriever, params: Any) -> DenseScorer:
  """The trained retriever as a Scorer (a rerank stage; `corpus_metrics` for the model alone)."""
  return DenseScorer(model, params)


def check_config(config) -> None:
  """The dense section's keys (`model`, `train`, `rows`, `data` kinds, `eval`): one clear error each."""
  if not config.rows or any(r not in ROWS for r in config.rows):
    common.bad_value("rows", tuple(config.rows), f"a non-empty subset of {ROWS}")
  check_section(config)
  common.check_positive_int(config, ("eval.query_chunk", "eval.gallery_chunk"))


def check_section(config, prefix: str = "") -> None:
  """The trained rows' `model` and `train` keys under `prefix` ("" in a dense run, "dense." in a config that carries
  `dense_section()`, GRDR's): one clear error each, naming the full key."""
  p, get = prefix, lambda key: common.get_key(config, prefix + key)  # noqa: E731
  common.check_positive_int(config, [f"{p}model.{k}" for k in ("seq_layers", "seq_head_dim", "max_positions",
                                                                 "xpool_heads")])
  if not (isinstance(get("model.num_frames"), int) and get("model.num_frames") >= 0):
    common.bad_value(f"{p}model.num_frames", get("model.num_frames"), "frames sampled per video (0 = all the store has)")
  common.check_positive(config, [f"{p}model.temperature"])
  if not 0.0 <= get("model.xpool_dropout") < 1.0:
    common.bad_value(f"{p}model.xpool_dropout", get("model.xpool_dropout"), "a rate in [0, 1)")
  for paper in ("clip4clip", "xpool"):
    common.check_positive_int(config, [f"{p}train.{paper}.{k}" for k in ("batch_size", "epochs", "checkpoint_every",
                                                                          "log_every")])
    common.check_positive(config, [f"{p}train.{paper}.lr"])
    common.check_fraction(config, f"{p}train.{paper}.warmup_fraction")
    if not isinstance(get(f"train.{paper}.mask_same_video"), bool):
      common.bad_value(f"{p}train.{paper}.mask_same_video", get(f"train.{paper}.mask_same_video"),
                       "True or False (False: every other pair of a batch is a negative, as the papers train)")
    if get(f"train.{paper}.weight_decay") < 0:
      common.bad_value(f"{p}train.{paper}.weight_decay", get(f"train.{paper}.weight_decay"), ">= 0")


# ----------------------------------------------------------------------------------------------
# A run's data: the test and training splits from the annotations and a store.


@dataclasses.dataclass
class Session:
  config: Any
  store: FeatureStore
  test: Split
  train: Split
  path: dict
  synthetic: bool
  dataset: str
  stats: dict


def read_bench(config, annotations: str, video_list: str, split: str):
  return build_benchmark(read_dataset(config.dataset, annotations, video_list), protocol=config.data.protocol,
                         split=split or None)


def session(config, workdir: Path) -> Session:
  """The run's test split (`data.annotations`) and training split (`data.train_annotations`, its reader split
  `data.train_split`; an id list `data.train_video_list` replaces it) from the store `data.features`."""
  d = config.data
  store = FeatureStore(d.features)
  kinds = [d.clip_kind, d.frames_kind]
  provenance.check_store(workdir, store, kinds + [d.text_kind])
  test = read_bench(config, d.annotations, d.video_list, d.split)
  if not d.train_annotations:
    common.bad_value("data.train_annotations", "", "the training split's annotation file (the dense rows train)")
  trainb = read_bench(config, d.train_annotations, d.train_video_list, "" if d.train_video_list else d.train_split)
  kept, skipped = provenance.present_videos(config, store, kinds, test.corpus, "test videos")
  kept_train, skipped_train = provenance.present_videos(config, store, kinds, trainb.corpus, "training videos")
  test, trainb = test.restrict(kept), trainb.restrict(kept_train)
  overlap = set(test.corpus) & set(trainb.corpus)
  if overlap:
    raise ValueError(f"{len(overlap)} test videos are also training videos (e.g. {sorted(overlap)[:3]}): check "
                     "data.train_annotations / data.train_split / data.train_video_list")
  num_frames = config.model.num_frames
  return Session(config, store, read_split(store, test, d, num_frames), read_split(store, trainb, d, num_frames),
                 provenance.real_path(workdir, store, skipped + skipped_train),
                 bool(store.metadata.get("synthetic", False)), dataset_label(config.dataset, store.metadata),
                 {**test.stats(), "train_queries": len(trainb.query_ids), "train_videos": len(trainb.corpus)})


def limits(num_train: int) -> dict:
  """Batch sizes at most the training queries (`common.clip_to_data`)."""
  return {f"train.{p}.batch_size": (num_train, f"the {num_train} training queries") for p in ("clip4clip", "xpool")}


def backbone_metrics(s: Session) -> dict:
  """The frozen backbone's cosine (the store's text and clip embeddings) over the whole test corpus."""
  c = s.config.eval
  return evaluate.evaluate_gallery(evaluate.CosineScorer(), {"text": s.test.text}, {"candidates": s.test.clip},
                                   s.test.query_video, query_chunk=max(c.query_chunk, 1024),
                                   gallery_chunk=max(c.gallery_chunk, 4096))


def row_metrics(s: Session, model: DenseRetriever, params: Any) -> dict:
  """A trained row alone over the whole test corpus (both directions)."""
  return scorer(model, params).corpus_metrics(s.test.text, s.test.frames, s.test.query_video,
                                              query_chunk=s.config.eval.query_chunk,
                                              gallery_chunk=s.config.eval.gallery_chunk)


def rounded(values: dict) -> dict:
  return evaluate.rounded(values, 2, KEYS)  # with the notes of an R@K no rank can miss


def space(config, store: FeatureStore) -> str:
  """The feature space of a run's models and benchmark (`evaluate_all` compares within one)."""
  meta = store.metadata
  return (f"the moving-object world of {config.name} (synthetic, seed {meta.get('seed')})" if "world" in meta else
          f"the feature store {config.data.features}")


def suite(config, workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """The backbone's cosine and every trained row (restored from `<workdir>/models/<row>`) on the test split's
  text-to-video R@K (`configs/evaluate_all.py`). Texts are keyed by query id, videos by video id."""
  workdir = Path(workdir)
  s = session(config, workdir)
  test, where = s.test, space(config, s.store)
  text_row, video_row = {q: i for i, q in enumerate(test.query_ids)}, {v: i for i, v in enumerate(test.video_ids)}
  models = []
  for row in config.rows:
    if row == "backbone":
      models.append(evaluate.dual_encoder("dense_backbone", where, lambda ids: test.text[[text_row[i] for i in ids]],
                                          lambda ids: test.clip[[video_row[i] for i in ids]],
                                          keys=evaluate.STORE_IDS, texts=text_row, videos=video_row))
      continue
    model, params = load_dense(config, row, test.text.shape[1], test.frames.shape[2], workdir / "models" / row)
    sc = scorer(model, params)

    def gallery(data, sc=sc):
      queries, videos, relevant = data
      return sc.corpus_metrics(test.text[[text_row[i] for i in queries]],
                               test.frames[[video_row[v] for v in videos]], np.asarray(relevant),
                               query_chunk=config.eval.query_chunk, gallery_chunk=config.eval.gallery_chunk)

    why = "a dense retriever scores text-video galleries only (its frames come from its own store)"
    models.append(evaluate.Model(row, where, {"gallery": gallery},
                                 {k: why for k in evaluate.BENCHMARK_KINDS if k != "gallery"}, evaluate.STORE_IDS,
                                 lambda kind, data: evaluate.missing_keys(kind, data, text_row, video_row)))
  bench = evaluate.Benchmark(f"R@K ({config.name})", "gallery", where,
                             (test.query_ids, test.video_ids, test.query_video), s.synthetic, evaluate.STORE_IDS)
  return models, [bench]
