"""GRDR as a method (../shared/papers/grdr.txt §3): the model built from a config, the training queries'
intents, the two training schedules (Algorithm 1's progressive co-training, and the project's tokenizer_first),
each phase one call of the one train loop, and the trie-constrained generative recall over a pool's IDs.

    model = build_model(config.model, feature_dim)
    params = train_grdr(model, TrainingSet(...), config.train, workdir, seed)   # phases under workdir/<phase>/
    recall, codes = make_recall(model, params, features, ids, config.eval)      # a `Retriever` for `TwoStage`
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Protocol

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from vidjax import losses, ops, train
from vidjax.data.features import FeatureStore
from vidjax.data.retrieval import build_benchmark, embeddings, read_dataset
from vidjax.methods import real
from vidjax.models.grdr import GRDR, RetrieverConfig, TokenizerConfig, match_views
from vidjax.models.t5 import T5Config
from vidjax.retrieval import GenerativeRecall, SemanticIdTrie


def build_model(mcfg, feature_dim: int, num_views: int | None = None) -> GRDR:
  """The GRDR module of a model config section (`config.model`)."""
  t5 = T5Config(vocab_size=0, **mcfg.t5.to_dict())
  tok = TokenizerConfig(feature_dim=feature_dim, latent_dim=mcfg.latent_dim, hidden=mcfg.hidden,
                        num_views=num_views or mcfg.num_views, num_layers=mcfg.num_layers, num_codes=mcfg.num_codes)
  ret = RetrieverConfig(t5=t5, query_encoder=mcfg.query_encoder, query_dim=mcfg.query_dim,
                        query_tokens=mcfg.query_tokens, tau_init=mcfg.tau_init)
  return GRDR(tok, ret)


# ----------------------------------------------------------------------------------------------
# Pseudo queries (§4.3: an LLM writes ~50 per video; any source plugs in here).


class PseudoQueries(Protocol):
  """The training queries of GRDR's tokenizer and retriever for the training videos `rows` (indices into
  the corpus): query vectors [Nq, query_dim] and, for each, the position in `rows` of the video it describes."""

  def __call__(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


def checked_queries(provider: PseudoQueries, rows: np.ndarray, query_dim: int) -> tuple[np.ndarray, np.ndarray]:
  """The provider's (queries, video positions), or one clear error naming what is wrong."""
  queries, video = provider(rows)
  queries, video = np.asarray(queries, np.float32), np.asarray(video)
  name = type(provider).__name__
  if queries.ndim != 2 or queries.shape[1] != query_dim or len(queries) == 0:
    raise ValueError(f"GRDR pseudo queries from {name}: expected [Nq >= 1, {query_dim}] vectors, got shape "
                     f"{queries.shape}")
  if video.shape != (len(queries),) or not np.issubdtype(video.dtype, np.integer):
    raise ValueError(f"GRDR pseudo queries from {name}: expected one integer video position per query, got "
                     f"{video.dtype} {video.shape} for {len(queries)} queries")
  bad = (video < 0) | (video >= len(rows))
  if bad.any():
    raise ValueError(f"GRDR pseudo queries from {name}: query {int(np.flatnonzero(bad)[0])} names video position "
                     f"{int(video[bad][0])}, outside the {len(rows)} training videos")
  if not np.all(np.isfinite(queries)):
    raise ValueError(f"GRDR pseudo queries from {name}: query {int(np.flatnonzero(~np.isfinite(queries).all(1))[0])} "
                     "is not finite")
  return queries, video.astype(np.int64)


# ----------------------------------------------------------------------------------------------
# Query intents and the view <-> intent matching.


@dataclasses.dataclass
class TrainingSet:
  """The (video, query) pairs of training: rows of `queries` with their video's row in `features`."""
  features: np.ndarray      # [V, d_v] training videos
  queries: np.ndarray       # [Nq, d_q]
  video: np.ndarray         # [Nq] row in features
  intent: np.ndarray        # [Nq] the query's cluster (0 .. N_v - 1) within its video
  intent_valid: np.ndarray  # bool [V, N_v]: the cluster has queries


