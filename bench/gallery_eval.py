"""Gallery R@K evaluation in bounded memory: `vidjax.evaluate.evaluate_gallery` at scale.

    python bench/gallery_eval.py [--queries 10000] [--videos 10000] [--dim 512] [--query-chunk 1024]
                                 [--gallery-chunk 4096]

Random unit embeddings, 2 captions per video on average (so V2T has several relevant queries per
video), a dual-encoder `CosineScorer`. Prints the wall time of the whole evaluation (both
directions), the scoring FLOP/s against the device's float32 peak measured in the same process (a large matmul at
jax's default precision, the precision the scorer's float32 matmuls use: `machine.peaks`), the peak
resident memory of the process against what the naive protocol would need (a per-query copy of the
gallery `[Q, N, D]` float32, or the full score matrix `[Q, N]`), and the machine.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine  # noqa: E402  (bench/machine.py)
from vidjax import evaluate  # noqa: E402


def peak_rss_gb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--queries", type=int, default=10_000)
  p.add_argument("--videos", type=int, default=10_000)
  p.add_argument("--dim", type=int, default=512)
  p.add_argument("--query-chunk", type=int, default=1024)
  p.add_argument("--gallery-chunk", type=int, default=4096)
  args = p.parse_args()
  rng = np.random.default_rng(0)
  q, n, d = args.queries, args.videos, args.dim
  gallery = rng.normal(size=(n, d)).astype(np.float32)
  relevant = rng.integers(0, n, size=q)
  # Queries near their video, so the ranks are not all at chance.
  queries = (gallery[relevant] + 8.0 * rng.normal(size=(q, d))).astype(np.float32)
  rss_inputs = peak_rss_gb()

  scorer = evaluate.CosineScorer()
  start = time.perf_counter()
  out = evaluate.evaluate_gallery(scorer, {"text": queries}, {"candidates": gallery}, relevant,
                                  query_chunk=args.query_chunk, gallery_chunk=args.gallery_chunk)
  seconds = time.perf_counter() - start
  rss = peak_rss_gb()
  peak = machine.peaks(["float32"])
  matmul = peak["float32"]
  # Blocks scored: every block once for the counts, plus the blocks holding each query's relevant item.
  qb, gb = -(-q // args.query_chunk), -(-n // args.gallery_chunk)
  flops = 2.0 * d * args.query_chunk * args.gallery_chunk * qb * gb  # counting pass alone (lower bound)
  print(f"machine: {machine.describe()}")
  print(machine.peaks_line(peak))
  print(f"gallery R@K: {q} queries x {n} videos x {d} dims, blocks {args.query_chunk} x {args.gallery_chunk}")
  print("| Q | N | D | seconds | scoring GFLOP/s (counting pass) | of f32 peak | peak RSS GB | "
        "inputs GB | naive [Q,N,D] copy GB | [Q,N] scores GB | t2v R@1 | v2t R@1 |")
  print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
  print(f"| {q} | {n} | {d} | {seconds:.1f} | {flops / seconds / 1e9:.1f} | "
        f"{100 * flops / seconds / matmul:.1f}% ({matmul / 1e9:.0f} GFLOP/s) | {rss:.2f} | {rss_inputs:.2f} | "
        f"{4 * q * n * d / 2**30:.1f} | {4 * q * n / 2**30:.2f} | {out['t2v_r1']:.2f} | {out['v2t_r1']:.2f} |")


if __name__ == "__main__":
  main()
