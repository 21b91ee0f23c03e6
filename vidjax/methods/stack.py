"""The composed retrieval stack as a method: its corpus, the pair-rerank stage trained on the recall stage's
candidates, GRDR as a recall stage, and the index `python -m vidjax.search` loads (`write_index`; the format and its
reader: `vidjax.retrieval.index`).

`configs/stack_*.py` (`vidjax.experiments.stack`) builds and evaluates a stack with these; `vidjax.search` reads
the index it writes.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import jax
import ml_collections
import numpy as np

from vidjax import checkpoints, evaluate, losses, metrics, train
from vidjax.data import pipeline
from vidjax.data.features import FeatureStore
from vidjax.data.pipeline import FeatureTable
from vidjax.methods.vedje import FULL
from vidjax.methods import cast as cast_method
from vidjax.methods import dense
from vidjax.methods import grdr as grdr_method
from vidjax.methods import vedje
from vidjax.models.pair import PairReranker
from vidjax.ops import l2_normalize
from vidjax.retrieval import DenseIndex, Stack, Stage
from vidjax.retrieval import index as index_format
from vidjax.scorers.vedje import PairBatches, VedjeScorer
from vidjax.tokenizers.wordpiece import WordPieceTokenizer

RECALLS = ("dense", "grdr")
ROWS = ("recall", "recall_rerank", "full_stack")  # the rows results.json reports


# ----------------------------------------------------------------------------------------------
# The corpus and what each clip is to a query.


class Corpus:
  """Every clip of the given videos: ids (sorted, as `DenseIndex` stores them), their video and step label."""

  def __init__(self, videos: Sequence[Any]):
    clips = sorted((c for v in videos for c in v.clips), key=lambda c: c.clip_id)
    if not clips:
      raise ValueError("the stack's corpus is empty: no evaluation videos with clips")
    self.ids = [c.clip_id for c in clips]
    self.row = {c: i for i, c in enumerate(self.ids)}
    self.captions = [c.text for c in clips]
    self.video_ids = [c.video_id for c in clips]
    # Identity = the same step in another video: (task, step) where steps are labelled, else the task.
    labels = [(c.task, c.step) if c.step != "" else (c.task,) for c in clips]
    self.video = np.unique(self.video_ids, return_inverse=True)[1]
    self.label = np.unique([repr(x) for x in labels], return_inverse=True)[1]

  def kinds(self, result_ids: np.ndarray, targets: Sequence[str]) -> np.ndarray:
    """int [Q, K] `metrics.NEG_TYPE_CODES` of every result relative to its query's ground truth."""
    rows = np.vectorize(self.row.__getitem__, otypes=[np.int64])(result_ids)
    t = np.array([self.row[x] for x in targets])[:, None]
    same_video, same_label = self.video[rows] == self.video[t], self.label[rows] == self.label[t]
    return np.select([rows == t, same_video, same_label], [metrics.GT, metrics.STATE, metrics.IDENTITY], metrics.EASY)


def split_videos(data: cast_method.CVRData) -> tuple[list, list]:
  """(training videos, evaluation videos) as the CVR files split them (every split rule, CrossTask's too)."""
  if not data.videos:
    raise ValueError("the stack needs the videos of both splits (a feature store source, not TFDS)")
  video_of = {c.clip_id: v.video_id for v in data.videos for c in v.clips}
  evaluation = {video_of[c] for r in data.benchmark for c in [r["target"], *r["candidates"]]}
  training = {video_of[r["target"]] for r in data.instances + data.heldout}
  return ([v for v in data.videos if v.video_id in training], [v for v in data.videos if v.video_id in evaluation])


def table(data: cast_method.CVRData, config, kind: str, ids: Sequence[str]) -> FeatureTable:
  return FeatureTable(data.store, kind, list(ids), int(config.data.memory_budget_mb * 2**20))


# ----------------------------------------------------------------------------------------------
# The rerank stage.


