"""VEDJE online reranking cost (paper §3.2 Table 2, App. A.2): one query against K cached candidates.

    python bench/vedje_rerank.py [--k 100] [--text-len 32] [--caches 64,16]
                                 [--dtypes float32,bfloat16] [--layers 12] [--reps 3]
                                 [--min-seconds 0] [--scan-pairs 20] [--json PATH]

WEIGHTS ARE RANDOM (timing only): the scores mean nothing. For every cache size N (tokens per
video; N = T * M with T = 16, so 64 = M 4, the paper's default, and 16 = M 1, "VEDJE-16") and
computation dtype it builds `VedjeConfig.paper_shape(tokens_per_frame=M, dtype=dtype,
num_layers=layers, scan_pairs=B)` (12 layers = MiniLM-L12-H384, the paper's ~33M reranker; 6 = the
MiniLM-L6 shape; B = `--scan-pairs`, the pairs per block of the reranker's scan, default the config's 20,
0 = all K pairs in one pass), random float32 parameters (`vedje.init_params` on a `JointReranker`, seed 0) and jits
`JointReranker.rerank` in deterministic mode:

    (params, input_ids [1, S], attention_mask [1, S], caches [1, K, N, 384], priors [1, K])
        -> scores [1, K]

i.e. batch-1 queries: one query, its K candidates' joint passes in one call (the setting of the
paper's Table 2: K = 100, batch 1, caches resident on the device). The text is `--text-len`
WordPiece ids ([CLS] ... [SEP], no padding; 32 is a typical MSR-VTT caption, the model's maximum
is 64). Caches are random normal rows stored in the row's dtype (the paper stores BF16 caches; a
float32 row reads float32 caches). Each cell is compiled ahead of time (compile seconds printed),
then timed with `machine.timed`: one warm-up call and the median of `--reps` calls (more when
`--min-seconds` asks for it).

FLOPs are counted analytically, forward only, 2 FLOPs per multiply-accumulate, for one joint pass
over L = S + N tokens (d = 384, F = 1536):
  per layer: Q/K/V/O projections 4 L d^2, attention scores + weighted sum 2 L^2 d, FFN 2 L d F;
  plus e_rho (1 * 64 + 64 d) and the score head (d^2 + d) once per pair.
Embedding gathers, LayerNorms, softmax, GELU and biases are not counted. Achieved FLOP/s =
K * FLOPs/pair / seconds per query, reported as a fraction of the device's peak measured in the
same process (`machine.peak_matmul_flops_per_s`: a large square matmul, 8192^3 on an accelerator and
2048^3 on CPU, so the CPU rows compare with the earlier "% of a [2048]^2 matmul" ones) in float32 (at
jax's default precision: TF32 on a GPU, as the float32 rows run) and in the row's own dtype. The goal
is >= 70% of the same-dtype rate for the 64-token cache (the work is large dense matmuls: K*L = 9,600
rows by 384 / 1536 columns per layer). Parameters and caches are put on the device once before the
clock starts, as in the paper's Table 2: no timed call copies from the host.

Also printed: the ONLINE parameter count of each reranker (encoder + e_rho + score head; the
training-only VTC and MLM heads excluded), checked against the paper's ~33M for 12 layers.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine  # noqa: E402  (bench/machine.py)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from vidjax.models import vedje  # noqa: E402
from vidjax.models.bert import BertConfig  # noqa: E402

FRAMES = 16                     # T (A.2); the cache size picks M = N / T
CLS_ID, SEP_ID = 101, 102       # BERT uncased WordPiece
ONLINE = ("bert", "prior_fc1", "prior_fc2", "score_fc1", "score_fc2")   # deployment subtrees
PAPER_PARAMS = 33e6             # "~33M" (§3.1, A.2)


def count(tree) -> int:
  return int(sum(np.prod(np.shape(x)) for x in jax.tree_util.tree_leaves(tree)))


def flops_per_pair(cfg: vedje.VedjeConfig, text_len: int) -> dict[str, float]:
  """Analytic forward FLOPs (2 x MACs) of one joint pass over [text; cache], by part."""
  length, d, ffn = text_len + cfg.cache_len, cfg.hidden_size, cfg.text.intermediate_size
  macs = {
      "projections": cfg.text.num_layers * 4 * length * d * d,
      "attention": cfg.text.num_layers * 2 * length * length * d,
      "ffn": cfg.text.num_layers * 2 * length * d * ffn,
      "e_rho": 1 * cfg.prior_hidden + cfg.prior_hidden * d,
      "score_head": d * d + d * 1,
  }
  flops = {k: 2.0 * v for k, v in macs.items()}
  flops["total"] = sum(flops.values())
  return flops


def make_inputs(cfg: vedje.VedjeConfig, k: int, text_len: int, dtype: str, seed: int = 0):
  """input_ids [1, S] ([CLS] random-word-ids [SEP]), mask [1, S] all ones, caches [1, K, N, d]
  random normal in `dtype`, priors [1, K] random in [0, 1)."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(1000, cfg.text.vocab_size, size=(1, text_len), dtype=np.int32)
  ids[:, 0], ids[:, -1] = CLS_ID, SEP_ID
  mask = np.ones((1, text_len), np.int32)
  caches = rng.standard_normal((1, k, cfg.cache_len, cfg.hidden_size), dtype=np.float32)
  priors = rng.random((1, k), dtype=np.float32)
  return (jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(caches, jnp.dtype(dtype)),
          jnp.asarray(priors))


