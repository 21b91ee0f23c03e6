"""GRDR as a method (../shared/papers/grdr.txt §3): the model built from a config, the training queries'
intents, the training schedules (Algorithm 1 as its authors run it, `train_progressive`; Table 3's two-stage
pipeline, `train_two_stage`; the project's `tokenizer_first`), each phase one call of the one train loop, the
trie-constrained generative recall over a pool's IDs, the corpus read from release-format caption files and a
feature store (a user's, or a world's), Tables 1-2's trained dense rows (CLIP4Clip seqTransf, X-Pool:
`vidjax.methods.dense`) and the rerank stage, and a run's rows and their evaluation
(`vidjax.experiments.grdr`, `suite` for `evaluate_all`).

    corpus = read_corpus(config, workdir)                                        # files + store -> `Corpus`
    model = build_model(config.model, feature_dim)
    params = train_grdr(model, TrainingSet(...), config.train, workdir, seed)   # phases under workdir/<phase>/
    recall, codes = make_recall(model, params, features, ids, config.eval)      # a `Retriever` for `TwoStage`
    xpool = frames_reranker("xpool", dense.scorer(*train_dense(config, workdir, corpus, "xpool")), corpus)
    row, found = evaluate_setting(corpus, recall, config.eval, (xpool, BACKBONE))  # reranked, + a second reading

A GR row's results (`evaluate_setting`): t2v_r1/5/10 after the rerank by `reranker` (its name), candidate_recall,
num_candidates, index_bytes_per_video, beam_width, candidate_cap, latency_ms ({encode, decode, id_to_video, recall,
rerank, total}, ms per query at batch 1, total = T_recall + T_rerank, §4.1), and `readings`: {other reranker's name:
{t2v_r1, t2v_r5, t2v_r10, latency_ms}}, the same candidates reranked by it. A dense row's (`dense_setting`,
`pair_setting`): t2v_r1/5/10/100, candidate_recall (R@the candidate budget), num_candidates, index_bytes_per_video,
latency_ms {total}, reranker None.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import time
import warnings
from pathlib import Path
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from vidjax import evaluate, losses, metrics, ops, train
from vidjax.data import pipeline
from vidjax.defaults import common as config_common
from vidjax.data.features import FeatureStore
from vidjax.data.retrieval import build_benchmark, embeddings, read_dataset
from vidjax.data import provenance
from vidjax.methods import dense as dense_method
from vidjax.models.grdr import GRDR, RetrieverConfig, TokenizerConfig, match_views
from vidjax.models.t5 import T5Config
from vidjax.retrieval import DenseIndex, GenerativeRecall, SemanticIdTrie, TwoStage
from vidjax.retrieval.dense import DEFAULT_QUERY_BATCH
from vidjax.retrieval.generative import t5_state_copies


def build_model(mcfg, feature_dim: int, num_views: int | None = None, num_layers: int | None = None,
                num_codes: int | None = None, vocab_size: int = 0) -> GRDR:
  """The GRDR module of a model config section (`config.model`), N_v / M / K overridable; `vocab_size`: the query
  tokens' (query_encoder "t5")."""
  t5 = T5Config(vocab_size=0, **mcfg.t5.to_dict())
  tok = TokenizerConfig(feature_dim=feature_dim, latent_dim=mcfg.latent_dim, hidden=mcfg.hidden,
                        num_views=num_views or mcfg.num_views, num_layers=num_layers or mcfg.num_layers,
                        num_codes=num_codes or mcfg.num_codes, normalize_views=mcfg.normalize_views)
  ret = RetrieverConfig(t5=t5, query_encoder=mcfg.query_encoder, query_dim=mcfg.query_dim,
                        query_tokens=mcfg.query_tokens, tau_init=mcfg.tau_init, vocab_size=vocab_size)
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
  query_vectors: np.ndarray | None = None  # [Nq, d] embeddings of the queries (intents, centres); None: `queries`

  def __post_init__(self):
    if self.query_vectors is None:
      self.query_vectors = self.queries


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


@functools.partial(jax.jit, static_argnames=("model", "method", "extra"))
def _apply(params, x, *, model: GRDR, method, extra: tuple = ()):
  """`model.apply({"params": params}, x, *extra, method=method)`, one compilation per (model, method, shapes): the
  params are an argument (not constants baked into the program) and `method` a module-level function."""
  return model.apply({"params": params}, x, *extra, method=method)


def _apply_batched(model: GRDR, method, params, x: np.ndarray, *extra) -> np.ndarray:
  return _batched(lambda b: _apply(params, b, model=model, method=method, extra=extra), x)


_kmeans = jax.jit(ops.kmeans, static_argnames=("iters", "cosine"))


def _views(m: GRDR, f):  # the tokenizer's views z [B, N_v, d]
  return m.tok.encode(f)


def _first_decoder_feature(m: GRDR, q):  # h^(1) of each query [B, d]
  return m.decode(m.encode_query(q), jnp.zeros((q.shape[0], 0), jnp.int32))[:, 0]


def _residual(m: GRDR, f, layer: int):  # r^(layer + 1) = z - z_hat after `layer` codebooks
  out = m.tok(f, layer)
  return out["z"] - out["z_hat"]


VIEW_ASSIGNMENTS = ("cluster", "matched")  # `train.algorithm1.view_assignment` (configs/grdr/common.py)


def view_of_query(model: GRDR, params, data: TrainingSet, assignment: str = "matched") -> np.ndarray:
  """int32 [Nq]: the view of its video each training query is aligned with. "cluster": the index of the query's
  intent (§3.2: "sub-encoder phi_i learns to align with queries in cluster i"; the official dataset's `token_idx`),
  whatever the params; "matched": the best view <-> intent matching of its video (`match_views`) between the views z
  and the intents' mean first decoder feature h^(1)."""
  if assignment not in VIEW_ASSIGNMENTS:
    raise ValueError(f"GRDR view_assignment must be one of {VIEW_ASSIGNMENTS}, got {assignment!r}")
  if assignment == "cluster":
    return data.intent.astype(np.int32)
  z = _apply_batched(model, _views, params, data.features)
  h1 = _apply_batched(model, _first_decoder_feature, params, data.queries)
  return matched_view(z, intent_centres(data, ops.l2_normalize(h1), z.shape[1]), data)


def matched_view(z: np.ndarray, centres: np.ndarray, data: TrainingSet) -> np.ndarray:
  """int32 [Nq]: the view of its video each training query's intent is matched with (`match_views` of the
  views z [V, N_v, d] and the intents' centres [V, N_v, d])."""
  perm = np.asarray(match_views(jnp.asarray(z), jnp.asarray(centres), jnp.asarray(data.intent_valid)))
  view_of_intent = np.empty_like(perm)
  np.put_along_axis(view_of_intent, perm, np.broadcast_to(np.arange(z.shape[1]), perm.shape), axis=1)
  return view_of_intent[data.video, data.intent].astype(np.int32)


KMEANS_METRICS = ("cosine", "l2")  # `train.algorithm1.kmeans_metric`


def prefix_centred(x: np.ndarray, prefix: np.ndarray) -> np.ndarray:
  """Rows of `x` [N, d] shifted so that each group of equal `prefix` rows [N, p] has the global mean (the official
  k-means seed's `norm_by_prefix`: x - mean of its prefix group + mean of all); p = 0 leaves x as it is."""
  if prefix.shape[1] == 0:
    return x
  _, group = np.unique(prefix, axis=0, return_inverse=True)
  group = group.reshape(-1)
  sums = np.zeros((group.max() + 1, x.shape[1]), np.float64)
  np.add.at(sums, group, x)
  means = sums / np.bincount(group)[:, None]
  return (x - means[group] + x.mean(0)).astype(np.float32)


def init_codebook(model: GRDR, params, features: np.ndarray, layer: int, seed: int, iters: int,
                  metric: str = "cosine", centred: bool = False):
  """Algorithm 1 line 10: C^(m) <- KMeans(r^(m)) over every view of every training video: Lloyd iterations by
  `metric` ("cosine": maximum cosine, eq. 5's rule; "l2": squared L2, the official faiss k-means) from
  `kmeans_init`'s start; `centred`: each residual first shifted by its prefix group's mean (`prefix_centred`; the
  prefix: the view's codes of layers 1..m-1)."""
  if metric not in KMEANS_METRICS:
    raise ValueError(f"GRDR kmeans_metric must be one of {KMEANS_METRICS}, got {metric!r}")
  k, d = model.tokenizer.num_codes, model.tokenizer.latent_dim
  r = _apply_batched(model, _residual, params, features, layer - 1).reshape(-1, d)
  if centred:
    r = prefix_centred(r, video_codes(model, params, features, layer - 1).reshape(len(r), layer - 1))
  start = ops.kmeans_init(jax.random.PRNGKey(seed), r, k)
  centres, _ = _kmeans(r, start, iters=iters, cosine=metric == "cosine")
  params = jax.tree.map(lambda x: x, params)  # a copy: the caller's tree is not modified
  params["tokenizer"][f"codebook_{layer - 1}"] = jnp.asarray(centres)
  return params


