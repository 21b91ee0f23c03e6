"""The GPU check's steps, their order and budgets, and the runner (launch/gpu_check.sh calls it; stdlib only).

    python launch/gpu_check.py plan [--scale small|full]          # each step's budget and how it was derived
    python launch/gpu_check.py run OUT_DIR [--scale small|full] [--steps a,b] [--deadline S]
    python launch/gpu_check.py corpus --n N --dim D --out DIR     # the clustered corpus, drawn on the device

One call of the device tool (10 minutes a command) must decide the issue's goals, so the steps run in the order of
what they answer (`STEPS`): first the search rows (10M x 256, vidjax bf16 and f32 against the torch peer, batches 256
and 1), then the main job, the training loops, the extraction and the tests, then what no goal needs. Each step
runs under its budget, and the whole check under a deadline (`DEADLINE_S`, counted from the script's start, the
wheel install included): a step whose budget does not fit in what is left is not started (its row says so), so the
device part ends in time and a late step never eats an early one's. gpu_check.md is rewritten after every step
(the table of steps and each step's output tail) and every step streams its output into gpu_check.log, so a call
stopped early keeps every row it finished.

Budgets. Each step's estimate and budget come from a measured small run: `MEASURED_SMALL` holds each step's seconds
in the dry run (`GPU_CHECK_SCALE=small bash launch/gpu_check.sh run OUT`) on this project's 2-core CPU VM (shared with
other work). A small run's budget is `SMALL_MARGIN` x that + `SMALL_SLACK_S` (the VM's speed varies twofold under
other load). A full run's estimate is that small run's time over `HOST_SPEEDUP` (start-up, imports, data on the host
and compiles, which the H200 machine's 16 cores do again) plus the full size's own work, counted in bytes and FLOPs at
the H200's ceilings measured on these machines (.library/device/KINDS.md: a 4.3 TB/s device copy, 790 TFLOP/s bf16)
and at stated host rates (`HOST`); its budget is `FULL_MARGIN` x the estimate. A step starts when its estimate fits
in what is left of the deadline and runs at most its budget or what is left. `plan` prints every term;
`estimate_s()` is the whole check's estimate on an H200 (366 s of the 480 s deadline, the wheel install included).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
import shlex
import signal
import subprocess
import sys
import time
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 480  # the device part, wheel install included: 8 of the tool's 10 minutes per command
SMALL_DEADLINE_S = 1500  # the dry run on a 2-core CPU

# The H200's ceilings as measured on these machines (.library/device/KINDS.md, 2026-10-28 and 11-04).
H200 = {"copy_bytes_per_s": 4.3e12, "bf16_flops_per_s": 790e12, "f32_flops_per_s": 50e12}
# Host rates on the device machine (16 cores), as assumptions stated here: host <-> device copies of pageable memory,
# reading a .npy from the page cache, numpy's string ids (measured: 1M ids in 0.9 s on this VM).
HOST = {"h2d_bytes_per_s": 5e9, "page_cache_bytes_per_s": 3e9, "ids_per_s": 1.1e6}

# Seconds of each step in the dry run (`GPU_CHECK_SCALE=small bash launch/gpu_check.sh run OUT`) on this project's VM
# (2-core AMD EPYC, shared with other sessions' work), 2026-11-28; "install": unzipping the six wheels took 2.4 s here,
# pip's own work on top.
MEASURED_SMALL = {"install": 8.0, "corpus": 7.2, "ann": 20.5, "main": 84.5, "cast": 135.4, "extract": 16.6,
                  "tests": 32.3, "vedje": 22.2, "precision": 38.6}
# What of a small run the H200 machine's host does again at full size (start-up, imports, data on the host, compiles)
# runs this much faster there: 16 idle cores against 2 shared ones (this VM ran the main job in 154 s and in 338 s
# an hour apart, a 2.2x range from other sessions' load alone). The small runs' own compute on the CPU is counted
# in with it: an upper bound.
HOST_SPEEDUP = 2.0
# The tests step's precision-marked tests of the model-level files, the learning and subprocess tests left out
# (`TESTS_DESELECT`), measured on this VM: 545 worker-seconds (2 workers, 2026-11-28).
TESTS_CPU_WORKER_S = 545.0
TESTS_WORKERS = 8
SMALL_MARGIN, SMALL_SLACK_S = 3.0, 30.0  # a small run's budget: margin x its measured seconds + slack
FULL_MARGIN = 2.0  # a full run's budget: margin x its estimate

N, D = 10_000_000, 256  # the search rows' corpus
SMALL_N, SMALL_D = 20_000, 64


@dataclasses.dataclass(frozen=True)
class Step:
  name: str
  answers: str  # the goal it measures ("" = none: runs only when time is left)
  command: Callable[["Context"], list[str]]
  work: Callable[[], dict[str, float]]  # the full size's own seconds on an H200, by term (budget derivation)


@dataclasses.dataclass
class Context:
  py: str
  out: Path
  work: Path
  small: bool


def _gb(x: float) -> float:
  return x / 1e9


def _corpus_work() -> dict[str, float]:
  nbytes = N * D * 4
  return {f"draw {N:,} x {D} on the device, copy {_gb(nbytes):.0f} GB to the host": nbytes / HOST["h2d_bytes_per_s"],
          "write the .npy (page cache)": nbytes / HOST["page_cache_bytes_per_s"]}


def _ann_work() -> dict[str, float]:
  f32 = N * D * 4
  # Four stored copies (the vidjax f32 and bf16 indexes, the torch f32 and bf16 peers), each read from the page cache
  # and sent to the device. Every timed row: at least 5 calls and 0.5 s at each batch (a batch-256 exact search of
  # the f32 rows at the bandwidth floor is 2.4 ms, so time bounds it), and the exact reference pass.
  return {f"{N:,} ids": N / HOST["ids_per_s"],
          "4 stored copies from the page cache to the device": 4 * (f32 / HOST["page_cache_bytes_per_s"]
                                                                    + f32 / HOST["h2d_bytes_per_s"]),
          "timed searches (4 rows x 2 batches x 0.5 s)": 4.0, "device limits at full size (matmuls, copy)": 5.0}


def _main_work() -> dict[str, float]:
  return {"9 models x 780 steps (about 1 ms a step on a GPU)": 9 * 780 * 1e-3,
          "evaluation at full size (8.9 s on 2 CPU cores)": 8.9}


def _cast_work() -> dict[str, float]:
  return {"train step at batch 512, d 768 (f32, bf16, 20 steps each) and its torch peer": 4.0,
          "loop: 3 x 400 steps (the host-gather row about 3 ms a step)": 3 * 400 * 3e-3,
          "loop: configs/cast_coin.py's world (3.7 s on 2 CPU cores)": 3.7,
          "device limits at full size (8192^3 matmuls)": 3.0}


def _extract_work() -> dict[str, float]:
  return {"decode 128 videos x 4 clips (15 cores)": 12.0,
          "512 clips at 45% of 790 TFLOP/s (about 1.2 TFLOP a clip)": 512 * 1.2e12 / (0.45 * H200["bf16_flops_per_s"]),
          "model-only timing (5 iterations of a batch of 8)": 2.0}


def _tests_work() -> dict[str, float]:
  # Tiny programs: a GPU compiles each about twice as long as XLA:CPU at optimization level 0 (the suite's setting).
  return {f"{TESTS_CPU_WORKER_S:.0f} worker-s on this VM over {TESTS_WORKERS} workers, x2 for GPU compiles, "
          f"/{HOST_SPEEDUP:g} for the host": TESTS_CPU_WORKER_S / TESTS_WORKERS * 2 / HOST_SPEEDUP}


def _vedje_work() -> dict[str, float]:
  return {"Table 2 reranker, 64 caches, 2 dtypes, 5 reps": 10.0}


def _precision_work() -> dict[str, float]:
  return {"3 precisions x (8192^3 matmul, CAST step at batch 512, LvT forward)": 10.0}


def _ann_cmd(c: Context) -> list[str]:
  n, d, batch = (SMALL_N, SMALL_D, 16) if c.small else (N, D, 256)
  return [c.py, "bench/ann.py", "--n", str(n), "--dim", str(d), "--batch", str(batch), "--data", "clustered",
          "--backends", "jax,jax-bf16,torch", "--min-seconds", "0.5", "--memmap", str(c.work / "corpus"),
          "--json", str(c.out / "ann.json")]


def _corpus_cmd(c: Context) -> list[str]:
  n, d = (SMALL_N, SMALL_D) if c.small else (N, D)
  return [c.py, "launch/gpu_check.py", "corpus", "--n", str(n), "--dim", str(d), "--out", str(c.work / "corpus")]


def _main_cmd(c: Context) -> list[str]:
  cfg = "configs/cast_coin.py:smoke" if c.small else "configs/cast_coin.py"
  workdir = c.work / "cast_coin"
  show = (f"import json; r = json.load(open({str(workdir / 'results.json')!r})); print('seconds', r['seconds'], "
          f"'stage_seconds', r['stage_seconds'], 'programs', r['programs'], 'acc', r['metrics']['cast']['acc'])")
  return ["bash", "-c", f"{c.py} -m vidjax.main --config {cfg} --workdir {workdir} --config.train.progress=false "
          f"&& {c.py} -c {shlex.quote(show)}"]


def _cast_cmd(c: Context) -> list[str]:
  if c.small:
    return ["bash", "-c", f"{c.py} bench/cast_train.py --batch 64 --dim 32 --steps 3 && "
            f"{c.py} bench/cast_train.py --loop --loop-steps 20 --spc 4"]
  return ["bash", "-c", f"{c.py} bench/cast_train.py && {c.py} bench/cast_train.py --loop --loop-steps 400"]


def _extract_cmd(c: Context) -> list[str]:
  if c.small:
    return [c.py, "bench/videoprism_extract.py", "--iters", "1", "--videos", "2"]
  return [c.py, "bench/videoprism_extract.py", "--paper", "--iters", "5", "--segments", "4", "--videos", "128",
          "--json", str(c.out / "videoprism_extract.json")]


MODEL_TESTS = ("tests/test_cast_model.py tests/test_cast_scorers.py tests/test_losses.py tests/test_metrics.py "
               "tests/test_bert.py tests/test_t5.py tests/test_videoprism.py tests/test_vidclip.py "
               "tests/test_vedje_model.py tests/test_vedje_fidelity.py tests/test_grdr_tokenizer.py "
               "tests/test_quantize.py tests/test_trie.py tests/test_dense_index.py tests/test_train.py").split()


# Left out on the device: tests that train a model until it learns, or run subprocesses and fake devices (no reference
# comparison; CI runs them on CPU): the slowest fifth of these files' time.
TESTS_DESELECT = "not learns and not hard_kill and not smoke_run and not eight_devices"


def _tests_cmd(c: Context) -> list[str]:
  if c.small:
    return [c.py, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-m", "not minilm", "-p", "no:cacheprovider",
            "tests/test_cast_model.py", "tests/test_losses.py"]
  return [c.py, "-m", "pytest", "-q", "-n", str(TESTS_WORKERS), "--dist", "loadfile", "-m",
          "highest_precision and not minilm", "-k", TESTS_DESELECT, "-p", "no:cacheprovider", *MODEL_TESTS]


def _vedje_cmd(c: Context) -> list[str]:
  if c.small:
    return [c.py, "bench/vedje_rerank.py", "--caches", "16", "--reps", "1", "--dtypes", "float32"]
  return [c.py, "bench/vedje_rerank.py", "--caches", "64", "--reps", "5", "--json", str(c.out / "vedje_rerank.json")]


def _precision_cmd(c: Context) -> list[str]:
  if c.small:
    return [c.py, "bench/precision.py", "--batch", "64", "--dim", "32", "--steps", "2", "--resolution", "36",
            "--frames", "2", "--video_batch", "1", "--iters", "1"]
  return [c.py, "bench/precision.py"]


# In the order they run: what the goals need first.
STEPS = (
    Step("corpus", "search (its input)", _corpus_cmd, _corpus_work),
    Step("ann", "search: 10M x 256, bf16 and f32 vs torch, batches 256 and 1", _ann_cmd, _ann_work),
    Step("main", "the main job >= 3x the 2-core CPU end to end", _main_cmd, _main_work),
    Step("cast", "training loops >= 5x the CPU's steps/s, >= 80% busy", _cast_cmd, _cast_work),
    Step("extract", "extraction >= 45% of bf16 peak, end to end >= 80% of model-only", _extract_cmd, _extract_work),
    Step("tests", "0 test failures at the stated precision", _tests_cmd, _tests_work),
    Step("vedje", "", _vedje_cmd, _vedje_work),
    Step("precision", "", _precision_cmd, _precision_work),
)
NAMES = tuple(s.name for s in STEPS)


def estimate(step: Step, small: bool) -> tuple[float, dict[str, float]]:
  """(seconds, the terms they add up from) that `step` is expected to take at that scale (module docstring)."""
  measured = MEASURED_SMALL[step.name]
  if small:
    return measured, {"measured small run": measured}
  terms = {f"measured small run / {HOST_SPEEDUP:g}": measured / HOST_SPEEDUP, **step.work()}
  return sum(terms.values()), terms


def budget(step: Step, small: bool) -> int:
  """The most seconds `step` may run: `SMALL_MARGIN` x + `SMALL_SLACK_S` its small run, `FULL_MARGIN` x its full
  estimate."""
  seconds, _ = estimate(step, small)
  return int(round(SMALL_MARGIN * seconds + SMALL_SLACK_S if small else FULL_MARGIN * seconds))


def estimate_s(steps=NAMES) -> float:
  """The H200 estimate of the full check, the wheel install included (`MEASURED_SMALL["install"]`)."""
  return MEASURED_SMALL["install"] + sum(estimate(s, False)[0] for s in STEPS if s.name in steps)


def plan(small: bool, steps=NAMES, out=sys.stdout) -> list[tuple[str, int]]:
  deadline = SMALL_DEADLINE_S if small else DEADLINE_S
  rows = []
  print(f"# gpu_check plan ({'small: the dry run on a CPU' if small else 'full: one H200'}); deadline {deadline} s "
        "from the script's start, the wheel install included", file=out)
  print("| order | step | estimate s | budget s | answers | estimate from |", file=out)
  print("|---:|---|---:|---:|---|---|", file=out)
  for i, step in enumerate(s for s in STEPS if s.name in steps):
    seconds, terms = estimate(step, small)
    how = "; ".join(f"{k} {v:.1f} s" for k, v in terms.items())
    print(f"| {i + 1} | {step.name} | {seconds:.0f} | {budget(step, small)} | {step.answers or '-'} | {how} |",
          file=out)
    rows.append((step.name, budget(step, small)))
  margin = f"{SMALL_MARGIN:g} x the measured small run + {SMALL_SLACK_S:g} s" if small else f"{FULL_MARGIN:g} x the estimate"
  total = MEASURED_SMALL["install"] + sum(estimate(s, small)[0] for s in STEPS if s.name in steps)
  print(f"a budget is {margin}; a step starts when its estimate fits in what is left of the deadline and runs at most "
        f"its budget or what is left; estimate of the whole check, the wheel install "
        f"({MEASURED_SMALL['install']:g} s) included: {total:.0f} s of the {deadline} s deadline", file=out)
  return rows


# ----------------------------------------------------------------------------------------------
# The runner.


def _tail(path: Path, start: int, lines: int = 40) -> str:
  with open(path, "rb") as f:
    f.seek(start)
    text = f.read().decode("utf-8", "replace")
  return "\n".join(text.splitlines()[-lines:])


def _run_step(cmd: list[str], limit: float, log: Path) -> tuple[str, float]:
  """Runs `cmd` (its own process group) with its output appended to `log`, killed at `limit` s."""
  start = time.monotonic()
  with open(log, "ab") as f:
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
      rc = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGTERM)
      try:
        proc.wait(timeout=10)
      except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
      return "TIMED OUT", time.monotonic() - start
  return ("ok" if rc == 0 else f"FAILED (exit {rc})"), time.monotonic() - start


def run(out: Path, small: bool, steps=NAMES, deadline: float | None = None, py: str = "python3",
        started: float | None = None, header: str = "", install: tuple[str, float] | None = None) -> list[dict]:
  """Runs `steps` in `STEPS` order into `out` (gpu_check.md, gpu_check.log); returns one row per step."""
  deadline = deadline or (SMALL_DEADLINE_S if small else DEADLINE_S)
  started = started if started is not None else time.time()
  out.mkdir(parents=True, exist_ok=True)
  work = Path(os.environ.get("GPU_CHECK_WORK") or out / "work")
  work.mkdir(parents=True, exist_ok=True)
  ctx = Context(py=py, out=out, work=work, small=small)
  log, md = out / "gpu_check.log", out / "gpu_check.md"
  rows, sections = [], []
  if install is not None:
    rows.append({"step": "install", "status": install[0], "seconds": round(install[1], 1), "budget": "-"})

  def write_md():
    lines = [header.rstrip(), "", f"Scale: {'small (the dry run)' if small else 'full'}; deadline {deadline} s from "
             f"the start (wheel install included); elapsed {time.time() - started:.0f} s.", "",
             "| step | status | seconds | budget s | answers |", "|---|---|---:|---:|---|"]
    answers = {s.name: s.answers for s in STEPS}
    lines += [f"| {r['step']} | {r['status']} | {r['seconds']} | {r['budget']} | {answers.get(r['step']) or '-'} |"
              for r in rows]
    lines += ["", "Deselected on the device: the tests marked `minilm` (they read the real all-MiniLM-L6-v2 weights, "
              "an 83 MB wheel the device's 64 MiB carry cannot hold); CI runs them on CPU.", "", *sections]
    tmp = md.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(md)

  write_md()
  for step in STEPS:
    if step.name not in steps:
      continue
    expected, _ = estimate(step, small)
    left = deadline - (time.time() - started)
    if expected > left:
      rows.append({"step": step.name, "status": f"NOT STARTED ({left:.0f} s left, estimate {expected:.0f} s)",
                   "seconds": 0, "budget": budget(step, small)})
      write_md()
      continue
    limit = int(min(budget(step, small), left))
    cmd = step.command(ctx)
    with open(log, "a", encoding="utf-8") as f:
      f.write(f"\n=== {step.name} (budget {limit} s): {shlex.join(cmd)}\n")
    offset = log.stat().st_size
    status, seconds = _run_step(cmd, limit, log)
    rows.append({"step": step.name, "status": status, "seconds": round(seconds, 1), "budget": limit})
    sections += [f"## {step.name}: {status}, {seconds:.0f} s of {limit}", "", "```", _tail(log, offset), "```", ""]
    write_md()
    print(f"{step.name}: {status} in {seconds:.1f} s (budget {limit} s)", flush=True)
  return rows


# ----------------------------------------------------------------------------------------------
# The corpus, drawn on the device.


def corpus(n: int, d: int, out_dir: Path, block: int = 1 << 20) -> Path:
  """bench/ann.py's clustered corpus (the same 1,000 centres: `np.random.default_rng(0)`'s first draw, noise 0.35,
  unit rows) drawn on the default device block by block and written where `bench/ann.py --memmap DIR` reads it
  (`corpus_clustered_{n}_{d}.npy`): the host only copies it (10M x 256 on the host's numpy takes minutes)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  out_dir.mkdir(parents=True, exist_ok=True)
  path = out_dir / f"corpus_clustered_{n}_{d}.npy"
  centres = jnp.asarray(np.random.default_rng(0).normal(size=(1000, d)).astype(np.float32))

  @jax.jit
  def draw(key):
    k1, k2 = jax.random.split(key)
    x = 0.35 * jax.random.normal(k1, (block, d), jnp.float32) + centres[jax.random.randint(k2, (block,), 0, 1000)]
    return x / jnp.linalg.norm(x, axis=1, keepdims=True)

  arr = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
  start = time.perf_counter()
  for b, s in enumerate(range(0, n, block)):
    rows = np.asarray(draw(jax.random.PRNGKey(b)))
    arr[s:s + block] = rows[:min(block, n - s)]
  arr.flush()
  del arr
  print(f"corpus: {n:,} x {d} clustered unit rows drawn on {jax.devices()[0].platform} "
        f"({jax.devices()[0].device_kind}) into {path} in {time.perf_counter() - start:.1f} s", flush=True)
  return path


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  sub = p.add_subparsers(dest="cmd", required=True)
  pl = sub.add_parser("plan")
  pl.add_argument("--scale", choices=("small", "full"), default="full")
  pl.add_argument("--steps", default=",".join(NAMES))
  r = sub.add_parser("run")
  r.add_argument("out")
  r.add_argument("--scale", choices=("small", "full"), default="full")
  r.add_argument("--steps", default=",".join(NAMES))
  r.add_argument("--deadline", type=float, default=None, help="seconds from --started (default: DEADLINE_S)")
  r.add_argument("--started", type=float, default=None, help="the check's start (epoch seconds; default: now)")
  r.add_argument("--python", default="python3", help="the interpreter of the steps")
  r.add_argument("--header", default="", help="a file whose text heads gpu_check.md")
  r.add_argument("--install", default="", help="STATUS:SECONDS of the wheel install, shown as a row")
  c = sub.add_parser("corpus")
  c.add_argument("--n", type=int, required=True)
  c.add_argument("--dim", type=int, required=True)
  c.add_argument("--out", required=True)
  args = p.parse_args(argv)
  if args.cmd == "corpus":
    corpus(args.n, args.dim, Path(args.out))
    return 0
  steps = tuple(args.steps.split()) if " " in args.steps else tuple(s for s in args.steps.split(",") if s)
  unknown = [s for s in steps if s not in NAMES]
  if unknown:
    print(f"unknown step {unknown[0]} (known: {' '.join(NAMES)})", file=sys.stderr)
    return 2
  small = args.scale == "small"
  if args.cmd == "plan":
    plan(small, steps)
    return 0
  header = Path(args.header).read_text() if args.header else "# vidjax on one accelerator: launch/gpu_check.sh"
  install = None
  if args.install:
    status, _, seconds = args.install.rpartition(":")
    install = (status, float(seconds))
  rows = run(Path(args.out), small, steps, args.deadline, args.python, args.started, header, install)
  print(f"wrote {Path(args.out) / 'gpu_check.md'} and {Path(args.out) / 'gpu_check.log'}")
  return 0 if all(r["status"] in ("ok", "none") for r in rows) else 1


if __name__ == "__main__":
  sys.exit(main())
