"""GRDR tokenizer pieces against straightforward NumPy: k-means, residual quantization, the losses, view matching."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from vidjax import losses
from vidjax.models.grdr import Tokenizer, TokenizerConfig, match_views, residual_quantize
from vidjax.ops import kmeans, kmeans_init

pytestmark = pytest.mark.highest_precision  # compares with NumPy or a reference (tests/conftest.py)


def _unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _np_kmeans(x, c, iters, cosine, w):
  x, c = x.astype(np.float64), c.astype(np.float64)

  def assign(c):
    if cosine:
      return np.argmax(_unit(x) @ _unit(c).T, axis=1)
    return np.argmin(((x[:, None] - c[None]) ** 2).sum(-1), axis=1)

  for _ in range(iters):
    a = assign(c)
    new = c.copy()
    for j in range(len(c)):
      sel = (a == j) & (w > 0)
      if w[sel].sum() > 0:
        new[j] = (w[sel, None] * x[sel]).sum(0) / w[sel].sum()
    c = new
  return c, assign(c)


@pytest.mark.parametrize("cosine", [True, False])
def test_kmeans_equals_numpy_lloyd(cosine):
  rng = np.random.default_rng(0)
  x = np.concatenate([rng.normal(size=(30, 6)) + 4 * rng.normal(size=(1, 6)) for _ in range(4)]).astype(np.float32)
  w = (rng.random(len(x)) > 0.2).astype(np.float32)
  init = np.asarray(kmeans_init(jax.random.PRNGKey(0), x, 5, weights=w))
  assert len({tuple(r) for r in init}) == 5
  assert all(any(np.array_equal(r, x[i]) and w[i] > 0 for i in range(len(x))) for r in init)
  c, a = kmeans(x, init, iters=8, cosine=cosine, weights=w)
  want_c, want_a = _np_kmeans(x, init, 8, cosine, w)
  np.testing.assert_allclose(np.asarray(c), want_c, rtol=1e-4, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(a), want_a)
  with pytest.raises(ValueError, match="k=5 needs at least k points, got 3"):
    kmeans_init(jax.random.PRNGKey(0), x[:3], 5)


def test_residual_quantize_equals_numpy():
  rng = np.random.default_rng(1)
  z = rng.normal(size=(7, 3, 5)).astype(np.float32)
  books = rng.normal(size=(3, 9, 5)).astype(np.float32)
  codes, z_hat, residuals = residual_quantize(jnp.asarray(z), jnp.asarray(books), 2)
  for idx in itertools.product(range(7), range(3)):
    r, acc = z[idx].astype(np.float64), np.zeros(5)
    for m in range(2):
      np.testing.assert_allclose(residuals[idx][m], r, rtol=1e-5, atol=1e-5)
      c = int(np.argmax(_unit(books[m]) @ _unit(r)))
      assert codes[idx][m] == c
      acc = acc + books[m, c]
      r = z[idx] - acc
    np.testing.assert_allclose(z_hat[idx], acc, rtol=1e-5, atol=1e-5)


def test_rq_loss_value_and_stop_gradients():
  rng = np.random.default_rng(2)
  z_hat, z = rng.normal(size=(4, 3, 6)).astype(np.float32), rng.normal(size=(4, 3, 6)).astype(np.float32)
  sq = ((z_hat.astype(np.float64) - z) ** 2).sum(-1)
  np.testing.assert_allclose(losses.rq_loss(z_hat, z, beta=0.3), np.mean(sq + 0.3 * sq), rtol=1e-5)
  g_hat, g_z = jax.grad(lambda a, b: losses.rq_loss(a, b, beta=0.3), argnums=(0, 1))(z_hat, z)
  n = 12  # rows averaged over
  np.testing.assert_allclose(g_hat, 2 * (z_hat - z) / n, rtol=1e-5, atol=1e-6)  # codebook term only
  np.testing.assert_allclose(g_z, 0.3 * 2 * (z - z_hat) / n, rtol=1e-5, atol=1e-6)  # commitment only


def test_reconstruction_alignment_and_code_losses_equal_numpy():
  rng = np.random.default_rng(3)
  f, r = rng.normal(size=(5, 8)), rng.normal(size=(5, 8))
  np.testing.assert_allclose(losses.cosine_reconstruction_loss(f.astype(np.float32), r.astype(np.float32)),
                             np.mean(1 - np.sum(_unit(f) * _unit(r), -1)), rtol=1e-5)
  z, h, tau = rng.normal(size=(6, 8)), rng.normal(size=(6, 8)), 0.2
  logits = _unit(h) @ _unit(z).T / tau
  want = np.mean([np.log(np.exp(logits[b]).sum()) - logits[b, b] for b in range(6)])
  np.testing.assert_allclose(losses.alignment_loss(z.astype(np.float32), h.astype(np.float32), tau), want, rtol=1e-5)
  book, targets = rng.normal(size=(9, 8)), rng.integers(0, 9, size=(2, 3))
  hh = rng.normal(size=(2, 3, 8))
  mask = np.array([[1, 0, 1], [1, 1, 0]], np.float32)
  lg = _unit(hh) @ _unit(book).T / tau
  nll = np.log(np.exp(lg).sum(-1)) - np.take_along_axis(lg, targets[..., None], -1)[..., 0]
  got = losses.code_cross_entropy(hh.astype(np.float32), book.astype(np.float32), targets, tau)
  np.testing.assert_allclose(got, nll.mean(), rtol=1e-5)
  got = losses.code_cross_entropy(hh.astype(np.float32), book.astype(np.float32), targets, tau, mask=mask)
  np.testing.assert_allclose(got, (nll * mask).sum() / mask.sum(), rtol=1e-5)


@pytest.mark.parametrize("n", [3, 4, 7])
def test_match_views_maximises_total_cosine(n):
  rng = np.random.default_rng(n)
  z, centres = rng.normal(size=(5, n, 4)), rng.normal(size=(5, n, 4))
  got = np.asarray(match_views(jnp.asarray(z, jnp.float32), jnp.asarray(centres, jnp.float32)))
  sim = np.einsum("vid,vjd->vij", _unit(z), _unit(centres))
  for v in range(5):
    assert sorted(got[v]) == list(range(n))  # a permutation: no cluster shared by two views
    if n <= 6:
      best = max(itertools.permutations(range(n)), key=lambda p: sum(sim[v, i, p[i]] for i in range(n)))
      assert tuple(got[v]) == best


def test_tokenizer_shapes_and_straight_through_gradients():
  cfg = TokenizerConfig(feature_dim=12, latent_dim=8, hidden=16, num_views=3, num_layers=2, num_codes=5)
  model = Tokenizer(cfg)
  f = jnp.asarray(np.random.default_rng(4).normal(size=(6, 12)), jnp.float32)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), f)  # jitted: one compile each, not one per op
  out = jax.jit(model.apply, static_argnames="num_layers")(params, f, num_layers=1)
  assert out["z"].shape == (6, 3, 8) and out["codes"].shape == (6, 3, 1)
  assert out["residuals"].shape == (6, 3, 1, 8) and out["reconstruction"].shape == (6, 12)
  np.testing.assert_allclose(np.linalg.norm(out["z"], axis=-1), 1.0, rtol=1e-5)
  assert jax.eval_shape(model.apply, params, f)["codes"].shape == (6, 3, 2)
  grads = jax.jit(jax.grad(lambda p: losses.cosine_reconstruction_loss(f, model.apply(p, f)["reconstruction"])))(params)
  assert float(jnp.abs(grads["params"]["encoder"]["w1"]).sum()) > 0  # through the straight-through estimator
  with pytest.raises(ValueError, match="num_codes must be a positive integer"):
    TokenizerConfig(num_codes=0)


def test_views_learn_distinct_query_intents():
  # Each video has 3 facets; its queries are noisy facets. Aligning view i with the queries of
  # cluster match(i) (L_CL against the cluster's queries) makes the views cover distinct facets.
  rng = np.random.default_rng(5)
  v, n, d = 64, 3, 16
  facets = _unit(rng.normal(size=(v, n, d)))
  feats = _unit(facets.mean(1) + 0.05 * rng.normal(size=(v, d))).astype(np.float32)
  cfg = TokenizerConfig(feature_dim=d, latent_dim=d, hidden=64, num_views=n, num_layers=1, num_codes=4)
  model = Tokenizer(cfg)
  params = model.init(jax.random.PRNGKey(1), feats)
  opt = optax.adam(3e-3)
  state = opt.init(params)
  centres = jnp.asarray(facets, jnp.float32)[:, rng.permutation(n)]  # cluster order arbitrary

  def loss_fn(p, q_noise):
    z = model.apply(p, feats, method=Tokenizer.encode)  # [V, N, d]
    perm = match_views(jax.lax.stop_gradient(z), centres)
    target = jnp.take_along_axis(centres, perm[..., None], axis=1) + q_noise
    return losses.alignment_loss(z.reshape(-1, d), target.reshape(-1, d), 0.1)

  step = jax.jit(lambda p, s, noise: (lambda l, g: (l, *opt.update(g, s, p)))(*jax.value_and_grad(loss_fn)(p, noise)))
  for i in range(300):
    noise = jnp.asarray(0.1 * rng.normal(size=(v, n, d)) / np.sqrt(d), jnp.float32)
    _, updates, state = step(params, state, noise)
    params = optax.apply_updates(params, updates)
  z = np.asarray(model.apply(params, feats, method=Tokenizer.encode))
  perm = np.asarray(match_views(jnp.asarray(z), centres))
  sim = np.einsum("vid,vjd->vij", _unit(z), np.asarray(centres))
  matched = np.take_along_axis(sim, perm[..., None], 2)[..., 0]
  assert np.mean(matched) > 0.8  # each view sits on its own intent ...
  off = sim.sum(-1) - matched
  assert np.mean(matched) - np.mean(off / (n - 1)) > 0.5  # ... and not on the others


def test_codebook_health_equals_plain_counts():
  from vidjax.metrics import codebook_health
  rng = np.random.default_rng(6)
  codes = rng.integers(0, 5, size=(40, 2, 3))
  codes[:, :, 2] = 0  # a collapsed layer
  h = codebook_health(codes, 8)
  for m in range(3):
    col = codes[..., m].reshape(-1)
    freq = np.array([np.mean(col == c) for c in range(8)])
    nz = freq[freq > 0]
    assert h["layers"][m]["used"] == len(set(col)) and h["layers"][m]["dead"] == 8 - len(set(col))
    np.testing.assert_allclose(h["layers"][m]["perplexity"], np.exp(-(nz * np.log(nz)).sum()))
  assert h["layers"][2]["perplexity"] == 1.0 and h["layers"][2]["used"] == 1
  ids = [tuple(r) for r in codes.reshape(-1, 3)]
  assert h["ids"] == 80 and h["distinct_ids"] == len(set(ids))
  assert h["colliding_ids"] == sum(ids.count(i) > 1 for i in set(ids))
  with pytest.raises(ValueError, match="outside"):
    codebook_health(codes, 4)


def test_view_set_alignment_loss_equals_numpy():
  rng = np.random.default_rng(11)
  z, c = rng.normal(size=(3, 4, 6)), rng.normal(size=(3, 4, 6))
  valid = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0]], np.float32)
  want = []
  for b in range(3):
    sim = _unit(z[b]) @ _unit(c[b]).T  # [views, centres]
    ks = np.flatnonzero(valid[b])
    cover = np.mean([1 - sim[:, k].max() for k in ks])
    use = np.mean([1 - sim[i, ks].max() for i in range(4)])
    want.append(cover + 0.3 * use)
  got = losses.view_set_alignment_loss(z.astype(np.float32), c.astype(np.float32), valid, use_weight=0.3)
  np.testing.assert_allclose(got, np.mean(want), rtol=1e-5)
  # Views sitting on the valid centres (in any order) cost nothing; the invalid centres are ignored.
  on = np.concatenate([c[:, 1:2], c[:, 0:1], c[:, 1:2], c[:, 0:1]], axis=1)
  valid2 = np.array([[1, 1, 0, 0]] * 3, np.float32)
  assert float(losses.view_set_alignment_loss(on.astype(np.float32), c.astype(np.float32), valid2)) < 1e-6
  with pytest.raises(ValueError, match="valid must have shape"):
    losses.view_set_alignment_loss(z.astype(np.float32), c.astype(np.float32), valid[:, :3])
