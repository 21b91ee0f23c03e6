"""Tests for vidjax/metrics.py: CVR metrics vs. explicit NumPy loops, ties, errors."""
import numpy as np
import pytest

from vidjax import metrics

pytestmark = pytest.mark.highest_precision  # compares with NumPy or a reference (tests/conftest.py)

Q, C = 40, 10


def _data(seed, ties=False):
  rng = np.random.default_rng(seed)
  scores = rng.normal(size=(Q, C))
  if ties:
    scores = np.round(scores, 0)  # many exact ties
  target = rng.integers(0, C, size=Q)
  types = rng.integers(1, 4, size=(Q, C))
  types[np.arange(Q), target] = metrics.GT
  types[0, types[0] == metrics.STATE] = metrics.EASY  # a query without state negatives
  types[1, types[1] == metrics.IDENTITY] = metrics.EASY
  return scores, target, types


def _np_reference(scores, target, types):
  ranks, top1, s_ok, s_n, i_ok, i_n = [], 0, 0, 0, 0, 0
  for q in range(scores.shape[0]):
    gt = scores[q, target[q]]
    rank = 0
    for c in range(scores.shape[1]):
      if scores[q, c] >= gt:
        rank += 1
    ranks.append(rank)
    top1 += rank == 1
    for code, counter in ((metrics.STATE, "s"), (metrics.IDENTITY, "i")):
      negs = [scores[q, c] for c in range(scores.shape[1]) if types[q, c] == code]
      if negs:
        ok = all(gt > n for n in negs)
        if counter == "s":
          s_n += 1
          s_ok += ok
        else:
          i_n += 1
          i_ok += ok
  return {"acc": 100 * top1 / len(ranks), "mnr": sum(ranks) / len(ranks),
          "state_acc": 100 * s_ok / s_n, "ident_acc": 100 * i_ok / i_n,
          "n": len(ranks), "n_state": s_n, "n_ident": i_n}, np.array(ranks)


@pytest.mark.parametrize("seed,ties", [(0, False), (1, True), (2, True)])
def test_cvr_metrics_match_numpy_loops(seed, ties):
  scores, target, types = _data(seed, ties)
  want, want_ranks = _np_reference(scores, target, types)
  got = metrics.cvr_metrics(scores, target, types)
  assert set(got) == set(want)
  for k in want:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-12, err_msg=k)
  np.testing.assert_array_equal(metrics.rank_of_target(scores, target), want_ranks)
  r = metrics.retrieval_metrics(metrics.rank_of_target(scores, target), ks=(1, 3, 10))
  for k in (1, 3, 10):
    assert r[f"r{k}"] == pytest.approx(100 * np.mean(want_ranks <= k))
  assert r["r10"] == 100.0


def test_ties_are_pessimistic():
  scores = np.zeros((2, 4))
  target = np.array([0, 3])
  types = np.array([[0, 1, 2, 3], [1, 2, 3, 0]])
  m = metrics.cvr_metrics(scores, target, types)
  assert m["acc"] == 0.0 and m["mnr"] == 4.0
  assert m["state_acc"] == 0.0 and m["ident_acc"] == 0.0
  scores[0, 0] = 1.0
  m = metrics.cvr_metrics(scores, target, types)
  assert m["acc"] == 50.0 and m["mnr"] == 2.5 and m["state_acc"] == 50.0


def test_no_negatives_of_a_type_gives_nan_and_zero_count():
  scores = np.array([[2.0, 1.0, 0.0]])
  m = metrics.cvr_metrics(scores, np.array([0]), np.array([[0, 3, 3]]))
  assert np.isnan(m["state_acc"]) and m["n_state"] == 0 and m["acc"] == 100.0


def test_errors_name_the_problem():
  with pytest.raises(ValueError, match="expected GT"):
    metrics.cvr_metrics(np.zeros((1, 3)), np.array([1]), np.array([[0, 1, 2]]))
  with pytest.raises(ValueError, match="target_index values"):
    metrics.rank_of_target(np.zeros((1, 3)), np.array([3]))
  with pytest.raises(ValueError, match="neg_types"):
    metrics.cvr_metrics(np.zeros((1, 3)), np.array([0]), np.zeros((1, 2), int))


