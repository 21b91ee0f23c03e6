"""The rendered corpus's backbone (`configs/backbone_rendered.py`, `vidjax.methods.backbone`): a few training steps on
the smoke corpus, the checkpoint it writes loads through the official-format loader `configs/prepare.py` uses and
gives the trained model's embeddings, and the corpus summary's contract. Its loss and metric are checked against
NumPy in test_losses.py / test_metrics.py."""
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidjax import extract, losses, main, train
from vidjax.data import video as video_lib
from vidjax.data.annotations import read_annotations
from vidjax.experiments.common import REQUIRED_KEYS, load_config
from vidjax.methods import backbone as B
from vidjax.models import videoprism as vp
from vidjax.tokenizers.sentencepiece import SentencePieceTokenizer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def backbone_run(real_path, tmp_path_factory):
  _, manifest = real_path("corpus")
  config = load_config(ROOT / "configs/backbone_rendered.py:smoke")
  config.data.videos = manifest["youcook2"]["videos"]
  config.data.annotations = manifest["youcook2"]["annotations"]
  workdir = tmp_path_factory.mktemp("backbone")
  return config, workdir, main.run(config, workdir)


def test_backbone_run_writes_the_checkpoint_and_the_corpus_summary(backbone_run):
  config, workdir, results = backbone_run
  assert set(REQUIRED_KEYS) <= set(results) and results["path"] == "real" and results["synthetic"] is True
  summary = json.loads((workdir / "corpus_summary.json").read_text())
  assert summary["synthetic"] is True and Path(summary["checkpoint"]).is_file()
  videos = read_annotations("youcook2", config.data.annotations)
  train_videos = [v for v in videos if v.split == "train"]
  clips = sum(len(v.clips) + 1 for v in train_videos)  # every step and every whole video
  assert summary["train"]["clips"] == clips and summary["train"]["videos"] == len(train_videos)
  assert summary["train"]["steps"] == clips // config.train.batch_size * config.train.epochs
  for name in ("trained", "random_init"):
    for kind in B.KINDS:
      row = summary["retrieval"][name][kind]
      assert 0 <= row["t2v_r1"] <= row["t2v_r5"] <= 100 and row["chance_t2v_r1"] > 0
    step = summary["retrieval"][name]["step"]  # and the frame level: a step caption retrieves single frames
    assert 0 <= step["t2f_r1"] <= step["t2f_r5"] <= 100 and step["chance_t2f_r1"] > 0
    assert step["frames"] == step["clips"] * config.num_frames
  assert config.train.frame_weight > 0  # the smoke run trains with the frame term
  assert results["metrics"] == summary["retrieval"]
  assert "configs/prepare.py:rendered" in summary["prepare"]


@pytest.mark.highest_precision  # compared with another computation at 1e-5
def test_checkpoint_loads_through_the_official_loader_with_the_trained_embeddings(backbone_run):
  """The `.npz` holds exactly the official key layout for this shape (the loader checks every key and shape), and the
  extraction's own functions on it (frames in [0, 1]) give what the trained parameters give applied directly to the
  normalised frames they trained on (the summary's pixel stats, folded into the checkpoint's patch projection)."""
  config, workdir, _ = backbone_run
  prep = load_config(ROOT / "configs/prepare.py:smoke")  # the store's loader, at the shape the backbone trained
  prep.model.checkpoint = str(workdir / "backbone.npz")
  model, variables, meta = extract.load_model(prep)
  assert meta["random_init"] is False and meta["checkpoint_hash"]
  trained = train.load_params(workdir / "model")["model"]
  flat = lambda tree: {"/".join(map(str, k)): v for k, v in jax.tree_util.tree_flatten_with_path(tree)[0]}  # noqa: E731
  assert set(flat(variables["params"])) == set(flat(trained))

  videos = [v for v in read_annotations("youcook2", config.data.annotations) if v.split != "train"][:2]
  from vidjax.data.video import index_videos  # pylint: disable=g-import-not-at-top
  index = index_videos(config.data.videos)
  frames = np.concatenate([video_lib.decode_clips(index[v.video_id], [None], config.num_frames, config.resolution,
                                                  uint8=True).frames for v in videos])
  texts = [v.clips[0].text for v in videos]
  tokenizer = SentencePieceTokenizer(config.model.spm_path)
  video, text, frame = B.embed(model, variables, tokenizer, frames, texts, batch_size=2)
  ids, paddings = tokenizer.encode(texts, max_length=vp.TEXT_MAX_LEN)
  stats = json.loads((workdir / "corpus_summary.json").read_text())["train"]
  normalised = (frames.astype(np.float32) / 255 - np.float32(stats["pixel_mean"])) / np.float32(stats["pixel_std"])
  direct_video, direct_text, direct = jax.jit(lambda p, *a: model.apply({"params": p}, *a,
                                                                         return_frame_embeddings=True))(
      trained, normalised, ids, paddings)
  np.testing.assert_allclose(video, np.asarray(direct_video), atol=1e-5)
  np.testing.assert_allclose(text, np.asarray(direct_text), atol=1e-5)
  np.testing.assert_allclose(frame, np.asarray(direct["frame_embeddings"]), atol=1e-5)
  # and they are not the random weights a store gets without a checkpoint
  random_model, random_variables, _ = extract.load_model(load_config(ROOT / "configs/prepare.py:smoke"))
  random_video, _, _ = B.embed(random_model, random_variables, tokenizer, frames, texts[:1], batch_size=2)
  assert np.abs(random_video - video).max() > 1e-3


