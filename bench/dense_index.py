"""Stage-1 dense recall: `vidjax.retrieval.DenseIndex` against faiss and a NumPy baseline.

    python bench/dense_index.py [--sizes 1000,10000,100000,1000000] [--dim 512] [--k 10]
                                [--batches 1,256] [--min-seconds 1.0] [--min-repeats 3] [--max-repeats 20]
                                [--chunk N] [--query-batch N] [--no-faiss]
    python bench/dense_index.py --against TREE [--sizes 100000,1000000] [--dim 256] [--dtypes float32,bfloat16]
                                [--batches 1,256] [--rounds 6] [--calls 5]

Random unit vectors (corpus and queries, seed 0). For every corpus size and query batch size it
times, in the same process and one after the other: vidjax `DenseIndex` with float32 and with
bfloat16 storage, `faiss.IndexFlatIP` (when faiss is importable; '-' otherwise) and NumPy
(`queries @ corpus.T`, `argpartition`, sort of the k best). Each measurement is one warm-up
call (compiles) and then repeated calls on fresh query batches until `--min-seconds` (within
`--min-repeats` .. `--max-repeats` calls); the median is reported as ms/query and queries/s.
Also: the achieved FLOP/s (2 N D per query) as a fraction of a large matmul in the storage's dtype measured in the
same process (bench/machine.py `peaks`: float32 at "highest", the precision the float32 index asks for; bfloat16),
the vidjax/faiss throughput ratio, the stored bytes per video (vectors, with the last chunk's
padding), and the fraction of vidjax float32's top-k ids equal to faiss's (else NumPy's) on the
last timed batch.

`--against TREE` (before/after, alternated): TREE is another checkout of vidjax (e.g. `git worktree add /tmp/before
SHA`). Two worker processes, one importing vidjax from TREE ("before") and one from this checkout ("after"), build the
same index from the same corpus (random unit rows, seed 0) and answer the same queries; the parent asks them in turn,
`--rounds` times per row (the order swapped every round: ABBA...), `--settle` seconds apart (a worker's idle BLAS and
XLA threads spin for a while after its turn), and each turn times `--calls` searches of the same fresh query batch
(its median wall and process CPU time). The table gives, per (N, dtype, batch), the median and range over the rounds
of each tree's q/s, and after/before. Only one worker runs at a time, so a load that comes and goes on a shared
machine falls on both.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

# faiss's OpenMP threads otherwise spin-wait between calls and starve BLAS and XLA threads on a
# small machine (measured on 2 cores: faiss itself 4-10x slower at batch 256, NumPy up to 100x
# at batch 1). Must be set before faiss (and its OpenMP runtime) is loaded.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine  # noqa: E402  (bench/machine.py)
from vidjax.retrieval import dense  # noqa: E402

try:
  import faiss  # noqa: E402
except ImportError:
  faiss = None


def unit_rows(rng: np.random.Generator, n: int, d: int, block: int = 65536) -> np.ndarray:
  """float32 [n, d] random unit vectors, generated in blocks (no float64 copy of the whole)."""
  out = np.empty((n, d), np.float32)
  for s in range(0, n, block):
    x = rng.standard_normal((min(block, n - s), d), dtype=np.float32)
    out[s:s + len(x)] = x / np.linalg.norm(x, axis=1, keepdims=True)
  return out


def numpy_search(corpus: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
  """The baseline: one matmul, argpartition, sort of the k best (corpus rows are unit vectors)."""
  q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
  s = q @ corpus.T
  part = np.argpartition(-s, k - 1, axis=1)[:, :k]
  top = np.take_along_axis(s, part, 1)
  order = np.argsort(-top, axis=1, kind="stable")
  return np.take_along_axis(part, order, 1), np.take_along_axis(top, order, 1)


def timed(fn, make_queries, min_seconds: float, min_repeats: int, max_repeats: int):
  """(median seconds per call, last result); one warm-up call first, fresh queries every call."""
  fn(make_queries())
  times, out = [], None
  start = time.perf_counter()
  while len(times) < max_repeats and (len(times) < min_repeats or time.perf_counter() - start < min_seconds):
    q = make_queries()
    t = time.perf_counter()
    out = fn(q)
    times.append(time.perf_counter() - t)
  return float(np.median(times)), out, q


HEAD = ("| N | batch | vidjax f32 q/s (ms/q) | vidjax bf16 q/s (ms/q) | faiss flat q/s (ms/q) | "
        "NumPy q/s (ms/q) | f32 / faiss | bf16 / faiss | f32 % matmul | bf16 % matmul | "
        "bytes/video f32, bf16 | ids = faiss |")


def bench_size(n: int, args, matmul: dict, use_faiss: bool) -> list[str]:
  """The table rows of one corpus size (every index of it is freed on return)."""
  d, k = args.dim, args.k
  rng = np.random.default_rng(0)
  corpus = unit_rows(rng, n, d)
  ids = np.char.add("v", np.char.zfill(np.arange(n).astype(str), 8))  # sorted = row order
  built, build_s = {}, {}
  for dt in ("float32", "bfloat16"):
    t = time.perf_counter()
    built[dt] = dense.DenseIndex(ids, corpus, dtype=dt, chunk=args.chunk, query_batch=args.query_batch)
    build_s[dt] = time.perf_counter() - t
  methods = {"f32": lambda q: built["float32"].search(q, k), "bf16": lambda q: built["bfloat16"].search(q, k)}
  if use_faiss:
    faiss.cvar.distance_compute_blas_threshold = args.blas_threshold  # set, not faiss's default (README, Scaling up)
    flat = faiss.IndexFlatIP(d)
    flat.add(corpus)
    methods["faiss"] = lambda q: flat.search(q / np.linalg.norm(q, axis=1, keepdims=True), k)[::-1]
  methods["numpy"] = lambda q: numpy_search(corpus, q, k)
  rows = []
  for b in (int(b) for b in args.batches.split(",")):
    res = {}
    for name, fn in methods.items():
      seconds, out, q = timed(fn, lambda: unit_rows(rng, b, d), args.min_seconds, args.min_repeats,
                              args.max_repeats)
      res[name] = seconds / b
      if name == "f32":
        f32_ids = np.char.lstrip(out[0], "v").astype(np.int64)
        ref = methods["faiss" if use_faiss else "numpy"](q)[0]
        res["agree"] = float(np.mean(f32_ids == ref))
    flops = 2.0 * n * d  # per query
    cell = lambda m: f"{1 / res[m]:,.0f} ({1e3 * res[m]:.3f})" if m in res else "-"  # noqa: E731
    ratio = lambda m: f"{res['faiss'] / res[m]:.2f}x" if "faiss" in res else "-"  # noqa: E731
    rows.append(f"| {n:,} | {b} | {cell('f32')} | {cell('bf16')} | {cell('faiss')} | {cell('numpy')} | "
                f"{ratio('f32')} | {ratio('bf16')} | {100 * flops / res['f32'] / matmul['float32']:.1f}% | "
                f"{100 * flops / res['bf16'] / matmul['bfloat16']:.1f}% | "
                f"{built['float32'].nbytes / n:.0f}, {built['bfloat16'].nbytes / n:.0f} | "
                f"{100 * res['agree']:.1f}%{'' if use_faiss else ' (NumPy)'} |")
    print(rows[-1], flush=True)
  print(f"  (N={n:,}: index build {build_s['float32']:.1f}s f32, {build_s['bfloat16']:.1f}s bf16)", flush=True)
  return rows


# One side of `--against`: imports vidjax from argv[1], then answers JSON requests on stdin, one a line:
# {"n", "dim", "dtype", "batch", "calls", "seed", "k"} -> {"wall": [s], "cpu": [s], "build_s"}. It keeps the indexes of
# one corpus size (built on first use: the same rows in both workers, seed 0).
_WORKER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
from vidjax.retrieval import dense
assert dense.__file__.startswith(sys.argv[1]), dense.__file__
built, size = {}, None
for line in sys.stdin:
  r = json.loads(line)
  if (r["n"], r["dim"]) != size:
    built.clear()
    size = (r["n"], r["dim"])
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal(size, dtype=np.float32)
    ids = np.char.add("v", np.char.zfill(np.arange(r["n"]).astype(str), 9))
  build_s = 0.0
  if r["dtype"] not in built:
    t = time.perf_counter()
    built[r["dtype"]] = dense.DenseIndex(ids, corpus, dtype=r["dtype"])
    build_s = time.perf_counter() - t
  index = built[r["dtype"]]
  q = np.random.default_rng(r["seed"]).standard_normal((r["batch"], r["dim"]), dtype=np.float32)
  index.search(q, r["k"])  # compiles on first use; warms caches
  wall, cpu = [], []
  for _ in range(r["calls"]):
    t, c = time.perf_counter(), time.process_time()
    index.search(q, r["k"])
    wall.append(time.perf_counter() - t)
    cpu.append(time.process_time() - c)
  print(json.dumps({"wall": wall, "cpu": cpu, "build_s": build_s}), flush=True)
"""


