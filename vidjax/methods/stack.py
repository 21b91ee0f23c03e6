"""The composed retrieval stack as a method: its corpus, the pair-rerank stage trained on the recall stage's
candidates, GRDR as a recall stage, and the index `python -m vidjax.search` loads (`write_index`, `StackIndex`).

`configs/stack_*.py` (`vidjax.experiments.stack`) builds and evaluates a stack with these; `vidjax.search` reads
the index it writes.
"""
from __future__ import annotations

import io as _io
from pathlib import Path
from typing import Any, Sequence

import jax
import ml_collections
import numpy as np

from vidjax import checkpoints, evaluate, io, losses, metrics, ops, train
from vidjax.data import pipeline
from vidjax.data.features import FeatureStore
from vidjax.data.pipeline import FeatureTable
from vidjax.defaults.common import PRECISION_DEFAULTS
from vidjax.methods.vedje import FULL
from vidjax.methods import cast as cast_method
from vidjax.methods import extraction
from vidjax.methods import grdr as grdr_method
from vidjax.methods import vedje
from vidjax.models import cast as cast_models
from vidjax.models.pair import PairReranker
from vidjax.ops import l2_normalize
from vidjax.retrieval import DenseIndex, Stack, Stage, files
from vidjax.scorers import cast as cast_scorers
from vidjax.scorers.pair import PairScorer
from vidjax.scorers.vedje import PairBatches, VedjeScorer
from vidjax.tokenizers.wordpiece import WordPieceTokenizer

RECALLS = ("dense", "grdr")
# The precision `python -m vidjax.search` computes at: the evaluation phase's default, as a run's evaluation does.
SEARCH_PRECISION = PRECISION_DEFAULTS["eval"]


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
  prior[missing, -1] = np.sum(vectors * queries[missing], axis=-1) / np.maximum(
      np.linalg.norm(vectors, axis=-1) * np.linalg.norm(queries[missing], axis=-1), 1e-12)
  positive = (corpus.label[rows] == corpus.label[target_rows][:, None]) | (rows == target_rows[:, None])
  return {"text": text_rows, "candidates": rows, "prior": prior.astype(np.float32),
          "positive": positive.astype(np.float32)}


def vedje_stage(config, workdir: Path, data: cast_method.CVRData, train_videos, corpus_ids: Sequence[str],
                query_texts: Sequence[str]) -> Stage:
  """stack.reranker = "vedje": VEDJE trained on the training clips (each step caption a query, its clip the
  positive; stage-1 neighbourhoods from the store's clip / text embeddings) through the one loop in
  `<workdir>/train/vedje`, the evaluation clips' caches indexed into `<workdir>/features`, and the rerank Stage over
  them. The stack's queries then carry `row`: each query's row in `query_texts` (its step caption)."""
  vc, store = config.vedje, data.store
  if store is None or vc.tokens_kind not in store.kinds():
    raise ValueError(f"stack.reranker='vedje' reads each clip's frame tokens (kind {vc.tokens_kind!r}): give a store "
                     "prepared with them (configs/prepare.py, save_tokens=True); the embedded world has none")
  frames, patches, visual_dim = store.item_shape(vc.tokens_kind)
  mc = ml_collections.ConfigDict(vc.model.to_dict())
  mc.frames = frames  # the store's T (the `_vedje` docstring in vidjax/defaults/stack.py)
  tokenizer = WordPieceTokenizer.from_vocab(Path(mc.minilm_dir or checkpoints.default_minilm_dir()) / "vocab.txt")
  clips = [c for v in train_videos for c in v.clips]
  ids = [c.clip_id for c in clips]
  tokens = pipeline.text_token_batch(tokenizer, [c.text for c in clips], mc.max_text_len)
  split = vedje.Split(ids, np.arange(len(ids)), tokens["input_ids"], tokens["attention_mask"],
                      store.get(config.data.text_kind, ids), ids, store.get(config.data.clip_kind, ids))
  negatives = vedje.stage1_negatives(split, vc.train)
  cfg = vedje.model_config(mc, FULL, visual_dim, patches, split.clip.shape[1], len(tokenizer.vocab))
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
# The index `python -m vidjax.search` loads.

