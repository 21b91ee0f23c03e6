"""CAST end to end: smoke runs on the embedded world and on real-format annotations + a store."""
import json
from pathlib import Path

import numpy as np
import pytest

from vidjax.data import features
from vidjax.data.annotations import read_crosstask
from vidjax.experiments import cast
from vidjax.experiments.common import load_config
from vidjax.methods import cast as cast_method
from vidjax.scorers import cast as cast_scorers

ROOT = Path(__file__).resolve().parents[1]
CROSSTASK = ROOT / "tests" / "fixtures" / "crosstask"




@pytest.fixture(scope="module")
def smoke_run(smoke_runs):
  return smoke_runs("cast")


def test_results_file_has_the_common_shape(smoke_run, capsys):
  workdir, results = smoke_run
  on_disk = json.loads((workdir / "results.json").read_text())
  assert on_disk["metrics"] == results["metrics"]
  assert on_disk["experiment"] == "cast_coin"
  assert on_disk["synthetic"] is True and "synthetic" in on_disk["dataset"]
  assert set(on_disk["metrics"]) == set(cast_method.METHODS) and list(results["metrics"]) == list(cast_method.METHODS)
  for method, m in on_disk["metrics"].items():
    assert set(m) == {"acc", "r5", "mnr", "state_acc", "ident_acc"}, method
    assert 0 <= m["acc"] <= m["r5"] <= 100 and 1 <= m["mnr"] <= 10
    b = on_disk["top1_breakdown"][method]
    assert b["top1_exact"] == pytest.approx(m["acc"], abs=1e-3)  # exact top-1 is R@1 (both pessimistic)
    assert sum(b.values()) == pytest.approx(100.0, abs=1e-2)
  assert set(on_disk["context_sweep"]) == {"0", "1", "2"}
  w = on_disk["ensemble"]
  assert w["w_v"] in cast_scorers.W_V_GRID and w["w_p"] in cast_scorers.W_P_GRID
  # The world was written as a user's files and read through the one data path.
  assert on_disk["path"] == "world" and on_disk["dataset"] == "coin (synthetic procedural world)"
  assert on_disk["data"] == {"annotations": str(workdir / "world" / "coin" / "COIN.json"),
                             "features": str(workdir / "world" / "features")}
  assert on_disk["provenance"]["backbone"] == "synthetic-procedural-world"
  assert on_disk["config"]["data"]["annotations"] == ""  # results record the user's config
  assert json.loads((workdir / "world" / "world_truth.json").read_text())["reuse_gap"] == {}


