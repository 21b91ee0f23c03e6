"""Tests for vidjax/data/video.py on the real VideoPrism demo clip (512x512, 100 frames at 12 fps)."""
import functools
from pathlib import Path

import av
import numpy as np
import pytest

from vidjax.data import video

pytestmark = pytest.mark.highest_precision  # compares with NumPy or a reference (tests/conftest.py)

MP4 = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "videoprism_assets" / "water_bottle_drumming.mp4"
FPS = 12
N_FRAMES = 100


@functools.cache
def reference_frames(resolution: int) -> np.ndarray:
  """All 100 frames `[100, R, R, 3]` uint8, decoded straight with PyAV (independent of video.py)."""
  with av.open(str(MP4)) as c:
    return np.stack([f.reformat(width=resolution, height=resolution, format="rgb24", interpolation="AREA").to_ndarray()
                     for f in c.decode(video=0)])


def test_reference_clip_is_what_the_tests_assume():
  ref = reference_frames(36)
  assert ref.shape == (N_FRAMES, 36, 36, 3)
  with av.open(str(MP4)) as c:
    s = c.streams.video[0]
    assert (s.width, s.height) == (512, 512)
    assert float(s.average_rate) == FPS


def test_whole_video_shapes_range_and_official_demo_indices():
  frames, padded, error = video.decode_video(MP4, num_frames=8, resolution=288)
  assert frames.shape == (8, 288, 288, 3) and frames.dtype == np.float32
  assert frames.min() >= 0.0 and frames.max() <= 1.0 and frames.max() > 0.5
  assert not padded.any() and error is None
  # Official VideoPrism demo: floor(linspace(0, n_frames, T, endpoint=False)).
  small, _, _ = video.decode_video(MP4, num_frames=8, resolution=36)
  idx = np.floor(np.linspace(0, N_FRAMES, 8, endpoint=False)).astype(int)
  np.testing.assert_array_equal(np.round(small * 255).astype(np.uint8), reference_frames(36)[idx])


def test_segment_sampling_picks_frames_at_the_right_times():
  segs = [(1.0, 3.0), (6.0, 8.0), (0.5, 0.75)]
  out = video.decode_clips(MP4, segs, num_frames=4, resolution=36, uint8=True)
  assert out.frames.shape == (3, 4, 36, 36, 3) and out.frames.dtype == np.uint8
  assert out.error is None and not out.padded.any()
  for s, (start, end) in enumerate(segs):
    times = start + np.arange(4) * (end - start) / 4
    idx = np.floor(times * FPS + 1e-6).astype(int)  # the frame on screen at each target time
    np.testing.assert_array_equal(out.frames[s], reference_frames(36)[idx])
  # (6, 8) starts past the seek threshold, so this also checks the seek path lands on exact frames.
  assert video._SEEK_MIN_S < 6.0


def test_resize_matches_independent_area_downsampling():
  # 512 -> 32 is an exact 16x16 block average; compare with a NumPy box filter of full-res frames.
  # swscale resizes the 4:2:0 chroma planes before colour conversion, so pixels differ a little
  # (mean ~0.01); frames from elsewhere in the clip differ by ~0.14.
  frames, _, _ = video.decode_video(MP4, num_frames=2, resolution=32, segment=(2.0, 4.0))
  def box(idx):
    full = reference_frames(512)[idx].astype(np.float64)
    return full.reshape(2, 32, 16, 32, 16, 3).mean(axis=(2, 4)) / 255.0
  assert np.abs(frames - box([24, 36])).mean() < 0.02
  assert np.abs(frames - box([60, 70])).mean() > 0.07


def test_center_crop_equals_squash_on_square_video_and_crops_wide_frames(tmp_path):
  a, _, _ = video.decode_video(MP4, 2, 36, aspect="center_crop")
  b, _, _ = video.decode_video(MP4, 2, 36, aspect="squash")
  np.testing.assert_array_equal(a, b)
  # A 64x32 video whose left and right quarters are red and centre green: the crop keeps only green.
  path = tmp_path / "wide.mp4"
  img = np.zeros((32, 64, 3), np.uint8)
  img[:, :16, 0] = img[:, 48:, 0] = 255
  img[:, 16:48, 1] = 255
  video.write_video(path, np.stack([img] * 5), fps=10)
  crop, padded, err = video.decode_video(path, 2, 16, aspect="center_crop")
  squash, _, _ = video.decode_video(path, 2, 16, aspect="squash")
  assert err is None and not padded.any()
  inner = crop[:, 3:-3, 3:-3]
  assert inner[..., 1].mean() > 0.8 and inner[..., 0].mean() < 0.2
  assert squash[:, :, :3, 0].mean() > 0.7  # squash keeps the red border


def test_corrupt_file_gives_black_frames_and_a_count(tmp_path):
  bad = tmp_path / "bad.mp4"
  bad.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
  out = video.decode_clips(bad, [None, (0.0, 2.0)], num_frames=3, resolution=18)
  assert out.frames.shape == (2, 3, 18, 18, 3)
  assert np.all(out.frames == 0) and out.padded.all() and out.num_padded == 6
  assert out.error and "Invalid" in out.error
  missing = video.decode_clips(tmp_path / "nope.mp4", [None], 2, 18)
  assert missing.padded.all() and "No such file" in missing.error


def test_segment_past_the_end_pads_with_black():
  # Targets 7, 8.25, 9.5, 10.75 s; the clip ends at 100/12 = 8.33 s.
  out = video.decode_clips(MP4, [(7.0, 12.0)], num_frames=4, resolution=36)
  np.testing.assert_array_equal(out.padded[0], [False, False, True, True])
  assert np.all(out.frames[0, 2:] == 0) and out.frames[0, :2].max() > 0
  np.testing.assert_array_equal(np.round(out.frames[0, 1] * 255), reference_frames(36)[99])
  assert out.num_padded == 2 and "past the end" in out.error


def test_bad_arguments_raise_clear_errors():
  with pytest.raises(ValueError, match="before its start"):
    video.decode_clips(MP4, [(3.0, 1.0)], 4, 36)
  with pytest.raises(ValueError, match="aspect"):
    video.decode_clips(MP4, [None], 4, 36, aspect="stretch")
  with pytest.raises(ValueError, match="num_frames"):
    video.sample_times(0, 1, 0)
