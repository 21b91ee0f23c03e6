"""GenState end to end on the rendered smoke world: the world's files (mp4 clips, metadata, a store from the one
extraction) -> the one data path -> models -> the results.json contract."""
import json
from pathlib import Path

import numpy as np
import pytest

from vidjax import metrics
from vidjax.data import genstate
from vidjax.worlds import rendered
from vidjax.data.features import FeatureStore
from vidjax.experiments import genstate as E
from vidjax.experiments.common import load_config
from vidjax.methods import genstate as method
from vidjax.methods.genstate import METHODS, METRICS
from vidjax.models import pixelstats

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs/genstate_rendered.py:smoke"


@pytest.fixture(scope="module")
def smoke_run(smoke_runs):
  return smoke_runs("genstate")


def test_smoke_run_writes_the_results_contract(smoke_run):
  workdir, _ = smoke_run
  on_disk = json.loads((workdir / "results.json").read_text())
  assert on_disk["synthetic"] is True and "SYNTHETIC" in on_disk["note"] and "STAND-IN" in on_disk["note"]
  assert on_disk["path"] == "world"
  assert on_disk["provenance"]["backbone"] == f"{pixelstats.NAME} with grid=4"  # as built: its overrides named
  assert on_disk["dataset"] == "rendered"
  assert set(on_disk["metrics"]) == set(METHODS)
  n = on_disk["counts"]["queries"]
  assert n == 3 * len(rendered.CATEGORIES) and on_disk["counts"]["train_queries"] == 2 * len(rendered.CATEGORIES)
  for name, row in on_disk["metrics"].items():
    # An R@k whose k is at least the pool (3 + distractors videos) is 100 by construction: noted, never plain.
    pool = {len(p) for p in genstate.pools(genstate.read_triplets(workdir / "world" / "genstate_test.json"))}
    assert len(pool) == 1
    pool = pool.pop()
    notes = row.pop(metrics.NOTES, {})
    assert set(row) == set(METRICS) | {"order_histogram"}, name
    assert all(k in {"r1", "r5", "r10"} and row[k] == 100.0 and "100 by construction" in v for k, v in notes.items())
    assert set(notes) == {f"r{k}" for k in (1, 5, 10) if k >= pool}, (name, pool, notes)
    assert all(0.0 <= row[k] <= 100.0 for k in METRICS), name
    assert set(row["order_histogram"]) == set(metrics.TRIPLET_ORDERS)
    assert sum(row["order_histogram"].values()) == n
    # Acc_tri counts the queries whose main is first: the orderings starting with M.
    assert row["acc_tri"] == pytest.approx(100.0 * (row["order_histogram"]["MTS"] + row["order_histogram"]["MST"]) / n)
  assert set(on_disk["subsets"]) == set(rendered.CATEGORIES)
  for subset, by in on_disk["subsets"].items():
    assert set(by) == set(METHODS) and all(sum(m["order_histogram"].values()) == 3 for m in by.values()), subset
  assert on_disk["decode"]["failed_videos"] == 0
  assert (workdir / "order_histogram.png").stat().st_size > 1000
  assert (workdir / "models" / "vidclip" / "metrics.jsonl").exists()


def test_the_world_is_written_as_a_users_files_and_read_through_them(smoke_run):
  """The world wrote release files and a store under <workdir>/world; the run read those (world.json's keys)."""
  workdir, _ = smoke_run
  keys = json.loads((workdir / "world" / "world.json").read_text())["data"]
  root = workdir / "world"
  assert keys == {"metadata": str(root / "genstate_test.json"), "train_metadata": str(root / "genstate_train.json"),
                  "features": str(root / "features"), "video_kind": "clip_mean", "name": "rendered"}
  test = genstate.read_triplets(keys["metadata"])
  assert len(test) == 3 * len(rendered.CATEGORIES) and all(t.negative_prompts for t in test)
  store = FeatureStore(keys["features"])
  assert store.metadata["synthetic"] is True and "world" in store.metadata
  assert len(store.ids("tokens")) == 3 * 4 * (2 + 3) == len(list((root / "videos").iterdir()))
  # Every test prompt's text (the query and both negatives' prompts) is in the store: the stand-in's colour bag.
  texts = genstate.prompt_texts(test)
  assert len(texts) == 3 * len(test)
  np.testing.assert_array_equal(store.get("text", list(texts)), method.stand_in_texts(list(texts.values())))
  # The run's config records what it was given; the world's keys live in world.json, where the suite reads them.
  assert json.loads((workdir / "config.json").read_text())["data"]["metadata"] == ""


def test_a_rerun_renders_and_extracts_nothing_and_gives_the_same_results(smoke_run):
  workdir, results = smoke_run
  stamps = {p: p.stat().st_mtime_ns for p in (workdir / "world").rglob("*") if p.is_file()}
  again = E.run(load_config(SMOKE), workdir)
  assert again["metrics"] == results["metrics"]
  assert stamps == {p: p.stat().st_mtime_ns for p in (workdir / "world").rglob("*") if p.is_file()}


def test_a_corrupt_clip_is_padded_with_black_frames_and_counted(tmp_path):
  config = load_config(SMOKE)
  config.world.update(num_train=0, num_test=1, categories=("Actor",))  # three clips
  world = rendered.make_world(method.world_config(config), 0, tmp_path / "videos")
  rendered.write_videos(world)
  bad = world.clips["test"][0].clip_id
  world.path(bad).write_bytes(b"not an mp4 at all" * 100)
  keys = method.write_world(config, tmp_path)  # the clips on disk are kept: the corrupt one is extracted as it is
  store = FeatureStore(keys["features"])
  assert store.metadata["decode"]["failed_videos"] == 1 and store.metadata["decode"]["padded_videos"] == 1
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
  assert results["path"] == "real" and results["dataset"] == str(meta) and results["counts"]["train_queries"] == 0
  # evaluate_all's view: the store embedded no negative prompts, so no Comp pairs; R@K of each query over the videos.
  models, benchmarks = method.suite(config, tmp_path / "run")
  assert [b.name for b in benchmarks] == ["GenState (meta.json)", "R@K (meta.json)"]
  assert not any(b.synthetic for b in benchmarks) and [m.name for m in models] == ["zero_shot"]
  assert models[0].evaluate(benchmarks[0])["r1"] == 100.0 and models[0].evaluate(benchmarks[1])["t2v_r1"] == 100.0


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
  keys = method.write_world(config, tmp_path / "world")
  store = FeatureStore(keys["features"])
  test = genstate.read_triplets(keys["metadata"])
  clips = [v for t in (*genstate.read_triplets(keys["train_metadata"]), *test) for v in t.videos]
  assert keys["video_kind"] == "clip" and store.metadata["decode"]["failed_videos"] == 0 and len(clips) == 6
  assert store.metadata["backbone"] == "videoprism_lvt_public_v1_base"
  assert store.get("clip", clips).shape == (6, 32)
  assert store.get("tokens", [test[0].main]).shape == (1, 8, 16, 32)
  np.testing.assert_allclose(np.linalg.norm(store.get("text", list(genstate.prompt_texts(test))), axis=-1), 1.0,
                             atol=1e-5)
