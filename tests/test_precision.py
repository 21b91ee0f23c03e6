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
  # Every run records where it ran, a world's too (the real path's provenance also does, below).
  assert world["precision"] == {"train": "high", "extract": "highest", "eval": "highest",
                                "platform": jax.default_backend(), "device_kind": jax.devices()[0].device_kind}
  assert {"programs", "train_programs", "per_fit", "compile_seconds", "cache_hits"} <= set(world["programs"])
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


# ----------------------------------------------------------------------------------------------
# The precision-mark check (tests/conftest.py): what it asks of a test module, and that it stops the collection.

_MODULE = """
import numpy as np
import pytest
from helpers import np_softmax, plain_helper

EXPECTED = np_softmax(np.ones(3))

def _np_loss(x):
  return np.mean(x)

def _expected(x):
  return _np_loss(x) * 2

@pytest.fixture
def reference_value():
  return _expected(np.ones(2))

def test_uses_the_reference_through_a_helper():
  assert _expected(np.ones(2)) == 2.0

def test_uses_a_module_value():
  assert EXPECTED.shape == (3,)

def test_asks_for_a_fixture_that_uses_one(reference_value):
  assert reference_value

def test_loss_matches_numpy():
  pass

def test_two_stages_match_a_brute_force_reference():
  pass

def test_plain():
  assert plain_helper() and np.testing.assert_allclose(1.0, 1.0) is None

def test_pickles_of_numpy_arrays():
  pass
"""


def test_the_mark_check_finds_the_tests_that_need_it():
  from conftest import _needs_highest  # pylint: disable=g-import-not-at-top
  needs = _needs_highest(_MODULE)
  assert sorted(needs) == ["test_asks_for_a_fixture_that_uses_one", "test_loss_matches_numpy",
                           "test_two_stages_match_a_brute_force_reference", "test_uses_a_module_value",
                           "test_uses_the_reference_through_a_helper"], needs
  assert needs["test_uses_the_reference_through_a_helper"] == "it uses the NumPy reference _np_loss"
  assert needs["test_uses_a_module_value"] == "it uses the NumPy reference np_softmax"  # imported, by its name
  golden = _needs_highest('FILE = Path(__file__).parent / "golden" / "x.npz"\ndef test_a():\n  pass\n'
                          'def test_b():\n  pass\n')
  assert golden == {"test_a": "its module reads tests/golden", "test_b": "its module reads tests/golden"}


def test_the_mark_check_stops_the_collection_naming_each_test(tmp_path):
  import conftest  # pylint: disable=g-import-not-at-top
  module = tmp_path / "test_fake.py"
  module.write_text(_MODULE)

  class Item:  # what the hook reads of a collected test
    def __init__(self, name, marked):
      self.fspath, self.name, self.originalname = module, f"{name}[0]", name
      self.nodeid, self.marked = f"test_fake.py::{name}[0]", marked

    def get_closest_marker(self, name):
      return object() if self.marked and name == "highest_precision" else None

  conftest.pytest_collection_modifyitems(None, [Item("test_loss_matches_numpy", True), Item("test_plain", False)])
  with pytest.raises(pytest.UsageError, match=r"lack @pytest.mark.highest_precision.*\n  test_fake.py::"
                                              r"test_uses_a_module_value\[0\]: it uses the NumPy reference np_softmax"):
    conftest.pytest_collection_modifyitems(None, [Item("test_uses_a_module_value", False), Item("test_plain", False)])


def test_extraction_computes_in_bfloat16_on_an_accelerator_and_float32_is_one_key_away():
  """`model.fprop_dtype="auto"` (the extraction and preparation configs' default): bfloat16 on a GPU or TPU, float32
  on a CPU; "float32" on any machine; a bad value is one clear error. What ran is what the store records."""
  from vidjax import extract as engine  # pylint: disable=g-import-not-at-top
  for spec in ("configs/extract_videoprism.py", "configs/prepare.py"):
    config = load_config(ROOT / spec)
    assert config.model.fprop_dtype == "auto" and config.precision.extract == "highest", spec
    assert [engine.fprop_dtype(config, p) for p in ("gpu", "tpu", "cpu")] == ["bfloat16", "bfloat16", "float32"]
    config.model.fprop_dtype = "float32"
    assert [engine.fprop_dtype(config, p) for p in ("gpu", "cpu")] == ["float32", "float32"]
    config.model.fprop_dtype = "half"
    with pytest.raises(ValueError, match=r"config\.model\.fprop_dtype='half' is invalid"):
      engine.fprop_dtype(config)
  config = load_config(ROOT / "configs/extract_videoprism.py:smoke")
  _, _, meta = engine.load_model(config)
  assert meta["fprop_dtype"] == engine.fprop_dtype(config) == ("float32" if jax.default_backend() == "cpu"
                                                               else "bfloat16")
