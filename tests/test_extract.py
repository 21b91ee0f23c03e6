"""Tests for the extraction engine (vidjax/extract.py) and the extract_videoprism experiment."""
import functools
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidjax import checkpoints
from vidjax import extract as engine
from vidjax.data import video
from vidjax.data.features import FeatureStore
from vidjax.experiments import extract as experiment

# The engine's values are compared with NumPy on independently decoded frames: they hold at full float32 only, which
# a GPU (TF32 by default) or a TPU (one bf16 pass) computes when asked (tests/conftest.py).
pytestmark = pytest.mark.highest_precision

REPO = Path(__file__).resolve().parents[1]
MP4 = REPO / ".." / "shared" / "data" / "videoprism_assets" / "water_bottle_drumming.mp4"
T, R = 2, 18  # frames per clip, resolution
D = 4
W = np.random.default_rng(0).normal(size=(3 * T, D)).astype(np.float32)


def _toy_numpy(frames):
  """Independent NumPy version of `_toy_video_fn` on `[B, T, R, R, 3]` frames."""
  b = frames.shape[0]
  feat = frames.mean(axis=(2, 3)).reshape(b, -1).astype(np.float64) @ W
  clip = feat / np.sqrt((feat ** 2).sum(-1, keepdims=True) + 1e-12)
  tokens = frames[:, :, ::9, ::9, :].reshape(b, T, 4, 3)
  mean = tokens.mean(axis=(1, 2))
  return {"clip": clip, "clip_mean": mean, "tokens": tokens}


@jax.jit
def _toy_video_fn(frames):
  b = frames.shape[0]
  feat = frames.mean(axis=(2, 3)).reshape(b, -1) @ W
  tokens = frames[:, :, ::9, ::9, :].reshape(b, T, 4, 3)
  return {"clip": feat / jnp.sqrt((feat ** 2).sum(-1, keepdims=True) + 1e-12),
          "clip_mean": tokens.mean(axis=(1, 2)), "tokens": tokens}


def _toy_text_fn(texts):
  # Deterministic per text, independent of its batch neighbours.
  return np.stack([np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], np.uint8).astype(np.float32)
                   for t in texts])


class _Killed(RuntimeError):
  pass


def _dying(fn, after):
  """Wraps fn so that call number `after + 1` raises, as if the job were killed there."""
  calls = {"n": 0}

  def wrapped(x):
    calls["n"] += 1
    if calls["n"] > after:
      raise _Killed(f"killed after {after} batches")
    return fn(x)
  return wrapped, calls


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
  bad = tmp_path_factory.mktemp("bad") / "corrupt.mp4"
  bad.write_bytes(b"\x00\x01garbage" * 300)
  segs = [(0.0, 1.0), (1.0, 2.5), (2.5, 4.0), (4.0, 6.0), (6.0, 8.0), (7.5, 11.0), (0.5, 0.9)]
  out = [engine.VideoSegment(f"drum#{i:03d}", str(MP4), s, e) for i, (s, e) in enumerate(segs)]
  out.insert(3, engine.VideoSegment("broken", str(bad)))
  out.append(engine.VideoSegment("drum_whole", str(MP4)))
  return out  # 9 clips: 8 from the real mp4 (one past its end), 1 corrupt


def _run(root, clips, fn=_toy_video_fn, batch_size=2, **kw):
  store = engine.open_store(root, {"backbone": "toy", "num_frames": T, "resolution": R})
  stats = engine.extract_videos(store, clips, fn, num_frames=T, resolution=R, batch_size=batch_size,
                                kinds=("clip", "clip_mean", "tokens"), progress=False, flush_every=2, **kw)
  return store, stats


def _snapshot(store):
  store = FeatureStore(store.root)
  return {k: (store.ids(k), store.get(k, store.ids(k))) for k in store.kinds()}


