"""GRDR training and recall: the phase loss against NumPy, Algorithm 1's schedule and freezing, query
intents, generative recall against its parts, and the experiment's results contract (smoke world)."""
import json
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from conftest import grdr_smoke_config
from vidjax import losses, ops
from vidjax.experiments import common, grdr as G
from vidjax.methods import grdr as GM
from vidjax.methods import grdr_baselines
from vidjax.worlds.polysemous import write_world
from vidjax.retrieval import Stack, Stage, GenerativeRecall, SemanticIdTrie, TwoStage, beam_search

# The phase losses, k-means codebooks and query encoder are compared with NumPy / each other: they hold at full
# float32 only, which a GPU (TF32 by default) or a TPU (one bf16 pass) computes when asked (tests/conftest.py).
pytestmark = pytest.mark.highest_precision


def _unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _ce(h, book, target, tau):
  return -np.mean(_log_softmax(_unit(h) @ _unit(book).T / tau)[np.arange(len(h)), target])


def test_fixed_id_loss_equals_numpy():
  rng = np.random.default_rng(1)
  b, m, d, k = 5, 3, 4, 6
  h, books, codes = rng.normal(size=(b, m, d)), rng.normal(size=(m, k, d)), rng.integers(0, k, (b, m))
  loss, terms = losses.fixed_id_loss(jnp.asarray(h), jnp.asarray(books), jnp.asarray(codes), 0.5)
  want = [_ce(h[:, l], books[l], codes[:, l], 0.5) for l in range(m)]
  np.testing.assert_allclose(float(loss), sum(want), rtol=1e-5)
  np.testing.assert_allclose([float(terms[f"ce{l + 1}"]) for l in range(m)], want, rtol=1e-5)


@pytest.mark.parametrize("layer", [1, 2])
def test_algorithm_1_phase_loss_equals_numpy(layer):
  """A phase's loss as the official trainer weights it: w . (L_CL, L_CE with label smoothing, L_HC, L_Rec, L_RQ)."""
  rng = np.random.default_rng(0)
  b, nv, d, k, dv, eps, beta = 6, 3, 5, 7, 4, 0.1, 0.65
  out = {"h": rng.normal(size=(b, layer, d)), "codebooks": rng.normal(size=(3, k, d)),
         "view_codes": rng.integers(0, k, (b, layer)), "hc_codes": rng.integers(0, k, (b, layer - 1)),
         "view_residuals": rng.normal(size=(b, layer, d)), "view_z": _unit(rng.normal(size=(b, d))),
         "z": _unit(rng.normal(size=(b, nv, d))), "z_hat": rng.normal(size=(b, nv, d)),
         "reconstruction": rng.normal(size=(b, dv)), "tau_code": 0.3, "tau_align": 0.2}
  feats = rng.normal(size=(b, dv))
  weights = np.asarray([0.2, 0.5, 0.8, 0.1, 0.3], np.float32)
  loss, terms = GM.phase_loss({k_: jnp.asarray(v) for k_, v in out.items()}, jnp.asarray(feats), layer=layer,
                              weights=jnp.asarray(weights), beta=beta, smoothing=eps)
  books, h = out["codebooks"], out["h"]
  hc = sum(_ce(h[:, l], books[l], out["hc_codes"][:, l], 0.3) +
           _ce(out["view_residuals"][:, l], books[l], out["hc_codes"][:, l], 0.3) for l in range(layer - 1))
  cl = -np.mean(np.diag(_log_softmax(_unit(h.sum(1)) @ _unit(out["view_z"]).T / 0.2)))
  logp = _log_softmax(_unit(h[:, -1]) @ _unit(books[layer - 1]).T / 0.3)
  ce = np.mean(-(1 - eps) * logp[np.arange(b), out["view_codes"][:, -1]] - eps * logp.mean(-1))
  rec = np.mean(1 - (_unit(feats) * _unit(out["reconstruction"])).sum(-1))
  rq = np.mean((1 + beta) * ((out["z_hat"] - out["z"]) ** 2).sum(-1))
  want = dict(cl=cl, ce=ce, hc=hc, rec=rec, rq=rq)
  np.testing.assert_allclose(float(loss), sum(w * want[t] for w, t in zip(weights, GM.LOSS_TERMS)), rtol=1e-5)
  for t in GM.LOSS_TERMS:  # rtol 1e-5: float32 sums of a few terms
    np.testing.assert_allclose(float(terms[t]), want[t], rtol=1e-5, atol=1e-7)


def test_phases_follow_algorithm_1_as_its_authors_run_it():
  """Per layer: alignment (3 epochs at layer 1, then 1), co-training (2) and fit (2), run.py's pre-train / main / fit;
  without L_CL the first layer has nothing to align; a phase of 0 epochs is left out."""
  a1 = ml_collections.ConfigDict(dict(first_align_epochs=3, align_epochs=1, cotrain_epochs=2, fit_epochs=2))
  assert GM.phases(a1, 3) == [(1, "align", 3), (1, "cotrain", 2), (1, "fit", 2), (2, "align", 1), (2, "cotrain", 2),
                              (2, "fit", 2), (3, "align", 1), (3, "cotrain", 2), (3, "fit", 2)]
  assert GM.phases(a1, 2, cl=False)[:2] == [(1, "cotrain", 2), (1, "fit", 2)]
  a1.fit_epochs = 0
  assert [p for _, p, _ in GM.phases(a1, 2)] == ["align", "cotrain", "align", "cotrain"]
  assert GM.two_stage_epochs(ml_collections.ConfigDict(dict(first_align_epochs=3, align_epochs=1, cotrain_epochs=2,
                                                            fit_epochs=2)), 3) == (11, 17)


def test_tokenizer_first_schedule_needs_views_in_the_query_space():
  config = grdr_smoke_config()
  config.train.schedule = "tokenizer_first"
  config.model.latent_dim = 32
  with pytest.raises(ValueError, match="model.latent_dim=32 .*query_dim=128"):
    G.validate(config)
  config.train.schedule = "alternating"
  with pytest.raises(ValueError, match="train.schedule='alternating'"):
    G.validate(config)
  config = grdr_smoke_config()  # Algorithm 1's settings: one clear error each
  config.train.algorithm1.phase_weights.fit = (0.0, 1.0)
  with pytest.raises(ValueError, match="train.algorithm1.phase_weights.fit"):
    G.validate(config)
  config = grdr_smoke_config()
  config.train.algorithm1.view_assignment = "random"
  with pytest.raises(ValueError, match="train.algorithm1.view_assignment='random'"):
    G.validate(config)