# ------------------------------------------------------------------ retrieval, pairs, triplets


@pytest.mark.parametrize("seed", [0, 1])
def test_retrieval_metrics_match_loops(seed):
  ranks = np.random.default_rng(seed).integers(1, 30, size=57)
  got = metrics.retrieval_metrics(ranks, "t2v_")
  for k in (1, 5, 10):
    assert got[f"t2v_r{k}"] == pytest.approx(100.0 * sum(r <= k for r in ranks) / len(ranks))
  srt = sorted(ranks)
  assert got["t2v_mdr"] == pytest.approx((srt[28]))
  assert got["t2v_mnr"] == pytest.approx(sum(ranks) / len(ranks))
  with pytest.raises(ValueError, match="1-based"):
    metrics.retrieval_metrics(np.array([0, 1]))


def test_recall_from_ranked_matches_loop():
  rng = np.random.default_rng(2)
  ids = np.stack([rng.permutation(20)[:10] for _ in range(40)])
  relevant = rng.integers(0, 20, size=40)
  got = metrics.recall_from_ranked(ids, relevant)
  for k in (1, 5, 10):
    hits = sum(1 for q in range(40) if relevant[q] in list(ids[q, :k]))
    assert got[f"r{k}"] == pytest.approx(100.0 * hits / 40)


@pytest.mark.parametrize("seed", [0, 1])
def test_confusion_rates_match_loops(seed):
  rng = np.random.default_rng(seed)
  kinds = rng.integers(0, 4, size=(7, 12))
  got = metrics.confusion_rates(kinds, k=10)
  state = ident = 0
  for row in kinds:
    for code in row[:10]:
      state += code == metrics.STATE
      ident += code == metrics.IDENTITY
  assert got["state_confusion"] == pytest.approx(100.0 * state / 70)
  assert got["ident_confusion"] == pytest.approx(100.0 * ident / 70)
  with pytest.raises(ValueError, match="1 <= k <= K"):
    metrics.confusion_rates(kinds, k=13)


def test_binary_accuracy_ties_count_against():
  rng = np.random.default_rng(3)
  scores = rng.integers(0, 3, size=(50, 2)).astype(float)  # many ties
  got = metrics.binary_accuracy(scores)
  assert got["acc"] == pytest.approx(100.0 * sum(1 for a, b in scores if a > b) / 50) and got["n"] == 50


def _np_triplet(scores):
  out = {"acc_temp": 0, "acc_sem": 0, "acc_tri": 0, "r1": 0, "r5": 0, "r10": 0}
  hist = {o: 0 for o in metrics.TRIPLET_ORDERS}
  for row in scores:
    m, t, s = row[:3]
    out["acc_temp"] += m > t
    out["acc_sem"] += m > s
    out["acc_tri"] += (m > t) and (m > s)
    rank = sum(1 for x in row if x >= m)
    for k in (1, 5, 10):
      out[f"r{k}"] += rank <= k
    # Sort best first; ties: main last, then T before S.
    keyed = sorted([(m, 2, "M"), (t, 0, "T"), (s, 1, "S")], key=lambda e: (-e[0], e[1]))
    hist["".join(e[2] for e in keyed)] += 1
  n = len(scores)
  return {k: 100.0 * v / n for k, v in out.items()}, hist


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_triplet_metrics_match_loops_including_ties(seed):
  scores = np.random.default_rng(seed).integers(0, 4, size=(80, 14)).astype(float)
  got = metrics.triplet_metrics(scores)
  want, hist = _np_triplet(scores)
  for k, v in want.items():
    assert got[k] == pytest.approx(v), k
  assert got["order_histogram"] == hist
  assert sum(got["order_histogram"].values()) == len(scores)


