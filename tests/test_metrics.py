"""Tests for vidjax/metrics.py: CVR metrics vs. explicit NumPy loops, ties, errors."""
import numpy as np
import pytest

from vidjax import metrics

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
  r = metrics.recall_at_k(scores, target, (1, 3, 10))
  for k in (1, 3, 10):
    assert r[f"R@{k}"] == pytest.approx(100 * np.mean(want_ranks <= k))
  assert r["R@10"] == 100.0


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
