"""GRDR's release as a dataset: its annotation files (`vidjax.data.annotations.grdr`, the real files of
../shared/data/grdr_release read in place, and small malformed ones) and its features imported into a store
(`vidjax.data.grdr_release`, prepare's import path) from pickles and X-Pool `.npz` files this test writes in the
release's layout; then GRDR's and the dense rows' readers read that store."""
import collections
import gzip
import json
import pickle
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from vidjax.data import grdr_release as R
from vidjax.data.annotations import grdr, paragraphs
from vidjax.data.features import FeatureStore
from vidjax.data.retrieval import build_benchmark, read_dataset
from vidjax.experiments import prepare
from vidjax.experiments.common import load_config

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
RELEASE = SHARED / "grdr_release"
DATASET = {"msrvtt": "msrvtt", "lsmdc": "lsmdc", "didemo": "didemo", "actnet": "activitynet"}
# file -> (rows, videos, captions): SOURCE.md's table, and each list row's sentences counted
COUNTS = {"msrvtt_ret_test": (1000, 1000, 1000), "msrvtt_ret_train_addition": (20000, 1000, 20000),
          "didemo_ret_test": (1003, 1003, 4017), "didemo_ret_train": (8381, 8381, 32954),
          "actnet_ret_test": (4917, 4917, 17505), "lsmdc_ret_test": (1000, 1000, 1000)}

needs_release = pytest.mark.skipif(not RELEASE.is_dir(), reason="../shared/data/grdr_release is not here")


def _rows(name):
  with gzip.open(RELEASE / f"{name}.json.gz", "rt", encoding="utf-8") as f:
    return json.load(f)


# ------------------------------------------------------------------------------------------------
# The annotation files.


@needs_release
@pytest.mark.parametrize("name", sorted(COUNTS))
def test_real_files_read_with_grdr_ids(name):
  dataset = DATASET[name.split("_")[0]]
  data = read_dataset(dataset, str(RELEASE / f"{name}.json.gz"))  # the gzipped file, selected by its content
  rows = _rows(name)
  assert (len(rows), len(data.videos), len(data.captions)) == COUNTS[name]
  ids = data.video_ids()
  split = "train" if "_ret_train" in name else "test"  # the split the file's name says it holds
  assert ids == sorted(ids) and all(v.split == split and v.duration is None for v in data.videos)
  # GRDR's loader (data/video_dataset.py): the id drops ".mp4" / ".avi" and LSMDC's folder; a caption is
  # f"{video}_{i}", i counting the video's sentences in file order.
  expected, count = [], {}
  for row in rows:
    vid = row["video"].replace(".mp4", "").replace(".avi", "").split("/")[-1]
    for sentence in row["caption"] if isinstance(row["caption"], list) else [row["caption"]]:
      expected.append((f"{vid}_{count.get(vid, 0)}", vid, sentence.strip()))
      count[vid] = count.get(vid, 0) + 1
  assert [(c.caption_id, c.video_id, c.text) for c in data.captions] == expected
  if dataset in ("didemo", "activitynet"):  # GRDR's test query: the sentences joined with one space
    joined = {p.video_id: p.text for p in paragraphs(data).captions}
    vid = data.captions[0].video_id
    assert joined[vid] == " ".join(s.strip() for s in rows[0]["caption"])


@needs_release
def test_real_files_pin_first_records_and_plain_json(tmp_path):
  lsmdc = read_dataset("lsmdc", str(RELEASE / "lsmdc_ret_test.json.gz"))
  assert lsmdc.captions[0].caption_id == "3086_UGLY_TRUTH_00.23.23.000-00.23.28.886_0"
  test = read_dataset("msrvtt", str(RELEASE / "msrvtt_ret_test.json.gz"))
  first = test.captions[0]
  assert (first.caption_id, first.text) == ("video9770_0", "a person is connecting something to system")
  plain = tmp_path / "msrvtt_ret_test.json"
  with gzip.open(RELEASE / "msrvtt_ret_test.json.gz", "rb") as f:
    plain.write_bytes(f.read())
  again = read_dataset("msrvtt", str(plain))
  assert again.videos == test.videos and again.captions == test.captions
  bench = build_benchmark(read_dataset("didemo", str(RELEASE / "didemo_ret_test.json.gz")), protocol="paragraphs")
  assert len(bench.queries) == len(bench.corpus) == 1003


