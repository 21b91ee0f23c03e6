"""The rendered state-transition world (vidjax.worlds.rendered) and the stand-in backbone (vidjax.models.pixelstats)."""
import numpy as np
import pytest

from vidjax.data import genstate
from vidjax.worlds import rendered
from vidjax.data import video
from vidjax.models import pixelstats

pytestmark = pytest.mark.highest_precision  # compares with NumPy or a reference (tests/conftest.py)

SMALL = rendered.RenderedWorldConfig(num_train=1, num_test=2, frames=8, hold=2)


def _world(tmp_path, seed=0, cfg=SMALL, name="v"):
  world = rendered.make_world(cfg, seed, tmp_path / name)
  rendered.write_videos(world)
  return world


def test_rendering_is_deterministic_down_to_the_decoded_frames(tmp_path):
  a, b, c = _world(tmp_path, 0, name="a"), _world(tmp_path, 0, name="b"), _world(tmp_path, 1, name="c")
  ids = [x.clip_id for x in a.all_clips()]
  assert len(ids) == 3 * 4 * (1 + 2) and len(set(ids)) == len(ids)
  for clip_id in ids[:6]:
    assert a.path(clip_id).read_bytes() == b.path(clip_id).read_bytes()
    fa, pa, ea = video.decode_video(a.path(clip_id), 8, 64)
    fb, _, _ = video.decode_video(b.path(clip_id), 8, 64)
    assert ea is None and not pa.any()
    np.testing.assert_array_equal(fa, fb)
  assert any(a.path(i).read_bytes() != c.path(i).read_bytes() for i in ids[:6])
  # Written once: a rerun writes no clip, and the release adds the two metadata files beside the clips.
  assert rendered.write_videos(a) == 0
  files = rendered.write_release(a, tmp_path / "release")
  assert genstate.read_triplets(files["metadata"]) == a.triplets["test"]
  assert genstate.read_triplets(files["train_metadata"]) == a.triplets["train"] and files["videos"] == a.video_dir
  # The encoder itself is deterministic (x264 with its own threads is not).
  frames = rendered.clip_frames(a, a.clips["test"][0])
  assert len({video.encode_video(frames) for _ in range(30)}) == 1
  # A world with more queries starts with the same clips (each query has its own seed).
  bigger = rendered.make_world(rendered.RenderedWorldConfig(num_train=1, num_test=3, frames=8, hold=2), 0, tmp_path)
  assert [x.prompt for x in bigger.clips["test"][:3]] == [x.prompt for x in a.clips["test"][:3]]


def test_decoded_clips_show_the_rendered_objects(tmp_path):
  world = _world(tmp_path)
  clip = world.clips["test"][0]
  frames, _, _ = video.decode_video(world.path(clip.clip_id), 8, 64)
  truth = rendered.clip_frames(world, clip).astype(np.float32) / 255
  assert np.abs(frames - truth).mean() < 0.03  # mp4 compression only


def test_grammar_triplets_are_hard_negatives_of_each_kind(tmp_path):
  world = rendered.make_world(rendered.RenderedWorldConfig(num_train=0, num_test=25), 3, tmp_path)
  triplets = world.triplets["test"]
  assert [t.subset for t in triplets] == [c for c in rendered.CATEGORIES for _ in range(25)]
  by_id = {c.clip_id: c for c in world.clips["test"]}
  for t in triplets:
    main, temp, sem = (by_id[v] for v in t.videos)
    assert t.query == main.prompt and len({main.prompt, temp.prompt, sem.prompt}) == 3
    assert main.tint == temp.tint == sem.tint  # one scene
    frames = [rendered.clip_frames(world, c).astype(int) for c in (main, temp, sem)]
    assert np.abs(frames[0] - frames[1]).max() > 50 and np.abs(frames[0] - frames[2]).max() > 50  # noise is ~4
    names = lambda c: {o.name for o in c.objects}  # noqa: E731
    assert names(temp) == names(main)  # temporal: the same objects, another order or end state
    if t.subset in ("Position", "Quantity"):  # semantic: another object makes the same change
      assert names(sem) != names(main)
    else:  # Actor: the other object crosses; Relation: onto the other target -- the same objects
      assert names(sem) == names(main)


