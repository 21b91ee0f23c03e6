"""GRDR training and recall: the phase loss against NumPy, Algorithm 1's schedule and freezing, query
intents, generative recall against its parts, and the experiment's results contract (smoke world)."""
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from conftest import grdr_smoke_config
from vidjax import losses
from vidjax.experiments import grdr as G
from vidjax.methods import grdr as GM
from vidjax.worlds.polysemous import WorldQueries
from vidjax.retrieval import Stack, Stage, GenerativeRecall, SemanticIdTrie, TwoStage, beam_search


def _unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _ce(h, book, target, tau):
  return -np.mean(_log_softmax(_unit(h) @ _unit(book).T / tau)[np.arange(len(h)), target])


@pytest.mark.parametrize("align", [True, False])
def test_grdr_phase_loss_equals_numpy(align):
  rng = np.random.default_rng(0)
  b, nv, d, k, m, dv = 6, 3, 5, 7, 2, 4
  out = {"h": rng.normal(size=(b, m, d)), "codebooks": rng.normal(size=(3, k, d)),
         "view_codes": rng.integers(0, k, (b, m)), "view_residuals": rng.normal(size=(b, m, d)),
         "view_z": _unit(rng.normal(size=(b, d))), "z": _unit(rng.normal(size=(b, nv, d))),
         "z_hat": rng.normal(size=(b, nv, d)), "reconstruction": rng.normal(size=(b, dv)),
         "tau_code": 0.3, "tau_align": 0.2}
  feats = rng.normal(size=(b, dv))
  weights = (0.5, 2.0, 1.5, 3.0)
  loss, terms = losses.grdr_loss({k_: jnp.asarray(v) for k_, v in out.items()}, jnp.asarray(feats), layer=m,
                                 align=align, weights=weights, beta=0.25)
  books, codes = out["codebooks"], out["view_codes"]
  hc = (_ce(out["h"][:, 0], books[0], codes[:, 0], 0.3) + _ce(out["view_residuals"][:, 0], books[0], codes[:, 0], 0.3))
  if align:
    logits = _unit(out["h"].sum(1)) @ _unit(out["view_z"]).T / 0.2
    cl = -np.mean(np.diag(_log_softmax(logits)))
    want = cl + hc
  else:
    ce = _ce(out["h"][:, 1], books[1], codes[:, 1], 0.3)
    rq = np.mean(1.25 * ((out["z_hat"] - out["z"]) ** 2).sum(-1))
    rec = np.mean(1 - (_unit(feats) * _unit(out["reconstruction"])).sum(-1))
    want = 0.5 * ce + 2.0 * hc + 1.5 * rq + 3.0 * rec
  np.testing.assert_allclose(float(loss), want, rtol=1e-5)
  np.testing.assert_allclose(float(terms["hc"]), hc, rtol=1e-5)


def test_phases_follow_algorithm_1():
  t = ml_collections.ConfigDict(dict(first_align_epochs=3, align_epochs=1, cotrain_epochs=4))
  assert GM.phases(t, 3) == [(1, "align", 3), (1, "cotrain", 4), (2, "align", 1), (2, "cotrain", 4),
                            (3, "align", 1), (3, "cotrain", 4)]


def test_progressive_schedule_runs_every_phase_of_algorithm_1(tmp_path):
  """Algorithm 1 (train.schedule="progressive") end to end on the smoke world: one workdir per phase, and the
  indexed IDs are valid codes."""
  config = grdr_smoke_config()
  config.train.schedule = "progressive"
  G.validate(config)
  world = G.world_of(config)
  model, params = G.trained_model(config, tmp_path, world, 2, "p")
  assert sorted(p.name for p in (tmp_path / "models" / "p").iterdir()) == [
      "layer1_align", "layer1_cotrain", "layer2_align", "layer2_cotrain"]
  codes = np.asarray(model.apply({"params": params}, world.features[:20], method=model.video_codes))
  assert codes.shape == (20, 2, 2) and codes.min() >= 0 and codes.max() < config.model.num_codes
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(params))


