"""Tests for vidjax/evaluate.py: the generic evaluators against straightforward NumPy computations."""
import numpy as np
import pytest

from vidjax import evaluate
from vidjax import metrics

# The evaluators' scores and ranks are compared with NumPy brute force, ties included: they hold at full float32
# only, which a GPU (TF32 by default) or a TPU (one bf16 pass) computes when asked (tests/conftest.py).
pytestmark = pytest.mark.highest_precision


def _np_gallery_ranks(S, relevant):
  """Brute force over the full score matrix S [Q, N] (the definition in gallery_ranks)."""
  q, n = S.shape
  t2v = np.array([1 + sum(1 for g in range(n) if g != relevant[i] and S[i, g] >= S[i, relevant[i]])
                  for i in range(q)])
  v2t = np.zeros(n, np.int64)
  for v in range(n):
    own = [i for i in range(q) if relevant[i] == v]
    if own:
      best = max(S[i, v] for i in own)
      v2t[v] = 1 + sum(1 for i in range(q) if relevant[i] != v and S[i, v] >= best)
  return t2v, v2t


class _RecordingDot:
  """Dot-product scorer over a shared gallery that records every block it is given."""

  def __init__(self):
    self.shapes = []

  def score(self, batch):
    self.shapes.append((batch["text"].shape, batch["candidates"].shape))
    return batch["text"] @ batch["candidates"].T


@pytest.mark.parametrize("seed,qc,gc", [(0, 7, 5), (1, 64, 64), (2, 3, 11)])
def test_gallery_ranks_match_brute_force_with_ties_and_several_captions(seed, qc, gc):
  rng = np.random.default_rng(seed)
  n, d = 23, 4
  relevant = np.concatenate([np.arange(n - 3), rng.integers(0, n - 3, size=17)])  # 3 videos without captions
  rng.shuffle(relevant)
  # Small integers: many exact ties between scores.
  gallery = rng.integers(-2, 3, size=(n, d)).astype(np.float32)
  queries = rng.integers(-2, 3, size=(relevant.size, d)).astype(np.float32)
  scorer = _RecordingDot()
  t2v, v2t = evaluate.gallery_ranks(scorer, {"text": queries}, {"candidates": gallery}, relevant,
                                    query_chunk=qc, gallery_chunk=gc)
  want_t2v, want_v2t = _np_gallery_ranks(queries @ gallery.T, relevant)
  np.testing.assert_array_equal(t2v, want_t2v)
  np.testing.assert_array_equal(v2t, want_v2t)
  # Bounded memory: every call is one fixed-size block; the gallery is never copied per query.
  assert set(scorer.shapes) == {((qc, d), (gc, d))}
  out = evaluate.evaluate_gallery(scorer, {"text": queries}, {"candidates": gallery}, relevant,
                                  query_chunk=qc, gallery_chunk=gc)
  assert out["v2t_videos"] == n - 3
  assert out["t2v_r1"] == pytest.approx(100 * np.mean(want_t2v == 1))
  assert out["v2t_mdr"] == pytest.approx(np.median(want_v2t[want_v2t > 0]))
  assert out["t2v_mnr"] == pytest.approx(np.mean(want_t2v))


def test_cosine_scorer_gallery_and_pools():
  rng = np.random.default_rng(3)
  text, gallery = rng.normal(size=(9, 6)), rng.normal(size=(12, 6))
  unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
  scorer = evaluate.CosineScorer()
  np.testing.assert_allclose(scorer.score({"text": text, "candidates": gallery}), unit(text) @ unit(gallery).T,
                             atol=1e-5)
  pools = gallery[rng.integers(0, 12, size=(9, 4))]
  np.testing.assert_allclose(scorer.score({"text": text, "candidates": pools}),
                             np.einsum("qd,qcd->qc", unit(text), unit(pools)), atol=1e-5)
  relevant = np.arange(9)
  t2v, _ = evaluate.gallery_ranks(scorer, {"text": text}, {"candidates": gallery}, relevant,
                                  query_chunk=4, gallery_chunk=5)
  want, _ = _np_gallery_ranks(unit(text) @ unit(gallery).T, relevant)
  np.testing.assert_array_equal(t2v, want)