@pytest.mark.parametrize("layer,phase", [(1, "align"), (2, "cotrain"), (3, "cotrain"), (2, "fit")])
def test_phase_optimizer_freezes_codebooks_speeds_the_current_one_and_clips(layer, phase):
  """The official optimizer of a phase (utils/model_utils.py get_optimizer, trainer.py): C^(1..m-1) frozen, C^(m) at
  10x the rate, no weight decay; in the fit phase the whole tokenizer frozen; gradients clipped to global norm 1 over
  the trained params only (the frozen ones' gradients, huge here, do not count)."""
  a1 = ml_collections.ConfigDict(dict(lr=0.1, codebook_lr_scale=10.0, weight_decay=0.0, grad_clip=1.0))
  params = {"tokenizer": {f"codebook_{l}": jnp.ones((2, 3)) for l in range(3)} | {"encoder": {"w": jnp.ones(3)}},
            "decoder": {"w": jnp.ones(4)}, "log_tau_code": jnp.zeros(())}
  opt = GM.phase_optimizer(a1, layer, phase, 3)
  trained = {"decoder/w", "log_tau_code"} | (set() if phase == "fit" else {"tokenizer/encoder/w",
                                                                           f"tokenizer/codebook_{layer - 1}"})
  grads = {path: 1e6 * jnp.ones_like(x) for path, x in ops.flatten_dict(params).items()}
  grads.update({p: 0.5 * jnp.ones_like(grads[p]) for p in trained})
  grads = ops.unflatten_dict(grads)
  updates, state = opt.update(grads, opt.init(params), params)
  flat = ops.flatten_dict(updates)
  for path, u in flat.items():
    want = 0.0 if path not in trained else -0.1 * (10.0 if path == f"tokenizer/codebook_{layer - 1}" else 1.0)
    np.testing.assert_allclose(np.asarray(u), want, rtol=1e-4, atol=1e-12, err_msg=path)  # Adam's first step: -lr
  norm = np.sqrt(sum(0.25 * np.size(ops.flatten_dict(params)[p]) for p in trained))
  mus = [s.mu for s in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, optax.ScaleByAdamState))
         if isinstance(s, optax.ScaleByAdamState)]
  seen = [np.asarray(m_) for mu in mus for m_ in jax.tree.leaves(mu)]
  # Adam's first moment holds (1 - b1) x the clipped gradient: 0.5 / norm of every trained gradient
  assert seen and all(np.allclose(m_, 0.1 * 0.5 / norm, rtol=1e-5) for m_ in seen if np.any(m_)), (norm, seen)


def test_hc_targets_fixed_keep_each_layers_codes_snapshot_rereads_them(monkeypatch):
  """L_HC's targets in Algorithm 1 (`train.algorithm1.hc_targets`, eq. 10). The train loop is replaced by one that
  perturbs the params at every phase (so the codes drift between phases, as training would move them) and records each
  phase's batch: "fixed" hands every later phase layer 1's codes as its last phase (fit) left them (the official run's
  `.code` of the previous loop); "snapshot" hands each phase the codes as they are at its start (layer 2's co-training
  then trains towards what layer 2's alignment moved them to). A query's view is its intent's index (the official
  `token_idx`), and its targets are that view's codes; each phase gets its weights (L_CL, L_CE, L_HC, L_Rec, L_RQ)."""
  c = grdr_smoke_config()
  c.model.latent_dim = 16
  model = GM.build_model(c.model, 16)
  rng = np.random.default_rng(0)
  feats = _unit(rng.normal(size=(24, 16))).astype(np.float32)
  video = np.repeat(np.arange(24), 3)
  queries = _unit(feats[video] + 0.3 * rng.normal(size=(72, 16))).astype(np.float32)
  intent = np.tile(np.arange(3), 24)  # each video's 3 queries, one intent each (one view left without)
  valid = np.tile(np.arange(c.model.num_views) < 3, (24, 1))
  data = GM.TrainingSet(feats, queries, video, intent, valid)
  params = jax.device_get(jax.jit(model.init)(jax.random.PRNGKey(0), jnp.asarray(feats[:1]),
                                              jnp.asarray(queries[:1]))["params"])

  def run(mode):
    seen, after = {}, {}

    def fake_fit(*, name, init_fn, batch_fn, seed, **_):
      batch = batch_fn(np.arange(len(queries)))
      p = jax.tree.map(lambda x: x + 0.5 * np.std(x) * np.random.default_rng(seed).normal(size=np.shape(x)).astype(
          np.asarray(x).dtype) if np.size(x) > 1 else x, init_fn(None))
      seen[name.split()[-1]], after[name.split()[-1]] = batch, p
      return type("State", (), {"params": p})

    monkeypatch.setattr(GM.train, "fit_epochs", fake_fit)
    a1 = {**c.train.algorithm1.to_dict(), "kmeans_iters": 2, "hc_targets": mode}
    GM.train_progressive(model, params, data, ml_collections.ConfigDict({**c.train.to_dict(), "algorithm1": a1}),
                         Path("/unused"), 0)
    codes = lambda phase: GM.video_codes(model, after[phase], feats, 1)[..., 0]  # noqa: E731  [V, N_v] layer 1
    return seen, codes

  seen, codes = run("fixed")
  assert list(seen) == [f"layer{m}_{p}" for m in (1, 2) for p in ("align", "cotrain", "fit")]
  for phase, batch in seen.items():
    np.testing.assert_array_equal(batch["view"], intent)
    np.testing.assert_allclose(batch["loss_weights"][0], c.train.algorithm1.phase_weights[phase.split("_")[1]])
  assert np.mean(codes("layer1_fit") != codes("layer2_align")) > 0.05  # the codes drifted: the test can tell
  for phase in ("layer2_align", "layer2_cotrain", "layer2_fit"):
    b = seen[phase]
    np.testing.assert_array_equal(b["frozen"][:, 0], codes("layer1_fit")[video, b["view"]])
  seen, codes = run("snapshot")
  b = seen["layer2_cotrain"]
  np.testing.assert_array_equal(b["frozen"][:, 0], codes("layer2_align")[video, b["view"]])
  assert not np.array_equal(b["frozen"][:, 0], codes("layer1_fit")[video, b["view"]])
  with pytest.raises(ValueError, match="hc_targets must be one of"):
    GM.HcTargets("latest")


