"""VideoPrism in Flax: layers and whole models against float64 NumPy references, checkpoint layout and I/O.

The NumPy reference below is written from shared/refs/videoprism_architecture.md
with explicit loops where the Flax code uses reshapes (patchify, regrouping), so
a layout mistake in either shows up as a mismatch.
"""
import functools
import hashlib
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidjax import checkpoints
from vidjax.ops import flatten_dict, unflatten_dict
from vidjax.models import videoprism as vp

# Every model test compares with the float64 NumPy reference (or scanned with unrolled layers): they hold at full
# float32 only, which a GPU (TF32 by default) or a TPU (one bf16 pass) computes when asked (tests/conftest.py).
pytestmark = pytest.mark.highest_precision

SPEC = str(Path(__file__).resolve().parents[2] / "shared" / "refs" / "videoprism_param_spec.json")  # ../shared

TINY_ENC = dict(patch_size=2, pos_emb_shape=(4, 3, 3), model_dim=8, num_spatial_layers=2,
                num_temporal_layers=2, num_heads=2, mlp_dim=12, atten_logit_cap=2.0, scan=True)
TINY_LVT = dict(patch_size=2, pos_emb_shape=(4, 3, 3), model_dim=8, num_spatial_layers=1,
                num_temporal_layers=1, num_heads=2, mlp_dim=12, num_auxiliary_layers=2,
                vocabulary_size=20, enable_causal_atten=True, num_unimodal_layers=2,
                norm_policy="pre", atten_logit_cap=2.0, scan=True)
NEG = -1e30


# ----------------------------------------------------------------------------- NumPy reference


def np_ln(x, p):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + 1e-6) * (1.0 + p["scale"]) + p["bias"]


def np_softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def np_attention(xq, xkv, p, keep=None, cap=0.0, per_dim_scale=False):
  """xq [B,T,D], xkv [B,S,D], keep bool [B,T,S] or None."""
  q = np.einsum("btd,dnh->btnh", xq, p["query"]["w"]) + p["query"]["b"]
  k = np.einsum("bsd,dnh->bsnh", xkv, p["key"]["w"]) + p["key"]["b"]
  v = np.einsum("bsd,dnh->bsnh", xkv, p["value"]["w"]) + p["value"]["b"]
  dh = q.shape[-1]
  if per_dim_scale:
    rho = p["per_dim_scale"]["per_dim_scale"]
    q = q * (1.442695041 / np.sqrt(dh)) * np.log1p(np.exp(rho))
  else:
    q = q / np.sqrt(dh)
  logits = np.einsum("btnh,bsnh->bnts", q, k)
  if cap > 0:
    logits = cap * np.tanh(logits / cap)
  if keep is not None:
    logits = np.where(keep[:, None], logits, NEG)
  probs = np_softmax(logits)
  ctx = np.einsum("bnts,bsnh->btnh", probs, v)
  return np.einsum("btnh,dnh->btd", ctx, p["post"]["w"]) + p["post"]["b"]


def np_keep(pads, causal):
  b, s = pads.shape
  keep = np.zeros((b, s, s), bool)
  for i in range(b):
    for t in range(s):
      for u in range(s):
        if causal:
          keep[i, t, u] = u <= t and pads[i, u] == 0 and pads[i, t] == 0
        else:
          keep[i, t, u] = pads[i, u] == 0
  return keep


def np_stack(x, pads, p, num_layers, cap, act, causal):
  keep = np_keep(pads, causal)
  for i in range(num_layers):
    lp = jax.tree.map(lambda a: a[i], p["x_layers"])
    h = x + np_attention(np_ln(x, lp["layer_norm"]), np_ln(x, lp["layer_norm"]), lp["self_attention"],
                         keep, cap)
    ff = lp["ff_layer"]
    g = np_ln(h, ff["layer_norm"]) @ ff["ffn_layer1"]["linear"]["kernel"] + ff["ffn_layer1"]["linear"]["bias"]
    if act == "gelu":
      from math import erf
      g = 0.5 * g * (1.0 + np.vectorize(erf)(g / np.sqrt(2.0)))
    else:
      g = np.maximum(g, 0.0)
    g = g * (1.0 - pads[..., None])
    z = (g @ ff["ffn_layer2"]["linear"]["kernel"] + ff["ffn_layer2"]["linear"]["bias"]) * (1.0 - pads[..., None])
    x = h + z
  return x