def test_chunked_pads_and_compiles_once():
  traces = []

  def fn(params, batch):
    traces.append(1)  # Python side effect: once per trace
    return batch["text"] * params

  scorer = evaluate.JitScorer(fn, 2.0)
  x = np.arange(11, dtype=np.float32)[:, None]
  out = evaluate.chunked(scorer.score, {"text": x}, chunk=4)
  np.testing.assert_array_equal(out, 2 * x)
  evaluate.chunked(scorer.score, {"text": x[:5]}, chunk=4)
  assert len(traces) == 1
  with pytest.raises(ValueError, match="leading dimension"):
    evaluate.chunked(scorer.score, {"text": x, "other": x[:3]}, chunk=4)


def test_binary_and_triplet_evaluators_feed_pools_to_the_metrics():
  rng = np.random.default_rng(4)
  text = rng.normal(size=(13, 5))
  pairs, triplets = rng.normal(size=(13, 2, 5)), rng.normal(size=(13, 6, 5))
  dot = lambda b: np.einsum("qd,qcd->qc", b["text"], b["candidates"])  # noqa: E731
  got = evaluate.evaluate_binary(dot, {"text": text, "candidates": pairs}, chunk=4)
  assert got == metrics.binary_accuracy(np.einsum("qd,qcd->qc", text, pairs))
  got = evaluate.evaluate_triplets(dot, {"text": text, "candidates": triplets}, chunk=5)
  assert got == metrics.triplet_metrics(np.einsum("qd,qcd->qc", text, triplets))


def test_evaluate_ranked_uses_the_retrievers_ids():
  class Exact:
    def __init__(self, gallery):
      self.gallery = gallery

    def retrieve(self, queries, k):
      s = queries["text"] @ self.gallery.T
      ids = np.argsort(-s, axis=1, kind="stable")[:, :k]
      return ids, np.take_along_axis(s, ids, axis=1)

  rng = np.random.default_rng(5)
  gallery, text = rng.normal(size=(30, 4)), rng.normal(size=(17, 4))
  relevant = rng.integers(0, 30, size=17)
  got = evaluate.evaluate_ranked(Exact(gallery), {"text": text}, relevant, k=10, chunk=6)
  ranks = 1 + np.array([np.sum(text[i] @ gallery.T > text[i] @ gallery[relevant[i]]) for i in range(17)])
  assert got == {f"r{k}": pytest.approx(100 * np.mean(ranks <= k)) for k in (1, 5, 10)}
  with pytest.raises(ValueError, match="exceed"):
    evaluate.evaluate_ranked(Exact(gallery), {"text": text}, relevant, k=3)


def test_format_table():
  rows = {"Zero-Shot": {"acc": 25.034, "mnr": 3.6, "state_acc": 45.5, "ident_acc": 28.9},
          "CAST": {"acc": 44.77, "mnr": 2.15, "state_acc": float("nan")}}
  text = evaluate.format_table(rows, "CVR results", synthetic=True)
  lines = text.splitlines()
  assert "SYNTHETIC" in lines[0] and "CVR results" in lines[0]
  assert lines[1].split("|")[0].strip() == "Method" and "Ident. Acc." in lines[1]
  assert "25.03" in lines[3] and "44.77" in lines[4]
  assert lines[4].rstrip().endswith("-") and "nan" in lines[4]
  assert len({len(x) for x in lines[1:]}) == 1  # aligned columns
  assert "SYNTHETIC" not in evaluate.format_table(rows, "CVR results", synthetic=False)
  # R@1 / R@5 / R@10 keys shown side by side get one naming (the stack's table once read "r1 | R@5 | r10")
  ranks = evaluate.format_table({"m": {"r1": 1.0, "r5": 2.0, "r10": 3.0}}, "t", True, ["r1", "r5", "r10"]).splitlines()[1]
  assert [c.strip() for c in ranks.split("|")] == ["Method", "R@1", "R@5", "R@10"]




# ---------------------------------------------------------------------------------------------- VideoComp