def test_tokenizer_first_aligns_views_then_fixes_ids_then_trains_the_retriever_on_them(monkeypatch):
  """The project's schedule (`train.schedule="tokenizer_first"`, an option): the view MLPs alone (`views`), the
  codebooks by k-means on their residuals, then the retriever alone (`retriever`) towards each query's matched view's
  codes of the frozen tokenizer. The train loop is replaced by one that perturbs what its optimizer trains."""
  c = grdr_smoke_config()
  c.model.update(latent_dim=16, query_dim=16)
  model = GM.build_model(c.model, 16)
  rng = np.random.default_rng(1)
  feats = _unit(rng.normal(size=(24, 16))).astype(np.float32)
  video = np.repeat(np.arange(24), 4)
  queries = _unit(feats[video] + 0.3 * rng.normal(size=(96, 16))).astype(np.float32)
  intent, valid = GM.query_intents(queries, video, 24, c.model.num_views, seed=0, iters=3)
  data = GM.TrainingSet(feats, queries, video, intent, valid)
  params = GM.init_params(model, data, 0)
  seen = {}

  def fake_fit(*, name, init_fn, batch_fn, seed, optimizer, **_):
    start = init_fn(None)
    grads = jax.tree.map(lambda x: np.ones_like(x), start)
    updates, _ = optimizer.update(grads, optimizer.init(start), start)
    p = jax.device_get(optax.apply_updates(start, updates))
    seen[name.split()[-1]] = (batch_fn(np.arange(len(queries) if name.endswith("retriever") else 24)), start, p)
    return type("State", (), {"params": p})

  monkeypatch.setattr(GM.train, "fit_epochs", fake_fit)
  tcfg = ml_collections.ConfigDict({**c.train.to_dict(), "kmeans_iters": 2})
  out = GM.train_tokenizer_first(model, params, data, tcfg, Path("/unused"), 0)
  assert list(seen) == ["views", "retriever"]
  _, before, views = seen["views"]
  moved = {k for k, v in ops.flatten_dict(views).items() if not np.array_equal(v, ops.flatten_dict(before)[k])}
  assert moved and all(k.startswith("tokenizer/encoder/") for k in moved)  # the views alone
  batch, start, _ = seen["retriever"]
  jax.tree.map(np.testing.assert_array_equal, start["tokenizer"], out["tokenizer"])  # frozen from here on
  z = np.asarray(model.apply({"params": start}, jnp.asarray(feats), method=lambda m, x: m.tok.encode(x)))
  view = GM.matched_view(z, GM.intent_centres(data, queries, c.model.num_views), data)
  np.testing.assert_array_equal(batch["codes"], GM.video_codes(model, start, feats)[video, view])


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


def test_generative_recall_uncapped_brings_every_video_of_its_beams_and_a_cap_cuts_in_beam_order():
  """GRDR §4.3 / §4.7 and the release: 100 beams (routes), their IDs expanded to videos, de-duplicated in beam order,
  at most 300 handed to the reranker (the configs' default, the release's candidate_handoff_cap); uncapped
  (`limit` None) every video of the beams, and a cap keeps the first ones in beam order."""
  from conftest import load_config, ROOT
  c = load_config(ROOT / "configs/grdr_msrvtt.py")
  assert (c.eval.beam_width, c.eval.candidates, c.train.algorithm1.hc_targets) == (100, 300, "fixed")
  rng = np.random.default_rng(3)
  k, depth, videos = 4, 2, 40  # 16 possible IDs for 80 (video, view) pairs: IDs shared by several videos
  trie = SemanticIdTrie([f"v{i}" for i in range(videos)], rng.integers(0, k, (videos, 2, depth)), k)
  logp = jnp.asarray(_log_softmax(rng.normal(size=(3, 1 + k, k))), jnp.float32)
  queries = jnp.zeros((3, 1))
  _, leaves, _ = beam_search(_table_logp, trie.arrays(), logp, queries, width=3, depth=depth)
  recall = GenerativeRecall(trie, lambda p, q: q, _table_logp, logp, width=3)
  sizes = np.sort(np.diff(trie.video_ptr))[::-1]
  assert recall.max_candidates == sizes[:3].sum()
  got = recall.candidates(queries)
  ids, _ = recall.retrieve(queries, k=recall.max_candidates)
  for q in range(3):
    want = trie.videos_in_order(np.asarray(leaves[q]))
    np.testing.assert_array_equal(got[q], want)
    assert list(ids[q, :len(want)]) == list(trie.video_ids[want]) and set(ids[q, len(want):]) <= {""}
    assert len(want) == len(np.unique(np.concatenate([trie.video_index[trie.video_ptr[l]:trie.video_ptr[l + 1]]
                                                      for l in np.asarray(leaves[q])])))
  assert max(len(g) for g in got) > 4
  capped = GenerativeRecall(trie, lambda p, q: q, _table_logp, logp, width=3, limit=4)
  assert capped.max_candidates == 4
  for q, g in enumerate(capped.candidates(queries)):
    np.testing.assert_array_equal(g, got[q][:4])


def _corpus(config, workdir):
  """The corpus a run of `config` in `workdir` reads (a world: the files it writes under `<workdir>/world`)."""
  return GM.read_corpus(common.world_data(config, workdir, write_world), workdir)


def _no_latency(row: dict) -> dict:
  """A results row without its timings (latency_ms, its readings' too): what a rerun must reproduce."""
  return {k: {n: _no_latency(r) for n, r in v.items()} if k == "readings" else v for k, v in row.items()
          if k != "latency_ms"}


def _as_backbone(row: dict) -> dict:
  """A results row as a run reranking by the backbone's cosine alone writes it (timings aside): a GR row's
  `dense_backbone` reading in place of its X-Pool metrics (the same candidates), no readings; a dense row as it is."""
  if "readings" not in row:
    return _no_latency(row)
  cosine = row["readings"]["dense_backbone"]
  return _no_latency({**row, **cosine, "reranker": "dense_backbone", "readings": {}})


@pytest.fixture(scope="module")
def smoke_run(smoke_runs):
  return smoke_runs("grdr")


