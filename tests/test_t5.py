"""T5 encoder-decoder (GRDR's retriever trunk): shape, parameter count, bucket rule, causality, masking."""
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidjax.models.t5 import T5, T5Config, T5Decoder, T5Encoder, relative_position_bucket

pytestmark = pytest.mark.highest_precision  # compares with NumPy or a reference (tests/conftest.py)

TINY = T5Config(d_model=16, num_heads=2, d_kv=8, d_ff=32, encoder_layers=2, decoder_layers=2, vocab_size=50,
                dropout_rate=0.0)


def test_t5_small_has_the_published_parameter_count():
  model = T5(T5Config.small())
  shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((1, 5), jnp.int32),
                                             jnp.ones((1, 5), bool), jnp.zeros((1, 3), jnp.int32)))
  assert sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes)) == 60_506_624  # HF t5-small


def _bucket(rel, bidirectional, num_buckets, max_distance):
  """T5's rule, one integer at a time."""
  n, out = -rel, 0
  if bidirectional:
    num_buckets //= 2
    out += num_buckets if n < 0 else 0
    n = abs(n)
  else:
    n = max(n, 0)
  exact = num_buckets // 2
  if n < exact:
    return out + n
  large = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact))
  return out + min(large, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_position_bucket_equals_the_scalar_rule(bidirectional):
  rel = np.arange(-300, 301)
  got = np.asarray(relative_position_bucket(rel, bidirectional, 32, 128))
  want = [_bucket(int(r), bidirectional, 32, 128) for r in rel]
  np.testing.assert_array_equal(got, want)
  assert got.min() == 0 and got.max() == 31


def test_decoder_is_causal_and_encoder_ignores_masked_tokens():
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(2, 5, 16)), jnp.float32)
  mask = jnp.asarray([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
  enc = T5Encoder(TINY)
  p = jax.jit(enc.init)(jax.random.PRNGKey(0), x, mask)
  enc_apply = jax.jit(enc.apply)
  out = enc_apply(p, x, mask)
  changed = x.at[0, 3:].set(7.0)  # only masked tokens of row 0 change
  np.testing.assert_allclose(enc_apply(p, changed, mask)[0, :3], out[0, :3], atol=1e-5)

  y = jnp.asarray(rng.normal(size=(2, 4, 16)), jnp.float32)
  dec = T5Decoder(TINY)
  pd = jax.jit(dec.init)(jax.random.PRNGKey(1), y, out, mask)
  dec_apply = jax.jit(dec.apply)
  base = dec_apply(pd, y, out, mask)
  later = dec_apply(pd, y.at[:, 2:].set(3.0), out, mask)
  np.testing.assert_allclose(later[:, :2], base[:, :2], atol=1e-5)  # positions < 2 never see 2..
  assert not np.allclose(later[:, 2:], base[:, 2:])
  assert base.shape == (2, 4, 16)


def test_decoder_reads_a_querys_memory_once_for_its_beams():
  """Memory of Q rows for Q * W rows of y (each query's W beams consecutive, as a beam search's): the rows equal the
  decoder over the memory repeated per row; rows the memory does not divide are refused."""
  rng = np.random.default_rng(1)
  q, w, s, length = 3, 4, 3, 5
  memory = jnp.asarray(rng.normal(size=(q, length, 16)), jnp.float32)
  mask = jnp.asarray(rng.random((q, length)) < 0.7, bool).at[:, 0].set(True)
  y = jnp.asarray(rng.normal(size=(q * w, s, 16)), jnp.float32)
  dec = T5Decoder(TINY)
  params = jax.jit(dec.init)(jax.random.PRNGKey(2), y, jnp.repeat(memory, w, axis=0), jnp.repeat(mask, w, axis=0))
  apply = jax.jit(dec.apply)
  per_row = apply(params, y, jnp.repeat(memory, w, axis=0), jnp.repeat(mask, w, axis=0))
  per_query = apply(params, y, memory, mask)
  np.testing.assert_allclose(per_query, per_row, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="divide"):
    dec.apply(params, y[:-1], memory, mask)


def test_t5_learns_to_copy_a_sequence_in_reverse():
  """Behaviour: a tiny T5 trained on (x -> reversed x) over 8 symbols decodes unseen sequences."""
  import optax
  cfg = T5Config(d_model=32, num_heads=2, d_kv=16, d_ff=64, encoder_layers=1, decoder_layers=1, vocab_size=10,
                 dropout_rate=0.0)
  model = T5(cfg)
  rng = np.random.default_rng(0)
  seqs = rng.integers(2, 10, size=(2048, 4))
  bos = np.ones((len(seqs), 1), np.int64)
  target = seqs[:, ::-1]
  dec_in = np.concatenate([bos, target[:, :-1]], 1)
  mask = np.ones(seqs.shape, bool)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), seqs[:2], mask[:2], dec_in[:2])

  def logits(p, s, m, d):
    h = model.apply(p, s, m, d)
    return h @ p["params"]["embedding"]["embedding"].T

  def loss(p, s, m, d, t):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits(p, s, m, d)), t[..., None], -1))

  opt = optax.adam(3e-3)
  state = opt.init(params)

  @jax.jit
  def step(p, st, i):
    sl = jax.lax.dynamic_slice_in_dim
    g = jax.grad(loss)(p, sl(seqs, i, 128), sl(mask, i, 128), sl(dec_in, i, 128), sl(target, i, 128))
    u, st = opt.update(g, st, p)
    return optax.apply_updates(p, u), st

  for t in range(800):
    params, state = step(params, state, (t % 15) * 128)
  test = rng.integers(2, 10, size=(64, 4))
  out = np.ones((64, 1), np.int64)
  decode = jax.jit(logits)
  for _ in range(4):  # greedy decoding
    nxt = np.asarray(jnp.argmax(decode(params, test, np.ones_like(test, bool), out)[:, -1], -1))
    out = np.concatenate([out, nxt[:, None]], 1)
  acc = np.mean(out[:, 1:] == test[:, ::-1])
  assert acc > 0.9, acc