def test_metadata_round_trips_through_the_genstate_reader(tmp_path):
  world = rendered.make_world(SMALL, 0, tmp_path / "v")
  path = rendered.write_metadata(world, tmp_path / "meta.json")
  assert genstate.read_triplets(path) == world.triplets["test"]
  pools = genstate.pools(world.triplets["test"])
  assert all(len(p) == 3 * 2 for p in pools)  # §5.1: its own three + the other query of its subset


def test_world_config_errors():
  with pytest.raises(ValueError, match="categories"):
    rendered.RenderedWorldConfig(categories=("Home",))
  with pytest.raises(ValueError, match="object_px"):
    rendered.RenderedWorldConfig(object_px=40)
  with pytest.raises(ValueError, match="no motion"):
    rendered.RenderedWorldConfig(frames=6, hold=3)


def _np_tokens(frame, grid):
  """The stand-in's token of each patch, written with loops over pixels (independent of the jnp code)."""
  import colorsys
  h, w, _ = frame.shape
  ph, pw = h // grid, w // grid
  out = []
  for r in range(grid):
    for c in range(grid):
      patch = frame[r * ph:(r + 1) * ph, c * pw:(c + 1) * pw].astype(np.float64)
      hist = np.zeros(12)
      ys, xs = [], []
      for y in range(ph):
        for x in range(pw):
          hue, sat, val = colorsys.rgb_to_hsv(*patch[y, x])
          if sat > 0.4 and val > 0.3:
            hist[int(((hue * 360 + 15) % 360) // 30)] += 1
            ys.append((y + 0.5) / ph * 2 - 1)
            xs.append((x + 0.5) / pw * 2 - 1)
      n = ph * pw
      luma = patch @ np.array([0.299, 0.587, 0.114])
      out.append(np.concatenate([
          hist / n, [hist.sum() / n], patch.mean(axis=(0, 1)), [np.mean(patch.max(-1) < 0.2)],
          [np.abs(np.diff(luma, axis=1)).mean(), np.abs(np.diff(luma, axis=0)).mean(), luma.std()],
          [np.mean(ys) if ys else 0.0, np.mean(xs) if xs else 0.0]]))
  return np.stack(out)


def test_pixel_stat_tokens_match_a_per_pixel_computation():
  world = rendered.make_world(SMALL, 0, "/nonexistent")
  frame = rendered.clip_frames(world, world.clips["test"][0])[3].astype(np.float32) / 255
  got = np.asarray(pixelstats.PixelStats(4).apply({}, frame[None, None])[0])
  assert got.shape == (1, 16, pixelstats.DIM)
  np.testing.assert_allclose(got[0, :, :22], _np_tokens(frame, 4), atol=1e-5)
  np.testing.assert_allclose(got[0, :, 22:], pixelstats.position_code(4), atol=1e-6)
  # Each palette colour has its own hue bin, and the colour bag puts a prompt's colours there.
  bins = [int(pixelstats.hue_bin(np.asarray(pixelstats.hue_saturation_value(np.asarray(rgb) / 255.0)[0])))
          for rgb in rendered.COLOURS.values()]
  assert len(set(bins)) == len(bins)
  bag = pixelstats.colour_bag(rendered.colour_words("the red square moves onto the blue circle"))
  assert np.count_nonzero(bag) == 2 and bag[bins[0]] == pytest.approx(2 ** -0.5)
  with pytest.raises(ValueError, match="patch grid"):
    pixelstats.pixel_stat_tokens(np.zeros((1, 30, 30, 3)), 4)


def test_encode_video_rejects_what_mp4_cannot_hold():
  with pytest.raises(ValueError, match="even H and W"):
    video.encode_video(np.zeros((2, 7, 8, 3), np.uint8))
  with pytest.raises(ValueError, match="uint8"):
    video.encode_video(np.zeros((2, 8, 8, 3), np.float32))
  with pytest.raises(ValueError, match="quantizer"):
    video.encode_video(np.zeros((2, 8, 8, 3), np.uint8), quantizer=1)