def test_bad_backbone_config_gets_one_clear_error(tmp_path):
  config = load_config(ROOT / "configs/backbone_rendered.py:smoke")
  with pytest.raises(ValueError, match="data.videos"):
    main.run(config, tmp_path / "a")
  config.data.videos, config.data.annotations = str(tmp_path), str(tmp_path / "x.json")
  config.data.format = "msrvtt"
  with pytest.raises(ValueError, match="data.format"):
    main.run(config, tmp_path / "b")
  config.data.format, config.train.identity_weight = "youcook2", -1.0
  with pytest.raises(ValueError, match="train.identity_weight"):
    main.run(config, tmp_path / "c")
  config.train.identity_weight, config.train.identity_positive = 0.1, "frame"
  with pytest.raises(ValueError, match="train.identity_positive"):
    main.run(config, tmp_path / "d")
  config.train.identity_positive, config.train.frame_weight = "video", -0.5
  with pytest.raises(ValueError, match="train.frame_weight"):
    main.run(config, tmp_path / "e")


def test_clip_partners_are_the_same_clips_shifted_and_repeat_on_resume():
  """`batch_fn(partners="clip")`: the second half of the batch is the first half's clips again, each rolled by one
  shift of at most `CLIP_SHIFT` of the frame in height and width (the same for every frame); each clip is its own
  instance group; the same indices give the same batch."""
  rng = np.random.default_rng(0)
  frames = rng.integers(0, 255, size=(6, 2, 32, 32, 3), dtype=np.uint8)
  pairs = B.Pairs(frames, np.arange(6, dtype=np.int32), [str(i) for i in range(6)], np.array(["step"] * 6),
                  ["a", "a", "b", "b", "c", "c"])
  fn = B.batch_fn(pairs, np.zeros((6, 2), np.int32), np.zeros((6, 2)), partners="clip")
  limit = max(1, round(B.CLIP_SHIFT * 32))
  for idx in (np.array([5, 0, 3, 1]), np.array([2, 4, 0])):
    batch = fn(idx)
    half = (len(idx) + 1) // 2
    assert list(batch["group"][:half]) == list(idx[:half]) and list(batch["video"]) == list(batch["group"])
    assert list(batch["group"][half:]) == list(idx[:len(idx) - half])
    np.testing.assert_array_equal(batch["frames"][:half], frames[idx[:half]])
    for view, clip in zip(batch["frames"][half:], batch["group"][half:]):
      found = [(dy, dx) for dy in range(-limit, limit + 1) for dx in range(-limit, limit + 1)
               if np.array_equal(view, np.roll(frames[clip], (dy, dx), axis=(1, 2)))]
      assert len(found) == 1, found
    np.testing.assert_array_equal(fn(idx)["frames"], batch["frames"])
  with pytest.raises(ValueError, match="partners"):
    B.batch_fn(pairs, np.zeros((6, 2), np.int32), np.zeros((6, 2)), partners="frame")


