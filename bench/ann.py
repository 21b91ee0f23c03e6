"""Every `DenseIndex` backend in one run: recall@10 against exact search, throughput and latency, build time, memory.

    python bench/ann.py [--sizes 100000,1000000] [--dim 256] [--data uniform,clustered] [--queries 256]
                        [--min-seconds 1] [--plot BENCHMARKS_ann.png] [--json rows.json]
                        [--backends jax,jax-bf16,sharded,approx,faiss,scann] [--memmap DIR] [--ivf-train 100000]

Per corpus size N and data set (uniform random unit vectors, where no ANN method can work, and clustered ones:
1,000 Gaussian centres with noise, like the neighbourhoods real embeddings have), every backend and parameter
setting below is built from the same vectors and asked the same queries (drawn like the corpus). Columns: recall@10
of its top-10 ids against the exact "jax" index's, queries per second at batch 1 and at batch 256, p50 / p99 latency
of a batch-1 query, build seconds (once per index: a sweep of search-time params reuses it), stored bytes per item, and the process's peak RSS after the build (it only grows:
compare each row with the previous one). faiss rows set `distance_compute_blas_threshold` explicitly (16) and say
so. A plot of recall against batch-256 QPS (ann-benchmarks style) is written with `--plot`.

The settings: vidjax exact (float32, bfloat16), sharded exact (every local device; one on a CPU), approx_max_k
(recall_target 0.95; exact on CPU), faiss Flat (exact), IVF-Flat and IVF-PQ over nprobe, HNSW over efSearch, and
ScaNN over leaves searched ("faiss" is faiss-flat, faiss-ivf, faiss-ivfpq and faiss-hnsw: name a subset for the
corpora where building HNSW takes too long). With `--memmap` each corpus is drawn block by block into a .npy on disk
and every index streams it from there (10M x 256 float32 is 10 GB: RAM holds it once, not twice). Everything runs in this one process on this one machine (the header names it and its
measured matmul rate).
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # faiss's spinning OpenMP threads starve XLA and BLAS otherwise
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import machine  # noqa: E402  (bench/machine.py)
from vidjax.retrieval.dense import DenseIndex  # noqa: E402


def data(kind: str, n: int, d: int, rng: np.random.Generator, centres: np.ndarray | None = None) -> np.ndarray:
  if kind == "uniform":
    x = rng.normal(size=(n, d)).astype(np.float32)
  else:
    x = centres[rng.integers(0, len(centres), n)] + 0.35 * rng.normal(size=(n, d)).astype(np.float32)
  return x / np.linalg.norm(x, axis=1, keepdims=True)


def memmap_data(path: Path, kind: str, n: int, d: int, centres: np.ndarray | None, block: int = 1 << 20) -> np.ndarray:
  """The corpus as a float32 .npy on disk, drawn block by block (`--memmap`: corpora larger than RAM wants twice);
  the indexes stream it from there."""
  if path.exists():
    out = np.load(path, mmap_mode="r")
    if out.shape == (n, d):
      return out
  out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
  for b, start in enumerate(range(0, n, block)):
    out[start:start + block] = data(kind, min(block, n - start), d, np.random.default_rng([1, b]), centres)
  out.flush()
  return np.load(path, mmap_mode="r")


FAISS = ("faiss-flat", "faiss-ivf", "faiss-ivfpq", "faiss-hnsw")  # "faiss" = all four


def settings(n: int, names: set[str], ivf_train: int = 100_000) -> list[tuple[str, dict, list[tuple[str, dict]]]]:
  """(label, DenseIndex kwargs, sweep) of every index built at corpus size n; the sweep's (label suffix, search
  params) are applied one after the other to the one built index (`DenseIndex.set_search_params`)."""
  nlist = int(4 * math.sqrt(n))
  if "faiss" in names:
    names = names | set(FAISS)
  one = [("", {})]
  out = []
  if "jax" in names:
    out.append(("vidjax exact f32", {}, one))
  if "jax-bf16" in names:
    out.append(("vidjax exact bf16", {"dtype": "bfloat16"}, one))
  if "sharded" in names:
    out.append((f"vidjax sharded exact ({len(jax.devices())} device{'s' * (len(jax.devices()) > 1)})",
                {"mesh": jax.sharding.Mesh(np.array(jax.devices()), ("data",))}, one))
  if "approx" in names:
    out.append(("approx_max_k 0.95", {"backend": "approx", "params": {"recall_target": 0.95}}, one))
  ivf = {"train_size": ivf_train}
  if "faiss-flat" in names:
    out.append(("faiss Flat", {"backend": "faiss", "params": {"factory": "Flat"}}, one))
  if "faiss-ivf" in names:
    out.append((f"faiss IVF{nlist},Flat", {"backend": "faiss", "params": {"factory": f"IVF{nlist},Flat", **ivf}},
                [(f" nprobe={p}", {"nprobe": p}) for p in (1, 4, 16, 64)]))
  if "faiss-ivfpq" in names:
    out.append((f"faiss IVF{nlist},PQ32", {"backend": "faiss", "params": {"factory": f"IVF{nlist},PQ32", **ivf}},
                [(f" nprobe={p}", {"nprobe": p}) for p in (4, 16, 64)]))
  if "faiss-hnsw" in names:
    out.append(("faiss HNSW32", {"backend": "faiss", "params": {"factory": "HNSW32"}},
                [(f" efSearch={ef}", {"efSearch": ef}) for ef in (16, 64, 256)]))
  if "scann" in names:
    leaves = int(math.sqrt(n))
    out.append((f"ScaNN leaves={leaves}", {"backend": "scann", "params": {"num_leaves": leaves, "reorder": 100}},
                [(f" search={s}", {"num_leaves_to_search": s})
                 for s in (max(1, leaves // 50), max(1, leaves // 20), max(1, leaves // 5))]))
  return out


def rss_gb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


def timed_search(index: DenseIndex, queries: np.ndarray, batch: int, min_seconds: float) -> tuple[float, list[float]]:
  """(queries per second at this batch size, per-call seconds)."""
  index.search(queries[:batch], 10)  # warm-up / compile
  times, done, start = [], 0, time.perf_counter()
  while time.perf_counter() - start < min_seconds or len(times) < 5:
    q = queries[(done * batch) % len(queries):][:batch]
    if len(q) < batch:
      q = queries[:batch]
    t = time.perf_counter()
    index.search(q, 10)
    times.append(time.perf_counter() - t)
    done += 1
  return batch * len(times) / sum(times), times


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sizes", default="100000,1000000")
  p.add_argument("--dim", type=int, default=256)
  p.add_argument("--data", default="uniform,clustered")
  p.add_argument("--queries", type=int, default=256)
  p.add_argument("--min-seconds", type=float, default=1.0)
  p.add_argument("--backends", default="jax,jax-bf16,sharded,approx,faiss,scann")
  p.add_argument("--plot", default="", help="write the recall vs QPS plot here (PNG)")
  p.add_argument("--json", default="", help="write every row here (JSON, rewritten after each row)")
  p.add_argument("--memmap", default="", help="a folder: keep each corpus there as a float32 .npy and stream it "
                 "(for corpora that do not fit in RAM twice, e.g. 10M x 256 = 10 GB)")
  p.add_argument("--ivf-train", type=int, default=100_000, help="training rows of the faiss IVF indexes")
  args = p.parse_args()
  header = (f"machine: {machine.describe()} | matmul {machine.matmul_flops_per_s() / 1e9:.0f} GFLOP/s f32 | "
            f"D={args.dim}, k=10, {args.queries} queries | faiss distance_compute_blas_threshold=16 in every faiss row")
  print(header)
  head = ("| N | data | index | recall@10 | QPS b=1 | QPS b=256 | p50 ms b=1 | p99 ms b=1 | build s | bytes/item | "
          "peak RSS GB |")
  print(head)
  print("|" + "---|" * (head.count("|") - 1))
  points, rows = [], []
  for n in (int(s) for s in args.sizes.split(",")):
    for kind in args.data.split(","):
      rng = np.random.default_rng(0)
      centres = rng.normal(size=(1000, args.dim)).astype(np.float32) if kind == "clustered" else None
      if args.memmap:
        corpus = memmap_data(Path(args.memmap) / f"corpus_{kind}_{n}_{args.dim}.npy", kind, n, args.dim, centres)
      else:
        corpus = data(kind, n, args.dim, rng, centres)
      queries = data(kind, args.queries, args.dim, rng, centres)
      ids = np.char.add("v", np.char.zfill(np.arange(n).astype(str), 9))
      plan = settings(n, set(args.backends.split(",")), args.ivf_train)
      truth = None
      if plan and plan[0][1]:  # no plain exact index first: the reference, before any other index holds memory
        truth = DenseIndex(ids, corpus).search(queries, 10)[0]
        gc.collect()
      for family, kw, sweep in plan:
        t = time.perf_counter()
        index = DenseIndex(ids, corpus, **kw)
        build = time.perf_counter() - t
        for suffix, search_params in sweep:
          label = family + suffix
          index.set_search_params(**search_params)
          got = index.search(queries, 10)[0]
          if truth is None:  # the first setting is the exact reference
            truth = got
          recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, truth)]))
          qps1, t1 = timed_search(index, queries, 1, args.min_seconds)
          qps256, _ = timed_search(index, queries, min(256, args.queries), args.min_seconds)
          row = (f"| {n:,} | {kind} | {label} | {recall:.3f} | {qps1:,.0f} | {qps256:,.0f} | "
                 f"{1e3 * np.percentile(t1, 50):.2f} | {1e3 * np.percentile(t1, 99):.2f} | {build:.1f} | "
                 f"{index.nbytes / n:.0f} | {rss_gb():.1f} |")
          print(row, flush=True)
          points.append((n, kind, label, recall, qps256))
          rows.append({"n": n, "data": kind, "index": label, "recall_at_10": recall, "qps_b1": qps1,
                       "qps_b256": qps256, "p50_ms_b1": 1e3 * np.percentile(t1, 50),
                       "p99_ms_b1": 1e3 * np.percentile(t1, 99), "build_s": build, "bytes_per_item": index.nbytes / n,
                       "peak_rss_gb": rss_gb(), "params": index.params, "machine": header})
          if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
        del index
        gc.collect()  # the index's device buffers now, not at the next cyclic collection (10M: 10 GB each)
  if args.plot:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    groups = sorted({(n, kind) for n, kind, *_ in points})
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4), squeeze=False)
    for ax, (n, kind) in zip(axes[0], groups):
      mine = [(label, r, q) for m, k, label, r, q in points if (m, k) == (n, kind)]
      family = lambda label: label.split(" nprobe=")[0].split(" efSearch=")[0].split(" search=")[0]  # noqa: E731
      for fam in dict.fromkeys(family(label) for label, _, _ in mine):
        pts = [(r, q) for label, r, q in mine if family(label) == fam]
        ax.plot([q for _, q in pts], [r for r, _ in pts], "o-", label=fam)
      ax.set_xscale("log")
      ax.set_xlabel("queries / s (batch 256)")
      ax.set_ylabel("recall@10")
      ax.set_title(f"N={n:,}, {kind}", fontsize=9)
      ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print("plot:", args.plot)


if __name__ == "__main__":
  main()
