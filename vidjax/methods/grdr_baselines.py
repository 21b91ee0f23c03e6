"""GRDR's generative-retrieval baselines (Tables 1-2: TIGER, AVG, T2VIndexer; ../shared/papers/grdr.txt §2, §4.2,
§4.5) as rows of `vidjax.experiments.grdr`: each row's semantic IDs, its retriever trained on them with the one train
loop, and its evaluation per setting (trie-constrained generative recall, then a reranker).

    check_budget(config, corpus)                                          # before any training
    rows = baseline_rows(config, workdir, corpus, pools, sets, precision)  # {name: ({setting: metrics}, found)}

The rows (`BASELINES`; the models are `vidjax.models.gr_baselines`), all at `config.baselines`' M layers of K codes
(§4.2: "4 codebook layers of size 256"; the `tiny` variant scales them down):

* `tiger`: an RQ-VAE (TIGER §3.1: MLP encoder, Euclidean residual quantization with k-means initialised codebooks,
  MLP decoder; reconstruction + RQ loss) trained on the training videos' features, its codes fixed; an extra
  collision token makes every video's ID unique (`with_collision_token`: the videos sharing M codes get 0, 1, ...;
  at indexing time the training videos keep the tokens they were trained with and new videos take the next ones,
  as TIGER appends); a T5 retriever with one shared vocabulary of M K + K_collision tokens (`VocabLayout`) trained
  on each training query's video ID.
* `avg`: TIGER with AVG's cross-modal alignment during tokenization (GRDR §2, §4.2): the RQ-VAE's loss adds
  `baselines.align_weight` x a symmetric InfoNCE (`losses.clip_contrastive_loss`, temperature `baselines.align_tau`)
  between a projection of the (straight-through) quantized latent and the video's text embedding, the direction of
  the mean of its training queries' embeddings (the store's text space). AVG's paper aligns images with their
  captions; the loss's exact form here is vidjax's choice.
* `t2vindexer`: hierarchical k-means IDs of the video features (T2VIndexer's semantic tree,
  `vidjax.retrieval.kmeans.HierarchicalKMeans`; one ID per video, several videos may share it), and a T5 retriever
  with position-specific output weights and the prefix-aware decoder adapter (GRDR §4.5, from NCI §3.2).

Training reuses `config.train`'s tokenizer and retriever phases: the RQ-VAE `view_epochs` over the videos at
`view_lr` (batch `view_batch_size`; TIGER trains with Adagrad lr 0.4 for 20k epochs, far beyond a CPU budget), the
retriever `retriever_epochs` over the queries at `retriever_lr`, AdamW (no weight decay on codebooks). The retriever
is the main model's T5 shape and query encoder (§4.2: the same T5 for every GR row).

Every row is reranked like the GRDR rows (`vidjax.methods.grdr.evaluate_setting`): by `rerankers[0]` (the run's
`eval.reranker`, the paper's X-Pool by default; without an argument the frozen backbone's cosine), each other one a
second reading.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from vidjax import losses, ops, train
from vidjax.data import pipeline
from vidjax.methods.grdr import (BACKBONE, Corpus, Reranker, TrainingSet, evaluate_setting, intent_centres,
                                 training_set)
from vidjax.models.gr_baselines import IdRetrieverConfig, RQVAE, RQVAEConfig, SemanticIdRetriever
from vidjax.models.t5 import T5Config
from vidjax.retrieval import GenerativeRecall, SemanticIdTrie
from vidjax.retrieval.kmeans import HierarchicalKMeans


@dataclasses.dataclass(frozen=True)
class Baseline:
  """One GR baseline: its IDs ("rqvae": TIGER's RQ-VAE + collision token; "kmeans": T2VIndexer's tree), AVG's text
  alignment in the tokenizer, and its decoder (a shared vocabulary; the prefix-aware adapter)."""
  tokenizer: str
  align: bool = False
  shared_vocab: bool = True
  prefix_adapter: bool = False


BASELINES = {"tiger": Baseline("rqvae"), "avg": Baseline("rqvae", align=True),
             "t2vindexer": Baseline("kmeans", shared_vocab=False, prefix_adapter=True)}


def check_budget(config, corpus: Corpus) -> None:
  """A codebook with more codes than training videos is an error before any training (k-means initialises it)."""
  k, n_train = config.baselines.num_codes, len(corpus.train)
  if config.eval.baselines and k > n_train:
    raise ValueError(f"grdr: baselines.num_codes={k} (row 'tiger') is larger than the {n_train} training videos: a "
                     f"codebook is initialised by k-means over them; set baselines.num_codes <= {n_train}")


# ----------------------------------------------------------------------------------------------
# TIGER's IDs: the RQ-VAE, its loss, the collision token.


def collision_tokens(codes: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
  """int32 [V]: each row's rank among the rows with the same codes [V, M], counted in `order` (a permutation of the
  rows; default row order): the first of a group gets 0, the next 1, ..."""
  codes = np.asarray(codes)
  order = np.arange(len(codes)) if order is None else np.asarray(order)
  _, group = np.unique(codes[order], axis=0, return_inverse=True)
  group = group.reshape(-1)
  by_group = np.argsort(group, kind="stable")
  g = group[by_group]
  start = np.r_[0, np.flatnonzero(np.diff(g)) + 1]
  rank = np.empty(len(g), np.int64)
  rank[by_group] = np.arange(len(g)) - np.repeat(start, np.diff(np.r_[start, len(g)]))
  out = np.empty(len(codes), np.int32)
  out[order] = rank
  return out


def with_collision_token(codes: np.ndarray, num_tokens: int, order: np.ndarray | None = None) -> np.ndarray:
  """codes [V, M] -> unique IDs [V, M + 1] (TIGER §3.1's extra token); more than `num_tokens` videos on one ID is
  an error naming `baselines.collision_codes`."""
  token = collision_tokens(codes, order)
  if len(token) and token.max() >= num_tokens:
    raise ValueError(f"grdr baselines: {int(token.max()) + 1} videos share one RQ-VAE ID, more than "
                     f"baselines.collision_codes={num_tokens} collision tokens can tell apart; raise it")
  return np.concatenate([codes, token[:, None]], axis=1).astype(np.int32)


def tokenizer_loss(out: dict, features: jax.Array, text: jax.Array | None, *, beta: float, align_weight: float,
                   tau: float):
  """The RQ-VAE's loss: TIGER's reconstruction (squared L2, summed over the feature) + RQ loss
  (`losses.euclidean_rq_loss`), and with `text` [B, d_t] AVG's alignment (`losses.clip_contrastive_loss` of
  out["text"] and text, weighted). Returns (loss, {"rec", "rq"[, "align"]})."""
  rec = jnp.mean(jnp.sum(jnp.square(jnp.asarray(features, jnp.float32) - out["reconstruction"]), axis=-1))
  rq = losses.euclidean_rq_loss(out["residuals"], out["selected"], beta)
  parts = {"rec": rec, "rq": rq}
  total = rec + rq
  if text is not None:
    parts["align"] = losses.clip_contrastive_loss(out["text"], text, tau)
    total = total + align_weight * parts["align"]
  return total, parts


def _no_decay(params):
  return jax.tree_util.tree_map_with_path(lambda path, _: "codebook_" not in train.param_path(path), params)


_kmeans = jax.jit(ops.kmeans, static_argnames=("iters", "cosine"))


def init_codebooks(model: RQVAE, params, features: np.ndarray, seed: int, iters: int):
  """TIGER's k-means initialisation: C^(l) <- k-means (squared L2) of the layer-l residuals of every training video
  under the initial encoder, layer by layer."""
  r = np.asarray(jax.jit(lambda p, f: model.apply({"params": p}, f, method=RQVAE.encode))(params, features))
  params = jax.tree.map(lambda x: x, params)
  for l in range(model.config.num_layers):
    start = ops.kmeans_init(jax.random.PRNGKey(seed + l), r, model.config.num_codes)
    centres = np.asarray(_kmeans(r, start, iters=iters, cosine=False)[0])
    params[f"codebook_{l}"] = jnp.asarray(centres)
    nearest = np.argmin((r * r).sum(1, keepdims=True) - 2 * r @ centres.T + (centres * centres).sum(1), axis=1)
    r = r - centres[nearest]
  return params


def train_rqvae(model: RQVAE, features: np.ndarray, text: np.ndarray | None, bcfg, tcfg, workdir: Path, seed: int):
  """The RQ-VAE on the training videos' features [V, d_v] (AVG: with their text embeddings [V, d_t]); returns the
  params (`workdir` holds the phase's checkpoints)."""
  params = jax.device_get(jax.jit(model.init)(jax.random.PRNGKey(seed), jnp.zeros((1, features.shape[1])))["params"])
  params = init_codebooks(model, params, features, seed, tcfg.kmeans_iters)
  tables = {"features": features, **({"text": text} if text is not None else {})}
  gather = pipeline.Gather(tables, {"feature": "features", **({"text": "text"} if text is not None else {})})

  def loss_fn(p, batch, rng):
    out = model.apply({"params": p}, batch["feature"])
    return tokenizer_loss(out, batch["feature"], batch.get("text"), beta=bcfg.beta, align_weight=bcfg.align_weight,
                          tau=bcfg.align_tau)

  def batch_fn(idx):
    rows = np.asarray(idx, np.int32)
    return {"feature": rows, **({"text": rows} if text is not None else {})}

  start = params
  state = train.fit_epochs(
      name="grdr baseline rqvae", init_fn=lambda _: start, loss_fn=loss_fn, num_examples=len(features),
      batch_fn=batch_fn, gather=gather, seed=seed, workdir=workdir,
      tcfg=_epochs(tcfg, tcfg.view_epochs, batch_size=tcfg.view_batch_size),
      optimizer=train.adamw(tcfg.view_lr, tcfg.weight_decay, mask=_no_decay), batch_key="train.view_batch_size")
  return jax.device_get(state.params)


def _epochs(tcfg, epochs: int, **kw) -> ml_collections.ConfigDict:
  """A copy of the train section with `epochs` (and `kw`) set: one phase's `fit_epochs` config."""
  return ml_collections.ConfigDict({**tcfg.to_dict(), "epochs": epochs, **kw})


@functools.partial(jax.jit, static_argnames="model")
def _rq_codes(params, features, model: RQVAE):
  return model.apply({"params": params}, features, method=RQVAE.video_codes)


# ----------------------------------------------------------------------------------------------
# The retriever.


def retriever_model(config, sizes: tuple, baseline: Baseline, query_vocab: int) -> SemanticIdRetriever:
  """The baseline's seq2seq retriever: the main model's T5 shape and query encoder (§4.2)."""
  m = config.model
  return SemanticIdRetriever(IdRetrieverConfig(
      sizes=tuple(int(s) for s in sizes), t5=T5Config(vocab_size=0, **m.t5.to_dict()),
      shared_vocab=baseline.shared_vocab, prefix_adapter=baseline.prefix_adapter, query_encoder=m.query_encoder,
      query_dim=m.query_dim, query_tokens=m.query_tokens, vocab_size=query_vocab))


def id_loss(logits: jax.Array, codes: jax.Array):
  """Teacher-forced cross-entropy summed over the ID's positions, averaged over the batch: logits [B, L, V],
  codes int [B, L] (the trie's codes: each step's target index). Returns (loss, {"ce<l>"})."""
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, codes)  # [B, L]
  return jnp.sum(jnp.mean(ce, axis=0)), {f"ce{l + 1}": jnp.mean(ce[:, l]) for l in range(codes.shape[1])}