def np_resize_weights(n_in, n_out):
  """[n_out, n_in] antialiased triangle weights with half-pixel centres (spec Sec. 2.1)."""
  s = n_out / n_in
  k = max(1.0, 1.0 / s)
  w = np.zeros((n_out, n_in))
  for i in range(n_out):
    c = (i + 0.5) / s - 0.5
    for j in range(n_in):
      w[i, j] = max(0.0, 1.0 - abs(j - c) / k)
    w[i] /= w[i].sum()
  return w


def np_resize(table, new_shape):
  out = table
  for axis, n_out in enumerate(new_shape):
    out = np.moveaxis(np.tensordot(np_resize_weights(out.shape[axis], n_out), np.moveaxis(out, axis, 0),
                                   axes=1), 0, axis)
  return out


def np_encoder(frames, fpads, p, cfg):
  """frames [B,T,H,W,3], fpads [B,T] -> tokens [B,T*N,D], spatial [B,T,N,D]."""
  b, t, h, w, _ = frames.shape
  ps, d = cfg["patch_size"], cfg["model_dim"]
  gh, gw = h // ps, w // ps
  n = gh * gw
  patches = np.zeros((b, t, n, ps * ps * 3))
  for m in range(gh):
    for j in range(gw):
      patches[:, :, m * gw + j] = frames[:, :, m * ps:(m + 1) * ps, j * ps:(j + 1) * ps, :].reshape(b, t, -1)
  x = patches @ p["patch_projection"]["linear"]["kernel"] + p["patch_projection"]["linear"]["bias"]
  t0, sh, sw = cfg["pos_emb_shape"]
  sp = np_resize(p["spatial_pos_emb"]["emb_var"].reshape(sh, sw, d), (gh, gw)).reshape(n, d)
  x = (x + sp).reshape(b * t, n, d)
  spads = np.repeat(fpads.reshape(b * t, 1), n, axis=1)
  x = np_stack(x, spads, p["spatial_encoder"]["transformers_stack"], cfg["num_spatial_layers"],
               cfg["atten_logit_cap"], "gelu", False)
  x = np_ln(x, p["spatial_ln"])
  spatial = x.reshape(b, t, n, d)
  seq = np.zeros((b * n, t, d))
  tpads = np.zeros((b * n, t))
  for bi in range(b):
    for ti in range(t):
      for ni in range(n):
        seq[bi * n + ni, ti] = spatial[bi, ti, ni]
        tpads[bi * n + ni, ti] = fpads[bi, ti]
  seq = seq + np_resize(p["temporal_pos_emb"]["emb_var"], (t,))
  seq = np_stack(seq, tpads, p["temporal_encoder"]["transformers_stack"], cfg["num_temporal_layers"],
                 cfg["atten_logit_cap"], "gelu", False)
  seq = np_ln(seq, p["temporal_ln"])
  tokens = np.zeros((b, t * n, d))
  for bi in range(b):
    for ti in range(t):
      for ni in range(n):
        tokens[bi, ti * n + ni] = seq[bi * n + ni, ti]
  return tokens, spatial


def np_l2(x):
  return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-12)


def np_pool(tokens, p):
  b, _, d = tokens.shape
  q = np.broadcast_to(p["pooling_attention_query"][None], (b, 1, d))
  out = np_attention(q, tokens, p["pooling_attention"], None, 0.0, per_dim_scale=True)
  return np_ln(out, p["pooling_attention_layer_norm"])[:, 0]


def np_sinusoid(length, dim):
  k = dim // 2
  omega = np.exp(-np.arange(k) * np.log(10000.0) / (k - 1))
  ang = np.arange(length)[:, None] * omega[None]
  return np.concatenate([np.sin(ang), np.cos(ang)], -1)


def np_lvt(frames, ids, tpads, p, cfg):
  d = cfg["model_dim"]
  tokens, _ = np_encoder(frames, np.zeros(frames.shape[:2]), p["vision_encoder"], cfg)
  x = np_stack(tokens, np.zeros(tokens.shape[:2]), p["auxiliary_encoder"]["transformers_stack"],
               cfg["num_auxiliary_layers"], cfg["atten_logit_cap"], "gelu", False)
  video = np_l2(np_pool(x, p["contrastive_vision_pooler"]))
  b, t = frames.shape[:2]
  frame_emb = np_l2(np_pool(x.reshape(b * t, -1, d), p["contrastive_vision_pooler"])).reshape(b, t, d)
  tp = p["text_encoder"]
  e = tp["token_emb"]["emb_var"][ids] * np.sqrt(d) + np_sinusoid(ids.shape[1], d)
  e = np.concatenate([e, np.broadcast_to(tp["cls_emb"] * np.sqrt(d), (ids.shape[0], 1, d))], 1)
  pads = np.concatenate([tpads, np.zeros((ids.shape[0], 1))], 1)
  e = np_stack(e, pads, tp["unimodal_transformer"], cfg["num_unimodal_layers"], cfg["atten_logit_cap"],
               "relu", True)
  text = np_l2(np_ln(e, tp["unimodal_ln"])[:, -1])
  return video, text, tokens, frame_emb


