"""GenState end to end on the rendered smoke world: mp4 files -> extraction -> models -> the results.json contract."""
import json
from pathlib import Path

import numpy as np
import pytest

from vidjax import metrics
from vidjax.data import genstate
from vidjax.worlds import rendered
from vidjax.data.features import FeatureStore
from vidjax.defaults.genstate import METHODS, METRICS
from vidjax.experiments import genstate as E
from vidjax.experiments.common import load_config
from vidjax.models import pixelstats

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs/genstate_rendered.py:smoke"


@pytest.fixture(scope="module")
def smoke_run(smoke_runs):
  return smoke_runs("genstate")


def test_smoke_run_writes_the_results_contract(smoke_run):
  workdir, _ = smoke_run
  on_disk = json.loads((workdir / "results.json").read_text())
  assert on_disk["synthetic"] is True and "SYNTHETIC" in on_disk["note"] and "STAND-IN" in on_disk["backbone"]
  assert set(on_disk["metrics"]) == set(METHODS)
  n = on_disk["counts"]["test_queries"]
  assert n == 3 * len(rendered.CATEGORIES)
  for method, row in on_disk["metrics"].items():
    assert set(row) == set(METRICS) | {"order_histogram"}, method
    assert all(0.0 <= row[k] <= 100.0 for k in METRICS), method
    assert set(row["order_histogram"]) == set(metrics.TRIPLET_ORDERS)
    assert sum(row["order_histogram"].values()) == n
    # Acc_tri counts the queries whose main is first: the orderings starting with M.
    assert row["acc_tri"] == pytest.approx(100.0 * (row["order_histogram"]["MTS"] + row["order_histogram"]["MST"]) / n)
  assert set(on_disk["subsets"]) == set(rendered.CATEGORIES)
  for subset, by in on_disk["subsets"].items():
    assert set(by) == set(METHODS) and all(sum(m["order_histogram"].values()) == 3 for m in by.values()), subset
  assert on_disk["extract"]["clips"] == 3 * 4 * (2 + 3) and on_disk["extract"]["failed_videos"] == 0
  assert (workdir / "order_histogram.png").stat().st_size > 1000
  assert (workdir / "models" / "vidclip" / "metrics.jsonl").exists()
  # The evaluation queries are a GenState metadata file that the reader takes back.
  assert len(genstate.read_triplets(workdir / "world" / "genstate_test.json")) == n


def test_a_rerun_renders_and_extracts_nothing_and_gives_the_same_results(smoke_run):
  workdir, results = smoke_run
  stamps = {p.name: p.stat().st_mtime_ns for p in (workdir / "world" / "videos").iterdir()}
  again = E.run(load_config(SMOKE), workdir)
  assert again["metrics"] == results["metrics"] and again["extract"]["clips_written"] == 0
  assert stamps == {p.name: p.stat().st_mtime_ns for p in (workdir / "world" / "videos").iterdir()}


def test_a_corrupt_clip_is_padded_with_black_frames_and_counted(tmp_path):
  config = load_config(SMOKE)
  world = rendered.make_world(E.world_config(config), 0, tmp_path / "videos")
  E.render_clips(world, progress=False)
  bad = world.clips["test"][0].clip_id
  world.path(bad).write_bytes(b"not an mp4 at all" * 100)
  store, lvt, info = E.extract(config, world, tmp_path / "features", {})
  assert not lvt and info["failed_videos"] == 1 and info["padded_videos"] == 1
  assert store.get_one("padded_frames", bad).all()
  black = np.asarray(pixelstats.PixelStats(4).apply({}, np.zeros((1, 8, 64, 64, 3), np.float32))[0]).reshape(8, 16, -1)
  np.testing.assert_allclose(store.get_one("tokens", bad), black, atol=1e-6)