# ----------------------------------------------------------------------------------------------
# Training recipes: the rows of Tables 1-3, each a sequence of calls of the one train loop.

SCHEDULES = ("progressive", "tokenizer_first", "two_stage")


@dataclasses.dataclass(frozen=True)
class Recipe:
  """How one row of GRDR's tables is trained (`train_grdr`), from the same `TrainingSet` and `train` section.

  schedule:
    "progressive": Algorithm 1 as its authors run it (`train_progressive`, `train.algorithm1`: per layer an
      alignment phase, the k-means init of C^(m), co-training through the shared codebook, the fit phase);
    "tokenizer_first": the project's schedule (views aligned to the query-cluster centres, k-means codebooks,
      frozen; the retriever last; `configs/grdr/common.py` says why);
    "two_stage": Table 3's "w/o unified co-training" (`train_two_stage`): the tokenizer trained alone and frozen,
      then the retriever alone on its IDs.
  (The GR baselines TIGER, AVG and T2VIndexer are `vidjax.methods.grdr_baselines`.)
  num_views: N_v (1 for Table 3's "w/o multi-view tokenizer").
  cl, hc: False drops L_CL / L_HC from Algorithm 1's phases (Table 3).
  num_layers, num_codes: M and K when not the model config's (the Figure 7 sweep).
  """
  schedule: str
  num_views: int
  cl: bool = True
  hc: bool = True
  num_layers: int | None = None
  num_codes: int | None = None

  def __post_init__(self):
    if self.schedule not in SCHEDULES:
      raise ValueError(f"GRDR Recipe.schedule must be one of {SCHEDULES}, got {self.schedule!r}")


def recipes(config) -> dict[str, Recipe]:
  """The rows a run trains, by results.json name: `grdr` (config.train.schedule), `grdr_paper` (Algorithm 1),
  `grdr_nv1` (N_v = 1, the config's schedule), and Table 3's ablations (`table3/*`, each Algorithm 1 less one
  component), as `config.eval` asks (the GR baselines: `vidjax.methods.grdr_baselines`)."""
  n, e = config.model.num_views, config.eval
  out = {"grdr": Recipe(config.train.schedule, n), "grdr_paper": Recipe("progressive", n)}
  if e.compare_single_view and n > 1:
    out["grdr_nv1"] = Recipe(config.train.schedule, 1)
  if e.table3:
    out.update({"table3/wo_multiview_tokenizer": Recipe("progressive", 1),
                "table3/wo_unified_cotraining": Recipe("two_stage", n),
                "table3/wo_hc": Recipe("progressive", n, hc=False), "table3/wo_cl": Recipe("progressive", n, cl=False)})
  return out


def limits(config, corpus) -> dict[str, tuple[int, str]]:
  """What must fit the data (`clip_to_data`): a retriever batch (and a dense row's, `dense.train.*.batch_size`) at
  most the training queries (one per training caption), a tokenizer batch (the views' and TIGER's RQ-VAE rows, `train.view_batch_size`) at most the training
  videos, a codebook (`model.num_codes`, the baselines' `baselines.num_codes`) at most the training videos, a beam
  (`eval.beam_width`, the capped row's) at most the distinct IDs the inductive pool's trie can hold."""
  n_queries, n_videos = len(corpus.train_queries), len(corpus.train)
  codes = f"the {n_videos} training videos k-means initialises a codebook over (at least 2 codes)"
  out = {"train.batch_size": (n_queries, f"the {n_queries} training queries (captions of the {n_videos} training "
                                         "videos)"),
         "train.view_batch_size": (n_videos, f"the {n_videos} training videos, one tokenizer example each"),
         "model.num_codes": (n_videos, codes, 2)}
  if config is not None and config.get("baselines") is not None and "num_codes" in config.baselines:
    out["baselines.num_codes"] = (n_videos, codes, 2)
  if config is not None and needs_frames(config):  # the dense rows' batches: pairs of the same training captions
    for paper in ("clip4clip", "xpool"):
      out[f"dense.train.{paper}.batch_size"] = out["train.batch_size"]
  if config is not None:  # a beam at most the distinct IDs the inductive pool's trie can hold (`check_budget`)
    n, m, k = config.model.num_views, config.model.num_layers, min(config.model.num_codes, max(n_videos, 2))
    most = min(k ** m, n * len(corpus.test))
    why = (f"the {most} distinct IDs the inductive pool's {len(corpus.test)} test videos can have (N_v={n}, K={k}, "
           f"M={m})")
    out["eval.beam_width"] = (most, why)
    if config.eval.get("capped_row"):
      out["eval.capped_beam_width"] = (most, why)
  return out


def check_budget(config, corpus) -> None:
  """Bad sizes, one clear error each before any training: a codebook with more codes than there are training videos
  (k-means could not initialise it, and most codes would name no video), and a beam wider than the inductive
  pool's trie can hold (N_v IDs per test video, at most K^M distinct)."""
  n_train, n_test = len(corpus.train), len(corpus.test)
  for name, recipe in recipes(config).items():
    k = recipe.num_codes or config.model.num_codes
    if k > n_train:
      key = "baselines.num_codes" if recipe.num_codes else "model.num_codes"
      raise ValueError(f"grdr: {key}={k} (row {name!r}) is larger than the {n_train} training videos: a codebook "
                       f"is initialised by k-means over them; set {key} <= {n_train}")
  n, m, k = config.model.num_views, config.model.num_layers, config.model.num_codes
  if k ** m < n_train + n_test:  # e.g. the paper's K = 128, M = 3 (2.1M IDs) at 10M videos
    warnings.warn(f"grdr: K^M = {k}^{m} = {k ** m:,} possible IDs for {n_train + n_test:,} videos: IDs must be shared "
                  f"by several videos, each beam's ID spends the candidate budget on all of them; for corpora this "
                  f"size give more IDs (K = 256, M = 4 gave 9,988,268 distinct IDs for 10M random videos)", stacklevel=2)
  most = min(k ** m, n * n_test)
  for key in ("eval.beam_width",) + (("eval.capped_beam_width",) if config.eval.capped_row else ()):
    width = config_common.get_key(config, key)
    if width > most:
      raise ValueError(f"grdr: {key}={width} is wider than the trie allows: the inductive pool's {n_test} test "
                       f"videos have at most {most} distinct IDs (N_v={n}, K={k}, M={m}); set {key} <= {most}")


def recipe_model(config, recipe: Recipe, feature_dim: int, vocab_size: int = 0) -> GRDR:
  """The GRDR module a recipe trains."""
  return build_model(config.model, feature_dim, recipe.num_views, recipe.num_layers, recipe.num_codes, vocab_size)


PHASES = ("align", "cotrain", "fit")  # Algorithm 1's phases of a layer (run.py's pre-train, main, fit)


def phases(a1, num_layers: int, cl: bool = True):
  """[(m, phase, epochs)] in Algorithm 1's order (`train.algorithm1`); a phase of 0 epochs is left out, as is the
  first layer's alignment without L_CL (it would have nothing to train: no earlier layer for L_HC)."""
  out = []
  for m in range(1, num_layers + 1):
    epochs = {"align": a1.first_align_epochs if m == 1 else a1.align_epochs, "cotrain": a1.cotrain_epochs,
              "fit": a1.fit_epochs}
    out += [(m, p, epochs[p]) for p in PHASES if epochs[p] and (p != "align" or cl or m > 1)]
  return out


def phase_optimizer(a1, layer: int, phase: str, num_layers: int) -> optax.GradientTransformation:
  """A phase's AdamW (constant `a1.lr`, `a1.weight_decay`, gradients clipped to global norm `a1.grad_clip` over the
  trained params): C^(1..m-1) and the unused later codebooks frozen (Algorithm 1 line 2), C^(m) at
  `a1.codebook_lr_scale` x the rate; in the fit phase the whole tokenizer frozen (the official fit phase freezes
  every codebook and the video tokenizer)."""
  if phase == "fit":
    rules = [("tokenizer/.*", "frozen")]
  else:
    frozen = "|".join(f"codebook_{l}" for l in range(num_layers) if l != layer - 1)
    rules = ([(f"tokenizer/({frozen})", "frozen")] if frozen else []) + [(f"tokenizer/codebook_{layer - 1}", "fast")]
  return _optimizer(rules + [(".*", "train")], {"train": a1.lr, "fast": a1.lr * a1.codebook_lr_scale},
                    a1.weight_decay, a1.grad_clip)


