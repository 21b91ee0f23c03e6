"""Tests for vidjax/losses.py: CAST type-aware contrastive loss vs. explicit NumPy loops."""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidjax import losses

B, KS, KI, D = 5, 3, 4, 8


def _np_local(pos, negs, mask, tau):
  """-1/B Σ_t log(e^{pos/τ} / (e^{pos/τ} + Σ_{masked k} e^{neg/τ})), with loops."""
  total = 0.0
  for t in range(len(pos)):
    denom = math.exp(pos[t] / tau)
    for k in range(negs.shape[1]):
      if mask[t, k]:
        denom += math.exp(negs[t, k] / tau)
    total += -(pos[t] / tau - math.log(denom))
  return total / len(pos)


def _np_batch(sim_batch, tau):
  total = 0.0
  for t in range(sim_batch.shape[0]):
    denom = sum(math.exp(sim_batch[t, j] / tau) for j in range(sim_batch.shape[1]))
    total += -(sim_batch[t, t] / tau - math.log(denom))
  return total / sim_batch.shape[0]


def _cos(a, b):
  na, nb = np.linalg.norm(a), np.linalg.norm(b)
  return 0.0 if na < 1e-6 or nb < 1e-6 else float(a @ b / (na * nb))


@functools.cache
def _jitted():
  return jax.jit(losses.type_aware_contrastive), jax.jit(losses.cast_loss)


def _masks(rng):
  sm = (rng.random((B, KS)) < 0.6).astype(np.float32)
  im = (rng.random((B, KI)) < 0.6).astype(np.float32)
  sm[0] = 0  # a row with no state negatives at all
  im[1] = 0
  return sm, im


@pytest.mark.parametrize("seed", [0, 1])
def test_type_aware_contrastive_matches_numpy(seed):
  rng = np.random.default_rng(seed)
  sim_batch = rng.uniform(-1, 1, (B, B)).astype(np.float32)
  sim_pos = np.diagonal(sim_batch).copy()
  sim_state = rng.uniform(-1, 1, (B, KS)).astype(np.float32)
  sim_ident = rng.uniform(-1, 1, (B, KI)).astype(np.float32)
  sm, im = _masks(rng)
  tau, ls, li = 0.1, 5.0, 1.0
  fn, _ = _jitted()
  loss, parts = fn(sim_pos, sim_batch, sim_state, sm, sim_ident, im, tau, ls, li)
  want_b = _np_batch(sim_batch.astype(np.float64), tau)
  want_s = _np_local(sim_pos.astype(np.float64), sim_state, sm, tau)
  want_i = _np_local(sim_pos.astype(np.float64), sim_ident, im, tau)
  np.testing.assert_allclose(float(parts["batch"]), want_b, rtol=1e-4)
  np.testing.assert_allclose(float(parts["state"]), want_s, rtol=1e-4)
  np.testing.assert_allclose(float(parts["ident"]), want_i, rtol=1e-4)
  np.testing.assert_allclose(float(loss), want_b + ls * want_s + li * want_i, rtol=1e-4)


def test_cast_loss_matches_numpy_with_zero_vector_padding():
  rng = np.random.default_rng(3)
  v_hat = rng.normal(size=(B, D)).astype(np.float32)
  pos = rng.normal(size=(B, D)).astype(np.float32)
  state = rng.normal(size=(B, KS, D)).astype(np.float32)
  ident = rng.normal(size=(B, KI, D)).astype(np.float32)
  state[2, 1] = 0  # the paper's zero-vector padding (cosine 0)
  ident[3, :] = 0
  sm, im = _masks(rng)
  tau = 0.07
  sim_batch = np.array([[_cos(v_hat[i], pos[j]) for j in range(B)] for i in range(B)])
  sim_pos = np.array([_cos(v_hat[i], pos[i]) for i in range(B)])
  sim_s = np.array([[_cos(v_hat[i], state[i, k]) for k in range(KS)] for i in range(B)])
  sim_i = np.array([[_cos(v_hat[i], ident[i, k]) for k in range(KI)] for i in range(B)])
  want = (_np_batch(sim_batch, tau) + 5.0 * _np_local(sim_pos, sim_s, sm, tau)
          + 1.0 * _np_local(sim_pos, sim_i, im, tau))
  _, fn = _jitted()
  loss, _ = fn(v_hat, pos, state, sm, ident, im)
  np.testing.assert_allclose(float(loss), want, rtol=1e-4)
  # mask=None keeps every slot, zero vectors included (each adds e^0 = 1 to its denominator).
  ones_s, ones_i = np.ones((B, KS), np.float32), np.ones((B, KI), np.float32)
  loss_none, parts_none = losses.cast_loss(v_hat, pos, state, None, ident, None)
  loss_ones, _ = fn(v_hat, pos, state, ones_s, ident, ones_i)
  np.testing.assert_allclose(float(loss_none), float(loss_ones), rtol=1e-5)
  np.testing.assert_allclose(float(parts_none["ident"]),
                             _np_local(sim_pos, sim_i, ones_i, tau), rtol=1e-4)


def test_gradients_finite_with_zero_vectors_and_empty_masks():
  rng = np.random.default_rng(4)
  v_hat = rng.normal(size=(B, D)).astype(np.float32)
  pos = rng.normal(size=(B, D)).astype(np.float32)
  state = np.zeros((B, KS, D), np.float32)
  ident = rng.normal(size=(B, KI, D)).astype(np.float32)
  sm = np.zeros((B, KS), np.float32)
  im = np.ones((B, KI), np.float32)
  g = jax.grad(lambda v: losses.cast_loss(v, pos, state, sm, ident, im)[0])(jnp.asarray(v_hat))
  assert np.all(np.isfinite(np.asarray(g)))
  loss, parts = losses.cast_loss(v_hat, pos, state, sm, ident, im)
  assert float(parts["state"]) == 0.0  # all state negatives masked: log(1) per row
  assert np.isfinite(float(loss))


def test_shape_errors_are_clear():
  with pytest.raises(ValueError, match="sim_batch"):
    losses.type_aware_contrastive(np.zeros(3), np.zeros((3, 2)), np.zeros((3, 1)),
                                  np.ones((3, 1)), np.zeros((3, 1)), np.ones((3, 1)))
