"""VEDJE end to end (smoke world), its reranking Scorer's input checks, cache bytes on disk, the cache-structure
variants and the rank / schedule helpers it uses."""
import json
import shutil
import types
from pathlib import Path

import jax
import numpy as np
import pytest

from vidjax import evaluate, metrics, ops, train
from vidjax.data import features
from vidjax.experiments import common
from vidjax.experiments import vedje as E
from vidjax.methods import vedje as VM
from vidjax.experiments.common import load_config
from vidjax.models import vedje as V
from vidjax.models.bert import BertConfig
from vidjax.scorers.vedje import PriorHeld, VedjeScorer, held_prior

ROOT = Path(__file__).resolve().parents[1]
KEYS = {f"{d}_r{k}" for d in ("t2v", "v2t") for k in (1, 5, 10)}


@pytest.fixture(scope="module")
def smoke_run(smoke_runs):
  return smoke_runs("vedje")


def test_smoke_run_writes_the_results_contract(smoke_run):
  workdir, results = smoke_run
  on_disk = json.loads((workdir / "results.json").read_text())
  assert on_disk["synthetic"] is True and "synthetic" in on_disk["dataset"]
  assert set(on_disk["metrics"]) == {"stage1", "vedje"}
  assert set(on_disk["metrics"]["vedje"]) >= KEYS and set(on_disk["metrics"]["stage1"]) >= KEYS
  assert on_disk["ablations"] == {}  # the smoke config trains none (each row is a model), and says so:
  assert set(on_disk["tables_needing_all"]) == set(VM.ABLATIONS) and "table17" not in on_disk
  assert on_disk["tables_needing_all"]["backbone"]["paper"] == "Table 17 (A.15)"
  plan = VM.ablation_plan(4, 4, "bfloat16")
  assert set(plan) == set(VM.ABLATIONS)
  assert tuple(load_config(ROOT / "configs/vedje_msrvtt.py:world,all").ablations) == VM.ABLATIONS  # `:all` = every table
  # The world was written as MSR-VTT's release files and a store under <workdir>/world and read through the real path.
  assert on_disk["path"] == "world" and (workdir / "world" / "MSRVTT_JSFUSION_test.csv").is_file()
  assert (workdir / "world" / "world_truth.json").is_file() and on_disk["provenance"]["backbone"] == \
      "synthetic-moving-object-world"
  # A finished world run's suite reads the files its run read (the world record), from the run's own config.
  recorded = common.recorded_world_data(load_config(ROOT / "configs/vedje_msrvtt.py:smoke"), workdir)
  assert recorded.data.features == str(workdir / "world" / "features") == on_disk["config"]["data"]["features"]
  assert plan["prior"]["prior_joint"] == (VM.FULL, "bfloat16")  # the main model, reused
  assert not plan["prior"]["prior_only"][0].use_joint and not plan["prior"]["joint_only"][0].use_prior
  assert plan["delta"]["without_delta"][0] == VM.NO_DELTA and plan["cache_budget"]["float4_e2m1_4"][0].tokens_per_frame == 1
  d = on_disk["reranker"]["hidden_size"]
  assert on_disk["cache_bytes"]["bf16_64"] == 64 * d * 2 and on_disk["cache_bytes"]["fp4_16"] == 16 * d // 2
  assert on_disk["cache_bytes"]["measured_main_kind"] == on_disk["cache_bytes"]["bf16_64"]
  assert on_disk["cache_bytes_paper_shape"]["bf16_64"] == 49_152
  assert set(on_disk["k_sweep"]) == {"5", "10"} and "dynamics" in on_disk and "cache_probe" in on_disk
  m = results["metrics"]["vedje"]
  assert 0 <= m["t2v_r1"] <= m["t2v_r5"] <= m["t2v_r10"] <= 100
  # the ranking split into the prior alone (stage 1 over the same candidates), as trained, and the joint pass alone
  split = on_disk["prior_split"]
  assert split["stage1"] == on_disk["stage1_over_candidates"] and split["vedje"] == on_disk["metrics"]["vedje"]
  assert set(split["joint_alone"]) >= KEYS
  # its chance level: a random order of each query's stage-1 top k (k = 10 here) finds the target at rank 1 with
  # probability (target among the top k) / k, i.e. stage 1's R@10 / 10
  assert on_disk["prior_split_chance"]["t2v_r1"] == pytest.approx(split["stage1"]["t2v_r10"] / 10, abs=0.01)
  assert set(on_disk["cost"]) == {"64_tokens", "16_tokens"}  # Table 2, both budgets
  assert on_disk["cost"]["16_tokens"]["rerank_peak_mb"] < on_disk["cost"]["64_tokens"]["rerank_peak_mb"]
  probe = on_disk["cache_probe"]["with_delta"]
  assert probe["pairs"] == on_disk["benchmark"]["queries"]  # every test query, not the first 256
  assert probe["pairs_with_verbs"] == probe["pairs"]  # every world caption has "moves"
  assert on_disk["benchmark"]["truncated_queries"] == {"train": 0, "test": 0}
  store = features.FeatureStore(workdir / "features")
  assert store.storage_dtype("cache") == "bfloat16" and store.item_shape("cache") == (64, d)


