"""TFDS builders (vidjax.tfds): same records as the data layer, versioned info, embeddings, no TensorFlow."""
import hashlib
import shutil
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from vidjax import io
from vidjax.data import cvr, features, genstate
from vidjax.data.annotations import read_activitynet_captions, read_didemo, read_msrvtt, read_youcook2
from vidjax.data.retrieval import build_benchmark
from vidjax.experiments import cast
from vidjax.methods import cast as cast_method
from vidjax.tfds.common import open_dataset, prepare, read_split
from vidjax.tfds.cvr import CvrConfig, VidjaxCvr, as_cvr_records
from vidjax.tfds.genstate import GenstateConfig, VidjaxGenstate, as_triplets
from vidjax.tfds.retrieval import RetrievalConfig, VidjaxRetrieval, as_benchmark

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
YC2 = SHARED / "youcook2"


def _by_query(records):
  return sorted(records, key=lambda r: r["query_id"])


@pytest.fixture(scope="module")
def youcook2(tmp_path_factory):
  """A slice of the real YouCook2 file (20 train + 20 val videos), mined with the real MiniLM both ways."""
  tmp = tmp_path_factory.mktemp("yc2")
  videos = read_youcook2(YC2 / "youcookii_annotations_trainval.json")
  keep = [v for v in videos if v.split == "train"][:20] + [v for v in videos if v.split == "val"][:20]
  (tmp / "available.txt").write_text("\n".join(v.video_id for v in keep))
  config = CvrConfig(name="youcook2_slice", dataset="youcook2", available_videos=str(tmp / "available.txt"))
  builder = prepare(VidjaxCvr(config=config, data_dir=str(tmp / "tfds")), manual_dir=YC2)
  embed_fn = cast_method._embed_fn(type("C", (), {"data": type("D", (), {"identity_rule": "caption_similarity",
                                                                   "minilm_dir": ""})})())
  cvr.build_dataset_cvr("youcook2", keep, tmp / "files", eval_split="val", embed_fn=embed_fn)
  return builder, tmp / "files", len(videos)


def test_youcook2_cvr_through_tfds_equals_the_cvr_files(youcook2):
  builder, files, _ = youcook2
  assert set(builder.info.splits) == {"train", "heldout", "validation"}
  for split, name in (("validation", "benchmark.json"), ("heldout", "heldout.json"), ("train", "train.json")):
    expected = io.read_json(files / name)
    got = as_cvr_records(read_split(builder, split), split)
    assert len(got) == len(expected) > 0, split
    assert _by_query(got) == _by_query(expected), split
    assert got == expected, split  # also the file order (TFDS shuffles on write; `index` restores it)
  pools = as_cvr_records(read_split(builder, "validation"), "validation")
  assert sum(kind == "identity" for r in pools for kind in r["negative_types"].values()) > 0  # MiniLM neighbours


def test_info_is_versioned_and_names_its_source(youcook2):
  builder, files, total = youcook2
  again = open_dataset(builder.data_dir)  # reading needs no builder code
  assert str(again.info.version) == "1.0.0" and "1.0.0" in VidjaxCvr.RELEASE_NOTES
  meta = again.info.metadata
  ann = YC2 / "youcookii_annotations_trainval.json"
  assert meta["source"]["annotations_sha256"] == hashlib.sha256(ann.read_bytes()).hexdigest()
  assert meta["dataset"] == "youcook2" and "CAST" in meta["paper"]
  assert meta["stats"] == json.loads((files / "stats.json").read_text())
  assert meta["source"]["dropped_videos"]["count"] == total - 40  # the available-videos rule, counted
  assert "text_embedding" not in again.info.features  # built without a store: ids and texts only
  assert "tensorflow" not in sys.modules


def test_retrieval_sets_match_the_readers_and_published_counts(tmp_path):
  msrvtt = prepare(VidjaxRetrieval(config="msrvtt", data_dir=str(tmp_path)), manual_dir=SHARED / "msrvtt")
  bench = as_benchmark(msrvtt, "test")
  csv = SHARED / "msrvtt" / "MSRVTT_JSFUSION_test.csv"
  assert len(bench.queries) == 1000 == len(bench.corpus)
  assert bench.queries == build_benchmark(read_msrvtt(csv), protocol="captions").queries
  assert msrvtt.info.metadata["source"]["test"]["sha256"] == hashlib.sha256(csv.read_bytes()).hexdigest()
  didemo = prepare(VidjaxRetrieval(config="didemo", data_dir=str(tmp_path)), manual_dir=SHARED / "didemo")
  assert set(didemo.info.splits) == {"validation", "test"}  # train_data.json is not in ../shared
  test = as_benchmark(didemo, "test")
  assert len(test.queries) == 1037 == len(test.corpus)
  expected = build_benchmark(read_didemo(SHARED / "didemo" / "test_data.json"), protocol="paragraphs")
  assert test.queries == expected.queries and test.corpus == expected.corpus
  # Deterministic: a second build elsewhere reads back the same records.
  again = prepare(VidjaxRetrieval(config="msrvtt", data_dir=str(tmp_path / "again")), manual_dir=SHARED / "msrvtt")
  assert as_benchmark(again, "test").queries == bench.queries
  records = sorted(Path(msrvtt.data_dir).glob("*.array_record*"))
  assert records and [p.read_bytes() for p in records] == [
      (Path(again.data_dir) / p.name).read_bytes() for p in records]  # byte-identical files
  assert "tensorflow" not in sys.modules