def test_grdr_smoke_run_writes_the_results_contract(smoke_run):
  workdir, results = smoke_run
  saved = json.loads((workdir / "results.json").read_text())
  assert saved["synthetic"] is True and saved["path"] == "world"
  keys = {"t2v_r1", "t2v_r5", "t2v_r10", "candidate_recall", "num_candidates", "latency_ms", "reranker"}
  dense = ("dense_backbone", "clip4clip", "xpool")
  for setting in ("inductive", "full_corpus"):
    assert set(saved["metrics"][setting]) == {*dense, "tiger", "avg", "t2vindexer", "grdr_paper", "grdr", "grdr_cap5"}
    assert saved["metrics"][setting] == saved[setting]
    for method, row in saved["metrics"][setting].items():
      assert keys <= set(row), method
      assert row["t2v_r1"] <= row["t2v_r5"] <= row["t2v_r10"] <= 100 and row["latency_ms"]["total"] > 0
      if method in dense:  # each alone over the pool
        assert row["reranker"] is None and row["t2v_r1"] <= row["candidate_recall"]
      else:  # GR rows: X-Pool's rerank (the paper's), the backbone cosine's a second reading of the same candidates
        latency = row["latency_ms"]
        assert set(latency) >= {"encode", "decode", "id_to_video", "recall", "rerank", "total"}
        assert latency["total"] == pytest.approx(latency["recall"] + latency["rerank"])
        assert 0 < row["num_candidates"] and row["t2v_r1"] <= row["candidate_recall"]
        assert row["reranker"] == "xpool" and set(row["readings"]) == {"dense_backbone"}
        reading = row["readings"]["dense_backbone"]
        assert set(reading) == {"t2v_r1", "t2v_r5", "t2v_r10", "latency_ms"}
        assert reading["t2v_r10"] <= row["candidate_recall"] and reading["latency_ms"]["recall"] == latency["recall"]
    # the dense rows' candidate recall is their R@300 (the GR rows' handoff cap), over the pool; "clip4clip" is
    # CLIP4Clip seqTransf (the paper's CLIP4Clip numbers are seqTransf's), each row names its model
    assert saved["metrics"][setting]["xpool"]["num_candidates"] == (30 if setting == "inductive" else 300)
    assert {m: saved["metrics"][setting][m]["model"] for m in ("clip4clip", "xpool")} == {
        "clip4clip": "clip4clip_seqtransf", "xpool": "xpool"}
    grdr, capped = saved["metrics"][setting]["grdr"], saved["metrics"][setting]["grdr_cap5"]
    assert (grdr["beam_width"], grdr["candidate_cap"], capped["beam_width"], capped["candidate_cap"]) == (8, 300, 8, 5)
    assert capped["num_candidates"] <= 5 < grdr["num_candidates"]
    table3 = saved["ablations"]["table3"][setting]
    assert set(table3) == {"grdr_paper", "wo_multiview_tokenizer", "wo_unified_cotraining", "wo_hc", "wo_cl"}
    assert table3["grdr_paper"] == saved["metrics"][setting]["grdr_paper"]
    assert all(keys <= set(row) for row in table3.values())
  assert len(saved["codebook"]["layers"]) == 2 and "colliding_ids" in saved["codebook"]
  size = saved["index_bytes_per_video"]
  assert size["grdr_ids_int16"] == 2 * 4 * 2 and size["video_float32"] == 4 * 128
  assert size["frame_float32"] == 12 * size["video_float32"] and size["grdr"] < size["video_float32"]
  assert (workdir / "candidate_recall.png").stat().st_size > 0
  # The world's schedule (tokenizer_first): views, then frozen IDs, then the retriever, each checkpointed; Algorithm 1
  # (`grdr_paper`): three phases per layer; the baselines: TIGER's / AVG's RQ-VAE then its retriever, T2VIndexer's
  # retriever on k-means IDs (nothing to checkpoint).
  models = workdir / "models"
  assert sorted(p.name for p in (models / "grdr").iterdir()) == ["retriever", "views"]
  assert sorted(p.name for p in (models / "grdr_paper").iterdir()) == sorted(
      f"layer{m}_{p}" for m in (1, 2) for p in ("align", "cotrain", "fit"))
  assert sorted(p.name for p in (models / "tiger").iterdir()) == ["retriever", "rqvae"]
  assert sorted(p.name for p in (models / "avg").iterdir()) == ["retriever", "rqvae"]
  assert sorted(p.name for p in (models / "t2vindexer").iterdir()) == ["retriever"]
  for row in ("clip4clip", "xpool"):  # the dense rows: the one loop's checkpoints (fit_dense)
    assert (models / row / "checkpoints").is_dir() and (models / row / "metrics.jsonl").is_file()
  # w/o unified co-training: the two-stage pipeline, the tokenizer then the retriever
  assert sorted(p.name for p in (models / "table3" / "wo_unified_cotraining").iterdir()) == ["retriever", "tokenizer"]
  # w/o L_CL: Algorithm 1 without the first layer's alignment phase (it would have nothing to train)
  assert sorted(p.name for p in (models / "table3" / "wo_cl").iterdir()) == [
      "layer1_cotrain", "layer1_fit", "layer2_align", "layer2_cotrain", "layer2_fit"]
  # Algorithm 1's official settings, each with its source and this run's value (tiny scales some down)
  record = saved["algorithm1"]
  config = grdr_smoke_config()
  assert record["repo"] == "JasonCodeMaker/GRDR" and record["rows"] == [
      "grdr_paper", "table3/wo_multiview_tokenizer", "table3/wo_hc", "table3/wo_cl"]
  assert set(record["commits"].values()) >= {"3ca3367fefb59a9ee18585412ad10b11e0acf6b1",
                                             "4526a5855bb36d49e251275289de7723ef67267b"}
  keys = {r["key"] for r in record["followed"].values()}
  assert {f"train.algorithm1.{k}" for k in config.train.algorithm1} <= keys | {"train.algorithm1.phase_weights"}
  assert {f"train.algorithm1.phase_weights.{p}" for p in GM.PHASES} <= keys  # every setting of Algorithm 1 sourced
  for name, r in record["followed"].items():
    assert re.search(r"\S+@[0-9a-f]{40}", r["source"]), (name, r["source"])
    assert r["scaled"] == (r["value"] != r["official"]), name
  scaled = {name for name, r in record["followed"].items() if r["scaled"]}
  assert scaled == {"pretrain_epochs_first_layer", "main_epochs", "fit_epochs", "learning_rate", "batch_size",
                    "codebook_size", "codebook_layers", "query_tokens", "codebook_kmeans_iterations",
                    "num_candidates_routes"}, scaled
  followed = record["followed"]
  assert followed["w2_main_weights"]["value"] == [0.2, 0.5, 0.8, 0.1, 0.3] and followed["fit_epochs"]["official"] == 2
  assert followed["candidate_handoff_cap"]["value"] == 300  # the world scales the rate up (configs/grdr/common.py)
  assert (followed["learning_rate"]["value"], followed["learning_rate"]["official"]) == (1e-3, 1e-4)
  assert {"pretrained_t5", "checkpoint_selection", "bars_reorder"} <= set(record["not_followed"])
  assert all({"official", "source", "vidjax", "why"} <= set(r) for r in record["not_followed"].values())


def test_algorithm_1_phases_in_order_earlier_codebooks_frozen_codes_stable_under_hc(smoke_run):
  """Algorithm 1 as the smoke run trained it (`grdr_paper`, and Table 3's run without L_HC): one workdir per
  phase, run in Algorithm 1's order (per layer: alignment, co-training, fit); the fit phase leaves the whole tokenizer
  as co-training left it; C^(1) does not move after layer 1's phases; under L_HC the layer-1 codes of the training
  videos stay as layer 1 left them (at least as stable as without L_HC); the IDs are valid codes."""
  from vidjax import train
  workdir, _ = smoke_run
  config = grdr_smoke_config()
  world = _corpus(config, workdir)
  order = [f"layer{m}_{p}" for m in (1, 2) for p in ("align", "cotrain", "fit")]
  stable = {}
  for name in ("grdr_paper", "table3/wo_hc"):
    root = workdir / "models" / name
    assert sorted(p.name for p in root.iterdir()) == sorted(order)
    finished = [max(f.stat().st_mtime_ns for f in (root / phase).rglob("*") if f.is_file()) for phase in order]
    assert finished == sorted(finished), (name, finished)
    params = {phase: train.load_params(root / phase) for phase in order}
    for m in (1, 2):  # the fit phase trains the retriever alone
      jax.tree.map(np.testing.assert_array_equal, params[f"layer{m}_cotrain"]["tokenizer"],
                   params[f"layer{m}_fit"]["tokenizer"])
      assert any(not np.array_equal(a, b) for a, b in zip(
          jax.tree.leaves(params[f"layer{m}_cotrain"]["decoder"]), jax.tree.leaves(params[f"layer{m}_fit"]["decoder"])))
    model = GM.recipe_model(config, GM.Recipe("progressive", config.model.num_views), world.features.shape[1])
    book = lambda phase: params[phase]["tokenizer"]["codebook_0"]  # noqa: E731
    for phase in order[2:]:
      np.testing.assert_array_equal(book("layer1_cotrain"), book(phase))
    features = world.features[world.train]
    first = GM.video_codes(model, params["layer1_fit"], features, 1)
    last = GM.video_codes(model, params["layer2_fit"], features)
    assert last.min() >= 0 and last.max() < config.model.num_codes
    stable[name] = float(np.mean(first[..., 0] == last[..., 0]))
  assert stable["grdr_paper"] >= 0.9 and stable["grdr_paper"] >= stable["table3/wo_hc"], stable