def _optimizer(rules, rates: dict, weight_decay: float, grad_clip: float = 0.0) -> optax.GradientTransformation:
  """AdamW per label of `rules` (`train.param_labels`) at `rates[label]`; label "frozen": no update; gradients of
  the trained params clipped to global norm `grad_clip` (0: none); no weight decay on codebooks or temperatures."""
  no_decay = lambda p: jax.tree_util.tree_map_with_path(  # noqa: E731
      lambda path, _: not any(s in train.param_path(path) for s in ("codebook_", "log_tau")), p)
  labels = lambda p: train.param_labels(p, rules)  # noqa: E731
  frozen = {"frozen": optax.set_to_zero()}
  step = optax.multi_transform({**{k: train.adamw(lr, weight_decay, mask=no_decay) for k, lr in rates.items()},
                                **frozen}, labels)
  if not grad_clip:
    return step
  keep = optax.multi_transform({**{k: optax.identity() for k in rates}, **frozen}, labels)
  return optax.chain(keep, optax.clip_by_global_norm(grad_clip), step)


def _only(pattern: str, lr: float, weight_decay: float, grad_clip: float = 0.0) -> optax.GradientTransformation:
  return _optimizer([(pattern, "train"), (".*", "frozen")], {"train": lr}, weight_decay, grad_clip)


def _epochs(tcfg, epochs: int, **kw) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({**tcfg.to_dict(), "epochs": epochs, **kw})


LOSS_TERMS = ("cl", "ce", "hc", "rec", "rq")  # the order of a phase's weights (run.py's cl, ce, code, cl_dd, rq)


def smoothed_code_cross_entropy(h, codebook, targets, tau, smoothing):
  """L_CE (eq. 11) with label smoothing (the official `cross_entropy(..., label_smoothing=0.1)`): the mean over rows
  of (1 - s) (-log P(c)) + s mean_k (-log P(k)), P = softmax(cos(h, C) / tau)."""
  logp = jax.nn.log_softmax(losses.code_logits(h, codebook, tau), axis=-1)
  nll = -jnp.take_along_axis(logp, jnp.asarray(targets)[..., None], axis=-1)[..., 0]
  return jnp.mean((1.0 - smoothing) * nll - smoothing * jnp.mean(logp, axis=-1))


def phase_loss(out, features, *, layer: int, weights, beta: float, smoothing: float):
  """One phase of Algorithm 1 at layer m = `layer`, as the official trainer weights it: w . (L_CL, L_CE, L_HC, L_Rec,
  L_RQ), `weights` the phase's five (a traced [5] array: data, so a phase's Table 3 rows share one step).

  out: `GRDR.phase_outputs` with the tokenizer quantizing m layers. L_CL (eq. 9): the query's view z against
  h^(m) = sum_{l <= m} h_l over the batch; L_CE (eq. 11, label smoothing `smoothing`): h_m towards the view's code of
  layer m; L_HC (eq. 10): h_l and the view's residual r^(l) towards the frozen codes of each layer l < m; L_RQ (eq. 6,
  commitment `beta`) over every view; L_Rec: 1 - cos(f_v, f~_v). Returns (loss, {term: value})."""
  m, h, books, tau = layer, out["h"], out["codebooks"], out["tau_code"]
  targets = out["hc_codes"]
  hc = jnp.zeros((), jnp.float32)
  for l in range(m - 1):
    hc = hc + losses.code_cross_entropy(h[:, l], books[l], targets[:, l], tau)
    hc = hc + losses.code_cross_entropy(out["view_residuals"][:, l], books[l], targets[:, l], tau)
  terms = {"cl": losses.alignment_loss(out["view_z"], jnp.sum(h[:, :m], axis=1), out["tau_align"]),
           "ce": smoothed_code_cross_entropy(h[:, m - 1], books[m - 1], out["view_codes"][:, m - 1], tau, smoothing),
           "hc": hc, "rec": losses.cosine_reconstruction_loss(features, out["reconstruction"]),
           "rq": losses.rq_loss(out["z_hat"], out["z"], beta)}
  w = jnp.asarray(weights, jnp.float32)
  return sum(w[i] * terms[k] for i, k in enumerate(LOSS_TERMS)), terms



def train_grdr(model: GRDR, data: TrainingSet, tcfg, workdir: Path, seed: int, recipe: Recipe | None = None):
  """Trains `recipe` (default: `tcfg.schedule` with the model's views); each phase logs to
  `<workdir>/<phase>/metrics.jsonl` and resumes from its checkpoints. Returns the params."""
  recipe = recipe or Recipe(tcfg.schedule, model.tokenizer.num_views)
  params = init_params(model, data, seed)
  if recipe.schedule == "tokenizer_first":
    return train_tokenizer_first(model, params, data, tcfg, workdir, seed)
  if recipe.schedule == "two_stage":
    return train_two_stage(model, params, data, tcfg, workdir, seed)
  return train_progressive(model, params, data, tcfg, workdir, seed, recipe.cl, recipe.hc)


def init_params(model: GRDR, data: TrainingSet, seed: int):
  """The model's initial params (host arrays), seeded by `seed`."""
  dummy = (jnp.zeros((1, data.features.shape[1])), jnp.zeros((1,) + data.queries.shape[1:], data.queries.dtype))
  return jax.device_get(jax.jit(lambda key: model.init(key, *dummy)["params"])(jax.random.PRNGKey(seed)))


HC_TARGETS = ("fixed", "snapshot")  # `train.algorithm1.hc_targets` (configs/grdr/common.py says whose reading is which)


class HcTargets:
  """L_HC's targets (eq. 10) per (video, view) for Algorithm 1's phases: int32 [V, N_v, m - 1] in layer m's phases.

  "fixed": layer l's codes are read once, when layer l's last phase ends (`layer_trained`), and every later phase
  gets those (eq. 10: "the learned codes" of the previous layers must not drift, so they are the targets the loss
  pulls back to; the official run reads them from the previous loop's `.code` file). "snapshot": every phase gets
  the earlier layers' codes as they are at its start. `codes_now(n)` -> the tokenizer's current codes of the first n
  layers, [V, N_v, n]."""

  def __init__(self, mode: str):
    if mode not in HC_TARGETS:
      raise ValueError(f"GRDR hc_targets must be one of {HC_TARGETS}, got {mode!r}")
    self.mode = mode
    self.fixed: np.ndarray | None = None  # [V, N_v, layers trained so far] ("fixed")

  def for_phase(self, layer: int, codes_now) -> np.ndarray:
    """The targets of a phase of layer `layer`: the first `layer - 1` layers' codes."""
    if self.mode == "snapshot" or layer == 1:
      return codes_now(layer - 1)
    if self.fixed is None or self.fixed.shape[-1] < layer - 1:
      raise ValueError(f"HcTargets: layer {layer}'s phase before layer {layer - 1}'s phases ended")
    return self.fixed[..., :layer - 1]

  def layer_trained(self, layer: int, codes_now) -> None:
    """Layer `layer`'s last phase ended: its codes as they are now join the fixed targets."""
    if self.mode == "fixed":
      new = codes_now(layer)[..., layer - 1:layer]
      self.fixed = new if self.fixed is None else np.concatenate([self.fixed[..., :layer - 1], new], axis=-1)


def train_progressive(model: GRDR, params, data: TrainingSet, tcfg, workdir: Path, seed: int, cl: bool = True,
                      hc: bool = True):
  """Algorithm 1 as its authors run it (`tcfg.algorithm1`; configs/grdr/common.py names each setting's source): for
  m = 1..M an alignment phase, the k-means init of C^(m) on the residuals r^(m), a co-training phase and a fit phase,
  each in `workdir/layer<m>_<phase>`, each weighting (L_CL, L_CE, L_HC, L_Rec, L_RQ) by its `phase_weights` (L_CL /
  L_HC dropped when `cl` / `hc` is False: Table 3). Each query's view is `view_of_query`'s (`view_assignment`); L_HC's
  targets and the decoder's teacher-forced prefix are that view's codes of layers 1..m-1 (`HcTargets`)."""
  a1 = tcfg.algorithm1
  m_layers = model.tokenizer.num_layers
  switches = np.asarray([float(cl), 1.0, float(hc), 1.0, 1.0], np.float32)
  targets = HcTargets(a1.hc_targets)
  codes_now = lambda n: video_codes(model, params, data.features, n)  # noqa: E731  (reads `params` when called)
  schedule = phases(a1, m_layers, cl)
  for i, (layer, phase, epochs) in enumerate(schedule):
    if phase == "cotrain":
      params = init_codebook(model, params, data.features, layer, seed + 1000 * layer, a1.kmeans_iters,
                             a1.kmeans_metric, a1.kmeans_prefix_centred)
    view = view_of_query(model, params, data, a1.view_assignment)
    frozen = targets.for_phase(layer, codes_now)[data.video, view]  # [Nq, m - 1]
    weights = np.asarray(a1.phase_weights[phase], np.float32) * switches

    def loss_fn(p, batch, rng, layer=layer):
      out = model.apply({"params": p}, batch["feature"], batch["query"], batch["view"], layer, layer,
                        deterministic=False, frozen_codes=batch["frozen"], rngs={"dropout": rng},
                        method=GRDR.phase_outputs)
      return phase_loss(out, batch["feature"], layer=layer, weights=batch["loss_weights"][0], beta=a1.beta,
                        smoothing=a1.label_smoothing)

    def batch_fn(idx, view=view, frozen=frozen, weights=weights):  # feature and query as rows, gathered on the device
      return {"feature": data.video[idx].astype(np.int32), "query": np.asarray(idx, np.int32), "view": view[idx],
              "frozen": frozen[idx], "loss_weights": np.tile(weights, (len(idx), 1))}

    start = params
    name = f"layer{layer}_{phase}"
    state = train.fit_epochs(
        name=f"grdr {name}", init_fn=lambda _: start, loss_fn=loss_fn, num_examples=len(data.queries),
        batch_fn=batch_fn, tcfg=_epochs(tcfg, epochs), seed=seed + i, workdir=workdir / name,
        optimizer=phase_optimizer(a1, layer, phase, m_layers), gather=_gather(data, feature="features"))
    params = jax.device_get(state.params)
    if i + 1 == len(schedule) or schedule[i + 1][0] != layer:  # C^(layer) is frozen from here on (line 2)
      targets.layer_trained(layer, codes_now)
  return params