# ----------------------------------------------------------------------------- fixtures


def random_variables(model, seed):
  """Random values in every parameter (LN scales and biases too, so the +1 gain is exercised)."""
  shapes = vp.param_shapes(model)
  rng = np.random.default_rng(seed)
  flat = {k: (0.4 * rng.standard_normal(s.shape)).astype(np.float32) for k, s in shapes.items()}
  return unflatten_dict(flat)


def f64(tree):
  return jax.tree.map(lambda a: np.asarray(a, np.float64), tree)


@functools.cache
def enc_setup():
  model = vp.FactorizedEncoder(**TINY_ENC)
  variables = random_variables(model, 0)
  apply = jax.jit(lambda v, x, fp: model.apply(v, x, train=False, frame_paddings=fp))
  return model, variables, apply


@functools.cache
def lvt_setup():
  model = vp.FactorizedVideoCLIP(**TINY_LVT)
  variables = random_variables(model, 1)

  def run_all(v, x, ids, pads, ids9, pads9):
    # One compiled program for the joint, video-only and text-only calls (XLA shares the common work).
    return dict(joint=model.apply(v, x, ids, pads, train=False, return_frame_embeddings=True),
                video_only=model.apply(v, x, train=False),
                text_only=model.apply(v, None, ids, pads, train=False),
                text_longer_padding=model.apply(v, None, ids9, pads9, train=False))

  return model, variables, jax.jit(run_all)


@functools.cache
def lvt_results():
  _, variables, run_all = lvt_setup()
  frames = rand_frames((2, 4, 6, 6, 3), seed=1)
  ids, pads = text_batch()
  ids9 = np.pad(ids, [(0, 0), (0, 3)])
  pads9 = np.pad(pads, [(0, 0), (0, 3)], constant_values=1.0)
  return frames, ids, pads, run_all(variables, frames, ids, pads, ids9, pads9)


def rand_frames(shape, seed=0):
  return np.random.default_rng(seed).uniform(0, 1, shape).astype(np.float32)


def text_batch():
  ids = np.array([[3, 7, 1, 0, 0, 0], [5, 2, 9, 11, 4, 19]], np.int32)
  pads = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0]], np.float32)
  return ids, pads


# ----------------------------------------------------------------------------- layer tests


def test_layer_norm_uses_one_plus_scale_and_two_pass_variance():
  rng = np.random.default_rng(0)
  x = (30.0 + rng.standard_normal((3, 5, 16))).astype(np.float32)
  p = {"scale": rng.standard_normal(16).astype(np.float32), "bias": rng.standard_normal(16).astype(np.float32)}
  got = vp.LayerNorm().apply({"params": p}, x)
  np.testing.assert_allclose(np.asarray(got), np_ln(f64(x), f64(p)), atol=2e-4, rtol=1e-4)


def _random_attention_inputs(layer, rng):
  """(x [2, 6, 8], random parameters of `layer`) for the attention tests."""
  x = (3.0 * rng.standard_normal((2, 6, 8))).astype(np.float32)
  params = jax.tree.map(lambda s: rng.standard_normal(s.shape).astype(np.float32),
                        jax.eval_shape(layer.init, jax.random.PRNGKey(0), x, x, None))
  return x, params


def test_attention_with_logit_cap_and_padding_mask():
  rng = np.random.default_rng(1)
  layer = vp.DotProductAttention(num_heads=2, dim_per_head=4, atten_logit_cap=5.0)
  x, params = _random_attention_inputs(layer, rng)
  pads = np.array([[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0]], np.float32)
  for causal in (False, True):
    got = layer.apply(params, x, x, vp.attention_mask(jnp.asarray(pads), causal))
    want = np_attention(f64(x), f64(x), f64(params["params"]), np_keep(pads, causal), cap=5.0)
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-4, rtol=1e-4)
  # Logits this large are far beyond the cap, so the cap must have mattered.
  uncapped = np_attention(f64(x), f64(x), f64(params["params"]), np_keep(pads, False), cap=0.0)
  assert np.abs(uncapped - want).max() > 1e-2