def bench_cell(params, cfg: vedje.VedjeConfig, args) -> dict:
  """Seconds per batch-1 query (K candidates) of the jitted reranker, and its compile seconds."""
  model = vedje.JointReranker(cfg)

  def rerank(p, input_ids, attention_mask, caches, priors):
    return model.apply({"params": p}, input_ids, attention_mask, caches, priors, True,
                       method=vedje.JointReranker.rerank)

  params, inputs = jax.device_put((params, make_inputs(cfg, args.k, args.text_len, cfg.dtype)))  # resident
  t = time.perf_counter()
  compiled = jax.jit(rerank).lower(params, *inputs).compile()
  compile_s = time.perf_counter() - t
  iters = args.reps
  if args.min_seconds > 0:   # one extra (untimed) call to size the run
    t = time.perf_counter()
    jax.block_until_ready(compiled(params, *inputs))
    iters = max(iters, min(args.max_reps, math.ceil(args.min_seconds / (time.perf_counter() - t))))
  seconds = machine.timed(compiled, params, *inputs, iters=iters)
  scores = np.asarray(compiled(params, *inputs))
  assert scores.shape == (1, args.k) and np.all(np.isfinite(scores)), scores
  return {"seconds": seconds, "compile_s": compile_s, "iters": iters}


HEAD = ("| cache tokens (T x M) | dtype | ms/query | pairs/s | GFLOP/pair | achieved GFLOP/s | "
        "% of f32 peak | % of same-dtype peak |")


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--k", type=int, default=100, help="candidates per query (Table 2: 100)")
  p.add_argument("--text-len", type=int, default=32,
                 help="WordPiece tokens incl. [CLS]/[SEP] (typical MSR-VTT caption; max 64)")
  p.add_argument("--caches", default="64,16",
                 help=f"cache tokens per video, comma-separated (multiples of T = {FRAMES}: 64 = M 4, 16 = M 1)")
  p.add_argument("--dtypes", default="float32,bfloat16", help="computation dtypes, comma-separated")
  p.add_argument("--layers", type=int, default=12, help="encoder layers: 12 = paper (MiniLM-L12), 6 = MiniLM-L6")
  p.add_argument("--reps", type=int, default=3, help="timed calls per cell (median; after one warm-up)")
  p.add_argument("--min-seconds", type=float, default=0.0,
                 help="time each cell at least this long (raises --reps, up to --max-reps)")
  p.add_argument("--max-reps", type=int, default=50)
  p.add_argument("--matmul-n", type=int, default=0, help="side of the peak matmul (0: 8192 on an accelerator, "
                 "2048 on CPU)")
  p.add_argument("--matmul-iters", type=int, default=10, help="timed products of the reference matmul")
  p.add_argument("--scan-pairs", type=int, default=vedje.VedjeConfig.scan_pairs,
                 help="pairs per block inside one rerank call (VedjeConfig.scan_pairs; 0 = one pass)")
  p.add_argument("--json", default=None, help="also write the rows (and the run's context) here")
  args = p.parse_args()
  caches = [int(c) for c in args.caches.split(",")]
  dtypes = [d.strip() for d in args.dtypes.split(",")]
  for n in caches:
    if n < FRAMES or n % FRAMES:
      p.error(f"--caches: {n} is not a positive multiple of T = {FRAMES}")
  if args.k < 1 or args.reps < 1:
    p.error("--k and --reps must be >= 1")
  if args.scan_pairs < 0:
    p.error("--scan-pairs must be >= 0 (0 = all pairs in one pass)")

  print("NOTE: random weights (timing only) -- the scores are meaningless.")
  print(f"machine: {machine.describe()} | load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
  matmul = {dt: machine.peak_matmul_flops_per_s(dt, n=args.matmul_n or None, iters=args.matmul_iters)
            for dt in dict.fromkeys(["float32"] + dtypes)}
  print(machine.peaks_line(matmul))
  print(f"K = {args.k} candidates, batch-1 queries, text S = {args.text_len} tokens, "
        f"{args.layers} layers, scan pairs {args.scan_pairs or 'off (one pass)'}, "
        f"{args.reps} timed calls per cell (median)"
        + (f", at least {args.min_seconds}s" if args.min_seconds > 0 else ""))

  rows, table = [], []
  for n in caches:
    m = n // FRAMES
    base = vedje.VedjeConfig.paper_shape(tokens_per_frame=m, text=BertConfig(num_layers=args.layers, use_pooler=False),
                                        scan_pairs=args.scan_pairs)
    if args.text_len > base.max_text_len or args.text_len < 2:
      p.error(f"--text-len {args.text_len} is outside [2, max_text_len={base.max_text_len}]")
    # Parameters are float32 whatever the computation dtype: one tree serves every dtype.
    params = jax.jit(lambda r, cfg=base: vedje.init_params(vedje.JointReranker(cfg), r))(
        jax.random.PRNGKey(0))
    missing = [k for k in ONLINE if k not in params]
    assert not missing, f"reranker tree lacks {missing}: {sorted(params)}"
    online = count({k: params[k] for k in ONLINE})
    training_only = count({k: v for k, v in params.items() if k not in ONLINE})
    parts = {k: count(params[k]) for k in ONLINE}
    line = (f"N = {n} (T {FRAMES} x M {m}), {args.layers} layers: online params {online / 1e6:.2f}M "
            f"(encoder {parts['bert'] / 1e6:.2f}M incl. {base.input_len}-row position table, e_rho "
            f"{(parts['prior_fc1'] + parts['prior_fc2']) / 1e3:.1f}k, score head "
            f"{(parts['score_fc1'] + parts['score_fc2']) / 1e3:.1f}k); training-only VTC + MLM heads "
            f"{training_only / 1e6:.2f}M excluded")
    if args.layers == 12:
      ok = abs(online - PAPER_PARAMS) / PAPER_PARAMS < 0.03
      line += f" | paper ~33M: {'OK' if ok else 'MISMATCH'} ({100 * (online / PAPER_PARAMS - 1):+.1f}%)"
    print(line, flush=True)
    for dt in dtypes:
      cfg = vedje.VedjeConfig.paper_shape(tokens_per_frame=m, dtype=dt, text=BertConfig(num_layers=args.layers, use_pooler=False),
                                          scan_pairs=args.scan_pairs)
      fl = flops_per_pair(cfg, args.text_len)
      res = bench_cell(params, cfg, args)
      s = res["seconds"]
      achieved = args.k * fl["total"] / s
      row = {"cache_tokens": n, "frames": FRAMES, "tokens_per_frame": m, "dtype": dt, "k": args.k,
             "text_len": args.text_len, "layers": args.layers, "scan_pairs": args.scan_pairs, "ms_per_query": 1e3 * s,
             "pairs_per_s": args.k / s, "flops_per_pair": fl["total"], "flops_by_part": fl,
             "achieved_flops_per_s": achieved, "frac_f32_matmul": achieved / matmul["float32"],
             "frac_dtype_matmul": achieved / matmul[dt], "online_params": online,
             "compile_s": res["compile_s"], "timed_calls": res["iters"]}
      rows.append(row)
      table.append(f"| {n} ({FRAMES} x {m}) | {dt} | {row['ms_per_query']:,.1f} | {row['pairs_per_s']:,.1f} | "
                   f"{fl['total'] / 1e9:.3f} | {achieved / 1e9:,.1f} | {100 * row['frac_f32_matmul']:.1f}% | "
                   f"{100 * row['frac_dtype_matmul']:.1f}% |")
      print(f"  {table[-1]}  (compile {res['compile_s']:.1f}s, {res['iters']} timed calls)", flush=True)

  print()
  print(f"VEDJE online rerank, random weights (timing only) | K = {args.k}, S = {args.text_len}, "
        f"{args.layers} layers, scan pairs {args.scan_pairs or 'off'}, batch-1 queries")
  print(f"machine: {machine.describe()}")
  print(HEAD)
  print("|---|---|---:|---:|---:|---:|---:|---:|")
  print("\n".join(table))
  goal = [r for r in rows if r["cache_tokens"] == 64]
  if goal:
    print("goal (>= 70% of the peak, 64-token cache): " + "; ".join(
        f"{r['dtype']} {100 * r['frac_dtype_matmul']:.1f}% of the {r['dtype']} peak "
        f"({'met' if r['frac_dtype_matmul'] >= 0.7 else 'NOT met'})" for r in goal))
  if args.json:
    out = {"machine": machine.describe(), "load_average": os.getloadavg(), "args": vars(args),
           "matmul_flops_per_s": matmul, "note": "random weights (timing only)", "rows": rows}
    Path(args.json).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
  main()