def test_other_formats_are_not_taken_for_grdr(tmp_path):
  didemo = tmp_path / "test_data.json"
  didemo.write_text(json.dumps([{"annotation_id": 1, "video": "a.mp4", "description": "x", "times": [[0, 0]]}]))
  msrvtt = tmp_path / "MSRVTT_data.json"
  msrvtt.write_text(json.dumps({"videos": [], "sentences": []}))
  csv = tmp_path / "MSRVTT_JSFUSION_test.csv"
  csv.write_text("key,vid_key,video_id,sentence\nret0,msr1,video1,a cat\n")
  assert not any(grdr.is_release_file(p) for p in (didemo, msrvtt, csv))
  assert read_dataset("didemo", str(didemo)).captions[0].caption_id == "1"


def _write(path: Path, obj, gz=False):
  data = obj if isinstance(obj, str) else json.dumps(obj, indent=4)
  if gz:
    path.write_bytes(gzip.compress(data.encode()))
  else:
    path.write_text(data)
  return path


@pytest.mark.parametrize("content, gz, message", [
    ('[\n    {"video": "a.mp4",\n     "caption": x}\n]', False, r"is not valid JSON: .*line 3"),
    ('[{"video": "a.mp4", "caption": "x"},\n {"video": }]', True, r"is not valid JSON: .*line 2"),
    ([], False, "expected at least one {'video', 'caption'} row, found none"),
    ([{"video": "a.mp4", "caption": "x"}, {"video": " ", "caption": "y"}], False, r"row #1 .*'video' must name"),
    ([{"video": ".mp4", "caption": "x"}], True, r"row #0 .*'video' must name"),
    ([{"video": "a.mp4", "caption": "  "}], False, r"row #0 \(video 'a.mp4'\): 'caption' must be a non-empty caption"),
    ([{"video": "a.mp4", "caption": ["ok", ""]}], False, r"row #0 \(video 'a.mp4'\) sentence #1: 'caption' must be"),
    ([{"video": "a.mp4", "caption": []}], False, "non-empty list of sentences"),
    ([{"video": "a.mp4", "caption": ["ok", 3]}], False, "sentence #1: a sentence must be str, got int"),
    ([{"video": "a.mp4", "caption": 3}], False, "'caption' must be str or list, got int"),
    ([{"video": "a.mp4", "caption": "x"}, {"caption": "y"}], False, r"row #1: missing key 'video'"),
    ([{"video": "m1/a.avi", "caption": "x"}, {"video": "m2/a.avi", "caption": "y"}], False,
     r"'m1/a.avi' \(row #0\) and 'm2/a.avi' give one video id 'a'"),
    ([{"annotation_id": 1, "video": "a.mp4", "description": "x", "times": [[0, 0]]}], True,
     "found a JSON list of 1 dicts; this looks like a DiDeMo file"),
    ({"videos": [], "sentences": []}, True, "this looks like an MSR-VTT MSRVTT_data.json"),
])
def test_malformed_files_are_one_error_naming_the_file(tmp_path, content, gz, message):
  path = _write(tmp_path / ("bad.json.gz" if gz else "bad.json"), content, gz)
  with pytest.raises(ValueError, match=message) as e:
    read_dataset("msrvtt", str(path)) if gz or grdr.is_release_file(path) else grdr.read_grdr(path)
  assert str(path) in str(e.value)