def test_uncapped_attention_is_jax_dot_product_attention_with_the_official_mask_semantics():
  # Without a cap, `attend` is jax.nn.dot_product_attention; with padded keys, causal masks and a fully masked row
  # (a padded query: uniform over all keys in the official code) it must equal the cap-free reference exactly.
  rng = np.random.default_rng(5)
  layer = vp.DotProductAttention(num_heads=2, dim_per_head=4, atten_logit_cap=0.0)
  x, params = _random_attention_inputs(layer, rng)
  pads = np.array([[0, 0, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1]], np.float32)
  for causal in (False, True):
    for impl in (None, "xla"):
      got = vp.DotProductAttention(num_heads=2, dim_per_head=4, implementation=impl).apply(
          params, x, x, vp.attention_mask(jnp.asarray(pads), causal))
      want = np_attention(f64(x), f64(x), f64(params["params"]), np_keep(pads, causal), cap=0.0)
      np.testing.assert_allclose(np.asarray(got), want, atol=2e-4, rtol=1e-4)
  q = jnp.ones((1, 2, 1, 4))
  with pytest.raises(ValueError, match="no logit soft-cap"):
    vp.attend(q, q, q, None, logit_cap=50.0, implementation="cudnn")
  with pytest.raises(ValueError, match="must be one of"):
    vp.attend(q, q, q, None, implementation="flash")


def test_attention_pool_per_dim_scale():
  rng = np.random.default_rng(2)
  pool = vp.AttentionPool(num_heads=2, hidden_dim=12)
  tokens = rng.standard_normal((3, 7, 6)).astype(np.float32)
  params = jax.tree.map(lambda s: rng.standard_normal(s.shape).astype(np.float32),
                        jax.eval_shape(pool.init, jax.random.PRNGKey(0), tokens))
  assert params["params"]["pooling_attention"]["per_dim_scale"]["per_dim_scale"].shape == (6,)
  got = pool.apply(params, tokens)
  assert got.shape == (3, 1, 6)
  np.testing.assert_allclose(np.asarray(got)[:, 0], np_pool(f64(tokens), f64(params["params"])),
                             atol=2e-4, rtol=1e-4)


def test_resize_pos_emb_matches_antialiased_triangle_formula():
  rng = np.random.default_rng(3)
  table = rng.standard_normal((16, 5)).astype(np.float32)
  down = np.asarray(vp.resize_pos_emb(jnp.asarray(table), (8,)))
  np.testing.assert_allclose(down, np_resize(f64(table), (8,)), atol=1e-5)
  # The worked examples of the spec: interior (1/8, 3/8, 3/8, 1/8), first (.75, .75, .25) / 1.75.
  np.testing.assert_allclose(down[3], table[5:9].T @ np.array([1, 3, 3, 1]) / 8, atol=1e-5)
  np.testing.assert_allclose(down[0], (0.75 * table[0] + 0.75 * table[1] + 0.25 * table[2]) / 1.75, atol=1e-5)
  up = np.asarray(vp.resize_pos_emb(jnp.asarray(table[:4]), (7,)))
  np.testing.assert_allclose(up, np_resize(f64(table[:4]), (7,)), atol=1e-5)
  grid = rng.standard_normal((4, 4, 3)).astype(np.float32)
  np.testing.assert_allclose(np.asarray(vp.resize_pos_emb(jnp.asarray(grid), (3, 6))),
                             np_resize(f64(grid), (3, 6)), atol=1e-5)
  np.testing.assert_array_equal(np.asarray(vp.resize_pos_emb(jnp.asarray(table), (16,))), table)


def test_sinusoid_patchify_and_masks():
  np.testing.assert_allclose(np.asarray(vp.sinusoidal_pos_emb(9, 10)), np_sinusoid(9, 10), atol=2e-5)
  frames = rand_frames((2, 4, 6, 3))
  got = np.asarray(vp.patchify(jnp.asarray(frames), 2))
  assert got.shape == (2, 6, 12)
  np.testing.assert_array_equal(got[1, 1 * 3 + 2], frames[1, 2:4, 4:6, :].reshape(-1))
  pads = np.array([[0, 0, 1], [0, 1, 1]], np.float32)
  for causal in (False, True):
    mask = np.broadcast_to(np.asarray(vp.attention_mask(jnp.asarray(pads), causal)), (2, 1, 3, 3))[:, 0]
    np.testing.assert_array_equal(mask, np_keep(pads, causal))


