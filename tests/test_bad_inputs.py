"""Inputs that used to give silently wrong results now give one clear error naming the file/store and key/id."""
import json

import numpy as np
import pytest

from vidjax import io
from vidjax.data import annotations
from vidjax.data.features import FeatureStore, NonFiniteFeatureError, write_arrays


def test_a_duplicate_json_key_is_an_error_naming_file_and_key(tmp_path):
  # A YouCook2 file whose "database" names one video twice: json.loads would keep the second silently.
  path = tmp_path / "yc2.json"
  entry = '{"subset": "training", "recipe_type": "1", "annotations": [{"segment": [0, 1], "id": 0, "sentence": "%s"}]}'
  path.write_text('{"database": {"vid1": %s, "vid1": %s}}' % (entry % "cut", entry % "boil"))
  with pytest.raises(io.DuplicateKeyError, match=r"yc2.json.*'vid1' appears twice"):
    annotations.read_youcook2(path)
  # ActivityNet Captions: two entries for one video id.
  an = tmp_path / "val_1.json"
  an.write_text('{"v_a": {"duration": 5.0, "timestamps": [[0, 1]], "sentences": ["x"]}, '
                '"v_a": {"duration": 9.0, "timestamps": [[0, 2]], "sentences": ["y"]}}')
  with pytest.raises(io.DuplicateKeyError, match=r"val_1.json.*'v_a'"):
    annotations.read_activitynet_captions(an)
  assert io.loads_json('{"a": {"b": 1}, "c": {"b": 2}}') == {"a": {"b": 1}, "c": {"b": 2}}  # same key, two objects: fine


def test_non_finite_features_are_refused_on_write_and_on_load(tmp_path):
  ids = [f"v{i}" for i in range(6)]
  good = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
  bad = good.copy()
  bad[2, 1], bad[4, 0] = np.inf, np.nan
  with pytest.raises(NonFiniteFeatureError, match=r"kind 'text'.*'v2'"):
    write_arrays(tmp_path / "a", {"text": (ids, bad)})
  # A shard written by someone else (not through the writer) is checked once, when first read.
  write_arrays(tmp_path / "b", {"text": (ids, good)})
  shard = next((tmp_path / "b" / "text").glob("*.npy"))
  np.save(shard, bad)
  with pytest.raises(NonFiniteFeatureError, match=r"feature store .*b, kind 'text'.*2 of 6 items.*'v2', 'v4'"):
    FeatureStore(tmp_path / "b").get("text", ["v0"])


def test_evaluators_refuse_non_finite_inputs():
  from vidjax import evaluate
  text = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
  video = text.copy()
  text[3] = np.inf  # used to raise T2V R@1: a NaN / Inf score ranks first
  with pytest.raises(ValueError, match=r"queries: input 'text' holds NaN or Inf in 1 of 5 rows \(rows \[3\]\)"):
    evaluate.evaluate_gallery(evaluate.CosineScorer(), {"text": text}, {"candidates": video}, np.arange(5))
  with pytest.raises(ValueError, match="input 'candidates' holds NaN"):
    evaluate.score_pools(evaluate.CosineScorer(), {"text": video, "candidates": np.stack([text, video], 1)})


def test_reimporting_changed_values_is_refused_not_kept_silently(tmp_path):
  from vidjax.data.features import StaleFeatureError
  ids = ["a", "b"]
  x = np.ones((2, 3), np.float32)
  write_arrays(tmp_path, {"clip": (ids, x)})
  write_arrays(tmp_path, {"clip": (ids, x)})  # the same values again: a resume, nothing new is written
  assert len(list((tmp_path / "clip").glob("*.npy"))) == 1
  with pytest.raises(StaleFeatureError, match=r"kind 'clip'.*id 'a' is already stored with other values"):
    write_arrays(tmp_path, {"clip": (ids, 2 * x)})
  np.testing.assert_array_equal(FeatureStore(tmp_path).get("clip", ids), x)  # what was written is kept


