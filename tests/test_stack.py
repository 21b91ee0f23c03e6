"""vidjax.retrieval.Stack: recall -> rescoring stages, against a brute-force NumPy computation."""
import numpy as np
import pytest

from vidjax.retrieval import DenseIndex, Stack, Stage, TwoStage

# Every stage is compared with a brute-force NumPy computation: they hold at full float32 only, which a GPU (TF32 by
# default) or a TPU (one bf16 pass) computes when asked (tests/conftest.py).
pytestmark = pytest.mark.highest_precision


def _unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _world(seed=0, n=60, d=8, q=7):
  rng = np.random.default_rng(seed)
  corpus = rng.normal(size=(n, d)).astype(np.float32)
  queries = rng.normal(size=(q, d)).astype(np.float32)
  ids = np.array([f"v{i:02d}" for i in range(n)])
  proj = rng.normal(size=(d, d)).astype(np.float32)
  return corpus, queries, ids, proj


def _projected(proj):
  """A stage scoring cosine(query @ proj, candidate)."""
  return lambda b: np.einsum("qd,qkd->qk", _unit(b["text"] @ proj), _unit(b["candidates"]))


def test_two_stages_match_a_brute_force_reference():
  corpus, queries, ids, proj = _world()
  proj2 = np.eye(8, dtype=np.float32)[::-1]
  stack = Stack(DenseIndex(ids, corpus), 20, [Stage("a", _projected(proj), 12), Stage("b", _projected(proj2), 6)],
                query_batch=4)
  result = stack.search(queries, k=5)
  cu, qu = _unit(corpus), _unit(queries)
  for i in range(len(queries)):
    rows = np.argsort(-(cu @ qu[i]), kind="stable")[:20]
    a = cu[rows] @ _unit(queries[i] @ proj)
    rows = rows[np.argsort(-a, kind="stable")[:12]]
    b = cu[rows] @ _unit(queries[i] @ proj2)
    rows = rows[np.argsort(-b, kind="stable")[:6]]
    assert list(result.ids[i]) == list(ids[rows[:5]])
    assert list(result.stage_ids["b"][i]) == list(ids[rows])
    np.testing.assert_allclose(result.scores[i], np.sort(b)[::-1][:5], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result.stage_scores["b"][i], np.sort(b)[::-1][:6], rtol=1e-5, atol=1e-5)
    assert result.score_of("a", i, ids[rows[0]]) == pytest.approx(float(cu[rows[0]] @ _unit(queries[i] @ proj)), abs=1e-5)
    assert result.score_of("recall", i, ids[rows[0]]) == pytest.approx(float(cu[rows[0]] @ qu[i]), abs=1e-5)
  assert np.isnan(result.score_of("b", 0, "not-an-id"))
  assert {k: v.shape for k, v in result.stage_ids.items()} == {"recall": (7, 20), "a": (7, 12), "b": (7, 6)}
  assert set(result.latency_ms) == {"recall", "a", "b", "total"} and all(v >= 0 for v in result.latency_ms.values())


def test_one_stage_is_two_stage_and_no_stage_is_the_recall_alone():
  corpus, queries, ids, proj = _world(1)
  index = DenseIndex(ids, corpus)
  one = Stack(index, 15, [Stage("r", _projected(proj), 15)]).search(queries, 10)
  two = TwoStage(index, 15, _projected(proj)).search(queries, 10)
  assert (one.ids == two.ids).all() and np.allclose(one.scores, two.scores)
  alone = Stack(index, 10).search(queries, 10)
  rids, rscores = index.retrieve(queries, 10)
  assert (alone.ids == np.asarray(rids)).all() and np.allclose(alone.scores, rscores)
  nested = Stack(Stack(index, 15, [Stage("r", _projected(proj), 15)]), 10).search(queries, 10)
  assert (nested.ids == one.ids).all()  # a stack is a recall stage too


def test_excluded_ids_never_come_back_and_every_stage_still_gets_k_recall():
  corpus, queries, ids, proj = _world(3)
  index = DenseIndex(ids, corpus)
  plain = Stack(index, 10, [Stage("a", _projected(proj), 5)], query_batch=4)
  exclude = [list(index.retrieve(queries[i:i + 1], 3)[0][0]) if i % 2 else [] for i in range(len(queries))]
  result = plain.search(queries, 5, exclude=exclude)
  for i, gone in enumerate(exclude):  # = the same stack over the corpus without the excluded ids
    keep = ~np.isin(ids, gone)
    alone = Stack(DenseIndex(ids[keep], corpus[keep]), 10, [Stage("a", _projected(proj), 5)]).search(queries[i:i + 1], 5)
    assert list(result.ids[i]) == list(alone.ids[0]) and list(result.stage_ids["recall"][i]) == list(alone.stage_ids["recall"][0])
  tiny = Stack(DenseIndex(ids[:6], corpus[:6]), 5).search(queries[:1], 5, exclude=[list(ids[:3])])
  assert set(tiny.ids[0][:3]) == set(ids[3:6]) and np.isneginf(tiny.scores[0][3:]).all()
  with pytest.raises(ValueError, match="exclude has 1 rows for 7 queries"):
    plain.search(queries, 5, exclude=[[]])