def rerank_training_set(corpus: Corpus, clips: FeatureTable, texts: FeatureTable, instances: Sequence[dict],
                        k: int, query_batch: int) -> dict[str, np.ndarray]:
  """Every training query's top-k recall candidates over the training corpus (the positive forced in).

  Returns {"text" [N] rows of `texts`, "candidates" [N, k] rows of `clips`, "prior" [N, k] recall cosines,
  "positive" [N, k] 1 = the candidate shows the query's step (or is its clip)}.
  """
  index = DenseIndex(corpus.ids, clips.gather(np.arange(len(corpus.ids))), query_batch=query_batch)
  targets = [r["target"] for r in instances]
  text_rows = np.array([texts.index[t] for t in targets])
  queries = texts.gather(text_rows)
  ids, prior = index.search(queries, k)
  rows = np.vectorize(corpus.row.__getitem__, otypes=[np.int64])(ids)
  target_rows = np.array([corpus.row[t] for t in targets])
  missing = ~(rows == target_rows[:, None]).any(axis=1)
  rows[missing, -1] = target_rows[missing]  # the positive always in its own softmax
  vectors = clips.gather(rows[missing, -1])
  prior[missing, -1] = np.sum(l2_normalize(vectors) * l2_normalize(queries[missing]), axis=-1)
  positive = (corpus.label[rows] == corpus.label[target_rows][:, None]) | (rows == target_rows[:, None])
  return {"text": text_rows, "candidates": rows, "prior": prior.astype(np.float32),
          "positive": positive.astype(np.float32)}


def check_rerank_inputs(config, store: FeatureStore | None) -> None:
  """stack.reranker = "vedje" / "xpool" reads each clip's frame tokens: one clear error when the data's store has none
  (the embedded procedural world's clips have no frames)."""
  reranker = config.stack.reranker
  kind = {"vedje": config.vedje.tokens_kind, "xpool": config.dense.frames_kind}.get(reranker)
  if kind is not None and (store is None or kind not in store.kinds()):
    raise ValueError(f"stack.reranker={reranker!r} reads each clip's frame tokens (kind {kind!r}): give a store "
                     "prepared with them (configs/prepare.py, save_tokens=True), or stack.reranker='pair'; the "
                     "embedded world has none")


def vedje_stage(config, workdir: Path, data: cast_method.CVRData, train_videos, corpus_ids: Sequence[str],
                query_texts: Sequence[str]) -> Stage:
  """stack.reranker = "vedje": VEDJE trained on the training clips (each step caption a query, its clip the
  positive; stage-1 neighbourhoods from the store's clip / text embeddings) through the one loop in
  `<workdir>/train/vedje`, the evaluation clips' caches indexed into `<workdir>/features`, and the rerank Stage over
  them. The stack's queries then carry `row`: each query's row in `query_texts` (its step caption)."""
  vc, store = config.vedje, data.store
  check_rerank_inputs(config, store)
  frames, patches, visual_dim = store.item_shape(vc.tokens_kind)
  mc = ml_collections.ConfigDict(vc.model.to_dict())
  mc.frames = frames  # the store's T (the `_vedje` docstring in configs/stack/common.py)
  tokenizer = WordPieceTokenizer.from_vocab(Path(mc.minilm_dir or checkpoints.default_minilm_dir()) / "vocab.txt")
  clips = [c for v in train_videos for c in v.clips]
  ids = [c.clip_id for c in clips]
  tokens = pipeline.text_token_batch(tokenizer, [c.text for c in clips], mc.max_text_len)
  split = vedje.Split(ids, np.arange(len(ids)), tokens["input_ids"], tokens["attention_mask"],
                      store.get(config.data.text_kind, ids), ids, store.get(config.data.clip_kind, ids))
  negatives = vedje.stage1_negatives(split, vc.train)
  cfg = vedje.model_config(mc, FULL, visual_dim, patches, split.clip.shape[1], len(tokenizer.vocab))
  cfg = dataclasses.replace(cfg, train_pairs=vedje.train_pairs(cfg, vc.train.memory_gb * 1e9))
  with jax.default_matmul_precision(config.precision.train):  # config.precision's training phase
    params = vedje.train_variant(FULL, cfg, split, pipeline.FeatureTable(store, vc.tokens_kind, ids),
                                 negatives, vc.train, mc, tokenizer, config.seed, workdir / "train" / "vedje")
  caches = FeatureStore.create(workdir / "features")
  vedje.index_caches(params, cfg, store, caches, vc.tokens_kind, "cache", vc.precision, list(corpus_ids),
                     vc.train.progress)
  queries = pipeline.text_token_batch(tokenizer, list(query_texts), mc.max_text_len)
  pairs = PairBatches(caches, "cache", [str(i) for i in range(len(query_texts))], queries["input_ids"],
                      queries["attention_mask"])
  return Stage("rerank", VedjeScorer(cfg, params["reranker"], pair_block=vc.pair_block), config.stack.rerank_k,
               batch_fn=pairs.text_to_video)


