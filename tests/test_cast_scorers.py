"""Tests for vidjax/scorers/cast.py: CAST scorers vs. NumPy, chunked CVR evaluation, ensemble grid, reranking."""
import numpy as np
import pytest

from vidjax import evaluate
from vidjax import metrics
from vidjax.scorers import cast as cast_scorers

# The scorers are compared with NumPy at 1e-5: they hold at full float32 only, which a GPU (TF32 by default) or a
# TPU (one bf16 pass) computes when asked (tests/conftest.py).
pytestmark = pytest.mark.highest_precision

Q, L, C, D = 10, 3, 6, 8
TRACES = {"predict": 0, "score": 0}


def _toy_predict(params, text, history, history_mask):
  """A stand-in next-state predictor: v̂ = W q + (last slot if real)."""
  TRACES["predict"] += 1  # Python side effect: runs once per trace/compile
  return text @ params["w"] + history[:, -1] * history_mask[:, -1:]


def _toy_scores(params, text, history, history_mask, candidates):
  TRACES["score"] += 1
  return params["s"] * (text[:, None, :] * candidates).sum(-1)


def _np_predict(params, text, history, mask):
  return text @ params["w"] + history[:, -1] * mask[:, -1:]


def _unit(x):
  n = np.linalg.norm(x)
  return x / n if n > 1e-6 else np.zeros_like(x)


def _np_sim(x, cands):
  out = np.zeros(cands.shape[:2])
  for q in range(cands.shape[0]):
    for c in range(cands.shape[1]):
      out[q, c] = _unit(x[q]) @ _unit(cands[q, c])
  return out


def _np_last(history, mask):
  out = np.zeros((history.shape[0], history.shape[2]))
  for q in range(history.shape[0]):
    real = [i for i in range(history.shape[1]) if mask[q, i] > 0]
    if real:
      out[q] = history[q, real[-1]]
  return out


def _arrays(seed, q=Q):
  rng = np.random.default_rng(seed)
  mask = np.zeros((q, L), np.float32)
  for i in range(q):
    n = i % (L + 1)
    if n:
      mask[i, -n:] = 1
  target = rng.integers(0, C, size=q)
  types = rng.integers(1, 4, size=(q, C))
  types[np.arange(q), target] = metrics.GT
  return {"text": rng.normal(size=(q, D)).astype(np.float32),
          "history": (rng.normal(size=(q, L, D)) * mask[..., None]).astype(np.float32),
          "history_mask": mask,
          "candidates": rng.normal(size=(q, C, D)).astype(np.float32),
          "target_index": target, "neg_types": types}


PARAMS = {"w": np.random.default_rng(0).normal(size=(D, D)).astype(np.float32),
          "s": np.float32(2.0)}


def _queries(a):
  return {k: a[k] for k in cast_scorers.QUERY_KEYS}


def test_scorers_match_numpy():
  a = _arrays(0)
  qs, cands = _queries(a), a["candidates"]
  A = _np_sim(a["text"], cands)
  Bv = _np_sim(_np_last(a["history"], a["history_mask"]), cands)
  Cp = _np_sim(_np_predict(PARAMS, a["text"], a["history"], a["history_mask"]), cands)
  np.testing.assert_allclose(cast_scorers.ZeroShotScorer().score({**qs, "candidates": cands}), A, atol=1e-5)
  np.testing.assert_allclose(cast_scorers.LateFusionHeuristicScorer(0.3).score({**qs, "candidates": cands}),
                             A + 0.3 * Bv, atol=1e-5)
  pred = cast_scorers.PredictorScorer(_toy_predict, PARAMS)
  np.testing.assert_allclose(pred.score({**qs, "candidates": cands}), Cp, atol=1e-5)
  ens = cast_scorers.EnsembleScorer(pred, w_v=0.2, w_p=0.7)
  np.testing.assert_allclose(ens.score({**qs, "candidates": cands}), A + 0.2 * Bv + 0.7 * Cp, atol=1e-5)
  learned = cast_scorers.LateFusionLearnedScorer(_toy_scores, PARAMS)
  want = 2.0 * np.einsum("qd,qcd->qc", a["text"], cands)
  np.testing.assert_allclose(learned.score({**qs, "candidates": cands}), want, rtol=1e-5)