def test_vedje_k_sweep_of_zero_is_a_config_error():
  from pathlib import Path
  from vidjax.experiments import vedje
  from vidjax.experiments.common import load_config
  config = load_config(Path(__file__).resolve().parents[1] / "configs/vedje_msrvtt.py:smoke")
  config.eval.k_sweep = (0, 10)  # used to print a "K=0" row holding the K=10 numbers
  with pytest.raises(ValueError, match=r"config.eval.k_sweep=\(0, 10\) is invalid: expected positive integers"):
    vedje.validate(config)


def test_a_negative_seed_is_one_clear_error(tmp_path):
  from pathlib import Path
  from vidjax.experiments import retrieval
  from vidjax.experiments.common import load_config
  config = load_config(Path(__file__).resolve().parents[1] / "configs/retrieval_msrvtt.py:smoke")
  config.seed = -1  # used to fail inside NumPy without naming the key
  with pytest.raises(ValueError, match=r"config.seed=-1 is invalid: expected a non-negative integer"):
    retrieval.run(config, tmp_path / "run")
  assert not (tmp_path / "run").exists()  # validated before anything is written


def _release_entry(**over):
  e = {"key": "k0", "video_id": "v", "type": "temp_reorder", "original_video/start_time": 0.0,
       "original_video/end_time": 10.0, "query_video/start_time": 0.0, "query_video/end_time": 10.0,
       "positive_text": "a b. then c d.", "negative_text": "c d. then a b.", "positive_start_time": 0.0,
       "positive_end_time": 10.0, "negative_start_time": 0.0, "negative_end_time": 10.0}
  e.update(over)
  return e


@pytest.mark.parametrize("over,message", [
    ({"negative_text": "a b. then c d."}, "k0.*negative text equals the positive"),
    ({"positive_end_time": 12.5}, r"k0.*\[positive_start_time, positive_end_time\] = \[0.0, 12.5\] lies outside"),
    ({"query_video/start_time": -0.0, "query_video/end_time": 11.0}, "query_video/end_time.*outside"),
])
def test_videocomp_release_entries_that_were_accepted_but_wrong(tmp_path, over, message):
  from vidjax.data import comp
  path = tmp_path / "release.json"
  path.write_text(json.dumps([_release_entry(**over)]))
  with pytest.raises(ValueError, match=message):
    comp.read_release(path)
  path.write_text(json.dumps([_release_entry()]))
  assert len(comp.read_release(path)) == 1


def test_annotation_times_past_the_video(tmp_path):
  yc2 = tmp_path / "yc2.json"
  yc2.write_text(json.dumps({"database": {"v": {"subset": "training", "recipe_type": "1", "duration": 30.0,
                                                "annotations": [{"segment": [20, 45], "id": 0, "sentence": "x"}]}}}))
  with pytest.raises(ValueError, match=r"yc2.json: video 'v' annotation #0: segment \[20.0, 45.0\] ends after the video"):
    annotations.read_youcook2(yc2)
  an = tmp_path / "an.json"
  an.write_text(json.dumps({"v_a": {"duration": 10.0, "timestamps": [[0, 10.004], [2, 4]], "sentences": ["x", "y"]}}))
  data = annotations.read_activitynet_captions(an)
  assert data.clipped == 1 and data.captions[0].end == 10.0  # float rounding: clipped and counted
  an.write_text(json.dumps({"v_a": {"duration": 10.0, "timestamps": [[0, 13.0]], "sentences": ["x"]}}))
  with pytest.raises(ValueError, match=r"sentence #0: timestamp \[0.0, 13.0\] runs 3.000 s past the video"):
    annotations.read_activitynet_captions(an)


@pytest.mark.parametrize("damage,message", [
    (lambda d: (d / "clip").glob("*.npy").__next__().write_bytes(b"\x93NUMPY"), r"clip/p0-00000.*cannot be read"),
    (lambda d: (d / "clip").glob("*.npy").__next__().write_bytes(b""), r"clip/p0-00000.*cannot be read"),
    (lambda d: (d / "clip" / "p0-00000.ids.json").write_text('{"ids": ["a", "b", "c"]}'), r"3 ids but an array"),
    (lambda d: (d / "clip" / "p0-00000.ids.json").write_text('{"rows": ["a"]}'), r"has no 'ids' list"),
])
def test_a_corrupt_shard_names_the_store_and_shard(tmp_path, damage, message):
  write_arrays(tmp_path, {"clip": (["a", "b"], np.ones((2, 3), np.float32))})
  damage(tmp_path)
  with pytest.raises(ValueError, match=message):
    FeatureStore(tmp_path).get("clip", ["a"])