@pytest.fixture(scope="module")
def full_run(clips, tmp_path_factory):
  root = tmp_path_factory.mktemp("full") / "store"
  store, stats = _run(root, clips)
  report = engine.finalize(store)
  return store, stats, report


def test_engine_values_match_numpy_on_independently_decoded_frames(clips, full_run):
  store, stats, _ = full_run
  assert stats.clips == 9 and stats.skipped == 0 and stats.frames == 9 * T
  ids = [c.clip_id for c in clips]
  frames = np.stack([video.decode_video(c.video, T, R, c.segment)[0] for c in clips])
  ref = _toy_numpy(frames)
  for kind in ("clip", "clip_mean", "tokens"):
    got = store.get(kind, ids)
    assert got.shape == ref[kind].shape
    np.testing.assert_allclose(got, ref[kind], rtol=1e-5, atol=1e-6, err_msg=kind)


def test_padding_counts_and_corrupt_video_do_not_crash(clips, full_run):
  store, stats, report = full_run
  mask = store.get(engine.PADDED_KIND, [c.clip_id for c in clips])
  assert mask.shape == (9, T)
  np.testing.assert_array_equal(mask[3], [1, 1])            # corrupt file: all black
  np.testing.assert_array_equal(mask[6], [0, 1])            # (7.5, 11.0): second frame past the end
  assert mask.sum() == 3
  assert report == {"padded_videos": 2, "failed_videos": 1, "padded_frames": 3}
  assert stats.padded_clips == 2 and stats.failed_clips == 1
  assert np.all(store.get("tokens", ["broken"]) == 0)
  assert FeatureStore(store.root).metadata["decode"] == report


