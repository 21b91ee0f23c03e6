"""Dense baselines (vidjax.models.dense, scorers.dense, methods.dense, experiments.dense): each pooling and the loss
against NumPy, shapes, the Scorer's padding, X-Pool learning what it exists for, and the smoke run."""
import json
import shutil
from pathlib import Path

import jax
import ml_collections
import numpy as np
import pytest

from vidjax import losses
from vidjax.experiments.common import load_config
from vidjax.methods import dense as M
from vidjax.models.dense import DenseConfig, DenseRetriever, init_params
from vidjax.scorers.dense import DenseScorer

pytestmark = pytest.mark.highest_precision  # compares with NumPy or a reference (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]
D, T = 8, 4
RTOL = 2e-3  # float32 throughout; the mark computes matmuls at full precision on GPU / TPU


def _model(pooling, **kw):
  model = DenseRetriever(DenseConfig(pooling=pooling, embed_dim=D, frame_dim=D, seq_layers=2, seq_head_dim=4,
                                     max_positions=8, **kw))
  params = jax.jit(lambda key: init_params(model, key, T))(jax.random.PRNGKey(0))  # one compile, not op by op
  rng = np.random.default_rng(1)  # off the identity init, so every weight matters
  leaves = [np.asarray(x) + 0.3 * rng.normal(size=np.shape(x)).astype(np.float32) for x in jax.tree.leaves(params)]
  return model, jax.tree.unflatten(jax.tree.structure(params), leaves)


def _apply(model, params, *args, method=DenseRetriever.similarity, **kw):
  return np.asarray(jax.jit(lambda p, *a: model.apply({"params": p}, *a, method=method, **kw))(params, *args))


