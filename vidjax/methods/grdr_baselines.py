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
  captions; the loss's exact form here is vidjax's choice. Its retriever adds AVG's discriminative training
  (`retriever_loss`, `Ranking`): a listwise ranking loss of each query's own ID against the retriever's current
  top IDs of the training trie, as AVG's code trains it (`LTRTrainer.multi_ltr_loss`, 10 beams, weight
  `ltr_loss_factor` = 1 by default; GRDR's copy: `baselines/mm_semantictvr/retriever/avg_utils.py`, commit
  5a11a4a). GRDR's stored AVG retriever script (`avg_train_retriever_t5.py`, commit 6b1f2e9) trains with the plain
  cross-entropy `Trainer` instead; this row is AVG as its own code trains it.
* `t2vindexer`: hierarchical k-means IDs of the video features (T2VIndexer's semantic tree,
  `vidjax.retrieval.kmeans.HierarchicalKMeans`; one ID per video, several videos may share it), and a T5 retriever
  with position-specific output weights and the prefix-aware decoder adapter (GRDR §4.5, from NCI §3.2). Without
  T2VIndexer's query expansion: it rewrites queries with a multimodal LLM, and none is available offline (the row's
  `note` in results.json says so).

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
from vidjax.retrieval import GenerativeRecall, SemanticIdTrie, beam_search
from vidjax.retrieval.generative import t5_state_copies
from vidjax.retrieval.kmeans import HierarchicalKMeans
from vidjax.retrieval.trie import TrieArrays


@dataclasses.dataclass(frozen=True)
class Baseline:
  """One GR baseline: its IDs ("rqvae": TIGER's RQ-VAE + collision token; "kmeans": T2VIndexer's tree), AVG's text
  alignment in the tokenizer, its decoder (a shared vocabulary; the prefix-aware adapter), AVG's discriminative
  training of the retriever (`rank_weight` > 0: the ranking loss's weight, over `rank_beams` beams; `Ranking`) and
  what the row leaves out of the published method (`note`, in results.json)."""
  tokenizer: str
  align: bool = False
  shared_vocab: bool = True
  prefix_adapter: bool = False
  rank_weight: float = 0.0
  rank_beams: int = 10
  note: str = ""


# AVG's discriminative training at its code's defaults (`LTRTrainer`: ltr_loss_factor 1.0; 10 beams).
BASELINES = {"tiger": Baseline("rqvae"), "avg": Baseline("rqvae", align=True, rank_weight=1.0, rank_beams=10),
             "t2vindexer": Baseline("kmeans", shared_vocab=False, prefix_adapter=True,
                                    note="without T2VIndexer's query expansion (a multimodal LLM; none offline)")}


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


@dataclasses.dataclass(frozen=True)
class Ranking:
  """AVG's discriminative training of the retriever (`retriever_loss`): the trie of the training videos' IDs
  (`trie`, `SemanticIdTrie.arrays()`), the beams searched in it for each query's negatives and the ranking loss's
  weight."""
  trie: TrieArrays
  beams: int
  weight: float


def sequence_logp(logits: jax.Array, codes: jax.Array) -> jax.Array:
  """An ID's score under the retriever: the sum over its L positions of log-softmax(logits) at its codes.
  logits [..., L, V], codes int [..., L] -> [...]."""
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  return jnp.sum(jnp.take_along_axis(logp, codes[..., None], axis=-1)[..., 0], axis=-1)


def listwise_rank_loss(scores: jax.Array, negative: jax.Array) -> jax.Array:
  """AVG's listwise ranking loss (its code's `multi_ltr_loss`): scores [B, 1 + W] (the query's own ID first, then W
  searched IDs), negative bool [B, W] (which searched IDs count: live beams other than the query's own ID).

  Per query, p = softmax over its own ID's and its negatives' scores, and the loss is the cross-entropy of the
  one-hot own ID with p taken as logits, logsumexp(p) - p_0: the official code hands the probabilities, not the
  scores, to `F.cross_entropy` (a second softmax, which damps the gradient against a cross-entropy over the scores).
  Averaged over the queries with at least one negative (0 when none has one), as the official code skips the
  others."""
  keep = jnp.concatenate([jnp.ones_like(negative[:, :1]), negative], axis=1)
  p = jax.nn.softmax(jnp.where(keep, scores, -jnp.inf), axis=1)
  per_query = jax.nn.logsumexp(jnp.where(keep, p, -jnp.inf), axis=1) - p[:, 0]
  has = jnp.any(negative, axis=1)
  return jnp.sum(jnp.where(has, per_query, 0.0)) / jnp.maximum(jnp.sum(has), 1)