def test_killed_run_resumes_to_an_identical_store(clips, full_run, tmp_path):
  root = tmp_path / "store"
  dying, calls = _dying(_toy_video_fn, after=2)
  with pytest.raises(_Killed):
    _run(root, clips, fn=dying)
  partial = FeatureStore(root)
  # Batches are fetched one behind dispatch and shards flush every 2 items, so 2 clips survived.
  assert 0 < len(partial.ids("clip")) < len(clips)
  counting, calls2 = _dying(_toy_video_fn, after=100)
  store, stats = _run(root, clips, fn=counting)
  assert stats.skipped == len(partial.ids("clip")) and stats.clips == len(clips) - stats.skipped
  assert calls2["n"] == -(-stats.clips // 2)  # only the missing clips were recomputed
  engine.finalize(store)
  want, got = _snapshot(full_run[0]), _snapshot(store)
  assert sorted(want) == sorted(got)
  for kind in want:
    assert want[kind][0] == got[kind][0]
    np.testing.assert_array_equal(want[kind][1], got[kind][1], err_msg=kind)
  # A third run finds nothing to do.
  _, stats3 = _run(root, clips, fn=_dying(_toy_video_fn, after=0)[0])
  assert stats3.clips == 0 and stats3.skipped == len(clips)
  engine.verify(store, [c.clip_id for c in clips], kinds=("clip", "clip_mean", "tokens"))


def test_a_kind_added_to_an_existing_store_is_written_alone(clips, full_run, tmp_path):
  """A store extracted before a kind existed (prepare's `frame_clip`) gains that kind on a rerun: only the new kind is
  written, and the old kinds keep their values even where the recomputation differs (no stale-value error)."""
  root = tmp_path / "store"
  store, _ = _run(root, clips[:4])

  @jax.jit
  def more(frames):  # the old kinds recomputed differently, plus a new kind
    out = _toy_video_fn(frames)
    return {**{k: v + 1.0 for k, v in out.items()}, "frame_clip": frames.mean(axis=(2, 3))}

  stats = engine.extract_videos(store, clips[:4], more, num_frames=T, resolution=R, batch_size=2,
                                kinds=("clip", "clip_mean", "tokens", "frame_clip"), progress=False, flush_every=2)
  assert stats.clips == 4 and stats.skipped == 0
  ids, old = [c.clip_id for c in clips[:4]], FeatureStore(full_run[0].root)
  store = FeatureStore(root)
  for kind in ("clip", "clip_mean", "tokens", "padded_frames"):
    np.testing.assert_array_equal(store.get(kind, ids), old.get(kind, ids), err_msg=kind)
  frames = np.stack([video.decode_video(c.video, T, R, c.segment)[0] for c in clips[:4]])
  np.testing.assert_allclose(store.get("frame_clip", ids), frames.mean(axis=(2, 3)), atol=1e-6)


def test_two_processes_write_disjoint_shards_that_merge(clips, tmp_path):
  root = tmp_path / "store"
  for pi in (0, 1):
    _run(root, clips, batch_size=4, process_index=pi, process_count=2)
  store = FeatureStore(root)
  shards = sorted(p.name for p in (root / "clip").glob("*.ids.json"))
  assert any(s.startswith("p0-") for s in shards) and any(s.startswith("p1-") for s in shards)
  counts = store.merge_manifest()
  assert counts["clip"] == len(clips) == counts["tokens"]
  engine.verify(store, [c.clip_id for c in clips], kinds=("clip", "clip_mean", "tokens"))


def test_decoding_workers_keep_order_name_bad_videos_and_match_one_worker(tmp_path, caplog):
  # Eight short videos of different lengths (so workers finish out of order) and a corrupt one in the middle.
  rng = np.random.default_rng(1)
  clips = []
  for i in range(8):
    path = tmp_path / f"v{i}.mp4"
    video.write_video(path, rng.integers(0, 256, (2 + 3 * (i % 3), 18, 18, 3), np.uint8), fps=4)
    clips += [engine.VideoSegment(f"v{i}#0", str(path), 0.0, 0.5), engine.VideoSegment(f"v{i}", str(path))]
  (tmp_path / "bad.mp4").write_bytes(b"\x00junk" * 200)
  clips.insert(4, engine.VideoSegment("bad", str(tmp_path / "bad.mp4")))  # between two videos' clips
  seen = []

  def fn(x):
    seen.append(np.asarray(x))
    return _toy_video_fn(x)
  with caplog.at_level("WARNING", logger="vidjax.data.video"):
    store, stats = _run(tmp_path / "many", clips, fn=fn, batch_size=3, decode_workers=3)
  assert "bad.mp4" in caplog.text and stats.failed_clips == 1 and stats.clips == len(clips)
  # Batches hold the clips in list order, scaled exactly as decode_video scales them.
  want = np.stack([video.decode_video(c.video, T, R, c.segment)[0] for c in clips])
  np.testing.assert_array_equal(np.concatenate(seen)[:len(clips)], want)
  one, _ = _run(tmp_path / "one", clips, batch_size=3, decode_workers=1)
  a, b = _snapshot(store), _snapshot(one)
  for kind in a:
    assert a[kind][0] == b[kind][0]
    np.testing.assert_array_equal(a[kind][1], b[kind][1], err_msg=kind)


def test_texts_batches_padding_and_resume(tmp_path):
  store = engine.open_store(tmp_path / "s", {"backbone": "toy"})
  captions = {f"c{i}": f"step {i} add salt" for i in range(5)}
  seen = []

  def text_fn(texts):
    seen.append(list(texts))
    return _toy_text_fn(texts)
  assert engine.extract_texts(store, captions, text_fn, batch_size=2, progress=False) == 5
  assert [len(b) for b in seen] == [2, 2, 2] and seen[-1][1] == ""
  ids = sorted(captions)
  np.testing.assert_array_equal(store.get("text", ids), _toy_text_fn([captions[i] for i in ids]))
  assert engine.extract_texts(store, {**captions, "c9": "new"}, text_fn, batch_size=2, progress=False) == 1


def test_verify_and_open_store_give_clear_errors(tmp_path, full_run):
  with pytest.raises(ValueError, match=r"kind 'clip' lacks 1 of 2 expected ids: 'nope'"):
    engine.verify(full_run[0], ["drum#000", "nope"])
  engine.open_store(tmp_path / "s", {"backbone": "a", "num_frames": 8})
  with pytest.raises(ValueError, match="num_frames=8 but this run uses num_frames=4"):
    engine.open_store(tmp_path / "s", {"backbone": "a", "num_frames": 4})


def test_missing_output_kind_is_a_clear_error(clips, tmp_path):
  store = engine.open_store(tmp_path / "s", {})
  with pytest.raises(KeyError, match="tokens"):
    engine.extract_videos(store, clips[:1], lambda x: {"clip": x[:, 0, 0, 0]}, num_frames=T, resolution=R,
                          batch_size=1, kinds=("clip", "tokens"), progress=False)


def test_data_parallel_over_two_fake_devices(tmp_path):
  # A fresh process, because the device count is fixed when JAX starts.
  code = f"""
import numpy as np, jax, jax.numpy as jnp
from vidjax import extract as engine
mesh = engine.local_mesh()
assert mesh.devices.size == 2, mesh
seen = []
def fn(x):
  seen.append((x.shape, len(x.sharding.device_set)))
  return {{"clip_mean": jnp.mean(x, axis=(1, 2, 3))}}
store = engine.open_store({str(tmp_path / 's')!r}, {{}})
clips = [engine.VideoSegment(f"c{{i}}", {str(MP4)!r}, float(i), float(i) + 1) for i in range(3)]
engine.extract_videos(store, clips, fn, num_frames=2, resolution=18, batch_size=3, kinds=("clip_mean",),
                      mesh=mesh, progress=False)
assert seen == [((4, 2, 18, 18, 3), 2)], seen
print(len(store.ids("clip_mean")))
"""
  env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu",
         "PYTHONPATH": str(REPO)}
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.strip().splitlines()[-1] == "3"