def test_a_rerun_resumes_from_the_checkpoints_and_caches(smoke_run, tmp_path):
  shared, results = smoke_run
  workdir = tmp_path / "rerun"  # a copy: the shared run keeps its config and results for the other tests
  shutil.copytree(shared, workdir)
  config = load_config(ROOT / "configs/vedje_msrvtt.py:smoke")
  config.ablations, config.diagnostics, config.eval.k_sweep = (), False, ()  # resumable changes
  again = E.run(config, workdir)
  assert again["metrics"] == results["metrics"]  # same trained model, same caches: same numbers


def _tiny_scorer():
  cfg = V.VedjeConfig(frames=2, tokens_per_frame=2, patches=3, visual_dim=4, max_text_len=6,
                      text=BertConfig(vocab_size=30, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32), compressor_heads=2,
                      compressor_mlp=32, predictor_heads=2, predictor_mlp=32, vtc_dim=4, prior_hidden=4)
  params = V.init_params(V.JointReranker(cfg), jax.random.PRNGKey(0))
  return cfg, VedjeScorer(cfg, params, pair_block=4)


def test_scorer_rejects_bad_inputs_with_one_clear_error(tmp_path):
  cfg, scorer = _tiny_scorer()
  q, k, s = 2, 3, 4
  batch = {"input_ids": np.ones((q, k, s), np.int32), "attention_mask": np.ones((q, k, s), np.int32),
           "cache": np.zeros((q, k, cfg.cache_len, cfg.hidden_size), np.float32),
           "prior": np.zeros((q, k), np.float32)}
  assert scorer.score(batch).shape == (q, k)
  with pytest.raises(ValueError, match="NaN or Inf.*query rows \\[1\\]"):
    scorer.score({**batch, "prior": np.array([[0, 0, 0], [0, np.nan, 0]], np.float32)})
  with pytest.raises(ValueError, match="cache has shape .* expected"):
    scorer.score({**batch, "cache": np.zeros((q, k, cfg.cache_len + 1, cfg.hidden_size), np.float32)})
  with pytest.raises(ValueError, match="floating point"):
    scorer.score({**batch, "cache": np.zeros((q, k, cfg.cache_len, cfg.hidden_size), np.int32)})
  store = features.write_arrays(tmp_path, {"cache": (["a", "b"], np.zeros((2, cfg.cache_len, cfg.hidden_size)))})
  pairs = VM.PairBatches(store, "cache", ["t0"], np.ones((1, s), np.int32), np.ones((1, s), np.int32))
  with pytest.raises(features.MissingFeatureError, match="no cache.*'zz'"):
    pairs.text_to_video({"row": np.array([0])}, np.array([["a", "zz"]]), np.zeros((1, 2), np.float32))


