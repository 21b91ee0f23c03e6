"""Tests for vidjax/models/cast.py: shapes, masking, a NumPy forward pass, and learning.

The behavioural test trains CAST with a minimal local loop (not vidjax/train.py) on a synthetic
world where the target is a fixed function of (text, last context clip).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from vidjax import evaluate
from vidjax import losses
from vidjax import metrics
from vidjax.models import cast
from vidjax.scorers import cast as cast_scorers

# CAST and the baselines are compared with NumPy forward passes and with each other at 1e-5: they hold at full
# float32 only, which a GPU (TF32 by default) or a TPU (one bf16 pass) computes when asked (tests/conftest.py).
pytestmark = pytest.mark.highest_precision

D, B, HEADS = 16, 4, 8


def _inputs(l, seed=0, b=B):
  rng = np.random.default_rng(seed)
  text = rng.normal(size=(b, D)).astype(np.float32)
  hist = rng.normal(size=(b, l, D)).astype(np.float32)
  mask = np.zeros((b, l), np.float32)
  for i in range(b):
    n = min(i, l)  # row 0 is fully masked; rows left-padded
    mask[i, l - n:] = 1
    hist[i, :l - n] = 0
  return text, hist, mask


MODELS = {
    "cast": cast.CAST(D),
    "early_direct": cast.EarlyFusion(D, residual=False),
    "early_residual": cast.EarlyFusion(D, residual=True),
    "late_learned": cast.LateFusionLearned(D),
}
NC = 5  # candidates for LateFusionLearned.score


def random_params(module, *inputs, seed=0, noise=0.2, method=None):
  """Params with the module's tree structure, drawn in NumPy (no init compile).

  Kernels ~ N(0, 1/fan_in); biases, LayerNorm scales (around 1) and shifts get `noise`-sized
  random values so that reference tests exercise every parameter.
  """
  shapes = jax.eval_shape(functools.partial(module.init, method=method), jax.random.key(0),
                          *inputs)
  rng = np.random.default_rng(seed)

  def draw(path, leaf):
    names = [getattr(k, "key", "") for k in path]
    shape = leaf.shape
    if names[-1] == "kernel":
      fan_in = shape[0] if names[-2] in ("query", "key", "value") else int(np.prod(shape[:-1]))
      x = rng.normal(size=shape) / np.sqrt(fan_in)
    elif names[-1] == "scale":
      x = 1.0 + noise * rng.normal(size=shape)
    else:
      x = noise * rng.normal(size=shape)
    return jnp.asarray(x, jnp.float32)

  return jax.tree_util.tree_map_with_path(draw, shapes)


@functools.cache
def _params(name):
  return random_params(MODELS[name], *_inputs(3), seed=len(name))


def _cands(seed, b=B):
  return np.random.default_rng(seed + 100).normal(size=(b, NC, D)).astype(np.float32)


@jax.jit
def _forward_all(params, text, hist, mask, cands):
  """Every model on one input (one compile per history length L)."""
  out = {n: MODELS[n].apply(params[n], text, hist, mask) for n in MODELS}
  out["late_score"] = MODELS["late_learned"].apply(params["late_learned"], text, hist, mask,
                                                   cands, method="score")
  return out


def _run(l=None, seed=0, inputs=None):
  inputs = _inputs(l, seed) if inputs is None else inputs
  params = {n: _params(n) for n in MODELS}
  return jax.tree_util.tree_map(np.asarray, _forward_all(params, *inputs, _cands(seed)))


@pytest.mark.parametrize("l", [0, 3, 5])
def test_shapes_and_finiteness(l):
  out = _run(l)
  for name in MODELS:
    want = (B, 2) if name == "late_learned" else (B, D)
    assert out[name].shape == want and out[name].dtype == np.float32, name
    assert np.all(np.isfinite(out[name])), name
    if name != "late_learned":
      np.testing.assert_allclose(np.linalg.norm(out[name], axis=-1), 1.0, rtol=1e-5)
  assert np.all(out["late_learned"] > 0)  # softplus weights
  assert out["late_score"].shape == (B, NC) and np.all(np.isfinite(out["late_score"]))


def test_fully_masked_row_equals_empty_history():
  full, empty = _run(3), _run(0)
  for name in list(MODELS) + ["late_score"]:
    np.testing.assert_allclose(full[name][0], empty[name][0], atol=1e-6, err_msg=name)
    assert not np.allclose(full[name][1], empty[name][1]), name  # context matters elsewhere


def test_left_padding_invariance():
  text, hist, mask = _inputs(3)
  # Two extra masked slots holding garbage: masking alone must hide them.
  pad = np.random.default_rng(9).normal(size=(B, 2, D)).astype(np.float32)
  hist5 = np.concatenate([pad, hist], axis=1)
  mask5 = np.concatenate([np.zeros((B, 2), np.float32), mask], axis=1)
  a, b = _run(inputs=(text, hist, mask)), _run(inputs=(text, hist5, mask5))
  for name in list(MODELS) + ["late_score"]:
    np.testing.assert_allclose(a[name], b[name], atol=1e-5, err_msg=name)


@jax.jit
def _cast_variants(params, text, hist, mask, rng):
  bf16 = MODELS["cast"].clone(dtype=jnp.bfloat16).apply(params, text, hist, mask)
  dropped = MODELS["cast"].apply(params, text, hist, mask, deterministic=False,
                                 rngs={"dropout": rng})
  return bf16, dropped


def test_bfloat16_compute_float32_params_and_dropout():
  shapes = jax.eval_shape(MODELS["cast"].clone(dtype=jnp.bfloat16).init, jax.random.key(0),
                          *_inputs(3))
  assert all(x.dtype == jnp.float32 for x in jax.tree_util.tree_leaves(shapes))
  bf16, dropped = _cast_variants(_params("cast"), *_inputs(3), jax.random.key(2))
  ref = _run(3)["cast"]
  assert bf16.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(bf16)))
  np.testing.assert_allclose(np.asarray(bf16), ref, atol=0.1)
  assert not np.allclose(np.asarray(bf16), ref, atol=1e-6)  # really computed in bf16
  # Dropout acts only when deterministic=False.
  assert np.all(np.isfinite(np.asarray(dropped))) and not np.allclose(np.asarray(dropped), ref)


# ----------------------------------------------------------------------------- NumPy references


def _np_unit(x):
  n = np.linalg.norm(x)
  return x / n if n > 1e-6 else np.zeros_like(x)


def _np_ln(x, p):
  mu, var = x.mean(), x.var()
  return (x - mu) / np.sqrt(var + 1e-6) * p["scale"] + p["bias"]


def _np_dense(x, p):
  return x @ p["kernel"] + p["bias"]


def _np_cast(params, text, hist, mask):
  p = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), params)["params"]
  dh = D // HEADS
  out = []
  for b in range(text.shape[0]):
    q = _np_unit(text[b])
    real = [i for i in range(hist.shape[1]) if mask[b, i] > 0]
    h = [_np_unit(hist[b, i]) for i in real]
    v_prev = h[-1] if h else np.zeros(D)
    x = _np_dense(np.concatenate([q, v_prev]), p["cond_fc1"])
    x = np.maximum(_np_ln(x, p["cond_ln"]), 0)
    d_cond = _np_dense(x, p["cond_fc2"])
    attn = np.zeros(D)
    if h:
      a = p["ctx_attention"]
      qp = _np_dense(q, p["ctx_query_proj"])
      hp = [_np_dense(v, p["ctx_history_proj"]) for v in h]
      heads = []
      for k in range(HEADS):
        qh = qp @ a["query"]["kernel"][:, k] + a["query"]["bias"][k]
        keys = [v @ a["key"]["kernel"][:, k] + a["key"]["bias"][k] for v in hp]
        vals = [v @ a["value"]["kernel"][:, k] + a["value"]["bias"][k] for v in hp]
        logits = np.array([qh @ kk / np.sqrt(dh) for kk in keys])
        w = np.exp(logits - logits.max())
        w /= w.sum()
        heads.append(sum(wi * vi for wi, vi in zip(w, vals)))
      attn = np.concatenate(heads) @ a["out"]["kernel"].reshape(D, D) + a["out"]["bias"]
    y = np.maximum(_np_dense(_np_ln(attn, p["ctx_ln"]), p["ctx_fc1"]), 0)
    d_ctx = attn + _np_dense(y, p["ctx_fc2"])
    out.append(_np_unit(v_prev + d_cond + d_ctx))
  return np.stack(out)


def _np_early(params, text, hist, mask, residual):
  p = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), params)["params"]
  out = []
  for b in range(text.shape[0]):
    h = [_np_unit(hist[b, i]) for i in range(hist.shape[1]) if mask[b, i] > 0]
    v_prev = h[-1] if h else np.zeros(D)
    mean = np.mean(h, axis=0) if h else np.zeros(D)
    x = np.maximum(_np_ln(_np_dense(np.concatenate([_np_unit(text[b]), v_prev, mean]), p["fc1"]),
                          p["ln"]), 0)
    o = _np_dense(x, p["fc2"])
    out.append(_np_unit(v_prev + o if residual else o))
  return np.stack(out)


@pytest.mark.parametrize("l", [0, 3])
def test_cast_matches_numpy_forward(l):
  inputs = _inputs(l, seed=5)
  got = _run(inputs=inputs)["cast"]
  np.testing.assert_allclose(got, _np_cast(_params("cast"), *inputs), atol=1e-4)


@pytest.mark.parametrize("name,residual", [("early_direct", False), ("early_residual", True)])
def test_early_fusion_matches_numpy_forward(name, residual):
  inputs = _inputs(3, seed=6)
  got = _run(inputs=inputs)[name]
  np.testing.assert_allclose(got, _np_early(_params(name), *inputs, residual), atol=1e-4)


def test_late_fusion_learned_score_matches_numpy():
  text, hist, mask = _inputs(3, seed=7)
  cands = _cands(7)
  p = _params("late_learned")
  got = _run(3, seed=7)["late_score"]
  pp = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), p)["params"]
  for b in range(B):
    real = [i for i in range(3) if mask[b, i] > 0]
    v_prev = _np_unit(hist[b, real[-1]]) if real else np.zeros(D)
    hdn = np.maximum(_np_dense(np.concatenate([_np_unit(text[b]), v_prev]), pp["fc1"]), 0)
    w = np.log1p(np.exp(_np_dense(hdn, pp["fc2"])))
    for c in range(NC):
      u = _np_unit(cands[b, c])
      want = w[0] * (_np_unit(text[b]) @ u) + w[1] * (v_prev @ u)
      assert got[b, c] == pytest.approx(want, abs=1e-4)


def test_parameter_free_baselines_match_numpy():
  text, hist, mask = _inputs(3, seed=8)
  cands = np.random.default_rng(8).normal(size=(B, 5, D)).astype(np.float32)
  zs = np.asarray(cast.zero_shot_scores(text, cands))
  lf = np.asarray(cast.late_fusion_heuristic_scores(text, hist, mask, cands, alpha=0.5))
  for b in range(B):
    real = [i for i in range(3) if mask[b, i] > 0]
    v_prev = _np_unit(hist[b, real[-1]]) if real else np.zeros(D)
    for c in range(5):
      a = _np_unit(text[b]) @ _np_unit(cands[b, c])
      assert zs[b, c] == pytest.approx(a, abs=1e-5)
      assert lf[b, c] == pytest.approx(a + 0.5 * (v_prev @ _np_unit(cands[b, c])), abs=1e-5)


def test_bad_shapes_raise():
  with pytest.raises(ValueError, match="history_mask"):
    MODELS["cast"].apply(_params("cast"), np.zeros((2, D)), np.zeros((2, 3, D)), np.zeros((2, 4)))


# ----------------------------------------------------------------------------- behaviour

DB, LMAX, NEG = 32, 3, 3


def _world(n, rng, r_mat):
  """Target = normalize(v_{t-1} + R q); negatives share the context (state) or the text (ident)."""
  unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
  text = unit(rng.normal(size=(n, DB)))
  hist = np.zeros((n, LMAX, DB))
  mask = np.zeros((n, LMAX))
  for i in range(n):
    k = rng.integers(1, LMAX + 1)
    hist[i, LMAX - k:] = unit(rng.normal(size=(k, DB)))
    mask[i, LMAX - k:] = 1
  v_prev = hist[:, -1]
  step = lambda v, q: unit(v + q @ r_mat.T)
  pos = step(v_prev, text)
  other_text = unit(rng.normal(size=(n, NEG, DB)))
  other_ctx = unit(rng.normal(size=(n, NEG, DB)))
  state = step(v_prev[:, None], other_text)  # same video, other step
  ident = step(other_ctx, text[:, None])     # other video, same step text
  f = lambda x: np.asarray(x, np.float32)
  return f(text), f(hist), f(mask), f(pos), f(state), f(ident)


def test_cast_learns_state_transition_and_beats_zero_shot():
  rng = np.random.default_rng(0)
  r_mat = rng.normal(size=(DB, DB)) / np.sqrt(DB)
  model = cast.CAST(DB)
  text, hist, mask, pos, state, ident = _world(4096, rng, r_mat)
  params = random_params(model, text[:2], hist[:2], mask[:2], noise=0.0)
  opt = optax.adamw(3e-3, weight_decay=1e-3)
  opt_state = opt.init(params)

  @jax.jit
  def train_step(params, opt_state, batch, rng):
    def loss_fn(p):
      v_hat = model.apply(p, batch[0], batch[1], batch[2], deterministic=False,
                          rngs={"dropout": rng})
      return losses.cast_loss(v_hat, batch[3], batch[4], None, batch[5], None)[0]
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  bs, first = 128, None
  for step in range(300):
    idx = rng.choice(len(text), bs, replace=False)
    batch = tuple(x[idx] for x in (text, hist, mask, pos, state, ident))
    params, opt_state, loss = train_step(params, opt_state, batch, jax.random.key(step))
    first = float(loss) if first is None else first
  assert float(loss) < 0.5 * first

  # Held-out CVR pools: GT + 3 state + 3 identity + 3 easy, shuffled.
  n = 200
  t, h, m, p, s, i = _world(n, rng, r_mat)
  easy = rng.normal(size=(n, NEG, DB)).astype(np.float32)
  cands = np.concatenate([p[:, None], s, i, easy], axis=1)
  types = np.array([metrics.GT] + [metrics.STATE] * 3 + [metrics.IDENTITY] * 3
                   + [metrics.EASY] * 3)
  perm = np.stack([rng.permutation(10) for _ in range(n)])
  arrays = {"text": t, "history": h, "history_mask": m,
            "candidates": np.take_along_axis(cands, perm[..., None], axis=1),
            "neg_types": types[perm], "target_index": np.argmax(perm == 0, axis=1)}
  cast_m = evaluate.evaluate_cvr(cast_scorers.PredictorScorer(model.apply, params), arrays,
                                 chunk=n)
  zs_m = evaluate.evaluate_cvr(cast_scorers.ZeroShotScorer(), arrays, chunk=n)
  assert cast_m["acc"] > 80.0, cast_m
  assert cast_m["state_acc"] > 85.0 and cast_m["ident_acc"] > 85.0, cast_m
  assert zs_m["acc"] < 40.0, zs_m
  assert cast_m["mnr"] < zs_m["mnr"]


def test_residual_init_starts_near_the_anchor_state():
  rng = np.random.default_rng(3)
  text = rng.normal(size=(4, 16)).astype(np.float32)
  hist = rng.normal(size=(4, 3, 16)).astype(np.float32)
  mask = np.array([[1, 1, 1], [0, 1, 1], [0, 0, 1], [1, 1, 1]], np.float32)
  anchor = hist[:, -1] / np.linalg.norm(hist[:, -1], axis=-1, keepdims=True)
  for model in (cast.CAST(16, num_heads=4), cast.EarlyFusion(16, residual=True)):
    params = model.init(jax.random.PRNGKey(0), text, hist, mask)
    np.testing.assert_allclose(model.apply(params, text, hist, mask), anchor, atol=0.05)
  # With Flax's default init the untrained residual is far from the anchor.
  model = cast.CAST(16, num_heads=4, residual_init_std=None)
  v_hat = model.apply(model.init(jax.random.PRNGKey(0), text, hist, mask), text, hist, mask)
  assert np.max(np.abs(np.asarray(v_hat) - anchor)) > 0.2


def test_single_query_attention_equals_the_library_layer():
  """Same parameters (names, shapes, init values) and outputs as flax's MultiHeadDotProductAttention."""
  import flax.linen as nn
  b, l, d, h = 6, 5, 32, 8
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(b, d)), jnp.float32)
  kv = jnp.asarray(rng.normal(size=(b, l, d)), jnp.float32)
  mask = jnp.asarray(rng.random((b, l)) > 0.3).at[0].set(False)  # row 0: no real slot
  ours = cast.SingleQueryAttention(h, d)
  lib = nn.MultiHeadDotProductAttention(num_heads=h, qkv_features=d, out_features=d)
  p_ours = ours.init(jax.random.key(3), q, kv, mask)
  p_lib = lib.init(jax.random.key(3), q[:, None], kv, kv, mask=mask[:, None, None, :])
  for x, y in zip(jax.tree.leaves(p_ours), jax.tree.leaves(p_lib)):
    np.testing.assert_array_equal(x, y)
  assert jax.tree.structure(p_ours) == jax.tree.structure(p_lib)
  noisy = jax.tree.map(lambda x: x + 0.1 * jax.random.normal(jax.random.key(1), x.shape), p_lib)  # nonzero biases
  np.testing.assert_allclose(ours.apply(noisy, q, kv, mask),
                             lib.apply(noisy, q[:, None], kv, kv, mask=mask[:, None, None, :])[:, 0], atol=2e-6)