def test_tokenizer_first_schedule_needs_views_in_the_query_space():
  config = grdr_smoke_config()
  assert config.train.schedule == "tokenizer_first"  # the world's (the dataset configs: Algorithm 1)
  config.model.latent_dim = 32
  with pytest.raises(ValueError, match="model.latent_dim=32 .*query_dim=128"):
    G.validate(config)
  config.train.schedule = "alternating"
  with pytest.raises(ValueError, match="train.schedule='alternating'"):
    G.validate(config)


@pytest.mark.parametrize("layer,align,trained", [(1, True, []), (2, False, [1]), (3, False, [2])])
def test_phase_optimizer_freezes_the_other_codebooks(layer, align, trained):
  t = ml_collections.ConfigDict(dict(lr=0.1, weight_decay=0.5))
  params = {"tokenizer": {f"codebook_{l}": jnp.ones((2, 3)) for l in range(3)} | {"w": jnp.ones(3)},
            "log_tau_code": jnp.zeros(())}
  opt = GM.phase_optimizer(t, layer, align, 3)
  grads = jax.tree.map(jnp.ones_like, params)
  updates, _ = opt.update(grads, opt.init(params), params)
  for l in range(3):
    moved = bool(jnp.any(updates["tokenizer"][f"codebook_{l}"] != 0))
    assert moved == (l in trained), (l, moved)
  assert jnp.all(updates["tokenizer"]["w"] != 0)
  # no weight decay on codebooks / temperatures: with zero gradients they do not move
  zero_updates, _ = opt.update(jax.tree.map(jnp.zeros_like, params), opt.init(params), params)
  assert float(jnp.abs(zero_updates["log_tau_code"])) == 0
  assert all(float(jnp.abs(zero_updates["tokenizer"][f"codebook_{l}"]).max()) == 0 for l in range(3))
  assert float(jnp.abs(zero_updates["tokenizer"]["w"]).max()) > 0


def test_query_intents_recover_each_videos_facets():
  from vidjax.worlds.polysemous import PolysemousWorldConfig, make_polysemous_world
  w = make_polysemous_world(PolysemousWorldConfig(num_videos=200, query_noise=0.2, min_facets=2, max_facets=2), seed=3)
  rows = {v: i for i, v in enumerate(w.train)}
  video = np.asarray([rows[v] for v in w.train_query_video])
  intent, valid = GM.query_intents(w.train_queries, video, len(w.train), 2, seed=0)
  agree = []
  for v in range(len(w.train)):
    sel = video == v
    a, f = intent[sel], w.train_query_facet[sel]
    agree.append(np.array_equal(a, f) or np.array_equal(a, 1 - f))
  assert np.mean(agree) > 0.9
  assert valid.shape == (len(w.train), 2) and set(np.unique(intent)) <= {0, 1}


def _table_logp(params, queries, prefix):
  """A fixed depth-2 model: params [Q, 1 + K, K] hold log P(c_1) (row 0) and log P(c_2 | c_1) (row 1 + c_1)."""
  q, w, m = prefix.shape
  row = jnp.zeros((q, w), jnp.int32) if m == 0 else 1 + prefix[:, :, 0]
  return params[jnp.arange(q)[:, None], row]