def test_activitynet_val_1_paragraphs(tmp_path):
  config = RetrievalConfig(name="anet_val_1", dataset="activitynet",
                           files={"val_1": str(SHARED / "activitynet_captions" / "val_1.json")})
  bench = as_benchmark(prepare(VidjaxRetrieval(config=config, data_dir=str(tmp_path))), "val_1")
  assert len(bench.queries) == 4917 == len(bench.corpus)
  expected = build_benchmark(read_activitynet_captions(config.files["val_1"]), protocol="paragraphs")
  assert bench.queries == expected.queries and bench.corpus == expected.corpus


def _triplets(n=4):
  return [{"id": f"q{i}", "query": f"the red cube moves left {i}", "main": f"v{i}", "temporal_negative": f"v{i}_t",
           "semantic_negative": f"v{i}_s", "subset": "Home" if i % 2 else "Toy",
           **({"distractors": ["extra"]} if i == 0 else {})} for i in range(n)]


def _manual_triplets(tmp_path):
  """A GenState metadata file in `<tmp_path>/manual`: (its triplets, every video they name)."""
  (tmp_path / "manual").mkdir()
  (tmp_path / "manual" / "genstate.json").write_text(json.dumps(_triplets()))
  triplets = genstate.read_triplets(tmp_path / "manual" / "genstate.json")
  return triplets, sorted({v for t in triplets for v in (*t.videos, *t.distractors)})


def test_genstate_triplets_with_store_embeddings(tmp_path):
  triplets, videos = _manual_triplets(tmp_path)
  rng = np.random.default_rng(0)
  clip, text = rng.standard_normal((len(videos), 8), dtype=np.float32), rng.standard_normal((4, 8), dtype=np.float32)
  features.write_arrays(tmp_path / "store", {"clip": (videos, clip), "text": ([t.query_id for t in triplets], text)},
                        {"backbone": "test-backbone", "checkpoint_hash": "abc123", "synthetic": True})
  builder = prepare(VidjaxGenstate(config=GenstateConfig(name="with_store", features=str(tmp_path / "store")),
                                   data_dir=str(tmp_path / "tfds")), manual_dir=tmp_path / "manual")
  assert as_triplets(builder) == triplets
  assert genstate.pools(as_triplets(builder)) == genstate.pools(triplets)
  meta = builder.info.metadata
  assert meta["features"]["backbone"] == "test-backbone" and meta["features"]["checkpoint_hash"] == "abc123"
  assert meta["subsets"] == {"Toy": 2, "Home": 2}
  row = {v: i for i, v in enumerate(videos)}
  for t, ex in zip(triplets, read_split(builder, "test")):
    np.testing.assert_array_equal(ex["video_embeddings"], clip[[row[v] for v in t.videos]])
    np.testing.assert_array_equal(ex["text_embedding"], text[int(t.query_id[1:])])
    assert ex["distractor_embeddings"].shape == (len(t.distractors), 8)
  assert "tensorflow" not in sys.modules


def test_bad_inputs_get_one_clear_error(tmp_path):
  (tmp_path / "manual").mkdir()
  bad = _triplets()
  del bad[2]["main"]
  (tmp_path / "manual" / "genstate.json").write_text(json.dumps(bad))
  with pytest.raises(ValueError, match=r"genstate.json: entry 2: missing key 'main'"):
    prepare(VidjaxGenstate(data_dir=str(tmp_path / "a")), manual_dir=tmp_path / "manual")
  (tmp_path / "empty").mkdir()
  (tmp_path / "empty" / "README").write_text("nothing here")
  with pytest.raises(FileNotFoundError, match=r"msrvtt: none of \['MSRVTT_JSFUSION_test.csv'\] in manual_dir"):
    prepare(VidjaxRetrieval(config="msrvtt", data_dir=str(tmp_path / "b")), manual_dir=tmp_path / "empty")
  with pytest.raises(FileNotFoundError, match="COIN annotations|coin annotations: .*COIN.json"):
    prepare(VidjaxCvr(config="coin", data_dir=str(tmp_path / "c")), manual_dir=tmp_path / "empty")
  with pytest.raises(FileNotFoundError, match="not a built TFDS dataset version folder"):
    open_dataset(tmp_path / "empty")
  with pytest.raises(ValueError, match="CvrConfig.dataset must be one of"):
    VidjaxCvr(config=CvrConfig(name="x", dataset="msrvtt"), data_dir=str(tmp_path / "d"))


def test_a_dataset_built_from_a_store_that_changed_since_is_refused(tmp_path):
  triplets, videos = _manual_triplets(tmp_path)
  rng = np.random.default_rng(0)

  def store(root):
    features.write_arrays(root, {"clip": (videos, rng.standard_normal((len(videos), 8), dtype=np.float32)),
                                 "text": ([t.query_id for t in triplets], rng.standard_normal((4, 8), dtype=np.float32))})

  store(tmp_path / "store")
  make = lambda: VidjaxGenstate(config=GenstateConfig(name="s", features=str(tmp_path / "store")),  # noqa: E731
                                data_dir=str(tmp_path / "tfds"))
  prepare(make(), manual_dir=tmp_path / "manual")
  prepare(make(), manual_dir=tmp_path / "manual")  # the same store: the built version is reused
  shutil.rmtree(tmp_path / "store")
  store(tmp_path / "store")  # rebuilt with other embeddings under the same path, config name and version
  with pytest.raises(ValueError, match=r"was built from feature store .*store as it was then.*stale"):
    prepare(make(), manual_dir=tmp_path / "manual")
