"""The real path end to end, per method, on the rendered release-format corpus (`vidjax.worlds.release`, smoke):
mp4 files + release annotation files -> `configs/prepare.py` (a tiny random VideoPrism) -> one store per dataset
-> each method's config with `data.features` -> results.json with the contract's keys, `"path": "real"`, the
store's provenance and the skipped videos. Also the real path's bad inputs: one clear error each, before training.

One corpus and one store per dataset are prepared for the whole module (tests run it with --dist loadfile).
"""
import json
import os
from pathlib import Path

import pytest

from vidjax.data.features import FeatureStore
from vidjax.experiments import cast, comp, genstate, prepare, retrieval, vedje
from vidjax.experiments.common import REQUIRED_KEYS, load_config
from vidjax.worlds import release

ROOT = Path(__file__).resolve().parents[1]
DROPPED = "missing"  # the MSR-VTT test video whose file the fixture deletes


def _prepare(corpus: dict, dataset: str, annotations: str, workdir: Path) -> dict:
  config = load_config(ROOT / "configs/prepare.py:smoke")
  config.dataset = dataset
  config.data.videos = corpus[dataset]["videos"]
  config.data.annotations = annotations
  return prepare.run(config, workdir)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("real_path")
  corpus = release.write_corpus(tmp / "corpus", release.SIZES["smoke"], seed=3)
  # A partial download: one MSR-VTT test video has no file.
  test_ids = [line.split(",")[2] for line in Path(corpus["msrvtt"]["test_csv"]).read_text().splitlines()[1:]]
  os.unlink(Path(corpus["msrvtt"]["videos"]) / f"{test_ids[0]}.mp4")
  runs = {
      "youcook2": _prepare(corpus, "youcook2", corpus["youcook2"]["annotations"], tmp / "prep_youcook2"),
      "msrvtt": _prepare(corpus, "msrvtt", f"{corpus['msrvtt']['annotations']},{corpus['msrvtt']['test_csv']}",
                         tmp / "prep_msrvtt"),
      "activitynet": _prepare(corpus, "activitynet", corpus["activitynet"]["annotations"] + ","
                              + corpus["activitynet"]["train_annotations"], tmp / "prep_activitynet"),
      "genstate": _prepare(corpus, "genstate", corpus["genstate"]["test_annotations"], tmp / "prep_genstate"),
  }
  return tmp, corpus, runs, {DROPPED: test_ids[0]}


def _run(run, config, workdir: Path) -> dict:
  """`run(config, workdir)`, then the contract: the keys, a real path on rendered (synthetic) pixels, and the
  provenance of the store as the run found it (VEDJE adds its caches to the store afterwards)."""
  before = FeatureStore(config.data.features).fingerprint()
  results = run(config, workdir)
  assert set(REQUIRED_KEYS) <= set(results)
  assert results["path"] == "real" and results["synthetic"] is True
  assert results["provenance"]["random_init"] is True and results["provenance"]["store"] == config.data.features
  assert results["provenance"]["fingerprint"] == before
  return results


def test_prepare_writes_every_kind_and_lists_the_skipped_video(stores):
  tmp, corpus, runs, dropped = stores
  r = runs["msrvtt"]
  assert r["path"] == "real" and r["synthetic"] is True and r["skipped_videos"]["count"] == 1
  skip = Path(r["skipped_videos"]["file"]).read_text().splitlines()
  assert skip == [f"{dropped[DROPPED]}\tno video file"]
  store = FeatureStore(tmp / "prep_msrvtt" / "features")
  assert {"clip", "clip_mean", "tokens", "text"} <= set(store.kinds())
  assert store.item_shape("tokens")[0] == 16  # VEDJE's T
  # YouCook2: every step clip (CAST) and every whole video (YouCook2-Comp) with the step captions.
  yc = FeatureStore(tmp / "prep_youcook2" / "features")
  assert store.metadata["synthetic"] is True and yc.metadata["num_frames"] == 8  # CAST App. A
  assert any("#" in i for i in yc.ids("clip")) and any("#" not in i for i in yc.ids("tokens"))
  # ActivityNet: per-sentence and per-paragraph texts in the one run.
  an = FeatureStore(tmp / "prep_activitynet" / "features")
  assert any("#" in i for i in an.ids("text")) and any(i in an.ids("clip") for i in an.ids("text"))


def test_prepare_refuses_a_file_of_another_dataset(stores, tmp_path):
  _, corpus, _, _ = stores
  with pytest.raises(ValueError, match="coin_train_70.json"):
    _prepare(corpus, "youcook2", corpus["coin"]["train_annotations"], tmp_path / "run")


