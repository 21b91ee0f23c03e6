"""Stage-1 retrieval end to end: the synthetic moving-object world and real annotations + a store."""
import json
from pathlib import Path

import numpy as np
import pytest

from vidjax.data import features
from vidjax.data.annotations import read_msrvtt
from vidjax.experiments import retrieval
from vidjax.experiments.common import load_config

ROOT = Path(__file__).resolve().parents[1]
MSRVTT = ROOT.parent / "shared" / "data" / "msrvtt"
KEYS = {f"{d}_{m}" for d in ("t2v", "v2t") for m in ("r1", "r5", "r10", "mdr", "mnr")}


@pytest.mark.parametrize("dataset", ["msrvtt", "didemo", "activitynet"])
def test_synthetic_world_run(tmp_path, dataset):
  results = retrieval.run(load_config(ROOT / f"configs/retrieval_{dataset}.py:smoke"), tmp_path)
  on_disk = json.loads((tmp_path / "results.json").read_text())
  assert on_disk["synthetic"] is True and "synthetic" in on_disk["dataset"]
  assert set(on_disk["metrics"]) == {"stage1"} and set(on_disk["metrics"]["stage1"]) == KEYS
  assert on_disk["benchmark"]["queries"] == on_disk["benchmark"]["corpus_videos"] == 4 * 30
  m = results["metrics"]["stage1"]
  assert 0 <= m["t2v_r1"] <= m["t2v_r5"] <= m["t2v_r10"] <= 100
  # Order-blind stage 1: a time-reversed twin always ties its base (ties count against the model),
  # while the bag of words finds the objects: the right group is usually in the top 10.
  assert results["world_checks"]["twin_scores_at_least_base_pct"] == 100.0
  assert m["t2v_r10"] >= 50.0
  # The world was written as the dataset's release files and store under <workdir>/world, and read as a user's.
  assert on_disk["path"] == "world" and on_disk["config"]["data"]["annotations"].startswith(str(tmp_path / "world"))
  store = features.FeatureStore(tmp_path / "world" / "features")
  assert set(store.kinds()) >= {"tokens", "clip", "text"} and store.item_shape("tokens") == (16, 16, 32)
  assert len(store.ids("tokens")) == 4 * 30  # what the run reads: the test split