def xpool_stage(config, workdir: Path, data: cast_method.CVRData, train_videos, corpus_ids: Sequence[str]) -> Stage:
  """stack.reranker = "xpool": X-Pool (`vidjax.methods.dense`, section `dense`) trained on the training clips (each
  step caption a pseudo query of its clip) through the one loop in `<workdir>/train/xpool`, and the rerank Stage over
  the evaluation clips' frame features. The stack's queries carry `text` (the query captions' embeddings)."""
  dc, store = config.dense, data.store
  check_rerank_inputs(config, store)
  ids = [c.clip_id for v in train_videos for c in v.clips]
  split = dense.Split(ids, store.get(config.data.text_kind, ids), np.arange(len(ids)), ids,
                      dense.frame_features(store, dc.frames_kind, ids, dc.model.num_frames),
                      store.get(config.data.clip_kind, ids))
  with jax.default_matmul_precision(config.precision.train):  # config.precision's training phase
    model, params, _ = dense.fit_dense(dc, "xpool", split, config.seed, workdir / "train" / "xpool")
  frames = dense.frame_features(store, dc.frames_kind, list(corpus_ids), dc.model.num_frames)
  row = {c: i for i, c in enumerate(corpus_ids)}

  def batch_fn(queries, candidate_ids, previous):  # a padded candidate (not a corpus id) keeps its -inf prior
    rows = np.vectorize(lambda c: row.get(c, 0), otypes=[np.int64])(candidate_ids)
    return {"text": queries["text"], "candidates": frames[rows], "prior": previous}

  return Stage("rerank", dense.scorer(model, params), config.stack.rerank_k, batch_fn=batch_fn)


def train_reranker(config, workdir: Path, data: cast_method.CVRData, train_videos, texts: FeatureTable, mesh):
  """Trains the pair reranker with the one train loop; returns (model, params)."""
  rc = config.rerank
  corpus = Corpus(train_videos)
  clips = table(data, config, config.data.clip_kind, corpus.ids)
  train_set = rerank_training_set(corpus, clips, texts, data.instances, rc.candidates, config.stack.query_batch)
  model = PairReranker()

  def batch_fn(indices):  # text and candidate clips as rows, gathered on the device
    i = np.asarray(indices)
    return {"text": train_set["text"][i].astype(np.int32), "candidates": train_set["candidates"][i].astype(np.int32),
            "prior": train_set["prior"][i], "positive": train_set["positive"][i]}

  gather = pipeline.Gather({"text": texts, "clip": clips}, {"text": "text", "candidates": "clip"})

  def loss_fn(params, batch, rng):
    del rng
    scores = model.apply({"params": params}, batch["text"], batch["candidates"], batch["prior"])
    return losses.multi_positive_softmax(scores, batch["positive"], tau=rc.tau), {}

  example = gather.gather_all(batch_fn([0]))
  state = train.fit_epochs(
      name="rerank", init_fn=lambda rng: model.init(rng, example["text"], example["candidates"], example["prior"])["params"],
      loss_fn=loss_fn, num_examples=len(train_set["text"]), batch_fn=batch_fn, tcfg=rc, seed=config.seed,
      workdir=workdir / "train" / "rerank", mesh=mesh, description=f"{config.name}/rerank",
      batch_key="rerank.batch_size", gather=gather)
  return model, jax.device_get(state.params)