def train_retriever(model: SemanticIdRetriever, data: TrainingSet, targets: np.ndarray, tcfg, workdir: Path,
                    seed: int):
  """The retriever on fixed IDs: each training query's target `targets` int [Nq, L]; `retriever_epochs` at
  `retriever_lr`."""
  params = jax.device_get(jax.jit(model.init)(jax.random.PRNGKey(seed), jnp.asarray(data.queries[:1]),
                                              jnp.asarray(targets[:1]))["params"])

  def loss_fn(p, batch, rng):
    logits = model.apply({"params": p}, batch["query"], batch["codes"], False, rngs={"dropout": rng},
                         method=SemanticIdRetriever.teacher_logits)
    return id_loss(logits, batch["codes"])

  start = params
  state = train.fit_epochs(
      name="grdr baseline retriever", init_fn=lambda _: start, loss_fn=loss_fn, num_examples=len(data.queries),
      batch_fn=lambda idx: {"query": np.asarray(idx, np.int32), "codes": targets[idx]},
      gather=pipeline.Gather({"queries": data.queries}, {"query": "queries"}),
      tcfg=_epochs(tcfg, tcfg.retriever_epochs), seed=seed, workdir=workdir,
      optimizer=train.adamw(tcfg.retriever_lr, tcfg.weight_decay))
  return jax.device_get(state.params)


