"""Dropout masks on a CPU: `jax.random.bernoulli` (threefry per element) against `ops.dropout_keep_mask` (a counter
hash), alone and inside the T5 training step GRDR's `rendered` / `world` variants run.

    python bench/dropout_mask.py [--batch 512] [--length 64] [--iters 5]

Rows: one masking of a [batch, length, 512] float32 tensor (the T5 feed-forward's hidden layer at d_ff 512), then
one jitted gradient of the T5 (d_model 128, 4 heads, d_ff 512, 2 + 2 layers, 4 decoder positions) with dropout 0.1
through `flax.linen.Dropout`'s threefry masks, through `models.layers.Dropout` (what `models/t5.py` uses), and
without dropout. Prints the machine, a float32 matmul rate measured in the same run (the machine's own limit, for
scale: masking is elementwise work, bound by memory and integer ops, not by the matmul rate), then median seconds
per call and each row's speed-up over its threefry row.
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

from vidjax.models import t5
from vidjax.ops import dropout_keep_mask


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

  def with_flax_dropout(p, key):  # flax's own Dropout in place of the project's: the T5 before the counter hash
    original, t5.Dropout = t5.Dropout, nn.Dropout
    try:
      return jax.grad(loss)(p, key)
    finally:
      t5.Dropout = original

  return jax.jit(with_flax_dropout if threefry else jax.grad(loss)), (params, jax.random.key(1))


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
  for name, rate, threefry in (("T5 step, flax Dropout (threefry)", 0.1, True),
                               ("T5 step, layers.Dropout (counter hash)", 0.1, False),
                               ("T5 step, no dropout", 0.0, False)):
    fn, fargs = t5_grad(args.batch, args.length, rate, threefry)
    rows.append((name, machine.timed(fn, *fargs, iters=args.iters)))
  flops = machine.matmul_flops_per_s()
  print(machine.describe())
  print(f"float32 matmul rate: {flops / 1e9:.1f} GFLOP/s; masks of {shape}, T5 batch {args.batch} x {args.length}")
  print("| what | seconds | vs threefry |")
  print("|---|---:|---:|")
  for i, (name, seconds) in enumerate(rows):
    base = rows[0][1] if i < 2 else rows[2][1]
    print(f"| {name} | {seconds:.3f} | {base / seconds:.2f}x |")


if __name__ == "__main__":
  main()