# ----------------------------------------------------------------------------------------------
# GRDR as the recall stage.


def grdr_model(config, dim: int):
  """The GRDR module of `config.grdr.model`, its query width set to the space's text width."""
  mcfg = ml_collections.ConfigDict(config.grdr.model.to_dict())
  mcfg.query_dim = dim
  return grdr_method.build_model(mcfg, dim)


def train_grdr(config, workdir: Path, data: cast_method.CVRData, corpus: Corpus):
  """GRDR trained on the training clips, each clip's caption embedding its query; returns (model, params)."""
  features = table(data, config, config.data.clip_kind, corpus.ids).gather(np.arange(len(corpus.ids)))
  queries = table(data, config, config.data.text_kind, corpus.ids).gather(np.arange(len(corpus.ids)))
  video = np.arange(len(corpus.ids))
  intent, valid = grdr_method.query_intents(queries, video, len(video), config.grdr.model.num_views, config.seed)
  model = grdr_model(config, features.shape[1])
  data = grdr_method.TrainingSet(features, queries, video, intent, valid)
  return model, grdr_method.train_grdr(model, data, config.grdr.train, workdir / "train" / "grdr", config.seed)


def grdr_recall(model, params, vectors: np.ndarray, ids: Sequence[str], k: int) -> Stack:
  """Generative recall over the corpus (beam width = k, at most k clips) then its dense rerank (GRDR §3.4), as one
  recall stage."""
  generative, _ = grdr_method.make_recall(model, params, vectors, list(ids),
                                              ml_collections.ConfigDict(dict(beam_width=k, candidates=k)))
  return Stack(generative, k, [Stage("dense", evaluate.CosineScorer(), k)])


# ----------------------------------------------------------------------------------------------
# The stacks and their metrics.


def budgets(config, corpus_size: int) -> tuple[int, int, int]:
  """(k_recall, rerank_k, k) clipped to the corpus: no stage asks for more clips than the corpus holds."""
  s = config.stack
  k_recall = min(s.k_recall, corpus_size)
  return k_recall, min(s.rerank_k, k_recall), min(s.k, k_recall)


def stacks(recall: DenseIndex, rerank: Stage, cast_scorer, config, corpus_size: int) -> dict[str, Stack]:
  """The three reported rows, then the full stack with the rerank keeping each of `stack.rerank_k_sweep` (every
  budget clipped to the corpus, `budgets`); `rerank` is the rerank stage (pair reranker or VEDJE)."""
  s = config.stack
  k_recall, rerank_k, k = budgets(config, corpus_size)
  consistency = Stage("cast", cast_scorer, k)
  keeping = lambda keep: dataclasses.replace(rerank, k=min(keep, k_recall))  # noqa: E731
  full = lambda keep: Stack(recall, k_recall, [keeping(keep), consistency], s.query_batch)  # noqa: E731
  return {"recall": Stack(recall, k_recall, (), s.query_batch),
          "recall_rerank": Stack(recall, k_recall, [keeping(rerank_k)], s.query_batch),
          "full_stack": full(s.rerank_k),
          **{f"full_stack (rerank keeps {k})": full(k) for k in s.rerank_k_sweep}}


def row_metrics(result, corpus: Corpus, targets: Sequence[str], k: int = 10) -> dict[str, float]:
  """R@1/5/10 over the corpus (an R@K no rank can miss, K >= the corpus, with its note) and the confusion rates."""
  values = metrics.recall_from_ranked(result.ids[:, :k], np.asarray(targets), corpus=len(corpus.ids))
  values.update(metrics.confusion_rates(corpus.kinds(result.ids, targets), k))
  return evaluate.rounded(values, 4)


def latency(stack: Stack, queries: dict, exclude: Sequence[Sequence[str]], n: int) -> dict[str, float]:
  """ms per query per stage, queries one at a time (batch 1) after one warm-up query (compilation)."""
  single = Stack(stack.recall, stack.k_recall, stack.stages, query_batch=1)
  single.search({key: v[:1] for key, v in queries.items()}, 10, exclude[:1])
  timed = single.search({key: v[:n] for key, v in queries.items()}, 10, exclude[:n])
  return {key: round(v, 4) for key, v in timed.latency_ms.items()}