def test_a_crosstask_file_that_is_not_utf8_names_the_file(tmp_path):
  import shutil
  from pathlib import Path
  root = tmp_path / "crosstask"
  shutil.copytree(Path(__file__).resolve().parent / "fixtures" / "crosstask", root)
  victim = sorted((root / "annotations").glob("*.csv"))[0]
  victim.write_bytes(b"1,0.0,1.5\n\xff\xfe2,2.0,3.0\n")
  with pytest.raises(ValueError, match=rf"{victim.name}: file: expected UTF-8 text"):
    annotations.read_crosstask(root)


def test_a_shard_is_on_disk_whole_or_not_at_all(tmp_path):
  store = FeatureStore.create(tmp_path, {})
  with store.writer("clip") as w:
    w.add("a", np.ones(3, np.float32))
  # A writer killed between a shard's array file and its id list (the commit) leaves an orphan array file.
  np.save(tmp_path / "clip" / "p0-00001.npy", np.zeros((5, 3), np.float32))
  assert FeatureStore(tmp_path).ids("clip") == ["a"]  # readers never see it
  with store.writer("clip") as w:  # the next writer removes it before it commits anything
    w.add("b", np.full(3, 2.0, np.float32))
  assert sorted(p.name for p in (tmp_path / "clip").iterdir()) == [
      "p0-00000.ids.json", "p0-00000.npy", "p0-00001.ids.json", "p0-00001.npy"]
  np.testing.assert_array_equal(FeatureStore(tmp_path).get("clip", ["a", "b"]), [[1, 1, 1], [2, 2, 2]])


def test_a_batch_larger_than_the_training_set_fails_before_anything_is_written(tmp_path):
  from pathlib import Path
  from vidjax.experiments import cast
  from vidjax.experiments.common import load_config
  config = load_config(Path(__file__).resolve().parents[1] / "configs/cast_coin.py:smoke")
  config.train.batch_size = 100_000
  with pytest.raises(ValueError, match=r"config.train.batch_size=100000 is invalid: expected at most the \d+ training"):
    cast.run(config, tmp_path / "run")
  assert not (tmp_path / "run" / "cvr").exists() and not (tmp_path / "run" / "features").exists()


def test_a_workdir_trained_on_other_features_is_refused_before_any_checkpoint_is_read(tmp_path):
  from vidjax.methods.real import check_store  # pylint: disable=g-import-not-at-top
  ids = ["a", "b"]
  store = write_arrays(tmp_path / "store", {"clip": (ids, np.ones((2, 8), np.float32))}, {"backbone": "lvt_base"})
  check_store(tmp_path / "run", store, ["clip", "text"])  # first use: recorded
  check_store(tmp_path / "run", store, ["clip", "text"])  # the same features: fine
  # The store re-extracted in place with a wider backbone: the run's checkpoints no longer fit.
  import shutil  # pylint: disable=g-import-not-at-top
  shutil.rmtree(tmp_path / "store")
  wider = write_arrays(tmp_path / "store", {"clip": (ids, np.ones((2, 16), np.float32))}, {"backbone": "lvt_base"})
  with pytest.raises(ValueError, match=r"kind 'clip' \[8\] -> \[16\].*use a new --workdir"):
    check_store(tmp_path / "run", wider, ["clip", "text"])
  other = write_arrays(tmp_path / "other", {"clip": (ids, np.ones((2, 8), np.float32))}, {"backbone": "lvt_large"})
  with pytest.raises(ValueError, match=r"backbone 'lvt_base' -> 'lvt_large'"):
    check_store(tmp_path / "run", other, ["clip"])