def _gather(data: TrainingSet, feature: str | None = None, query: str | None = "queries") -> pipeline.Gather:
  """The batch's `feature` (rows of the video features) and `query` (rows of the query vectors) fields, gathered on
  the device (`pipeline.Gather`); None leaves a field out."""
  fields = {k: v for k, v in (("feature", feature), ("query", query)) if v is not None}
  tables = {"features": data.features, "queries": data.queries}
  return pipeline.Gather({n: tables[n] for n in fields.values()}, fields)


def train_retriever(model: GRDR, params, data: TrainingSet, codes: np.ndarray, tcfg, workdir: Path, seed: int,
                    trained: str = r"(?!tokenizer/).*", grad_clip: float = 0.0):
  """The retriever alone on fixed semantic IDs: teacher-forced L_CE summed over the layers (`losses.fixed_id_loss`)
  towards `codes` int [Nq, M] (each training query's target ID); `retriever_epochs` at `retriever_lr`, the params
  matching `trained` updated (default: all but the tokenizer)."""
  m_layers = codes.shape[1]

  def loss_fn(p, batch, rng):
    h = model.apply({"params": p}, batch["query"], batch["codes"][:, :m_layers - 1], False, rngs={"dropout": rng},
                    method=GRDR.retriever_h)
    books = model.apply({"params": p}, method=lambda m: m.tok.codebooks)
    tau = model.apply({"params": p}, method=lambda m: m.temperatures()[0])
    return losses.fixed_id_loss(h, books, batch["codes"], tau)

  start = params
  state = train.fit_epochs(
      name="grdr retriever", init_fn=lambda _: start, loss_fn=loss_fn, num_examples=len(data.queries),
      batch_fn=lambda idx: {"query": np.asarray(idx, np.int32), "codes": codes[idx]},
      tcfg=_epochs(tcfg, tcfg.retriever_epochs), seed=seed, workdir=workdir,
      optimizer=_only(trained, tcfg.retriever_lr, tcfg.weight_decay, grad_clip), gather=_gather(data))
  return jax.device_get(state.params)


def _decoded_views(m: GRDR, f):
  """The tokenizer alone: its outputs (every layer) and each view's decoded feature psi_i(z_hat_i) [B, N_v, d_v]."""
  out = m.tok(f)
  straight_through = out["z"] + jax.lax.stop_gradient(out["z_hat"] - out["z"])
  return {**out, "decoded": m.tok.decoder(straight_through)}


def two_stage_epochs(a1, num_layers: int) -> tuple[int, int]:
  """(tokenizer epochs, retriever epochs) of Table 3's two-stage row: the epochs Algorithm 1 trains the tokenizer in
  (every alignment and co-training phase) and those it trains the retriever in (every phase)."""
  epochs = [(p, e) for _, p, e in phases(a1, num_layers)]
  return sum(e for p, e in epochs if p != "fit"), sum(e for _, e in epochs)


TWO_STAGE_TAU = 0.07  # the two-stage tokenizer's contrastive temperature (the official VideoRQVAE_V2's default)


def train_two_stage(model: GRDR, params, data: TrainingSet, tcfg, workdir: Path, seed: int):
  """Table 3's "w/o unified co-training": the paper's two-stage pipeline, each stage a call of the one loop.

  1. `workdir/tokenizer`: C^(1..M) by k-means on the initial views' residuals (layer by layer, Algorithm 1's
     k-means), then the tokenizer alone (views, codebooks, decoders; the retriever's params untouched): Algorithm 1's
     co-training weights of L_RQ and L_Rec, and for L_CL a query-guided contrastive loss between each training
     query's embedding and its view's decoded feature psi_i(z_hat_i) (the video feature's space, the text
     embeddings' too) over the batch (temperature 0.07, as the official stand-alone VideoRQVAE baseline trains it);
  2. `workdir/retriever`: the tokenizer frozen, the retriever alone on its IDs (`train_retriever`) at Algorithm 1's
     rate. The epochs: `two_stage_epochs`."""
  a1 = tcfg.algorithm1
  m_layers = model.tokenizer.num_layers
  if data.query_vectors.shape[1] != data.features.shape[1]:
    raise ValueError(f"GRDR two-stage tokenizer: the query embeddings ({data.query_vectors.shape[1]}-d) must share the "
                     f"video features' space ({data.features.shape[1]}-d): its contrastive loss compares them")
  for layer in range(1, m_layers + 1):
    params = init_codebook(model, params, data.features, layer, seed + 1000 * layer, a1.kmeans_iters,
                           a1.kmeans_metric, a1.kmeans_prefix_centred)
  view = view_of_query(model, params, data, a1.view_assignment)
  w_cl, _, _, w_rec, w_rq = a1.phase_weights["cotrain"]
  queries = data.query_vectors / np.maximum(np.linalg.norm(data.query_vectors, axis=1, keepdims=True), 1e-12)

  def loss_fn(p, batch, rng):
    del rng
    out = model.apply({"params": p}, batch["feature"], method=_decoded_views)
    pick = jnp.take_along_axis(out["decoded"], batch["view"][:, None, None], axis=1)[:, 0]
    logits = batch["text"] @ ops.l2_normalize(pick).T / TWO_STAGE_TAU
    labels = jnp.arange(logits.shape[0])
    cl = 0.5 * jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels) +
                        optax.softmax_cross_entropy_with_integer_labels(logits.T, labels))
    rq = losses.rq_loss(out["z_hat"], out["z"], a1.beta)
    rec = losses.cosine_reconstruction_loss(batch["feature"], jnp.mean(out["decoded"], axis=-2))
    return w_cl * cl + w_rq * rq + w_rec * rec, {"cl": cl, "rq": rq, "rec": rec}

  tokenizer_epochs, retriever_epochs = two_stage_epochs(a1, m_layers)
  start = params
  state = train.fit_epochs(
      name="grdr tokenizer", init_fn=lambda _: start, loss_fn=loss_fn, num_examples=len(data.queries),
      batch_fn=lambda idx: {"feature": data.video[idx].astype(np.int32), "view": view[idx], "text": queries[idx]},
      tcfg=_epochs(tcfg, tokenizer_epochs), seed=seed, workdir=workdir / "tokenizer",
      optimizer=_only("tokenizer/.*", a1.lr, a1.weight_decay, a1.grad_clip),
      gather=_gather(data, feature="features", query=None))
  params = jax.device_get(state.params)
  codes = video_codes(model, params, data.features)[data.video, view]
  stage2 = _epochs(tcfg, 0, retriever_epochs=retriever_epochs, retriever_lr=a1.lr, weight_decay=a1.weight_decay)
  return train_retriever(model, params, data, codes, stage2, workdir / "retriever", seed + 1, grad_clip=a1.grad_clip)



def id_coder(model: GRDR, params, recipe: Recipe, train_features: np.ndarray, tcfg, seed: int):
  """features [V, d_v] -> semantic IDs int32 [V, N_v, M] of a trained recipe: the tokenizer's."""
  return lambda features: video_codes(model, params, features)


def last_phase(recipe: Recipe, tcfg, num_layers: int) -> str:
  """The phase directory a finished `train_grdr` of `recipe` ends in."""
  if recipe.schedule == "progressive":
    return "layer{}_{}".format(*phases(tcfg.algorithm1, num_layers, recipe.cl)[-1][:2])
  return "retriever"


def load_trained(tcfg, num_layers: int, workdir: Path, recipe: Recipe | None = None):
  """The params a finished `train_grdr(..., tcfg, workdir, ...)` ended with: its last phase's checkpoint."""
  recipe = recipe or Recipe(tcfg.schedule, 1)
  return train.load_params(Path(workdir) / last_phase(recipe, tcfg, num_layers))