def against(args) -> None:
  """Before (`--against` TREE) and after (this checkout), alternated in one run (module docstring)."""
  here = str(Path(__file__).resolve().parents[1])
  trees = {"before": str(Path(args.against).resolve()), "after": here}
  rev = {name: subprocess.run(["git", "-C", tree, "log", "-1", "--format=%h %ad", "--date=short"], capture_output=True,
                              text=True, check=False).stdout.strip() or "?" for name, tree in trees.items()}
  dirty = subprocess.run(["git", "-C", here, "status", "--short", "--", "vidjax/retrieval"], capture_output=True,
                         text=True, check=False).stdout.strip()
  print(f"machine: {machine.describe()} | load average {os.getloadavg()[0]:.2f} at the start")
  print(f"before: {trees['before']} ({rev['before']}) | after: {here} ({rev['after']}"
        f"{', with uncommitted changes in vidjax/retrieval' if dirty else ''}) | D={args.dim}, k={args.k}, random unit "
        f"rows | {args.rounds} rounds per row, order swapped every round, {args.calls} calls a turn (median)")
  workers = {name: subprocess.Popen([sys.executable, "-c", _WORKER, tree], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True) for name, tree in trees.items()}

  def ask(name: str, request: dict) -> dict:
    w = workers[name]
    w.stdin.write(json.dumps(request) + "\n")
    w.stdin.flush()
    line = w.stdout.readline()
    if not line:
      raise RuntimeError(f"the {name} worker ended (exit code {w.poll()})")
    return json.loads(line)

  head = ("| N | storage | batch | before q/s (median, range) | after q/s (median, range) | after / before | "
          "before CPU ms | after CPU ms |")
  rows = []
  try:
    for n in (int(s) for s in args.sizes.split(",")):
      for dtype in args.dtypes.split(","):
        for b in (int(b) for b in args.batches.split(",")):
          qps = {"before": [], "after": []}
          cpu = {"before": [], "after": []}
          for r in range(args.rounds):
            for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
              time.sleep(args.settle)  # the other worker's threads (BLAS, XLA) stop spinning before this turn
              out = ask(name, {"n": n, "dim": args.dim, "dtype": dtype, "batch": b, "calls": args.calls,
                               "seed": 1000 + r, "k": args.k})
              qps[name].append(b / float(np.median(out["wall"])))
              cpu[name].append(1e3 * float(np.median(out["cpu"])))
          med = {name: float(np.median(v)) for name, v in qps.items()}
          cell = lambda name: f"{med[name]:,.0f} ({min(qps[name]):,.0f}-{max(qps[name]):,.0f})"  # noqa: E731
          rows.append(f"| {n:,} | {dtype} | {b} | {cell('before')} | {cell('after')} | "
                      f"{med['after'] / med['before']:.2f}x | {np.median(cpu['before']):,.1f} | "
                      f"{np.median(cpu['after']):,.1f} |")
          print(rows[-1], flush=True)
  finally:
    for w in workers.values():
      w.stdin.close()
      w.wait()
  print(f"load average {os.getloadavg()[0]:.2f} at the end")
  print()
  print(head)
  print("|---:|---|---:|---:|---:|---:|---:|---:|")
  print("\n".join(rows))


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sizes", default="1000,10000,100000,1000000", help="corpus sizes, comma-separated")
  p.add_argument("--batches", default="1,256", help="query batch sizes, comma-separated")
  p.add_argument("--dim", type=int, default=512)
  p.add_argument("--k", type=int, default=10)
  p.add_argument("--blas-threshold", type=int, default=16,
                 help="faiss.cvar.distance_compute_blas_threshold: batches of this many queries or more use BLAS "
                      "(DenseIndex's faiss backend sets the same default)")
  p.add_argument("--min-seconds", type=float, default=1.0, help="time each cell at least this long")
  p.add_argument("--min-repeats", type=int, default=3, help="at least this many timed calls")
  p.add_argument("--max-repeats", type=int, default=20, help="and at most this many")
  p.add_argument("--chunk", type=int, default=None, help="default: dense.default_chunk(dtype), per platform")
  p.add_argument("--query-batch", type=int, default=dense.DEFAULT_QUERY_BATCH)
  p.add_argument("--no-faiss", action="store_true", help="leave faiss out even when importable")
  p.add_argument("--against", default="", help="another vidjax checkout: before/after alternated (docstring)")
  p.add_argument("--dtypes", default="float32,bfloat16", help="--against: storage dtypes")
  p.add_argument("--rounds", type=int, default=6, help="--against: turns per tree and row")
  p.add_argument("--calls", type=int, default=5, help="--against: timed searches per turn")
  p.add_argument("--settle", type=float, default=0.5, help="--against: seconds between turns")
  args = p.parse_args()
  if args.against:
    return against(args)
  use_faiss = faiss is not None and not args.no_faiss

  matmul = {"float32": machine.peak_matmul_flops_per_s("float32", "highest"),
            "bfloat16": machine.peak_matmul_flops_per_s("bfloat16")}
  print(f"machine: {machine.describe()}")
  print(machine.peaks_line(matmul, "highest"))
  faiss_line = (f"faiss {faiss.__version__} ({faiss.omp_get_max_threads()} OpenMP threads, "
                f"distance_compute_blas_threshold={args.blas_threshold}, "
                f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']})" if use_faiss else "faiss: not used")
  chunk = args.chunk or dense.DEFAULT_CHUNK[dense.platform_of()]
  print(f"{faiss_line} | DenseIndex chunk={chunk} query_batch={args.query_batch} | "
        f"k={args.k}, D={args.dim} | per cell: {args.min_repeats}-{args.max_repeats} timed calls, "
        f"at least {args.min_seconds}s")
  rows = []
  for n in (int(s) for s in args.sizes.split(",")):
    rows += bench_size(n, args, matmul, use_faiss)
    gc.collect()
  print()
  print(HEAD)
  print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
  print("\n".join(rows))


if __name__ == "__main__":
  main()