def test_evaluate_comp_matches_numpy_for_video_and_text_query_scorers():
  """The same accuracies whether a scorer takes the video as query (dual encoder) or the text (CAST)."""
  from vidjax.scorers import cast as cast_scorers
  rng = np.random.default_rng(0)
  q, d = 37, 8
  inputs, pools, expected = {}, {}, {}
  for kind in ("temp_reorder", "action_replace", "seg_mismatch"):
    video, pos, neg = (rng.normal(size=(q, d)).astype(np.float32) for _ in range(3))
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    s_pos, s_neg = np.sum(unit(video) * unit(pos), -1), np.sum(unit(video) * unit(neg), -1)
    expected[kind] = 100.0 * np.mean(s_pos > s_neg)
    pools[kind] = {"video": video, "candidates": np.stack([pos, neg], axis=1)}
    text_query = lambda t: {"text": t, "history": np.zeros((q, 1, d), np.float32),  # noqa: E731
                            "history_mask": np.zeros((q, 1), np.float32), "candidates": video[:, None]}
    inputs[kind] = {"positive": text_query(pos), "negative": text_query(neg)}
  want = {**expected, "all": 100.0 * np.prod([a / 100.0 for a in expected.values()])}
  for scorer, x in ((evaluate.CosineScorer("video"), pools), (cast_scorers.ZeroShotScorer(), inputs)):
    got = evaluate.evaluate_comp(scorer, x, chunk=16)
    assert got.keys() == want.keys()
    for k in want:
      np.testing.assert_allclose(got[k], want[k], rtol=1e-6)
  with pytest.raises(ValueError, match=r"expected scores \[Q, 2\]"):
    evaluate.evaluate_comp(evaluate.CosineScorer("video"), {"temp_reorder": {**pools["temp_reorder"],
                                                                             "candidates": pools["temp_reorder"]["candidates"][:, :1]}})


def test_a_small_gallery_notes_its_recall_at_k_in_the_metrics_the_tables_and_the_comparison():
  """Issue 62: 4 videos, R@5 and R@10 are 100 whatever the scores: each comes with a note, which `rounded` (what a
  method keeps), `format_table` (marked *n, the note under the table) and `Model.evaluate` carry."""
  from vidjax import metrics
  rng = np.random.default_rng(0)
  videos = rng.normal(size=(4, 8)).astype(np.float32)
  text = rng.normal(size=(4, 8)).astype(np.float32)  # scores unrelated to the answers
  out = evaluate.evaluate_gallery(evaluate.CosineScorer(), {"text": text}, {"candidates": videos}, np.arange(4))
  assert out["t2v_r5"] == out["t2v_r10"] == 100.0
  assert set(out[metrics.NOTES]) == {"t2v_r5", "t2v_r10", "v2t_r5", "v2t_r10"}
  kept = evaluate.rounded({k: v for k, v in out.items() if k != "v2t_videos"}, 4)
  assert kept[metrics.NOTES] == out[metrics.NOTES] and kept["t2v_r1"] == round(out["t2v_r1"], 4)
  assert evaluate.rounded(out, 2, ["t2v_r1", "t2v_r10"], prefix="x_")[metrics.NOTES] == {
      "x_t2v_r10": out[metrics.NOTES]["t2v_r10"]}
  table = evaluate.format_table({"cosine": kept}, "R@K", False, ["t2v_r1", "t2v_r5", "t2v_r10"])
  lines = table.splitlines()
  assert "100.00 *1" in lines[3] and "100.00 *2" in lines[3], table
  assert lines[4].startswith("*1 t2v_r5: K=5 >= the 4 videos of the gallery: a hit whatever the scores"), table
  model = evaluate.dual_encoder("enc", "space", lambda keys: text[keys], lambda keys: videos[keys])
  cell = model.evaluate(evaluate.Benchmark("R@K", "gallery", "space", ([0, 1, 2, 3], [0, 1, 2, 3], np.arange(4))))
  assert cell["t2v_r10"] == 100.0 and set(cell[metrics.NOTES]) == {"t2v_r5", "t2v_r10"}
