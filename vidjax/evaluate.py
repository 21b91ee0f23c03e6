"""The Scorer protocol and one evaluator per benchmark kind. Knows no method by name.

A **Scorer** is an object with `score(batch) -> [Q, C]` (or a plain function of the batch): it
maps a dict of arrays to one score per (query, candidate), higher = better. The batch holds the
query fields (e.g. `text [Q, D]`, CAST's `history [Q, L, D]`, VEDJE's token ids) and the candidates:

    candidates [Q, C, ...]   one pool per query (CVR, Comp pairs, GenState triplets)
    candidates [C, ...]      one gallery shared by every query (text-video retrieval R@K)

A **Retriever** (a recall stage: a dense index, GRDR's beam search) has
`retrieve(queries, k) -> (ids [Q, K] int, scores [Q, K])`, best first.

Evaluators (each returns named metrics from `vidjax.metrics`):

* `evaluate_cvr`       candidate pools with typed negatives (CAST §3.1): Acc, MnR, State/Ident Acc;
* `evaluate_gallery`   R@1/5/10, MdR, MnR in both directions over a shared gallery (several
                       captions per video allowed), scored in fixed-size blocks so memory stays
                       bounded: no `[Q, C, D]` copy of the gallery, no `[Q, C]` score matrix;
* `evaluate_binary`    pairwise preference: positive vs negative, ties count against;
* `evaluate_comp`      VideoComp: binary accuracy per disruption type + comprehensive product, for
                       video-query (dual encoder) and text-query (reranker) scorers alike;
* `evaluate_triplets`  GenState triplets: main vs temporal / semantic negatives + distractors;
* `evaluate_ranked`    R@K of a Retriever's ranked ids.

Every model on every benchmark (`configs/evaluate_all.py`): a `Benchmark` is one benchmark kind
("cvr", "comp", "genstate", "gallery") in one feature *space* (the world or store its features come
from), its items named by keys the models of that space can encode; a `Model` says, per kind, how it
evaluates such a benchmark (`dual_encoder` builds one from two encoders), and `Model.evaluate`
answers `{"n/a": reason}` for a benchmark it cannot take.

Every scorer call gets fixed-size chunks (the last one padded by repeating its final row, the
padding dropped), so a jitted scorer compiles once per shape. `JitScorer` jits a scorer function
once, closing over it (never a static jit argument).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Collection, Mapping, Optional, Protocol, Sequence

import jax
import numpy as np

from vidjax import metrics
from vidjax.ops import cosine

Batch = Mapping[str, Any]
DEFAULT_CHUNK = 256


class Scorer(Protocol):
  """Anything that scores candidates for a batch of queries (see the module docstring)."""

  def score(self, batch: Batch) -> np.ndarray:
    """batch (query fields + `candidates`) -> [Q, C] scores."""
    ...


class Retriever(Protocol):
  """A recall stage: the top `k` corpus items per query."""

  def retrieve(self, queries: Batch, k: int) -> tuple[np.ndarray, np.ndarray]:
    """queries -> (ids [Q, k] (corpus ids or rows), scores [Q, k]), best first."""
    ...


def score_fn(scorer: Scorer | Callable[[Batch], Any]) -> Callable[[Batch], Any]:
  """The batch -> scores function of a Scorer object or a plain function."""
  return scorer.score if hasattr(scorer, "score") else scorer


class JitScorer:
  """A Scorer from a pure function `fn(params, batch) -> [Q, C]`, jitted once here.

  Keep one instance per model and reuse it: each instance compiles once per input shape.
  """

  def __init__(self, fn: Callable[[Any, Batch], Any], params: Any = None):
    self.params = params
    self._fn = jax.jit(fn)

  def score(self, batch: Batch) -> np.ndarray:
    return np.asarray(self._fn(self.params, dict(batch)), np.float32)


@functools.partial(jax.jit, static_argnames=("query_key",))
def _cosine_scores(params, batch, *, query_key: str):  # pylint: disable=unused-argument
  return cosine(batch[query_key], batch["candidates"])


class CosineScorer(JitScorer):
  """Dual-encoder (zero-shot) scorer: cosine(batch[query_key], batch['candidates']); every instance shares one
  compilation per input shape."""

  def __init__(self, query_key: str = "text"):  # pylint: disable=super-init-not-called
    self.query_key, self.params = query_key, None
    self._fn = functools.partial(_cosine_scores, query_key=query_key)


# ----------------------------------------------------------------------------- chunking


def _take(arrays: Batch, idx: np.ndarray) -> dict[str, np.ndarray]:
  return {k: np.asarray(v)[idx] for k, v in arrays.items()}


def check_finite_inputs(arrays: Batch, what: str) -> None:
  """One clear error when a floating-point input holds NaN or Inf: a NaN score would rank first and a NaN row
  normalise to zero and rank last, both silently. Names the array and its rows (first few + count)."""
  for key, value in arrays.items():
    value = np.asarray(value)
    if not np.issubdtype(value.dtype, np.floating) or value.ndim == 0:
      continue
    bad = ~np.isfinite(value.reshape(value.shape[0], -1)).all(axis=1)
    if bad.any():
      rows = np.flatnonzero(bad)
      raise ValueError(f"{what}: input {key!r} holds NaN or Inf in {len(rows)} of {len(bad)} rows (rows "
                       f"{rows[:5].tolist()}{' ...' if len(rows) > 5 else ''}); check the features they came from")


def _leading(arrays: Batch, what: str) -> int:
  sizes = {k: np.shape(v)[0] if np.ndim(v) else None for k, v in arrays.items()}
  if not sizes or None in sizes.values() or len(set(sizes.values())) != 1:
    raise ValueError(f"{what}: every array needs the same leading dimension, got shapes "
                     f"{ {k: np.shape(v) for k, v in arrays.items()} }")
  n = next(iter(sizes.values()))
  if n == 0:
    raise ValueError(f"{what}: nothing to score (leading dimension 0)")
  return n


def chunked(fn: Callable[[dict], Any], arrays: Batch, chunk: int = DEFAULT_CHUNK):
  """Runs `fn(rows)` over fixed-size chunks of the leading axis of every array in `arrays`.

  Every chunk has exactly `chunk` rows (the last is padded by repeating its final row, and the
  padded rows are dropped), so a jitted `fn` compiles once whatever the total size is.

  Returns:
    fn's outputs (an array or a dict of arrays, `[chunk, ...]` each) concatenated over all rows.
  """
  if chunk < 1:
    raise ValueError(f"chunk must be >= 1, got {chunk}")
  n = _leading(arrays, "chunked")
  check_finite_inputs(arrays, "evaluation")
  outs = []
  for start in range(0, n, chunk):
    idx = np.minimum(np.arange(start, start + chunk), n - 1)  # pad by repeating the last row
    outs.append((fn(_take(arrays, idx)), min(start + chunk, n) - start))
  if isinstance(outs[0][0], Mapping):
    return {k: np.concatenate([np.asarray(o[k])[:m] for o, m in outs]) for k in outs[0][0]}
  return np.concatenate([np.asarray(o)[:m] for o, m in outs])


def score_pools(scorer: Scorer | Callable, inputs: Batch, chunk: int = DEFAULT_CHUNK) -> np.ndarray:
  """Scores per-query candidate pools: inputs (query fields + candidates [Q, C, ...]) -> [Q, C]."""
  if "candidates" not in inputs:
    raise KeyError(f"pool inputs need 'candidates' [Q, C, ...]; got keys {sorted(inputs)}")
  return np.asarray(chunked(score_fn(scorer), inputs, chunk), np.float64)


# ----------------------------------------------------------------------------- candidate pools

CVR_LABEL_KEYS = ("target_index", "neg_types")


def _split_labels(arrays: Batch, label_keys: Sequence[str], what: str):
  missing = [k for k in ("candidates", *label_keys) if k not in arrays]
  if missing:
    raise KeyError(f"{what} arrays lack {missing}; got keys {sorted(arrays)}")
  inputs = {k: v for k, v in arrays.items() if k not in label_keys}
  return inputs, {k: np.asarray(arrays[k]) for k in label_keys}


def evaluate_cvr(scorer: Scorer | Callable, arrays: Batch, chunk: int = DEFAULT_CHUNK) -> dict[str, float]:
  """CVR evaluation (CAST §3.1) of any Scorer.

  Args:
    scorer: scores `{text, history, history_mask, candidates [Q, C, D]}` batches.
    arrays: the scorer's inputs plus `target_index [Q]` and `neg_types [Q, C]`
      (`metrics.NEG_TYPE_CODES`), e.g. `vidjax.data.cvr.cvr_eval_arrays(...)`.
    chunk: queries per scorer call.

  Returns:
    `metrics.cvr_metrics` of the scores: acc, mnr, state_acc, ident_acc (+ counts).
  """
  inputs, labels = _split_labels(arrays, CVR_LABEL_KEYS, "CVR")
  q, c = np.shape(inputs["candidates"])[:2]
  for key, shape in (("target_index", (q,)), ("neg_types", (q, c))):
    if labels[key].shape != shape:
      raise ValueError(f"CVR arrays[{key!r}] must have shape {shape} (candidates are "
                       f"{np.shape(inputs['candidates'])}), got {labels[key].shape}")
  scores = score_pools(scorer, inputs, chunk)
  return metrics.cvr_metrics(scores, labels["target_index"], labels["neg_types"])


def evaluate_binary(scorer: Scorer | Callable, inputs: Batch, chunk: int = DEFAULT_CHUNK) -> dict[str, float]:
  """Pairwise preference (VideoComp binary accuracy): candidates [Q, 2, ...], column 0 is the positive."""
  scores = score_pools(scorer, inputs, chunk)
  return metrics.binary_accuracy(scores)


def comp_scores(scorer: Scorer | Callable, inputs: Batch, chunk: int = DEFAULT_CHUNK) -> np.ndarray:
  """[Q, 2] scores of a VideoComp triplet set, column 0 the positive text, for either kind of Scorer.

  `inputs` is either
    * one batch whose scores are [Q, 2], positive first: the video as the query and the two texts as
      candidates (dual encoders: `CosineScorer("video")` with `candidates [Q, 2, D]`; VEDJE's reranker
      with `input_ids [Q, 2, S]` and the video's cache twice), or
    * `{"positive": batch, "negative": batch}`: two text-query batches whose scores are [Q, 1] (the
      triplet's video as the one candidate), for scorers that take a text query (CAST's).
  """
  def run(batch, width):
    scores = np.asarray(chunked(score_fn(scorer), batch, chunk), np.float64)
    if scores.shape[1:] != (width,):
      raise ValueError(f"comp_scores: expected scores [Q, {width}] "
                       f"({'one column: the triplet video' if width == 1 else 'positive, negative'}), got {scores.shape}")
    return scores
  if "positive" in inputs and "negative" in inputs:
    pos, neg = run(inputs["positive"], 1), run(inputs["negative"], 1)
    if pos.shape != neg.shape:
      raise ValueError(f"comp_scores: positive and negative batches differ in size: {pos.shape} vs {neg.shape}")
    return np.concatenate([pos, neg], axis=1)
  return run(inputs, 2)


def evaluate_comp(scorer: Scorer | Callable, inputs_by_type: Mapping[str, Batch],
                  chunk: int = DEFAULT_CHUNK) -> dict[str, float]:
  """VideoComp (§3.4): binary accuracy per disruption type and the comprehensive product of any Scorer.

  Args:
    scorer: any Scorer (see `comp_scores` for the two input layouts).
    inputs_by_type: {type: inputs}, e.g. {"temp_reorder": ..., "action_replace": ..., "seg_mismatch": ...}.

  Returns:
    `metrics.comp_metrics`: {type: accuracy %, "all": product of the accuracies, in %}.
  """
  return metrics.comp_metrics({t: comp_scores(scorer, x, chunk) for t, x in inputs_by_type.items()})


def evaluate_triplets(scorer: Scorer | Callable, inputs: Batch, chunk: int = DEFAULT_CHUNK) -> dict[str, Any]:
  """GenState triplets: candidates [Q, 3 + n, ...] = (main, temporal neg, semantic neg, distractors)."""
  scores = score_pools(scorer, inputs, chunk)
  return metrics.triplet_metrics(scores)


def evaluate_triplet_pools(scorer: Scorer | Callable, inputs_by_pool: Mapping[str, Batch],
                           chunk: int = DEFAULT_CHUNK) -> dict[str, Any]:
  """GenState (§5.1): each subset's queries ranked in their own pool.

  Args:
    inputs_by_pool: {subset: inputs} as `evaluate_triplets` takes them (pool widths may differ).

  Returns:
    {"subsets": {subset: triplet metrics}, "all": the metrics over every query (`pool_triplet_metrics`)}.
  """
  per = {name: evaluate_triplets(scorer, x, chunk) for name, x in inputs_by_pool.items()}
  return {"subsets": per, "all": metrics.pool_triplet_metrics(list(per.values()))}


# ----------------------------------------------------------------------------- gallery retrieval


def _blocks(n: int, size: int):
  for start in range(0, n, size):
    yield start, min(start + size, n)


def gallery_ranks(scorer: Scorer | Callable, queries: Batch, gallery: Batch, relevant: np.ndarray, *,
                  query_chunk: int = 1024, gallery_chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
  """Pessimistic 1-based ranks in both directions over a shared gallery, in bounded memory.

  Text -> video: the rank of query q is 1 + the number of *other* gallery items scoring >= its
  relevant item. Video -> text: for gallery item v with relevant queries R(v) (several captions of
  one video), the rank is 1 + the number of queries outside R(v) scoring >= the best of R(v), i.e.
  v is a hit at K when any of its captions ranks in the top K. Ties count against the model.

  The scorer sees blocks `{**queries[qc rows], **gallery[gc rows]}` with `qc = query_chunk`,
  `gc = gallery_chunk` (last blocks padded), so memory is O(qc * gc) scores plus the inputs.
  Queries are processed sorted by their relevant item, so the first pass (finding each relevant
  score) touches only the one or two gallery blocks each query block points into; the second pass
  counts over every block.

  Args:
    scorer: batch -> [qc, gc] scores (e.g. `CosineScorer()` with gallery `{"candidates": [N, D]}`).
    queries: dict of `[Q, ...]` arrays.
    gallery: dict of `[N, ...]` arrays.
    relevant: int [Q], the gallery row relevant to each query.

  Returns:
    (t2v_ranks int64 [Q], v2t_ranks int64 [N]) with 0 for gallery items that no query points at.
  """
  fn = score_fn(scorer)
  q = _leading(queries, "gallery_ranks queries")
  n = _leading(gallery, "gallery_ranks gallery")
  check_finite_inputs(queries, "gallery_ranks queries")
  check_finite_inputs(gallery, "gallery_ranks gallery")
  relevant = np.asarray(relevant, np.int64)
  if relevant.shape != (q,) or relevant.min() < 0 or relevant.max() >= n:
    raise ValueError(f"relevant must be int [Q={q}] with values in [0, {n}), got shape {relevant.shape}, "
                     f"range [{relevant.min()}, {relevant.max()}]")
  if query_chunk < 1 or gallery_chunk < 1:
    raise ValueError(f"query_chunk and gallery_chunk must be >= 1, got {query_chunk}, {gallery_chunk}")
  order = np.argsort(relevant, kind="stable")
  rel_sorted = relevant[order]

  def block(qs, qe, gs, ge):
    qi = order[np.minimum(np.arange(qs, qs + query_chunk), qe - 1)]
    gi = np.minimum(np.arange(gs, gs + gallery_chunk), ge - 1)
    batch = {**_take(queries, qi), **_take(gallery, gi)}
    scores = np.asarray(fn(batch), np.float64)
    expected = (query_chunk, gallery_chunk)
    if scores.shape != expected:
      raise ValueError(f"the scorer returned shape {scores.shape} for a block of {expected[0]} queries x "
                       f"{expected[1]} gallery items; expected {expected}")
    return scores[:qe - qs, :ge - gs]

  gt = np.empty(q)                      # score of each (sorted) query's relevant item
  best = np.full(n, -np.inf)            # best relevant-query score per gallery item
  for qs, qe in _blocks(q, query_chunk):
    lo, hi = rel_sorted[qs], rel_sorted[qe - 1]
    for gs, ge in _blocks(n, gallery_chunk):
      if ge <= lo or gs > hi:
        continue
      s = block(qs, qe, gs, ge)
      rows = np.flatnonzero((rel_sorted[qs:qe] >= gs) & (rel_sorted[qs:qe] < ge))
      vals = s[rows, rel_sorted[qs + rows] - gs]
      gt[qs + rows] = vals
      np.maximum.at(best, rel_sorted[qs + rows], vals)

  t2v = np.ones(q, np.int64)
  v2t = np.ones(n, np.int64)
  for qs, qe in _blocks(q, query_chunk):
    for gs, ge in _blocks(n, gallery_chunk):
      s = block(qs, qe, gs, ge)
      own = rel_sorted[qs:qe, None] == np.arange(gs, ge)[None, :]  # (query, its relevant item)
      t2v[qs:qe] += np.sum((s >= gt[qs:qe, None]) & ~own, axis=1)
      v2t[gs:ge] += np.sum((s >= best[None, gs:ge]) & ~own, axis=0)
  ranks = np.empty(q, np.int64)
  ranks[order] = t2v
  v2t[np.isneginf(best)] = 0
  return ranks, v2t


def evaluate_gallery(scorer: Scorer | Callable, queries: Batch, gallery: Batch, relevant: np.ndarray, *,
                     query_chunk: int = 1024, gallery_chunk: int = 4096) -> dict[str, float]:
  """Text-video retrieval metrics in both directions (see `gallery_ranks` for the protocol).

  Returns:
    {t2v_r1, t2v_r5, t2v_r10, t2v_mdr, t2v_mnr, v2t_... likewise, v2t_videos}: recalls in %, ranks as
    ranks; the V2T metrics are over the gallery items that at least one query points at
    (`v2t_videos` of them). An R@K that no rank can miss (K >= the gallery, or >= the captions a video ranks at
    most) has a note in `metrics.NOTES`.
  """
  t2v, v2t = gallery_ranks(scorer, queries, gallery, relevant, query_chunk=query_chunk,
                           gallery_chunk=gallery_chunk)
  v2t = v2t[v2t > 0]
  t2v_most, v2t_most = metrics.two_way_candidates(_leading(gallery, "gallery"), relevant)
  return metrics.joined(metrics.retrieval_metrics(t2v, "t2v_", candidates=t2v_most, what="videos of the gallery"),
                        metrics.retrieval_metrics(v2t, "v2t_", candidates=v2t_most,
                                                  what="captions a video ranks at most"),
                        {"v2t_videos": int(v2t.size)})


def evaluate_ranked(retriever: Retriever, queries: Batch, relevant: np.ndarray, k: int,
                    ks: Sequence[int] = (1, 5, 10), chunk: int = DEFAULT_CHUNK) -> dict[str, float]:
  """R@K (%) of a recall stage from its ranked ids; `ks` must not exceed the `k` it retrieves. An R@K with K at
  least the retriever's corpus (`len(retriever)`, when it has one) has a note in `metrics.NOTES`."""
  if max(ks) > k:
    raise ValueError(f"evaluate_ranked: ks={tuple(ks)} exceed the k={k} items retrieved")
  ids = chunked(lambda rows: retriever.retrieve(rows, k)[0], queries, chunk)
  return metrics.recall_from_ranked(ids, relevant, ks, len(retriever) if hasattr(retriever, "__len__") else None)


# ----------------------------------------------------------------------------- tables


def rounded(values: Mapping[str, Any], digits: Optional[int] = 2, keys: Optional[Sequence[str]] = None,
            prefix: str = "") -> dict[str, Any]:
  """The metrics `keys` of `values` (default: every one) as floats rounded to `digits` (None: as they are), named
  `prefix + key`, with the notes `values` has for them (`metrics.NOTES`: an R@K no rank can miss) kept under
  `metrics.NOTES`: what a results table keeps of an evaluator's metrics."""
  keys = [k for k in values if k != metrics.NOTES] if keys is None else list(keys)
  out = {prefix + k: values[k] if digits is None else round(float(values[k]), digits) for k in keys}
  notes = values.get(metrics.NOTES, {})
  return metrics.with_notes(out, {prefix + k: notes[k] for k in keys if k in notes})

_HEADERS = {"acc": "Acc.", "r5": "R@5", "mnr": "MnR", "state_acc": "State Acc.", "ident_acc": "Ident. Acc."}
_NAMES = {**_HEADERS, "r1": "R@1", "r10": "R@10"}  # a table that shows r1 / r10 beside R@5 names them alike


def format_table(rows: Mapping[str, Mapping[str, float]], title: str, synthetic: bool,
                 columns: Optional[Sequence[str]] = None) -> str:
  """Plain-text results table shaped like the papers' tables.

  Args:
    rows: {method: {metric: value}}, in display order.
    title: first line of the table.
    synthetic: when true the title line says SYNTHETIC, so synthetic-world numbers are never
      mistaken for the paper's.
    columns: metric keys to show; default: acc, r5, mnr, state_acc, ident_acc when present, else
      every key in order of first appearance. Missing values print as "-".

  Returns:
    the table as one string (no trailing newline). A value with a note (a row's `metrics.NOTES`, e.g. an R@K no
    rank can miss) is marked `*n` and its note printed under the table.
  """
  if columns is None:
    seen = list(dict.fromkeys(k for r in rows.values() for k in r if k != metrics.NOTES))
    columns = [k for k in _HEADERS if k in seen] or seen
  notes: list[str] = []

  def mark(row, c):
    note = row.get(metrics.NOTES, {}).get(c) if c in row else None
    if note is None:
      return ""
    text = f"{_NAMES.get(c, c)}: {note}"
    if text not in notes:
      notes.append(text)
    return f" *{notes.index(text) + 1}"
  head = ["Method"] + [_NAMES.get(c, c) for c in columns]

  def cell(v):
    if v is None:
      return "-"
    if isinstance(v, (float, np.floating)):
      return "nan" if math.isnan(v) else f"{v:.2f}"
    return str(v)

  body = [[str(m)] + [cell(r.get(c)) + mark(r, c) for c in columns] for m, r in rows.items()]
  widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
  fmt = lambda cells: " | ".join(  # noqa: E731
      c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
  line = "-+-".join("-" * w for w in widths)
  if synthetic:
    title = f"SYNTHETIC DATA: {title} (demonstrates mechanisms; not the paper's numbers)"
  return "\n".join([title, fmt(head), line] + [fmt(r) for r in body] + [f"*{i + 1} {n}" for i, n in enumerate(notes)])


# ----------------------------------------------------------------------------- every model on every benchmark

BENCHMARK_KINDS = ("cvr", "comp", "genstate", "gallery")
# The metrics the comparison shows per kind (each kind's evaluator returns these among others).
SHOWN = {"cvr": ("acc", "state_acc", "ident_acc"), "comp": None,  # comp: every type, then "all"
         "genstate": ("r1", "r5", "r10", "acc_temp", "acc_sem", "acc_tri"), "gallery": ("t2v_r1", "t2v_r5", "t2v_r10")}


# What a benchmark's item keys name (`Benchmark.keys`, `Model.keys`): a model reads a benchmark only in its own key
# space, so rows of one run are never read as rows of another. "" = the run's own items (evaluate_all names them by
# the run's workdir); the shared ones:
EMBEDDINGS = "the space's raw embeddings (CVR arrays carry them; no keys)"
STORE_IDS = "the store's query (caption) ids and video ids"
PROMPTS = "prompt texts and the store's video ids"


@dataclasses.dataclass
class Benchmark:
  """One benchmark in one feature space.

  `data` by kind (keys are whatever the space's models encode: clip ids, texts, rows):
    cvr       CVR arrays as `evaluate_cvr` takes them (the space's raw embeddings);
    comp      {type: (video keys [Q], positive text keys [Q], negative text keys [Q])};
    genstate  {subset: (query text keys [Q], candidate video keys [Q, C]: main, temporal, semantic, distractors)};
    gallery   (query text keys [Q], gallery video keys [V], relevant int [Q]: each query's gallery row).
  `keys`: what those keys name (`EMBEDDINGS`, `STORE_IDS`, `PROMPTS`, or "": this run's own items).
  """
  name: str
  kind: str
  space: str
  data: Any
  synthetic: bool = True
  keys: str = ""

  def __post_init__(self):
    if self.kind not in BENCHMARK_KINDS:
      raise ValueError(f"benchmark {self.name!r}: kind {self.kind!r} is not one of {BENCHMARK_KINDS}")


@dataclasses.dataclass
class Model:
  """A trained model as the comparison sees it: the space its inputs live in and, per benchmark kind, a
  function `data -> metrics`; `reasons[kind]` says why it takes no benchmark of a kind it lacks. `keys`: the key
  space its evaluators read (see `Benchmark`); `reads(kind, data)`: why it cannot read those items (a key its
  encoders do not have, another split), or None; both are decided before anything is scored."""
  name: str
  space: str
  evaluators: Mapping[str, Callable[[Any], Mapping[str, Any]]]
  reasons: Mapping[str, str] = dataclasses.field(default_factory=dict)
  keys: str = ""
  reads: Optional[Callable[[str, Any], Optional[str]]] = None

  def cannot(self, bench: Benchmark) -> Optional[str]:
    """Why this model cannot score `bench`, or None: another space, a kind it has no evaluator for, another key
    space, or items its encoders do not have (`reads`). Decided from the benchmark's keys, before any scoring."""
    if bench.space != self.space:
      return f"trained on {self.space}; this benchmark's inputs are {bench.space}"
    if bench.kind not in self.evaluators:
      return self.reasons.get(bench.kind, f"{self.name} has no {bench.kind} evaluation")
    if bench.keys != self.keys:
      return f"{self.name} reads items keyed by {self.keys or 'its own run'}; {bench.name}'s are keyed by " \
             f"{bench.keys or 'its own run'} (one store, but not one key space)"
    return self.reads(bench.kind, bench.data) if self.reads is not None else None

  def evaluate(self, bench: Benchmark) -> dict[str, Any]:
    """The shown metrics of `bench` (rounded), or {"n/a": why this model cannot take it} (`cannot`); any error
    while scoring is an error."""
    why = self.cannot(bench)
    if why is not None:
      return {"n/a": why}
    out = self.evaluators[bench.kind](bench.data)
    return rounded(out, 2, SHOWN[bench.kind])


def item_keys(kind: str, data: Any) -> tuple[list, list]:
  """(text keys, video keys) of a comp, genstate or gallery benchmark's `data` (see `Benchmark`)."""
  def flat(*parts):
    out = []
    for part in parts:
      out += flat(*part) if isinstance(part, (list, tuple, np.ndarray)) else [part]
    return out
  if kind == "comp":
    return flat(*(t for _, p, n in data.values() for t in (p, n))), flat(*(v for v, _, _ in data.values()))
  if kind == "genstate":
    return flat(*(q for q, _ in data.values())), flat(*(pool for _, pool in data.values()))
  if kind == "gallery":
    return flat(data[0]), flat(data[1])
  raise ValueError(f"item_keys: benchmark kind {kind!r} has no item keys (one of comp, genstate, gallery)")


def missing_keys(kind: str, data: Any, texts: Optional[Collection] = None,
                 videos: Optional[Collection] = None) -> Optional[str]:
  """Why encoders that know the keys `texts` / `videos` (None: any key, e.g. a text tower) cannot read `data`:
  the first keys they lack and how many; None when they know every one."""
  text_keys, video_keys = item_keys(kind, data)
  for what, known, wanted in (("text", texts, text_keys), ("video", videos, video_keys)):
    if known is None:
      continue
    known = known if isinstance(known, (set, frozenset, Mapping)) else set(known)
    absent = list(dict.fromkeys(k for k in wanted if k not in known))
    if absent:
      return (f"its encoders have no {what} item {absent[0]!r} ({len(absent)} of the benchmark's "
              f"{len(set(wanted))} {what} keys are not among the {len(known)} they have)")
  return None


def dual_encoder(name: str, space: str, encode_texts: Callable[[Sequence[Any]], np.ndarray],
                 encode_videos: Callable[[Sequence[Any]], np.ndarray], chunk: int = DEFAULT_CHUNK, *,
                 keys: str = "", texts: Optional[Collection] = None, videos: Optional[Collection] = None) -> Model:
  """A `Model` from two encoders (keys -> [N, D] embeddings) scored by cosine: it takes comp (the video as
  the query, its two texts as candidates), genstate pools and gallery R@K; not CVR, whose arrays carry the
  space's raw embeddings rather than keys. `keys`: the key space the encoders read (see `Benchmark`); `texts` /
  `videos`: the keys each encoder knows (None: any), checked before scoring (`missing_keys`)."""

  def embed(fn, keys):
    flat = np.asarray(keys, dtype=object).reshape(-1)
    unique = list(dict.fromkeys(flat.tolist()))
    table = np.asarray(fn(unique), np.float32)
    row = {k: i for i, k in enumerate(unique)}
    return table[[row[k] for k in flat]].reshape(np.shape(keys) + table.shape[1:])

  def comp(data):
    inputs = {t: {"video": embed(encode_videos, v), "candidates": embed(encode_texts, np.stack([p, n], axis=1))}
              for t, (v, p, n) in data.items()}
    return evaluate_comp(CosineScorer("video"), inputs, chunk)

  def genstate(data):
    inputs = {s: {"text": embed(encode_texts, q), "candidates": embed(encode_videos, pool)}
              for s, (q, pool) in data.items()}
    return evaluate_triplet_pools(CosineScorer("text"), inputs, chunk)["all"]

  def gallery(data):
    queries, videos, relevant = data
    return evaluate_gallery(CosineScorer("text"), {"text": embed(encode_texts, queries)},
                            {"candidates": embed(encode_videos, videos)}, np.asarray(relevant))

  return Model(name, space, {"comp": comp, "genstate": genstate, "gallery": gallery},
               {"cvr": "CVR pools carry the space's raw embeddings; this encoder reads other inputs"}, keys,
               lambda kind, data: missing_keys(kind, data, texts, videos))