def intent_centres(data: TrainingSet, vectors: np.ndarray, n_views: int) -> np.ndarray:
  """Each training video's intent centres of per-query `vectors` [Nq, d] (the raw queries, or their decoder
  features): the direction of each intent's sum, [V, N_v, d] (unit, or 0 for an intent without queries)."""
  centres = np.zeros((len(data.features), n_views, vectors.shape[1]), np.float32)
  np.add.at(centres, (data.video, data.intent), vectors)
  return np.asarray(ops.l2_normalize(centres), np.float32)


def train_tokenizer_first(model: GRDR, params, data: TrainingSet, tcfg, workdir: Path, seed: int):
  """The two-stage schedule (`train.schedule = "tokenizer_first"`; configs/grdr/common.py says why): views, then IDs,
  then the retriever, each a call of the one loop.

  1. views: the view MLPs alone, `view_set_alignment_loss` of each video's views against its query-cluster
     centres in the query space (needs latent_dim == query_dim); `view_epochs` over the videos.
  2. codebooks: C^(1..M) by k-means on the residuals of every training view, layer by layer (Algorithm 1
     line 10), then frozen with the views: every video's semantic IDs are fixed from here on.
  3. retriever (`train_retriever`): query encoder and decoder, teacher-forced L_CE (eq. 11) summed over the M
     layers towards the codes of the view matched (`match_views`) with the query's intent.
  """
  n_views, m_layers = model.tokenizer.num_views, model.tokenizer.num_layers
  centres = intent_centres(data, data.query_vectors, n_views)
  valid = data.intent_valid.astype(np.float32)
  encode = lambda p, f: model.apply({"params": p}, f, method=_views)  # noqa: E731

  def view_loss(p, batch, rng):
    loss = losses.view_set_alignment_loss(encode(p, batch["feature"]), batch["centres"], batch["valid"],
                                          tcfg.use_weight)
    return loss, {"set_alignment": loss}

  start = params
  state = train.fit_epochs(
      name="grdr views", init_fn=lambda _: start, loss_fn=view_loss, num_examples=len(data.features),
      batch_fn=lambda idx: {"feature": np.asarray(idx, np.int32), "centres": centres[idx], "valid": valid[idx]},
      gather=_gather(data, feature="features", query=None),
      tcfg=_epochs(tcfg, tcfg.view_epochs, batch_size=tcfg.view_batch_size),
      seed=seed, workdir=workdir / "views", optimizer=_only("tokenizer/encoder/.*", tcfg.view_lr, tcfg.weight_decay),
      batch_key="train.view_batch_size")
  params = jax.device_get(state.params)
  for layer in range(1, m_layers + 1):
    params = init_codebook(model, params, data.features, layer, seed + 1000 * layer, tcfg.kmeans_iters)
  view = matched_view(_apply_batched(model, _views, params, data.features), centres, data)
  codes = video_codes(model, params, data.features)[data.video, view]
  return train_retriever(model, params, data, codes, tcfg, workdir / "retriever", seed + 1)


# ----------------------------------------------------------------------------------------------
# Retrieval.


def video_codes(model: GRDR, params, features: np.ndarray, num_layers: int | None = None) -> np.ndarray:
  """int32 [V, N_v, m]: the tokenizer's semantic IDs of `features` (the first m layers; default all)."""
  m = model.tokenizer.num_layers if num_layers is None else num_layers
  if m == 0:
    return np.zeros((len(features), model.tokenizer.num_views, 0), np.int32)
  return np.asarray(_apply_batched(model, GRDR.video_codes, params, features, m))


def make_recall(model: GRDR, params, features: np.ndarray, ids, ecfg,
                codes: np.ndarray | None = None) -> tuple[GenerativeRecall, np.ndarray]:
  """The trie of the pool's semantic IDs (default: the tokenizer's; `codes` [V, N_v, M] for IDs from elsewhere, as
  T2VIndexer's) and its generative recall (dense vectors = the features; `ecfg.beam_width` beams, every video they
  bring when `ecfg.candidates` is 0, else at most that many), and the pool's codes [V, N_v, M]."""
  codes = video_codes(model, params, features) if codes is None else codes
  trie = SemanticIdTrie(ids, codes, model.tokenizer.num_codes)
  recall = GenerativeRecall(trie, _Bound(model, GRDR.encode_query), _Bound(model, GRDR.code_logp), params,
                            width=ecfg.beam_width, limit=ecfg.candidates or None, vectors=features,
                            query_key=query_key(model),
                            state_copies=t5_state_copies(model.retriever.t5.decoder_layers))
  return recall, codes


def query_key(model: GRDR) -> str:
  """The field of a query dict the generative recall reads: "tokens" (query text, query_encoder "t5") or "text"
  (the query's embedding, which the dense rerank reads either way)."""
  return "tokens" if model.retriever.query_encoder == "t5" else "text"



@dataclasses.dataclass(frozen=True)
class _Bound:
  """`fn(params, *args) = model.apply({"params": params}, *args, method=method)`, hashable by value (beam search takes
  `logp_fn` as a static argument; equal models reuse one compilation)."""
  model: GRDR
  method: Any

  def __call__(self, params, *args):
    return self.model.apply({"params": params}, *args, method=self.method)


# ----------------------------------------------------------------------------------------------
# The data: release-format caption files and a feature store (a user's, or a world's: `common.world_data`).


@dataclasses.dataclass
class Corpus:
  """GRDR's corpus, read by `read_corpus`: `video_ids` [V] (the training and test videos, sorted), `features`
  [V, d_v] (the store's clip embeddings), `train` / `test` (their rows, ascending), `test_queries` [Q, d_q] (the store's
  text embeddings of the test captions) with `test_query_video` (rows), and the training captions as pseudo queries
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
  path: dict  # results.json's path keys (`vidjax.methods.provenance.real_path`)
  synthetic: bool
  world: str = ""  # the name of the world that wrote the store (its manifest's `world_name`), else ""
  # query_encoder "t5": the queries' text as token ids (int [N, L], 0 = padding) and the vocabulary size
  train_tokens: np.ndarray | None = None
  test_tokens: np.ndarray | None = None
  query_vocab: int = 0
  # the dense rows and the X-Pool rerank (`needs_frames`): every video's per-frame features [V, T, D_v]
  # (`data.frames_kind`, `dense.model.num_frames` of them)
  frames: np.ndarray | None = None
  # with `data.rerank_text_kind`: the test queries as the X-Pool rerank reads them (its own text tower's embeddings)
  rerank_queries: np.ndarray | None = None

  def __call__(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # PseudoQueries
    keep, position = self._keep(rows)
    return self.train_queries[keep], np.asarray([position[int(v)] for v in self.train_query_video[keep]], np.int64)

  def _keep(self, rows):
    position = {int(v): i for i, v in enumerate(rows)}
    return np.asarray([int(v) in position for v in self.train_query_video]), position

  def train_tokens_of(self, rows: np.ndarray) -> np.ndarray:
    """The token ids of the queries `self(rows)` returns, in the same order."""
    return self.train_tokens[self._keep(rows)[0]]

  @property
  def source(self) -> str:
    """What a synthetic store holds ("polysemous world", "rendered videos"; "" for real data): results' labels."""
    return f"{self.world} world" if self.world else "rendered videos" if self.synthetic else ""