def query_intents(queries: np.ndarray, video: np.ndarray, num_videos: int, num_views: int, seed: int, iters: int = 20):
  """k-means (cosine) of each video's queries into `num_views` intents (§3.2): (intent [Nq], valid [V, N_v])."""
  counts = np.bincount(video, minlength=num_videos)
  width = max(int(counts.max()), num_views)
  order = np.argsort(video, kind="stable")
  slot = np.arange(len(video)) - np.repeat(np.cumsum(counts) - counts, counts)
  grid = np.zeros((num_videos, width, queries.shape[1]), np.float32)
  weight = np.zeros((num_videos, width), np.float32)
  grid[video[order], slot] = queries[order]
  weight[video[order], slot] = 1.0

  def one(key, x, w):
    start = ops.kmeans_init(key, x, num_views, w)
    return ops.kmeans(x, start, iters=iters, cosine=True, weights=w)[1]

  keys = jax.random.split(jax.random.PRNGKey(seed), num_videos)
  assign = np.asarray(jax.jit(jax.vmap(one))(keys, grid, weight))
  intent = np.empty(len(video), np.int32)
  intent[order] = assign[video[order], slot]
  valid = np.zeros((num_videos, num_views), bool)
  valid[video, intent] = True
  return intent, valid


def _batched(fn, *arrays, size: int = 4096):
  return np.concatenate([np.asarray(fn(*(a[i:i + size] for a in arrays))) for i in range(0, len(arrays[0]), size)])


def view_of_query(model: GRDR, params, data: TrainingSet) -> np.ndarray:
  """The view each training query is aligned with: the best view <-> intent matching of its video
  (`match_views`) between the views z and the intents' mean first decoder feature h^(1)."""
  z = _batched(jax.jit(lambda f: model.apply({"params": params}, f, method=lambda m, f: m.tok.encode(f))), data.features)
  h1 = _batched(jax.jit(lambda q: model.apply(
      {"params": params}, q, method=lambda m, q: m.decode(m.encode_query(q), jnp.zeros((q.shape[0], 0), jnp.int32))[:, 0])),
      data.queries)
  return matched_view(z, intent_centres(data, ops.l2_normalize(h1), z.shape[1]), data)


def matched_view(z: np.ndarray, centres: np.ndarray, data: TrainingSet) -> np.ndarray:
  """int32 [Nq]: the view of its video each training query's intent is matched with (`match_views` of the
  views z [V, N_v, d] and the intents' centres [V, N_v, d])."""
  perm = np.asarray(match_views(jnp.asarray(z), jnp.asarray(centres), jnp.asarray(data.intent_valid)))
  view_of_intent = np.empty_like(perm)
  np.put_along_axis(view_of_intent, perm, np.broadcast_to(np.arange(z.shape[1]), perm.shape), axis=1)
  return view_of_intent[data.video, data.intent].astype(np.int32)


def init_codebook(model: GRDR, params, features: np.ndarray, layer: int, seed: int, iters: int):
  """Algorithm 1 line 10: C^(m) <- KMeans(r^(m)) over every view of every training video."""
  k = model.tokenizer.num_codes

  def residual(f):
    out = model.apply({"params": params}, f, layer - 1, method=lambda m, f, n: m.tok(f, n))
    return out["z"] - out["z_hat"]

  r = _batched(jax.jit(residual), features).reshape(-1, model.tokenizer.latent_dim)
  start = ops.kmeans_init(jax.random.PRNGKey(seed), r, k)
  centres, _ = jax.jit(ops.kmeans, static_argnames=("iters", "cosine"))(r, start, iters=iters, cosine=True)
  params = jax.tree.map(lambda x: x, params)  # a copy: the caller's tree is not modified
  params["tokenizer"][f"codebook_{layer - 1}"] = jnp.asarray(centres)
  return params


# ----------------------------------------------------------------------------------------------
# Progressive co-training (Algorithm 1).


def phases(tcfg, num_layers: int):
  """[(m, "align" | "cotrain", epochs)] in Algorithm 1's order."""
  out = []
  for m in range(1, num_layers + 1):
    align = tcfg.first_align_epochs if m == 1 else tcfg.align_epochs
    if align:
      out.append((m, "align", align))
    out.append((m, "cotrain", tcfg.cotrain_epochs))
  return out