# ----------------------------------------------------------------------------------------------
# The index `python -m vidjax.search` loads (its format: `vidjax.retrieval.index`).


def write_index(path: Path, *, corpus: Corpus, vectors: np.ndarray, texts: FeatureTable, videos, config,
                backbone: str, synthetic: bool, rerank, cast_parts, grdr_parts=None, text_tower: dict | None = None) -> Path:
  """Writes the stack's index at `path` (`vidjax.retrieval.index.write_index`): the corpus, every caption's mean text
  embedding (the query encoder of a space without a text tower), rerank.npz / cast.npz (/ grdr.npz) parameters.
  `text_tower` (`vidjax.extract.text_tower` of the store): typed queries are encoded by the text tower that embedded the
  captions."""
  path.mkdir(parents=True, exist_ok=True)
  clips = [c for v in videos for c in v.clips]
  captions = sorted({c.text for c in clips})
  which = {t: i for i, t in enumerate(captions)}
  sums = np.zeros((len(captions), texts.dim), np.float32)
  np.add.at(sums, [which[c.text] for c in clips], texts.gather(np.array([texts.index[c.clip_id] for c in clips])))
  cast_model, cast_params, ensemble = cast_parts
  if rerank is not None:  # the pair reranker (a VEDJE stage reads its run's caches: not in the index, `omitted`)
    checkpoints.save_npz(rerank[1], path / "rerank.npz")
  checkpoints.save_npz(cast_params, path / "cast.npz")
  k_recall, rerank_k, k = budgets(config, len(corpus.ids))  # what the run evaluated: no stage past the corpus
  recall = {"kind": "dense", "file": "corpus.npz", "k": k_recall, "backbone": backbone,
            "index": config.index.to_dict()}  # the backend `python -m vidjax.search` builds over corpus.npz
  if grdr_parts is not None:
    checkpoints.save_npz(grdr_parts[1], path / "grdr.npz")
    recall = {"kind": "grdr", "file": "grdr.npz", "k": k_recall, "backbone": backbone,
              "model": config.grdr.model.to_dict(), "context_len": config.model.context_len}
  text_encoder = ({"kind": "caption_lookup", "file": "texts.npz", "backbone": backbone} if text_tower is None else
                  {"kind": "text_tower", "file": "texts.npz", "backbone": backbone, "tower": text_tower})
  stages = [
      *([{"name": "rerank", "kind": "pair_reranker", "k": rerank_k, "file": "rerank.npz", "backbone": backbone}]
        if rerank is not None else []),
      {"name": "cast", "kind": "cast_ensemble", "k": k, "file": "cast.npz", "backbone": backbone,
       "num_heads": cast_model.num_heads, "context_len": config.model.context_len,
       "w_v": ensemble.w_v, "w_p": ensemble.w_p, "needs_context": True},
  ]
  return index_format.write_index(
      path, ids=corpus.ids, vectors=vectors, captions=corpus.captions, videos=corpus.video_ids,
      text_captions=captions, text_vectors=l2_normalize(sums), dataset=config.dataset, synthetic=synthetic,
      backbone=backbone, text_encoder=text_encoder, recall=recall, stages=stages, omitted=omitted_stages(config))


def omitted_stages(config) -> list[dict]:
  """The run's stages its index does not keep: a VEDJE rerank stage (it reads the run's caches of the evaluation
  clips and a tokenizer, which the index does not carry) or an X-Pool one (the clips' frame features), so
  `python -m vidjax.search` says it ran without it."""
  reranker = config.stack.reranker
  if reranker not in ("vedje", "xpool"):
    return []
  carries = "caches and tokenizer" if reranker == "vedje" else "model and the clips' frame features"
  return [{"name": "rerank", "kind": reranker, "why": f"built with reranker={reranker}, whose {carries} the "
           "index does not carry; search runs recall -> cast"}]
