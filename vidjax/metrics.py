"""Retrieval metrics, each a pure NumPy function of scores and ranks.

Gallery retrieval (text <-> video): `retrieval_metrics(ranks)` gives R@1/5/10 (%), MdR and MnR from
pessimistic 1-based ranks (`vidjax.evaluate.gallery_ranks` computes them in both directions);
`recall_from_ranked` scores a recall stage's ranked ids. Pairwise and triplet pools (VideoComp,
GenState-AI): `binary_accuracy`, `hierarchy_accuracy` (candidates ordered by disruption level), `triplet_metrics`.

CVR (../shared/papers/cast.txt §3.1 "Metrics"): every query ranks its own candidate pool
(1 GT + 9 negatives in the paper's protocol) and we report

* Acc       Recall@1 in %;
* MnR       mean 1-based rank of the ground truth;
* State Acc % of queries whose GT scores strictly above every one of its state negatives;
* Ident Acc % of queries whose GT scores strictly above every one of its identity negatives.

Queries without a negative of a type are left out of that diagnostic's denominator (its count is
returned as ``n_state`` / ``n_ident``; the value is NaN when no query qualifies).

R@K with K at least the number of candidates a query ranks is 100 whatever the scores: such a value is reported with
a note, `NOTES` in the metrics dict ({metric: why}; `recall_notes`), which results.json keeps and tables print
under the table, never as a plain 100. A dict has `NOTES` only when a note applies.

Ties are resolved pessimistically everywhere: the rank of the GT is the number of candidates
whose score is >= the GT score, so a model that gives every candidate the same score gets rank C,
not 1, and a tie with a hard negative is a diagnostic failure. This makes constant or degenerate
scorers look as bad as they are.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

# Negative-type codes of a candidate pool (the `neg_types` array); `vidjax.data.cvr` writes them.
GT = 0
STATE = 1
IDENTITY = 2
EASY = 3
NEG_TYPE_CODES = {"gt": GT, "state": STATE, "identity": IDENTITY, "easy": EASY}
NOTES = "notes"  # a metrics dict's {metric: note} for values that say less than they seem (`recall_notes`)


def recall_notes(ks: Sequence[int], candidates: int | None, prefix: str = "",
                 what: str = "candidates each query ranks") -> dict:
  """{f"{prefix}r{k}": note} for every k >= `candidates` (the most a query's rank can be, counted as `what`): every
  query is a hit at such a k whatever the scores, so its R@k is 100 by construction, not a result. {} when
  `candidates` is None."""
  if candidates is None:
    return {}
  return {f"{prefix}r{k}": f"K={k} >= the {candidates} {what}: a hit whatever the scores (100 by construction)"
          for k in ks if k >= candidates}


def with_notes(values: dict, notes: Mapping[str, str]) -> dict:
  """`values` with `notes` added under `NOTES` (merged with any it has); unchanged when there are none."""
  if notes:
    values[NOTES] = {**values.get(NOTES, {}), **notes}
  return values


def no_nan(scores: np.ndarray, what: str = "scores") -> np.ndarray:
  """`scores` as float64, refused when any is NaN (a diverged model's): a comparison with NaN is always False, so a
  NaN would rank its target first or last with no error. -inf stays allowed (padding that ranks last)."""
  scores = np.asarray(scores, np.float64)
  bad = np.isnan(scores)
  if bad.any():
    raise ValueError(f"{what}: {int(bad.sum())} of {bad.size} are NaN (a model that diverged?): no rank can be read "
                     "from them")
  return scores


def _check_scores(scores, target_index):
  scores = no_nan(scores)
  target_index = np.asarray(target_index)
  if scores.ndim != 2:
    raise ValueError(f"scores must be [Q, C], got shape {scores.shape}")
  if target_index.shape != (scores.shape[0],):
    raise ValueError(f"target_index must be [Q] = ({scores.shape[0]},), got {target_index.shape}")
  if target_index.size and (target_index.min() < 0 or target_index.max() >= scores.shape[1]):
    raise ValueError(f"target_index values must lie in [0, {scores.shape[1]}), got range "
                     f"[{target_index.min()}, {target_index.max()}]")
  return scores.astype(np.float64), target_index.astype(np.int64)


def rank_of_target(scores: np.ndarray, target_index: np.ndarray) -> np.ndarray:
  """1-based rank of each query's target among its candidates, ties pessimistic.

  Args:
    scores: [Q, C] higher = better.
    target_index: [Q] column of the target.

  Returns:
    [Q] int64 ranks in [1, C]: the number of candidates scoring >= the target.
  """
  scores, target_index = _check_scores(scores, target_index)
  gt = np.take_along_axis(scores, target_index[:, None], axis=1)
  return np.sum(scores >= gt, axis=1).astype(np.int64)


def _beats_all(scores, gt, neg_types, code):
  """Per query: (has a negative of `code`, GT strictly above all of them)."""
  is_type = neg_types == code
  has = is_type.any(axis=1)
  best_neg = np.max(np.where(is_type, scores, -np.inf), axis=1)
  return has, gt[:, 0] > best_neg


def cvr_metrics(scores: np.ndarray, target_index: np.ndarray,
                neg_types: np.ndarray) -> dict[str, float]:
  """CVR metrics of §3.1.

  Args:
    scores: [Q, C] candidate scores, higher = better.
    target_index: [Q] column of the ground truth in each row.
    neg_types: [Q, C] int codes GT / STATE / IDENTITY / EASY; neg_types[q, target_index[q]]
      must be GT.

  Returns:
    {"acc": %, "mnr": mean rank, "state_acc": %, "ident_acc": %, "n": Q,
     "n_state": queries with >= 1 state negative, "n_ident": likewise for identity}.
  """
  scores, target_index = _check_scores(scores, target_index)
  neg_types = np.asarray(neg_types)
  if neg_types.shape != scores.shape:
    raise ValueError(f"neg_types must match scores {scores.shape}, got {neg_types.shape}")
  at_target = np.take_along_axis(neg_types, target_index[:, None], axis=1)[:, 0]
  if np.any(at_target != GT):
    bad = int(np.flatnonzero(at_target != GT)[0])
    raise ValueError(f"query {bad}: neg_types[{bad}, target_index={target_index[bad]}] is "
                     f"{at_target[bad]}, expected GT={GT}")
  ranks = rank_of_target(scores, target_index)
  gt = np.take_along_axis(scores, target_index[:, None], axis=1)
  has_s, ok_s = _beats_all(scores, gt, neg_types, STATE)
  has_i, ok_i = _beats_all(scores, gt, neg_types, IDENTITY)
  pct = lambda ok, has: float(100.0 * ok[has].mean()) if has.any() else float("nan")
  return {
      "acc": float(100.0 * np.mean(ranks == 1)) if ranks.size else float("nan"),
      "mnr": float(np.mean(ranks)) if ranks.size else float("nan"),
      "state_acc": pct(ok_s, has_s),
      "ident_acc": pct(ok_i, has_i),
      "n": int(ranks.size),
      "n_state": int(has_s.sum()),
      "n_ident": int(has_i.sum()),
  }


def cvr_top1_breakdown(scores: np.ndarray, target_index: np.ndarray, neg_types: np.ndarray) -> dict[str, float]:
  """What each query picks first (CAST Figure 5), in % of queries.

  `top1_exact`: the ground truth; `top1_identity_consistent`: a state negative (same video, wrong
  state); `top1_identity_inconsistent`: an identity or easy negative (another video). Ties count
  against the model: among the top-scoring candidates the worst category is taken (other video,
  then same video, then the ground truth).
  """
  scores, target_index = _check_scores(scores, target_index)
  neg_types = np.asarray(neg_types)
  if neg_types.shape != scores.shape:
    raise ValueError(f"neg_types must match scores {scores.shape}, got {neg_types.shape}")
  top = scores >= scores.max(axis=1, keepdims=True)
  other_video = np.any(top & ((neg_types == IDENTITY) | (neg_types == EASY)), axis=1)
  same_video = np.any(top & (neg_types == STATE), axis=1) & ~other_video
  exact = ~other_video & ~same_video
  pct = lambda x: float(100.0 * x.mean()) if x.size else float("nan")  # noqa: E731
  return {"top1_exact": pct(exact), "top1_identity_consistent": pct(same_video),
          "top1_identity_inconsistent": pct(other_video)}


# ----------------------------------------------------------------------------- gallery retrieval


def retrieval_metrics(ranks: np.ndarray, prefix: str = "", ks: Sequence[int] = (1, 5, 10),
                      candidates: int | None = None, what: str = "candidates each query ranks") -> dict[str, float]:
  """R@K in %, median and mean rank from 1-based ranks: [N] -> {prefix r1, r5, r10, mdr, mnr}.

  `candidates`: the most a rank can be (the gallery's size); each R@K with K >= it gets a note (`recall_notes`,
  naming them as `what`)."""
  ranks = np.asarray(ranks)
  whole = ranks.dtype.kind in "iu" or (ranks.dtype.kind == "f" and bool(np.all(np.isfinite(ranks))) and
                                       bool(np.all(ranks == np.round(ranks))))
  if ranks.ndim != 1 or not whole or (ranks.size and ranks.min() < 1):
    raise ValueError(f"ranks must be 1-based whole numbers [N], got shape {ranks.shape}, dtype {ranks.dtype}"
                     + (f", minimum {ranks.min()}" if ranks.size else ""))
  if candidates is not None and ranks.size and ranks.max() > candidates:
    raise ValueError(f"a rank of {ranks.max()} among {candidates} {what}: a rank is at most the number of "
                     "candidates")
  nan = float("nan")
  out = {f"{prefix}r{k}": float(100.0 * np.mean(ranks <= k)) if ranks.size else nan for k in ks}
  out[f"{prefix}mdr"] = float(np.median(ranks)) if ranks.size else nan
  out[f"{prefix}mnr"] = float(np.mean(ranks)) if ranks.size else nan
  return with_notes(out, recall_notes(ks, candidates, prefix, what) if ranks.size else {})


def best_relevant_ranks(scores: np.ndarray, relevant: np.ndarray) -> np.ndarray:
  """Pessimistic 1-based rank of each query's best-scoring relevant item, for queries with several relevant items
  (a caption that many clips share): 1 + the number of non-relevant items scoring >= it.

  Args:
    scores: [Q, N]; relevant: bool [Q, N], at least one True per row.

  Returns:
    int64 [Q].
  """
  scores, relevant = no_nan(scores), np.asarray(relevant, bool)
  if scores.ndim != 2 or relevant.shape != scores.shape or not relevant.any(axis=1).all():
    raise ValueError(f"expected scores [Q, N] and relevant bool [Q, N] with a True in every row; got "
                     f"{scores.shape}, {relevant.shape}")
  best = np.where(relevant, scores, -np.inf).max(axis=1)
  return (1 + np.sum((scores >= best[:, None]) & ~relevant, axis=1)).astype(np.int64)


def two_way_ranks(scores: np.ndarray, relevant: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Pessimistic 1-based ranks in both directions from a full text x video score matrix.

  T2V: query q's rank is 1 + the number of other videos scoring >= its relevant video. V2T: video v's
  rank is 1 + the number of queries outside R(v) (its own captions) scoring >= the best of R(v), so a
  video is a hit at K when any of its captions is in the top K. Ties count against the model.
  (`vidjax.evaluate.gallery_ranks` computes the same in bounded memory.)

  Args:
    scores: [Q, N]; relevant: int [Q], each query's video column.

  Returns:
    (t2v [Q], v2t [N]) int64, v2t = 0 for videos no query points at.
  """
  scores = no_nan(scores)
  relevant = np.asarray(relevant, np.int64)
  q, n = scores.shape if scores.ndim == 2 else (None, None)
  if q is None or relevant.shape != (q,) or (q and (relevant.min() < 0 or relevant.max() >= n)):
    raise ValueError(f"expected scores [Q, N] and relevant int [Q] in [0, N); got {np.shape(scores)}, "
                     f"{relevant.shape}")
  own = relevant[:, None] == np.arange(n)[None, :]
  gt = scores[np.arange(q), relevant]
  t2v = 1 + np.sum((scores >= gt[:, None]) & ~own, axis=1)
  best = np.full(n, -np.inf)
  np.maximum.at(best, relevant, gt)
  v2t = 1 + np.sum((scores >= best[None, :]) & ~own, axis=0)
  v2t[np.isneginf(best)] = 0
  return t2v.astype(np.int64), v2t.astype(np.int64)


def two_way_retrieval_metrics(scores: np.ndarray, relevant: np.ndarray,
                              ks: Sequence[int] = (1, 5, 10)) -> dict[str, float]:
  """{t2v_r1, t2v_r5, t2v_r10, t2v_mdr, t2v_mnr, v2t_...}: `retrieval_metrics` of `two_way_ranks` (with notes for a
  K no rank can exceed, `two_way_candidates`)."""
  t2v, v2t = two_way_ranks(scores, relevant)
  t2v_most, v2t_most = two_way_candidates(np.shape(scores)[1], relevant)
  return joined(retrieval_metrics(t2v, "t2v_", ks, t2v_most, "videos of the gallery"),
                retrieval_metrics(v2t[v2t > 0], "v2t_", ks, v2t_most, "captions a video ranks at most"))


def joined(*parts: Mapping[str, Any]) -> dict:
  """Metrics dicts merged into one, their `NOTES` merged and last."""
  out = {k: v for p in parts for k, v in p.items() if k != NOTES}
  return with_notes(out, {k: v for p in parts for k, v in p.get(NOTES, {}).items()})


def two_way_candidates(num_videos: int, relevant: np.ndarray) -> tuple[int, int]:
  """The most a rank of `two_way_ranks` can be: T2V, the number of videos; V2T, 1 + the captions outside a video's
  own, for the video with the fewest (`relevant`: int [Q], each query's video)."""
  own = np.bincount(np.asarray(relevant, np.int64), minlength=num_videos)
  return num_videos, 1 + len(relevant) - int(own[own > 0].min()) if own.any() else 1


def candidate_ranks(scores: np.ndarray, relevant: np.ndarray) -> np.ndarray:
  """Pessimistic 1-based ranks within each query's own K scored candidates (a second stage's view).

  Rank = 1 + the number of non-relevant candidates scoring >= the best relevant one (ties count
  against the model, as `two_way_ranks`); a query with no relevant candidate gets K + 1, a miss at
  every cut-off <= K.

  Args:
    scores: [Q, K]; relevant: bool [Q, K], True where the candidate is relevant to the query.

  Returns:
    int64 [Q].
  """
  scores, relevant = no_nan(scores), np.asarray(relevant, bool)
  if scores.ndim != 2 or relevant.shape != scores.shape:
    raise ValueError(f"expected scores [Q, K] and relevant [Q, K], got {scores.shape} and {relevant.shape}")
  best = np.where(relevant, scores, -np.inf).max(axis=1)
  ranks = 1 + np.sum((scores >= best[:, None]) & ~relevant, axis=1)
  return np.where(relevant.any(axis=1), ranks, scores.shape[1] + 1).astype(np.int64)


def recall_from_ranked(ids: np.ndarray, relevant: np.ndarray, ks: Sequence[int] = (1, 5, 10),
                       corpus: int | None = None) -> dict[str, float]:
  """R@K (%) of ranked ids: ids [Q, K] best first, relevant [Q] -> {"r1": ..., "r5": ..., ...}.

  A query is a hit at k when its relevant id is among its first k ids (a recall stage's scores
  have already broken ties). `corpus`: the number of items ranked; each R@K with K >= it gets a note.
  """
  ids, relevant = np.asarray(ids), np.asarray(relevant)
  if ids.ndim != 2 or relevant.shape != (ids.shape[0],):
    raise ValueError(f"expected ids [Q, K] and relevant [Q], got {ids.shape} and {relevant.shape}")
  if max(ks) > ids.shape[1]:
    raise ValueError(f"ks={tuple(ks)} exceed the K={ids.shape[1]} ranked ids")
  hit = ids == relevant[:, None]
  first = np.where(hit.any(axis=1), np.argmax(hit, axis=1) + 1, ids.shape[1] + 1)
  out = {f"r{k}": float(100.0 * np.mean(first <= k)) if first.size else float("nan") for k in ks}
  return with_notes(out, recall_notes(ks, corpus, what="items of the corpus") if first.size else {})


def confusion_rates(kinds: np.ndarray, k: int = 10) -> dict[str, float]:
  """State / identity confusion of ranked lists (the composed stack's corpus-scale CVR).

  Args:
    kinds: int [Q, K] the negative-type code (`NEG_TYPE_CODES`) of every ranked result, best first.
    k: the top k results counted (k <= K).

  Returns:
    {"state_confusion", "ident_confusion"}: % of the top-k slots, over all queries, that hold a state
    negative (the query's own video at another step) / an identity negative (the right step in another video).
  """
  kinds = np.asarray(kinds)
  if kinds.ndim != 2 or not 1 <= k <= kinds.shape[1]:
    raise ValueError(f"expected kinds [Q, K] with 1 <= k <= K, got shape {kinds.shape} and k={k}")
  top = kinds[:, :k]
  return {"state_confusion": float(100.0 * np.mean(top == STATE)) if top.size else float("nan"),
          "ident_confusion": float(100.0 * np.mean(top == IDENTITY)) if top.size else float("nan")}


# ----------------------------------------------------------------------------- pairs and triplets


def binary_accuracy(scores: np.ndarray) -> dict[str, float]:
  """Pairwise preference: scores [Q, 2] with column 0 the positive -> {"acc": %, "n": Q}.

  A pair counts only when the positive scores strictly higher (ties count against the model).
  """
  scores = np.asarray(scores, np.float64)
  if scores.ndim != 2 or scores.shape[1] != 2:
    raise ValueError(f"binary scores must be [Q, 2] (positive, negative), got {scores.shape}")
  ok = scores[:, 0] > scores[:, 1]
  return {"acc": float(100.0 * ok.mean()) if ok.size else float("nan"), "n": int(ok.size)}


def comp_metrics(scores_by_type: dict[str, np.ndarray]) -> dict[str, float]:
  """VideoComp binary accuracy per disruption type and the comprehensive score (§3.4).

  Args:
    scores_by_type: {type: scores [Q_type, 2]} with column 0 the positive text (ties count against).

  Returns:
    {type: accuracy %, ..., "all": the product of the per-type accuracies (as fractions), in %}.
  """
  out = {t: binary_accuracy(s)["acc"] for t, s in scores_by_type.items()}
  out["all"] = float(100.0 * np.prod([a / 100.0 for a in out.values()])) if out else float("nan")
  return out


def hierarchy_accuracy(scores: np.ndarray, levels: np.ndarray, valid: np.ndarray | None = None,
                       groups: np.ndarray | None = None) -> dict[str, float]:
  """How well scores order candidates by disruption level (VideoComp's hierarchy, eq. 2), per group then averaged.

  Each row is one query (e.g. one video input and its texts); every pair of a row's valid candidates at different
  levels counts, and is right when the less disrupted candidate (lower level) scores strictly higher (ties count
  against). Pairs never cross rows. A group pools the pairs of its rows (e.g. VideoComp: a test video's full input
  and its seg-mismatch crop) and scores the share of them ordered right; the score is the mean over groups.

  Args:
    scores: [R, K] higher = better (e.g. sim(video, text) for the positive and its disrupted texts).
    levels: [K] or [R, K] disruption level of each candidate (the positive 0; equal levels are not ordered).
    valid: [R, K] 1 = the candidate exists; None = all.
    groups: [R] group id of each row (any integers or strings); None = each row its own group.

  Returns:
    {"acc": mean over groups of the share of their pairs ordered right, in % (NaN when no group has a pair),
     "n": groups with at least one pair (the others are left out)}.
  """
  scores = np.asarray(scores, np.float64)
  if scores.ndim != 2:
    raise ValueError(f"scores must be [R, K], got shape {scores.shape}")
  lv = np.broadcast_to(np.asarray(levels), scores.shape)
  ok = np.ones(scores.shape, bool) if valid is None else np.asarray(valid) > 0
  if ok.shape != scores.shape:
    raise ValueError(f"valid must be {scores.shape} like scores, got {ok.shape}")
  if groups is None:
    gid = np.arange(scores.shape[0])
  else:
    groups = np.asarray(groups)
    if groups.shape != scores.shape[:1]:
      raise ValueError(f"groups must be [{scores.shape[0]}], one id per row of scores, got {groups.shape}")
    _, gid = np.unique(groups, return_inverse=True)
    gid = gid.reshape(-1)
  # [R, i, j]: i is less disrupted than j and both exist.
  pairs = (lv[:, :, None] < lv[:, None, :]) & ok[:, :, None] & ok[:, None, :]
  right = pairs & (scores[:, :, None] > scores[:, None, :])
  n = np.bincount(gid, pairs.sum(axis=(1, 2)))
  hits = np.bincount(gid, right.sum(axis=(1, 2)))
  has = n > 0
  share = hits[has] / n[has]
  return {"acc": float(100.0 * share.mean()) if has.any() else float("nan"), "n": int(has.sum())}


# The six relative orders of (main M, temporal negative T, semantic negative S), best first.
TRIPLET_ORDERS = ("MTS", "MST", "TMS", "SMT", "TSM", "STM")


def triplet_metrics(scores: np.ndarray) -> dict:
  """GenState-AI triplet metrics (§4.3) from scores [Q, 3 + n]: columns main, temporal negative,
  semantic negative, then n distractors.

  Returns:
    {"r1", "r5", "r10": % of queries whose main ranks within k of the whole pool (pessimistic
     ties), "acc_temp": % main > temporal, "acc_sem": % main > semantic, "acc_tri": % both,
     "order_histogram": {order: number of queries} over `TRIPLET_ORDERS`, "n": Q; `NOTES` for each R@k with k >=
     the 3 + n pool}. Ties count against the model: main loses every tie; a tie between the two negatives puts T
    before S.
  """
  scores = no_nan(scores, "triplet scores")
  if scores.ndim != 2 or scores.shape[1] < 3:
    raise ValueError(f"triplet scores must be [Q, 3 + n] (main, temporal, semantic, distractors...), "
                     f"got {scores.shape}")
  ranks = rank_of_target(scores, np.zeros(scores.shape[0], np.int64))
  m, t, s = scores[:, 0], scores[:, 1], scores[:, 2]
  pct = lambda ok: float(100.0 * np.mean(ok)) if ok.size else float("nan")  # noqa: E731
  # Position of each element in the best-first order under the tie rules above.
  m_pos = (t >= m).astype(int) + (s >= m)
  t_pos = (t < m).astype(int) + (s > t)
  s_pos = (s < m).astype(int) + (t >= s)
  names = np.array(["M", "T", "S"])
  orders = ["".join(names[np.argsort([a, b, c], kind="stable")]) for a, b, c in zip(m_pos, t_pos, s_pos)]
  out = {
      **{f"r{k}": pct(ranks <= k) for k in (1, 5, 10)},
      "acc_temp": pct(m > t), "acc_sem": pct(m > s), "acc_tri": pct((m > t) & (m > s)),
      "order_histogram": {o: int(sum(x == o for x in orders)) for o in TRIPLET_ORDERS},
      "n": int(scores.shape[0]),
  }
  return with_notes(out, recall_notes((1, 5, 10), scores.shape[1], what="videos of each query's pool") if len(scores)
                    else {})


def pool_triplet_metrics(parts: Sequence[Mapping[str, Any]]) -> dict:
  """`triplet_metrics` of several query sets scored in their own pools (e.g. GenState's subsets, §5.1) as
  one: percentages averaged with weights n, histograms summed -- what `triplet_metrics` gives per query; a note of
  a part is kept, saying how many of the queries it holds for."""
  parts = [p for p in parts if p["n"]]
  if not parts:
    raise ValueError("pool_triplet_metrics: no queries")
  n = sum(p["n"] for p in parts)
  out = {k: float(sum(p[k] * p["n"] for p in parts) / n) for k in ("r1", "r5", "r10", "acc_temp", "acc_sem", "acc_tri")}
  out["order_histogram"] = {o: int(sum(p["order_histogram"][o] for p in parts)) for o in TRIPLET_ORDERS}
  out["n"] = n
  notes: dict[str, list] = {}
  for p in parts:
    for key, note in p.get(NOTES, {}).items():
      notes.setdefault(key, []).append((p["n"], note))
  def joined(held):
    count, text = sum(c for c, _ in held), "; ".join(dict.fromkeys(note for _, note in held))
    return text if count == n else f"{count} of the {n} queries: {text}"

  return with_notes(out, {key: joined(held) for key, held in notes.items()})


def codebook_health(codes: np.ndarray, num_codes: int) -> dict:
  """Per-layer code usage of semantic IDs (GRDR §3.2's codebooks), and full-ID collisions.

  Args:
    codes: int [..., M], every semantic ID (e.g. [V, N_v, M] for V videos of N_v views).
    num_codes: K.

  Returns:
    {"layers": [{"used": codes used at least once, "usage": used / K (fraction), "dead": K - used,
    "perplexity": exp(entropy of the code frequencies), K when uniform, 1 when one code}, ...],
    "ids": number of IDs, "distinct_ids": distinct IDs, "colliding_ids": distinct IDs held by
    more than one of the given rows}. Collisions are the failure users of semantic IDs report most.
  """
  codes = np.asarray(codes)
  if codes.ndim < 1 or codes.shape[-1] < 1 or not np.issubdtype(codes.dtype, np.integer):
    raise ValueError(f"codebook_health: codes must be an integer array [..., M], got {codes.dtype} {codes.shape}")
  flat = codes.reshape(-1, codes.shape[-1])
  if flat.size and (flat.min() < 0 or flat.max() >= num_codes):
    raise ValueError(f"codebook_health: codes outside [0, {num_codes})")
  layers = []
  for m in range(flat.shape[1]):
    count = np.bincount(flat[:, m], minlength=num_codes).astype(np.float64)
    p = count[count > 0] / count.sum()
    used = int(np.sum(count > 0))
    layers.append({"used": used, "usage": used / num_codes, "dead": num_codes - used,
                   "perplexity": float(np.exp(-np.sum(p * np.log(p))))})
  _, per_id = np.unique(flat, axis=0, return_counts=True)
  return {"layers": layers, "ids": int(flat.shape[0]), "distinct_ids": int(per_id.size),
          "colliding_ids": int(np.sum(per_id > 1))}