# ----------------------------------------------------------------------------------------------
# A trained row: its IDs for any pool, its recall and evaluation.


@dataclasses.dataclass
class TrainedBaseline:
  """A trained baseline: `model` / `params` (the retriever) and `ids(rows)`: the trie codes int32 [len(rows), L] of
  corpus rows (ascending)."""
  model: SemanticIdRetriever
  params: Any
  ids: Any


def train_baseline(config, workdir: Path, corpus: Corpus, baseline: Baseline, data: TrainingSet,
                   precision=contextlib.nullcontext) -> TrainedBaseline:
  """Tokenizer (or tree), IDs, then the retriever, under `workdir` (`rqvae/`, `retriever/`)."""
  b, tcfg, seed = config.baselines, config.train, config.seed
  is_train = np.zeros(len(corpus.video_ids), bool)
  is_train[corpus.train] = True
  if baseline.tokenizer == "kmeans":
    tree = HierarchicalKMeans.fit(data.features, b.num_codes, b.num_layers, seed, tcfg.kmeans_iters)
    ids = lambda rows: tree.codes(corpus.features[rows])[:, 0]  # noqa: E731
    sizes = (b.num_codes,) * b.num_layers
  else:
    text = intent_centres(data, data.query_vectors, 1)[:, 0] if baseline.align else None
    rq = RQVAE(RQVAEConfig(feature_dim=data.features.shape[1], hidden=tuple(b.hidden), latent_dim=b.latent_dim,
                           num_layers=b.num_layers, num_codes=b.num_codes,
                           text_dim=text.shape[1] if text is not None else 0))
    with precision():
      rq_params = train_rqvae(rq, data.features, text, b, tcfg, workdir / "rqvae", seed)
    sizes = (b.num_codes,) * b.num_layers + (b.collision_codes,)
    layout = retriever_model(config, sizes, baseline, corpus.query_vocab).config.layout

    def ids(rows):  # the training videos keep their training tokens; the others come after them in each group
      codes = np.asarray(_rq_codes(rq_params, jnp.asarray(corpus.features[rows]), model=rq))
      order = np.argsort(~is_train[rows], kind="stable")
      unique = with_collision_token(codes, b.collision_codes, order)
      return layout.to_shared(unique) if baseline.shared_vocab else unique

  model = retriever_model(config, sizes, baseline, corpus.query_vocab)
  train_ids = ids(corpus.train)  # data.features are corpus.features[corpus.train]
  with precision():
    params = train_retriever(model, data, train_ids[data.video], tcfg, workdir / "retriever", seed + 1)
  return TrainedBaseline(model, params, ids)