def phase_optimizer(tcfg, layer: int, align: bool, num_layers: int) -> optax.GradientTransformation:
  """AdamW on everything but the codebooks other than C^(m) in co-training (frozen: Algorithm 1 line 2;
  C^(m) is only used after its k-means initialisation); no weight decay on codebooks or temperatures."""
  trained = set() if align else {layer - 1}
  frozen = "|".join(f"codebook_{l}" for l in range(num_layers) if l not in trained)
  rules = ([(f"tokenizer/({frozen})", "frozen")] if frozen else []) + [(r".*", "train")]
  no_decay = lambda p: jax.tree_util.tree_map_with_path(  # noqa: E731
      lambda path, _: not any(s in train.param_path(path) for s in ("codebook_", "log_tau")), p)
  return optax.multi_transform(
      {"train": train.adamw(tcfg.lr, tcfg.weight_decay, mask=no_decay), "frozen": optax.set_to_zero()},
      lambda p: train.param_labels(p, rules))


def train_grdr(model: GRDR, data: TrainingSet, tcfg, workdir: Path, seed: int):
  """Trains with `tcfg.schedule` (each phase logs to `<workdir>/<phase>/metrics.jsonl`); returns the params."""
  dummy = (jnp.zeros((1, data.features.shape[1])), jnp.zeros((1, data.queries.shape[1])))
  params = jax.device_get(model.init(jax.random.PRNGKey(seed), *dummy)["params"])
  if tcfg.schedule == "tokenizer_first":
    return train_tokenizer_first(model, params, data, tcfg, workdir, seed)
  m_layers = model.tokenizer.num_layers
  for i, (layer, kind, epochs) in enumerate(phases(tcfg, m_layers)):
    align = kind == "align"
    if not align:
      params = init_codebook(model, params, data.features, layer, seed + 1000 * layer, tcfg.kmeans_iters)
    view = view_of_query(model, params, data)
    n_layers = layer - 1 if align else layer

    def loss_fn(p, batch, rng, layer=layer, align=align, n_layers=n_layers):
      out = model.apply({"params": p}, batch["feature"], batch["query"], batch["view"], n_layers, layer,
                        deterministic=False, rngs={"dropout": rng}, method=GRDR.phase_outputs)
      return losses.grdr_loss(out, batch["feature"], layer=layer, align=align,
                              weights=tuple(tcfg.loss_weights), beta=tcfg.beta)

    def batch_fn(idx, view=view):
      return {"feature": data.features[data.video[idx]], "query": data.queries[idx], "view": view[idx]}

    start = params
    name = f"layer{layer}_{kind}"
    state = train.fit_epochs(
        name=f"grdr {name}", init_fn=lambda _: start, loss_fn=loss_fn, num_examples=len(data.queries),
        batch_fn=batch_fn, tcfg=ml_collections.ConfigDict({**tcfg.to_dict(), "epochs": epochs}),
        seed=seed + i, workdir=workdir / name, optimizer=phase_optimizer(tcfg, layer, align, m_layers))
    params = jax.device_get(state.params)
  return params


def load_trained(tcfg, num_layers: int, workdir: Path):
  """The params a finished `train_grdr(..., tcfg, workdir, ...)` ended with: its last phase's checkpoint."""
  last = "retriever" if tcfg.schedule == "tokenizer_first" else "layer{}_{}".format(*phases(tcfg, num_layers)[-1][:2])
  return train.load_params(Path(workdir) / last)


def intent_centres(data: TrainingSet, vectors: np.ndarray, n_views: int) -> np.ndarray:
  """Each training video's intent centres of per-query `vectors` [Nq, d] (the raw queries, or their decoder
  features): the direction of each intent's sum, [V, N_v, d] (unit, or 0 for an intent without queries)."""
  centres = np.zeros((len(data.features), n_views, vectors.shape[1]), np.float32)
  np.add.at(centres, (data.video, data.intent), vectors)
  return np.asarray(ops.l2_normalize(centres), np.float32)