def test_candidate_recall_per_stage():
  corpus, queries, ids, proj = _world(2)
  result = Stack(DenseIndex(ids, corpus), 30, [Stage("a", _projected(proj), 3)]).search(queries, 3)
  relevant = np.where(np.arange(len(queries)) % 2 == 0, result.stage_ids["a"][:, 2], result.stage_ids["recall"][:, 29])
  got = Stack.candidate_recall(result, relevant)
  in_a = [(relevant[i] in result.stage_ids["a"][i]) for i in range(len(queries))]
  assert got == {"recall": 100.0, "a": pytest.approx(100.0 * np.mean(in_a))}
  assert got["a"] < 100.0


def test_bad_stacks_get_one_clear_error():
  corpus, queries, ids, proj = _world(3)
  index = DenseIndex(ids, corpus)
  with pytest.raises(ValueError, match="stage 'a' keeps k=11; expected an integer in \\[1, 10\\]"):
    Stack(index, 10, [Stage("a", _projected(proj), 11)])
  with pytest.raises(ValueError, match="names must be unique"):
    Stack(index, 10, [Stage("a", _projected(proj), 5), Stage("a", _projected(proj), 5)])
  with pytest.raises(TypeError, match="retrieve"):
    Stack(object(), 10)
  with pytest.raises(ValueError, match="k must be an integer in \\[1, 5\\]"):
    Stack(index, 10, [Stage("a", _projected(proj), 5)]).search(queries, 6)
  bad = Stack(index, 10, [Stage("nan", lambda b: np.full(b["prior"].shape, np.nan), 5)])
  with pytest.raises(ValueError, match="Stack stage 'nan': the reranker returned NaN"):
    bad.search(queries, 5)


def test_the_index_format_takes_its_stage_kinds_from_the_reader(tmp_path):
  """`vidjax.retrieval.index` writes and checks the files; what a stage kind is comes from the reader's `Kinds`
  (`vidjax.search.KINDS` for the CLI): a kind the reader does not know is one clear error."""
  from vidjax import checkpoints  # pylint: disable=g-import-not-at-top
  from vidjax import search  # pylint: disable=g-import-not-at-top
  from vidjax.retrieval import index as index_format  # pylint: disable=g-import-not-at-top
  corpus, queries, ids, proj = _world()
  path = tmp_path / "index"
  path.mkdir()
  checkpoints.save_npz({"proj": proj}, path / "proj.npz")
  captions = [f"caption {i % 5}" for i in range(len(ids))]
  index_format.write_index(
      path, ids=list(ids), vectors=corpus, captions=captions, videos=[f"video {i // 3}" for i in range(len(ids))],
      text_captions=sorted(set(captions)), text_vectors=queries[:5], dataset="test", synthetic=True, backbone="b",
      text_encoder={"kind": "caption_lookup", "file": "texts.npz", "backbone": "b"},
      recall={"kind": "dense", "file": "corpus.npz", "k": 20, "backbone": "b"},
      stages=[{"name": "projected", "kind": "projection", "k": 12, "file": "proj.npz", "backbone": "b"}])
  built = []

  def projection(section, params, dim):
    built.append((section["name"], dim))
    return _projected(np.asarray(params["proj"]))

  index = index_format.StackIndex(path, index_format.Kinds(recalls={}, stages={"projection": projection}))
  result, stages = index.search("caption 3", k=5)
  assert built == [("projected", 8)] and stages == ["projected"]
  expected = Stack(DenseIndex(ids, corpus), 20, [Stage("projected", _projected(proj), 12)]).search(queries[3:4], 5)
  np.testing.assert_array_equal(result.ids, expected.ids)
  with pytest.raises(ValueError, match="stage 'projected' has unknown kind 'projection' .known: pair_reranker, "
                     "cast_ensemble"):
    search.open_index(path)


