"""The precision policy (`config.precision`, docs/scaling.md "Precision"): one key per phase, validated once,
reaching the programs each phase traces, recorded in results.json; and the policy every experiment's `run` follows.

Lowering shows what a program asks for on any backend (`precision = [HIGHEST, HIGHEST]` in its StableHLO), so
these checks mean the same on a CPU, where every setting computes full float32, as on a GPU or TPU."""
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from vidjax import main
from vidjax.defaults.common import PRECISION_DEFAULTS, PRECISIONS
from vidjax.experiments import cast as cast_experiment
from vidjax.methods import cast as cast_method
from vidjax.experiments import common
from vidjax.experiments.common import load_config

ROOT = Path(__file__).resolve().parents[1]

_MATMUL = jax.jit(lambda a, b: a @ b)  # one jitted function, traced again per precision
_X = jnp.ones((8, 8), jnp.float32)


def asked(lowered_text: str) -> str:
  """The precision the program's float32 dot asks for: "DEFAULT" | "HIGH" | "HIGHEST"."""
  dots = [line for line in lowered_text.splitlines() if "dot_general" in line]
  assert len(dots) == 1, dots
  return dots[0].split("precision = [")[1].split(",")[0]


@pytest.fixture(autouse=True)
def accelerator_rules(monkeypatch):
  """These tests check the plumbing, so the contexts are entered as on a GPU or TPU; on a CPU `precision` enters
  none (`common.precision_applies`: every setting computes full float32 there)."""
  monkeypatch.setattr(common, "precision_applies", lambda: True)


def test_on_a_cpu_no_context_is_entered(monkeypatch):
  monkeypatch.setattr(common, "precision_applies", _REAL_APPLIES)
  with common.precision(config_with(train="default", eval="highest"), "eval"):
    assert jax.config.jax_default_matmul_precision == (None if jax.default_backend() == "cpu" else "highest")


_REAL_APPLIES = common.precision_applies


def config_with(**phases):
  c = load_config(ROOT / "configs/cast_coin.py:smoke")
  c.precision.update(phases)
  return c


def test_every_config_states_the_documented_defaults():
  assert PRECISION_DEFAULTS == {"train": "default", "extract": "highest", "eval": "highest"}
  for path in sorted((ROOT / "configs").glob("*.py")):
    assert dict(load_config(path).precision) == PRECISION_DEFAULTS, path.name


@pytest.mark.parametrize("phase", sorted(PRECISION_DEFAULTS))
@pytest.mark.parametrize("value", PRECISIONS)
def test_each_phase_reaches_the_traced_program(phase, value):
  others = {p: ("highest" if value != "highest" else "default") for p in PRECISION_DEFAULTS if p != phase}
  config = config_with(**{phase: value}, **others)
  with common.precision(config, phase):
    assert asked(_MATMUL.lower(_X, _X).as_text()) == value.upper()
  for other, setting in others.items():  # the same jitted function, another phase: its own program
    with common.precision(config, other):
      assert asked(_MATMUL.lower(_X, _X).as_text()) == setting.upper()


def test_a_run_evaluates_at_eval_and_trains_at_train():
  """`precision_policy`: the whole run at `precision.eval`, its training call inside `precision(config, "train")`;
  the same jitted function is traced once per precision, and what it computes is still the matmul."""
  seen = {}

  @common.precision_policy
  def run(config, workdir):  # pylint: disable=unused-argument
    seen["eval"] = asked(_MATMUL.lower(_X, _X).as_text())
    with common.precision(config, "train"):
      seen["train"] = asked(_MATMUL.lower(_X, _X).as_text())
      trained = _MATMUL(_X, _X)
    return trained, _MATMUL(_X, _X)

  trained, evaluated = run(config_with(train="default", eval="highest"), "unused")
  assert seen == {"eval": "HIGHEST", "train": "DEFAULT"}
  assert float(trained[0, 0]) == float(evaluated[0, 0]) == 8.0
  assert jax.config.jax_default_matmul_precision is None  # nothing leaks out of the run


def test_every_experiment_runs_under_the_policy():
  for kind, run in main.experiments().items():
    assert getattr(run, "precision_policy", False), f"{kind}: run is not decorated with common.precision_policy"