def train_tokenizer_first(model: GRDR, params, data: TrainingSet, tcfg, workdir: Path, seed: int):
  """The two-stage schedule (`train.schedule = "tokenizer_first"`; defaults docstring): views, then IDs, then
  the retriever, each a call of the one loop.

  1. views: the view MLPs alone, `view_set_alignment_loss` of each video's views against its query-cluster
     centres in the query space (needs latent_dim == query_dim); `view_epochs` over the videos.
  2. codebooks: C^(1..M) by k-means on the residuals of every training view, layer by layer (Algorithm 1
     line 10), then frozen with the views: every video's semantic IDs are fixed from here on.
  3. retriever: query encoder and decoder, teacher-forced L_CE (eq. 11) summed over the M layers towards the
     codes of the view matched (`match_views`) with the query's intent; `retriever_epochs` over the queries.
  """
  n_views, m_layers = model.tokenizer.num_views, model.tokenizer.num_layers
  centres = intent_centres(data, data.queries, n_views)
  valid = data.intent_valid.astype(np.float32)
  encode = lambda p, f: model.apply({"params": p}, f, method=lambda m, f: m.tok.encode(f))  # noqa: E731

  def view_loss(p, batch, rng):
    loss = losses.view_set_alignment_loss(encode(p, batch["feature"]), batch["centres"], batch["valid"],
                                          tcfg.use_weight)
    return loss, {"set_alignment": loss}

  only = lambda pattern, lr: optax.multi_transform(  # noqa: E731
      {"train": train.adamw(lr, tcfg.weight_decay), "frozen": optax.set_to_zero()},
      lambda p: train.param_labels(p, [(pattern, "train"), (".*", "frozen")]))
  start = params
  state = train.fit_epochs(
      name="grdr views", init_fn=lambda _: start, loss_fn=view_loss, num_examples=len(data.features),
      batch_fn=lambda idx: {"feature": data.features[idx], "centres": centres[idx], "valid": valid[idx]},
      tcfg=ml_collections.ConfigDict({**tcfg.to_dict(), "epochs": tcfg.view_epochs, "batch_size": tcfg.view_batch_size}),
      seed=seed, workdir=workdir / "views", optimizer=only("tokenizer/encoder/.*", tcfg.view_lr),
      batch_key="train.view_batch_size")
  params = jax.device_get(state.params)
  for layer in range(1, m_layers + 1):
    params = init_codebook(model, params, data.features, layer, seed + 1000 * layer, tcfg.kmeans_iters)
  view = matched_view(_batched(jax.jit(lambda f: encode(params, f)), data.features), centres, data)

  def retriever_loss(p, batch, rng):
    out = model.apply({"params": p}, batch["feature"], batch["query"], batch["view"], m_layers, m_layers,
                      deterministic=False, rngs={"dropout": rng}, method=GRDR.phase_outputs)
    ces = [losses.code_cross_entropy(out["h"][:, l], out["codebooks"][l], out["view_codes"][:, l], out["tau_code"])
           for l in range(m_layers)]
    return sum(ces), {f"ce{l + 1}": c for l, c in enumerate(ces)}

  start = params
  state = train.fit_epochs(
      name="grdr retriever", init_fn=lambda _: start, loss_fn=retriever_loss, num_examples=len(data.queries),
      batch_fn=lambda idx: {"feature": data.features[data.video[idx]], "query": data.queries[idx], "view": view[idx]},
      tcfg=ml_collections.ConfigDict({**tcfg.to_dict(), "epochs": tcfg.retriever_epochs}),
      seed=seed + 1, workdir=workdir / "retriever", optimizer=only("(?!tokenizer/).*", tcfg.retriever_lr))
  return jax.device_get(state.params)


# ----------------------------------------------------------------------------------------------
# Retrieval.


def make_recall(model: GRDR, params, features: np.ndarray, ids, ecfg) -> tuple[GenerativeRecall, np.ndarray]:
  """The trie of the pool's semantic IDs and its generative recall (dense vectors = the features), and the
  pool's codes [V, N_v, M]."""
  codes = np.asarray(_batched(jax.jit(lambda f: model.apply({"params": params}, f, method=GRDR.video_codes)), features))
  trie = SemanticIdTrie(ids, codes, model.tokenizer.num_codes)
  encode = lambda p, q: model.apply({"params": p}, q, method=GRDR.encode_query)  # noqa: E731
  recall = GenerativeRecall(trie, encode, _LogpFn(model), params, width=ecfg.beam_width, limit=ecfg.candidates,
                            vectors=features)
  return recall, codes