def test_a_vedje_stage_over_a_corpus_smaller_than_k_recall_masks_the_padding():
  """Issue 52: the recall stage pads with -inf (here: each query's context clips dropped from a corpus of exactly
  k_recall clips); the VEDJE stage scores the real pairs only (padding never reaches the reranker, in blocks of
  `pair_block`) and the padded candidates stay last with -inf."""
  import jax  # pylint: disable=g-import-not-at-top
  from vidjax.models import vedje as V  # pylint: disable=g-import-not-at-top
  from vidjax.models.bert import BertConfig  # pylint: disable=g-import-not-at-top
  from vidjax.scorers.vedje import VedjeScorer  # pylint: disable=g-import-not-at-top
  cfg = V.VedjeConfig(frames=2, tokens_per_frame=2, patches=3, visual_dim=4, max_text_len=6,
                      text=BertConfig(vocab_size=30, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32),
                      compressor_heads=2, compressor_mlp=32, predictor_heads=2, predictor_mlp=32, vtc_dim=4,
                      prior_hidden=4)
  scorer = VedjeScorer(cfg, V.init_params(V.JointReranker(cfg), jax.random.PRNGKey(0)), pair_block=4)
  corpus, queries, ids, _ = _world(n=6, q=3)
  rng = np.random.default_rng(1)
  caches = dict(zip(ids, rng.normal(size=(len(ids), cfg.cache_len, cfg.hidden_size)).astype(np.float32)))
  text = rng.integers(1, 30, size=(3, 6)).astype(np.int32)

  def batch_fn(rows, cand, prior):
    k = cand.shape[1]
    return {"input_ids": np.repeat(text[rows["row"]][:, None], k, 1), "attention_mask": np.ones((len(cand), k, 6), np.int32),
            "cache": np.stack([[caches[c] for c in row] for row in cand]), "prior": prior}

  stack = Stack(DenseIndex(ids, corpus), 6, [Stage("rerank", scorer, 6, batch_fn=batch_fn)], query_batch=2)
  exclude = [list(ids[:2]), list(ids[2:4]), []]
  result = stack.search({"text": queries, "row": np.arange(3)}, 6, exclude=exclude)
  for i, e in enumerate(exclude):
    assert np.isneginf(result.scores[i, len(ids) - len(e):]).all() and set(result.ids[i, len(ids) - len(e):]) == set(e)
    assert np.isfinite(result.scores[i, :len(ids) - len(e)]).all()
  # The real pairs score what they score without any padding around them.
  alone = Stack(DenseIndex(ids, corpus), 6, [Stage("rerank", scorer, 6, batch_fn=batch_fn)], query_batch=1)
  free = alone.search({"text": queries[2:], "row": np.array([2])}, 6)
  np.testing.assert_allclose(np.sort(free.scores[0]), np.sort(result.scores[2]), rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="NaN or Inf"):  # NaN is still a broken stage 1
    scorer.score({**batch_fn({"row": np.arange(1)}, ids[None, :2], np.zeros((1, 2), np.float32)),
                  "prior": np.array([[0.0, np.nan]], np.float32)})


def test_vedje_training_pairs_run_in_blocks_bounded_by_a_budget():
  """Issue 52: the stack's VEDJE stage at the paper's batch (64 x 64 joint passes a step) asked XLA for ~159 GB.
  A step's pairs now run in rematerialized blocks of `train_pairs` (from `vedje.train.memory_gb`): the same
  gradients (dropout off), XLA's temporary memory bounded by the block."""
  import jax  # pylint: disable=g-import-not-at-top
  from vidjax.methods.vedje import pair_bytes, train_pairs  # pylint: disable=g-import-not-at-top
  from vidjax.models import vedje as V  # pylint: disable=g-import-not-at-top
  from vidjax.models.bert import BertConfig  # pylint: disable=g-import-not-at-top

  def config(pairs):
    return V.VedjeConfig(frames=2, tokens_per_frame=2, patches=3, visual_dim=4, max_text_len=12, train_pairs=pairs,
                         text=BertConfig(vocab_size=30, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                         dropout_rate=0.0, attention_dropout_rate=0.0),
                         compressor_heads=2, compressor_mlp=32, predictor_heads=2, predictor_mlp=32, vtc_dim=4,
                         prior_hidden=4, decoder_dropout=0.0)
  n, budget = 96, 8 * pair_bytes(config(0))
  assert train_pairs(config(0), budget) == 8 and train_pairs(config(0), 1) == 1
  rng = np.random.default_rng(0)
  ids = rng.integers(1, 30, size=(n, 12)).astype(np.int32)
  mask = np.ones((n, 12), np.int32)
  cache = rng.normal(size=(n, 4, 32)).astype(np.float32)
  prior = rng.normal(size=(n,)).astype(np.float32)
  params = V.init_params(V.JointReranker(config(0)), jax.random.PRNGKey(0))

  def grad_fn(pairs):
    model = V.JointReranker(config(pairs))
    loss = lambda p: model.apply({"params": p}, ids, mask, cache, prior, False, method=model.score_pairs,  # noqa: E731
                                 rngs={"dropout": jax.random.PRNGKey(1)}).sum()
    return jax.jit(jax.grad(loss))

  whole, blocked = (grad_fn(p).lower(params).compile() for p in (0, train_pairs(config(0), budget)))  # compiled once
  for a, b in zip(jax.tree_util.tree_leaves(whole(params)), jax.tree_util.tree_leaves(blocked(params))):
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)
  temp = lambda f: f.memory_analysis().temp_size_in_bytes  # noqa: E731
  assert temp(blocked) < temp(whole) / 3, (temp(blocked), temp(whole))