# ----------------------------------------------------------------------------- model tests


@functools.cache
def enc_results():
  _, variables, apply = enc_setup()
  frames = rand_frames((2, 3, 8, 8, 3))  # T=3 != T0=4 and a 4x4 grid != 3x3: both tables resized.
  fpads = np.array([[0, 0, 0], [0, 0, 1]], np.float32)
  want = np_encoder(f64(frames), f64(fpads), f64(variables["params"]), TINY_ENC)
  return frames, fpads, apply(variables, frames, fpads), want


def test_encoder_matches_numpy_reference_with_resized_pos_emb_and_frame_paddings():
  _, _, (tokens, out), (want_tokens, want_spatial) = enc_results()
  assert tokens.shape == (2, 3 * 16, 8) and out["spatial_features"].shape == (2, 3, 16, 8)
  np.testing.assert_allclose(np.asarray(out["spatial_features"]), want_spatial, atol=3e-4, rtol=1e-4)
  np.testing.assert_allclose(np.asarray(tokens), want_tokens, atol=3e-4, rtol=1e-4)


def test_lvt_matches_numpy_reference():
  _, variables, _ = lvt_setup()
  frames, ids, pads, results = lvt_results()
  video, text, out = results["joint"]
  assert video.shape == (2, 8) and text.shape == (2, 8)
  assert out["video_tokens"].shape == (2, 4 * 9, 8) and out["frame_embeddings"].shape == (2, 4, 8)
  assert out["spatial_features"].shape == (2, 4, 9, 8)
  want = np_lvt(f64(frames), ids, f64(pads), f64(variables["params"]), TINY_LVT)
  for got, exp in zip((video, text, out["video_tokens"], out["frame_embeddings"]), want):
    np.testing.assert_allclose(np.asarray(got), exp, atol=3e-4, rtol=1e-4)
  np.testing.assert_allclose(np.linalg.norm(np.asarray(text), axis=-1), 1.0, atol=1e-5)
  np.testing.assert_allclose(np.linalg.norm(np.asarray(video), axis=-1), 1.0, atol=1e-5)


def test_lvt_video_only_and_text_only_calls():
  model, variables, _ = lvt_setup()
  _, ids, _, results = lvt_results()
  video, text, _ = results["joint"]
  v_only, t_none, v_out = results["video_only"]
  assert t_none is None and "video_tokens" in v_out and "frame_embeddings" not in v_out
  np.testing.assert_allclose(np.asarray(v_only), np.asarray(video), atol=1e-6)
  v_none, t_only, t_out = results["text_only"]
  assert v_none is None and t_out == {}
  np.testing.assert_allclose(np.asarray(t_only), np.asarray(text), atol=1e-6)
  # Longer padding does not change the text embedding (pads sit before the CLS and are masked).
  np.testing.assert_allclose(np.asarray(results["text_longer_padding"][1]), np.asarray(text), atol=1e-5)
  with pytest.raises(ValueError, match="text_paddings"):
    model.apply(variables, None, ids, None)


def test_unscanned_layers_equal_scanned():
  rng = np.random.default_rng(5)
  kw = dict(num_layers=3, num_heads=2, mlp_dim=12, atten_logit_cap=2.0, activation="relu", causal=True)
  x = rng.standard_normal((2, 5, 8)).astype(np.float32)
  pads = np.array([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], np.float32)
  scanned = vp.StackedTransformer(**kw, scan=True)
  variables = jax.tree.map(lambda s: (0.4 * rng.standard_normal(s.shape)).astype(np.float32),
                           jax.eval_shape(scanned.init, jax.random.PRNGKey(0), x, pads))
  assert variables["params"]["x_layers"]["self_attention"]["post"]["w"].shape == (3, 8, 2, 4)
  layers = variables["params"]["x_layers"]
  unscanned = {"params": {f"x_layers_{i}": jax.tree.map(lambda a: a[i], layers) for i in range(3)}}
  got = vp.StackedTransformer(**kw, scan=False).apply(unscanned, x, pads)
  apply_scanned = jax.jit(scanned.apply)
  want = apply_scanned(variables, x, pads)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)
  # Layer i uses slice i, in order: the NumPy stack agrees, and reversing the layers changes the result.
  np.testing.assert_allclose(np.asarray(want), np_stack(f64(x), f64(pads), f64(variables["params"]), 3, 2.0,
                                                        "relu", True), atol=2e-4, rtol=1e-4)
  rev = jax.tree.map(lambda a: a[::-1], variables)
  assert np.abs(np.asarray(apply_scanned(rev, x, pads)) - np.asarray(want)).max() > 1e-3


