"""Low-precision cache storage (vidjax/ops.py; VEDJE App. A.4): exact bytes and error bounds."""
import numpy as np
import pytest

from vidjax import ops


def test_cache_bytes_are_exact():
  # VEDJE: 64 tokens x 384 = 49,152 B in bf16; 16 tokens 12,288 B; fp8 one byte, fp4 half a byte.
  assert ops.storage_bytes(64 * 384, "bfloat16") == 49_152
  assert ops.storage_bytes(16 * 384, "bfloat16") == 12_288
  assert ops.storage_bytes(64 * 384, "float8_e4m3") == 24_576
  assert ops.storage_bytes(16 * 384, "float4_e2m1") == 3_072
  assert ops.storage_bytes(3, "float4_e2m1") == 2
  with pytest.raises(ValueError, match="storage format"):
    ops.storage_bytes(10, "int4")


def test_quantize_dequantize_error_bounds():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(64, 384)).astype(np.float32)
  # Relative error of round-to-nearest: 2^-(mantissa bits + 1) for normal numbers.
  for fmt, mant in (("bfloat16", 7), ("float8_e4m3", 3)):
    y = ops.quantize_dequantize(x, fmt)
    normal = np.abs(x) > 2.0 ** -6
    assert np.all(np.abs(y - x)[normal] <= np.abs(x)[normal] * 2.0 ** -(mant + 1) * (1 + 1e-6)), fmt
  # fp4-e2m1 has the 15 values 0, +-0.5, 1, 1.5, 2, 3, 4, 6: every output is one of them, the nearest.
  grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)
  y = ops.quantize_dequantize(x, "float4_e2m1")
  assert set(np.unique(np.abs(y))) <= set(grid)
  nearest = np.min(np.abs(np.abs(np.clip(x, -6, 6))[..., None] - grid), axis=-1)
  assert np.allclose(np.abs(y - np.clip(x, -6, 6)), nearest, atol=1e-6)  # the nearest grid value
  half_spacing = np.select([np.abs(x) < 2, np.abs(x) < 4], [0.25, 0.5], 1.0)
  assert np.all(np.abs(y - np.clip(x, -6, 6)) <= half_spacing + 1e-6)
  # Saturation, not NaN, beyond the format's range.
  assert ops.quantize_dequantize(np.array([1e4, -1e4]), "float8_e4m3").tolist() == [448.0, -448.0]
  with pytest.raises(ValueError, match="NaN"):
    ops.quantize_dequantize(np.array([np.nan]), "bfloat16")


def test_fp4_packing_round_trips_at_half_a_byte_per_value():
  rng = np.random.default_rng(1)
  x = rng.normal(size=(16, 7)).astype(np.float32) * 3
  packed = ops.pack_fp4(x)
  assert packed.dtype == np.uint8 and packed.nbytes == ops.storage_bytes(x.size, "float4_e2m1") == 56
  assert np.array_equal(ops.unpack_fp4(packed, x.shape), ops.quantize_dequantize(x, "float4_e2m1"))
  odd = np.array([1.0, -2.0, 6.0], np.float32)
  assert np.array_equal(ops.unpack_fp4(ops.pack_fp4(odd), (3,)), odd)
  with pytest.raises(ValueError, match="cannot hold"):
    ops.unpack_fp4(packed[:-1], x.shape)