def _data(q=3, v=5, seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(size=(q, D)).astype(np.float32), rng.normal(size=(v, T, D)).astype(np.float32)


def _norm(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _ln(x, p, eps):
  """LayerNorm with the official code's epsilon: X-Pool's torch LayerNorm 1e-5, CLIP4Clip's TF-style one 1e-12."""
  mu = x.mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * p["scale"] + p["bias"]


def _dense(x, p):
  return x @ p["kernel"] + p["bias"]


def _softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _attend(q, k, v, heads):
  """q [H*d], k, v [T, H*d] -> [H*d], one head after another."""
  d = q.shape[-1] // heads
  out = [_softmax(k[:, h * d:(h + 1) * d] @ q[h * d:(h + 1) * d] / np.sqrt(d)) @ v[:, h * d:(h + 1) * d]
         for h in range(heads)]
  return np.concatenate(out)


def _meanp(frames):
  return _norm(_norm(frames).mean(-2))


@pytest.mark.highest_precision
def test_meanp_and_seqtransf_pool_as_numpy():
  text, frames = _data()
  for pooling in ("meanp", "seqtransf"):
    model, params = _model(pooling)
    x = _dense(frames.astype(np.float64), params["frame_proj"])
    if pooling == "seqtransf":  # CLIP4Clip: + position embeddings, residual attention blocks, + the input frames
      p, heads = params["seq_transformer"], model.config.seq_heads
      h = x + p["frame_position_embeddings"][:T]
      for i in range(2):
        b = p[f"block_{i}"]
        for n in range(len(h)):
          y = _ln(h[n], b["ln_1"], 1e-12)
          qkv = [_dense(y, b[name]) for name in ("query", "key", "value")]
          a = np.stack([_attend(qkv[0][t], qkv[1], qkv[2], heads) for t in range(T)])
          h[n] = h[n] + _dense(a, b["out"])
          m = _dense(_ln(h[n], b["ln_2"], 1e-12), b["c_fc"])
          h[n] = h[n] + _dense(m / (1 + np.exp(-1.702 * m)), b["c_proj"])
      x = h + x
    want = _norm(_dense(text, params["text_proj"])) @ _meanp(x).T
    np.testing.assert_allclose(_apply(model, params, text, frames), want, rtol=RTOL, atol=RTOL)


@pytest.mark.highest_precision
def test_xpool_pools_each_text_video_pair_as_numpy():
  text, frames = _data()
  model, params = _model("xpool", xpool_heads=2, dropout=0.3)
  p = params["xpool"]
  want = np.empty((len(text), len(frames)))
  for i, t in enumerate(text.astype(np.float64)):
    t = _dense(t, params["text_proj"])
    for j, f in enumerate(frames.astype(np.float64)):
      tq, fk = _ln(t, p["layer_norm1"], 1e-5), _ln(_dense(f, params["frame_proj"]), p["layer_norm1"], 1e-5)
      a = _attend(_dense(tq, p["q_proj"]), _dense(fk, p["k_proj"]), _dense(fk, p["v_proj"]), 2)
      r = _ln(_dense(a, p["out_proj"]), p["layer_norm2"], 1e-5)
      z = _ln(r + _dense(r, p["linear_proj"]), p["layer_norm3"], 1e-5)
      want[i, j] = _norm(t) @ _norm(z)
  np.testing.assert_allclose(_apply(model, params, text, frames), want, rtol=RTOL, atol=RTOL)
  # Each text against its own K candidates: the same pairs, the same scores.
  pools = np.stack([frames[[0, 2]], frames[[4, 1]], frames[[3, 3]]])
  pairs = _apply(model, params, text, pools, method=DenseRetriever.pair_scores)
  np.testing.assert_allclose(pairs, want[np.arange(3)[:, None], [[0, 2], [4, 1], [3, 3]]], rtol=RTOL, atol=RTOL)
  # Dropout acts in training only.
  a, b = (_apply(model, params, text, frames, deterministic=False, rngs={"dropout": jax.random.PRNGKey(s)}) for s in (0, 1))
  assert not np.allclose(a, b)


def test_similarity_infonce_matches_numpy():
  rng = np.random.default_rng(0)
  sims = rng.uniform(-1, 1, size=(6, 6)).astype(np.float32)
  same = np.zeros((6, 6), bool)
  same[0, 3] = same[3, 0] = True  # two captions of one video: not each other's negatives
  for mask in (None, same):
    logits = 20.0 * sims.astype(np.float64)
    if mask is not None:
      logits = np.where(mask, -np.inf, logits)
    t2v = -np.mean(np.diag(logits) - np.log(np.exp(logits).sum(1)))
    v2t = -np.mean(np.diag(logits) - np.log(np.exp(logits).sum(0)))
    got = float(losses.similarity_infonce(sims, 20.0, mask))
    assert got == pytest.approx((t2v + v2t) / 2, rel=1e-5)
  with pytest.raises(ValueError, match=r"sims must have shape \(6, 6\)"):
    losses.similarity_infonce(sims[:, :5], 20.0)


@pytest.mark.highest_precision
def test_shapes_and_the_scorers_padding():
  text, frames = _data(q=3, v=5)
  for pooling in ("meanp", "xpool"):
    model, params = _model(pooling)
    sc = DenseScorer(model, params)
    gallery = sc.score({"text": text, "candidates": frames})
    assert gallery.shape == (3, 5) and gallery.dtype == np.float32
    pools = np.stack([frames[:4]] * 3)
    prior = np.zeros((3, 4), np.float32)
    prior[1, 3] = prior[2, 0] = -np.inf  # padding of a recall stage with fewer candidates
    scores = sc.score({"text": text, "candidates": pools, "prior": prior})
    assert scores.shape == (3, 4) and np.isneginf(scores[1, 3]) and np.isneginf(scores[2, 0])
    keep = np.isfinite(prior)
    np.testing.assert_allclose(scores[keep], gallery[:, :4][keep], rtol=RTOL, atol=RTOL)  # two einsum paths
    assert sc.per_pair == (pooling == "xpool")
    if pooling == "meanp":
      assert sc.video_embeddings(frames).shape == (5, D)
    else:
      with pytest.raises(ValueError, match="per query text"):
        sc.video_embeddings(frames)
  with pytest.raises(ValueError, match=r"candidates must be"):
    sc.score({"text": text, "candidates": np.zeros((2, 4, T, D), np.float32)})


def test_frame_features_average_patches_and_sample_frames_uniformly():
  assert M.frame_indices(16, 12).tolist() == [0, 1, 3, 4, 5, 7, 8, 10, 11, 12, 14, 15]
  assert M.frame_indices(4, 0).tolist() == [0, 1, 2, 3] and M.frame_indices(4, 12).tolist() == [0, 1, 2, 3]


def test_xpool_learns_to_find_the_one_matching_frame(tmp_path):
  """What X-Pool exists for (§1, §4): a text describes one frame of a video. Each video here has T = 6 frames, five
  drawn from 8 shared background vectors and one its own; its text is that frame in another space (a fixed random
  rotation, plus noise), so nothing retrieves before training (the backbone's cosine: chance). Trained with the one
  loop, X-Pool attends to the matching frame and retrieves every test video at R@1 above 90%; mean pooling cannot
  exceed its dilution even with the true rotation given (an oracle meanP, measured ~50%)."""
  rng = np.random.default_rng(0)
  dim, frames_per_video = 16, 6
  background = _norm(rng.normal(size=(8, dim)))
  rotation = np.linalg.qr(rng.normal(size=(dim, dim)))[0]

  def split(n):
    signal = _norm(rng.normal(size=(n, dim)))
    frames = background[rng.integers(0, 8, size=(n, frames_per_video))]
    frames[np.arange(n), rng.integers(0, frames_per_video, size=n)] = signal
    text = signal @ rotation.T + 0.05 * rng.normal(size=(n, dim))
    ids = [str(i) for i in range(n)]
    return M.Split(ids, text.astype(np.float32), np.arange(n), ids, frames.astype(np.float32),
                   frames.mean(1).astype(np.float32))

  train, test = split(512), split(64)
  schedule = dict(batch_size=32, epochs=12, lr=1e-2, weight_decay=0.0, warmup_fraction=0.1, mask_same_video=False,
                  checkpoint_every=10_000, log_every=10_000, progress=False)
  section = ml_collections.ConfigDict(dict(
      model=dict(num_frames=0, seq_layers=1, seq_head_dim=64, max_positions=8, xpool_heads=1, xpool_dropout=0.0,
                 temperature=0.05, learn_logit_scale=False),
      train=dict(clip4clip=schedule, xpool=schedule)))
  model, params, info = M.fit_dense(section, "xpool", train, 0, tmp_path / "xpool")
  assert info["steps"] == 12 * 512 // 32
  r1 = M.scorer(model, params).corpus_metrics(test.text, test.frames, test.query_video, query_chunk=64,
                                              gallery_chunk=64)["t2v_r1"]
  oracle = _norm(test.text @ rotation) @ _meanp(test.frames).T  # meanP with the true alignment given
  oracle_r1 = 100.0 * np.mean(oracle.argmax(1) == np.arange(len(oracle)))
  backbone = 100.0 * np.mean((_norm(test.text) @ _norm(test.clip).T).argmax(1) == np.arange(64))
  assert r1 >= 90.0 and r1 >= oracle_r1 + 25.0 and backbone <= 10.0, (r1, oracle_r1, backbone)


def test_same_video_captions_are_negatives_unless_masked(tmp_path):
  """Both papers' losses count a video's other captions in the batch as negatives (`mask_same_video=False`, the
  default); True leaves them out of the softmaxes. Each batch here holds both captions of each of 8 videos: the two
  settings build different batches and train to different weights."""
  qv = np.repeat(np.arange(8), 2)
  plain, masked = M.pair_batch(qv, [0, 1, 2], False), M.pair_batch(qv, [0, 1, 2], True)
  assert set(plain) == {"text", "frames"} and plain["frames"].tolist() == [0, 0, 1]
  np.testing.assert_array_equal(masked["same"], [[1, 1, 0], [1, 1, 0], [0, 0, 1]])
  rng = np.random.default_rng(0)
  frames = rng.normal(size=(8, T, D)).astype(np.float32)
  text = (frames.mean(1)[qv] + 0.3 * rng.normal(size=(16, D))).astype(np.float32)
  ids = [str(i) for i in range(16)]
  split = M.Split(ids, text, qv, [str(v) for v in range(8)], frames, frames.mean(1))
  trained = {}
  for mask in (False, True):
    schedule = dict(batch_size=16, epochs=2, lr=1e-2, weight_decay=0.0, warmup_fraction=0.0, mask_same_video=mask,
                    checkpoint_every=10_000, log_every=10_000, progress=False)
    section = ml_collections.ConfigDict(dict(
        model=dict(num_frames=0, seq_layers=1, seq_head_dim=4, max_positions=8, xpool_heads=1, xpool_dropout=0.0,
                   temperature=0.05, learn_logit_scale=False),
        train=dict(clip4clip=schedule, xpool=schedule)))
    trained[mask] = M.fit_dense(section, "clip4clip_meanp", split, 0, tmp_path / str(mask))[1]
  assert any(not np.allclose(a, b) for a, b in zip(jax.tree.leaves(trained[False]), jax.tree.leaves(trained[True])))


def test_configs_carry_the_papers_settings_and_every_dataset_has_a_world(tmp_path):
  c = load_config(ROOT / "configs/dense_msrvtt.py")
  assert tuple(c.rows) == M.ROWS and c.model.num_frames == 12 and c.model.seq_layers == 4
  assert (c.train.clip4clip.batch_size, c.train.clip4clip.epochs, c.train.clip4clip.lr) == (128, 5, 1e-4)
  assert (c.train.xpool.batch_size, c.train.xpool.lr, c.model.xpool_heads, c.model.xpool_dropout) == (32, 3e-5, 1, 0.3)
  assert load_config(ROOT / "configs/dense_msvd.py").model.xpool_dropout == 0.4
  assert not c.train.clip4clip.mask_same_video and not c.train.xpool.mask_same_video  # the papers: no mask
  bad = c.to_dict()
  bad["train"]["xpool"]["mask_same_video"] = "no"
  with pytest.raises(ValueError, match="train.xpool.mask_same_video"):
    M.check_config(ml_collections.ConfigDict(bad))
  for dataset in M.DATASETS:  # the moving-object world writes each one's layout (tests/test_moving_objects.py)
    assert "world" in load_config(ROOT / f"configs/dense_{dataset}.py:smoke"), dataset


def test_smoke_run_trains_and_evaluates_every_row(smoke_runs):
  workdir, results = smoke_runs("dense")
  on_disk = json.loads((workdir / "results.json").read_text())
  assert on_disk["synthetic"] is True and on_disk["path"] == "world"
  assert list(on_disk["metrics"]) == list(M.ROWS) and set(on_disk["train"]) == set(M.ROWS) - {"backbone"}
  for row, values in on_disk["metrics"].items():
    assert set(M.KEYS) <= set(values) and 0.0 <= values["t2v_r1"] <= values["t2v_r5"] <= values["t2v_r10"] <= 100.0
  assert all(info["steps"] >= 1 and info["params"] > 0 for info in on_disk["train"].values())
  assert on_disk["metrics"] == results["metrics"]


def test_xpool_as_the_stacks_rerank_stage(real_path, tmp_path):
  """stack.reranker = "xpool": the composed stack's rerank stage is X-Pool trained on the training clips' captions,
  over the evaluation clips' frame features (the real path's YouCook2 store). The finished VEDJE-stack run is copied
  and rerun with the other reranker: CAST resumes from its checkpoints, only X-Pool trains."""
  from vidjax import main  # pylint: disable=g-import-not-at-top
  from conftest import real_path_configs  # pylint: disable=g-import-not-at-top
  source, _ = real_path("stack_youcook2")
  workdir = tmp_path / "stack"
  shutil.copytree(source, workdir, ignore=shutil.ignore_patterns("results.json", "index", "features", "vedje"))
  config = real_path_configs(real_path.root)["stack_youcook2"]
  config.stack.reranker = "xpool"
  results = main.run(config, workdir)
  assert results["corpus"]["reranker"] == "xpool" and (workdir / "train" / "xpool" / "checkpoints").is_dir()
  assert {"recall", "recall_rerank", "full_stack"} <= set(results["metrics"])
  index = json.loads((workdir / "index" / "manifest.json").read_text())
  assert [s["kind"] for s in index["omitted_stages"]] == ["xpool"]


def test_a_converted_checkpoint_is_evaluated_as_released(smoke_runs, tmp_path):
  """`init_checkpoint`: the row of a converted official checkpoint evaluates the converted weights, untrained. Here the
  conversion holds the smoke run's own trained X-Pool (written as `python -m vidjax.convert` writes one), so the row's
  metrics must equal the smoke run's."""
  from vidjax import convert, main, train  # pylint: disable=g-import-not-at-top
  workdir, results = smoke_runs("dense")
  params = train.load_params(workdir / "models" / "xpool")
  info = {"pooling": "xpool", "parts": ["retriever", "text_tower"], "config": {"model.xpool_heads": 1}}
  convert.save(tmp_path / "ckpt", {"retriever": params, "text_tower": {"unused": np.zeros(1)}},
               {"from": "xpool", "checkpoint": "xpool.pth", "sha256": "0" * 64, "info": info})
  config = load_config(ROOT / "configs/dense_msrvtt.py:smoke")
  config.rows, config.init_checkpoint = ("xpool",), str(tmp_path / "ckpt")
  again = main.run(config, tmp_path / "run")
  assert again["metrics"]["xpool"] == results["metrics"]["xpool"]
  assert again["train"]["xpool"]["trained"] is False and again["train"]["xpool"]["steps"] == 0
  assert not (tmp_path / "run" / "models" / "xpool").exists()  # nothing trained
  config.rows = ("backbone", "clip4clip_meanp")
  with pytest.raises(ValueError, match="init_checkpoint=.* a checkpoint of one of the rows .* holds xpool's weights"):
    main.run(config, tmp_path / "other")
  config.init_checkpoint = str(tmp_path)
  with pytest.raises(convert.ConversionError, match="not a converted checkpoint"):
    main.run(config, tmp_path / "other")