@pytest.mark.parametrize("seed", [0, 1])
def test_cvr_top1_breakdown_matches_loop_with_pessimistic_ties(seed):
  rng = np.random.default_rng(seed)
  scores = rng.integers(0, 3, size=(60, 10)).astype(float)
  target = rng.integers(0, 10, size=60)
  types = rng.integers(1, 4, size=(60, 10))
  types[np.arange(60), target] = metrics.GT
  got = metrics.cvr_top1_breakdown(scores, target, types)
  rank = {metrics.IDENTITY: 0, metrics.EASY: 0, metrics.STATE: 1, metrics.GT: 2}  # worst first
  counts = {"top1_identity_inconsistent": 0, "top1_identity_consistent": 0, "top1_exact": 0}
  names = ["top1_identity_inconsistent", "top1_identity_consistent", "top1_exact"]
  for q in range(60):
    best = max(scores[q])
    worst = min(rank[types[q, c]] for c in range(10) if scores[q, c] == best)
    counts[names[worst]] += 1
  assert got == pytest.approx({k: 100.0 * v / 60 for k, v in counts.items()})
  assert sum(got.values()) == pytest.approx(100.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_way_retrieval_matches_loops_with_ties_and_several_captions(seed):
  rng = np.random.default_rng(seed)
  n_videos, q = 9, 30
  relevant = rng.integers(0, n_videos - 1, size=q)  # several captions per video; the last video has none
  scores = rng.integers(0, 4, size=(q, n_videos)).astype(float)  # coarse values: many ties
  t2v, v2t = metrics.two_way_ranks(scores, relevant)
  for i in range(q):
    gt = scores[i, relevant[i]]
    better = sum(1 for j in range(n_videos) if j != relevant[i] and scores[i, j] >= gt)
    assert t2v[i] == 1 + better
  for v in range(n_videos):
    mine = [i for i in range(q) if relevant[i] == v]
    if not mine:
      assert v2t[v] == 0
      continue
    best = max(scores[i, v] for i in mine)
    others = sum(1 for i in range(q) if i not in mine and scores[i, v] >= best)
    assert v2t[v] == 1 + others
  m = metrics.two_way_retrieval_metrics(scores, relevant)
  hit = lambda ranks, k: 100.0 * np.mean([r <= k for r in ranks])  # noqa: E731
  assert m["t2v_r5"] == pytest.approx(hit(t2v, 5)) and m["v2t_r1"] == pytest.approx(hit(v2t[v2t > 0], 1))
  assert m["v2t_mnr"] == pytest.approx(np.mean(v2t[v2t > 0])) and m["t2v_mdr"] == pytest.approx(np.median(t2v))


def test_best_relevant_ranks_matches_loops_with_ties():
  rng = np.random.default_rng(4)
  scores = rng.integers(0, 4, size=(12, 7)).astype(float)
  relevant = rng.random((12, 7)) < 0.3
  relevant[np.arange(12), rng.integers(0, 7, 12)] = True
  got = metrics.best_relevant_ranks(scores, relevant)
  for i in range(12):
    best = max(scores[i, j] for j in range(7) if relevant[i, j])
    assert got[i] == 1 + sum(1 for j in range(7) if not relevant[i, j] and scores[i, j] >= best)
  one = np.eye(7, dtype=bool)[[3, 1, 4]]  # one relevant item a row: two_way_ranks' T2V ranks
  single = metrics.two_way_ranks(scores[:3], np.array([3, 1, 4]))[0]
  assert (metrics.best_relevant_ranks(scores[:3], one) == single).all()
  with pytest.raises(ValueError, match="True in every row"):
    metrics.best_relevant_ranks(scores, np.zeros_like(relevant))


def test_comp_metrics_product_and_ties():
  rng = np.random.default_rng(0)
  scores = {t: rng.normal(size=(50, 2)) for t in ("temp_reorder", "action_replace", "seg_mismatch")}
  scores["seg_mismatch"][:5, 1] = scores["seg_mismatch"][:5, 0]  # ties count against the model
  out = metrics.comp_metrics(scores)
  acc = {t: 100.0 * np.mean(s[:, 0] > s[:, 1]) for t, s in scores.items()}
  for t, a in acc.items():
    assert out[t] == pytest.approx(a)
  assert out["all"] == pytest.approx(100.0 * np.prod([a / 100 for a in acc.values()]))


def test_pool_triplet_metrics_equals_one_computation_over_all_queries():
  rng = np.random.default_rng(5)
  a = rng.integers(0, 4, size=(30, 9)).astype(float)
  b = rng.integers(0, 4, size=(50, 9)).astype(float)
  got = metrics.pool_triplet_metrics([metrics.triplet_metrics(a), metrics.triplet_metrics(b)])
  want = metrics.triplet_metrics(np.concatenate([a, b]))  # same pool width, so one computation is the reference
  for k in ("r1", "r5", "r10", "acc_temp", "acc_sem", "acc_tri"):
    assert got[k] == pytest.approx(want[k]), k
  assert got["order_histogram"] == want["order_histogram"] and got["n"] == 80
  with pytest.raises(ValueError, match="no queries"):
    metrics.pool_triplet_metrics([])


@pytest.mark.parametrize("seed,per_group,grouped", [(0, False, False), (1, False, True), (2, True, False),
                                                     (3, True, True)])
def test_hierarchy_accuracy_matches_loops(seed, per_group, grouped):
  """Per group, the share of its rows' pairs at different levels ordered right (ties wrong), pooled over the
  group's rows (pairs never cross rows), averaged over groups; without group ids each row is a group."""
  rng = np.random.default_rng(seed)
  r, k = 30, 5
  scores = np.round(rng.normal(size=(r, k)), 1)  # some exact ties
  levels = np.sort(rng.integers(0, 3, size=(r, k)), axis=1) if per_group else np.array([0, 1, 1, 1, 2])
  valid = rng.random((r, k)) > 0.3
  valid[0] = False  # a row without a pair
  groups = np.array([f"v{i}" for i in rng.integers(0, 12, size=r)]) if grouped else None
  if grouped:
    groups[0] = "alone"  # a group without a pair is left out
  ids = groups if grouped else np.arange(r)
  right, total = {}, {}
  for row in range(r):
    lv = levels[row] if per_group else levels
    pairs = [(i, j) for i in range(k) for j in range(k) if valid[row, i] and valid[row, j] and lv[i] < lv[j]]
    right[ids[row]] = right.get(ids[row], 0) + sum(scores[row, i] > scores[row, j] for i, j in pairs)
    total[ids[row]] = total.get(ids[row], 0) + len(pairs)
  shares = [right[g] / total[g] for g in total if total[g]]
  got = metrics.hierarchy_accuracy(scores, levels, valid, groups)
  assert got["n"] == len(shares) < len(total)
  np.testing.assert_allclose(got["acc"], 100.0 * np.mean(shares), rtol=1e-12)
  # A perfect order scores 100, its reverse 0, a constant scorer 0 (ties count against).
  ordered = -np.tile(np.array([0, 1, 1, 1, 2.0]), (4, 1)) + 0.01 * np.array([0, 1, 2, 3, 0])
  assert metrics.hierarchy_accuracy(ordered, [0, 1, 1, 1, 2])["acc"] == 100.0
  assert metrics.hierarchy_accuracy(-ordered, [0, 1, 1, 1, 2], groups=[0, 0, 1, 1])["acc"] == 0.0
  assert metrics.hierarchy_accuracy(np.zeros((4, 5)), [0, 1, 1, 1, 2])["acc"] == 0.0
  assert np.isnan(metrics.hierarchy_accuracy(scores, np.zeros(k))["acc"])
  with pytest.raises(ValueError, match="groups"):
    metrics.hierarchy_accuracy(scores, levels, valid, groups=np.zeros(r - 1))


def test_hierarchy_accuracy_pools_a_videos_inputs():
  """VideoComp's shape: a test video's full input (P, TR, AR, SM absent, M: five pairs) and its seg-mismatch crop
  (P, SM: one pair) are one group, so the video scores its share of six pairs, not the mean of two rows."""
  levels = [0, 1, 1, 1, 2]
  scores = np.array([[0.9, 0.95, 0.5, 0.0, 0.1],   # video a, full: P > TR wrong; P > AR, P > M, TR > M, AR > M right
                     [0.6, 0.0, 0.0, 0.4, 0.0],    # video a, crop: P > SM right
                     [0.2, 0.3, 0.4, 0.0, 0.5],    # video b, full: every pair wrong
                     [0.1, 0.0, 0.0, 0.9, 0.0]])   # video b, crop: wrong
  valid = np.array([[1, 1, 1, 0, 1], [1, 0, 0, 1, 0], [1, 1, 1, 0, 1], [1, 0, 0, 1, 0]])
  got = metrics.hierarchy_accuracy(scores, levels, valid, groups=["a", "a", "b", "b"])
  assert got["n"] == 2 and got["acc"] == pytest.approx(100.0 * (5 / 6 + 0) / 2)
  per_row = metrics.hierarchy_accuracy(scores, levels, valid)
  assert per_row["n"] == 4 and per_row["acc"] == pytest.approx(100.0 * (4 / 5 + 1 + 0 + 0) / 4)


# ----------------------------------------------------------------------------- issue 62: R@K no rank can miss


def test_a_recall_at_k_of_at_least_the_candidates_is_noted_never_a_plain_100():
  r = metrics.retrieval_metrics(np.array([1, 3, 4]), "t2v_", candidates=4, what="videos of the gallery")
  assert r["t2v_r5"] == r["t2v_r10"] == 100.0 and set(r[metrics.NOTES]) == {"t2v_r5", "t2v_r10"}
  assert r[metrics.NOTES]["t2v_r5"] == ("K=5 >= the 4 videos of the gallery: a hit whatever the scores (100 by "
                                       "construction)")
  assert metrics.NOTES not in metrics.retrieval_metrics(np.array([1, 3, 4]), "t2v_", candidates=11)
  # Two ways: T2V ranks the 3 videos; V2T a video's captions against at most 1 + 4 others (two captions each here).
  two = metrics.two_way_retrieval_metrics(np.eye(6, 3), np.array([0, 0, 1, 1, 2, 2]))
  assert set(two[metrics.NOTES]) == {"t2v_r5", "t2v_r10", "v2t_r5", "v2t_r10"} and list(two)[-1] == metrics.NOTES
  assert "K=5 >= the 5 captions a video ranks at most" in two[metrics.NOTES]["v2t_r5"]
  ranked = metrics.recall_from_ranked(np.array([[3, 1, 2], [1, 2, 3]]), np.array([1, 3]), ks=(1, 3), corpus=3)
  assert ranked["r3"] == 100.0 and list(ranked[metrics.NOTES]) == ["r3"]


def test_triplet_pools_smaller_than_k_are_noted_and_pooled_with_their_share():
  small = metrics.triplet_metrics(np.random.default_rng(0).random((4, 5)))  # main, two negatives, 2 distractors
  assert small["r5"] == small["r10"] == 100.0 and set(small[metrics.NOTES]) == {"r5", "r10"}
  assert "K=5 >= the 5 videos of each query's pool" in small[metrics.NOTES]["r5"]
  large = metrics.triplet_metrics(np.random.default_rng(1).random((2, 12)))
  assert metrics.NOTES not in large
  pooled = metrics.pool_triplet_metrics([small, large])
  assert set(pooled[metrics.NOTES]) == {"r5", "r10"} and pooled[metrics.NOTES]["r5"].startswith("4 of the 6 queries: ")
  assert metrics.pool_triplet_metrics([small, small])[metrics.NOTES]["r5"] == small[metrics.NOTES]["r5"]


def test_nan_scores_and_impossible_ranks_are_refused():
  """A comparison with NaN is always False: a diverged model's NaN would rank its target first (R@1 100) or give a
  rank below 1, with no error. Ranks must be whole numbers no larger than the candidates."""
  nan = float("nan")
  with pytest.raises(ValueError, match="1 of 3 are NaN"):
    metrics.triplet_metrics([[nan, 2.0, 1.0]])
  with pytest.raises(ValueError, match="are NaN"):
    metrics.cvr_metrics([[nan, 1.0]], [0], [[0, 1]])
  with pytest.raises(ValueError, match="are NaN"):
    metrics.two_way_retrieval_metrics([[nan, 0.0], [0.0, 1.0]], [0, 1])
  with pytest.raises(ValueError, match="are NaN"):
    metrics.candidate_ranks([[nan, 0.1]], [[False, True]])
  assert list(metrics.candidate_ranks([[-np.inf, 0.1]], [[False, True]])) == [1]  # -inf padding stays allowed
  with pytest.raises(ValueError, match="ranks must be 1-based whole numbers"):
    metrics.retrieval_metrics(np.array([1.0, nan]))
  with pytest.raises(ValueError, match="a rank of 9 among 3"):
    metrics.retrieval_metrics(np.array([1, 9]), candidates=3)