def test_cast_trains_at_train_precision(tmp_path, monkeypatch):
  """The CAST experiment (the pattern of every experiment with a training phase) calls its training inside the
  train context, and evaluates at eval's."""
  seen = []

  class Stop(Exception):
    pass

  def fake_train_method(*args, **kwargs):  # pylint: disable=unused-argument
    seen.append(jax.config.jax_default_matmul_precision)
    raise Stop

  monkeypatch.setattr(cast_method, "train_method", fake_train_method)
  with pytest.raises(Stop):
    cast_experiment.run(config_with(train="high", eval="highest"), tmp_path)
  assert seen == ["high"]


@pytest.mark.parametrize("key,value", [("train", "fast"), ("eval", "float32"), ("extract", None)])
def test_a_bad_value_is_one_clear_error_before_any_work(tmp_path, key, value):
  config = config_with(**{key: value})
  ran = []

  @common.precision_policy
  def run(config, workdir):  # pylint: disable=unused-argument
    ran.append(True)

  with pytest.raises(ValueError, match=rf"config\.precision\.{key}={value!r} is invalid: expected one of "
                                       r"\('default', 'high', 'highest'\)"):
    run(config, tmp_path)
  with pytest.raises(ValueError, match=rf"config\.precision\.{key}="):
    common.start_run(config, tmp_path / "w", lambda c: None)
  assert not ran and not (tmp_path / "w").exists()


def test_results_record_the_policy(tmp_path):
  config = config_with(train="high")
  world = common.results_dict(config, dataset="d", synthetic=True, metrics={}, path="world",
                                skipped_videos={"count": 0, "file": ""})
  assert world["config"]["precision"] == {"train": "high", "extract": "highest", "eval": "highest"}
  store = {"backbone": "b", "store": "/s"}
  real = common.results_dict(config, dataset="d", synthetic=False, metrics={}, path="real", provenance=store,
                             skipped_videos={"count": 0, "file": ""})
  assert real["provenance"]["precision"] == {"train": "high", "extract": "highest", "eval": "highest",
                                             "platform": jax.default_backend(),
                                             "device_kind": jax.devices()[0].device_kind}
  assert real["provenance"]["backbone"] == "b" and "precision" not in store  # the store's own record is untouched
  common.write_results(tmp_path, real)
  assert json.loads((tmp_path / "results.json").read_text())["provenance"]["precision"]["train"] == "high"


def test_a_workdir_resumes_across_eval_precision_only(tmp_path):
  config = config_with()
  common.check_workdir(config, tmp_path)
  config.precision.eval = "default"  # evaluation writes nothing a resumed run reads
  common.check_workdir(config, tmp_path)
  config.precision.train = "highest"  # checkpoints were trained at the other setting
  with pytest.raises(ValueError, match=r"changed: precision\.train"):
    common.check_workdir(config, tmp_path)


def test_a_workdir_from_before_the_policy_resumes(tmp_path):
  """Its config.json has no `precision`: it ran at JAX's default precision, and resumes under the policy."""
  config = config_with()
  saved = json.loads(config.to_json_best_effort())
  del saved["precision"]
  (tmp_path / "config.json").write_text(json.dumps(saved))
  common.check_workdir(config, tmp_path)
  saved["train"]["lr"] = 1.0
  (tmp_path / "config.json").write_text(json.dumps(saved))
  with pytest.raises(ValueError, match=r"changed: train\.lr"):
    common.check_workdir(config, tmp_path)


@pytest.fixture(scope="module")
def precision_at_setup():
  return jax.config.jax_default_matmul_precision


@pytest.mark.highest_precision
def test_the_mark_covers_the_test_and_its_fixtures_setup(precision_at_setup):
  """`@pytest.mark.highest_precision` (tests/conftest.py): the test body and the fixtures it sets up run at
  "highest", so a module-scoped reference computed in a fixture is as exact as the test."""
  want = "highest" if _REAL_APPLIES() else None  # on a CPU the mark enters no context (conftest)
  assert precision_at_setup == want and jax.config.jax_default_matmul_precision == want
  assert asked(_MATMUL.lower(_X, _X).as_text()) == (want or "default").upper()