def test_prior_held_reads_the_joint_pass_alone():
  """`PriorHeld` scores a query's candidates with the prior replaced by its mean over the real candidates (NumPy,
  padding kept): a prior that only reorders a query's candidates changes nothing, the reranker as trained does."""
  _, scorer = _tiny_scorer()
  rng = np.random.default_rng(0)
  q, k, s = 2, 3, 4
  batch = {"input_ids": rng.integers(1, 30, (q, k, s)).astype(np.int32), "attention_mask": np.ones((q, k, s), np.int32),
           "cache": rng.normal(size=(q, k, scorer.config.cache_len, scorer.config.hidden_size)).astype(np.float32),
           "prior": np.array([[0.9, 0.1, 0.5], [0.3, -np.inf, 0.7]], np.float32)}
  want = np.array([[0.5, 0.5, 0.5], [0.5, -np.inf, 0.5]], np.float32)
  np.testing.assert_allclose(held_prior(batch["prior"]), want, rtol=1e-6)
  held = PriorHeld(scorer)
  got = held.score(batch)
  np.testing.assert_array_equal(got, scorer.score({**batch, "prior": want}))
  assert got[1, 1] == -np.inf
  reordered = {**batch, "prior": np.array([[0.5, 0.9, 0.1], [0.7, -np.inf, 0.3]], np.float32)}
  np.testing.assert_array_equal(held.score(reordered), got)
  assert not np.allclose(scorer.score(reordered), scorer.score(batch))


@pytest.mark.parametrize("tokens,fmt,expected", [(64, "bfloat16", 49_152), (16, "bfloat16", 12_288),
                                                 (64, "float8_e4m3", 24_576), (16, "float4_e2m1", 3_072)])
def test_cache_bytes_on_disk_are_exact(tmp_path, tokens, fmt, expected):
  cache = np.random.default_rng(0).normal(size=(3, tokens, 384)).astype(np.float32)
  store = features.write_arrays(tmp_path, {"cache": (["a", "b", "c"], cache)}, dtype=fmt)
  assert VM.measured_bytes(store, "cache") == expected == ops.storage_bytes(tokens * 384, fmt)
  assert np.array_equal(store.get("cache", ["b"])[0], ops.quantize_dequantize(cache[1], fmt))


@pytest.mark.highest_precision  # structures compared with each other at 1e-5
def test_cache_structures_see_what_they_should():
  base = dict(frames=4, tokens_per_frame=2, patches=3, visual_dim=8,
              text=BertConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32),
              compressor_heads=2, compressor_mlp=32, predictor_heads=2, predictor_mlp=32)
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 4, 3, 8)).astype(np.float32)
  shuffled = x[:, [2, 0, 3, 1]]
  other_frame = x.copy()
  other_frame[:, 0] += 1.0  # not the middle frame (t // 2 = 2)
  for structure in V.CACHE_STRUCTURES:
    module = V.FrameCompressor(V.VedjeConfig(cache_structure=structure, **base))
    params = V.init_params(module, jax.random.PRNGKey(1))
    z = lambda a: np.asarray(module.apply({"params": params}, a))  # noqa: E731
    assert z(x).shape == (2, 8, 16), structure  # matched size T*M for every structure
    if structure in ("frame_mean", "frame_attention"):
      np.testing.assert_allclose(z(shuffled), z(x), atol=1e-5, err_msg=structure)  # order-blind
    elif structure == "middle_frame":
      np.testing.assert_allclose(z(other_frame), z(x), atol=1e-6)
    else:  # ordered: frame t's tokens follow frame t
      np.testing.assert_allclose(z(shuffled).reshape(2, 4, 2, 16), z(x).reshape(2, 4, 2, 16)[:, [2, 0, 3, 1]],
                                 atol=1e-5)


def test_candidate_ranks_match_a_loop():
  rng = np.random.default_rng(0)
  scores = rng.integers(0, 4, size=(50, 6)).astype(float)  # many ties
  relevant = rng.random((50, 6)) < 0.25
  got = metrics.candidate_ranks(scores, relevant)
  for q in range(50):
    if not relevant[q].any():
      assert got[q] == 7
      continue
    best = max(scores[q, j] for j in range(6) if relevant[q, j])
    assert got[q] == 1 + sum(1 for j in range(6) if not relevant[q, j] and scores[q, j] >= best)


