"""The ~30-video real-format corpus the small-corpus tests run every method's plain guide command on, and the run
itself in its own process with its peak resident memory (`tests/test_small_corpora_*.py`; `launch/small_corpora.sh`
times every guide command the same way for BENCHMARKS.md, "Small corpora").

The corpus: `PER_SPLIT` placeholder videos (SYNTHETIC pixels, `vidjax.worlds.placeholders`) for each split of the
release files of ../shared/data as published (so 30 a dataset: MSR-VTT's 15 test videos of the 1k-A CSV and 15
training videos, COIN's 15 + 15, ...), each store prepared as the guide's step 1 does with the tiny random VideoPrism
(`test_readme_commands.build_user_data`); GenState's are the rendered corpus's triplets, a user's own. Built once
for every pytest worker (a file lock, as `conftest.real_path`).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import filelock

import test_readme_commands as guide

ROOT = Path(__file__).resolve().parents[1]
PER_SPLIT = 15
PEAK_GB = 8.0  # the most resident memory a plain command may take on a small corpus (issue 64)
# Every method's plain command finishes within memory on the small corpus (VideoComp since it trains Table 2's rows
# only on 15 test videos: BENCHMARKS.md, "Small corpora"). Those with a test file of their own
# (test_small_corpora_<method>.py, `heavy`: GRDR's T5 minutes, VideoComp's paper-size VidCLIP about half an hour,
# beyond the 5 minutes asked); and of the rest those whose run takes minutes (`heavy`).
OWN_FILE = ("grdr", "comp")
HEAVY = ("vedje",)


def command(method: str) -> tuple[str, str]:
  """(guide section, config stem) of a method's plain guide command on the small corpus: its smoke config's dataset
  file (`vidjax.methods.METHODS`), or `retrieval_msrvtt` for stage-1 retrieval (not a method of the table)."""
  from vidjax.methods import METHODS  # pylint: disable=g-import-not-at-top
  stem = "retrieval_msrvtt" if method == "retrieval" else Path(METHODS[method].smoke.split(":")[0]).stem
  return _guide_line(stem)[0], stem


def _guide_line(stem: str, section: str | None = None) -> tuple[str, list[str]]:
  """(section, argv) of the guide's `$M --config configs/<stem>.py ...` command (in `section`, when given)."""
  for title, lines in guide.guide_commands().items():
    for line in lines if section in (None, title) else ():
      if line[0] == "$M" and Path(line[line.index("--config") + 1]).stem == stem:
        return title, line
  raise KeyError(f"no `$M --config configs/{stem}.py` command in the guide" + (f"'s {section} section" if section
                                                                                 else ""))


def shared_root(tmp_path_factory, worker_id: str) -> Path:
  """The small corpora's folder in the session's temporary root, one for every xdist worker (`corpus` locks it)."""
  base = tmp_path_factory.getbasetemp()
  return (base.parent if worker_id != "master" else base) / "small_corpora"


def run_checked(method: str, data: dict, tmp_path: Path) -> dict:
  """`method`'s plain guide command run on `data` in its own process (`run`), with `check`'s assertions; its `run`."""
  section, stem = command(method)
  out = run(argv(section, stem, data, tmp_path / stem), tmp_path / stem)
  check(method, out)
  return out


def corpus(root: Path, sections: tuple[str, ...], genstate: dict | None) -> dict:
  """`test_readme_commands.build_user_data` at `PER_SPLIT` videos a split, under a lock (several workers)."""
  root.mkdir(parents=True, exist_ok=True)
  with filelock.FileLock(str(root / "build.lock")):
    return guide.build_user_data(root, genstate, PER_SPLIT, sections)


def argv(section: str, stem: str, data: dict, workdir: Path) -> list[str]:
  """The guide's command for `stem` (its config and flags as written, each release file name and `$S` replaced by
  the path here) as a `python -m vidjax.main` command line."""
  store, files = data[section]
  args = []
  for a in _guide_line(stem, section)[1][1:]:
    m = re.fullmatch(r"(--config\.[\w.]+)=(.*)", a)
    args.append(a if not m else f"{m.group(1)}={guide.with_paths(m.group(2), {**files, '$S': store})}")
  return [sys.executable, "-m", "vidjax.main", "--workdir", str(workdir)] + args


