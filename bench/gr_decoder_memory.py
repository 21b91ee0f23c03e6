"""The GR decoders' memory per query: a beam search's decoder steps and AVG's retriever step.

    python bench/gr_decoder_memory.py [--queries 512] [--beams 10] [--query-len 64]

`T5Decoder` takes the query encoder's memory [Q, L, d] for Q * W rows of its input (each query's W beams or IDs) and
reads it once per query in the cross-attention, instead of the memory repeated per row. At the real path's GR
baseline shapes (`configs/grdr_msrvtt.py:rendered`: T5 d_model 128, 2 + 2 layers, queries of 64 tokens, IDs of
4 x 256 codes + a collision code, AVG's 10 searched negatives, batch 512), this prints, with the device and its
float32 matmul rate:
  * the decoder over a 5-step beam search's prefixes (1..5 tokens, Q x W rows), memory per row vs per query, and the
    largest difference of their outputs;
  * AVG's retriever training step (`grdr_baselines.retriever_loss` with its `Ranking`: the beam search for its
    negatives, then teacher forcing over the own ID and the W searched ones), with XLA's FLOP count.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import machine  # bench/machine.py

import jax
import jax.numpy as jnp
import numpy as np

from vidjax.methods import grdr_baselines as GB
from vidjax.models.gr_baselines import IdRetrieverConfig, SemanticIdRetriever
from vidjax.models.t5 import T5Config, T5Decoder
from vidjax.retrieval.trie import SemanticIdTrie


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--queries", type=int, default=512, help="queries a step (the baselines' batch)")
  parser.add_argument("--beams", type=int, default=10, help="W: AVG's searched negatives (rank_beams)")
  parser.add_argument("--query-len", type=int, default=64, help="L: the query's tokens (model.query_len)")
  args = parser.parse_args()
  q, w, length = args.queries, args.beams, args.query_len
  t5 = T5Config(vocab_size=0, d_model=128, d_kv=32, num_heads=4, d_ff=512, encoder_layers=2, decoder_layers=2,
                dropout_rate=0.1)
  rng = np.random.default_rng(0)
  print(f"machine: {machine.describe()}; float32 matmul {machine.matmul_flops_per_s() / 1e9:.0f} GFLOP/s")

  memory = jnp.asarray(rng.normal(size=(q, length, t5.d_model)), jnp.float32)
  mask = jnp.ones((q, length), bool)
  decoder = T5Decoder(t5)
  params = decoder.init(jax.random.PRNGKey(0), jnp.zeros((1, 1, t5.d_model)), memory[:1], mask[:1])
  prefixes = [jnp.asarray(rng.normal(size=(q * w, m + 1, t5.d_model)), jnp.float32) for m in range(5)]
  per_row = jax.jit(lambda p, ys: [decoder.apply(p, y, jnp.repeat(memory, w, 0), jnp.repeat(mask, w, 0))[:, -1]
                                   for y in ys])
  per_query = jax.jit(lambda p, ys: [decoder.apply(p, y, memory, mask)[:, -1] for y in ys])
  a, b = per_row(params, prefixes), per_query(params, prefixes)
  diff = max(float(jnp.abs(x - y).max()) for x, y in zip(a, b))
  t_row = machine.timed(per_row, params, prefixes, iters=3)
  t_query = machine.timed(per_query, params, prefixes, iters=3)
  print(f"| what ({q} queries x {w} beams, memory of {length} tokens) | s | vs per row |")
  print("|---|---:|---:|")
  print(f"| decoder, 5 beam-search steps, memory per row | {t_row:.3f} | 1.00x |")
  print(f"| decoder, 5 beam-search steps, memory per query | {t_query:.3f} | {t_row / t_query:.2f}x |")
  print(f"(largest difference of the outputs: {diff:.1e})")

  sizes = (256, 256, 256, 256, 16)
  model = SemanticIdRetriever(IdRetrieverConfig(sizes=sizes, t5=t5, shared_vocab=False, prefix_adapter=False,
                                                query_encoder="t5", query_dim=64, query_tokens=4, vocab_size=8000))
  queries = jnp.asarray(rng.integers(1, 8000, size=(q, length)), jnp.int32)
  codes = np.concatenate([rng.integers(0, 256, size=(2000, 1, 4)), rng.integers(0, 16, size=(2000, 1, 1))], -1)
  trie = SemanticIdTrie([f"v{i}" for i in range(2000)], codes, 256)
  targets = jnp.asarray(trie.ids[rng.integers(0, len(trie.ids), size=q)], jnp.int32)
  rparams = jax.jit(model.init)(jax.random.PRNGKey(0), queries[:1], targets[:1])["params"]
  ranking = GB.Ranking(trie.arrays(), w, 1.0)
  step = jax.jit(jax.value_and_grad(lambda p, batch, r: GB.retriever_loss(model, p, batch, r, ranking)[0]))
  batch = {"query": queries, "codes": targets}
  flops = machine.flops_of(step.lower(rparams, batch, jax.random.PRNGKey(1)).compile())
  t_step = machine.timed(step, rparams, batch, jax.random.PRNGKey(1), iters=3)
  print(f"AVG retriever step ({q} queries, {w} searched negatives): {t_step:.2f} s, "
        f"{flops / 1e9:.0f} GFLOP (XLA), {flops / t_step / 1e9:.0f} GFLOP/s")


if __name__ == "__main__":
  main()
