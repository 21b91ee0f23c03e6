"""Every notebook in notebooks/ is valid nbformat 4 and runs top to bottom on CPU.

Each notebook's code cells run in one namespace, in order, in a fresh Python process (so the
notebook's matplotlib and JAX state stay out of the pytest process), with shell/magic lines
(`!pip ...`, `%cd ...`) dropped and `VIDJAX_WORKDIR` pointing at its run directory. XLA's backend
optimization is turned off in that process: the notebook's cost is almost all compilation of tiny
programs, and their results do not depend on it.

Every notebook ends with the real path on the rendered release corpus; its steps are the session's shared
`real_path` runs (conftest.py), which the notebook reads back. Each notebook loads exactly the smoke config an
experiment test runs (CAST's a little wider: `conftest.cast_wide_config`), so it is pointed at that shared finished
run (`conftest.smoke_runs`) and takes its "read the finished run" branch (after `check_workdir` confirms the
config): the suite trains each smoke world once, and the notebooks' own code (config, table, plot) runs on its results.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

# Runs in the child process: argv[1] = notebook path. Prints a marker after every cell so a
# failure names the cell.
RUNNER = r"""
import json, sys
nb = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for n, cell in enumerate(nb["cells"]):
  if cell["cell_type"] != "code":
    continue
  source = "".join(cell["source"])
  lines = [l for l in source.splitlines() if not l.lstrip().startswith(("!", "%"))]
  exec(compile("\n".join(lines), f"{sys.argv[1]}:cell{n}", "exec"), namespace)
  print(f"@@ cell {n} done", flush=True)
print("@@ notebook done", flush=True)
"""


# notebook -> (the shared smoke run it reads, the plot it saves)
RUNS = {"cast_quickstart.ipynb": ("cast_wide", "context_sweep.png"),
        "genstate_quickstart.ipynb": ("genstate", "genstate_order_histogram.png"),
        "grdr_quickstart.ipynb": ("grdr", "grdr_latency_vs_corpus.png"),
        "stack_quickstart.ipynb": ("stack", "stack_rows.png"),
        "vedje_quickstart.ipynb": ("vedje", "vedje_gain_per_k.png"),
        "videocomp_quickstart.ipynb": ("comp", "comp_accuracy_per_disruption.png")}


def test_there_are_notebooks():
  assert [p.name for p in NOTEBOOKS] == sorted(RUNS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_valid_nbformat4(path):
  nb = json.loads(path.read_text())
  assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 4
  assert nb["metadata"]["kernelspec"]["language"] == "python"
  kinds = [c["cell_type"] for c in nb["cells"]]
  assert set(kinds) <= {"markdown", "code"} and "markdown" in kinds and "code" in kinds
  ids = [c.get("id") for c in nb["cells"]]
  assert all(ids) and len(set(ids)) == len(ids)
  for cell in nb["cells"]:
    assert isinstance(cell["source"], list) and all(isinstance(s, str) for s in cell["source"])
    assert isinstance(cell["metadata"], dict)
    if cell["cell_type"] == "code":
      # Committed clean: no stale outputs or execution counts.
      assert cell["outputs"] == [] and cell["execution_count"] is None
  # Markdown must say the numbers are synthetic, and the install line stays for Colab.
  text = "".join("".join(c["source"]) for c in nb["cells"])
  assert "SYNTHETIC" in text and "pip install -e ." in text


# notebook -> the real-path run its last section reads (conftest.real_path: the same configs, run once per session)
REAL_STEPS = {"cast_quickstart.ipynb": "cast_youcook2", "genstate_quickstart.ipynb": "genstate",
              "grdr_quickstart.ipynb": "grdr_msrvtt", "stack_quickstart.ipynb": "stack_youcook2",
              "vedje_quickstart.ipynb": "vedje_msrvtt", "videocomp_quickstart.ipynb": "comp_activitynet"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path, smoke_runs, real_path):
  shared, plot = RUNS[path.name]
  workdir = smoke_runs(shared)[0]
  real_path(REAL_STEPS[path.name])
  env = dict(os.environ, VIDJAX_WORKDIR=str(workdir), VIDJAX_REAL_PATH=str(real_path.root), MPLBACKEND="Agg",
             JAX_PLATFORMS="cpu",
             XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip())
  env.pop("PYTHONPATH", None)  # the notebook must find the repo by itself
  proc = subprocess.run([sys.executable, "-c", RUNNER, str(path)], cwd=path.parent, env=env,
                        capture_output=True, text=True, timeout=600)
  log = proc.stdout + proc.stderr
  assert proc.returncode == 0, log[-6000:]
  assert "@@ notebook done" in proc.stdout
  results = json.loads((workdir / "results.json").read_text())
  assert results["synthetic"] is True
  assert (workdir / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert "read the finished run" in proc.stdout
  # The last section: the real path (the rendered release corpus, prepared, then the method) with its provenance.
  assert "path: real | synthetic: True | skipped videos: 0" in proc.stdout, proc.stdout[-3000:]
  if path.name == "stack_quickstart.ipynb":
    assert set(results["metrics"]) == {"recall", "recall_rerank", "full_stack"}
    assert re.search(r"ground truth \S+: (rank \d+|not in the top 10)", proc.stdout), proc.stdout[-2000:]
  if path.name == "cast_quickstart.ipynb":
    assert set(results["metrics"]) >= {"zero_shot", "cast"}
    # The §3.4 reranking cell ran on the trained params and printed its example and summary.
    assert "cast      ground truth at rank" in proc.stdout
    found = re.search(r"first in (\d+) prompts: text match (\d+), CAST reranking (\d+)", proc.stdout)
    assert found, proc.stdout[-2000:]
    prompts, text_only, reranked = map(int, found.groups())
    assert prompts >= 50
    # The notebook's point: with the trained CAST the true continuation comes first far more often.
    assert reranked >= text_only + 0.2 * prompts, (prompts, text_only, reranked)