def run(command: list[str], workdir: Path, timeout: float | None = None) -> dict:
  """Runs `command` in its own process (and session): {"returncode" (None: stopped after `timeout` seconds, with
  every process it started), "peak_gb" (its peak resident memory: `resource.getrusage` of that child, by `wait4`; a
  stopped one's high-water mark so far), "output", "results" (results.json, or None)}."""
  workdir.mkdir(parents=True, exist_ok=True)
  log = workdir.parent / f"{workdir.name}.log"
  start = time.monotonic()
  with open(log, "w") as f:
    p = subprocess.Popen(command, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    while True:
      pid, status, usage = os.wait4(p.pid, os.WNOHANG)
      if pid:
        p.returncode = returncode = os.waitstatus_to_exitcode(status)
        peak_kb = usage.ru_maxrss // (1024 if sys.platform == "darwin" else 1)  # bytes on macOS, KB on Linux
        break
      if timeout is not None and time.monotonic() - start > timeout:
        status_file = Path(f"/proc/{p.pid}/status")
        hwm = re.search(r"VmHWM:\s+(\d+) kB", status_file.read_text()) if status_file.exists() else None
        peak_kb = int(hwm.group(1)) if hwm else 0
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        returncode = None
        break
      time.sleep(0.2)
  results = workdir / "results.json"
  return {"returncode": returncode, "peak_gb": peak_kb * 1024 / 1e9, "output": log.read_text(),
          "results": json.loads(results.read_text()) if results.exists() else None}


def check(method: str, out: dict) -> None:
  """What every small-corpus run must show: it finished and wrote its results, within `PEAK_GB`, and every size it
  fitted to the data is printed in one line and recorded in results.json's `clipped`."""
  assert out["returncode"] == 0, (method, out["output"][-3000:])
  assert out["results"] is not None and out["results"]["synthetic"] is True, method  # placeholder pixels
  assert out["peak_gb"] < PEAK_GB, (method, f"peak resident memory {out['peak_gb']:.2f} GB")
  for key, (asked, used) in out["results"].get("clipped", {}).items():
    assert f"clipped config.{key}: asked " in out["output"], (method, key)
    assert asked != used, (method, key)


def walk(out: Path, limit: float = 900.0) -> None:
  """`launch/small_corpora.sh OUT`: every guide command (each dataset section; the typed search after the stack's
  run) as written on the ~30-video corpus, each in its own process, timed; OUT/small_corpora.tsv: section, config,
  seconds, peak GB, result, what was clipped."""
  from vidjax.worlds import release  # pylint: disable=g-import-not-at-top
  if not (out / "corpus" / "manifest.json").exists():
    release.write_corpus(out / "corpus", release.SIZES["smoke"], seed=0)
  data = corpus(out, tuple(guide.guide_commands()), json.loads((out / "corpus" / "manifest.json").read_text())[
      "genstate"])
  lines = ["section\tcommand\tseconds\tpeak_gb\tresult\tclipped"]
  for section, commands in guide.guide_commands().items():
    for line in commands if section in data else ():
      start = time.time()
      if line[0] == "$M":
        stem = Path(line[line.index("--config") + 1]).stem
        workdir = out / "runs" / stem
        command = argv(section, stem, data, workdir)
      else:  # python -m vidjax.search --index RUN/index "query": the stack's index, written by its run above
        stem, workdir = "vidjax.search", out / "runs" / "search"
        command = [sys.executable] + [a.replace("RUN/", f"{out / 'runs' / 'stack_youcook2'}/") for a in line[1:]]
      r = run(command, workdir, timeout=limit)
      if r["returncode"] is None:
        result = f"stopped after {limit:.0f} s ({progress(workdir)})"
      else:
        result = "ran" if r["returncode"] == 0 else f"failed (exit {r['returncode']}): {r['output'][-300:]!r}"
      clipped = ", ".join(f"{k} {a}->{u}" for k, (a, u) in (r["results"] or {}).get("clipped", {}).items())
      peak = f"{r['peak_gb']:.2f}"
      lines.append(f"{section}\t{stem}\t{time.time() - start:.0f}\t{peak}\t{result}\t{clipped}")
      print(lines[-1], flush=True)
      (out / "small_corpora.tsv").write_text("\n".join(lines) + "\n")


def progress(workdir: Path) -> str:
  """How far a stopped run got: each model's last logged step (its `metrics.jsonl`), in the order they trained."""
  done = []
  for log in sorted(workdir.rglob("metrics.jsonl"), key=lambda f: f.stat().st_mtime):
    lines = log.read_text().splitlines()
    step = json.loads(lines[-1]).get("step") if lines else 0
    done.append(f"{log.parent.relative_to(workdir)} step {step}")
  return "; ".join(done) or "no model logged a step"


if __name__ == "__main__":
  walk(Path(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 900.0)