def test_two_stage_row_trains_the_tokenizer_alone_then_the_retriever_on_its_frozen_ids(smoke_run):
  """Table 3's "w/o unified co-training" is the paper's two-stage pipeline, not Algorithm 1 with L_CE at 0: the
  tokenizer stage leaves every retriever param at its initialisation and changes the tokenizer; the retriever stage
  leaves the tokenizer (views, codebooks, decoders) exactly as the tokenizer stage left it and trains the retriever."""
  from vidjax import train
  workdir, _ = smoke_run
  config = grdr_smoke_config()
  world = _corpus(config, workdir)
  root = workdir / "models" / "table3" / "wo_unified_cotraining"
  stage1, stage2 = train.load_params(root / "tokenizer"), train.load_params(root / "retriever")
  model = GM.recipe_model(config, GM.Recipe("two_stage", config.model.num_views), world.features.shape[1])
  data = GM.training_set(config, world, config.model.num_views)
  init = GM.init_params(model, data, config.seed)
  retriever = lambda p: {k: v for k, v in p.items() if k != "tokenizer"}  # noqa: E731
  jax.tree.map(np.testing.assert_array_equal, retriever(stage1), retriever(init))
  jax.tree.map(np.testing.assert_array_equal, stage1["tokenizer"], stage2["tokenizer"])
  moved = lambda a, b: any(not np.array_equal(x, y)  # noqa: E731
                           for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
  assert moved(stage1["tokenizer"]["encoder"], init["tokenizer"]["encoder"])
  assert moved(stage1["tokenizer"]["decoder"], init["tokenizer"]["decoder"])
  assert moved(retriever(stage2), retriever(init))


def test_sweep_variant_adds_figure_7_rows_to_a_finished_run(smoke_run, tmp_path):
  """`:sweep` on a finished run's workdir trains only the sweep's models (N_v, K, M, T5 size) and evaluates the main
  model at each beam width, uncapped: rows per axis in results.json (also `metrics.sweep`) with R@1 and latency, a
  plot, and the main rows unchanged (every row's phases are restored from their checkpoints, not retrained)."""
  import shutil
  from conftest import load_config, ROOT
  workdir, reference = smoke_run
  shutil.copytree(workdir, tmp_path / "run")
  config = load_config(ROOT / "configs/grdr_msrvtt.py:smoke,sweep")
  config.eval.update(compare_single_view=False, capped_row=False)  # the capped row: the results contract's test
  # the backbone's cosine alone (the X-Pool rerank and the dense rows: the results contract's test; this rerun's
  # rows are the reference's second readings)
  config.eval.update(reranker="dense_backbone", dense_rows=())
  # one model to train (M = 1): the others are the main model's values (N_v = 4, K = 16, M = 2, T5 "small"); a
  # model per N_v, K or T5 size is the same code with another n_views / num_codes / model.t5
  config.sweep.update(num_views=(4,), num_codes=(16,), num_layers=(1, 2), t5_size=("small",))
  base = GM.sweep_t5(config, "base").model.t5  # T5-Small -> Base: width x1.5, depth x2
  assert (base.d_model, base.num_heads, base.d_ff, base.decoder_layers) == (48, 3, 96, 2)
  results = G.run(config, tmp_path / "run")
  sweep = results["sweep"]
  assert results["metrics"]["sweep"] == sweep
  assert {axis: sorted(rows) for axis, rows in sweep.items()} == {
      "num_views": ["4"], "num_codes": ["16"], "num_layers": ["1", "2"], "t5_size": ["small"],
      "beam_width": ["4", "8"]}
  for axis, rows in sweep.items():
    for row in rows.values():
      assert 0 <= row["t2v_r1"] <= row["candidate_recall"] <= 100 and row["num_candidates"] > 0
      # every beam row uncapped (§4.7's candidates per beam), the model rows at the config's handoff cap
      assert row["latency_ms"]["total"] > 0 and row["candidate_cap"] == (0 if axis == "beam_width" else 300)
  assert sweep["beam_width"]["4"]["num_candidates"] < sweep["beam_width"]["8"]["num_candidates"]
  assert (tmp_path / "run" / "sweep.png").stat().st_size > 0
  assert sorted(p.name for p in (tmp_path / "run" / "models" / "sweep").iterdir()) == ["num_layers1"]
  strip = lambda r: {m: _no_latency(row) for m, row in r.items()}  # noqa: E731
  main = strip({"m": sweep["num_views"]["4"]})
  assert main == strip({"m": sweep["num_codes"]["16"]}) == strip({"m": sweep["num_layers"]["2"]})
  assert main == strip({"m": sweep["t5_size"]["small"]})
  # the main model at its beam, uncapped: the same candidates (fewer than the cap here)
  assert main == strip({"m": {**sweep["beam_width"]["8"], "candidate_cap": 300}})
  # A rerun on a finished workdir restores every phase of every row: the same results in both settings.
  backbone = lambda r: {m: _as_backbone(row) for m, row in r.items()  # noqa: E731
                        if m not in ("grdr_cap5", "clip4clip", "xpool")}
  for s in ("inductive", "full_corpus"):
    assert strip(results["metrics"][s]) == backbone(reference["metrics"][s])
    assert strip(results["ablations"]["table3"][s]) == backbone(reference["ablations"]["table3"][s])


def test_bad_sizes_get_one_clear_error_before_training(tmp_path):
  config = grdr_smoke_config()
  world = _corpus(config, tmp_path)
  GM.check_budget(config, world)
  few = grdr_smoke_config()  # K^M below the corpus size: a warning naming the scale that fits
  few.model.update(num_codes=2, num_layers=2)
  few.eval.update(beam_width=4, capped_beam_width=4)
  with pytest.warns(UserWarning, match=r"K\^M = 2\^2 = 4 possible IDs for .*K = 256, M = 4"):
    GM.check_budget(few, world)
  bad = grdr_smoke_config()
  bad.model.num_codes = len(world.train) + 1
  with pytest.raises(ValueError, match=f"model.num_codes={len(world.train) + 1} .* larger than the {len(world.train)} "
                                       "training videos"):
    GM.check_budget(bad, world)
  bad = grdr_smoke_config()
  bad.baselines.num_codes = 10_000
  with pytest.raises(ValueError, match="baselines.num_codes=10000 \\(row 'tiger'\\)"):
    grdr_baselines.check_budget(bad, world)
  bad = grdr_smoke_config()
  bad.eval.beam_width = 4 * len(world.test) + 1
  with pytest.raises(ValueError, match=f"eval.beam_width={4 * len(world.test) + 1} is wider than the trie allows: .* "
                                       f"at most {4 * len(world.test)} distinct IDs"):
    GM.check_budget(bad, world)
  bad.eval.update(beam_width=8, capped_beam_width=4 * len(world.test) + 1)  # the capped row's beam too
  with pytest.raises(ValueError, match=f"eval.capped_beam_width={4 * len(world.test) + 1} is wider"):
    GM.check_budget(bad, world)


def test_grdr_killed_mid_phase_resumes_into_that_phase_and_the_same_results(smoke_run, tmp_path):
  """SIGKILL in the middle of Algorithm 1's layer-1 co-training phase (checkpoints every 2 steps), then a rerun:
  it resumes that phase from its last checkpoint, and its results equal the uninterrupted smoke run's Algorithm 1
  row (`grdr_paper`, latencies aside; the rerun reranks by the backbone cosine alone, without the dense rows: the
  reference's second reading)."""
  import os
  import signal
  import subprocess
  import sys
  import time
  _, reference = smoke_run
  workdir = tmp_path / "run"
  cmd = [sys.executable, "-m", "vidjax.main", "--config", "configs/grdr_msrvtt.py:smoke",
         "--config.train.schedule=progressive", "--config.train.checkpoint_every=2", "--config.train.log_every=1",
         "--config.eval.compare_single_view=False", "--config.eval.baselines=False", "--config.eval.table3=False",
         "--config.eval.capped_row=False", "--config.eval.reranker=dense_backbone", "--config.eval.dense_rows=()",
         "--workdir", str(workdir)]
  root = Path(__file__).resolve().parents[1]
  phase = workdir / "models" / "grdr" / "layer1_cotrain"
  proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  deadline = time.time() + 600
  steps = lambda: sorted(int(p.name) for p in (phase / "checkpoints").glob("[0-9]*") if p.name.isdigit())  # noqa: E731
  while len(steps()) < 2 and proc.poll() is None and time.time() < deadline:
    time.sleep(0.01)
  os.kill(proc.pid, signal.SIGKILL)
  assert proc.wait() == -signal.SIGKILL, proc.stderr.read()[-2000:]
  killed_at = max(steps())
  before = [line for line in (phase / "metrics.jsonl").read_text().splitlines()
            if line.endswith("}") and json.loads(line)["step"] <= killed_at]
  assert not (workdir / "models" / "grdr" / "layer2_align").exists() and not (workdir / "results.json").exists()
  again = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=900)
  assert again.returncode == 0, again.stderr[-2000:]
  # Resumed into the phase, not from its start: the steps logged before the kill are kept as they were (a rerun of
  # them would log other throughputs), then the phase goes on to its end.
  after = (phase / "metrics.jsonl").read_text().splitlines()
  assert 0 < killed_at and len(before) == killed_at and after[:killed_at] == before
  assert json.loads(after[-1])["step"] > killed_at
  resumed = json.loads((workdir / "results.json").read_text())
  strip = _no_latency
  reference = json.loads(json.dumps(reference))
  for s in ("inductive", "full_corpus"):  # reranked by the backbone's cosine here, the reference's second reading
    assert strip(resumed["metrics"][s]["grdr"]) == _as_backbone(reference["metrics"][s]["grdr_paper"])
    assert set(resumed["metrics"][s]) == {"dense_backbone", "grdr", "grdr_paper"}


