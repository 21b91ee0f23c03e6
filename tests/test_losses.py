"""Tests for vidjax/losses.py: CAST type-aware contrastive loss vs. explicit NumPy loops."""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidjax import losses

# Every loss is compared with explicit NumPy loops: they hold at full float32 only, which a GPU (TF32 by default) or
# a TPU (one bf16 pass) computes when asked (tests/conftest.py).
pytestmark = pytest.mark.highest_precision

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


# ------------------------------------------------------------------------------------------------
# VEDJE losses against straightforward NumPy.


def _np_log_softmax(x):
  x = x - x.max()
  return x - math.log(np.exp(x).sum())


@pytest.mark.parametrize("seed", [0, 1])
def test_vtm_loss_matches_numpy_with_padding(seed):
  rng = np.random.default_rng(seed)
  scores = rng.normal(size=(4, 6)) * 3
  positive = rng.integers(0, 3, size=4)
  mask = np.ones((4, 6)); mask[:, 4:] = 0; mask[1, 3] = 0
  expected = np.mean([-_np_log_softmax(scores[b][mask[b] > 0] / 0.5)[list(np.flatnonzero(mask[b])).index(positive[b])]
                      for b in range(4)])
  got = losses.vtm_loss(jnp.asarray(scores), jnp.asarray(positive), jnp.asarray(mask), tau=0.5)
  assert float(got) == pytest.approx(expected, rel=1e-5)
  full = np.mean([-_np_log_softmax(scores[b])[positive[b]] for b in range(4)])
  assert float(losses.vtm_loss(jnp.asarray(scores), jnp.asarray(positive))) == pytest.approx(full, rel=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_multi_positive_softmax_matches_numpy(seed):
  rng = np.random.default_rng(seed)
  scores = rng.normal(size=(5, 6)) * 3
  positive = rng.random((5, 6)) < 0.4
  positive[0] = False  # a row without a positive contributes 0
  positive[1, 0] = True
  mask = np.ones((5, 6)); mask[:, 5:] = 0; mask[1, 3] = 0
  expected = 0.0
  for b in range(5):
    real = mask[b] > 0
    pos = positive[b] & real
    if pos.any():
      logp = _np_log_softmax(scores[b][real] / 0.5)
      expected -= math.log(np.exp(logp[pos[real]]).sum())
  expected /= 5
  got = losses.multi_positive_softmax(jnp.asarray(scores), jnp.asarray(positive), jnp.asarray(mask), tau=0.5)
  assert float(got) == pytest.approx(expected, rel=1e-5)
  # One positive a row is vtm_loss; gradients stay finite with a positive-free row.
  one = np.zeros((5, 6)); one[np.arange(5), [2, 0, 1, 4, 3]] = 1
  assert float(losses.multi_positive_softmax(jnp.asarray(scores), jnp.asarray(one))) == pytest.approx(
      float(losses.vtm_loss(jnp.asarray(scores), jnp.asarray([2, 0, 1, 4, 3]))), rel=1e-6)
  grad = jax.grad(lambda s: losses.multi_positive_softmax(s, jnp.asarray(positive), jnp.asarray(mask)))(
      jnp.asarray(scores))
  assert np.isfinite(np.asarray(grad)).all() and not np.asarray(grad)[0].any()


def test_grouped_infonce_matches_numpy():
  """Both directions, every row with the same group a positive, cosine / tau."""
  rng = np.random.default_rng(3)
  video, text = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
  groups = np.array([0, 1, 0, 2, 1, 3])
  v = video / np.linalg.norm(video, axis=1, keepdims=True)
  t = text / np.linalg.norm(text, axis=1, keepdims=True)
  logits = t @ v.T / 0.1
  same = groups[:, None] == groups[None, :]
  expected = 0.0
  for m in (logits, logits.T):
    for b in range(6):
      logp = _np_log_softmax(m[b])
      expected -= math.log(np.exp(logp[same[b]]).sum()) / 12
  got = losses.grouped_infonce(jnp.asarray(video), jnp.asarray(text), jnp.asarray(groups), jnp.asarray(0.1))
  assert float(got) == pytest.approx(expected, rel=1e-5)
  # Distinct groups: the plain symmetric InfoNCE (eq. 1 of VideoComp without negatives).
  distinct = jnp.arange(6)
  assert float(losses.grouped_infonce(jnp.asarray(video), jnp.asarray(text), distinct, jnp.asarray(0.1))) == \
      pytest.approx(float(losses.clip_contrastive_loss(jnp.asarray(video), jnp.asarray(text), jnp.asarray(0.1))),
                    rel=1e-5)


def np_frame_text_infonce(frames, text, groups, valid, tau):
  """`losses.frame_text_infonce` with loops: each valid text over the valid rows' frames, each valid frame over the
  valid texts, -log of the positives' share of the softmax, each direction averaged over its valid queries."""
  f = frames / np.linalg.norm(frames, axis=-1, keepdims=True)
  t = text / np.linalg.norm(text, axis=1, keepdims=True)
  rows = [b for b in range(len(groups)) if valid[b]]
  cells = [(b, s) for b in rows for s in range(frames.shape[1])]
  t2f = [math.log(sum(math.exp(t[c] @ f[b, s] / tau) for b, s in cells))
         - math.log(sum(math.exp(t[c] @ f[b, s] / tau) for b, s in cells if groups[b] == groups[c])) for c in rows]
  f2t = [math.log(sum(math.exp(t[c] @ f[b, s] / tau) for c in rows))
         - math.log(sum(math.exp(t[c] @ f[b, s] / tau) for c in rows if groups[b] == groups[c])) for b, s in cells]
  return 0.5 * (np.mean(t2f) + np.mean(f2t))


def test_frame_text_infonce_matches_numpy():
  """Every frame of a valid row a positive of every valid text of its group; rows with valid 0 are in no query and no
  denominator (their frames and texts may be anything); the gradient stays finite; no valid row gives 0."""
  rng = np.random.default_rng(5)
  frames, text = rng.normal(size=(6, 3, 4)), rng.normal(size=(6, 4))
  groups = np.array([0, 1, 0, 2, 1, 3])
  valid = np.array([1, 1, 1, 0, 1, 0])
  got = losses.frame_text_infonce(jnp.asarray(frames), jnp.asarray(text), jnp.asarray(groups), jnp.asarray(valid),
                                  jnp.asarray(0.1))
  assert float(got) == pytest.approx(np_frame_text_infonce(frames, text, groups, valid, 0.1), rel=1e-5)
  changed = frames.copy(), text.copy()
  changed[0][3], changed[1][5] = 100.0, -7.0
  assert float(losses.frame_text_infonce(*map(jnp.asarray, changed), jnp.asarray(groups), jnp.asarray(valid),
                                         jnp.asarray(0.1))) == pytest.approx(float(got), rel=1e-6)
  grad = jax.grad(lambda f: losses.frame_text_infonce(f, jnp.asarray(text), jnp.asarray(groups), jnp.asarray(valid),
                                                      jnp.asarray(0.1)))(jnp.asarray(frames))
  assert np.isfinite(np.asarray(grad)).all() and not np.asarray(grad)[[3, 5]].any()
  none = losses.frame_text_infonce(jnp.asarray(frames), jnp.asarray(text), jnp.asarray(groups), jnp.zeros(6),
                                   jnp.asarray(0.1))
  assert float(none) == 0.0
  # Every row valid: `grouped_infonce` with the frames as B*T rows, each beside its row's text (a text repeated T
  # times adds log T to both sums of a frame's softmax).
  every = losses.frame_text_infonce(jnp.asarray(frames), jnp.asarray(text), jnp.asarray(groups), jnp.ones(6),
                                    jnp.asarray(0.1))
  flat = losses.grouped_infonce(jnp.asarray(frames.reshape(18, 4)), jnp.asarray(np.repeat(text, 3, axis=0)),
                                jnp.asarray(np.repeat(groups, 3)), jnp.asarray(0.1))
  assert float(every) == pytest.approx(float(flat), rel=1e-5)


def test_instance_infonce_matches_numpy():
  """The other rows of a row's group are its positives, every other row its candidates, itself neither; a row
  alone in its group adds 0 to the mean."""
  rng = np.random.default_rng(4)
  video = rng.normal(size=(7, 5))
  groups = np.array([0, 1, 0, 2, 1, 0, 3])
  v = video / np.linalg.norm(video, axis=1, keepdims=True)
  logits = v @ v.T / 0.2
  expected = 0.0
  for b in range(7):
    cand = [c for c in range(7) if c != b]
    pos = [c for c in cand if groups[c] == groups[b]]
    if pos:
      expected += (math.log(np.exp(logits[b, cand]).sum()) - math.log(np.exp(logits[b, pos]).sum())) / 7
  got = losses.instance_infonce(jnp.asarray(video), jnp.asarray(groups), jnp.asarray(0.2))
  assert float(got) == pytest.approx(expected, rel=1e-5)
  assert float(losses.instance_infonce(jnp.asarray(video), jnp.arange(7), jnp.asarray(0.2))) == 0.0


@pytest.mark.parametrize("seed", [0, 1])
def test_vtc_loss_matches_numpy(seed):
  rng = np.random.default_rng(seed)
  t, v = rng.normal(size=(5, 7)), rng.normal(size=(5, 7))
  tn, vn = t / np.linalg.norm(t, axis=1, keepdims=True), v / np.linalg.norm(v, axis=1, keepdims=True)
  logits = 20.0 * tn @ vn.T
  t2v = np.mean([-_np_log_softmax(logits[i])[i] for i in range(5)])
  v2t = np.mean([-_np_log_softmax(logits[:, j])[j] for j in range(5)])
  assert float(losses.vtc_loss(jnp.asarray(t), jnp.asarray(v))) == pytest.approx((t2v + v2t) / 2, rel=1e-5)


def test_mlm_loss_matches_numpy_and_ignores_unmasked_positions():
  rng = np.random.default_rng(2)
  logits, labels = rng.normal(size=(2, 5, 11)), rng.integers(0, 11, size=(2, 5))
  mask = np.zeros((2, 5)); mask[0, 1] = mask[1, 3] = mask[1, 4] = 1
  expected = np.mean([-_np_log_softmax(logits[b, s])[labels[b, s]] for b, s in zip(*np.nonzero(mask))])
  got = losses.mlm_loss(jnp.asarray(logits), jnp.asarray(labels), jnp.asarray(mask))
  assert float(got) == pytest.approx(expected, rel=1e-5)
  assert float(losses.mlm_loss(jnp.asarray(logits), jnp.asarray(labels), jnp.zeros((2, 5)))) == 0.0


@pytest.mark.parametrize("absolute", [False, True])
def test_future_delta_loss_matches_eq4_loops(absolute):
  rng = np.random.default_rng(3)
  b, t_len, p, d, horizons = 2, 6, 3, 4, (2, 3)
  x = rng.normal(size=(b, t_len, p, d))
  pred = rng.normal(size=(b, t_len, len(horizons), p, d))
  targets, valid = losses.future_delta_targets(jnp.asarray(x), horizons, absolute=absolute)
  got = losses.future_delta_loss(jnp.asarray(pred), targets, valid)
  per_example = []
  for i in range(b):
    terms = []
    for t in range(t_len):
      for k, h in enumerate(horizons):
        if t + h < t_len:  # Omega: 1 <= t, t + h <= T in the paper's 1-based indices
          target = (x[i, t + h] / np.linalg.norm(x[i, t + h], axis=-1, keepdims=True) if absolute
                    else x[i, t + h] - x[i, t])
          terms.append(np.mean((pred[i, t, k] - target) ** 2))
    per_example.append(np.mean(terms))
  assert float(got) == pytest.approx(np.mean(per_example), rel=1e-5)
  assert np.asarray(valid).sum() == (t_len - 2) + (t_len - 3)


# ---------------------------------------------------------------------------------------------- VideoComp


def _np_unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _np_clip(video, text, tau, negatives=None, mask=None):
  v, t = _np_unit(video.astype(np.float64)), _np_unit(text.astype(np.float64))
  b = len(v)
  t2v = v2t = 0.0
  for i in range(b):
    t2v -= np.log(np.exp(t[i] @ v[i] / tau) / sum(np.exp(t[i] @ v[j] / tau) for j in range(b)))
    texts = [t[j] for j in range(b)]
    if negatives is not None:
      texts += [_np_unit(negatives[j, k].astype(np.float64)) for j in range(b) for k in range(negatives.shape[1])
                if mask is None or mask[j, k]]
    v2t -= np.log(np.exp(v[i] @ t[i] / tau) / sum(np.exp(v[i] @ x / tau) for x in texts))
  return (t2v / b + v2t / b) / 2


@pytest.mark.parametrize("seed", [0, 1])
def test_clip_contrastive_and_negclip_match_numpy(seed):
  rng = np.random.default_rng(seed)
  b, n, d = 5, 3, 8
  video, text = rng.normal(size=(b, d)).astype(np.float32), rng.normal(size=(b, d)).astype(np.float32)
  negs = rng.normal(size=(b, n, d)).astype(np.float32)
  mask = (rng.random((b, n)) > 0.3).astype(np.float32)
  got = losses.clip_contrastive_loss(video, text, 0.1)
  np.testing.assert_allclose(got, _np_clip(video, text, 0.1), rtol=1e-5)
  got = losses.clip_contrastive_loss(video, text, 0.1, negs, mask)
  np.testing.assert_allclose(got, _np_clip(video, text, 0.1, negs, mask), rtol=1e-5)
  assert float(losses.clip_contrastive_loss(video, text, 0.1, negs)) > float(losses.clip_contrastive_loss(video, text, 0.1))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_comp_preference_loss_matches_numpy(seed):
  rng = np.random.default_rng(seed)
  b, n = 6, 3
  pos, neg = rng.normal(size=b).astype(np.float32), rng.normal(size=(b, n)).astype(np.float32)
  mask = (rng.random((b, n)) > 0.3).astype(np.float32)
  expected = 0.0
  for r in range(b):
    for i in range(n):
      if mask[r, i]:
        expected += max(neg[r, i] - pos[r], 0.0)
        expected += sum(max(neg[r, j] - neg[r, i], 0.0) for j in range(i + 1, n) if mask[r, j])
  np.testing.assert_allclose(losses.comp_preference_loss(pos, neg, mask), expected / b, rtol=1e-5)
  # A perfect hierarchy costs nothing; reversing it does.
  ordered = np.array([[0.9, 0.5, 0.3, 0.1]], np.float32)
  assert float(losses.comp_preference_loss(ordered[:, 0], ordered[:, 1:])) == 0.0
  assert float(losses.comp_preference_loss(ordered[:, 0], ordered[:, :0:-1])) > 0.0


def test_comp_total_loss_modes_match_numpy():
  rng = np.random.default_rng(3)
  b, n, d = 4, 3, 6
  video, text = rng.normal(size=(b, d)).astype(np.float32), rng.normal(size=(b, d)).astype(np.float32)
  negs = rng.normal(size=(b, n, d)).astype(np.float32)
  mask = (rng.random((b, n)) > 0.3).astype(np.float32)
  v, t, ng = _np_unit(video.astype(np.float64)), _np_unit(text.astype(np.float64)), _np_unit(negs.astype(np.float64))
  pref = 0.0
  for r in range(b):
    s_pos, s_neg = v[r] @ t[r], ng[r] @ v[r]
    for i in range(n):
      if mask[r, i]:
        pref += max(s_neg[i] - s_pos, 0.0) + sum(max(s_neg[j] - s_neg[i], 0.0) for j in range(i + 1, n) if mask[r, j])
  pref /= b
  con = _np_clip(video, text, 0.2)
  loss, aux = losses.comp_total_loss(video, text, negs, mask, 0.2, mode="comploss", lam=100.0)
  np.testing.assert_allclose(loss, con + 100.0 * pref, rtol=1e-5)
  np.testing.assert_allclose(aux["pref"], pref, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(losses.comp_total_loss(video, text, negs, mask, 0.2, mode="contrastive")[0], con, rtol=1e-5)
  np.testing.assert_allclose(losses.comp_total_loss(video, text, negs, mask, 0.2, mode="negclip")[0],
                             _np_clip(video, text, 0.2, negs, mask), rtol=1e-5)
  with pytest.raises(ValueError, match="mode='hinge'"):
    losses.comp_total_loss(video, text, negs, mask, 0.2, mode="hinge")
  # The mode as traced weights (one compiled train step for every mode) gives each mode's loss.
  traced = jax.jit(lambda w: losses.comp_total_loss(video, text, negs, mask, 0.2, weights=w)[0])
  for mode in losses.COMP_MODES:
    np.testing.assert_allclose(traced(losses.comp_mode_weights(mode, 100.0)),
                               losses.comp_total_loss(video, text, negs, mask, 0.2, mode=mode, lam=100.0)[0], rtol=1e-6)


def _np_pref(s_pos, s_neg, mask, levels):
  """Eq. 2 with levels, with loops: per row Σ_i [s_i - s_pos]_+ + Σ_{i, j: level_i < level_j} [s_j - s_i]_+."""
  total = 0.0
  for r in range(len(s_pos)):
    for i in range(len(levels)):
      if not mask[r, i]:
        continue
      total += max(s_neg[r, i] - s_pos[r], 0.0)
      for j in range(len(levels)):
        if mask[r, j] and levels[i] < levels[j]:
          total += max(s_neg[r, j] - s_neg[r, i], 0.0)
  return total / len(s_pos)


@pytest.mark.parametrize("seed,levels", [(0, (1, 1, 1, 2)), (1, (1, 2, 2, 3)), (2, (0, 0, 1, 1)), (3, (1, 1, 1, 1)),
                                         (4, None)])
def test_comp_preference_loss_with_levels_matches_numpy(seed, levels):
  """The hierarchical path of eq. 2: hinges between negatives only across levels (None = 0..N-1, strict order)."""
  rng = np.random.default_rng(seed)
  b, n = 7, 4
  pos, neg = rng.normal(size=b).astype(np.float32), rng.normal(size=(b, n)).astype(np.float32)
  mask = (rng.random((b, n)) > 0.25).astype(np.float32)
  lv = tuple(range(n)) if levels is None else levels
  expected = _np_pref(pos.astype(np.float64), neg.astype(np.float64), mask, lv)
  np.testing.assert_allclose(losses.comp_preference_loss(pos, neg, mask, levels), expected, rtol=1e-5)
  # The levels matter: (1, 1, 1, 2) drops the hinges among the three single disruptions that the strict order has.
  if levels == (1, 1, 1, 2):
    strict = _np_pref(pos.astype(np.float64), neg.astype(np.float64), mask, range(n))
    assert abs(strict - expected) > 1e-3
    np.testing.assert_allclose(losses.comp_preference_loss(pos, neg, mask), strict, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_comp_total_loss_with_levels_and_negclip_pref_match_numpy(seed):
  """comploss = L_con (eq. 1) + λ eq. 2 and negclip_pref = NegCLIP's L_con + λ eq. 2, both with levels."""
  rng = np.random.default_rng(10 + seed)
  b, n, d, tau, lam, levels = 5, 4, 6, 0.15, 7.0, (1, 1, 1, 2)
  video, text = rng.normal(size=(b, d)).astype(np.float32), rng.normal(size=(b, d)).astype(np.float32)
  negs = rng.normal(size=(b, n, d)).astype(np.float32)
  mask = (rng.random((b, n)) > 0.3).astype(np.float32)
  v, t, ng = _np_unit(video.astype(np.float64)), _np_unit(text.astype(np.float64)), _np_unit(negs.astype(np.float64))
  pref = _np_pref(np.sum(v * t, -1), np.einsum("bd,bnd->bn", v, ng), mask, levels)
  negclip = _np_clip(video, text, tau, negs, mask)
  loss, aux = losses.comp_total_loss(video, text, negs, mask, tau, mode="negclip_pref", lam=lam, levels=levels)
  np.testing.assert_allclose(loss, negclip + lam * pref, rtol=1e-5)
  np.testing.assert_allclose(aux["con"], negclip, rtol=1e-5)
  np.testing.assert_allclose(aux["pref"], pref, rtol=1e-5, atol=1e-7)
  loss, _ = losses.comp_total_loss(video, text, negs, mask, tau, mode="comploss", lam=lam, levels=levels)
  np.testing.assert_allclose(loss, _np_clip(video, text, tau) + lam * pref, rtol=1e-5)
  # The two readings differ by exactly NegCLIP's extra negatives in L_con.
  assert abs(negclip - _np_clip(video, text, tau)) > 1e-3
