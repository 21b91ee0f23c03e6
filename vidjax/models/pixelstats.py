"""A STAND-IN frozen video backbone: patch tokens from pixel statistics, no learned weights.

**This is not VideoPrism and not a learned model.** It exists so that the rendered GenState world
(`vidjax.worlds.rendered`) runs through the real pipeline -- mp4 files, decoding, the extraction engine,
a feature store, trained models -- on a fresh machine without downloading a checkpoint. Its features
carry real signal about the rendered scenes (which colours are where, and how much), because those
scenes are flat coloured shapes on a grey background; on natural video they mean little. With a real
VideoPrism checkpoint the same pipeline uses VideoPrism instead.

Every frame is cut into `grid x grid` square patches and each patch becomes one `DIM`-dimensional token:

  [0:12]   hue histogram: the fraction of the patch's pixels that are coloured (HSV saturation > 0.4,
           value > 0.3) and whose hue falls in each 30-degree bin (bins centred on 0, 30, ..., 330 degrees)
  [12]     the coloured fraction (sum of the histogram)
  [13:16]  mean R, G, B
  [16]     the dark fraction (value < 0.2)
  [17:19]  mean |d/dx| and |d/dy| of the luminance inside the patch (edges: shape and texture)
  [19]     standard deviation of the luminance
  [20:22]  the centroid of the coloured pixels relative to the patch centre, in [-1, 1] (0 when none)
  [22:24]  the patch's row and column in [-1, 1]
  [24:32]  sin and cos of pi * k * row and pi * k * col for k = 1, 2 (a fixed position code, so that
           attention over patch tokens knows where each patch is)

Frames are `[B, T, H, W, 3]` float in [0, 1] with H and W divisible by `grid`, as the extraction engine
gives them. The module has VideoPrism's encoder interface (`apply({}, frames, train=False)` ->
(tokens `[B, T * grid², DIM]`, None)), so `vidjax.experiments.extract.make_video_fn` runs it unchanged.
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from vidjax.ops import l2_normalize

NAME = "pixel_stats"  # config.model.name of the extraction experiment that selects this backbone
DIM = 32
HUE_BINS = 12
SATURATION_MIN = 0.4
VALUE_MIN = 0.3
DARK_MAX = 0.2


def hue_saturation_value(rgb: jnp.ndarray):
  """HSV of RGB in [0, 1] (hue in degrees [0, 360))."""
  r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
  maxc, minc = rgb.max(-1), rgb.min(-1)
  delta = maxc - minc
  safe = jnp.where(delta > 0, delta, 1.0)
  h = jnp.where(maxc == r, jnp.mod((g - b) / safe, 6.0),
                jnp.where(maxc == g, (b - r) / safe + 2.0, (r - g) / safe + 4.0))
  hue = jnp.where(delta > 0, h * 60.0, 0.0)
  sat = jnp.where(maxc > 0, delta / jnp.where(maxc > 0, maxc, 1.0), 0.0)
  return hue, sat, maxc


def hue_bin(hue_degrees) -> jnp.ndarray:
  """The histogram bin of a hue in degrees (bins centred on multiples of 30), int32."""
  return jnp.floor(jnp.mod(jnp.asarray(hue_degrees) + 180.0 / HUE_BINS, 360.0) / (360.0 / HUE_BINS)).astype(jnp.int32)


def position_code(grid: int) -> np.ndarray:
  """`[grid², 10]`: row and column in [-1, 1], then sin / cos of pi k row, pi k col for k = 1, 2."""
  centre = (np.arange(grid) + 0.5) / grid * 2.0 - 1.0
  row, col = np.meshgrid(centre, centre, indexing="ij")
  row, col = row.reshape(-1), col.reshape(-1)
  parts = [row, col]
  for k in (1, 2):
    parts += [np.sin(np.pi * k * row), np.cos(np.pi * k * row), np.sin(np.pi * k * col), np.cos(np.pi * k * col)]
  return np.stack(parts, axis=-1).astype(np.float32)


def pixel_stat_tokens(frames: jnp.ndarray, grid: int) -> jnp.ndarray:
  """`[..., H, W, 3]` in [0, 1] -> `[..., grid², DIM]` float32 (module docstring)."""
  frames = jnp.asarray(frames, jnp.float32)
  *lead, h, w, _ = frames.shape
  if h % grid or w % grid:
    raise ValueError(f"pixel_stat_tokens: frames of {h}x{w} do not split into a {grid}x{grid} patch grid")
  ph, pw = h // grid, w // grid
  patches = frames.reshape(*lead, grid, ph, grid, pw, 3)
  patches = jnp.moveaxis(patches, -4, -3).reshape(*lead, grid * grid, ph, pw, 3)  # [..., P, ph, pw, 3]
  hue, sat, val = hue_saturation_value(patches)
  coloured = ((sat > SATURATION_MIN) & (val > VALUE_MIN)).astype(jnp.float32)
  bins = hue_bin(hue)
  hist = (coloured[..., None] * (bins[..., None] == jnp.arange(HUE_BINS))).mean(axis=(-3, -2))
  luma = patches @ jnp.asarray([0.299, 0.587, 0.114], jnp.float32)
  dx = jnp.abs(jnp.diff(luma, axis=-1)).mean(axis=(-2, -1))
  dy = jnp.abs(jnp.diff(luma, axis=-2)).mean(axis=(-2, -1))
  ys = (jnp.arange(ph, dtype=jnp.float32) + 0.5) / ph * 2.0 - 1.0
  xs = (jnp.arange(pw, dtype=jnp.float32) + 0.5) / pw * 2.0 - 1.0
  mass = coloured.sum(axis=(-2, -1))
  safe = jnp.where(mass > 0, mass, 1.0)
  cy = (coloured * ys[:, None]).sum(axis=(-2, -1)) / safe
  cx = (coloured * xs[None, :]).sum(axis=(-2, -1)) / safe
  stats = jnp.concatenate([
      hist, coloured.mean(axis=(-2, -1))[..., None], patches.mean(axis=(-3, -2)),
      (val < DARK_MAX).astype(jnp.float32).mean(axis=(-2, -1))[..., None],
      dx[..., None], dy[..., None], luma.std(axis=(-2, -1))[..., None], cy[..., None], cx[..., None]], axis=-1)
  pos = jnp.broadcast_to(jnp.asarray(position_code(grid)), (*lead, grid * grid, 10))
  return jnp.concatenate([stats, pos], axis=-1)


def colour_bag(colours) -> np.ndarray:
  """An order-blind text embedding in this token space: the unit sum of the hue-histogram entries of the
  given RGB colours (0-255; e.g. the colour words of a prompt), `[DIM]`, zero when there are none."""
  vec = np.zeros(DIM, np.float32)
  for rgb in colours:
    hue, _, _ = hue_saturation_value(jnp.asarray(rgb, jnp.float32) / 255.0)
    vec[int(hue_bin(hue))] += 1.0
  return l2_normalize(vec)


class PixelStats(nn.Module):
  """The stand-in backbone as a parameter-free Flax module with VideoPrism's encoder interface."""
  grid: int = 4

  @nn.compact
  def __call__(self, frames: jnp.ndarray, train: bool = False):
    del train
    b, t = frames.shape[:2]
    tokens = pixel_stat_tokens(frames, self.grid)
    return tokens.reshape(b, t * self.grid * self.grid, DIM), None