def searched_negatives(model: SemanticIdRetriever, params, queries, codes: jax.Array, ranking: Ranking):
  """Each query's negatives, as AVG's code draws them: the retriever's own top `ranking.beams` IDs of the training
  trie (trie-constrained beam search on the current parameters, no gradient; the official search runs with dropout
  on, this one without), and which of them count (bool [B, W]: a live beam whose ID is not the query's own `codes`).
  Returns (IDs int32 [B, W, L], negative)."""
  frozen = jax.lax.stop_gradient(params)
  state = model.apply({"params": frozen}, queries, method=SemanticIdRetriever.encode_query)
  found, _, score = beam_search(_Bound(model, SemanticIdRetriever.code_logp), ranking.trie, frozen, state,
                                width=ranking.beams, depth=codes.shape[1])
  return found, jnp.isfinite(score) & ~jnp.all(found == codes[:, None, :], axis=-1)


def retriever_loss(model: SemanticIdRetriever, params, batch, rng, ranking: Ranking | None = None):
  """The retriever's loss on a batch {"query", "codes" int [B, L]}: `id_loss`'s cross-entropy and, with `ranking`
  (AVG), its discriminative term: + weight x L x `listwise_rank_loss` of the query's own ID against its
  `searched_negatives`, each ID's score its `sequence_logp` under teacher forcing (one decoder pass over the own ID
  and the W searched ones). The official total is the cross-entropy averaged over the ID's tokens + weight x the
  ranking loss; `id_loss` sums the cross-entropy over the L positions, so the ranking term is scaled by L to keep
  the official ratio. Returns (loss, {"ce<l>"[, "rank"]})."""
  queries, codes = batch["query"], batch["codes"]
  if ranking is None:
    logits = model.apply({"params": params}, queries, codes, False, rngs={"dropout": rng},
                         method=SemanticIdRetriever.teacher_logits)
    return id_loss(logits, codes)
  negatives, negative = searched_negatives(model, params, queries, codes, ranking)
  ids = jnp.concatenate([codes[:, None, :], negatives], axis=1)  # [B, 1 + W, L]
  b, n, length = ids.shape
  encoder_rng, decoder_rng = jax.random.split(rng)
  state = model.apply({"params": params}, queries, False, rngs={"dropout": encoder_rng},
                      method=SemanticIdRetriever.encode_query)
  # each query's memory read once for its 1 + W IDs (`T5Decoder`'s per-query memory)
  logits = model.apply({"params": params}, state, ids.reshape(b * n, length)[:, :-1], False,
                       rngs={"dropout": decoder_rng}, method=SemanticIdRetriever.logits).reshape(b, n, length, -1)
  ce, parts = id_loss(logits[:, 0], codes)
  rank = listwise_rank_loss(sequence_logp(logits, ids), negative)
  return ce + ranking.weight * length * rank, {**parts, "rank": rank}


def train_retriever(model: SemanticIdRetriever, data: TrainingSet, targets: np.ndarray, tcfg, workdir: Path,
                    seed: int, ranking: Ranking | None = None):
  """The retriever on fixed IDs: each training query's target `targets` int [Nq, L]; `retriever_epochs` at
  `retriever_lr`; with `ranking`, AVG's discriminative training (`retriever_loss`)."""
  params = jax.device_get(jax.jit(model.init)(jax.random.PRNGKey(seed), jnp.asarray(data.queries[:1]),
                                              jnp.asarray(targets[:1]))["params"])

  def loss_fn(p, batch, rng):
    return retriever_loss(model, p, batch, rng, ranking)

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
  ranking = None
  if baseline.rank_weight:  # AVG: negatives searched in the trie of the training videos' IDs
    trie = SemanticIdTrie(corpus.video_ids[corpus.train], train_ids[:, None, :], model.config.num_outputs)
    ranking = Ranking(trie.arrays(), baseline.rank_beams, baseline.rank_weight)
  with precision():
    params = train_retriever(model, data, train_ids[data.video], tcfg, workdir / "retriever", seed + 1, ranking)
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
                          query_key="tokens" if row.model.config.query_encoder == "t5" else "text",
                          state_copies=t5_state_copies(row.model.config.t5.decoder_layers))


def baseline_rows(config, workdir: Path, corpus: Corpus, pools: dict, sets: dict | None = None,
                  precision=contextlib.nullcontext, rerankers: tuple[Reranker, ...] = (BACKBONE,)) -> dict:
  """Every baseline trained (`workdir/models/<name>/`) and evaluated on each setting's pool, reranked by
  `rerankers[0]` (the others: second readings): {name: ({setting: metrics}, the inductive pool's recalled ids
  [Q, candidates])}; a row that leaves part of its published method out says what in each setting's `note`
  (`Baseline.note`). `sets` caches the N_v = 1 training set across the run's rows."""
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
      if baseline.note:
        metrics[setting]["note"] = baseline.note
      found = f if setting == "inductive" else found
    out[name] = (metrics, found)
  return out