def test_run_writes_benchmark_files_and_plot(smoke_run):
  workdir, _ = smoke_run
  for name in ("benchmark.json", "train.json", "heldout.json", "stats.json"):
    assert (workdir / "cvr" / name).exists(), name
  for name in ("context_sweep.png", "top1_breakdown.png"):
    assert (workdir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
  records = json.loads((workdir / "cvr" / "benchmark.json").read_text())
  assert all(len(set(r["candidates"])) == 10 and r["target"] in r["candidates"] for r in records)
  # Every method trained through the one loop and logged its loss.
  for method in ("late_fusion_learned", "early_fusion", "early_fusion_residual", "cast", "cast_L0", "cast_L1"):
    assert (workdir / "train" / method / "metrics.jsonl").exists(), method


def test_rerun_resumes_and_reproduces(smoke_run):
  workdir, results = smoke_run
  again = cast.run(load_config(ROOT / "configs/cast_coin.py:smoke"), workdir)  # checkpoints are final: no retraining
  assert again["metrics"] == results["metrics"]
  assert again["context_sweep"] == results["context_sweep"]


def test_tfds_source_gives_the_same_metrics_as_the_store(smoke_run, tmp_path, capsys):
  """The two ways to feed data (docs/data.md): a VidjaxCvr dataset packing the run's CVR files and store."""
  from vidjax.tfds.common import prepare  # the [tfds] extra (installed by the test extra)
  from vidjax.tfds.cvr import CvrConfig, VidjaxCvr
  workdir, results = smoke_run
  builder = prepare(VidjaxCvr(config=CvrConfig(name="coin_smoke", dataset="coin", cvr_dir=str(workdir / "cvr"),
                                               features=str(workdir / "world" / "features")), data_dir=str(tmp_path / "tfds")))
  assert builder.info.metadata["features"]["synthetic"] is True
  config = load_config(ROOT / "configs/cast_coin.py:smoke")
  config.data.update(source="tfds", tfds=str(builder.data_dir))
  again = cast.run(config, tmp_path / "run")
  assert "from TFDS vidjax_cvr/coin_smoke/1.0.0" in capsys.readouterr().out
  assert again["synthetic"] is True and again["benchmark_stats"]["benchmark"] == results["benchmark_stats"]["benchmark"]
  assert again["metrics"] == results["metrics"]
  assert again["context_sweep"] == results["context_sweep"]
  assert again["ensemble"] == results["ensemble"]
  config.data.update(tfds=str(tmp_path / "tfds"))  # the data_dir, not a version folder
  with pytest.raises(FileNotFoundError, match="not a built TFDS dataset version folder.*coin_smoke/1.0.0"):
    cast.run(config, tmp_path / "run2")
  config.data.update(tfds="", source="tfds")
  with pytest.raises(ValueError, match="data.tfds"):
    cast.run(config, tmp_path / "run3")


def _store_for(videos, path, dim=16, drop=None):
  ids = [c.clip_id for v in videos for c in v.clips if c.clip_id != drop]
  rng = np.random.default_rng(0)
  emb = rng.normal(size=(len(ids), dim)).astype(np.float32)
  return features.write_arrays(path, {"clip": (ids, emb), "text": (ids, emb + 0.1)},
                               {"backbone": "random-test-features", "synthetic": True})


def _crosstask_config(store_dir):
  config = load_config(ROOT / "configs/cast_crosstask.py:smoke")
  config.data.annotations = str(CROSSTASK)
  config.data.features = str(store_dir)
  config.train.batch_size = 8
  config.eval.chunk = 16
  config.sweep.context_lengths = (2,)
  config.data.heldout_fraction = 0.4  # the fixture is tiny: enough held-out videos for 1-vs-9 pools
  return config


def test_real_format_annotations_with_a_store(tmp_path, capsys):
  videos = read_crosstask(CROSSTASK)
  _store_for(videos, tmp_path / "store")
  config = _crosstask_config(tmp_path / "store")
  config.train.batch_size = 512  # the paper's, larger than this small store's training set: clipped to what fits
  config.train.epochs = 1  # the clipped batch is the whole training set: one step per epoch
  results = cast.run(config, tmp_path / "run")
  fits = len(json.loads((tmp_path / "run" / "cvr" / "crosstask_train.json").read_text()))
  assert results["clipped"] == {"train.batch_size": [512, fits]} and results["config"]["train"]["batch_size"] == fits
  assert f"clipped config.train.batch_size: asked 512, used {fits} (the {fits} training instances" in \
      capsys.readouterr().out
  assert (tmp_path / "run" / "cvr" / "crosstask_test.json").exists()
  assert (tmp_path / "run" / "cvr" / "crosstask_train.json").exists()
  assert results["synthetic"] is True  # the store says its features are random
  assert set(results["metrics"]) == set(cast_method.METHODS)


def test_store_missing_an_id_is_one_clear_error(tmp_path):
  videos = read_crosstask(CROSSTASK)
  victim = videos[0].clips[1].clip_id
  _store_for(videos, tmp_path / "store", drop=victim)
  config = _crosstask_config(tmp_path / "store")
  config.data.skip_missing = False  # strict: a missing feature is an error, not a skipped video
  with pytest.raises(features.MissingFeatureError, match=f"no 'clip' features for 1 of .*{victim}"):
    cast.run(config, tmp_path / "run")


def test_workdir_of_another_config_is_refused(smoke_run):
  workdir, _ = smoke_run
  config = load_config(ROOT / "configs/cast_coin.py:smoke")
  config.seed = 1  # another world: the stored features and checkpoints would be stale
  with pytest.raises(ValueError, match=r"made by a different config \(changed: seed\)"):
    cast.run(config, workdir)


def test_skip_missing_videos_drops_them_before_the_benchmark_and_says_so(tmp_path, capsys):
  videos = read_crosstask(CROSSTASK)
  victim = videos[0].clips[1].clip_id
  _store_for(videos, tmp_path / "store", drop=victim)
  config = _crosstask_config(tmp_path / "store")
  config.data.skip_missing = True
  results = cast.run(config, tmp_path / "run")
  dropped = results["benchmark_stats"]["dropped_videos"]
  assert dropped["count"] == 1 and dropped["ids"] == [videos[0].video_id]
  assert "dropped 1 videos" in capsys.readouterr().out
  assert results["path"] == "real" and results["skipped_videos"] == {"count": 1, "file": "skipped_videos.txt"}
  assert (tmp_path / "run" / "skipped_videos.txt").read_text().split() == [videos[0].video_id]
  for name in ("crosstask_test.json", "crosstask_train.json", "heldout.json"):
    records = json.loads((tmp_path / "run" / "cvr" / name).read_text())
    assert all(r["video_id"] != videos[0].video_id for r in records)
    assert all(victim not in r.get("candidates", []) + r["context"] for r in records)


def test_available_videos_list(tmp_path):
  videos = read_crosstask(CROSSTASK)
  _store_for(videos, tmp_path / "store")
  keep = [v.video_id for v in videos[2:]]
  (tmp_path / "available.txt").write_text("\n".join(keep) + "\n")
  config = _crosstask_config(tmp_path / "store")
  config.data.available_videos = str(tmp_path / "available.txt")
  results = cast.run(config, tmp_path / "run")
  assert results["benchmark_stats"]["dropped_videos"]["ids"] == sorted(v.video_id for v in videos[:2])


def test_cast_learns_what_text_and_continuity_cannot_and_reranks_generations(smoke_runs):
  """Behaviour at smoke cost: a wider world and 20 epochs are enough for CAST to learn (the shared run of
  conftest.cast_wide_config, which the CAST notebook reads too)."""
  from conftest import cast_wide_config  # pylint: disable=g-import-not-at-top
  run, results = smoke_runs("cast_wide")
  config = cast_wide_config()
  acc = {m: v["acc"] for m, v in results["metrics"].items()}
  assert acc["cast"] >= acc["zero_shot"] + 30, acc  # measured on seeds 0-2: 66-71 vs 16
  assert acc["cast"] >= acc["late_fusion_heuristic"] + 15, acc  # 66-71 vs 21-43

  # §3.4: rerank each prompt's candidates (stand-ins for K generated continuations) with the trained
  # CAST and the selected ensemble weights; the true continuation comes first more often than by text.
  from vidjax import io
  from vidjax.data import cvr as cvr_data
  from vidjax.data.pipeline import FeatureTable
  store = features.FeatureStore(run / "world" / "features")
  clips, texts = (FeatureTable(store, kind, store.ids(kind)) for kind in ("clip", "text"))
  source = cvr_data.CVRTrainSource(io.read_json(run / "cvr" / "train.json"), clips, texts, 2)
  model = cast_method.build_models(config, clips.dim)["cast"]
  params = cast_method.train_method("cast", model, source, config, run, None)  # resumes: no training
  predictor = cast_scorers.PredictorScorer(lambda p, *a: model.apply({"params": p}, *a), params)
  w = results["ensemble"]
  wins = {"text_only": 0, "cast": 0}
  prompts = [r for r in io.read_json(run / "cvr" / "benchmark.json") if len(r["context"]) >= 2][:60]
  for r in prompts:
    out = cast_scorers.rerank_generated(
        texts.gather(texts.rows([r["target"]]))[0], clips.gather(clips.rows(r["context"][-2:])),
        clips.gather(clips.rows(r["candidates"])), predictor, w["w_v"], w["w_p"])
    for key in wins:
      wins[key] += int(r["candidates"][out[key][0]] == r["target"])
  assert wins["cast"] >= wins["text_only"] + 0.2 * len(prompts), wins


def test_history_world_run_reports_fair_comparisons_and_reuse_splits(tmp_path):
  config = load_config(ROOT / "configs/cast_coin.py:smoke")
  config.data.world = "history"
  config.world.update(num_objects=3, max_objects=2)  # the smoke world's tasks are short
  r = cast.run(config, tmp_path)
  fair = r["fair_comparison"]
  assert set(fair) == {"prediction_only", "same_ensemble"}
  assert set(fair["prediction_only"]) == set(fair["same_ensemble"]) == set(cast_method.ADAPTERS)
  # One computation, reported under three names: Table 4's baselines are their predictions alone,
  # Table 5's C row is CAST's prediction alone, CAST's Table 2 row is its ensemble.
  for name in ("early_fusion", "early_fusion_residual"):
    assert fair["prediction_only"][name] == r["metrics"][name]
  assert {k: v for k, v in fair["prediction_only"]["cast"].items() if k != "r5"} == \
      {k: v for k, v in r["inference_ablation"]["C_cast_prediction"].items() if k != "r5"}
  assert {k: v for k, v in fair["same_ensemble"]["cast"].items() if k in r["metrics"]["cast"]} == r["metrics"]["cast"]
  sub = r["subsets"]
  assert set(sub) == {"reuse", "non_reuse"} and sub["reuse"]["n"] > 0
  assert sub["reuse"]["n"] + sub["non_reuse"]["n"] == r["benchmark_stats"]["benchmark"]["queries"]
  assert set(r["context_sweep_reuse_by_gap"]) == {"0", "1", "2"}
  assert all(k.startswith("gap=") for k in r["context_sweep_reuse_by_gap"]["2"])
  text = (tmp_path / "results.json").read_text()
  assert "reuse queries only" not in text  # tables are printed, results.json holds numbers


def test_world_choice_is_checked(tmp_path):
  config = load_config(ROOT / "configs/cast_coin.py:smoke")
  config.data.world = "second_order"
  with pytest.raises(ValueError, match="data.world"):
    cast.run(config, tmp_path)
  config.data.world = "history"
  config.data.annotations, config.data.features = "x.json", "store"
  with pytest.raises(ValueError, match="data.world"):
    cast.run(config, tmp_path)
  config.data.world, config.data.annotations = "first_order", ""  # a store without its annotations
  with pytest.raises(ValueError, match=r"data.annotations / data.features.*both .* or neither"):
    cast.run(config, tmp_path)