def test_identity_partners_are_other_clips_of_the_same_videos_and_repeat_on_resume():
  """`batch_fn(partners="video")`: the first half of the batch as drawn, the second half another clip of each of its
  videos (never the clip itself), the same for the same indices (a resumed run); the batch's `video` feeds
  `losses.instance_infonce` (tested against NumPy in test_losses.py)."""
  videos = ["a"] * 3 + ["b"] * 2 + ["c"] * 5
  pairs = B.Pairs(np.arange(10, dtype=np.uint8).reshape(10, 1, 1, 1, 1), np.arange(10, dtype=np.int32),
                  [str(i) for i in range(10)], np.array(["step"] * 10), videos)
  fn = B.batch_fn(pairs, np.zeros((10, 2), np.int32), np.zeros((10, 2)), partners="video")
  for idx in (np.array([0, 3, 5, 9, 1, 2]), np.array([4, 6, 7, 8, 2])):
    batch = fn(idx)
    half = (len(idx) + 1) // 2
    assert list(batch["group"][:half]) == list(idx[:half])
    for anchor, partner in zip(batch["group"][:half], batch["group"][half:]):
      assert partner != anchor and videos[partner] == videos[anchor]
    assert len(batch["group"]) == len(idx) and (fn(idx)["group"] == batch["group"]).all()
    assert [videos[g] for g in batch["group"]] == [["a", "b", "c"][v] for v in batch["video"]]
  plain = B.batch_fn(pairs, np.zeros((10, 2), np.int32), np.zeros((10, 2)))(np.array([0, 3, 5]))
  assert list(plain["group"]) == [0, 3, 5]
  with pytest.raises(ValueError, match="one clip"):
    B.batch_fn(B.Pairs(pairs.frames[:4], pairs.text_index[:4], pairs.texts[:4], pairs.kinds[:4], videos[:4]),
               np.zeros((4, 2), np.int32), np.zeros((4, 2)), partners="video")


def _tiny_model_batch(seed: int = 0):
  """The smoke config's model, its initial params (`init_fn`) and a batch of 6 rows: 4 step rows (two share a
  caption) and 2 whole-video rows, random frames and tokens, one caption padded."""
  config = load_config(ROOT / "configs/backbone_rendered.py:smoke")
  model = extract.build_model(config)
  params = B.init_fn(model, config.train.tau)(jax.random.key(seed))
  rng = np.random.default_rng(seed)
  b, t, r = 6, config.num_frames, config.resolution
  paddings = np.zeros((b, 8), np.float32)
  paddings[1, 5:] = 1
  batch = {"frames": rng.integers(0, 256, size=(b, t, r, r, 3), dtype=np.uint8),
           "ids": rng.integers(1, model.vocabulary_size, size=(b, 8)).astype(np.int32), "paddings": paddings,
           "group": np.array([0, 1, 0, 2, 3, 4], np.int32), "video": np.array([0, 0, 1, 1, 0, 1], np.int32),
           "step": np.array([1, 1, 1, 1, 0, 0], np.int32)}
  return model, params, batch


def test_frame_weight_zero_is_exactly_the_clip_and_identity_loss():
  """`frame_weight` 0 computes today's loss bit for bit: the caption term plus the identity term, nothing else."""
  model, params, batch = _tiny_model_batch()
  loss, aux = B.loss_fn(model, identity_weight=0.1, frame_weight=0.0)(params, batch, None)
  video, text, _ = model.apply({"params": params["model"]}, batch["frames"].astype(jnp.float32) / 255.0,
                               batch["ids"], batch["paddings"], train=True)
  tau = jnp.exp(jnp.maximum(params["log_tau"], jnp.log(0.01)))
  old = losses.grouped_infonce(video, text, batch["group"], tau) + 0.1 * losses.instance_infonce(
      video, batch["video"], tau)
  assert float(loss) == float(old) and set(aux) == {"tau", "identity"}


def np_frame_term(frames, text, groups, step, tau):
  """The frame term with loops: each step row's caption over every frame of the step rows, each such frame over the
  step rows' captions; a frame's positives are the captions of its row's group."""
  cells = [(b, s) for b in range(len(groups)) if step[b] for s in range(frames.shape[1])]
  texts = [c for c in range(len(groups)) if step[c]]
  sim = lambda c, b, s: float(np.dot(text[c], frames[b, s])) / tau  # noqa: E731
  t2f = [np.log(sum(np.exp(sim(c, b, s)) for b, s in cells))
         - np.log(sum(np.exp(sim(c, b, s)) for b, s in cells if groups[b] == groups[c])) for c in texts]
  f2t = [np.log(sum(np.exp(sim(c, b, s)) for c in texts))
         - np.log(sum(np.exp(sim(c, b, s)) for c in texts if groups[b] == groups[c])) for b, s in cells]
  return 0.5 * (np.mean(t2f) + np.mean(f2t))