INDEX_FORMAT = "vidjax-stack-index/1"
MANIFEST = "manifest.json"
_REBUILD = "rebuild it (python -m vidjax.main --config configs/stack_<dataset>.py --workdir DIR writes DIR/index)"


def _npz_bytes(**arrays) -> bytes:
  buf = _io.BytesIO()
  np.savez(buf, **arrays)
  return buf.getvalue()


def write_index(path: Path, *, corpus: Corpus, vectors: np.ndarray, texts: FeatureTable, videos, config,
                backbone: str, synthetic: bool, rerank, cast_parts, grdr_parts=None, text_tower: dict | None = None) -> Path:
  """Writes `<path>/`: corpus.npz (ids, clip vectors, captions, videos), texts.npz (every caption's mean text
  embedding: the query encoder of a space without a text tower), rerank.npz / cast.npz (parameters) and, last,
  manifest.json (an index without one is incomplete). `text_tower` (`extraction.text_tower` of the store): typed
  queries are encoded by the text tower that embedded the captions."""
  path.mkdir(parents=True, exist_ok=True)
  clips = [c for v in videos for c in v.clips]
  captions = sorted({c.text for c in clips})
  which = {t: i for i, t in enumerate(captions)}
  sums = np.zeros((len(captions), texts.dim), np.float32)
  np.add.at(sums, [which[c.text] for c in clips], texts.gather(np.array([texts.index[c.clip_id] for c in clips])))
  io.atomic_write_bytes(path / "texts.npz", _npz_bytes(captions=np.array(captions), vectors=l2_normalize(sums)))
  io.atomic_write_bytes(path / "corpus.npz", _npz_bytes(ids=np.array(corpus.ids), vectors=np.asarray(vectors, np.float32),
                                                        captions=np.array(corpus.captions),
                                                        videos=np.array(corpus.video_ids)))
  cast_model, cast_params, ensemble = cast_parts
  if rerank is not None:  # the pair reranker (a VEDJE stage reads its run's caches: not in the index yet)
    checkpoints.save_npz(rerank[1], path / "rerank.npz")
  checkpoints.save_npz(cast_params, path / "cast.npz")
  s = config.stack
  recall = {"kind": "dense", "file": "corpus.npz", "k": s.k_recall, "backbone": backbone,
            "index": config.index.to_dict()}  # the backend `python -m vidjax.search` builds over corpus.npz
  if grdr_parts is not None:
    checkpoints.save_npz(grdr_parts[1], path / "grdr.npz")
    recall = {"kind": "grdr", "file": "grdr.npz", "k": s.k_recall, "backbone": backbone,
              "model": config.grdr.model.to_dict(), "context_len": config.model.context_len}
  manifest = {
      "format": INDEX_FORMAT, "dataset": config.dataset, "synthetic": synthetic, "backbone": backbone,
      "dim": int(np.shape(vectors)[1]), "clips": len(corpus.ids),
      "text_encoder": ({"kind": "caption_lookup", "file": "texts.npz", "backbone": backbone} if text_tower is None else
                       {"kind": "text_tower", "file": "texts.npz", "backbone": backbone, "tower": text_tower}),
      "recall": recall,
      "stages": [
          *([{"name": "rerank", "kind": "pair_reranker", "k": s.rerank_k, "file": "rerank.npz", "backbone": backbone}]
            if rerank is not None else []),
          {"name": "cast", "kind": "cast_ensemble", "k": s.k, "file": "cast.npz", "backbone": backbone,
           "num_heads": cast_model.num_heads, "context_len": config.model.context_len,
           "w_v": ensemble.w_v, "w_p": ensemble.w_p, "needs_context": True},
      ],
  }
  named = ["corpus.npz", manifest["text_encoder"]["file"], recall["file"], *(st["file"] for st in manifest["stages"])]
  manifest["files"] = {name: files.file_record(path / name) for name in dict.fromkeys(named)}  # checked on open
  io.atomic_write_json(path / MANIFEST, manifest)
  return path