def test_generative_recall_is_beam_search_then_dedup_and_pads_for_the_reranker():
  rng = np.random.default_rng(0)
  k, depth, videos = 4, 2, 12
  codes = rng.integers(0, k, (videos, 2, depth))
  trie = SemanticIdTrie([f"v{i}" for i in range(videos)], codes, k)
  logp = jnp.asarray(_log_softmax(rng.normal(size=(3, 1 + k, k))), jnp.float32)  # per query: root row + K rows
  fn = _table_logp
  vectors = rng.normal(size=(videos, 5)).astype(np.float32)
  recall = GenerativeRecall(trie, lambda p, q: q, fn, logp, width=3, limit=4, vectors=vectors)
  queries = jnp.zeros((3, 1))
  ids, scores = recall.retrieve(queries, k=6)
  _, leaves, _ = beam_search(fn, trie.arrays(), logp, queries, width=3, depth=depth)
  for q in range(3):
    want = trie.video_ids[trie.videos_in_order(np.asarray(leaves[q]), 4)]
    assert list(ids[q, :len(want)]) == list(want)
    assert all(i == "" for i in ids[q, len(want):]) and np.all(np.isinf(scores[q, len(want):]))
    assert np.all(np.diff(scores[q, :len(want)]) <= 0)
  stack = TwoStage(recall, k_recall=6, reranker=lambda batch: np.ones(batch["prior"].shape, np.float32))
  res = stack.search(np.zeros((3, 1)), k=6)
  for q in range(3):
    n = int(np.sum(ids[q] != ""))
    assert set(res.ids[q, :n]) == set(ids[q, :n]) and all(i == "" for i in res.ids[q, n:])
  # GRDR as the composed stack's recall stage: two rescoring stages, the padding stays last.
  composed = Stack(recall, 6, [Stage("a", lambda b: -b["prior"], 6), Stage("b", lambda b: b["prior"], 3)])
  out = composed.search(np.zeros((3, 1)), k=3, exclude=[[ids[0, 0]], [], []])
  for q in range(3):
    n = int(np.sum(ids[q] != ""))
    assert set(out.stage_ids["recall"][q, :n - (q == 0)]) == set(ids[q, :n]) - ({ids[0, 0]} if q == 0 else set())
    assert list(out.ids[q]) == [i for i in out.stage_ids["a"][q] if i != ""][:3] or n < 3
  assert ids[0, 0] not in out.ids[0]
  assert set(recall.mean_latency_ms()) == {"encode", "decode", "id_to_video"}


@pytest.fixture(scope="module")
def smoke_run(smoke_runs):
  return smoke_runs("grdr")


def test_grdr_smoke_run_writes_the_results_contract(smoke_run):
  workdir, results = smoke_run
  saved = json.loads((workdir / "results.json").read_text())
  assert saved["synthetic"] is True
  for setting in ("inductive", "full_corpus"):
    assert set(saved[setting]) == {"dense", "grdr"}
    for method in ("grdr",):
      row = saved[setting][method]
      assert {"t2v_r1", "t2v_r5", "t2v_r10", "candidate_recall", "num_candidates", "latency_ms"} <= set(row)
      assert set(row["latency_ms"]) >= {"encode", "decode", "id_to_video", "rerank"}
      assert 0 < row["num_candidates"] <= 10 and row["t2v_r1"] <= row["candidate_recall"]
  assert len(saved["codebook"]["layers"]) == 2 and "colliding_ids" in saved["codebook"]
  assert saved["index_bytes_per_video"]["grdr"] < saved["index_bytes_per_video"]["dense_float32"]
  assert (workdir / "candidate_recall.png").stat().st_size > 0
  # The default schedule (tokenizer_first): views, then frozen IDs, then the retriever, each checkpointed.
  assert sorted(p.name for p in (workdir / "models" / "grdr").iterdir()) == ["retriever", "views"]


def test_grdr_rerun_resumes_every_phase_to_the_same_results(smoke_run):
  workdir, results = smoke_run
  again = G.run(grdr_smoke_config(), workdir)
  strip = lambda r: {s: {m: {k: v for k, v in row.items() if k != "latency_ms"} for m, row in r[s].items()}  # noqa: E731
                     for s in ("inductive", "full_corpus")}
  assert strip(again) == strip(results)


