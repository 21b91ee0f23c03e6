"""GRDR: multi-view tokenizer + generative retriever (progressive co-training), trie recall, dense rerank.

`run(config, workdir)`:
  1. data: the embedded SYNTHETIC polysemous world (`vidjax.worlds.polysemous`; `config.data.features`
     must be empty: real feature stores are not wired for GRDR yet);
  2. query intents: each training video's queries are clustered by k-means into N_v intents (§3.2);
  3. training, Algorithm 1: for m = 1..M an alignment phase (L_CL + [m > 1] L_HC) and, after a
     k-means initialisation of C^(m) on the residuals r^(m) of every training view, a co-training
     phase (eq. 12). Each phase is one call of the train loop (`common.train_epochs` ->
     `train.fit`) with its own AdamW and the codebooks C^(l != m) frozen, in
     `<workdir>/models/<variant>/layer<m>_<phase>/` (checkpointed: a killed run resumes). Views are
     matched to intents at the start of each phase (`models.grdr.match_views` on h^(1));
  4. indexing: every pool video's N_v semantic IDs -> `SemanticIdTrie`;
  5. retrieval per setting ("inductive": the test videos; "full_corpus": all videos): generative
     recall (beam search, de-duplication, at most `eval.candidates` videos) then dense cosine rerank
     through `TwoStage`; R@1/5/10, candidate recall, mean candidates, latency per stage at batch 1;
     exact dense retrieval beside it (and dense R@100 in full corpus);
  6. the same with N_v = 1 (`grdr_nv1`), codebook health, index bytes per video, a plot of candidate
     recall against the candidate budget, and `<workdir>/results.json`.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from vidjax import evaluate, losses, metrics, ops, train
from vidjax.worlds.polysemous import PolysemousWorld, PolysemousWorldConfig, make_polysemous_world
from vidjax.experiments import common
from vidjax.models.grdr import GRDR, RetrieverConfig, TokenizerConfig, match_views
from vidjax.models.t5 import T5Config
from vidjax.retrieval import DenseIndex, GenerativeRecall, SemanticIdTrie, TwoStage

RESUMABLE_CHANGES = ("train.progress", "train.log_every", "eval.latency_queries", "eval.beam_width",
                     "eval.candidates")   # evaluation only: a finished run re-evaluates without retraining
KEYS = ("t2v_r1", "t2v_r5", "t2v_r10")
SETTINGS = ("inductive", "full_corpus")


def validate(config) -> None:
  common.check_positive_int(config, ("train.batch_size", "train.first_align_epochs",
                                     "train.cotrain_epochs", "train.kmeans_iters", "eval.beam_width",
                                     "eval.candidates", "eval.latency_queries"))
  common.check_positive(config, ("train.lr",))
  if config.train.align_epochs < 0 or config.train.weight_decay < 0:
    common.bad_value("train.align_epochs / train.weight_decay", (config.train.align_epochs, config.train.weight_decay),
                     "non-negative")
  if len(config.train.loss_weights) != 4:
    common.bad_value("train.loss_weights", config.train.loss_weights, "four weights (lambda_1..4)")
  if config.data.features:
    raise ValueError("grdr: real feature stores are not supported yet; leave data.features empty for the "
                     "embedded SYNTHETIC polysemous world")
  common.check_choice(config, "world_model.query_encoder", ("minilm", "t5"))
  common.check_choice(config, "train.schedule", ("progressive", "tokenizer_first"))
  if config.train.schedule == "tokenizer_first":
    common.check_positive_int(config, ("train.view_epochs", "train.view_batch_size", "train.retriever_epochs"))
    common.check_positive(config, ("train.view_lr", "train.retriever_lr"))
    mc = config.world_model
    if mc.latent_dim != mc.query_dim:
      common.bad_value("world_model.latent_dim", mc.latent_dim,
                       f"equal to world_model.query_dim={mc.query_dim}: train.schedule='tokenizer_first' aligns the "
                       "views with query-cluster centres in the query space")


def build_model(mcfg, feature_dim: int, num_views: int | None = None) -> GRDR:
  """The GRDR module of a model config (`config.world_model` / `config.model`)."""
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


@dataclasses.dataclass(frozen=True)
class WorldQueries:
  """The embedded polysemous world's own multi-intent training queries (one facet each)."""
  world: PolysemousWorld

  def __call__(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    position = {int(v): i for i, v in enumerate(rows)}
    keep = np.asarray([int(v) in position for v in self.world.train_query_video])
    video = np.asarray([position[int(v)] for v in self.world.train_query_video[keep]], np.int64)
    return self.world.train_queries[keep], video


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
    state = common.train_epochs(
        name=f"grdr {name}", init_fn=lambda _: start, loss_fn=loss_fn, num_examples=len(data.queries),
        batch_fn=batch_fn, tcfg=ml_collections.ConfigDict({**tcfg.to_dict(), "epochs": epochs}),
        seed=seed + i, workdir=workdir / name, optimizer=phase_optimizer(tcfg, layer, align, m_layers))
    params = jax.device_get(state.params)
  return params


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
  state = common.train_epochs(
      name="grdr views", init_fn=lambda _: start, loss_fn=view_loss, num_examples=len(data.features),
      batch_fn=lambda idx: {"feature": data.features[idx], "centres": centres[idx], "valid": valid[idx]},
      tcfg=ml_collections.ConfigDict({**tcfg.to_dict(), "epochs": tcfg.view_epochs, "batch_size": tcfg.view_batch_size}),
      seed=seed, workdir=workdir / "views", optimizer=only("tokenizer/encoder/.*", tcfg.view_lr))
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
  state = common.train_epochs(
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


def _recall(ids: np.ndarray, target: np.ndarray, ks=(1, 5, 10)) -> dict[str, float]:
  """`metrics.recall_from_ranked` as fractions, keys t2v_r<k>."""
  return {f"t2v_{k}": v / 100 for k, v in metrics.recall_from_ranked(ids, target, ks).items()}


def evaluate_setting(world: PolysemousWorld, recall: GenerativeRecall, ecfg) -> tuple[dict, np.ndarray]:
  """GR + dense rerank on the world's test queries over the recall's pool.

  Returns the metrics and the recalled ids [Q, candidates] (beam order, "" past a query's candidates).
  """
  queries = world.test_queries
  target = world.video_ids[world.test_query_video]
  stack = TwoStage(recall, k_recall=ecfg.candidates, reranker=evaluate.CosineScorer())
  result = stack.search(queries, k=min(10, ecfg.candidates))
  found = result.recall_ids  # every candidate: k_recall is the candidate limit
  out = {**_recall(result.ids, target), "candidate_recall": float(np.mean((found == target[:, None]).any(1))),
         "num_candidates": float(np.mean(np.sum(found != "", axis=1)))}
  single = TwoStage(recall, k_recall=ecfg.candidates, reranker=evaluate.CosineScorer(), query_batch=1)
  single.search(queries[:1], k=1)  # compile
  recall.reset_latency()
  t = single.search(queries[:min(ecfg.latency_queries, len(queries))], k=1)
  out["latency_ms"] = {**recall.mean_latency_ms(), "rerank": t.latency_ms["rerank"], "total": t.latency_ms["total"]}
  return out, found


def dense_setting(world: PolysemousWorld, pool: np.ndarray, ecfg) -> dict:
  index = DenseIndex(world.video_ids[pool], world.features[pool])
  target = world.video_ids[world.test_query_video]
  ids = np.asarray(index.retrieve(world.test_queries, min(100, len(pool)))[0])
  # R@100 over a pool of fewer than 100 videos is recall over all of them
  out = {**_recall(ids[:, :10], target), "t2v_r100": _recall(ids, target, (ids.shape[1],))[f"t2v_r{ids.shape[1]}"]}
  n = min(ecfg.latency_queries, len(target))
  index.retrieve(world.test_queries[:1], 10)
  t = time.perf_counter()
  for i in range(n):
    index.retrieve(world.test_queries[i:i + 1], 10)
  out["latency_ms"] = {"total": 1e3 * (time.perf_counter() - t) / n}
  return out


def plot_candidate_recall(curves: dict, path: Path, synthetic: bool) -> Path:
  """Candidate recall against the candidate budget, one line per model (inductive pool)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(5, 3.5))
  for name, (budgets, values) in curves.items():
    ax.plot(budgets, values, label=name)
  ax.set_xlabel("candidate videos per query")
  ax.set_ylabel("candidate recall")
  ax.set_title("GRDR recall (inductive)" + (" [SYNTHETIC]" if synthetic else ""))
  ax.legend()
  return common.save_figure(fig, path)


def recall_curve(found: np.ndarray, target: np.ndarray, budgets) -> list[float]:
  """Candidate recall within the first b recalled ids [Q, K], for each budget b."""
  hit = found == target[:, None]
  return [float(np.mean(hit[:, :b].any(1))) for b in budgets]


# ----------------------------------------------------------------------------------------------


def world_of(config) -> PolysemousWorld:
  w = config.world
  return make_polysemous_world(PolysemousWorldConfig(num_videos=w.num_videos, dim=w.dim, train_queries=w.train_queries,
                                                     test_queries=w.test_queries), seed=config.seed)


def trained_model(config, workdir: Path, world: PolysemousWorld, n_views: int, name: str,
                  queries: PseudoQueries | None = None) -> tuple[GRDR, Any]:
  """GRDR with `n_views` views trained on the training videos' pseudo queries (default: the world's own) and
  restored from `workdir/models/name` when trained there before."""
  q, video = checked_queries(queries or WorldQueries(world), world.train, config.world_model.query_dim)
  intent, valid = query_intents(q, video, len(world.train), n_views, config.seed)
  data = TrainingSet(world.features[world.train], q, video, intent, valid)
  model = build_model(config.world_model, world.features.shape[1], n_views)
  return model, train_grdr(model, data, config.train, workdir / "models" / name, config.seed)


def suite(config, workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """Dense cosine and GRDR (generative recall of `eval.candidates`, dense rerank) on the world's test queries
  over the whole corpus (`configs/evaluate_all.py`); queries and videos are keyed by row."""
  world = world_of(config)
  model, params = trained_model(config, Path(workdir), world, config.world_model.num_views, "grdr")
  space = f"the polysemous world (synthetic, seed {config.seed})"
  dense = evaluate.dual_encoder("dense", space, lambda rows: world.test_queries[list(rows)],
                                lambda rows: world.features[list(rows)])

  def generative(data):
    queries, videos, relevant = data
    pool = np.asarray(videos, np.int64)
    recall, _ = make_recall(model, params, world.features[pool], world.video_ids[pool], config.eval)
    stack = TwoStage(recall, k_recall=config.eval.candidates, reranker=evaluate.CosineScorer())
    found = stack.search(world.test_queries[np.asarray(queries, np.int64)], k=min(10, config.eval.candidates)).ids
    target = world.video_ids[pool][np.asarray(relevant)]
    return {f"t2v_{k}": v for k, v in metrics.recall_from_ranked(found, target, (1, 5, 10)).items()}

  grdr = evaluate.Model("grdr_rerank", space, {"gallery": generative},
                        {k: "GRDR is a recall stage over a corpus (R@K); fixed candidate pools leave it nothing to "
                            "recall" for k in evaluate.BENCHMARK_KINDS})
  return [dense, grdr], [evaluate.Benchmark("R@K (polysemous)", "gallery", space,
                                            (np.arange(len(world.test_queries)), np.arange(len(world.video_ids)),
                                             world.test_query_video))]


def run(config, workdir) -> dict:
  workdir = common.start_run(config, workdir, validate, RESUMABLE_CHANGES)
  world = world_of(config)
  mcfg = config.world_model
  variants = {"grdr": mcfg.num_views}
  if config.eval.compare_single_view and mcfg.num_views > 1:
    variants["grdr_nv1"] = 1
  results = {"experiment": config.name, "dataset": config.dataset, "synthetic": True, "seed": config.seed}
  pools = {"inductive": world.test, "full_corpus": np.arange(len(world.video_ids))}
  for s in SETTINGS:
    results[s] = {"dense": dense_setting(world, pools[s], config.eval)}
  curves, budgets = {}, list(range(10, config.eval.candidates + 1, 10)) or [config.eval.candidates]
  for name, n_views in variants.items():
    model, params = trained_model(config, workdir, world, n_views, name)
    for s in SETTINGS:
      recall, codes = make_recall(model, params, world.features[pools[s]], world.video_ids[pools[s]], config.eval)
      results[s][name], found = evaluate_setting(world, recall, config.eval)
      if s == "inductive":
        target = world.video_ids[world.test_query_video]
        curves[f"{name} (N_v={n_views})"] = (budgets, recall_curve(found, target, budgets))
      if name == "grdr" and s == "full_corpus":  # every video's IDs
        results["codebook"] = metrics.codebook_health(codes, model.tokenizer.num_codes)
        results["index_bytes_per_video"] = {"grdr": recall.trie.nbytes / len(recall.trie),
                                            "dense_float32": 4 * world.features.shape[1]}
  results["metrics"] = {s: results[s] for s in SETTINGS}
  tables = []
  for s in SETTINGS:
    rows = {m: {k: 100 * v[k] for k in KEYS + (("candidate_recall",) if m != "dense" else ())} for m, v in
            results[s].items()}
    tables.append(evaluate.format_table(rows, f"{config.name} {s}", synthetic=True))
  plot_candidate_recall(curves, workdir / "candidate_recall.png", True)
  common.write_results(workdir, results, tables)
  return results