@pytest.mark.highest_precision  # against NumPy loops at rel 1e-5 (float32 logits at tau 0.07 against float64)
def test_frame_term_matches_numpy():
  """`loss_fn(frame_weight=w)` = the clip loss + w x the frame term, whose frame embeddings are the model's own
  `return_frame_embeddings` (what extraction writes as `frame_clip`) and from which the whole-video rows are left
  out; one forward pass gives the clip embeddings unchanged."""
  model, params, batch = _tiny_model_batch(1)
  base, _ = B.loss_fn(model, frame_weight=0.0)(params, batch, None)
  loss, aux = B.loss_fn(model, frame_weight=0.5)(params, batch, None)
  _, text, out = model.apply({"params": params["model"]}, batch["frames"].astype(jnp.float32) / 255.0, batch["ids"],
                             batch["paddings"], return_frame_embeddings=True)
  tau = float(np.exp(np.asarray(params["log_tau"])))
  expected = np_frame_term(np.asarray(out["frame_embeddings"], np.float64), np.asarray(text, np.float64),
                           batch["group"], batch["step"], tau)
  assert float(aux["frame"]) == pytest.approx(expected, rel=1e-5)
  assert float(loss) == pytest.approx(float(base) + 0.5 * expected, rel=1e-5)
  # the whole-video rows' frames take no part
  moved = dict(batch, frames=batch["frames"].copy())
  moved["frames"][4:] = 255 - moved["frames"][4:]
  _, moved_aux = B.loss_fn(model, frame_weight=0.5)(params, moved, None)
  assert float(moved_aux["frame"]) == pytest.approx(float(aux["frame"]), rel=1e-6)


def test_batches_mark_the_step_rows():
  """The batch's `step` is 1 on a step's segment and 0 on a whole video (the rows the frame term leaves out)."""
  pairs = B.Pairs(np.zeros((4, 1, 1, 1, 1), np.uint8), np.arange(4, dtype=np.int32), [str(i) for i in range(4)],
                  np.array(["step", "video", "step", "video"]), ["a", "a", "b", "b"])
  for partners in ("", "video", "clip"):
    batch = B.batch_fn(pairs, np.zeros((4, 2), np.int32), np.zeros((4, 2)), partners=partners)(np.array([0, 1, 2, 3]))
    assert list(batch["step"]) == [int(pairs.kinds[g] == "step") for g in batch["group"]]  # group = clip here


def test_retrieval_summary_has_the_frame_level_with_its_chance():
  """Step captions retrieve single frames of the step clips: a frame is correct when its clip's text is the query,
  chance is the share of relevant frames; the clip-level keys are unchanged, whole videos get no frame level."""
  d = 8
  eye = np.eye(d, dtype=np.float32)
  pairs = B.Pairs(np.zeros((4, 2, 1, 1, 3), np.uint8), np.array([0, 0, 1, 2], np.int32), ["a", "b", "ab"],
                  np.array(["step", "step", "step", "video"]), ["v", "w", "v", "v"])
  text = eye[:3]
  video = eye[[0, 0, 1, 2]]
  # clips 0 and 1 (text "a"): frames on "a", one of clip 1's on "b"; clip 2 ("b"): one frame on "b", one on nothing
  frame = np.stack([eye[[0, 0]], eye[[0, 1]], eye[[1, 5]], eye[[2, 2]]])
  out = B.retrieval_summary(video, text, pairs, frame)
  plain = B.retrieval_summary(video, text, pairs)
  assert set(plain["step"]) == {"t2v_r1", "t2v_r5", "v2t_r1", "v2t_r5", "chance_t2v_r1", "chance_v2t_r1", "texts",
                                "clips"}
  assert {k: v for k, v in out["step"].items() if k in plain["step"]} == plain["step"]
  assert out["video"] == plain["video"]
  step = out["step"]
  # query "a" (clips 0, 1: 4 relevant frames of 6): its best frame is relevant; query "b" (clip 2, 2 of 6): clip 1's
  # frame on "b" ties with clip 2's best, and a tie counts against it (`metrics.best_relevant_ranks`): rank 2
  assert step["t2f_r1"] == 50.0 and step["t2f_r5"] == 100.0 and step["frames"] == 6
  assert step["chance_t2f_r1"] == pytest.approx(100.0 * (4 / 6 + 2 / 6) / 2)