def test_evaluate_cvr_chunks_compile_once_and_match_unchunked():
  a = _arrays(1, q=11)
  pred = cast_scorers.PredictorScorer(_toy_predict, PARAMS)
  before = TRACES["predict"]
  m4 = evaluate.evaluate_cvr(pred, a, chunk=4)  # chunks 4 + 4 + 3 (padded to 4)
  assert TRACES["predict"] == before + 1
  m4_again = evaluate.evaluate_cvr(pred, _arrays(2, q=5), chunk=4)  # same shape again
  assert TRACES["predict"] == before + 1 and m4_again["n"] == 5
  scores = _np_sim(_np_predict(PARAMS, a["text"], a["history"], a["history_mask"]),
                   a["candidates"])
  want = metrics.cvr_metrics(scores, a["target_index"], a["neg_types"])
  assert m4 == pytest.approx(want, nan_ok=True)
  assert evaluate.evaluate_cvr(pred, a, chunk=32) == pytest.approx(want, nan_ok=True)
  comps = cast_scorers.score_components(pred, a, chunk=4)
  assert set(comps) == {"A", "B", "C"} and comps["C"].shape == (11, C)
  np.testing.assert_allclose(comps["C"], scores, atol=1e-5)


def _brute_force(A, B, Cp, target, w_vs, w_ps):
  best = None
  for w_v in w_vs:
    for w_p in w_ps:
      S = A + w_v * B + w_p * Cp
      top1, rank_sum = 0, 0
      for q in range(S.shape[0]):
        rank = sum(1 for c in range(S.shape[1]) if S[q, c] >= S[q, target[q]])
        top1 += rank == 1
        rank_sum += rank
      if best is None or top1 > best[0] or (top1 == best[0] and rank_sum < best[1]):
        best = (top1, rank_sum, w_v, w_p)
  return best[2], best[3]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_select_ensemble_weights_matches_brute_force(seed):
  rng = np.random.default_rng(seed)
  A, B, Cp = (rng.normal(size=(25, C)) for _ in range(3))
  target = rng.integers(0, C, size=25)
  w_v, w_p, table = cast_scorers.select_ensemble_weights(A, B, Cp, target)
  assert len(table) == 6 * 14
  assert [r["w_v"] for r in table[::14]] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
  assert [r["w_p"] for r in table[:14]] == pytest.approx(np.arange(2, 16) / 10)
  want = _brute_force(A, B, Cp, target, cast_scorers.W_V_GRID, cast_scorers.W_P_GRID)
  assert (w_v, w_p) == pytest.approx(want)
  best_row = [r for r in table if (r["w_v"], r["w_p"]) == (w_v, w_p)][0]
  assert best_row["acc"] == max(r["acc"] for r in table)


def test_select_ensemble_weights_tie_breaks_to_first_grid_point():
  A = np.array([[1.0, 0.0]])
  zeros = np.zeros_like(A)
  w_v, w_p, _ = cast_scorers.select_ensemble_weights(A, zeros, zeros, np.array([0]))
  assert (w_v, w_p) == (0.0, 0.2)


def test_rerank_generated_returns_permutations():
  rng = np.random.default_rng(5)
  text, ctx, cands = rng.normal(size=D), rng.normal(size=(2, D)), rng.normal(size=(4, D))
  out = cast_scorers.rerank_generated(text, ctx, cands, cast_scorers.PredictorScorer(_toy_predict, PARAMS),
                                     w_v=0.3, w_p=1.0)
  for key in ("text_only", "cast"):
    assert sorted(out[key].tolist()) == [0, 1, 2, 3]
  A = _np_sim(text[None], cands[None])[0]
  B = _np_sim(ctx[-1:], cands[None])[0]
  Cp = _np_sim(_np_predict(PARAMS, text[None], ctx[None], np.ones((1, 2))), cands[None])[0]
  S = A + 0.3 * B + 1.0 * Cp
  np.testing.assert_array_equal(out["text_only"], np.argsort(-A))
  np.testing.assert_array_equal(out["cast"], np.argsort(-S))
  np.testing.assert_allclose(out["scores"]["S"], S, atol=1e-5)


def test_bad_inputs_raise_clear_errors():
  a = _arrays(0)
  bad = dict(a)
  del bad["history_mask"]
  with pytest.raises(KeyError, match="history_mask"):
    evaluate.evaluate_cvr(cast_scorers.ZeroShotScorer(), bad)
  bad = dict(a, target_index=a["target_index"][:3])
  with pytest.raises(ValueError, match="target_index"):
    evaluate.evaluate_cvr(cast_scorers.ZeroShotScorer(), bad)


def test_the_default_grid_is_the_configs():
  """`select_ensemble_weights`' default grid is the paper's, as configs/cast/common.py writes it."""
  from pathlib import Path  # pylint: disable=g-import-not-at-top
  from vidjax.experiments.common import load_config  # pylint: disable=g-import-not-at-top
  config = load_config(Path(__file__).resolve().parents[1] / "configs" / "cast_coin.py")
  assert tuple(config.eval.w_v_grid) == cast_scorers.W_V_GRID == (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
  assert tuple(config.eval.w_p_grid) == cast_scorers.W_P_GRID and len(cast_scorers.W_P_GRID) == 14
