"""Every `DenseIndex` backend in one run: recall@10 against exact search, throughput and latency, build time, memory,
the device's floor and a PyTorch peer on the same device.

    python bench/ann.py [--sizes 100000,1000000 | --n 10000000] [--dim 256] [--data uniform,clustered]
                        [--queries 256] [--batch 256] [--min-seconds 1] [--chunk N[,N...]] [--kernel auto[,xla,...]]
                        [--block B[,B...]] [--plot BENCHMARKS_ann.png] [--json rows.json]
                        [--backends jax,jax-bf16,sharded,approx,faiss,scann,torch] [--memmap DIR] [--ivf-train 100000]

Per corpus size N and data set (uniform random unit vectors, where no ANN method can work, and clustered ones:
1,000 Gaussian centres with noise, like the neighbourhoods real embeddings have), every backend and parameter
setting below is built from the same vectors and asked the same queries (drawn like the corpus). Columns: recall@10
of its top-10 ids against the exact "jax" index's, queries per second at batch 1 and at batch `--batch` (256), p50 /
p99 latency of a batch-1 query, build seconds (once per index: a sweep of search-time params reuses it), stored bytes
per item, and the process's peak RSS after the build (it only grows: compare each row with the previous one). faiss
rows set `distance_compute_blas_threshold` explicitly (16) and say so. A plot of recall against batch-256 QPS
(ann-benchmarks style) is written with `--plot`.

The floor (exact rows): an exact search of a batch of B queries reads the stored rows once and does 2 B N D FLOPs. The
read is measured on the index's own stored array, in the same run (`read_floor_ms`: the fastest call of a
max-reduction over it and of its product with one vector), so it is a time the search cannot beat (the search reads the
same bytes and does more); the FLOPs are divided by the fastest large matmul measured in the storage's dtype
(bench/machine.py `limits_line`, and once more beside each read: `peak_flops`; for float32 the faster of jax's default
and HIGHEST: TF32 on a GPU, which the fused kernel's candidate pass may use). The floor is the larger of the two
times, and "x floor" is the median search time over it (>= 1 up to timing noise). The copy bandwidth of the limits
line is printed, not used: a copy writes as much as it reads, so a read-only search beat it (0.3 "x floor" at batch 1
before issue 63).

Sweeps: `--chunk` (a list) builds the JAX indexes at each chunk size; `--kernel` (a list of `DenseIndex` kernels:
auto, xla, pallas; pallas on a CPU runs in interpret mode, for small corpora only) and `--block` (rows per block
maximum of the fused kernel, `vidjax.retrieval.dense.FUSED_BLOCK`) search each built index with each program; the row
label names what ran. "jax-bf16" gives two rows from one bfloat16 index: plain, and re-ranked by the float32 rows
("+ f32 rescore", `params={"rescore": True}`: the bfloat16 top 2k re-ranked on the host), whose recall@10 the issue's
goal (>= 0.99) is about. The PyTorch peer ("torch", only when torch is importable, never a
dependency; rows say n/a otherwise): the same stored rows as a torch tensor on the same device (float32 and
bfloat16), `torch.matmul` of a query batch with each chunk of `--torch-chunk` rows (2M), `torch.topk` per chunk and a
merge of the running best; float32 without TF32, bfloat16 scores upcast to float32 before the top-k. Its row gives
its recall and q/s and "vidjax / torch": the q/s ratio of the vidjax exact index with the same storage dtype.

The settings: vidjax exact (float32, bfloat16), sharded exact (every local device; one on a CPU), approx_max_k
(recall_target 0.95; exact on CPU), faiss Flat (exact), IVF-Flat and IVF-PQ over nprobe, HNSW over efSearch, and
ScaNN over leaves searched ("faiss" is faiss-flat, faiss-ivf, faiss-ivfpq and faiss-hnsw: name a subset for the
corpora where building HNSW takes too long). With `--memmap` each corpus is drawn block by block into a .npy on disk
and every index streams it from there (10M x 256 float32 is 10 GB: RAM holds it once, not twice). Everything runs in
this one process on this one machine (the header names it and its measured limits).

On a GPU, the 10M rows of issue 49 (launch/gpu_check.sh): `python bench/ann.py --n 10000000 --dim 256 --data
clustered --backends jax,jax-bf16,torch --min-seconds 0.5`.
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
# JAX takes 75% of a GPU's memory at start-up by default, which would leave the torch peer none.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import machine  # noqa: E402  (bench/machine.py)
from vidjax.retrieval import dense  # noqa: E402
from vidjax.retrieval.dense import DenseIndex  # noqa: E402


def data(kind: str, n: int, d: int, rng: np.random.Generator, centres: np.ndarray | None = None,
         block: int = 1 << 18) -> np.ndarray:
  """float32 [n, d] unit vectors, drawn in float32 blocks (10M x 256 in seconds, no float64 copy)."""
  x = np.empty((n, d), np.float32)
  for s in range(0, n, block):
    b = x[s:s + block]
    rng.standard_normal(b.shape, dtype=np.float32, out=b)
    if kind != "uniform":
      b *= 0.35
      b += centres[rng.integers(0, len(centres), len(b))]
    b /= np.linalg.norm(b, axis=1, keepdims=True)
  return x


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


def settings(n: int, names: set[str], ivf_train: int = 100_000, chunks=(None,), kernels=("auto",),
             blocks=(None,)) -> list[tuple[str, dict, list[tuple[str, dict]]]]:
  """(label, DenseIndex kwargs, sweep) of every index built at corpus size n; the sweep's (label suffix, search
  params) are applied one after the other to the one built index (`DenseIndex.set_search_params`; the keys "_kernel",
  "_block" and "_rescore" are the bench's own: `apply`)."""
  nlist = int(4 * math.sqrt(n))
  if "faiss" in names:
    names = names | set(FAISS)
  one = [("", {})]
  out = []
  programs = [(f" [{kern}{'' if b is None else f', block {b}'}]", {"_kernel": kern, "_block": b})
              for kern in kernels for b in (blocks if kern != "xla" else (None,))]
  if len(programs) == 1 and programs[0][1] == {"_kernel": "auto", "_block": None}:
    programs = [("", {"_kernel": "auto", "_block": None})]
  for chunk in chunks:
    at = "" if len(chunks) == 1 else f" (chunk {chunk or 'default'})"
    if "jax" in names:
      out.append(("vidjax exact f32" + at, {"chunk": chunk}, programs))
    if "jax-bf16" in names:
      out.append(("vidjax exact bf16" + at, {"chunk": chunk, "dtype": "bfloat16", "params": {"rescore": True}},
                  [(suffix, {**sp, "_rescore": r}) for r in (False, True) for suffix, sp in
                   [(("" if not r else " + f32 rescore") + x, y) for x, y in programs]]))
    if "sharded" in names:
      out.append((f"vidjax sharded exact ({len(jax.devices())} device{'s' * (len(jax.devices()) > 1)})" + at,
                  {"chunk": chunk, "mesh": jax.sharding.Mesh(np.array(jax.devices()), ("data",))}, programs))
    if "approx" in names:
      out.append(("approx_max_k 0.95" + at, {"chunk": chunk, "backend": "approx", "params": {"recall_target": 0.95}},
                  one))
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


class TorchPeer:
  """The PyTorch peer of an exact index: unit rows `[N, D]` as one torch tensor on `device` in `dtype`; a search is
  `torch.matmul` of the query batch with each chunk of `chunk` rows, `torch.topk` per chunk, and a merge (`cat` +
  `topk`) into the running best."""

  def __init__(self, torch, corpus: np.ndarray, dtype: str, device: str, chunk: int):
    self.torch, self.device, self.chunk = torch, device, chunk
    self.dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    if device == "cuda":  # float32 at full precision, as vidjax's HIGHEST (torch's default for matmul, stated here)
      torch.backends.cuda.matmul.allow_tf32 = False
    block = 1 << 20  # host to device a block at a time: no second host copy in the storage dtype
    self.rows = torch.empty(corpus.shape, dtype=self.dtype, device=device)
    for s in range(0, len(corpus), block):
      self.rows[s:s + block] = torch.from_numpy(np.ascontiguousarray(corpus[s:s + block])).to(device, self.dtype)
    self.nbytes = self.rows.element_size() * self.rows.nelement()

  def search(self, queries: np.ndarray, k: int) -> np.ndarray:
    """[Q, D] -> top-k positions int64 [Q, k] (on the host, so the timing includes the device's work)."""
    torch = self.torch
    with torch.inference_mode():
      q = torch.from_numpy(queries).to(self.device)
      q = (q / q.norm(dim=1, keepdim=True)).to(self.dtype)
      best_s = best_i = None
      for start in range(0, self.rows.shape[0], self.chunk):
        s = torch.matmul(q, self.rows[start:start + self.chunk].T).float()
        top_s, top_i = torch.topk(s, min(k, s.shape[1]), dim=1)
        top_i = top_i + start
        if best_s is not None:
          top_s, sel = torch.topk(torch.cat([best_s, top_s], 1), k, dim=1)
          top_i = torch.gather(torch.cat([best_i, top_i], 1), 1, sel)
        best_s, best_i = top_s, top_i
      return best_i.cpu().numpy()


def torch_device(torch) -> str | None:
  """The torch device that is JAX's default device's kind ("cuda", "cpu"), None where torch has none (a TPU)."""
  platform = jax.devices()[0].platform
  if platform == "gpu":
    return "cuda" if torch.cuda.is_available() else None
  return "cpu" if platform == "cpu" else None


def apply(index, params: dict) -> dict:
  """Sets a sweep step's bench-only keys on a built JAX index (the program: `_kernel`, `_block`; bfloat16 re-ranking
  by float32 rows: `_rescore`, on an index built with it) and returns the library's own search params."""
  params = dict(params)
  if "_kernel" in params:
    kernel = params.pop("_kernel")
    index._backend.kernel = kernel
    index._backend.kernel_used = dense.resolve_kernel(kernel, index._backend.platform)
  if "_block" in params:
    block = params.pop("_block")
    if block is None:
      dense.FUSED_BLOCK.pop(index._backend.platform, None)
    else:
      dense.FUSED_BLOCK[index._backend.platform] = block
  if "_rescore" in params:
    index._backend.rescore = params.pop("_rescore")
  return params


def read_floor_ms(index, repeats: int = 9) -> float:
  """The time of one read of the index's stored array on its device (ms): the fastest of `repeats` calls (after a
  warm-up) of a max-reduction over every element and of a product of every row with one vector (on a busy shared
  machine the fastest call is the one least slowed down: a floor)."""
  stored = index._backend._stored
  d = stored.shape[-1]
  v = jax.device_put(np.ones((d,), np.float32)).astype(stored.dtype)
  reads = [jax.jit(lambda a: jnp.max(a, axis=(0, 1))),
           jax.jit(lambda a, w: jnp.einsum("lcd,d->lc", a, w, preferred_element_type=jnp.float32))]
  best = math.inf
  for fn, args in zip(reads, ((stored,), (stored, v))):
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
      t = time.perf_counter()
      jax.block_until_ready(fn(*args))
      times.append(time.perf_counter() - t)
    best = min(best, min(times))
  return 1e3 * best


def rss_gb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


def timed_search(index, queries: np.ndarray, batch: int, min_seconds: float) -> tuple[float, list[float]]:
  """(queries per second at this batch size, per-call seconds) of `index.search(queries, 10)`."""
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


def peak_flops(dtype: str, limits: dict) -> float:
  """The fastest large matmul measured in `dtype` in this run: the limits line's and one more measured now, beside
  the read (the larger: a busy moment during one measurement must not raise the floor); float32 at jax's default
  precision too (TF32 on a GPU)."""
  if dtype == "bfloat16":
    return max(limits["matmul_bfloat16"], machine.peak_matmul_flops_per_s("bfloat16"))
  return max(limits["matmul_float32"], limits.get("matmul_float32_highest", 0.0),
             machine.peak_matmul_flops_per_s("float32"))


def floor_ms(n: int, d: int, batch: int, read_ms: float, peak: float) -> float:
  """The floor of one exact search of `batch` queries over n x d stored rows: the larger of the measured read of the
  stored array (`read_floor_ms`) and 2 batch n d FLOPs at `peak` (`peak_flops`)."""
  return max(read_ms, 1e3 * 2.0 * batch * n * d / peak)


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sizes", default="100000,1000000")
  p.add_argument("--n", type=int, default=0, help="one corpus size (overrides --sizes), e.g. 10000000")
  p.add_argument("--dim", type=int, default=256)
  p.add_argument("--data", default="uniform,clustered")
  p.add_argument("--queries", type=int, default=256)
  p.add_argument("--batch", type=int, default=256, help="the large query batch (the other is 1)")
  p.add_argument("--min-seconds", type=float, default=1.0)
  p.add_argument("--chunk", default="", help="DenseIndex chunk of the JAX indexes, or a comma-separated sweep "
                 "(default: per platform, vidjax.retrieval.dense.DEFAULT_CHUNK)")
  p.add_argument("--kernel", default="auto", help="the JAX indexes' search programs, comma-separated: auto, xla, "
                 "pallas (vidjax.retrieval.dense.KERNELS; pallas on a CPU is interpret mode, slow)")
  p.add_argument("--block", default="", help="rows per block maximum of the fused kernel, comma-separated (default: "
                 "vidjax.retrieval.fused.BLOCK per platform)")
  p.add_argument("--torch-chunk", type=int, default=1 << 21, help="rows per torch.matmul of the PyTorch peer")
  p.add_argument("--backends", default="jax,jax-bf16,sharded,approx,faiss,scann,torch")
  p.add_argument("--plot", default="", help="write the recall vs QPS plot here (PNG)")
  p.add_argument("--json", default="", help="write every row here (JSON, rewritten after each row)")
  p.add_argument("--memmap", default="", help="a folder: keep each corpus there as a float32 .npy and stream it "
                 "(for corpora that do not fit in RAM twice, e.g. 10M x 256 = 10 GB)")
  p.add_argument("--ivf-train", type=int, default=100_000, help="training rows of the faiss IVF indexes")
  args = p.parse_args()
  names = set(args.backends.split(","))
  batch = min(args.batch, args.queries)
  torch = None
  if "torch" in names:
    try:
      import torch  # noqa: F811  pylint: disable=g-import-not-at-top
    except ImportError:
      torch = None
  tdev = torch_device(torch) if torch is not None else None
  limits_text, limits = machine.limits_line()
  header = (f"machine: {machine.describe()} | {limits_text} | D={args.dim}, k=10, {args.queries} queries, batches 1 "
            f"and {batch} | DenseIndex chunk {args.chunk or 'default'}, kernel {args.kernel}"
            f"{', block ' + args.block if args.block else ''} | faiss distance_compute_blas_threshold=16 in "
            f"every faiss row | torch: " + (f"{torch.__version__} on {tdev}, chunks of {args.torch_chunk:,} rows"
                                          if tdev else "n/a (not installed)" if torch is None else
                                          "n/a (no torch device for this platform)"))
  print(header)
  head = (f"| N | data | index | recall@10 | QPS b=1 | QPS b={batch} | p50 ms b=1 | p99 ms b=1 | build s | "
          f"bytes/item | peak RSS GB | floor ms b=1 | floor ms b={batch} | x floor b=1 | x floor b={batch} | "
          f"vidjax / torch b=1 | vidjax / torch b={batch} |")
  print(head)
  print("|" + "---|" * (head.count("|") - 1))
  points, rows = [], []

  def emit(row: dict) -> None:
    cell = lambda v, f: "-" if v is None else ("n/a" if v == "n/a" else format(v, f))  # noqa: E731
    print(f"| {row['n']:,} | {row['data']} | {row['index']} | {cell(row['recall_at_10'], '.3f')} | "
          f"{cell(row['qps_b1'], ',.0f')} | {cell(row['qps_b'], ',.0f')} | {cell(row['p50_ms_b1'], '.2f')} | "
          f"{cell(row['p99_ms_b1'], '.2f')} | {cell(row['build_s'], '.1f')} | {cell(row['bytes_per_item'], '.0f')} | "
          f"{rss_gb():.1f} | {cell(row['floor_ms_b1'], '.3g')} | {cell(row['floor_ms_b'], '.3g')} | "
          f"{cell(row['x_floor_b1'], '.1f')} | {cell(row['x_floor_b'], '.1f')} | {cell(row['vs_torch_b1'], '.2f')} | "
          f"{cell(row['vs_torch_b'], '.2f')} |", flush=True)
    rows.append(row | {"batch": batch, "peak_rss_gb": rss_gb(), "machine": header, "limits": limits})
    if args.json:
      Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")

  sizes = [args.n] if args.n else [int(s) for s in args.sizes.split(",")]
  for n in sizes:
    for kind in args.data.split(","):
      rng = np.random.default_rng(0)
      centres = rng.normal(size=(1000, args.dim)).astype(np.float32) if kind == "clustered" else None
      if args.memmap:
        corpus = memmap_data(Path(args.memmap) / f"corpus_{kind}_{n}_{args.dim}.npy", kind, n, args.dim, centres)
      else:
        corpus = data(kind, n, args.dim, rng, centres)
      queries = data(kind, args.queries, args.dim, rng, centres)
      ids = np.char.add("v", np.char.zfill(np.arange(n).astype(str), 9))
      chunks = [int(c) for c in args.chunk.split(",")] if args.chunk else [None]
      plan = settings(n, names, args.ivf_train, chunks, args.kernel.split(","),
                      [int(b) for b in args.block.split(",")] if args.block else [None])
      # The reference: the exact float32 index's XLA program (full float32 products, no candidate pass), taken from
      # the first index when it is that one, else built first, before any other index holds memory.
      truth = None
      if not (plan and plan[0][0].startswith("vidjax exact f32")):
        truth = DenseIndex(ids, corpus, chunk=chunks[0], kernel="xla").search(queries, 10)[0]
        gc.collect()
      exact_qps = {}  # storage dtype -> (QPS b=1, QPS b=batch) of the first vidjax exact single-device row
      reads = {}  # storage dtype -> the measured read of a stored array (ms): the floor of the torch rows too
      for family, kw, sweep in plan:
        t = time.perf_counter()
        index = DenseIndex(ids, corpus, **kw)
        build = time.perf_counter() - t
        if truth is None:
          apply(index, {"_kernel": "xla"})
          truth = index.search(queries, 10)[0]
        if index.exact and index.backend == "jax":  # its floor's two terms, measured now (`floor_ms`)
          reads[index.dtype] = (read_floor_ms(index), peak_flops(index.dtype, limits))
        for suffix, search_params in sweep:
          label = family + suffix
          index.set_search_params(**(apply(index, search_params) if index.backend in ("jax", "approx")
                                     else search_params))
          if index.kernel is not None:
            label += f" [{index.kernel}]" if "[" not in label else ""
          got = index.search(queries, 10)[0]
          recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, truth)]))
          qps1, t1 = timed_search(index, queries, 1, args.min_seconds)
          qpsb, tb = timed_search(index, queries, batch, args.min_seconds)
          floor = {}
          dtype = index.dtype if index.backend == "jax" else "float32"
          if index.exact and index.backend in ("jax", "faiss") and dtype in reads:
            floor = {b: floor_ms(n, args.dim, b, *reads[dtype]) for b in (1, batch)}
            if family.startswith("vidjax exact") and not getattr(index._backend, "rescore", False):
              exact_qps.setdefault(dtype, (qps1, qpsb))
          med = lambda ts: 1e3 * float(np.median(ts))  # noqa: E731
          emit({"n": n, "data": kind, "index": label, "recall_at_10": recall, "qps_b1": qps1, "qps_b": qpsb,
                "p50_ms_b1": 1e3 * np.percentile(t1, 50), "p99_ms_b1": 1e3 * np.percentile(t1, 99), "build_s": build,
                "bytes_per_item": index.nbytes / n, "params": index.params, "kernel": index.kernel,
                "read_ms": reads.get(dtype, (None,))[0],
                "floor_ms_b1": floor.get(1), "floor_ms_b": floor.get(batch),
                "x_floor_b1": med(t1) / floor[1] if floor else None,
                "x_floor_b": med(tb) / floor[batch] if floor else None, "vs_torch_b1": None, "vs_torch_b": None})
          points.append((n, kind, label, recall, qpsb))
        del index
        gc.collect()  # the index's device buffers now, not at the next cyclic collection (10M: 10 GB each)
      if "torch" in names:
        for dtype in [d for d in ("float32", "bfloat16") if d in exact_qps] or ["float32"]:
          label = f"torch matmul+topk {'f32' if dtype == 'float32' else 'bf16'}"
          if tdev is None:
            emit({"n": n, "data": kind, "index": label + " (n/a)", **{key: "n/a" for key in (
                "recall_at_10", "qps_b1", "qps_b", "p50_ms_b1", "p99_ms_b1", "build_s", "bytes_per_item",
                "floor_ms_b1", "floor_ms_b", "x_floor_b1", "x_floor_b", "vs_torch_b1", "vs_torch_b")}})
            continue
          t = time.perf_counter()
          peer = TorchPeer(torch, corpus, dtype, tdev, args.torch_chunk)
          build = time.perf_counter() - t
          got = peer.search(queries, 10)
          recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids[got], truth)]))
          qps1, t1 = timed_search(peer, queries, 1, args.min_seconds)
          qpsb, tb = timed_search(peer, queries, batch, args.min_seconds)
          floor = ({b: floor_ms(n, args.dim, b, *reads[dtype]) for b in (1, batch)} if dtype in reads
                   else {1: None, batch: None})
          mine = exact_qps.get(dtype)
          emit({"n": n, "data": kind, "index": label, "recall_at_10": recall, "qps_b1": qps1, "qps_b": qpsb,
                "p50_ms_b1": 1e3 * np.percentile(t1, 50), "p99_ms_b1": 1e3 * np.percentile(t1, 99), "build_s": build,
                "bytes_per_item": peer.nbytes / n, "floor_ms_b1": floor[1], "floor_ms_b": floor[batch],
                "x_floor_b1": 1e3 * float(np.median(t1)) / floor[1] if floor[1] else None,
                "x_floor_b": 1e3 * float(np.median(tb)) / floor[batch] if floor[batch] else None,
                "vs_torch_b1": mine[0] / qps1 if mine else None, "vs_torch_b": mine[1] / qpsb if mine else None})
          del peer
          gc.collect()
          if tdev == "cuda":
            torch.cuda.empty_cache()
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
      ax.set_xlabel(f"queries / s (batch {batch})")
      ax.set_ylabel("recall@10")
      ax.set_title(f"N={n:,}, {kind}", fontsize=9)
      ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print("plot:", args.plot)


if __name__ == "__main__":
  main()
