"""Generative recall (trie-constrained beam search) against exact dense scoring, at batch 1, as the corpus grows.

    python bench/grdr_recall.py [--sizes 1000,10000,100000,1000000] [--dim 768] [--views 4] [--layers 3]
                                [--codes 128] [--beam 100] [--candidates 150] [--queries 100] [--dense-max 1000000]

Synthetic semantic IDs are enough for the scaling curve (the issue says so): every video gets
`--views` IDs of `--layers` uniform random codes in [0, `--codes`), and the dense side indexes random
unit vectors of `--dim` (VideoPrism-LvT's 768 by default) with `vidjax.retrieval.DenseIndex` (float32,
top 10). The generative side's decoder is a stand-in of fixed cost: per step, the query embedding
plus the prefix codes' embeddings through a 2-layer MLP (width 512), then cosine with that layer's
codebook / tau (GRDR's eq. 8 head). A T5-small decoder costs more per step but, like the stand-in,
the same at every corpus size; what this bench measures is what grows with the corpus: the trie
tables, the masked top-k, the ID -> video map.

Per size it reports ms/query at batch 1 (median over `--queries` queries after a warm-up): decoding
(the jitted beam search, W = `--beam`), ID -> video (de-duplication in beam order, at most
`--candidates` videos), their sum, and dense; the GR / dense ratio; index bytes per video for both
(GR: the int16 codes, the trie's tables and the ID -> video map; dense: float32 vectors); the mean
number of candidates; the device's limits measured in the same run (`machine.limits_line`: a large float32
matmul at jax's default precision and a memory copy) and the dense row's corpus bytes streamed per second as a
fraction of that copy (a batch-1 query is a matrix-vector product, bound by memory; a corpus that fits the cache
can exceed 100%). The GR curve should stay flat (<= 1.2x from the smallest to the largest
corpus) and cross below dense at some size.
"""
from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import machine  # noqa: E402  (bench/machine.py)
from vidjax.retrieval.dense import DenseIndex  # noqa: E402
from vidjax.retrieval.trie import SemanticIdTrie, beam_search  # noqa: E402

WIDTH = 512
TAU = 0.07


def make_params(rng: np.random.Generator, dim: int, layers: int, codes: int) -> dict:
  g = lambda *s: jnp.asarray(rng.normal(size=s) / np.sqrt(s[-2] if len(s) > 1 else 1), jnp.float32)  # noqa: E731
  return {"code_emb": g(layers, codes, dim), "w1": g(dim, WIDTH), "w2": g(WIDTH, WIDTH),
          "codebook": g(layers, codes, WIDTH)}


def logp_fn(params, queries, prefix):
  """The stand-in decoder step: [Q, D] queries, [Q, W, m] prefixes -> log P(code m) [Q, W, K]."""
  m = prefix.shape[-1]
  h = jnp.broadcast_to(queries[:, None, :], prefix.shape[:2] + queries.shape[-1:])
  for l in range(m):
    h = h + params["code_emb"][l][prefix[..., l]]
  h = jax.nn.gelu(h @ params["w1"])
  h = jax.nn.gelu(h @ params["w2"])
  book = params["codebook"][m]
  cos = (h / jnp.linalg.norm(h, axis=-1, keepdims=True)) @ (book / jnp.linalg.norm(book, axis=-1, keepdims=True)).T
  return jax.nn.log_softmax(cos / TAU, axis=-1)


def median_ms(fn, inputs) -> float:
  fn(inputs[0])
  times = []
  for x in inputs:
    t = time.perf_counter()
    fn(x)
    times.append(time.perf_counter() - t)
  return 1e3 * float(np.median(times))