def read_corpus(config, workdir: Path) -> Corpus:
  """The test split (`data.annotations`, its protocol) and the training split (`data.train_annotations`, one query
  per caption) on the videos the store (`data.features`) has (`data.skip_missing`); query vectors are the store's
  text embeddings (the frozen query encoder: `model.query_dim` must be their width)."""
  d = config.data
  for key in ("data.annotations", "data.train_annotations"):
    if not config_common.get_key(config, key):
      config_common.bad_value(key, "", "the test / training split's annotation file with data.features")
  store = FeatureStore(d.features)
  frames = needs_frames(config)
  if frames and d.frames_kind not in store.kinds():
    raise ValueError(f"grdr: the store {d.features} has no per-frame features of kind data.frames_kind="
                     f"{d.frames_kind!r} (it has {sorted(store.kinds())}), which the trained dense rows "
                     f"eval.dense_rows={tuple(config.eval.dense_rows)} and the reranker eval.reranker="
                     f"{config.eval.reranker!r} read: set data.frames_kind to the store's per-frame kind, prepare the "
                     "store with them (configs/prepare.py writes frame_clip with an LvT backbone), or run the backbone's "
                     "cosine alone (--config.eval.reranker=dense_backbone --config.eval.dense_rows=())")
  provenance.check_store(workdir, store, (d.clip_kind, d.text_kind) + ((d.frames_kind,) if frames else ()))
  test = build_benchmark(read_dataset(config.dataset, d.annotations, d.video_list), protocol=d.protocol,
                         split=d.split or None)
  train_split = None if d.train_video_list else d.train_split or None
  train_set = build_benchmark(read_dataset(config.dataset, d.train_annotations, d.train_video_list), protocol="captions",
                              split=train_split)
  kinds = [d.clip_kind] + ([d.frames_kind] if frames else [])
  kept_test, skipped = provenance.present_videos(config, store, kinds, test.corpus, "test videos")
  kept_train, skipped_train = provenance.present_videos(config, store, kinds, train_set.corpus, "training videos")
  test, train_set = test.restrict(kept_test), train_set.restrict(set(kept_train) - set(kept_test))
  # the corpus in id order, training and test videos interleaved as their ids fall: videos that share a semantic ID
  # come out of the trie in this order (`SemanticIdTrie`), so neither split goes first at the candidate budget's cut
  ids = sorted(set(train_set.corpus) | set(test.corpus))
  row = {v: i for i, v in enumerate(ids)}
  width = store.item_shape(d.text_kind)[-1]
  if width != config.model.query_dim:
    raise ValueError(f"model.query_dim={config.model.query_dim} but the store's {d.text_kind!r} embeddings (the frozen "
                     f"query encoder) are {width}-d: set --config.model.query_dim={width}")
  tokens = {}
  if config.init_checkpoint:  # a released checkpoint: the queries tokenized as its official collator did
    from vidjax.methods import grdr_release  # pylint: disable=g-import-not-at-top
    tokenizer, vocab = query_tokenizer(config, store), grdr_release.vocab_size(config.init_checkpoint)
    tokens = {f"{split}_tokens": grdr_release.release_tokens(tokenizer, [q.text for q in queries],
                                                              config.model.query_len, vocab)
              for split, queries in (("train", train_set.queries), ("test", test.queries))}
    tokens["query_vocab"] = vocab
  elif config.model.query_encoder == "t5":
    tokenizer = query_tokenizer(config, store)
    tokens = dict(train_tokens=query_tokens(tokenizer, train_set.queries, config.model.query_len, "training"),
                  test_tokens=query_tokens(tokenizer, test.queries, config.model.query_len, "test"),
                  query_vocab=tokenizer.vocab_size + 1)
  if d.rerank_text_kind:
    tokens["rerank_queries"] = embeddings(store, d.rerank_text_kind, test.query_ids, "test queries (rerank)")
  return Corpus(
      np.asarray(ids), embeddings(store, d.clip_kind, ids, "corpus videos"),
      np.asarray([row[v] for v in train_set.corpus], np.int64), np.asarray([row[v] for v in test.corpus], np.int64),
      embeddings(store, d.text_kind, test.query_ids, "test queries"),
      np.asarray([row[q.video_id] for q in test.queries], np.int64),
      embeddings(store, d.text_kind, train_set.query_ids, "training queries"),
      np.asarray([row[q.video_id] for q in train_set.queries], np.int64),
      provenance.real_path(workdir, store, skipped + skipped_train), bool(store.metadata.get("synthetic", False)),
      str(store.metadata.get("world_name", "")), **tokens,
      frames=dense_method.frame_features(store, d.frames_kind, ids, config.dense.model.num_frames) if frames else None)


def needs_frames(config) -> bool:
  """Whether a run reads the store's per-frame features: a trained dense row (`eval.dense_rows`) or the X-Pool
  reranker (`eval.reranker`)."""
  return bool(config.eval.get("dense_rows")) or config.eval.get("reranker", "dense_backbone") == "xpool"


def query_tokenizer(config, store: FeatureStore):
  """The SentencePiece model of the T5 query encoder: `data.tokenizer`, else the one the store's text tower used."""
  from vidjax.extract import text_tower  # pylint: disable=g-import-not-at-top
  from vidjax.tokenizers.sentencepiece import SentencePieceTokenizer  # pylint: disable=g-import-not-at-top
  path = config.data.tokenizer or (text_tower(store.metadata) or {}).get("spm_path") or ""
  if not path:
    raise ValueError("grdr: model.query_encoder='t5' reads the query text and needs a SentencePiece model: set "
                     "data.tokenizer (the store has no text tower whose model could stand in), or "
                     "model.query_encoder='minilm' for the store's text embeddings")
  if not Path(path).is_file():
    raise FileNotFoundError(f"grdr: the query tokenizer {path} (data.tokenizer, or the store's text tower) does not "
                            "exist")
  return SentencePieceTokenizer(path)


def query_tokens(tokenizer, queries, length: int, split: str) -> np.ndarray:
  """int32 [N, length]: each query's SentencePiece ids + 1, 0 = padding (T5's pad id); an empty query is an error."""
  ids, paddings = tokenizer.encode([q.text for q in queries], max_length=length)
  empty = np.flatnonzero(paddings.min(axis=1) > 0)
  if len(empty):
    q = queries[int(empty[0])]
    raise ValueError(f"grdr: {len(empty)} {split} queries have no text to encode, e.g. {q.caption_id!r} of video "
                     f"{q.video_id!r}")
  return np.where(paddings > 0, 0, ids + 1).astype(np.int32)


# ----------------------------------------------------------------------------------------------
# A run's rows: training sets, trained recipes, and their evaluation on a pool (`vidjax.experiments.grdr`).

SETTINGS = ("inductive", "full_corpus")  # the test videos / every video as the pool, the test queries either way


def training_set(config, corpus: Corpus, n_views: int, queries: PseudoQueries | None = None) -> TrainingSet:
  """The training videos and their pseudo queries (default: the corpus's training captions), clustered into
  `n_views` intents."""
  q, video = checked_queries(queries or corpus, corpus.train, config.model.query_dim)
  intent, valid = query_intents(q, video, len(corpus.train), n_views, config.seed)
  inputs = corpus.train_tokens_of(corpus.train) if config.model.query_encoder == "t5" else q
  return TrainingSet(corpus.features[corpus.train], inputs, video, intent, valid, query_vectors=q)


def trained_row(config, workdir: Path, corpus: Corpus, recipe: Recipe, name: str, train: bool = True,
                queries: PseudoQueries | None = None, sets: dict | None = None, precision=contextlib.nullcontext):
  """(model, params, id coder) of `recipe` trained on the training videos' pseudo queries (`queries`, default the
  corpus's own), in `workdir/models/name` (restored when trained there before; `train=False` only restores).
  `sets` caches the training sets by N_v across the rows of one run; `precision()`: the training's context."""
  model = recipe_model(config, recipe, corpus.features.shape[1], corpus.query_vocab)
  sets = {} if sets is None else sets
  if recipe.num_views not in sets:
    sets[recipe.num_views] = training_set(config, corpus, recipe.num_views, queries)
  data = sets[recipe.num_views]
  if train:
    with precision():
      params = train_grdr(model, data, config.train, workdir / "models" / name, config.seed, recipe)
  else:
    params = load_trained(config.train, model.tokenizer.num_layers, workdir / "models" / name, recipe)
  return model, params, id_coder(model, params, recipe, data.features, config.train, config.seed)


def recall_at(ids: np.ndarray, target: np.ndarray, ks=(1, 5, 10)) -> dict[str, float]:
  """`metrics.recall_from_ranked` (percent), keys t2v_r<k>. Fewer ranked ids than a k (a small pool, or a budget
  `eval.candidates` under 10) is no error: R@k counts a query whose video is among the ids it has (the rest miss)."""
  ids = np.asarray(ids)
  if ids.ndim == 2 and ids.shape[1] < max(ks):
    ids = np.concatenate([ids, np.full((len(ids), max(ks) - ids.shape[1]), "", ids.dtype)], axis=1)
  return {f"t2v_{k}": v for k, v in metrics.recall_from_ranked(ids, target, ks).items()}


def test_inputs(corpus: Corpus, rows=None) -> dict:
  """The test queries as the recall and the rerank read them: the embeddings (`text`) and, on a corpus with query
  tokens, their ids (`tokens`: query_encoder "t5"); `rows` selects queries."""
  sel = slice(None) if rows is None else rows
  out = {"text": corpus.test_queries[sel]}
  if corpus.test_tokens is not None:
    out["tokens"] = corpus.test_tokens[sel]
  return out


# ----------------------------------------------------------------------------------------------
# The rerank stage (§3.4, §4.2-4.3: X-Pool reranks every GR row's candidates) and Tables 1-2's dense rows.

RERANKERS = ("xpool", "dense_backbone")  # `eval.reranker` (configs/grdr/common.py)
# Tables 1-2's trained dense rows (`eval.dense_rows`) -> `vidjax.methods.dense`'s row (its pooling and schedule):
# "clip4clip" is CLIP4Clip seqTransf, whose numbers GRDR's Tables 1-2 report; meanP is a row of its own
DENSE_ROWS = {"clip4clip": "clip4clip_seqtransf", "clip4clip_meanp": "clip4clip_meanp", "xpool": "xpool"}
RERANK_BYTES = 64 << 20  # a rerank pass's candidate frames [q, K, T, D_v] stay under this (its query batch q)