def test_retrieval_skips_the_missing_video_and_counts_it(stores, tmp_path):
  tmp, corpus, _, dropped = stores
  config = load_config(ROOT / "configs/retrieval_msrvtt.py")
  config.data.features = str(tmp / "prep_msrvtt" / "features")
  config.data.annotations = corpus["msrvtt"]["test_csv"]
  results = _run(retrieval.run, config, tmp_path / "run")
  assert results["skipped_videos"] == {"count": 1, "file": "skipped_videos.txt"}
  assert (tmp_path / "run" / "skipped_videos.txt").read_text().split() == [dropped[DROPPED]]
  assert results["benchmark"]["corpus_videos"] == 7
  config.data.skip_missing = False  # strict
  with pytest.raises(ValueError, match=f"1 of 8 corpus videos have no .*{dropped[DROPPED]}"):
    retrieval.run(config, tmp_path / "strict")


def test_a_store_without_the_kind_names_the_preparation_command(stores, tmp_path):
  tmp, corpus, _, _ = stores
  config = load_config(ROOT / "configs/retrieval_msrvtt.py")
  config.data.features = str(tmp / "prep_msrvtt" / "features")
  config.data.annotations = corpus["msrvtt"]["test_csv"]
  config.data.clip_kind = "clip_lvt"
  with pytest.raises(ValueError, match=r"no kind \['clip_lvt'\].*configs/prepare.py"):
    retrieval.run(config, tmp_path / "run")
  config.data.clip_kind = "clip"
  config.data.annotations = corpus["msrvtt"]["annotations"]
  config.data.split = "testing"
  with pytest.raises(ValueError, match=r"no videos in split 'testing' \(splits present: \['test', 'train'\]\)"):
    retrieval.run(config, tmp_path / "split")


def test_cast_on_the_prepared_youcook2_store(stores, tmp_path):
  tmp, corpus, _, _ = stores
  config = load_config(ROOT / "configs/cast_youcook2.py:smoke")
  config.data.annotations = corpus["youcook2"]["annotations"]
  config.data.features = str(tmp / "prep_youcook2" / "features")
  config.data.heldout_fraction = 0.25
  config.train.update(batch_size=8, epochs=2)
  config.eval.chunk = 8
  config.sweep.context_lengths = (2,)
  results = _run(cast.run, config, tmp_path / "run")
  assert results["skipped_videos"]["count"] == 0 and set(results["metrics"]) == set(cast.METHODS)
  assert "synthetic rendered videos" in results["dataset"]


def test_vedje_on_the_prepared_msrvtt_store(stores, tmp_path):
  tmp, corpus, _, _ = stores
  config = load_config(ROOT / "configs/vedje_msrvtt.py:tiny")
  config.data.features = str(tmp / "prep_msrvtt" / "features")
  config.data.annotations = corpus["msrvtt"]["test_csv"]
  config.data.train_annotations = corpus["msrvtt"]["annotations"]
  config.data.train_video_list = corpus["msrvtt"]["train_list"]
  results = _run(vedje.run, config, tmp_path / "run")
  assert results["skipped_videos"]["count"] == 1  # the test video without a file
  assert set(results["metrics"]) == {"stage1", "vedje"} and results["benchmark"]["queries"] == 7
  # The id list defines the training set (the JSON's "train" field is not applied on top of it).
  listed = Path(corpus["msrvtt"]["train_list"]).read_text().split()
  assert results["benchmark"]["train_queries"] == sum(
      1 for s in json.loads(Path(corpus["msrvtt"]["annotations"]).read_text())["sentences"] if s["video_id"] in listed)


def test_videocomp_on_the_release_files(stores, tmp_path):
  tmp, corpus, _, _ = stores
  config = load_config(ROOT / "configs/comp_activitynet.py:tiny")
  config.data.features = str(tmp / "prep_activitynet" / "features")
  config.data.annotations = corpus["activitynet"]["test_annotations"]
  config.data.train_annotations = corpus["activitynet"]["train_annotations"]
  config.data.release_eval = corpus["videocomp"]["test_annotations"]
  config.data.release_train = corpus["videocomp"]["train_annotations"]
  results = _run(comp.run, config, tmp_path / "run")
  assert {"zero_shot", "comploss"} <= set(results["metrics"])
  assert set(results["metrics"]["zero_shot"]) >= set(comp.comp.EVAL_TYPES)


def test_genstate_on_the_users_metadata(stores, tmp_path):
  tmp, corpus, _, _ = stores
  config = load_config(ROOT / "configs/genstate_rendered.py")
  config.data.features = str(tmp / "prep_genstate" / "features")
  config.data.metadata = corpus["genstate"]["test_annotations"]
  results = _run(genstate.run, config, tmp_path / "run")
  assert results["counts"]["queries"] == len(json.loads(Path(config.data.metadata).read_text()))
  assert 0.0 <= results["metrics"]["zero_shot"]["acc_tri"] <= 100.0