def test_real_msrvtt_annotations_with_a_store(tmp_path):
  data = read_msrvtt(MSRVTT / "MSRVTT_JSFUSION_test.csv")
  rng = np.random.default_rng(0)
  video = rng.normal(size=(len(data.videos), 16)).astype(np.float32)
  # Captions equal to their video's embedding plus noise: retrieval is easy but not perfect.
  index = {v.video_id: i for i, v in enumerate(data.videos)}
  text = np.stack([video[index[c.video_id]] + 0.5 * rng.normal(size=16) for c in data.captions]).astype(np.float32)
  store_dir = tmp_path / "store"
  features.write_arrays(store_dir, {"clip": (data.video_ids(), video),
                                    "text": ([c.caption_id for c in data.captions], text)}, {"backbone": "test"})
  config = load_config(ROOT / "configs/retrieval_msrvtt.py")
  config.data.annotations = str(MSRVTT / "MSRVTT_JSFUSION_test.csv")
  config.data.features = str(store_dir)
  results = retrieval.run(config, tmp_path / "run")
  assert results["synthetic"] is False
  assert results["benchmark"]["queries"] == results["benchmark"]["corpus_videos"] == 1000
  m = results["metrics"]["stage1"]
  assert m["t2v_r10"] > m["t2v_r1"] > 20.0 and m["v2t_r1"] > 20.0
  # Stage 1 through a library index (`config.index`): faiss's exact Flat index gives stage 1's own T2V R@K (the
  # random embeddings have no ties), reported beside it with the index it used.
  pytest.importorskip("faiss", reason="faiss-cpu is an optional extra (pip install vidjax[faiss])")
  config.index.backend, config.index.params.factory = "faiss", "Flat"
  through = retrieval.run(config, tmp_path / "run_faiss")
  assert through["metrics"]["stage1"] == m
  assert through["metrics"]["stage1_index"] == {f"t2v_r{k}": m[f"t2v_r{k}"] for k in (1, 5, 10)}
  assert through["index"] == {"backend": "faiss", "dtype": "float32", "exact": True,
                              "params": {"factory": "Flat", "blas_threshold": 16}}
  config.index.backend, config.index.params.factory = "jax", None
  # The other way to feed data: the same queries and embeddings through a TFDS dataset (vidjax.tfds).
  from vidjax.tfds.common import prepare
  from vidjax.tfds.retrieval import RetrievalConfig, VidjaxRetrieval
  builder = prepare(VidjaxRetrieval(config=RetrievalConfig(name="msrvtt_test_store", dataset="msrvtt",
                                                           features=str(store_dir)), data_dir=str(tmp_path / "tfds")),
                    manual_dir=MSRVTT)
  tfds_config = load_config(ROOT / "configs/retrieval_msrvtt.py")
  tfds_config.data.update(source="tfds", tfds=str(builder.data_dir), split="test")
  from_tfds = retrieval.run(tfds_config, tmp_path / "run_tfds")
  assert from_tfds["metrics"] == results["metrics"]
  assert {k: v for k, v in from_tfds["benchmark"].items() if k != "name"} == {
      k: v for k, v in results["benchmark"].items() if k != "name"}
  assert from_tfds["benchmark"]["name"] == "vidjax_retrieval/msrvtt_test_store/1.0.0 [test]"
  # A store without the text kind: one clear error naming what is missing.
  features.write_arrays(tmp_path / "partial", {"clip": (data.video_ids(), video)}, {})
  config.data.features = str(tmp_path / "partial")
  with pytest.raises(Exception, match="query texts"):
    retrieval.run(config, tmp_path / "run2")


def test_bad_values_fail_before_work(tmp_path):
  config = load_config(ROOT / "configs/retrieval_didemo.py")
  config.data.protocol = "sentences"
  with pytest.raises(ValueError, match="data.protocol"):
    retrieval.run(config, tmp_path)
  config = load_config(ROOT / "configs/retrieval_didemo.py")
  config.data.features = str(tmp_path)
  with pytest.raises(ValueError, match="data.annotations"):
    retrieval.run(config, tmp_path)


def test_a_gallery_of_fewer_videos_than_k_says_its_recall_is_100_by_construction(tmp_path, capsys):
  """Issue 62: 6 videos, so R@10 (either way) cannot miss: results.json notes it beside the 100 and the table marks
  it, instead of a plain 100."""
  ids = [f"video{i}" for i in range(6)]
  csv = tmp_path / "test.csv"
  csv.write_text("key;vid_key;video_id;sentence\n" + "".join(
      f"ret{i};msr{i};{v};a person does thing {i}\n" for i, v in enumerate(ids)))
  rng = np.random.default_rng(0)
  video = rng.normal(size=(6, 16)).astype(np.float32)
  features.write_arrays(tmp_path / "store", {"clip": (ids, video), "text": ([f"ret{i}" for i in range(6)],
                                                                           video + rng.normal(size=(6, 16)))},
                        {"backbone": "test"})
  config = load_config(ROOT / "configs/retrieval_msrvtt.py")
  config.data.annotations, config.data.features = str(csv), str(tmp_path / "store")
  results = retrieval.run(config, tmp_path / "run")
  stage1 = json.loads((tmp_path / "run" / "results.json").read_text())["metrics"]["stage1"]
  assert stage1["t2v_r10"] == stage1["v2t_r10"] == 100.0
  assert set(stage1["notes"]) == {"t2v_r10", "v2t_r10"} and results["metrics"]["stage1"]["notes"] == stage1["notes"]
  assert "K=10 >= the 6 videos of the gallery: a hit whatever the scores" in stage1["notes"]["t2v_r10"]
  out = capsys.readouterr().out
  assert "*1 t2v_r10: K=10 >= the 6 videos of the gallery" in out, out
