"""VideoComp end to end on the smoke world: the results.json contract, the benchmark files, resume, config errors."""
import json
from pathlib import Path

import numpy as np
import pytest

from vidjax.data import comp
from vidjax.defaults.comp import METHODS, METRICS
from vidjax.experiments import comp as E
from vidjax.experiments.common import load_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("comp_smoke")
  return workdir, E.run(load_config(ROOT / "configs/comp_activitynet.py:smoke"), workdir)


def test_smoke_run_writes_the_results_contract(smoke_run):
  workdir, results = smoke_run
  on_disk = json.loads((workdir / "results.json").read_text())
  assert on_disk["synthetic"] is True and "SYNTHETIC" in on_disk["note"]
  assert set(on_disk["metrics"]) == set(METHODS)
  for method, row in on_disk["metrics"].items():
    assert set(row) == set(METRICS), method
    assert all(0.0 <= v <= 100.0 for v in row.values()), method
    # The comprehensive score is the product of the three reported binary accuracies (§3.4).
    np.testing.assert_allclose(row["all"], 100.0 * np.prod([row[t] / 100.0 for t in comp.EVAL_TYPES]), rtol=1e-9)
  assert set(on_disk["tables"]) == {"pretraining_ablation", "zero_shot_retrieval"}
  assert on_disk["counts"]["eval"] == {t: 16 for t in comp.EVAL_TYPES}
  # The benchmark the models were evaluated on is written in the release format and reads back.
  triplets = comp.read_release(workdir / "benchmark" / "comp_activitynet_eval.json")
  assert {t.type for t in triplets} == set(comp.EVAL_TYPES)
  train = comp.read_release(workdir / "benchmark" / "comp_activitynet_train.json")
  assert "multi" in {t.type for t in train}
  for name in ("base", "comppretrain", "contrastive", "negclip", "comploss", "comppretrain_comploss"):
    assert (workdir / "models" / name / "metrics.jsonl").exists(), name


def test_a_rerun_resumes_and_a_changed_config_is_refused(smoke_run):
  workdir, results = smoke_run
  again = E.run(load_config(ROOT / "configs/comp_activitynet.py:smoke"), workdir)
  assert again["metrics"] == results["metrics"]
  config = load_config(ROOT / "configs/comp_activitynet.py:smoke")
  config.world_finetune.lam = 1.0
  with pytest.raises(ValueError, match="world_finetune.lam"):
    E.run(config, workdir)


@pytest.mark.parametrize("key,value,match", [
    ("world_finetune.hierarchy", ("temp_reorder", "bogus"), "world_finetune.hierarchy"),
    ("world_finetune.levels", (1, 1), "world_finetune.levels"),
    ("world_pretrain.stack", 3, "model.frames"),
    ("world_model.init_temperature", 2.0, "init_temperature"),
    ("model.text_layers", 12, "model.text_layers"),
])
def test_bad_config_values_get_one_clear_error(tmp_path, key, value, match):
  config = load_config(ROOT / "configs/comp_youcook2.py:smoke")
  section, field = key.split(".")
  if key == "model.text_layers":
    config.data.features, config.data.annotations = str(tmp_path), "x.json"
  config[section][field] = value
  with pytest.raises(ValueError, match=match):
    E.run(config, tmp_path / "run")