def test_grdr_model_shapes_and_code_distribution():
  c = grdr_smoke_config()
  model = GM.build_model(c.model, 128)
  rng = np.random.default_rng(0)
  f, q = jnp.asarray(rng.normal(size=(3, 128)), jnp.float32), jnp.asarray(rng.normal(size=(3, 128)), jnp.float32)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), f, q)["params"]  # compiled: op by op costs seconds
  assert params["tokenizer"]["codebook_1"].shape == (16, c.model.latent_dim)
  apply = lambda method: jax.jit(lambda p, *a: model.apply({"params": p}, *a, method=method))  # noqa: E731
  mem = apply(GM.GRDR.encode_query)(params, q)
  assert mem["memory"].shape == (3, c.model.query_tokens, c.model.t5.d_model) and bool(mem["mask"].all())
  logp = apply(GM.GRDR.code_logp)(params, mem, jnp.zeros((3, 5, 1), jnp.int32))
  assert logp.shape == (3, 5, 16)
  np.testing.assert_allclose(np.asarray(jax.nn.logsumexp(logp, -1)), 0.0, atol=1e-5)
  decode = apply(GM.GRDR.decode)
  h = decode(params, mem, jnp.asarray([[1], [2], [3]]))
  h2 = decode(params, mem, jnp.asarray([[4], [5], [6]]))
  np.testing.assert_allclose(h[:, 0], h2[:, 0], atol=1e-5)  # h_1 does not see c_1
  many = jnp.asarray(rng.normal(size=(64, 128)), jnp.float32)
  codes = np.asarray(apply(GM.GRDR.video_codes)(params, many))
  assert codes.shape == (64, c.model.num_views, 2) and codes.dtype == np.int32
  # The codes are eq. 4-5's residual quantization of the views: at each layer the entry of maximum cosine with the
  # residual, recomputed here in NumPy from the tokenizer's views and codebooks (a tokenizer that returns constant or
  # wrong codes fails this), and random views spread over many codes.
  z = np.asarray(apply(lambda m, x: m.tok.encode(x))(params, many))
  books = [np.asarray(params["tokenizer"][f"codebook_{l}"]) for l in range(2)]
  r = z.copy()
  for l, book in enumerate(books):
    want = np.argmax(_unit(r) @ _unit(book).T, axis=-1)
    np.testing.assert_array_equal(codes[..., l], want)
    r = r - book[want]
  assert len(np.unique(codes[:, 0, 0])) >= 4