def test_training_batches_are_stage1_neighbourhoods_of_positives():
  """Every video of a training batch is some query's positive (a hard negative that is never a positive lets the
  reranker score videos without reading the text); an anchor's neighbourhood holds its best-ranked stage-1
  negatives; a query's candidates are itself first, its neighbourhood, then other videos of the batch."""
  rng = np.random.default_rng(0)
  n_videos, b = 40, 12
  query_video = np.concatenate([np.arange(n_videos), rng.integers(0, n_videos, 20)])  # some videos: 2+ captions
  query_video[5] = 39  # video 5 has no caption
  q = len(query_video)
  split = VM.Split([f"q{i}" for i in range(q)], query_video, np.zeros((q, 4), np.int32), np.ones((q, 4), np.int32),
                  rng.normal(size=(q, 8)), [f"v{i}" for i in range(n_videos)], rng.normal(size=(n_videos, 8)))
  tc = types.SimpleNamespace(hard_negatives=3, always_top=2, in_batch_negatives=2, candidate_pool=10,
                             vtm_candidates="stage1")
  negatives = VM.stage1_negatives(split, tc)
  assert negatives.shape == (q, 9)
  # each query's pool, by a plain loop: its stage-1 scores' best videos other than its own
  unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
  for i in range(q):
    scores = unit(split.text[i]) @ unit(split.clip).T
    scores[query_video[i]] = -np.inf
    np.testing.assert_array_equal(negatives[i], np.argsort(-scores, kind="stable")[:9])
  for seed in range(5):
    idx = np.random.default_rng(seed).permutation(q)[:b]
    rows, hoods = VM.neighbourhood_rows(split, negatives, idx, tc, np.random.default_rng(seed))
    videos = query_video[rows]
    assert len(rows) == b and len(set(videos.tolist())) == b  # distinct videos, each with its own caption
    assert rows[0] == idx[0] and 5 not in videos
    first = [0] + hoods[0].tolist()
    assert len(first) == 4 and set(videos[first[1:3]]) == set(negatives[idx[0], :2].tolist())
    for r in first:  # the neighbourhood is symmetric
      assert sorted([r] + hoods[r].tolist()) == sorted(first)
  assert len(split.captions_of_video[5]) == 0 and sum(map(len, split.captions_of_video)) == q