def bench_size(n: int, args, params, queries) -> dict:
  rng = np.random.default_rng(n)
  codes = rng.integers(0, args.codes, size=(n, args.views, args.layers), dtype=np.int16)
  ids = np.char.add("v", np.char.zfill(np.arange(n).astype(str), 8))
  t = time.perf_counter()
  trie = SemanticIdTrie(ids, codes, args.codes)
  arrays = trie.arrays()
  build = time.perf_counter() - t
  search = functools.partial(beam_search, logp_fn, arrays, params, width=args.beam, depth=args.layers)
  leaves_of = {}

  def decode(i):
    _, leaves, _ = search(queries[i:i + 1])
    leaves_of[i] = np.asarray(leaves[0])

  decode_ms = median_ms(decode, range(len(queries)))
  map_ms = median_ms(lambda i: trie.videos_in_order(leaves_of[i], limit=args.candidates), range(len(queries)))
  sizes = [len(trie.videos_in_order(leaves_of[i], limit=args.candidates)) for i in range(len(queries))]
  dense_ms, dense_bytes = float("nan"), float("nan")
  if n <= args.dense_max:  # a float32 [N, dim] corpus: 30 GB at 10M x 768, beyond this machine
    corpus = rng.standard_normal((n, args.dim), dtype=np.float32)
    index = DenseIndex(ids, corpus)
    del corpus
    dense_q = rng.standard_normal((len(queries), args.dim), dtype=np.float32)
    dense_ms = median_ms(lambda i: index.search(dense_q[i:i + 1], 10), range(len(queries)))
    dense_bytes = index.nbytes / n
  out = {"n": n, "decode": decode_ms, "map": map_ms, "gr": decode_ms + map_ms, "dense": dense_ms,
         "gr_bytes": trie.nbytes / n, "dense_bytes": dense_bytes, "candidates": float(np.mean(sizes)),
         "build": build}
  return out


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sizes", default="1000,10000,100000,1000000")
  p.add_argument("--dim", type=int, default=768, help="dense embedding size and query embedding size")
  p.add_argument("--views", type=int, default=4)
  p.add_argument("--layers", type=int, default=3)
  p.add_argument("--codes", type=int, default=128)
  p.add_argument("--beam", type=int, default=100)
  p.add_argument("--candidates", type=int, default=150)
  p.add_argument("--queries", type=int, default=100)
  p.add_argument("--dense-max", type=int, default=1_000_000, help="largest N with a dense column (memory)")
  args = p.parse_args()
  print(f"# GR recall vs dense at batch 1 | {machine.describe()}")
  line, limits = machine.limits_line(("float32",))
  print(f"# {line}")
  print(f"# N_v={args.views} M={args.layers} K={args.codes} beam={args.beam} candidates<={args.candidates} "
        f"dense dim={args.dim} float32 top-10 | synthetic IDs and vectors")
  rng = np.random.default_rng(0)
  params = make_params(rng, args.dim, args.layers, args.codes)
  queries = jnp.asarray(rng.standard_normal((args.queries, args.dim)), jnp.float32)
  rows = [bench_size(int(n), args, params, queries) for n in args.sizes.split(",")]
  print("\n| N | GR decode ms | GR ID->video ms | GR total ms | dense ms | GR / dense | GR vs smallest N | "
        "candidates | bytes/video GR, dense | trie build s | dense GB/s (% of copy) |")
  print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
  for r in rows:
    dense_rate = r["n"] * r["dense_bytes"] / (r["dense"] / 1e3)  # the corpus streamed once per query
    print(f"| {r['n']:,} | {r['decode']:.2f} | {r['map']:.3f} | {r['gr']:.2f} | {r['dense']:.2f} | "
          f"{r['gr'] / r['dense']:.2f}x | {r['gr'] / rows[0]['gr']:.2f}x | {r['candidates']:.0f} | "
          f"{r['gr_bytes']:.0f}, {r['dense_bytes']:.0f} | {r['build']:.1f} | "
          f"{dense_rate / 1e9:.1f} ({dense_rate / limits['copy']:.0%}) |")
  cross = next((r["n"] for r in rows if r["gr"] < r["dense"]), None)
  print(f"\nGR latency {rows[-1]['gr'] / rows[0]['gr']:.2f}x from N={rows[0]['n']:,} to N={rows[-1]['n']:,}; "
        + (f"below dense from N={cross:,}" if cross else "never below dense at these sizes"))


if __name__ == "__main__":
  main()