@dataclasses.dataclass(frozen=True)
class Reranker:
  """A GR row's rerank stage: results' `reranker` name, a Scorer, its batch (`TwoStage`'s `batch_fn`; None: the
  recall's stored vectors, the backbone's clip embeddings), and the bytes of one (query, candidate) pair of that
  batch (0: small; else the query batch is cut so a pass holds at most `RERANK_BYTES`)."""
  name: str
  scorer: Any
  batch_fn: Any = None
  pair_bytes: int = 0

  def query_batch(self, k: int) -> int:
    """Queries per rerank pass of `k` candidates each (a power of two, at most `DEFAULT_QUERY_BATCH`)."""
    if not self.pair_bytes:
      return DEFAULT_QUERY_BATCH
    most = max(1, RERANK_BYTES // (self.pair_bytes * max(k, 1)))
    return int(min(DEFAULT_QUERY_BATCH, 1 << (most.bit_length() - 1)))


BACKBONE = Reranker("dense_backbone", evaluate.CosineScorer())  # the frozen backbone's cosine


def frames_reranker(name: str, scorer, corpus: "Corpus") -> Reranker:
  """A reranker over each candidate's frames (a `DenseScorer`: X-Pool): the batch gathers `corpus.frames` [V, T, D_v]
  by row (`video_ids` are sorted); a padding id "" takes row 0, and its -inf prior keeps it -inf (`DenseScorer`)."""
  ids, frames = corpus.video_ids, corpus.frames

  def batch_fn(queries, candidate_ids, previous):
    rows = np.minimum(np.searchsorted(ids, np.asarray(candidate_ids)), len(ids) - 1)
    return {"text": queries["text"], "candidates": frames[rows], "prior": previous}

  return Reranker(name, scorer, batch_fn, 4 * int(np.prod(frames.shape[1:])))


class _Recalled:
  """A finished recall served again by query row (`queries["row"]`): each reranker reorders the same candidates."""

  def __init__(self, recall: GenerativeRecall, ids: np.ndarray, scores: np.ndarray):
    self.recall, self.ids, self.scores = recall, ids, scores

  def retrieve(self, queries, k: int):
    rows = np.asarray(queries["row"])
    return self.ids[rows, :k], self.scores[rows, :k]

  def vectors(self, ids):
    return self.recall.vectors(ids)


def rerank_found(recall, found, scores, reranker: Reranker, inputs: dict, k: int, query_batch: int | None = None):
  """`reranker` over the recalled candidates `found` [Q, K] of `inputs` (rows 0..Q-1): the TwoStage result. K is
  padded to the next power of two (id "", score -inf: last whatever the reranker says), so a jitted reranker
  compiles once per such width across a run's rows, not once per row's budget."""
  width = 1 << max(int(found.shape[1]) - 1, 1).bit_length()
  pad = width - found.shape[1]
  found = np.pad(found, ((0, 0), (0, pad)), constant_values="")
  scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
  stack = TwoStage(_Recalled(recall, found, scores), k_recall=width, reranker=reranker.scorer,
                   batch_fn=reranker.batch_fn, query_batch=query_batch or reranker.query_batch(width))
  return stack.search({**inputs, "row": np.arange(len(found))}, k=k)


def evaluate_setting(corpus: Corpus, recall: GenerativeRecall, ecfg,
                     rerankers: tuple[Reranker, ...] = (BACKBONE,)) -> tuple[dict, np.ndarray]:
  """Generative recall on the corpus's test queries over the recall's pool, every candidate reranked by
  `rerankers[0]` (results' `reranker`) and by each other one (a second reading, `readings.<name>`: R@1/5/10 and
  latency). Returns the metrics (R@1/5/10, candidate recall, mean candidates, index bytes per video, beam width and
  candidate cap (0: none), latency_ms per stage at batch 1 with "total" = T_recall + T_rerank (§4.1)) and the
  recalled ids [Q, candidates] (beam order, "" past a query's candidates)."""
  target = corpus.video_ids[corpus.test_query_video]
  budget = recall.max_candidates  # every candidate the recall can bring (its cap, or what W beams can name)
  inputs, k = test_inputs(corpus), min(10, budget)
  first = TwoStage(recall, k_recall=budget).search(inputs, k=budget)  # the recall alone: its candidates, once
  found, scores = first.recall_ids, first.recall_scores
  # latency at batch 1 (§4.1): the recall stage, then each reranker over the same queries' candidates
  n = min(ecfg.latency_queries, len(target))
  alone = TwoStage(recall, k_recall=budget, query_batch=1)
  alone.search(test_inputs(corpus, slice(0, 1)), k=1)  # compile
  recall.reset_latency()
  t_recall = alone.search(test_inputs(corpus, slice(0, n)), k=1).latency_ms["recall"]
  stages = recall.mean_latency_ms()
  readings = {}
  for reranker in rerankers:
    result = rerank_found(recall, found, scores, reranker, inputs, k)
    rerank_found(recall, found[:1], scores[:1], reranker, test_inputs(corpus, slice(0, 1)), 1, 1)  # compile
    t = rerank_found(recall, found[:n], scores[:n], reranker, test_inputs(corpus, slice(0, n)), 1, 1).latency_ms
    readings[reranker.name] = {**recall_at(result.ids, target), "latency_ms": {
        **stages, "recall": t_recall, "rerank": t["rerank"], "total": t_recall + t["rerank"]}}
  main = readings.pop(rerankers[0].name)
  out = {**{k_: v for k_, v in main.items() if k_ != "latency_ms"},
         "candidate_recall": 100.0 * float(np.mean((found == target[:, None]).any(1))),
         "num_candidates": float(np.mean(np.sum(found != "", axis=1))),
         "index_bytes_per_video": recall.trie.nbytes / len(recall.trie),
         "beam_width": int(recall.width), "candidate_cap": int(recall.limit or 0),
         "latency_ms": main["latency_ms"], "reranker": rerankers[0].name, "readings": readings}
  return out, found


def _dense_metrics(ranks: np.ndarray, cut: int, pool: int) -> dict:
  """R@1/5/10/100 and candidate recall (R@`cut`) in percent from 1-based ranks; a pool of fewer than 100 videos
  is all of them at R@100."""
  at = lambda k: 100.0 * float(np.mean(ranks <= k))  # noqa: E731
  return {"t2v_r1": at(1), "t2v_r5": at(5), "t2v_r10": at(10), "t2v_r100": at(100), "candidate_recall": at(cut),
          "num_candidates": float(min(cut, pool))}


def dense_setting(corpus: Corpus, pool: np.ndarray, ecfg, index_config, encoder=None) -> dict:
  """Exact dense retrieval over the pool (a dense row of Tables 1-2 alone): the store's text and clip embeddings
  by cosine (`dense_backbone`, the frozen backbone's), or with `encoder` (a meanP / seqTransf `DenseScorer`:
  CLIP4Clip) its query embeddings against its pooled video embeddings of `corpus.frames`, through one
  `DenseIndex`. Candidate recall is R@`eval.candidates` when the GR rows are capped, else R@`eval.dense_candidates`;
  latency per query at batch 1 (query encoding included) for its top 10."""
  encode = (lambda q: q) if encoder is None else encoder.text_embeddings  # noqa: E731
  videos = corpus.features[pool] if encoder is None else encoder.video_embeddings(corpus.frames[pool])
  index = DenseIndex.from_config(corpus.video_ids[pool], videos, index_config)
  target = corpus.video_ids[corpus.test_query_video]
  cut = ecfg.candidates or ecfg.dense_candidates
  budget = min(max(100, cut), len(pool))
  ids = np.asarray(index.retrieve(encode(corpus.test_queries), budget)[0])
  hit = ids == target[:, None]
  ranks = np.where(hit.any(1), hit.argmax(1) + 1, len(pool) + 1)  # past the budget: a miss at every cut used
  out = {**_dense_metrics(ranks, cut, len(pool)), "index_bytes_per_video": 4.0 * videos.shape[1],
         "reranker": None}
  n, k = min(ecfg.latency_queries, len(target)), min(10, len(pool))  # a pool of fewer than 10 videos: all of them
  index.retrieve(encode(corpus.test_queries[:1]), k)
  t = time.perf_counter()
  for i in range(n):
    index.retrieve(encode(corpus.test_queries[i:i + 1]), k)
  out["latency_ms"] = {"total": 1e3 * (time.perf_counter() - t) / n}
  return out


def pair_setting(corpus: Corpus, pool: np.ndarray, ecfg, scorer, query_chunk: int = 64,
                 gallery_chunk: int = 256) -> dict:
  """A dense row whose video embedding depends on the text (X-Pool) alone over the pool: every (query, video) pair
  scored in blocks of `query_chunk` x `gallery_chunk` (`evaluate.gallery_ranks`, ties pessimistic); the keys of
  `dense_setting`, latency per query at batch 1 (one query against every pool video's frames, then its top 10)."""
  target = corpus.test_query_video
  where = np.searchsorted(pool, target)
  if not np.array_equal(pool[np.minimum(where, len(pool) - 1)], target):
    raise ValueError("pair_setting: a test query's video is not in the pool")
  frames = corpus.frames[pool]
  ranks, _ = evaluate.gallery_ranks(scorer, {"text": corpus.test_queries}, {"candidates": frames}, where,
                                    query_chunk=query_chunk, gallery_chunk=gallery_chunk)
  cut = ecfg.candidates or ecfg.dense_candidates
  out = {**_dense_metrics(ranks, cut, len(pool)), "index_bytes_per_video": 4.0 * float(np.prod(frames.shape[1:])),
         "reranker": None}
  n, k = min(ecfg.latency_queries, len(target)), min(10, len(pool))
  top = lambda i: np.argpartition(-scorer.score({"text": corpus.test_queries[i:i + 1], "candidates": frames})[0],  # noqa: E731
                                  k - 1)[:k]
  top(0)
  t = time.perf_counter()
  for i in range(n):
    top(i)
  out["latency_ms"] = {"total": 1e3 * (time.perf_counter() - t) / n}
  return out


def dense_rows(config) -> tuple[str, ...]:
  """The trained dense rows a run reports (`DENSE_ROWS` names): `eval.dense_rows`, and X-Pool when it reranks."""
  rows = tuple(config.eval.get("dense_rows", ()))
  return rows + (("xpool",) if config.eval.get("reranker") == "xpool" and "xpool" not in rows else ())


def train_dense(config, workdir: Path, corpus: Corpus, name: str, precision=contextlib.nullcontext):
  """(model, params) of the dense row `name` (`DENSE_ROWS`) trained through the one loop
  (`vidjax.methods.dense.fit_dense`, section `dense`) on the training captions (GRDR's pseudo queries: the store's
  text embeddings) and their videos' frames (`corpus.frames`), in `workdir/models/<name>` (a finished training is
  restored, a killed one resumes)."""
  position = np.searchsorted(corpus.train, corpus.train_query_video)  # each caption's video among the training ones
  split = dense_method.Split([str(i) for i in range(len(position))], corpus.train_queries, position,
                             list(corpus.video_ids[corpus.train]), corpus.frames[corpus.train],
                             corpus.features[corpus.train])
  with precision():
    model, params, _ = dense_method.fit_dense(config.dense, DENSE_ROWS[name], split, config.seed,
                                              Path(workdir) / "models" / name)
  return model, params


def evaluate_row(config, corpus: Corpus, model, params, coder, pools, ecfg=None, settings=SETTINGS,
                 rerankers: tuple[Reranker, ...] = (BACKBONE,)):
  """{setting: row metrics}, the recall of each setting's pool, and the inductive recalled ids."""
  out, found = {}, None
  for s in settings:
    recall, _ = make_recall(model, params, corpus.features[pools[s]], corpus.video_ids[pools[s]], ecfg or config.eval,
                            coder(corpus.features[pools[s]]))
    out[s], f = evaluate_setting(corpus, recall, ecfg or config.eval, rerankers)
    if s == "inductive":
      found = f
  return out, recall, found


def recall_curve(found: np.ndarray, target: np.ndarray, budgets) -> list[float]:
  """Candidate recall within the first b recalled ids [Q, K], for each budget b."""
  hit = found == target[:, None]
  return [100.0 * float(np.mean(hit[:, :b].any(1))) for b in budgets]


SWEEP_AXES = ("num_views", "num_codes", "num_layers", "t5_size", "beam_width")  # Figure 7's panels


def sweep_rows(config, workdir: Path, corpus: Corpus, pools, trained: dict, precision=contextlib.nullcontext,
               rerankers: tuple[Reranker, ...] = (BACKBONE,)) -> dict:
  """Figure 7 on the inductive pool: a model per N_v, per K, per number of codebook layers M and per T5 size
  (`sweep.t5_sizes`, the config's schedule), and the main model at each beam width, uncapped (its candidates: every
  video the beams bring). Each row: R@1/5/10, candidate recall, candidates, latency (batch 1). A value equal to the
  main model's (or to another row's, e.g. N_v = 1 and `grdr_nv1`) reuses that model."""
  sw, schedule, n = config.sweep, config.train.schedule, config.model.num_views
  main_t5 = config.model.t5.to_dict()
  sets = {}
  out = {axis: {} for axis in SWEEP_AXES}
  axes = (("num_views", sw.num_views, lambda v: (config, Recipe(schedule, int(v)))),
          ("num_codes", sw.num_codes,
           lambda v: (config, Recipe(schedule, n, num_codes=None if v == config.model.num_codes else int(v)))),
          ("num_layers", sw.num_layers,
           lambda v: (config, Recipe(schedule, n, num_layers=None if v == config.model.num_layers else int(v)))),
          ("t5_size", sw.t5_size, lambda v: (sweep_t5(config, v), Recipe(schedule, n))))
  for axis, values, row_of in axes:
    for v in values:
      cfg, recipe = row_of(v)
      key = (recipe, json_key(cfg.model.t5.to_dict())) if cfg.model.t5.to_dict() != main_t5 else recipe
      if key not in trained:
        trained[key] = trained_row(cfg, workdir, corpus, recipe, f"sweep/{axis}{v}", sets=sets, precision=precision)
      out[axis][str(v)] = evaluate_row(cfg, corpus, *trained[key], pools, settings=("inductive",),
                                       rerankers=rerankers)[0]["inductive"]
  main = trained[Recipe(schedule, n)]
  for w in sw.beam_width:  # uncapped: every video the beams' IDs name (§4.7's "average candidates generated")
    ecfg = ml_collections.ConfigDict({**config.eval.to_dict(), "beam_width": int(w), "candidates": 0})
    out["beam_width"][str(w)] = evaluate_row(config, corpus, *main, pools, ecfg, ("inductive",),
                                             rerankers)[0]["inductive"]
  return out


def sweep_t5(config, size: str):
  """`config` with the T5 of `sweep.t5_sizes[size]` (Figure 7's T5 size axis)."""
  sizes = config.sweep.t5_sizes
  if size not in sizes:
    config_common.bad_value("sweep.t5_size", size, f"one of sweep.t5_sizes {sorted(sizes)}")
  return config_common.with_values(config, {"model.t5": ml_collections.ConfigDict(sizes[size].to_dict())})


def json_key(d: dict) -> str:
  return json.dumps(d, sort_keys=True)


def suite(config, workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """The backbone's cosine (`dense_backbone`) and GRDR (generative recall of `eval.beam_width` beams, reranked by
  `eval.reranker`: X-Pool restored from `<workdir>/models/xpool`, or the backbone's cosine) on the run's test queries
  over the whole corpus (`configs/evaluate_all.py`), the models read from the run's last checkpoints (nothing
  trains); queries and videos are keyed by row."""
  corpus = read_corpus(config, Path(workdir))
  model, params, coder = trained_row(config, Path(workdir), corpus, recipes(config)["grdr"], "grdr", train=False)
  reranker = BACKBONE
  if config.eval.get("reranker") == "xpool":
    xpool = dense_method.load_dense(config.dense, DENSE_ROWS["xpool"], corpus.test_queries.shape[1],
                                    corpus.frames.shape[2], Path(workdir) / "models" / "xpool")
    reranker = frames_reranker("xpool", dense_method.scorer(*xpool), corpus)
  space = (f"the {corpus.source} (synthetic, seed {config.seed})" if corpus.world else
           f"the feature store {config.data.features}")
  dense = evaluate.dual_encoder("dense_backbone", space, lambda rows: corpus.test_queries[list(rows)],
                                lambda rows: corpus.features[list(rows)])

  def generative(data):
    queries, videos, relevant = data
    pool = np.asarray(videos, np.int64)
    recall, _ = make_recall(model, params, corpus.features[pool], corpus.video_ids[pool], config.eval,
                            coder(corpus.features[pool]))
    inputs = test_inputs(corpus, np.asarray(queries, np.int64))
    found, scores = recall.retrieve(inputs, recall.max_candidates)
    ids = rerank_found(recall, found, scores, reranker, inputs, min(10, recall.max_candidates)).ids
    return recall_at(ids, corpus.video_ids[pool][np.asarray(relevant)])

  grdr = evaluate.Model("grdr_rerank", space, {"gallery": generative},
                        {k: "GRDR is a recall stage over a corpus (R@K); fixed candidate pools leave it nothing to "
                            "recall" for k in evaluate.BENCHMARK_KINDS})
  name = f"R@K ({corpus.world or config.dataset})"
  return [dense, grdr], [evaluate.Benchmark(name, "gallery", space,
                                            (np.arange(len(corpus.test_queries)), np.arange(len(corpus.video_ids)),
                                             corpus.test_query_video), corpus.synthetic)]