def test_in_batch_scheme_scores_each_query_against_the_other_videos_of_a_batch_of_distinct_videos():
  """§2.5's VTM (the default): B query-video pairs of distinct videos, no stage-1 neighbours, and each query's
  candidates are its positive first, then `in_batch_negatives` other videos of the batch."""
  rng = np.random.default_rng(1)
  n_videos, b = 30, 8
  query_video = np.concatenate([np.arange(n_videos), rng.integers(0, n_videos, 30)])
  q = len(query_video)
  split = VM.Split([f"q{i}" for i in range(q)], query_video, np.ones((q, 6), np.int32), np.ones((q, 6), np.int32),
                  rng.normal(size=(q, 8)), [f"v{i}" for i in range(n_videos)], rng.normal(size=(n_videos, 8)))
  tc = types.SimpleNamespace(hard_negatives=3, always_top=2, in_batch_negatives=b - 1, candidate_pool=10,
                             vtm_candidates="in_batch", mlm_prob=0.15)
  negatives = VM.stage1_negatives(split, tc)
  assert negatives.shape == (q, 0)
  vocab = {"[PAD]": 0, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
  tokenizer = types.SimpleNamespace(vocab=vocab)
  cfg = types.SimpleNamespace(text=types.SimpleNamespace(vocab_size=50), horizons=(1,))
  batch_fn = VM.make_batch_fn(split, negatives, tc, cfg, tokenizer, seed=0)
  for seed in range(4):
    idx = np.random.default_rng(seed).permutation(q)[:b]
    batch = batch_fn(idx)
    cand = batch["candidates"]
    assert cand.shape == (b, b) and (cand[:, 0] == np.arange(b)).all()
    assert all(sorted(row) == list(range(b)) for row in cand.tolist())  # every video of the batch, once
    assert batch["candidate_mask"].min() == 1.0  # distinct videos: every other candidate is a negative
    # the videos' features travel as rows (gathered on the device): each pair's video, distinct in the batch
    np.testing.assert_array_equal(batch["patches"], batch["stage1_video"])
    assert batch["patches"].dtype == np.int32 and len(set(batch["patches"].tolist())) == b


def test_step_decay_schedule_is_the_papers():
  # VEDJE A.3: 400 warm-up steps 1e-6 -> 3e-4, then x0.9 per epoch (here: 4 warm-up steps, epochs of 10).
  sched = train.lr_schedule(3e-4, 4, warmup_init=1e-6, decay_every=10, decay_rate=0.9)
  expect = lambda s: 1e-6 + (3e-4 - 1e-6) * s / 4 if s < 4 else 3e-4 * 0.9 ** (s // 10)  # noqa: E731
  for step in (0, 1, 3, 4, 9, 10, 19, 20, 35):
    assert float(sched(step)) == pytest.approx(expect(step), rel=1e-5), step
  with pytest.raises(ValueError, match="step decay"):
    train.adamw(1e-3, 0.0, decay_every=0, decay_rate=0.9)


def test_the_reranker_is_evaluated_on_a_comp_benchmark_through_the_common_evaluator():
  """VideoComp §3.4 with VEDJE as the scorer: the video's cache twice, the two texts as the pair's text."""
  cfg, scorer = _tiny_scorer()
  rng = np.random.default_rng(0)
  q, s = 5, 4
  cache = rng.normal(size=(q, 1, cfg.cache_len, cfg.hidden_size)).astype(np.float32)
  ids = rng.integers(1, 30, size=(q, 2, s)).astype(np.int32)
  batch = {"input_ids": ids, "attention_mask": np.ones_like(ids), "cache": np.repeat(cache, 2, axis=1),
           "prior": np.zeros((q, 2), np.float32)}
  got = evaluate.evaluate_comp(scorer, {"temp_reorder": batch}, chunk=2)
  scores = scorer.score(batch)
  assert got == {"temp_reorder": 100.0 * np.mean(scores[:, 0] > scores[:, 1]),
                 "all": 100.0 * np.mean(scores[:, 0] > scores[:, 1])}


def test_candidates_that_do_not_fit_the_batch_are_a_config_error():
  config = load_config(ROOT / "configs/vedje_msrvtt.py:smoke")
  with config.unlocked():
    config.train.in_batch_negatives = config.train.batch_size - config.train.hard_negatives
  with pytest.raises(ValueError, match="train.in_batch_negatives=.* is invalid"):
    E.validate(config)


def test_a_batch_larger_than_the_training_queries_is_clipped_with_its_in_batch_negatives():
  """Fewer training queries than `train.batch_size`: the batch is clipped to them and a query's in-batch VTM
  negatives to what that batch holds besides its own video and its stage-1 negatives."""
  from vidjax.defaults.common import clip_to_data  # pylint: disable=g-import-not-at-top
  config = load_config(ROOT / "configs/vedje_msrvtt.py:smoke")
  config.train.update(batch_size=16, hard_negatives=3, in_batch_negatives=12, vtm_candidates="stage1")
  out, clipped = clip_to_data(config, VM.limits(config, 10))
  assert clipped == {"train.batch_size": [16, 10], "train.in_batch_negatives": [12, 6]}
  assert 1 + out.train.hard_negatives + out.train.in_batch_negatives <= out.train.batch_size
  assert clip_to_data(config, VM.limits(config, 100))[1] == {}
  # a batch's pairs are of distinct videos: at most the training videos, however many captions each has
  out, clipped = clip_to_data(config, VM.limits(config, 40, 12))
  assert clipped == {"train.batch_size": [16, 12], "train.in_batch_negatives": [12, 8]}
  assert clip_to_data(config, VM.limits(config, 40, 16))[1] == {}
