"""Dropout masks on a CPU: `jax.random.bernoulli` (threefry per element) against `ops.dropout_keep_mask` (a counter
hash), alone and inside the training steps of the two towers that drop out the most: GRDR's T5 and VEDJE's joint BERT.

    python bench/dropout_mask.py [--batch 512] [--length 64] [--iters 5]

Rows: one masking of a [batch, length, 512] float32 tensor (the T5 feed-forward's hidden layer at d_ff 512); one
jitted gradient of the T5 GRDR's `rendered` / `world` variants run (d_model 128, 4 heads, d_ff 512, 2 + 2 layers,
4 decoder positions) and one of the joint encoder VEDJE's `rendered` variant runs (BERT layers at d_l 64, 4 heads,
MLP 256, 2 layers; 32 queries x 8 candidates, 64 text + 64 cache tokens), each with dropout 0.1 through
`flax.linen.Dropout`'s threefry masks, through `models.layers.Dropout` (what `models/t5.py` and `models/bert.py` use),
and without dropout. Prints the device and its limits measured in the same run (`machine.limits_line`: a large
float32 matmul at jax's default precision and a memory copy), then median seconds per call, each row's speed-up over
its threefry row and, for the two mask rows (elementwise work, bound by memory and integer ops, not by the matmul
rate), the bytes read and written per second as a fraction of the measured copy bandwidth.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import machine  # bench/machine.py

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidjax.models import bert, t5
from vidjax.ops import dropout_keep_mask


def with_flax_dropout(module, fn):
  """`fn` with `module.Dropout` swapped for flax's own (threefry masks) while it traces: the model before the hash."""
  def swapped(*args):
    original, module.Dropout = module.Dropout, nn.Dropout
    try:
      return fn(*args)
    finally:
      module.Dropout = original
  return swapped


def t5_grad(batch: int, length: int, rate: float, threefry: bool):
  """The jitted gradient of a mean-square loss through the T5, and its arguments."""
  config = t5.T5Config(vocab_size=1000, d_model=128, num_heads=4, d_kv=32, d_ff=512, encoder_layers=2,
                       decoder_layers=2, dropout_rate=rate)
  model = t5.T5(config)
  ids, mask = jnp.ones((batch, length), jnp.int32), jnp.ones((batch, length), bool)
  dec = jnp.ones((batch, 4), jnp.int32)
  params = model.init(jax.random.key(0), ids, mask, dec)

  def loss(p, key):
    return jnp.mean(model.apply(p, ids, mask, dec, deterministic=False, rngs={"dropout": key}) ** 2)

  grad = jax.grad(loss)
  return jax.jit(with_flax_dropout(t5, grad) if threefry else grad), (params, jax.random.key(1))


class JointLayers(nn.Module):
  """VEDJE's joint encoder body: `bert.BertLayer`s over the [text; cache] tokens."""
  config: bert.BertConfig

  @nn.compact
  def __call__(self, x, mask, deterministic: bool):
    for i in range(self.config.num_layers):
      x = bert.BertLayer(self.config, name=f"layer_{i}")(x, mask, deterministic)
    return x


def bert_grad(rate: float, threefry: bool, pairs: int = 32 * 8, tokens: int = 64 + 64):
  """The jitted gradient of a mean-square loss through VEDJE's `rendered` joint encoder, and its arguments."""
  config = bert.BertConfig(vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256,
                           dropout_rate=rate, attention_dropout_rate=rate)
  model = JointLayers(config)
  x, mask = jnp.ones((pairs, tokens, 64), jnp.float32), jnp.ones((pairs, tokens), bool)
  params = model.init(jax.random.key(0), x, mask, True)

  def loss(p, key):
    return jnp.mean(model.apply(p, x, mask, False, rngs={"dropout": key}) ** 2)

  grad = jax.grad(loss)
  return jax.jit(with_flax_dropout(bert, grad) if threefry else grad), (params, jax.random.key(1))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batch", type=int, default=512)
  parser.add_argument("--length", type=int, default=64)
  parser.add_argument("--iters", type=int, default=5)
  args = parser.parse_args()
  shape = (args.batch, args.length, 512)
  x = jnp.ones(shape, jnp.float32)
  key = jax.random.key(0)

  @jax.jit
  def threefry_mask(key, x):
    return jnp.where(jax.random.bernoulli(key, 0.9, x.shape), x / 0.9, 0.0)

  @jax.jit
  def hash_mask(key, x):
    keep, p = dropout_keep_mask(key, x.shape, 0.1)
    return jnp.where(keep, x / p, 0.0)

  rows = [("mask, jax.random.bernoulli (threefry)", machine.timed(threefry_mask, key, x, iters=args.iters)),
          ("mask, ops.dropout_keep_mask (counter hash)", machine.timed(hash_mask, key, x, iters=args.iters))]
  for model, step in (("T5", lambda rate, threefry: t5_grad(args.batch, args.length, rate, threefry)),
                      ("VEDJE joint BERT", bert_grad)):
    for name, rate, threefry in ((f"{model} step, flax Dropout (threefry)", 0.1, True),
                                 (f"{model} step, layers.Dropout (counter hash)", 0.1, False),
                                 (f"{model} step, no dropout", 0.0, False)):
      fn, fargs = step(rate, threefry)
      rows.append((name, machine.timed(fn, *fargs, iters=args.iters)))
  line, limits = machine.limits_line(("float32",))
  print(machine.describe())
  print(f"{line}; masks of {shape}, T5 batch {args.batch} x {args.length}")
  print("| what | seconds | vs threefry | GB/s read + written (% of copy) |")
  print("|---|---:|---:|---:|")
  for i, (name, seconds) in enumerate(rows):
    base = rows[0][1] if i < 2 else rows[2 + 3 * ((i - 2) // 3)][1]
    rate = 2 * x.nbytes / seconds  # a mask row reads x and writes the masked x
    bw = f"{rate / 1e9:.1f} ({rate / limits['copy']:.0%})" if i < 2 else ""
    print(f"| {name} | {seconds:.3f} | {base / seconds:.2f}x | {bw} |")


if __name__ == "__main__":
  main()