class StackIndex:
  """A built index: the corpus, the query encoder and the stages, ready to `search`.

  Opening it checks what the index claims before anything is trusted: the manifest's fields (one error naming the
  field), every file it names against the size and SHA-256 the manifest recorded (`"files"`; an index written before
  they were recorded gets every other check), the corpus (ids distinct, as many as the manifest's clips, captions and
  videos one per id, vectors [clips, dim] and finite) and the caption table (one finite [dim] vector per caption).
  Each mismatch is one ValueError naming the index and the file."""

  def __init__(self, path: str | Path):
    path = Path(path)
    if not path.is_dir():
      raise FileNotFoundError(f"index {path}: no such directory (build one with python -m vidjax.main "
                              "--config configs/stack_<dataset>.py --workdir DIR; the index is DIR/index)")
    if not (path / MANIFEST).is_file():
      raise ValueError(f"index {path}: no {MANIFEST}; not a vidjax stack index, or its build did not finish")
    m = io.read_json(path / MANIFEST, "index manifest")
    if not isinstance(m, dict) or m.get("format") != INDEX_FORMAT:
      raise ValueError(f"index {path}/{MANIFEST}: format {m.get('format') if isinstance(m, dict) else m!r} is not "
                       f"{INDEX_FORMAT!r}")
    self.path, self.manifest = path, m
    self._check_manifest()
    parts = [("the text encoder", m["text_encoder"]), ("the recall stage", m["recall"])] + [
        (f"stage {s['name']!r}", s) for s in m["stages"]]
    for what, part in parts:
      if part.get("backbone") != m["backbone"]:
        raise ValueError(f"index {path}: {what} was built for backbone {part.get('backbone')!r} but the index's corpus "
                         f"holds {m['backbone']!r} features; rebuild the index from one feature store")
      if not (path / part["file"]).is_file():
        raise ValueError(f"index {path}: {what}'s file {part['file']} is missing")
    for name, record in (m.get("files") or {}).items():
      files.check_file(path, name, record, f"index {path}", recorded_in=MANIFEST, rebuild=_REBUILD)
    self.synthetic = bool(m["synthetic"])
    corpus = self._arrays("corpus.npz", "index corpus", ("ids", "vectors", "captions", "videos"))
    self.ids, self.captions, self.videos = (corpus[k].astype(str).tolist() for k in ("ids", "captions", "videos"))
    self.row = {c: i for i, c in enumerate(self.ids)}
    if len(self.row) != len(self.ids) or len(self.ids) != m["clips"]:
      raise self._bad("corpus.npz", f"holds {len(self.ids)} ids ({len(self.row)} distinct), the manifest says "
                      f"{m['clips']} clips")
    if corpus["vectors"].shape != (len(self.ids), m["dim"]) or len(self.captions) != len(self.ids) or len(
        self.videos) != len(self.ids):
      raise self._bad("corpus.npz", f"holds vectors {corpus['vectors'].shape}, {len(self.captions)} captions and "
                      f"{len(self.videos)} videos; the manifest says {len(self.ids)} clips x dim {m['dim']}")
    self.vectors = self._finite("corpus.npz", corpus["vectors"], self.ids)
    r = m["recall"]
    if r["kind"] == "dense":  # an index written before backends were configurable: the exact one
      section = r.get("index", {"backend": "jax", "dtype": "float32", "params": {}})
      try:
        self.recall = DenseIndex.from_config(self.ids, self.vectors, ml_collections.ConfigDict(section),
                                             query_batch=1)
      except (ValueError, KeyError, AttributeError, TypeError) as e:
        raise ValueError(f"index {path}/{MANIFEST}: recall index {section!r} is not one this vidjax builds: "
                         f"{str(e).strip()[:300]}") from None
    elif r["kind"] == "grdr":
      params = self._params(r["file"], "index GRDR model")
      model = grdr_method.build_model(ml_collections.ConfigDict(dict(r["model"], query_dim=m["dim"])), m["dim"])
      self.recall = grdr_recall(model, params, self.vectors, self.ids, int(r["k"]) + int(r["context_len"]))
    else:
      raise ValueError(f"index {path}: recall stage of unknown kind {r['kind']!r} (known: {', '.join(RECALLS)})")
    texts = self._arrays(m["text_encoder"]["file"], "index text table", ("captions", "vectors"))
    captions = texts["captions"].astype(str).tolist()
    if texts["vectors"].shape != (len(captions), m["dim"]):
      raise self._bad(m["text_encoder"]["file"], f"holds {len(captions)} captions and vectors "
                      f"{texts['vectors'].shape}, expected [{len(captions)}, dim {m['dim']}]")
    self.text_of = dict(zip(captions, self._finite(m["text_encoder"]["file"], texts["vectors"], captions)))
    self.stages, self.needs_context = [], set()
    for s in m["stages"]:
      params = self._params(s["file"], f"index stage {s['name']!r}")
      if s["kind"] == "pair_reranker":
        scorer = PairScorer(PairReranker(), params)
      elif s["kind"] == "cast_ensemble":
        model = cast_models.CAST(m["dim"], num_heads=s["num_heads"])
        predictor = cast_scorers.PredictorScorer(lambda p, *a, model=model: model.apply({"params": p}, *a), params)
        scorer = cast_scorers.EnsembleScorer(predictor, s["w_v"], s["w_p"])
        self.context_len = int(s["context_len"])
      else:
        raise ValueError(f"index {path}: stage {s['name']!r} has unknown kind {s['kind']!r}")
      if s.get("needs_context"):
        self.needs_context.add(s["name"])
      self.stages.append(Stage(s["name"], scorer, int(s["k"])))

  def _bad(self, name: str, problem: str) -> ValueError:
    return files.IndexFileError(f"index {self.path}: {name} {problem}; the index is damaged or was changed after it "
                                f"was built: {_REBUILD}")

  def _check_manifest(self) -> None:
    """Every field the index reads, present and of its type: one error naming the field."""
    m = self.manifest

    def need(obj, key, kind, where):
      value = obj.get(key) if isinstance(obj, dict) else None
      ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
      if not ok or (kind is int and value < 1):
        raise ValueError(f"index {self.path}/{MANIFEST}: {where}{key} is {str(value)[:80] if key in obj else 'missing'}"
                         f", expected {'a positive integer' if kind is int else getattr(kind, '__name__', 'a number')}"
                         f"; the index is damaged or incomplete: {_REBUILD}")
      return value

    for key, kind in (("synthetic", bool), ("backbone", str), ("dim", int), ("clips", int), ("text_encoder", dict),
                      ("recall", dict), ("stages", list)):
      need(m, key, kind, "")
    for key, kind in (("kind", str), ("file", str), ("backbone", str)):
      need(m["text_encoder"], key, kind, "text_encoder.")
    for key, kind in (("kind", str), ("file", str), ("backbone", str), ("k", int)):
      need(m["recall"], key, kind, "recall.")
    if m["recall"]["kind"] == "grdr":
      need(m["recall"], "model", dict, "recall.")
      need(m["recall"], "context_len", (int,), "recall.")
    for i, s in enumerate(m["stages"]):
      if not isinstance(s, dict):
        raise ValueError(f"index {self.path}/{MANIFEST}: stages[{i}] is not an object; {_REBUILD}")
      for key, kind in (("name", str), ("kind", str), ("file", str), ("backbone", str), ("k", int)):
        need(s, key, kind, f"stages[{i}].")
      if s["kind"] == "cast_ensemble":
        for key, kind in (("num_heads", int), ("context_len", (int,)), ("w_v", (int, float)), ("w_p", (int, float))):
          need(s, key, kind, f"stages[{i}].")
    if "files" in m and not (isinstance(m["files"], dict) and all(
        isinstance(r, dict) and isinstance(r.get("bytes"), int) and isinstance(r.get("sha256"), str)
        for r in m["files"].values())):
      raise ValueError(f"index {self.path}/{MANIFEST}: files must map each file to its bytes and sha256; "
                       f"{_REBUILD}")
    names = [m["text_encoder"]["file"], m["recall"]["file"], *(s["file"] for s in m["stages"])]
    outside = [n for n in names if Path(n).name != n]
    if outside:
      raise ValueError(f"index {self.path}/{MANIFEST}: file {outside[0]!r} is not a file name inside the index")

  def _arrays(self, name: str, what: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
    arrays = checkpoints.read_npz(self.path / name, what)
    missing = [k for k in keys if k not in arrays]
    if missing:
      raise self._bad(name, f"lacks the arrays {missing} (it has {sorted(arrays)[:10]})")
    return arrays

  def _finite(self, name: str, vectors: np.ndarray, ids: Sequence[str]) -> np.ndarray:
    if not np.issubdtype(vectors.dtype, np.floating):
      raise self._bad(name, f"holds {vectors.dtype} vectors, not floats")
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=tuple(range(1, vectors.ndim))))
    if bad.size:
      raise self._bad(name, f"vectors of {', '.join(files.quote(ids[i], 40) for i in bad[:5])} are not finite "
                      f"(NaN or Inf; {bad.size} rows)")
    return vectors

  def _params(self, name: str, what: str):
    tree = ops.unflatten_dict(checkpoints.read_npz(self.path / name, what))
    if "params" not in tree:
      raise self._bad(name, "holds no 'params' (not a parameter file)")
    return tree["params"]

  def encode(self, text: str) -> np.ndarray:
    """The query's text embedding: the store's text tower (built on first use), or for a space without one its
    caption table."""
    if self.manifest["text_encoder"]["kind"] == "text_tower":
      if not hasattr(self, "_encoder"):
        self._encoder = extraction.make_query_encoder(self.manifest["text_encoder"]["tower"])
      if not text.strip():
        raise ValueError("the query is empty")
      return self._encoder([text])[0]
    found = self.text_of.get(text) if text in self.text_of else next(
        (v for t, v in self.text_of.items() if t.lower() == text.strip().lower()), None)
    if found is None:
      examples = ", ".join(files.quote(t) for t in list(self.text_of)[:3])
      raise ValueError(f"query {files.quote(text)} is not a caption of this index's space (its text encoder is a caption table "
                       f"of {len(self.text_of)} captions, e.g. {examples})")
    return found

  def search(self, text: str, context: Sequence[str] = (), k: int = 10):
    """(StackResult for one query, stages used): recall -> rerank -> CAST when `context` clips are given."""
    unknown = [c for c in context if c not in self.row]
    if unknown:
      raise ValueError(f"unknown context clip {files.quote(unknown[0])}: not a clip of this index's corpus "
                       f"({len(self.ids)} clips, e.g. {self.ids[0]!r})")
    stages = [s for s in self.stages if context or s.name not in self.needs_context]
    last = stages[-1].k if stages else self.manifest["recall"]["k"]
    if not 1 <= k <= last:
      raise ValueError(f"--k must be in [1, {last}] for this index, got {k}")
    query = {"text": self.encode(text)[None].astype(np.float32)}
    if self.needs_context:
      length = getattr(self, "context_len", len(context))
      history = np.zeros((1, length, self.vectors.shape[1]), np.float32)
      mask = np.zeros((1, length), np.float32)
      recent = list(context)[-length:] if length else []
      if recent:
        history[0, length - len(recent):] = self.vectors[[self.row[c] for c in recent]]
        mask[0, length - len(recent):] = 1.0
      query.update(history=history, history_mask=mask)
    stack = Stack(self.recall, int(self.manifest["recall"]["k"]), stages, query_batch=1)
    return stack.search(query, k, exclude=[list(context)]), [s.name for s in stages]