def test_bfloat16_fprop_keeps_float32_params():
  _, variables, _ = enc_setup()
  frames, fpads, _, (want_tokens, _) = enc_results()
  model = vp.FactorizedEncoder(**TINY_ENC, fprop_dtype=jnp.bfloat16)
  assert all(s.dtype == jnp.float32 for s in vp.param_shapes(model).values())
  # float32 inputs and NumPy params: the model itself casts them, nothing promotes back to float32.
  got, out = jax.jit(lambda v, x, fp: model.apply(v, x, frame_paddings=fp))(variables, frames, fpads)
  assert got.dtype == jnp.bfloat16 and out["spatial_features"].dtype == jnp.bfloat16
  err = np.abs(np.asarray(got, np.float32) - want_tokens)
  assert err.mean() < 0.05, err.mean()


def test_param_tree_matches_official_spec():
  spec = json.load(open(SPEC))
  for name in ("videoprism_public_v1_base", "videoprism_lvt_public_v1_base", "videoprism_public_v1_large",
               "videoprism_lvt_public_v1_large"):
    shapes = {k: list(v.shape) for k, v in vp.param_shapes(vp.get_model(name)).items()}
    assert shapes == spec[name], name
  assert len(spec["videoprism_public_v1_base"]) == 40 and len(spec["videoprism_lvt_public_v1_base"]) == 88


def test_get_model_and_configs():
  m = vp.get_model("videoprism_lvt_public_v1_large", fprop_dtype=jnp.bfloat16)
  assert isinstance(m, vp.FactorizedVideoCLIP) and m.model_dim == 1024 and m.fprop_dtype == jnp.bfloat16
  assert isinstance(vp.get_model("videoprism_public_v1_base"), vp.FactorizedEncoder)
  with pytest.raises(KeyError, match="videoprism_public_v1_base"):
    vp.get_model("videoprism_v1_tiny")
  with pytest.raises(ValueError, match="multiple of patch_size"):
    vp.FactorizedEncoder(**TINY_ENC).apply(enc_setup()[1], np.zeros((1, 2, 5, 5, 3), np.float32))


def test_save_load_roundtrip_gives_identical_outputs(tmp_path):
  model, variables, apply = enc_setup()
  path = tmp_path / "ckpt" / "tiny.npz"
  checkpoints.save_npz(variables, path)
  with np.load(path) as npz:
    keys = set(npz.files)
  assert keys == set(vp.param_shapes(model)) and all(k.startswith("params/") for k in keys)
  loaded = checkpoints.load_videoprism(path, model)
  assert all(isinstance(a, jax.Array) for a in jax.tree.leaves(loaded))
  frames, fpads, (tokens, _), _ = enc_results()
  np.testing.assert_array_equal(np.asarray(apply(loaded, frames, fpads)[0]), np.asarray(tokens))
  assert checkpoints.file_hash(path) == hashlib.sha256(path.read_bytes()).hexdigest()
  assert not [p for p in path.parent.iterdir() if p.name != "tiny.npz"]  # No temp files left.
  with pytest.raises(FileNotFoundError, match="nope.npz"):
    checkpoints.load_videoprism(tmp_path / "nope.npz", model)
  (tmp_path / "junk.npz").write_bytes(b"not a zip")
  with pytest.raises(ValueError, match="junk.npz"):
    checkpoints.load_videoprism(tmp_path / "junk.npz", model)


def test_load_reports_missing_extra_and_misshaped_keys_at_once(tmp_path):
  model, variables, _ = enc_setup()
  flat = {k: np.asarray(v) for k, v in flatten_dict(variables).items()}
  del flat["params/temporal_ln/bias"]
  flat["params/extra/thing"] = np.zeros(3, np.float32)
  flat["params/spatial_pos_emb/emb_var"] = np.zeros((8, 8), np.float32)
  path = tmp_path / "bad.npz"
  np.savez(path, **flat)
  with pytest.raises(checkpoints.CheckpointMismatchError) as e:
    checkpoints.load_videoprism(path, model)
  msg = str(e.value)
  assert str(path) in msg
  assert "missing key: params/temporal_ln/bias" in msg
  assert "unexpected key: params/extra/thing" in msg
  assert "mis-shaped key: params/spatial_pos_emb/emb_var: file has (8, 8), model expects (9, 8)" in msg