def test_init_codebook_is_kmeans_on_the_residuals_of_the_frozen_layers():
  """Algorithm 1 line 10 (eq. 4): C^(m) is cosine k-means over every view's residual after layers 1..m-1, from
  `kmeans_init`'s start; checked against a NumPy Lloyd loop. Only C^(m) changes, and the caller's tree is kept."""
  c = grdr_smoke_config()
  model = GM.build_model(c.model, 32)
  rng = np.random.default_rng(2)
  feats = rng.normal(size=(40, 32)).astype(np.float32)
  x = jnp.asarray(feats[:2])
  params = jax.device_get(jax.jit(model.init)(jax.random.PRNGKey(0), x, x)["params"])  # op by op costs seconds
  before = jax.tree.map(np.array, params)
  got = GM.init_codebook(model, params, feats, layer=2, seed=5, iters=4)
  z = np.asarray(model.apply({"params": params}, jnp.asarray(feats), method=lambda m, x: m.tok.encode(x)))
  book0 = np.asarray(params["tokenizer"]["codebook_0"])
  r = z - book0[np.argmax(_unit(z) @ _unit(book0).T, axis=-1)]  # the residual after the frozen layer 1
  r = r.reshape(-1, r.shape[-1])
  centres = np.asarray(ops.kmeans_init(jax.random.PRNGKey(5), jnp.asarray(r), c.model.num_codes), np.float64)
  for _ in range(4):
    assign = np.argmax(_unit(r) @ _unit(centres).T, axis=1)
    centres = np.stack([r[assign == j].mean(0) if (assign == j).any() else centres[j] for j in range(len(centres))])
  np.testing.assert_allclose(np.asarray(got["tokenizer"]["codebook_1"]), centres, rtol=1e-4, atol=1e-5)
  rest = lambda tree: {k: v for k, v in ops.flatten_dict(tree).items() if k != "tokenizer/codebook_1"}  # noqa: E731
  jax.tree.map(np.testing.assert_array_equal, rest(got), rest(before))
  jax.tree.map(np.testing.assert_array_equal, params, before)
  # As the official run seeds it (Algorithm 1's default): each residual shifted by the mean of its prefix group (the
  # view's layer-1 code) to the global mean (trainer/evaluator.py norm_by_prefix), then squared-L2 Lloyd iterations.
  got = GM.init_codebook(model, params, feats, layer=2, seed=5, iters=4, metric="l2", centred=True)
  prefix = np.argmax(_unit(z) @ _unit(book0).T, axis=-1).reshape(-1)
  shifted = r.copy()
  for p in np.unique(prefix):
    shifted[prefix == p] += r.mean(0) - r[prefix == p].mean(0)
  centres = np.asarray(ops.kmeans_init(jax.random.PRNGKey(5), jnp.asarray(shifted.astype(np.float32)),
                                       c.model.num_codes), np.float64)
  for _ in range(4):
    assign = np.argmin(((shifted[:, None] - centres[None]) ** 2).sum(-1), axis=1)
    centres = np.stack([shifted[assign == j].mean(0) if (assign == j).any() else centres[j]
                        for j in range(len(centres))])
  np.testing.assert_allclose(np.asarray(got["tokenizer"]["codebook_1"]), centres, rtol=1e-4, atol=1e-5)


def test_t5_query_encoder_reads_token_ids_and_ignores_padding():
  """query_encoder "t5" (the paper's): a T5 encoder over the query's token ids; padding (id 0) is masked, so more
  of it changes nothing, while another token does."""
  from conftest import load_config, ROOT
  c = load_config(ROOT / "configs/grdr_msrvtt.py:tiny")
  assert c.model.query_encoder == "t5" and c.model.query_len == 32
  model = GM.build_model(c.model, 16, vocab_size=50)
  f = jnp.ones((2, 16), jnp.float32)
  ids = jnp.asarray([[5, 7, 9, 0], [3, 0, 0, 0]], jnp.int32)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), f, ids)["params"]  # compiled: op by op costs seconds
  assert params["query_embed"]["embedding"].shape == (50, c.model.t5.d_model) and "query_in" not in params
  prefix = jnp.asarray([[1], [2]], jnp.int32)
  h = jax.jit(lambda q: model.apply({"params": params}, q, prefix, method=GM.GRDR.retriever_h))
  longer = jnp.concatenate([ids, jnp.zeros((2, 3), jnp.int32)], axis=1)
  np.testing.assert_allclose(h(ids), h(longer), atol=1e-5)
  assert float(jnp.abs(h(ids) - h(ids.at[1, 1].set(4))).max()) > 1e-3
  with pytest.raises(ValueError, match="needs vocab_size > 0"):
    GM.build_model(c.model, 16)


def test_pseudo_query_providers_plug_in_and_bad_ones_get_one_clear_error(tmp_path):
  config = grdr_smoke_config()
  world = _corpus(config, tmp_path)
  q, video = GM.checked_queries(world, world.train, 128)
  np.testing.assert_array_equal(q, world.train_queries)
  np.testing.assert_array_equal(world.train[video], world.train_query_video)  # positions name the right videos
  # A subset of the training videos keeps only their queries, positions relative to the subset.
  rows = world.train[::3]
  q2, v2 = world(rows)
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


def _state_logp(params, state, prefix):
  """A model whose next-code scores depend on the query's state and on the prefix (for chunking)."""
  del params
  q, w, m = prefix.shape
  scale = 1.0 + jnp.sum(prefix, axis=-1, keepdims=True).astype(jnp.float32)
  return jax.nn.log_softmax(state[:, None, :] * scale + 0.1 * m, axis=-1)


def test_generative_recall_in_query_chunks_equals_one_pass(monkeypatch):
  """A beam-state budget smaller than the batch's splits the beam search into chunks of queries (the last padded):
  the same candidates and scores as one pass, and a bad budget is one clear error."""
  rng = np.random.default_rng(1)
  k, videos = 5, 40
  trie = SemanticIdTrie([f"v{i}" for i in range(videos)], rng.integers(0, k, (videos, 2, 3)), k)
  queries = rng.normal(size=(7, k)).astype(np.float32)  # the state is the query itself: 20 bytes a query
  one = GenerativeRecall(trie, lambda p, q: q, _state_logp, None, width=4, limit=6)
  ids, scores = one.retrieve(queries, k=6)
  from vidjax.retrieval import generative
  calls = []
  counted = lambda *a, **kw: calls.append(kw) or beam_search(*a, **kw)  # noqa: E731
  monkeypatch.setattr(generative, "beam_search", counted)
  # 3 queries a chunk (the last padded), then 1; 3 copies of the state a step: 1 a chunk in the first budget
  for budget, copies, passes in ((4 * 20 * 3, 1, 3), (4 * 20, 1, 7), (4 * 20 * 3, 3, 7)):
    chunked = GenerativeRecall(trie, lambda p, q: q, _state_logp, None, width=4, limit=6, beam_state_bytes=budget,
                               state_copies=copies)
    calls.clear()
    got_ids, got_scores = chunked.retrieve(queries, k=6)
    assert len(calls) == passes
    np.testing.assert_array_equal(got_ids, ids)
    np.testing.assert_allclose(got_scores, scores, rtol=1e-6)
    assert chunked.queries_seen == 7
  assert len(set(map(tuple, ids))) > 1  # the queries' states matter
  with pytest.raises(ValueError, match="beam_state_bytes must be a positive integer"):
    GenerativeRecall(trie, lambda p, q: q, _state_logp, None, width=4, beam_state_bytes=0)
  with pytest.raises(ValueError, match="state_copies must be a positive integer"):
    GenerativeRecall(trie, lambda p, q: q, _state_logp, None, width=4, state_copies=0)


