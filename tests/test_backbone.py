"""The rendered corpus's backbone (`configs/backbone_rendered.py`, `vidjax.methods.backbone`): a few training steps on
the smoke corpus, the checkpoint it writes loads through the official-format loader `configs/prepare.py` uses and
gives the trained model's embeddings, and the corpus summary's contract. Its loss and metric are checked against
NumPy in test_losses.py / test_metrics.py."""
import json
from pathlib import Path

import jax
import numpy as np
import pytest

from vidjax import extract, main, train
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
  video, text = B.embed(model, variables, tokenizer, frames, texts, batch_size=2)
  ids, paddings = tokenizer.encode(texts, max_length=vp.TEXT_MAX_LEN)
  stats = json.loads((workdir / "corpus_summary.json").read_text())["train"]
  normalised = (frames.astype(np.float32) / 255 - np.float32(stats["pixel_mean"])) / np.float32(stats["pixel_std"])
  direct_video, direct_text, _ = jax.jit(lambda p, *a: model.apply({"params": p}, *a))(trained, normalised, ids,
                                                                                       paddings)
  np.testing.assert_allclose(video, np.asarray(direct_video), atol=1e-5)
  np.testing.assert_allclose(text, np.asarray(direct_text), atol=1e-5)
  # and they are not the random weights a store gets without a checkpoint
  random_model, random_variables, _ = extract.load_model(load_config(ROOT / "configs/prepare.py:smoke"))
  random_video, _ = B.embed(random_model, random_variables, tokenizer, frames, texts[:1], batch_size=2)
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