def test_truncated_gzip_and_video_list(tmp_path):
  good = gzip.compress(json.dumps([{"video": "a.mp4", "caption": "x"}]).encode())
  path = tmp_path / "t.json.gz"
  path.write_bytes(good[: len(good) // 2])
  with pytest.raises(ValueError, match=f"{path} is not a readable gzip file"):
    read_dataset("lsmdc", str(path))
  path.write_bytes(good)
  with pytest.raises(ValueError, match="video_list=.*GRDR's annotation file"):
    read_dataset("msrvtt", str(path), str(path))


# ------------------------------------------------------------------------------------------------
# The restricted unpickler.


class _StructuredState:
  """Pickles as a float64 dtype whose state makes it a structured dtype (what numpy's own setstate would apply)."""

  def __reduce__(self):
    return np.dtype, ("f8", False, True), (3, "<", None, ("a",), {"a": (np.dtype("f8"), 0)}, 8, 8, 0)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickles_of_numpy_arrays_read_at_every_protocol(tmp_path, protocol):
  table = {"video1": np.arange(4, dtype=np.float32), "half": np.ones(4, np.float16), "big": np.arange(3, dtype=">f8"),
           "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)), "list": [1.0, 2.0], "scalar": np.float32(3.0),
           "empty": np.zeros((0, 4), np.float32)}
  path = tmp_path / "t.pkl"
  path.write_bytes(pickle.dumps(table, protocol=protocol))
  back = R.load_pickle(path)
  for key, value in table.items():
    got = np.asarray(back[key])
    assert got.dtype == np.asarray(value).dtype and np.array_equal(got, value), key
  assert back["fortran"].flags.writeable and isinstance(back["scalar"], np.float32)


@pytest.mark.parametrize("obj, message", [
    ({"a": np.array(["x", 1], dtype=object)}, "an array of dtype object"),
    ({"a": np.array(["x"])}, "an array of dtype <U1"),
    ({"a": np.zeros(2, dtype=[("x", "f4")])}, "an array of dtype |V4"),
    ({"a": _StructuredState()}, "a structured dtype"),
    ({"a": np.zeros(3).view(np.matrix)}, "it names numpy"),
    ({"a": collections.Counter()}, "it names collections.Counter"),
])
def test_pickles_of_anything_else_are_refused(tmp_path, obj, message):
  path = tmp_path / "t.pkl"
  path.write_bytes(pickle.dumps(obj))
  with pytest.raises(R.ReleaseError, match=f"{path}: not read: {re.escape(message)}"):
    R.load_pickle(path)


# ------------------------------------------------------------------------------------------------
# The features: a tiny release in the official layout.

D, T, DF = 8, 12, 6


def _release(tmp_path: Path, dataset: str = "msrvtt", protocol: int = pickle.DEFAULT_PROTOCOL):
  """Annotation files, InternVideo2 pickles and X-Pool .npz files as GRDR's release lays them out."""
  rng = np.random.default_rng(0)
  vec = lambda: (rng.standard_normal(D) / np.sqrt(D)).astype(np.float32)
  ann = tmp_path / "ann"
  ann.mkdir(parents=True)
  if dataset == "msrvtt":
    test_rows = [{"video": "video9.mp4", "caption": "a dog runs"}, {"video": "video10.mp4", "caption": "a cat"},
                 {"video": "video9.mp4", "caption": " a dog again "}]
    train_rows = [{"video": f"video{i}.mp4", "caption": f"caption {i} {k}"} for i in (1, 2, 3) for k in range(2)]
    test_keys = ["video9_0", "video10_0", "video9_1"]
    train_keys = [f"video{i}_{k}" for i in (1, 2, 3) for k in range(2)]
  else:  # paragraphs: the test pickle holds each video's joined sentences under f"{video}_0"
    test_rows = [{"video": "11@N0_1_a.mp4", "caption": ["one.", " two."]}, {"video": "22@N0_2_b.mp4", "caption": ["x"]}]
    train_rows = [{"video": "33@N0_3_c.mp4", "caption": ["t1", "t2", "t3"]}]
    test_keys = ["11@N0_1_a_0", "22@N0_2_b_0"]
    train_keys = ["33@N0_3_c_0", "33@N0_3_c_1", "33@N0_3_c_2"]
  prefix = "msrvtt" if dataset == "msrvtt" else "didemo"
  files = {"test": _write(ann / f"{prefix}_ret_test.json", test_rows),
           "train": _write(ann / f"{prefix}_ret_train.json.gz", train_rows, gz=True)}
  videos = {"test": sorted({grdr.video_id(r["video"]) for r in test_rows}),
            "train": sorted({grdr.video_id(r["video"]) for r in train_rows}) + ["video_unused"]}
  folder = tmp_path / "features" / "InternVideo2" / R.RELEASE_DIRS[dataset]
  folder.mkdir(parents=True)
  tables = {}
  for split, keys in (("test", test_keys), ("train", train_keys + ["video_unused_0"])):
    tables[split] = {"video": {v: vec() for v in videos[split]}, "text": {k: vec() for k in keys}}
    for what in ("video", "text"):
      with open(folder / f"{what}_embeddings_{split}.pkl", "wb") as f:
        pickle.dump(tables[split][what], f, protocol=protocol)
  frames = tmp_path / "video_features_cache" / dataset / "Xpool" / dataset.upper()
  frames.mkdir(parents=True)
  frame_arrays = {}
  for v in videos["test"] + videos["train"][:-1]:
    x = rng.standard_normal((T, DF)).astype(np.float32)
    frame_arrays[v] = x / np.linalg.norm(x, axis=-1, keepdims=True)
    np.savez_compressed(frames / f"{v}.npz", frame_embeds=frame_arrays[v], frame_indices=np.arange(T), video_id=v)
  return files, tables, frame_arrays, tmp_path / "features", tmp_path / "video_features_cache" / dataset


def _prepare(tmp_path, dataset, files, features, frames, videos=""):
  c = load_config(ROOT / "configs/prepare.py")
  with c.unlocked():
    c.dataset = dataset
    c.data.update(annotations=f"{files['train']},{files['test']}", import_features=str(features),
                  import_frames=str(frames) if frames else "", videos=videos)
  return prepare.run(c, str(tmp_path / "prep"))


@pytest.mark.parametrize("protocol", [2, pickle.DEFAULT_PROTOCOL, 5])
def test_import_writes_the_pickled_arrays_under_grdr_ids(tmp_path, protocol):
  files, tables, frames, features, frames_dir = _release(tmp_path, protocol=protocol)
  results = _prepare(tmp_path, "msrvtt", files, features, frames_dir)
  assert results["splits"] == {str(files["train"]): "train", str(files["test"]): "test"}
  assert results["path"] == "real" and results["synthetic"] is False and results["skipped_videos"]["count"] == 0
  store = FeatureStore(results["provenance"]["store"])
  assert store.kinds() == ["clip", "frame_clip", "text"]
  for split in ("train", "test"):  # exactly: float32 in, float32 stored
    videos = [v for v in tables[split]["video"] if v != "video_unused"]
    np.testing.assert_array_equal(store.get("clip", videos), np.stack([tables[split]["video"][v] for v in videos]))
    keys = [k for k in tables[split]["text"] if k != "video_unused_0"]
    np.testing.assert_array_equal(store.get("text", keys), np.stack([tables[split]["text"][k] for k in keys]))
  np.testing.assert_array_equal(store.get("frame_clip", sorted(frames)), np.stack([frames[v] for v in sorted(frames)]))
  assert not store.has("clip", "video_unused") and not store.has("text", "video_unused_0")  # not in the annotations
  assert results["metrics"]["prepare"] == {"clip_items": 5, "text_items": 9, "frame_clip_items": 5}
  again = _prepare(tmp_path, "msrvtt", files, features, frames_dir)  # a rerun resumes: nothing changes
  assert again["provenance"]["fingerprint"] == results["provenance"]["fingerprint"]


def test_import_paragraph_dataset_keys_the_test_paragraph_by_video(tmp_path):
  files, tables, _, features, _ = _release(tmp_path, "didemo")
  results = _prepare(tmp_path, "didemo", files, features, None)
  store = FeatureStore(results["provenance"]["store"])
  assert store.kinds() == ["clip", "text"]
  np.testing.assert_array_equal(store.get("text", ["11@N0_1_a"]), tables["test"]["text"]["11@N0_1_a_0"][None])
  np.testing.assert_array_equal(store.get("text", ["33@N0_3_c_2"]), tables["train"]["text"]["33@N0_3_c_2"][None])
  assert not store.has("text", "11@N0_1_a_0")  # a test sentence has no embedding of its own in the release
  bench = build_benchmark(read_dataset("didemo", str(files["test"])), protocol="paragraphs")
  assert store.get("text", bench.query_ids).shape == (2, D)


def test_grdr_and_dense_runs_read_the_imported_store(tmp_path):
  from vidjax.methods import dense as dense_method  # pylint: disable=g-import-not-at-top
  from vidjax.methods.grdr import read_corpus  # pylint: disable=g-import-not-at-top
  files, tables, frames, features, frames_dir = _release(tmp_path)
  store = _prepare(tmp_path, "msrvtt", files, features, frames_dir)["provenance"]["store"]
  c = load_config(ROOT / "configs/grdr_msrvtt.py")
  with c.unlocked():
    c.data.update(features=store, annotations=str(files["test"]), train_annotations=str(files["train"]),
                  train_split="")
    c.model.update(query_encoder="minilm", query_dim=D)
  corpus = read_corpus(c, tmp_path / "grdr")
  assert list(corpus.video_ids) == ["video1", "video10", "video2", "video3", "video9"]
  np.testing.assert_array_equal(corpus.test_queries[0], tables["test"]["text"]["video9_0"])
  np.testing.assert_array_equal(corpus.features[1], tables["test"]["video"]["video10"])
  np.testing.assert_array_equal(corpus.frames[4], frames["video9"])  # X-Pool's 12 frames, as pickled
  d = load_config(ROOT / "configs/dense_msrvtt.py")
  with d.unlocked():
    d.data.update(features=store, annotations=str(files["test"]), train_annotations=str(files["train"]),
                  train_split="")
  s = dense_method.session(d, tmp_path / "dense")
  assert s.test.query_ids == ["video9_0", "video10_0", "video9_1"] and len(s.train.query_ids) == 6


@pytest.mark.parametrize("break_it, message", [
    (lambda f: f.unlink(), r"text_embeddings_test.pkl: no such file"),
    (lambda f: _repickle(f, lambda t: t.pop("video9_1")), r"text_embeddings_test.pkl: no key 'video9_1', a caption"),
    (lambda f: _repickle(f, lambda t: t.update(video9_1=np.zeros(D + 1, np.float32))),
     r"text_embeddings_test.pkl: key 'video9_1' holds shape \[9\] but .* holds \[8\]"),
    (lambda f: _repickle(f, lambda t: t["video9_1"].__setitem__(0, np.nan)),
     r"text_embeddings_test.pkl: key 'video9_1' holds NaN or Inf"),
    (lambda f: _repickle(f, lambda t: t.update(video9_1=np.zeros((1, D), np.float32))),
     r"key 'video9_1' holds an array of shape \(1, 8\); an embedding is one vector"),
    (lambda f: f.write_bytes(b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n)R."),
     r"text_embeddings_test.pkl: not read: it holds torch objects .*_load_from_bytes"),
    (lambda f: f.write_bytes(pickle.dumps([1, 2])), r"text_embeddings_test.pkl: holds a list; expected a dict"),
    (lambda f: f.write_bytes(b"cos\nsystem\n(S'true'\ntR."), r"not read: it names os.system"),
])
def test_release_faults_are_one_error_naming_file_and_key(tmp_path, break_it, message):
  files, _, _, features, frames_dir = _release(tmp_path)
  break_it(features / "InternVideo2" / "msrvtt" / "text_embeddings_test.pkl")
  with pytest.raises(ValueError, match=message):
    _prepare(tmp_path, "msrvtt", files, features, frames_dir)


def _repickle(path, edit):
  table = pickle.loads(path.read_bytes())
  edit(table)
  path.write_bytes(pickle.dumps(table))


def test_missing_video_and_frame_faults(tmp_path):
  files, _, _, features, frames_dir = _release(tmp_path)
  _repickle(features / "InternVideo2" / "msrvtt" / "video_embeddings_train.pkl", lambda t: t.pop("video2"))
  with pytest.raises(ValueError, match=r"video_embeddings_train.pkl: no key 'video2', a video of .*msrvtt_ret_train"):
    _prepare(tmp_path, "msrvtt", files, features, frames_dir)
  files, _, _, features, frames_dir = _release(tmp_path / "b")
  npz = next(frames_dir.rglob("video9.npz"))
  np.savez(npz, video_embed=np.zeros(DF, np.float32))
  with pytest.raises(ValueError, match=r"video9.npz: no array 'frame_embeds' .*CLIP4Clip cache"):
    _prepare(tmp_path / "b", "msrvtt", files, features, frames_dir)
  np.savez(npz, frame_embeds=np.zeros((T, DF), np.float32), video_id="video10")
  with pytest.raises(ValueError, match=r"video9.npz: holds the features of video 'video10'"):
    _prepare(tmp_path / "b", "msrvtt", files, features, frames_dir)
  npz.unlink()
  with pytest.raises(ValueError, match=r"no video9.npz below it"):
    _prepare(tmp_path / "b", "msrvtt", files, features, frames_dir)
  shutil.copytree(frames_dir / "Xpool", frames_dir / "CLIP4clip")
  with pytest.raises(ValueError, match=r"video 'video1' has two feature files"):
    _prepare(tmp_path / "b", "msrvtt", files, features, frames_dir)


def test_import_config_is_checked_before_anything_is_written(tmp_path):
  files, _, _, features, _ = _release(tmp_path)
  with pytest.raises(ValueError, match="data.videos"):
    _prepare(tmp_path, "msrvtt", files, features, None, videos=str(tmp_path))
  with pytest.raises(ValueError, match="dataset"):
    _prepare(tmp_path, "msvd", files, features, None)
  with pytest.raises(FileNotFoundError, match="InternVideo2/lsmdc: no such folder"):
    _prepare(tmp_path, "lsmdc", files, features, None)
  csv = tmp_path / "MSRVTT_JSFUSION_test.csv"
  csv.write_text("key,vid_key,video_id,sentence\nret0,msr9,video9,a dog runs\n")
  with pytest.raises(ValueError, match=f"GRDR's own annotation files .*{csv} is not one"):
    _prepare(tmp_path, "msrvtt", {"train": files["train"], "test": csv}, features, None)
  assert not (tmp_path / "prep" / "features").exists()


@pytest.mark.parametrize("content, message", [
    ([{"video": "a\x00.mp4", "caption": "x"}], r"row #0 .*'video' must be a video file name without control"),
    ([{"video": "a.mp4", "caption": "a \x00dog"}], r"row #0 \(video 'a.mp4'\): 'caption' holds a NUL character"),
    ([{"video": "a.mp4", "caption": ["ok", "\x00"]}], r"sentence #1: 'caption' holds a NUL character"),
])
def test_nul_bearing_names_and_captions_are_refused(tmp_path, content, message):
  path = _write(tmp_path / "bad.json", content)
  with pytest.raises(ValueError, match=message):
    grdr.read_grdr(path)


def test_the_split_a_release_file_holds_is_its_name(tmp_path):
  rows = [{"video": "a.mp4", "caption": "x"}]
  assert {v.split for v in grdr.read_grdr(_write(tmp_path / "msrvtt_ret_test.json", rows)).videos} == {"test"}
  assert {v.split for v in grdr.read_grdr(_write(tmp_path / "didemo_ret_train.json.gz", rows, gz=True)).videos} == {
      "train"}
  assert {v.split for v in grdr.read_grdr(_write(tmp_path / "mine.json", rows)).videos} == {""}