def _fmix32_numpy(x):
  x = x ^ (x >> np.uint32(16))
  x = x * np.uint32(0x85EBCA6B)
  x = x ^ (x >> np.uint32(13))
  x = x * np.uint32(0xC2B2AE35)
  return x ^ (x >> np.uint32(16))


def test_dropout_mask_is_the_counter_hash_and_drops_at_its_rate_independently():
  """T5's dropout masks (`ops.dropout_keep_mask`) against a NumPy computation of the same hash, then as statistics."""
  from vidjax.models.layers import Dropout
  from vidjax.ops import dropout_keep_mask
  key, rate, shape = jax.random.key(3), 0.1, (64, 50, 40)
  keep, keep_prob = dropout_keep_mask(key, shape, rate)
  s1, s2 = np.asarray(jax.random.bits(key, (2,), jnp.uint32))
  with np.errstate(over="ignore"):
    i = np.arange(math.prod(shape), dtype=np.uint32)
    bits = _fmix32_numpy(_fmix32_numpy(i * np.uint32(0x9E3779B9) + s1) ^ s2)
  threshold = round(rate * 2 ** 32)
  np.testing.assert_array_equal(np.asarray(keep), (bits >= threshold).reshape(shape))
  assert keep_prob == 1 - threshold / 2 ** 32 and abs(keep_prob - 0.9) < 1e-9

  n, drop = keep.size, ~np.asarray(keep).reshape(-1)
  sd = math.sqrt(rate * (1 - rate) / n)
  assert abs(drop.mean() - rate) < 5 * sd
  # neighbours and another key's mask are independent: both dropped at rate^2
  assert abs(np.mean(drop[1:] & drop[:-1]) - rate ** 2) < 5 * math.sqrt(rate ** 2 / n)
  other = ~np.asarray(dropout_keep_mask(jax.random.key(4), shape, rate)[0]).reshape(-1)
  assert abs(np.mean(drop & other) - rate ** 2) < 5 * math.sqrt(rate ** 2 / n)

  x = jnp.ones(shape)
  y = Dropout(rate).apply({}, x, False, rngs={"dropout": key})
  y = np.asarray(y).reshape(-1)  # the layer draws its own key from the "dropout" stream: same law, own mask
  np.testing.assert_allclose(y[y != 0], 1 / keep_prob, rtol=1e-6)
  assert abs(np.mean(y == 0) - rate) < 5 * sd
  assert Dropout(rate).apply({}, x, True) is x
  with pytest.raises(ValueError, match="rate must be in"):
    dropout_keep_mask(key, shape, 1.0)


def test_training_mode_drops_inside_the_stacks_and_inference_mode_does_not():
  """With dropout (the paper's 0.1), `deterministic=False` draws masks from the "dropout" stream: another key, other
  outputs; the same key, the same outputs; finite gradients. `deterministic=True` is the same function whatever the
  key (the test-sized GRDR configs train without dropout, so this is where the T5's training mode runs)."""
  cfg = dataclasses.replace(TINY, dropout_rate=0.1)
  model = T5(cfg)
  ids = jnp.asarray(np.random.default_rng(0).integers(1, 50, (2, 6)), jnp.int32)
  mask, dec = jnp.ones((2, 6), bool), ids[:, :4]
  params = jax.jit(model.init)(jax.random.PRNGKey(0), ids, mask, dec)

  @jax.jit
  def run(p, key):
    train = lambda q: model.apply(q, ids, mask, dec, deterministic=False, rngs={"dropout": key})  # noqa: E731
    return train(p), model.apply(p, ids, mask, dec, deterministic=True), jax.grad(lambda q: jnp.sum(train(q) ** 2))(p)

  a, eval_a, grads = run(params, jax.random.key(1))
  b, eval_b, _ = run(params, jax.random.key(2))
  np.testing.assert_array_equal(np.asarray(a), np.asarray(run(params, jax.random.key(1))[0]))
  np.testing.assert_array_equal(np.asarray(eval_a), np.asarray(eval_b))
  assert not np.allclose(np.asarray(a), np.asarray(b)) and not np.allclose(np.asarray(a), np.asarray(eval_a))
  assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))