@dataclasses.dataclass(frozen=True)
class _Bound:
  """`fn(params, *args) = model.apply({"params": params}, *args, method=method)`, hashable by value (beam search
  takes it as a static argument)."""
  model: SemanticIdRetriever
  method: Any

  def __call__(self, params, *args):
    return self.model.apply({"params": params}, *args, method=self.method)


def make_recall(row: TrainedBaseline, corpus: Corpus, rows: np.ndarray, ecfg) -> GenerativeRecall:
  """The trie of the pool's IDs (corpus rows `rows`) and the row's generative recall over it: `eval.beam_width`
  beams, at most `eval.candidates` videos (0: every video the beams bring, uncapped)."""
  codes = row.ids(rows)[:, None, :]
  trie = SemanticIdTrie(corpus.video_ids[rows], codes, row.model.config.num_outputs)
  return GenerativeRecall(trie, _Bound(row.model, SemanticIdRetriever.encode_query),
                          _Bound(row.model, SemanticIdRetriever.code_logp), row.params, width=ecfg.beam_width,
                          limit=ecfg.candidates or None, vectors=corpus.features[rows],
                          query_key="tokens" if row.model.config.query_encoder == "t5" else "text")


def baseline_rows(config, workdir: Path, corpus: Corpus, pools: dict, sets: dict | None = None,
                  precision=contextlib.nullcontext, rerankers: tuple[Reranker, ...] = (BACKBONE,)) -> dict:
  """Every baseline trained (`workdir/models/<name>/`) and evaluated on each setting's pool, reranked by
  `rerankers[0]` (the others: second readings): {name: ({setting: metrics}, the inductive pool's recalled ids
  [Q, candidates])}. `sets` caches the N_v = 1 training set across the run's rows."""
  sets = {} if sets is None else sets
  if 1 not in sets:
    sets[1] = training_set(config, corpus, 1)
  out = {}
  for name, baseline in BASELINES.items():
    row = train_baseline(config, Path(workdir) / "models" / name, corpus, baseline, sets[1], precision)
    metrics, found = {}, None
    for setting, rows in pools.items():
      metrics[setting], f = evaluate_setting(corpus, make_recall(row, corpus, np.asarray(rows), config.eval),
                                             config.eval, rerankers)
      found = f if setting == "inductive" else found
    out[name] = (metrics, found)
  return out
