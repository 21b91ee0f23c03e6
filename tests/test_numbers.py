"""Issue 62, numbers: every L2 normalisation and cosine scales a vector before its norm, so finite vectors of 1e30
or 1e-30 (whose squares overflow or underflow in float32) normalise and rank like the same vectors of size 1; only
the all-zero vector maps to 0, a non-finite one stays non-finite, bfloat16 stays bfloat16, gradients stay finite."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidjax import evaluate, losses, ops
from vidjax.retrieval import DenseIndex

pytestmark = pytest.mark.highest_precision

RNG = np.random.default_rng(62)
X = RNG.normal(size=(6, 8)).astype(np.float32)
UNIT = X / np.sqrt(np.sum(X.astype(np.float64) ** 2, axis=-1, keepdims=True))


@pytest.mark.parametrize("scale", [1e30, 1e-30, 3e38, 1e-35])
@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_tiny_and_huge_finite_vectors_normalise_like_unit_ones(scale, backend):
  x = X / np.float32(np.abs(X).max()) * np.float32(scale)  # the largest value is `scale`
  assert np.all(np.isfinite(x)) and np.all(x != 0)
  got = np.asarray(ops.l2_normalize(x if backend == "numpy" else jnp.asarray(x)))
  np.testing.assert_allclose(got, UNIT, atol=2e-7)


def test_scaling_keeps_the_bits_of_ordinary_vectors():
  """The scale is a power of two: a vector whose squares neither overflow nor underflow gets the bits it got
  before scaling existed (data builders stay bit-exact in float64)."""
  for x in (X, X.astype(np.float64) * 3.7):
    np.testing.assert_array_equal(ops.l2_normalize(x), x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True)))
  jx = jnp.asarray(X)
  np.testing.assert_array_equal(ops.l2_normalize(jx), jx * jax.lax.rsqrt(jnp.sum(jx * jx, axis=-1, keepdims=True)))


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_only_the_zero_vector_maps_to_zero_and_non_finite_stays_non_finite(backend):
  x = np.stack([np.zeros(8, np.float32), np.full(8, 1e-20, np.float32), np.r_[np.nan, np.ones(7)].astype(np.float32),
                np.r_[np.inf, np.ones(7)].astype(np.float32)])
  got = np.asarray(ops.l2_normalize(x if backend == "numpy" else jnp.asarray(x)))
  assert np.all(got[0] == 0)
  np.testing.assert_allclose(got[1], np.full(8, 8 ** -0.5), rtol=1e-6)  # 1e-20 is a direction, not padding
  assert np.isnan(got[2]).all() and np.isnan(got[3]).any()  # never silently 0: finite checks downstream refuse it


def test_bfloat16_in_bfloat16_out_and_gradients_finite_at_zero_and_at_extremes():
  x = jnp.asarray(X * np.float32(1e30), jnp.bfloat16)
  out = ops.l2_normalize(x)
  assert out.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(out, np.float32), UNIT, atol=1e-2)
  w = jnp.arange(8.0)
  f = lambda v: jnp.sum(ops.l2_normalize(v) * w)  # noqa: E731
  assert np.all(np.asarray(jax.grad(f)(jnp.zeros(8))) == 0)
  for scale in (1.0, 1e-30):  # the gradient of x / ||x||, finite where it is
    v = jnp.asarray(X[0] * np.float32(scale))
    g = np.asarray(jax.grad(f)(v), np.float64)
    u = UNIT[0].astype(np.float64)
    expected = (np.arange(8.0) - u * (u @ np.arange(8.0))) / np.linalg.norm(X[0].astype(np.float64) * scale)
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, expected, rtol=1e-4, atol=1e-6 * np.abs(expected).max())


@pytest.mark.parametrize("scale", [1e30, 1e-30])
def test_cosine_scoring_and_retrieval_rank_scaled_vectors_as_unit_ones(scale):
  """Queries and gallery of one scale: before, every vector became 0, every score tied and R@1 read 0 or 100."""
  gallery = RNG.normal(size=(12, 8)).astype(np.float32)
  queries = gallery[:5] + 0.05 * RNG.normal(size=(5, 8)).astype(np.float32)
  expected = evaluate.evaluate_gallery(evaluate.CosineScorer(), {"text": queries}, {"candidates": gallery}, np.arange(5))
  s = np.float32(scale)
  got = evaluate.evaluate_gallery(evaluate.CosineScorer(), {"text": queries * s}, {"candidates": gallery * s},
                                  np.arange(5))
  assert got == expected and expected["t2v_r1"] == 100.0
  np.testing.assert_allclose(ops.cosine(queries * s, gallery * s), ops.cosine(queries, gallery), atol=1e-6)
  index = DenseIndex([f"v{i:02d}" for i in range(12)], gallery * s)
  ids, scores = index.search(queries * s, 3)
  assert list(ids[:, 0]) == [f"v{i:02d}" for i in range(5)] and np.all(scores[:, 0] > 0.9)


def test_losses_of_scaled_vectors_equal_those_of_unit_ones():
  v, t = RNG.normal(size=(4, 8)).astype(np.float32), RNG.normal(size=(4, 8)).astype(np.float32)
  for scale in (1e30, 1e-30):
    s = np.float32(scale)
    np.testing.assert_allclose(losses.vtc_loss(v * s, t * s, 0.07), losses.vtc_loss(v, t, 0.07), rtol=1e-5)


def test_cosine_of_widths_that_do_not_fit_is_one_error():
  with pytest.raises(ValueError, match=r"cosine: queries \(2, 2\) and candidates \(3, 3\) do not fit"):
    ops.cosine(np.ones((2, 2)), np.ones((3, 3)))