# ----------------------------------------------------------------------------- VideoPrism end to end

@functools.cache
def _config_module():
  spec = importlib.util.spec_from_file_location("extract_videoprism_config", REPO / "configs" / "extract_videoprism.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _smoke_config(**data):
  config = _config_module().get_config("smoke")
  config.lock()
  for k, v in data.items():
    setattr(config.data, k, v)
  return config


@pytest.fixture(scope="module")
def videoprism_run(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("vp")
  config = _smoke_config()
  model, _, _ = engine.load_model(config)
  ckpt = tmp / "tiny.npz"
  checkpoints.save_npz(engine.random_variables(model, seed=3), ckpt)
  (tmp / "videos").mkdir()
  (tmp / "videos" / "corrupt.mp4").write_bytes(b"not a video" * 100)
  entries = [{"clip_id": "drum#000", "video": str(MP4), "start": 0.0, "end": 2.0, "text": "hit the bottle"},
             {"clip_id": "drum#001", "video": str(MP4), "start": 2.0, "end": 5.0, "text": "Hit the bottle!"},
             {"clip_id": "drum#002", "video": str(MP4), "start": 8.0, "end": 10.0, "text": "a man drums"},
             {"clip_id": "bad", "video": "videos/corrupt.mp4", "text": "nothing"}]
  (tmp / "list.json").write_text(json.dumps(entries))
  config.data.videos = str(tmp / "list.json")
  config.model.checkpoint = str(ckpt)
  results = experiment.run(config, str(tmp / "work"))
  return config, results, tmp, ckpt


def test_videoprism_end_to_end_store_shapes_and_manifest(videoprism_run):
  config, results, tmp, ckpt = videoprism_run
  store = FeatureStore(tmp / "work" / "features")
  ids = ["bad", "drum#000", "drum#001", "drum#002"]
  d, n = 32, (36 // 18) ** 2
  assert store.kinds() == ["clip", "clip_mean", "frame_clip", "padded_frames", "text", "tokens"]
  assert store.get("clip", ids).shape == (4, d) and store.get("frame_clip", ids).shape == (4, 2, d)
  assert store.get("tokens", ids).shape == (4, 2, n, d)
  assert store.get("text", ids).shape == (4, d)
  for kind in ("clip", "clip_mean", "text", "frame_clip"):
    np.testing.assert_allclose(np.linalg.norm(store.get(kind, ids), axis=-1), 1.0, atol=1e-5)
  # frame_clip is the model's own per-frame joint embedding: the failed video's two black frames, recomputed.
  model, variables, _ = engine.load_model(config)
  _, _, out = model.apply(variables, jnp.zeros((1, 2, 36, 36, 3)), None, None, return_frame_embeddings=True)
  np.testing.assert_allclose(store.get("frame_clip", ["bad"])[0], out["frame_embeddings"][0], atol=1e-5)
  # clip_mean is the L2-normalized mean of the stored tokens (CAST App. A), recomputed in NumPy.
  tokens = store.get("tokens", ids).astype(np.float64)
  mean = tokens.mean(axis=(1, 2))
  np.testing.assert_allclose(store.get("clip_mean", ids), mean / np.linalg.norm(mean, axis=-1, keepdims=True),
                             atol=1e-5)
  # Canonicalization makes the two spellings one text; different texts differ.
  text = store.get("text", ["drum#000", "drum#001", "drum#002"])
  np.testing.assert_allclose(text[0], text[1], atol=1e-6)
  assert np.abs(text[0] - text[2]).max() > 1e-3
  np.testing.assert_array_equal(store.get("padded_frames", ids), [[1, 1], [0, 0], [0, 0], [0, 1]])
  meta = store.metadata
  assert meta["backbone"] == "videoprism_lvt_public_v1_base" and meta["random_init"] is False
  assert meta["checkpoint_hash"] == hashlib.sha256(ckpt.read_bytes()).hexdigest()
  assert (meta["num_frames"], meta["resolution"], meta["dtype"]) == (2, 36, "float32")
  assert meta["decode"] == {"padded_videos": 2, "failed_videos": 1, "padded_frames": 3}
  assert meta["counts"]["clip"] == 4
  on_disk = json.loads((tmp / "work" / "results.json").read_text())
  assert on_disk == json.loads(json.dumps(results))
  m = results["metrics"]["extract"]
  assert results["experiment"] == "extract_videoprism" and results["synthetic"] is False
  assert (m["clips"], m["texts"], m["padded_videos"]) == (4, 4, 2) and m["frames_per_s"] > 0


def test_videoprism_rerun_skips_everything(videoprism_run):
  config, _, tmp, _ = videoprism_run
  results = experiment.run(config, str(tmp / "work"))
  m = results["metrics"]["extract"]
  assert (m["clips_written"], m["clips_skipped"], m["texts_written"]) == (0, 4, 0)


def test_changed_resolution_into_same_store_is_refused(videoprism_run):
  config, _, tmp, _ = videoprism_run
  config = config.copy_and_resolve_references()
  config.resolution = 54
  with pytest.raises(ValueError, match=r"made by a different config \(changed: resolution\)"):  # the workdir's record
    experiment.run(config, str(tmp / "work"))
  config.store = str(tmp / "work" / "features")  # the same store from another workdir: the store's own check
  with pytest.raises(ValueError, match="resolution=36 but this run uses resolution=54"):
    experiment.run(config, str(tmp / "work2"))


def test_wrong_checkpoint_is_a_clear_error(tmp_path):
  bad = tmp_path / "other.npz"
  np.savez(bad, **{"params/vision_encoder/not_a_param": np.zeros(3, np.float32)})
  config = _smoke_config(videos=str(MP4))
  config.model.checkpoint = str(bad)
  with pytest.raises(checkpoints.CheckpointMismatchError) as err:
    experiment.run(config, str(tmp_path / "w"))
  assert str(bad) in str(err.value) and "missing key: params/vision_encoder/patch_projection" in str(err.value)
  assert "unexpected key: params/vision_encoder/not_a_param" in str(err.value)
  config.model.checkpoint = str(tmp_path / "absent.npz")
  with pytest.raises(FileNotFoundError, match="absent.npz"):
    experiment.run(config, str(tmp_path / "w"))


def test_clip_lists_and_random_init(tmp_path):
  (tmp_path / "list.txt").write_text(f"{MP4}\nseg1\t{MP4}\t1.5\t3\n")
  clips, captions, _ = experiment.build_clips(_smoke_config(videos=str(tmp_path / "list.txt")).data)
  assert clips == [engine.VideoSegment("water_bottle_drumming", str(MP4)), engine.VideoSegment("seg1", str(MP4), 1.5, 3.0)]
  assert captions == {}
  (tmp_path / "bad.txt").write_text(f"a\t{MP4}\n")
  with pytest.raises(ValueError, match=r"bad.txt:1: expected a video path or 4 tab-separated fields"):
    experiment.build_clips(_smoke_config(videos=str(tmp_path / "bad.txt")).data)
  with pytest.raises(FileNotFoundError, match="not a video folder"):
    experiment.build_clips(_smoke_config(videos=str(tmp_path / "nothing.bin")).data)
  config = _smoke_config()
  clips, _, _ = experiment.build_clips(config.data)
  assert [c.clip_id for c in clips] == ["water_bottle_drumming"]
  _, variables, meta = engine.load_model(config)
  assert meta["random_init"] is True and meta["checkpoint_hash"] is None
  assert variables["params"]["vision_encoder"]["patch_projection"]["linear"]["kernel"].shape == (18 * 18 * 3, 32)


def test_youcook2_annotations_resolve_videos_by_id_and_count_missing(tmp_path):
  (tmp_path / "videos" / "sub").mkdir(parents=True)
  os.symlink(MP4, tmp_path / "videos" / "sub" / "xHr8X2Wpmno.mp4")
  ann = REPO / ".." / "shared" / "data" / "youcook2" / "youcookii_annotations_trainval.json"
  config = _smoke_config(videos=str(tmp_path / "videos"), annotations=str(ann), format="youcook2", split="val")
  clips, captions, info = experiment.build_clips(config.data)
  assert clips and all(c.video.endswith("xHr8X2Wpmno.mp4") for c in clips)
  assert [c.clip_id for c in clips] == sorted(captions) and clips[0].clip_id == "xHr8X2Wpmno#000"
  assert all(c.end >= c.start for c in clips) and captions[clips[0].clip_id]
  assert info["missing_videos"] == 456
  config.data.format = ""
  with pytest.raises(ValueError, match="needs config.data.format"):
    experiment.build_clips(config.data)


def test_bfloat16_storage_rounds_the_float32_features(clips, full_run, tmp_path):
  store = engine.open_store(tmp_path / "s", {"dtype": "bfloat16"})
  engine.extract_videos(store, clips[:3], _toy_video_fn, num_frames=T, resolution=R, batch_size=2,
                        kinds=("clip", "tokens"), dtype="bfloat16", progress=False)
  ids = [c.clip_id for c in clips[:3]]
  assert json.loads((tmp_path / "s" / "clip" / "p0-00000.ids.json").read_text())["dtype"] == "bfloat16"
  want = full_run[0].get("clip", ids)
  got = store.get("clip", ids)
  np.testing.assert_allclose(got, want, rtol=2 ** -8, atol=1e-6)
  assert not np.array_equal(got, want)


def test_retrieval_datasets_resolve_videos_for_whole_videos_paragraphs_and_segments(tmp_path):
  (tmp_path / "videos").mkdir()
  # MSR-VTT 1k-A: whole videos; the csv's first video stands in for the real mp4.
  os.symlink(MP4, tmp_path / "videos" / "video9770.mp4")
  csv = REPO / ".." / "shared" / "data" / "msrvtt" / "MSRVTT_JSFUSION_test.csv"
  config = _smoke_config(videos=str(tmp_path / "videos"), annotations=str(csv), format="msrvtt")
  clips, captions, info = experiment.build_clips(config.data)
  assert [c.clip_id for c in clips] == ["video9770"] and clips[0].start is None
  assert list(captions) == ["ret0"] and info["missing_videos"] == 999
  # ActivityNet val_1: one timed segment per sentence, or one paragraph keyed by the video id.
  ann = REPO / ".." / "shared" / "data" / "activitynet_captions" / "val_1.json"
  first = sorted(json.loads(ann.read_text()))[0]
  os.symlink(MP4, tmp_path / "videos" / f"{first}.mp4")
  config = _smoke_config(videos=str(tmp_path / "videos"), annotations=str(ann), format="activitynet", unit="segment")
  clips, captions, info = experiment.build_clips(config.data)
  assert len(clips) == len(captions) > 1 and all(c.clip_id.startswith(first + "#") for c in clips)
  assert all(0 <= c.start <= c.end for c in clips) and info["missing_videos"] == 4916
  config.data.unit, config.data.protocol = "video", "paragraphs"
  clips, captions, _ = experiment.build_clips(config.data)
  assert [c.clip_id for c in clips] == [first] and list(captions) == [first]
  config.data.unit = "frames"
  with pytest.raises(ValueError, match="data.unit"):
    experiment.build_clips(config.data)


def test_transform_kind_writes_a_cache_kind_resumably_in_low_precision(tmp_path):
  from vidjax import ops
  rng = np.random.default_rng(0)
  ids = [f"v{i:02d}" for i in range(7)]
  tokens = rng.normal(size=(7, 4, 3, 5)).astype(np.float32)
  store = FeatureStore.create(tmp_path / "s", {"backbone": "test"})
  with store.writer("tokens") as w:
    for i, t in zip(ids, tokens):
      w.add(i, t)
  calls = []

  def compress(x):  # [B, T, P, D] -> [B, T, D]: a stand-in for VEDJE's compressor
    calls.append(x.shape)
    return jnp.mean(jnp.asarray(x), axis=2)

  assert engine.transform_kind(store, "tokens", "cache", compress, batch_size=3, ids=ids[:4],
                                   dtype="float8_e4m3", progress=False) == 4
  assert engine.transform_kind(store, "tokens", "cache", compress, batch_size=3, dtype="float8_e4m3",
                                   progress=False) == 3  # resumes: only the 3 missing ids
  assert set(calls) == {(3, 4, 3, 5)}  # every batch padded to one shape
  got = FeatureStore(tmp_path / "s").get("cache", ids)
  np.testing.assert_array_equal(got, ops.quantize_dequantize(tokens.mean(axis=2), "float8_e4m3"))
  with pytest.raises(FloatingPointError, match="NaN"):
    engine.transform_kind(store, "tokens", "bad", lambda x: x * np.nan, batch_size=2, progress=False)


# ----------------------------------------------------------------------------- issue 62: stale inputs


def test_a_video_whose_file_changed_is_re_extracted_and_said_so(tmp_path, capsys):
  """The store records what each clip was made from (`<store>/inputs.json`): a rerun after a video file changed
  (here: rewritten, so its modification time moved) re-extracts its clip and says so, instead of skipping it as
  already stored; an unchanged rerun writes nothing."""
  videos = tmp_path / "videos"
  videos.mkdir()
  for name in ("v1", "v2"):
    (videos / f"{name}.mp4").write_bytes(MP4.read_bytes())
  config = _smoke_config(videos=str(videos))
  store_root = tmp_path / "work" / "features"
  m = experiment.run(config, str(tmp_path / "work"))["metrics"]["extract"]
  assert (m["clips_written"], m["clips_changed"]) == (2, 0)
  before = FeatureStore(store_root).get("clip", ["v1", "v2"])
  record = json.loads((store_root / engine.INPUTS_FILE).read_text())
  assert record["videos"]["v2"]["bytes"] == MP4.stat().st_size and set(record["videos"]) == {"v1", "v2"}
  m = experiment.run(config, str(tmp_path / "work"))["metrics"]["extract"]
  assert (m["clips_written"], m["clips_skipped"], m["clips_changed"]) == (0, 2, 0)
  capsys.readouterr()
  stat = (videos / "v2.mp4").stat()
  os.utime(videos / "v2.mp4", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
  m = experiment.run(config, str(tmp_path / "work"))["metrics"]["extract"]
  assert (m["clips_written"], m["clips_skipped"], m["clips_changed"]) == (1, 1, 1)
  out = capsys.readouterr().out
  assert "1 video(s) changed since their features were extracted" in out and "v2.mp4" in out, out
  assert "re-extracting their 1 clip(s)" in out
  store = FeatureStore(store_root)
  np.testing.assert_array_equal(store.get("clip", ["v1", "v2"]), before)  # the same pixels: the same features
  assert store.verify()["clip"]["items"] == 2 and sorted(store.ids("padded_frames")) == ["v1", "v2"]


def test_a_changed_text_or_segment_is_re_embedded(tmp_path, capsys):
  store = FeatureStore.create(tmp_path, {})
  clips = [engine.VideoSegment("a#0", str(MP4), 0.0, 1.0), engine.VideoSegment("a#1", str(MP4), 1.0, 2.0)]
  assert engine.forget_changed_inputs(store, clips, {"a#0": "cut", "a#1": "stir"}) == {"clips_changed": 0,
                                                                                       "texts_changed": 0}
  for kind in ("clip", "padded_frames", "text"):
    with store.writer(kind) as w:
      for c in clips:
        w.add(c.clip_id, np.ones(3))
  moved = [clips[0], engine.VideoSegment("a#1", str(MP4), 1.0, 2.5)]  # the annotation's segment changed
  assert engine.forget_changed_inputs(store, moved, {"a#0": "cut", "a#1": "stir well"}) == {"clips_changed": 1,
                                                                                            "texts_changed": 1}
  out = capsys.readouterr().out
  assert "re-extracting their 1 clip(s)" in out and "1 text(s) changed since they were embedded (e.g. 'a#1')" in out
  store = FeatureStore(tmp_path)
  assert store.ids("clip") == ["a#0"] and store.ids("padded_frames") == ["a#0"] and store.ids("text") == ["a#0"]
  assert engine.forget_changed_inputs(store, moved, {"a#0": "cut", "a#1": "stir well"}) == {"clips_changed": 0,
                                                                                            "texts_changed": 0}


def test_a_video_id_found_at_two_paths_is_an_error_naming_both(tmp_path):
  (tmp_path / "a").mkdir()
  (tmp_path / "b").mkdir()
  os.symlink(MP4, tmp_path / "a" / "v1.mp4")
  os.symlink(MP4, tmp_path / "b" / "v1.mp4")
  os.symlink(MP4, tmp_path / "a" / "v2.mp4")
  message = rf"video id 'v1' matches 2 files under {tmp_path}: {tmp_path}/a/v1.mp4 and {tmp_path}/b/v1.mp4"
  with pytest.raises(ValueError, match=message):
    experiment.build_clips(_smoke_config(videos=str(tmp_path)).data)
  with pytest.raises(ValueError, match=message.replace("'v1'", "'v1.mp4'")):
    engine.one_file_per_video(tmp_path, ["v2", "v1.mp4"])  # DiDeMo-style ids match by their stem too
  engine.one_file_per_video(tmp_path, ["v2", "v3"])
  (tmp_path / "b" / "v1.mp4").unlink()
  os.symlink(MP4, tmp_path / "a" / "v1.webm")  # another extension is another file
  with pytest.raises(ValueError, match=r"video id 'v1' matches 2 files .*v1.mp4 and .*v1.webm"):
    experiment.build_clips(_smoke_config(videos=str(tmp_path)).data)