class _LogpFn:
  """A hashable `logp_fn` for beam search (one per model object)."""

  def __init__(self, model: GRDR):
    self.model = model

  def __call__(self, params, memory, prefix):
    return self.model.apply({"params": params}, memory, prefix, method=GRDR.code_logp)

  def __hash__(self):
    return hash(self.model)

  def __eq__(self, other):
    return isinstance(other, _LogpFn) and other.model == self.model


# ----------------------------------------------------------------------------------------------
# A user's corpus: a feature store and the dataset's release files (what the polysemous world stands in for).


@dataclasses.dataclass
class StoreCorpus:
  """GRDR's corpus on a user's store, with the attributes the experiment reads from the world: `video_ids` [V]
  (training videos, then test videos), `features` [V, d_v] (the store's clip embeddings), `train` / `test` (rows),
  `test_queries` [Q, d_q] with `test_query_video` (rows), and the training captions as pseudo queries
  (`train_queries`, `train_query_video`): a caption is one query of its video (§4.3's LLM queries, when a user
  has them, plug in through `PseudoQueries`)."""
  video_ids: np.ndarray
  features: np.ndarray
  train: np.ndarray
  test: np.ndarray
  test_queries: np.ndarray
  test_query_video: np.ndarray
  train_queries: np.ndarray
  train_query_video: np.ndarray
  path: dict  # results.json's path keys (`vidjax.methods.real.real_path`)
  synthetic: bool

  def __call__(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # PseudoQueries
    position = {int(v): i for i, v in enumerate(rows)}
    keep = np.asarray([int(v) in position for v in self.train_query_video])
    return self.train_queries[keep], np.asarray([position[int(v)] for v in self.train_query_video[keep]], np.int64)


def store_corpus(config, workdir: Path) -> StoreCorpus:
  """The test split (`data.annotations`, its protocol) and the training split (`data.train_annotations`, one query
  per caption) on the videos the store has (`data.skip_missing`); query vectors are the store's text embeddings
  (the frozen query encoder: `model.query_dim` must be their width)."""
  d = config.data
  store = FeatureStore(d.features)
  real.check_store(workdir, store, (d.clip_kind, d.text_kind))
  test = build_benchmark(read_dataset(config.dataset, d.annotations, d.video_list), protocol=d.protocol,
                         split=d.split or None)
  train_split = None if d.train_video_list else d.train_split or None
  train_set = build_benchmark(read_dataset(config.dataset, d.train_annotations, d.train_video_list), protocol="captions",
                              split=train_split)
  kinds = [d.clip_kind]
  kept_test, skipped = real.present_videos(config, store, kinds, test.corpus, "test videos")
  kept_train, skipped_train = real.present_videos(config, store, kinds, train_set.corpus, "training videos")
  test, train_set = test.restrict(kept_test), train_set.restrict(set(kept_train) - set(kept_test))
  ids = list(train_set.corpus) + list(test.corpus)
  row = {v: i for i, v in enumerate(ids)}
  width = store.item_shape(d.text_kind)[-1]
  if width != config.model.query_dim:
    raise ValueError(f"model.query_dim={config.model.query_dim} but the store's {d.text_kind!r} embeddings (the frozen "
                     f"query encoder) are {width}-d: set --config.model.query_dim={width}")
  return StoreCorpus(
      np.asarray(ids), embeddings(store, d.clip_kind, ids, "corpus videos"),
      np.arange(len(train_set.corpus)), np.arange(len(train_set.corpus), len(ids)),
      embeddings(store, d.text_kind, test.query_ids, "test queries"),
      np.asarray([row[q.video_id] for q in test.queries], np.int64),
      embeddings(store, d.text_kind, train_set.query_ids, "training queries"),
      np.asarray([row[q.video_id] for q in train_set.queries], np.int64),
      real.real_path(workdir, store, skipped + skipped_train), bool(store.metadata.get("synthetic", False)))