def test_a_t5_decoder_step_keeps_about_its_state_copies_of_the_repeated_memory():
  """`generative.t5_state_copies`: a T5 decoder over beams' repeated encoder memory keeps about 1 + 2 x layers
  copies of it (the memory, and each layer's cross-attention keys and values): XLA's own count of the step's
  working memory is at most 10% above that (so `GenerativeRecall`'s chunks bound what a beam-search step takes)."""
  from vidjax.models import t5 as T5  # pylint: disable=g-import-not-at-top
  from vidjax.retrieval.generative import t5_state_copies  # pylint: disable=g-import-not-at-top
  c = T5.T5Config(d_model=64, num_heads=4, d_kv=16, d_ff=128, encoder_layers=1, decoder_layers=3, dropout_rate=0.1)
  dec, n, length = T5.T5Decoder(c), 240, 16
  args = (jnp.zeros((n, 3, 64)), jnp.zeros((n, length, 64)), jnp.ones((n, length), bool))
  params = jax.eval_shape(lambda: dec.init(jax.random.PRNGKey(0), *(a[:1] for a in args)))
  temp = jax.jit(dec.apply).lower(params, *args).compile().memory_analysis().temp_size_in_bytes
  memory = n * length * 64 * 4
  assert t5_state_copies(3) == 7 and temp <= 1.1 * t5_state_copies(3) * memory, temp / memory


def test_fewer_ranked_ids_than_k_count_as_misses_and_the_sizes_fit_the_training_split():
  """A small pool ranks fewer than 10 ids: R@10 counts the queries whose video is among them (no "ks exceed" error);
  the batch sizes' limits are the training queries and the training videos."""
  from types import SimpleNamespace  # pylint: disable=g-import-not-at-top
  ids = np.array([["a", "b", "c", "d", "e", "f"], ["b", "a", "", "", "", ""]])
  assert GM.recall_at(ids, np.array(["f", "z"])) == {"t2v_r1": 0.0, "t2v_r5": 0.0, "t2v_r10": 50.0}
  corpus = SimpleNamespace(train_queries=np.zeros((40, 4)), train=np.arange(12))
  limits = GM.limits(None, corpus)
  assert {k: v[0] for k, v in limits.items()} == {"train.batch_size": 40, "train.view_batch_size": 12,
                                                  "model.num_codes": 12}  # k-means initialises a codebook


def test_the_dense_row_on_a_pool_of_fewer_than_ten_videos():
  """A user's few test videos (issue 52's walk: 8): the dense row ranks them all, its latency included (it asked
  the index for 10)."""
  import types
  import ml_collections
  from vidjax.defaults.common import index_section
  rng = np.random.default_rng(0)
  feats = rng.normal(size=(8, 6)).astype(np.float32)
  corpus = types.SimpleNamespace(video_ids=np.array([f"v{i}" for i in range(8)]), features=feats,
                                 test_query_video=np.arange(8), test_queries=feats + 0.01)
  ecfg = ml_collections.ConfigDict(dict(candidates=0, dense_candidates=150, latency_queries=2))
  row = GM.dense_setting(corpus, np.arange(8), ecfg, index_section())
  assert row["t2v_r1"] == 100.0 and row["num_candidates"] == 8 and row["latency_ms"]["total"] > 0


def test_xpool_rerank_of_recalled_candidates_equals_the_scorer_on_each_querys_own_candidates():
  """A GR row's X-Pool rerank (`frames_reranker` + `rerank_found`): each query's candidates' frames gathered by row
  (the corpus's sorted ids), the padding ids "" (score -inf) given a safe row and kept last, the order that of
  X-Pool's score of each real candidate, computed here directly (every query against every video, one scorer call)
  and sorted with NumPy; the backbone reading reorders the same candidates by the cosine of the clip features."""
  import types
  from vidjax.models.dense import DenseConfig, DenseRetriever, init_params
  from vidjax.scorers.dense import DenseScorer
  rng = np.random.default_rng(0)
  v, t, d = 12, 3, 8
  model = DenseRetriever(DenseConfig(pooling="xpool", embed_dim=d, frame_dim=d))
  params = jax.tree.map(lambda x: x + 0.3 * rng.normal(size=x.shape).astype(np.float32),
                        jax.device_get(init_params(model, jax.random.PRNGKey(0), t)))
  scorer = DenseScorer(model, params)
  corpus = types.SimpleNamespace(video_ids=np.array([f"v{i:02d}" for i in range(v)]),
                                 frames=rng.normal(size=(v, t, d)).astype(np.float32),
                                 features=rng.normal(size=(v, d)).astype(np.float32))
  text = rng.normal(size=(3, d)).astype(np.float32)
  found = np.array([["v03", "v07", "v01", "v11", "v00"], ["v05", "v02", "", "", ""], ["v09", "", "", "", ""]])
  prior = np.where(found == "", -np.inf, -np.arange(5.0)[None]).astype(np.float32)
  recall = types.SimpleNamespace(vectors=lambda ids: np.where(  # the backbone's batch: the clip features, 0 for ""
      (np.asarray(ids) == "")[..., None], 0.0, corpus.features[np.searchsorted(corpus.video_ids, ids)]))
  xpool = GM.frames_reranker("xpool", scorer, corpus)
  got = GM.rerank_found(recall, found, prior, xpool, {"text": text}, k=5)
  direct = scorer.score({"text": text, "candidates": corpus.frames})  # [Q, V] every pair
  cos = (text / np.linalg.norm(text, axis=1, keepdims=True)) @ (
      corpus.features / np.linalg.norm(corpus.features, axis=1, keepdims=True)).T
  for name, reranker, full in (("xpool", xpool, direct), ("dense_backbone", GM.BACKBONE, cos)):
    res = got if name == "xpool" else GM.rerank_found(recall, found, prior, reranker, {"text": text}, k=5)
    for q in range(3):
      real = found[q][found[q] != ""]
      s = full[q, np.searchsorted(corpus.video_ids, real)]
      want = list(real[np.argsort(-s, kind="stable")]) + [""] * (5 - len(real))
      assert list(res.ids[q]) == want, (name, q)
      np.testing.assert_allclose(res.scores[q, :len(real)], np.sort(s)[::-1], rtol=2e-2, atol=1e-4)
      assert np.all(np.isneginf(res.scores[q, len(real):]))
  # a pass's candidate frames stay under RERANK_BYTES: 12 frames x 128-d, 512 candidates -> 16 queries (21 fit)
  assert GM.Reranker("x", scorer, None, 4 * 12 * 128).query_batch(512) == 16 and GM.BACKBONE.query_batch(512) == 256


def test_a_store_without_the_frames_kind_is_one_error_unless_nothing_reads_frames(tmp_path):
  """The dense rows and the X-Pool rerank read `data.frames_kind`: a store without it is one error naming the key and
  the store, before any training; with the backbone's cosine as the reranker and no dense rows the run reads no
  frames (as before the trained rows existed)."""
  config = grdr_smoke_config()
  assert config.data.frames_kind == "frame_clip" and config.eval.reranker == "xpool"
  config.data.frames_kind = "tokens"  # a prepared store's patch tokens: the world writes none
  with pytest.raises(ValueError, match=r"grdr: the store .*features has no per-frame features of kind "
                                       r"data.frames_kind='tokens' \(it has \['clip', 'frame_clip', 'text'\]\)"):
    _corpus(config, tmp_path)
  config.eval.update(reranker="dense_backbone", dense_rows=())
  corpus = _corpus(config, tmp_path)
  assert corpus.frames is None and not GM.needs_frames(config)
  config.eval.reranker = "cosine"
  with pytest.raises(ValueError, match="eval.reranker='cosine'"):
    G.validate(config)