def test_grdr_killed_at_a_phase_boundary_resumes_to_the_same_results(smoke_run, tmp_path):
  """SIGKILL as the views phase hands over to the retriever phase, then a rerun: results.json equals the
  uninterrupted smoke run's (latencies aside)."""
  import os
  import signal
  import subprocess
  import sys
  import time
  _, reference = smoke_run
  workdir = tmp_path / "run"
  cmd = [sys.executable, "-m", "vidjax.main", "--config", "configs/grdr_msrvtt.py:smoke",
         "--config.eval.compare_single_view=False", "--workdir", str(workdir)]
  root = Path(__file__).resolve().parents[1]
  proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  deadline = time.time() + 600
  while not (workdir / "models" / "grdr" / "retriever").exists() and proc.poll() is None and time.time() < deadline:
    time.sleep(0.02)
  os.kill(proc.pid, signal.SIGKILL)
  assert proc.wait() == -signal.SIGKILL, proc.stderr.read()[-2000:]
  assert not (workdir / "results.json").exists()
  again = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=900)
  assert again.returncode == 0, again.stderr[-2000:]
  resumed = json.loads((workdir / "results.json").read_text())
  strip = lambda r: {s: {m: {k: v for k, v in row.items() if k != "latency_ms"} for m, row in r[s].items()}  # noqa: E731
                     for s in ("inductive", "full_corpus")}
  assert strip(resumed) == strip(json.loads(json.dumps(reference)))


def test_grdr_model_shapes_and_code_distribution():
  from vidjax.defaults import grdr as defaults
  c = defaults.get_config("msrvtt", "smoke")
  model = GM.build_model(c.model, 128)
  rng = np.random.default_rng(0)
  f, q = jnp.asarray(rng.normal(size=(3, 128)), jnp.float32), jnp.asarray(rng.normal(size=(3, 128)), jnp.float32)
  params = model.init(jax.random.PRNGKey(0), f, q)["params"]
  assert params["tokenizer"]["codebook_1"].shape == (16, c.model.latent_dim)
  mem = model.apply({"params": params}, q, method=G.GRDR.encode_query)
  assert mem.shape == (3, c.model.query_tokens, c.model.t5.d_model)
  logp = model.apply({"params": params}, mem, jnp.zeros((3, 5, 1), jnp.int32), method=G.GRDR.code_logp)
  assert logp.shape == (3, 5, 16)
  np.testing.assert_allclose(np.asarray(jax.nn.logsumexp(logp, -1)), 0.0, atol=1e-5)
  h = model.apply({"params": params}, mem, jnp.asarray([[1], [2], [3]]), method=G.GRDR.decode)
  h2 = model.apply({"params": params}, mem, jnp.asarray([[4], [5], [6]]), method=G.GRDR.decode)
  np.testing.assert_allclose(h[:, 0], h2[:, 0], atol=1e-5)  # h_1 does not see c_1
  codes = model.apply({"params": params}, f, method=G.GRDR.video_codes)
  assert codes.shape == (3, c.model.num_views, 2) and codes.dtype == jnp.int32


def test_pseudo_query_providers_plug_in_and_bad_ones_get_one_clear_error():
  config = grdr_smoke_config()
  world = G.world_of(config)
  q, video = GM.checked_queries(WorldQueries(world), world.train, 128)
  np.testing.assert_array_equal(q, world.train_queries)
  np.testing.assert_array_equal(world.train[video], world.train_query_video)  # positions name the right videos
  # A subset of the training videos keeps only their queries, positions relative to the subset.
  rows = world.train[::3]
  q2, v2 = WorldQueries(world)(rows)
  assert len(q2) == sum(int(v) in set(rows.tolist()) for v in world.train_query_video)
  np.testing.assert_array_equal(rows[v2], world.train_query_video[np.isin(world.train_query_video, rows)])

  class Bad:
    def __init__(self, queries, video):
      self.out = (queries, video)

    def __call__(self, rows):
      return self.out

  good = np.ones((3, 128), np.float32)
  for provider, message in [
      (Bad(np.ones((3, 64)), np.zeros(3, int)), r"from Bad: expected \[Nq >= 1, 128\] vectors, got shape \(3, 64\)"),
      (Bad(good, np.zeros(2, int)), "one integer video position per query"),
      (Bad(good, np.array([0, 1, len(world.train)])), f"query 2 names video position {len(world.train)}, outside"),
      (Bad(np.where(np.arange(3)[:, None] == 1, np.nan, good), np.zeros(3, int)), "query 1 is not finite")]:
    with pytest.raises(ValueError, match=message):
      GM.checked_queries(provider, world.train, 128)