def test_a_users_benchmark_is_evaluated_zero_shot_from_metadata_and_a_store(tmp_path):
  triplets = [genstate.Triplet(f"q{i}", f"query {i}", f"v{i}", f"v{i}_t", f"v{i}_s", "Toy" if i < 3 else "Home")
              for i in range(5)]
  meta = tmp_path / "meta.json"
  meta.write_text(json.dumps([{"id": t.query_id, "query": t.query, "main": t.main, "temporal_negative":
                               t.temporal_negative, "semantic_negative": t.semantic_negative, "subset": t.subset}
                              for t in triplets]))
  rng = np.random.default_rng(0)
  store = FeatureStore.create(tmp_path / "store")
  text, clip = store.writer("text"), store.writer("clip")
  query = {t.query_id: rng.normal(size=8) for t in triplets}
  for t in triplets:
    text.add(t.query_id, query[t.query_id])
    clip.add(t.main, query[t.query_id] + 0.1 * rng.normal(size=8))  # close to its query
    clip.add(t.temporal_negative, rng.normal(size=8))
    clip.add(t.semantic_negative, rng.normal(size=8))
  text.flush()
  clip.flush()
  config = load_config(ROOT / "configs/genstate_rendered.py")
  config.data.metadata, config.data.features = str(meta), str(tmp_path / "store")
  results = E.run(config, tmp_path / "run")
  assert results["synthetic"] is False and set(results["subsets"]) == {"Toy", "Home"}
  assert results["metrics"]["zero_shot"]["r1"] == 100.0 and results["metrics"]["zero_shot"]["acc_tri"] == 100.0
  assert sum(results["subsets"]["Toy"]["zero_shot"]["order_histogram"].values()) == 3


@pytest.mark.parametrize("key,value,match", [
    ("world.object_px", 40, "config.world: .*object_px"),
    ("train.group", 2, "train.group"),
    ("train.batch_size", 7, "train.batch_size"),
    ("data.metadata", "meta.json", "data.metadata"),
    ("extract.model.checkpoint", "x.npz", "extract.model.name"),
    ("model.init", "bogus", "model.init"),
])
def test_bad_config_values_get_one_clear_error(tmp_path, key, value, match):
  config = load_config(SMOKE)
  section, name = key.rsplit(".", 1)
  target = config
  for part in section.split("."):
    target = getattr(target, part)
  setattr(target, name, value)
  with pytest.raises(ValueError, match=match):
    E.run(config, tmp_path / "run")
  assert not (tmp_path / "run").exists()  # checked before any work


def test_with_a_videoprism_checkpoint_the_clips_and_prompts_go_through_videoprism(tmp_path):
  from vidjax import checkpoints
  from vidjax import extract as extract_experiment
  config = load_config(SMOKE)
  config.world.update(size=72, num_train=1, num_test=1, categories=("Actor",))  # 72 = 4 VideoPrism patches of 18
  assets = ROOT.parent / "shared" / "data" / "videoprism_assets"
  config.extract.model.update(name="videoprism_lvt_public_v1_base", spm_path=str(assets / "test_spm.model"))
  config.extract.model.overrides = dict(  # a tiny random LvT (as the extraction smoke test)
      pos_emb_shape=(4, 2, 2), model_dim=32, num_heads=2, mlp_dim=64, num_spatial_layers=1, num_temporal_layers=1,
      num_auxiliary_layers=1, num_unimodal_layers=1, vocabulary_size=1000)
  model, _, _ = extract_experiment.load_model(config.extract)
  checkpoints.save_npz(extract_experiment.random_variables(model, seed=1), tmp_path / "tiny.npz")
  config.extract.model.checkpoint = str(tmp_path / "tiny.npz")
  E.validate(config)
  world = rendered.make_world(E.world_config(config), 0, tmp_path / "videos")
  E.render_clips(world, progress=False)
  queries = {t.query_id: t.query for t in world.triplets["test"]}
  store, lvt, info = E.extract(config, world, tmp_path / "features", queries)
  assert lvt and info["clips"] == 6 and info["failed_videos"] == 0
  assert store.metadata["backbone"] == "videoprism_lvt_public_v1_base"
  assert store.get("clip", [c.clip_id for c in world.all_clips()]).shape == (6, 32)
  assert store.get("tokens", [world.clips["test"][0].clip_id]).shape == (1, 8, 16, 32)
  np.testing.assert_allclose(np.linalg.norm(store.get("text", list(queries)), axis=-1), 1.0, atol=1e-5)
