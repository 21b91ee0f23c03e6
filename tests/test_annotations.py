"""Tests for the YouCook2 / COIN / CrossTask annotation readers (vidjax/data/annotations)."""
import functools
import json
from pathlib import Path
import re

import pytest

from vidjax.data import annotations
from vidjax.data.annotations import types

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
YC2 = SHARED / "youcook2" / "youcookii_annotations_trainval.json"
COIN_TEST = SHARED / "coin" / "coin_test_30.json"
CROSSTASK = Path(__file__).parent / "fixtures" / "crosstask"


@functools.cache
def yc2_raw():
  with open(YC2) as f:
    return json.load(f)["database"]


@functools.cache
def yc2(split):
  return annotations.read_youcook2(YC2, split)


def _check_clip_model(videos):
  ids = [v.video_id for v in videos]
  assert ids == sorted(ids) and len(set(ids)) == len(ids)
  for v in videos:
    assert [c.index for c in v.clips] == list(range(len(v.clips)))
    assert all(c.clip_id == f"{v.video_id}#{c.index:03d}" and c.video_id == v.video_id for c in v.clips)
    assert all(c.task == v.task for c in v.clips)
    keys = [(c.start, c.end) for c in v.clips]
    assert keys == sorted(keys) and all(s <= e for s, e in keys)


def test_youcook2_real_splits_match_raw_json():
  raw = yc2_raw()
  val, train = yc2("val"), yc2("train")
  assert len(val) == 457 and len(train) == 1333  # paper: 1333 / 457
  assert sum(len(v.clips) for v in val) == 3492
  assert sum(len(v.clips) for v in train) == 10337
  _check_clip_model(val)
  for v in val[:50] + train[:50]:
    entry = raw[v.video_id]
    assert v.split == {"training": "train", "validation": "val"}[entry["subset"]]
    assert v.task == entry["recipe_type"] and v.duration == pytest.approx(entry["duration"])
    expect = sorted((a["segment"][0], a["segment"][1], a["sentence"]) for a in entry["annotations"])
    assert [(c.start, c.end, c.text) for c in v.clips] == [(float(s), float(e), t) for s, e, t in expect]
    assert all(c.step == "" for c in v.clips)
  first = next(v for v in train if v.video_id == "GLd3aX16zBg")
  assert first.task == "113" and first.clips[0].text == "spread margarine on two slices of white bread"


def test_coin_list_layout_real_file():
  videos = annotations.read_coin(COIN_TEST)
  with open(COIN_TEST) as f:
    raw = {k: e for item in json.load(f) for k, e in item.items()}
  assert len(videos) == 3006 and sum(len(v.clips) for v in videos) == 11583
  assert all(v.split == "test" for v in videos)
  with pytest.raises(ValueError, match=r"coin_test_30.json: file: no video of the 'train' split asked for: the file "
                     r"holds test \(3,006 videos\)"):  # it used to return [], silently
    annotations.read_coin(COIN_TEST, "train")
  _check_clip_model(videos)
  for v in videos[::100]:
    entry = raw[v.video_id]
    assert v.task == str(entry["recipe_type"])
    expect = sorted((a["segment"][0], a["segment"][1], a["label"], a["id"]) for a in entry["annotation"])
    assert [(c.start, c.end, c.text, c.step) for c in v.clips] == expect


def test_coin_database_layout_and_sorting(tmp_path):
  db = {"database": {
      "vidB": {"recipe_type": 7, "subset": "training", "duration": 60.0, "annotation": [
          {"id": "12", "segment": [30.0, 40.0], "label": "tighten the screws"},
          {"id": "11", "segment": [5.0, 9.5], "label": "remove the cover"}]},
      "vidA": {"recipe_type": 9, "subset": "testing", "annotation": [
          {"id": 3, "segment": [1, 2], "label": "cut"}]},
  }}
  path = tmp_path / "COIN.json"
  path.write_text(json.dumps(db))
  videos = annotations.read_coin(path)
  assert [v.video_id for v in videos] == ["vidA", "vidB"]
  a, b = videos
  assert (a.split, a.task, a.duration, a.clips[0].step) == ("test", "9", None, "3")
  assert (b.split, b.task, b.duration) == ("train", "7", 60.0)
  assert [(c.clip_id, c.step, c.text, c.start) for c in b.clips] == [
      ("vidB#000", "11", "remove the cover", 5.0), ("vidB#001", "12", "tighten the screws", 30.0)]
  assert [v.video_id for v in annotations.read_coin(path, "train")] == ["vidB"]
  assert annotations.read_annotations("coin", path, "test") == [a]


@functools.cache
def crosstask():
  return annotations.read_crosstask(CROSSTASK)


def test_crosstask_reader_fixture():
  videos = crosstask()
  _check_clip_model(videos)
  tasks = annotations.read_crosstask_tasks(CROSSTASK / "tasks_primary.txt")
  assert sorted(tasks) == ["10001", "10002", "10003"]
  assert tasks["10003"] == ("Make Pancakes", ("mix batter", "pour batter", "flip pancake", "serve pancakes"))
  ids = {v.video_id for v in videos}
  # 21 annotation files, one empty; listed-but-unannotated videos are not returned.
  assert len(videos) == 20 and "pan00000006" not in ids and "noannot0001" not in ids
  assert {"j5_________", "Jx-3_3kQ9pA", "car0000_002"} <= ids  # '_' inside YouTube ids
  for v in videos:
    lines = (CROSSTASK / "annotations" / f"{v.task}_{v.video_id}.csv").read_text().split()
    rows = [tuple(float(x) for x in line.split(",")) for line in lines]
    assert [(c.start, c.end, int(c.step)) for c in v.clips] == [(s, e, int(k)) for k, s, e in rows]
    assert all(c.text == tasks[v.task][1][int(c.step) - 1] for c in v.clips)
  repeated = next(v for v in videos if v.video_id == "Jx-3_3kQ9pA")
  assert repeated.clips[-1].step == repeated.clips[-2].step


def test_crosstask_split_80_20_seed_42():
  videos = crosstask()
  test = [v for v in videos if v.split == "test"]
  train = [v for v in videos if v.split == "train"]
  assert len(test) == 4 and len(train) == 16
  assert not {v.video_id for v in test} & {v.video_id for v in train}
  # Pinned, not recomputed: the fixture's test videos under seed 42, recorded once. This fails if the
  # split rule, its input order or the RNG stream ever changes (a silent benchmark change otherwise).
  assert sorted(v.video_id for v in test) == ["car0000_002", "jel4ooooooo", "pan00000001", "pan00000002"]
  shuffled = types.split_by_video(list(reversed(videos)), 0.2, seed=42)[1]
  assert [v.video_id for v in shuffled] == sorted(v.video_id for v in test)  # input order does not matter
  assert annotations.read_crosstask(CROSSTASK, "test") == test
  assert annotations.read_annotations("crosstask", CROSSTASK, "train") == train
  _, other = types.split_by_video(videos, 0.2, seed=43)
  assert {v.video_id for v in other} != {v.video_id for v in test}


def test_read_annotations_dispatch_and_bad_args():
  assert annotations.read_annotations("youcook2", YC2, "val") == yc2("val")
  assert set(annotations.READERS) == {"youcook2", "coin", "crosstask"}
  with pytest.raises(ValueError, match="unknown annotation format 'msrvtt'"):
    annotations.read_annotations("msrvtt", YC2)
  with pytest.raises(ValueError, match="split must be one of"):
    annotations.read_youcook2(YC2, "validation")
  with pytest.raises(FileNotFoundError, match="nope.json"):
    annotations.read_coin(Path("/nonexistent/nope.json"))


_YC2_OK = {"subset": "validation", "recipe_type": "101", "duration": 100.0,
           "annotations": [{"segment": [1, 5], "id": 0, "sentence": "crack the eggs"}]}


def _yc2_with(**changes):
  entry = json.loads(json.dumps(_YC2_OK))
  for key, value in changes.items():
    if key.startswith("ann_"):
      entry["annotations"][0][key[4:]] = value
    elif value is None:
      del entry[key]
    else:
      entry[key] = value
  return {"database": {"vid_x": entry}}


@pytest.mark.parametrize("content,message", [
    ("{not json", "is not valid JSON"),
    (json.dumps({"videos": {}}), "top level: missing key 'database'"),
    (json.dumps(_yc2_with(ann_segment=[9, 5])),
     "video 'vid_x' annotation #0: 'segment' must satisfy 0 <= start <= end"),
    (json.dumps(_yc2_with(ann_segment=[1])), "annotation #0: 'segment' must be \\[start, end\\]"),
    (json.dumps(_yc2_with(ann_sentence=3)), "annotation #0: 'sentence' must be str, got int"),
    (json.dumps(_yc2_with(ann_sentence="  ")), "'sentence' must be a non-empty caption"),
    (json.dumps(_yc2_with(subset="train")), "video 'vid_x': 'subset' must be one of"),
    (json.dumps(_yc2_with(annotations=None)), "video 'vid_x': missing key 'annotations'"),
    (json.dumps(_yc2_with(recipe_type=[1])), "'recipe_type' must be str or int, got list"),
    (json.dumps(_yc2_with(duration="long")), "'duration' must be a non-negative number"),
])
def test_youcook2_malformed(tmp_path, content, message):
  path = tmp_path / "yc2_bad.json"
  path.write_text(content)
  with pytest.raises(ValueError, match=message) as info:
    annotations.read_youcook2(path)
  assert "yc2_bad.json" in str(info.value)


_COIN_ENTRY = {"recipe_type": 3, "subset": "training",
               "annotation": [{"id": "5", "segment": [0.0, 2.0], "label": "open the lid"}]}


@pytest.mark.parametrize("content,message", [
    ([{"a": _COIN_ENTRY, "b": _COIN_ENTRY}], "list item #0: expected a one-key object"),
    ([{"a": _COIN_ENTRY}, {"a": _COIN_ENTRY}], "list item #1: video 'a' appears more than once"),
    ("just a string", "top level: expected"),
    ({"database": {"a": {**_COIN_ENTRY, "recipe_type": True}}}, "'recipe_type' must be int or str, got bool"),
    ({"database": {"a": {**_COIN_ENTRY, "annotation": [{"id": "5", "segment": [0, 2]}]}}},
     "video 'a' annotation #0: missing key 'label'"),
    ({"database": {"a": {**_COIN_ENTRY, "annotation": ["x"]}}}, "annotation #0: expected a JSON object"),
    ({"database": {"a": {**_COIN_ENTRY, "annotation": [{"id": "5", "segment": [-1, 2], "label": "x"}]}}},
     "0 <= start <= end"),
])
def test_coin_malformed(tmp_path, content, message):
  path = tmp_path / "coin_bad.json"
  path.write_text(json.dumps(content))
  with pytest.raises(ValueError, match=message) as info:
    annotations.read_coin(path)
  assert "coin_bad.json" in str(info.value)


def _copy_crosstask(tmp_path):
  root = tmp_path / "crosstask"
  (root / "annotations").mkdir(parents=True)
  for name in ("tasks_primary.txt", "videos.csv"):
    (root / name).write_text((CROSSTASK / name).read_text())
  (root / "annotations" / "10003_pan00000001.csv").write_text(
      (CROSSTASK / "annotations" / "10003_pan00000001.csv").read_text())
  return root


@pytest.mark.parametrize("file,content,message", [
    ("annotations/10003_pan00000001.csv", "1,1.0,2.0\n5,3.0,4.0\n",
     "line 2: unknown step index '5': the task has steps 1..4"),
    ("annotations/10003_pan00000001.csv", "1,1.0,2.0\n2,4.0,3.0\n", "line 2: 'segment' must satisfy"),
    ("annotations/10003_pan00000001.csv", "1,1.0\n", "line 1: expected 'step,start,end'"),
    ("annotations/10003_pan00000001.csv", "one,1.0,2.0\n", "line 1: expected numbers"),
    ("annotations/99999_vid.csv", "1,1.0,2.0\n", "task 99999 is not defined"),
    ("annotations/10001_pan00000002.csv", "1,1.0,2.0\n", "listed under task 10003"),
    ("annotations/badname.csv", "1,1.0,2.0\n", "expected '<task_id>_<youtube_id>.csv'"),
    ("tasks_primary.txt", "10001\nJello\nhttp://x\n3\na,b\n", "task block at line 1: declares 3 steps"),
    ("tasks_primary.txt", "10001\nJello\nhttp://x\n2\n", "expected 5 lines"),
    ("videos.csv", "10001\n", "line 1: expected 'task_id,youtube_id,url'"),
])
def test_crosstask_malformed(tmp_path, file, content, message):
  root = _copy_crosstask(tmp_path)
  (root / file).write_text(content)
  with pytest.raises(ValueError, match=message) as info:
    annotations.read_crosstask(root)
  assert Path(file).name in str(info.value)


def test_split_by_video_properties():
  videos = yc2("val")
  rest, picked = types.split_by_video(videos, 0.1, seed=3)
  assert len(picked) == round(0.1 * len(videos)) and len(rest) + len(picked) == len(videos)
  assert not {v.video_id for v in rest} & {v.video_id for v in picked}
  again = types.split_by_video(list(reversed(videos)), 0.1, seed=3)
  assert again == (rest, picked)  # independent of input order
  with pytest.raises(ValueError, match="fraction must be in"):
    types.split_by_video(videos, 1.5, seed=0)


def test_a_release_file_of_another_format_gives_a_short_message():
  """A file of the wrong release format used to be named key by key (12,085 characters for YouCook2 read as
  ActivityNet): the message says which format it looks like, its first keys and how many there are."""
  anet = SHARED / "activitynet_captions" / "val_1.json"
  with pytest.raises(ValueError) as err:
    annotations.read_youcook2(anet)
  text = str(err.value)
  assert len(text) < 600, len(text)
  assert "top level: expected a YouCook2 release file" in text and "this looks like an ActivityNet Captions file" in text
  assert re.search(r"\d{4} keys, first \['v_", text), text
  assert "\n" not in text


def test_long_values_in_messages_are_cut(tmp_path):
  path = tmp_path / "yc2.json"
  path.write_text(json.dumps({"database": {"v": {"subset": "training", "recipe_type": "1",
                                                "annotations": "x" * 5000}}}))
  with pytest.raises(ValueError, match=r"'annotations' must be list, got str 'xxx.*\.\.\. \(5002 characters\)") as err:
    annotations.read_youcook2(path)
  assert len(str(err.value)) < 400


# ------------------------------------------------------------------------------------------------
# Issue 62: whole files, clean ids and captions, absurd times, no records, other formats, splits.


@pytest.mark.parametrize("reader,content,message", [
    # Empty, whitespace-only or NUL-bearing ids and captions.
    ("read_youcook2", _yc2_with(ann_sentence="crack \x00the eggs"), "annotation #0: 'sentence' holds a NUL character"),
    ("read_youcook2", _yc2_with(recipe_type=" "), "video 'vid_x': 'recipe_type' must be a non-empty task id"),
    ("read_youcook2", {"database": {" ": _YC2_OK}}, "video ' ': the video id must be a non-empty video id"),
    ("read_coin", {"database": {"a\x00": _COIN_ENTRY}}, "the video id must be a video id without control characters"),
    ("read_coin", {"database": {"a": {**_COIN_ENTRY, "annotation": [{"id": "5", "segment": [0, 2], "label": "\x00"}]}}},
     "annotation #0: 'label' holds a NUL character"),
    ("read_coin", {"database": {"a": {**_COIN_ENTRY, "annotation": [{"id": " ", "segment": [0, 2], "label": "x"}]}}},
     "annotation #0: 'id' must be a non-empty step id"),
    # Absurd times and durations.
    ("read_youcook2", _yc2_with(duration=1e9, ann_segment=[1, 5]), "'duration' must be a non-negative number of "
     "seconds, at most 86400"),
    ("read_youcook2", _yc2_with(duration=None, ann_segment=[1, 1e8]), r"'segment' \[1.0, 100000000.0\] ends past "
     "86400 s"),
    # No records.
    ("read_youcook2", {"database": {}}, "file: expected at least one video, the file has none"),
    ("read_coin", [], "file: expected at least one video, the file has none"),
    # Another dataset's file.
    ("read_coin", _yc2_with(), "top level: expected a COIN release file .*this looks like a YouCook2 release file"),
    ("read_youcook2", [{"a": _COIN_ENTRY}], "top level: expected a YouCook2 release file .*this looks like a COIN"),
    ("read_youcook2", [{"annotation_id": 1, "video": "a.mp4", "description": "x", "times": [[0, 0]]}],
     "this looks like a DiDeMo file"),
])
def test_issue62_step_release_faults(tmp_path, reader, content, message):
  path = tmp_path / "bad.json"
  path.write_text(json.dumps(content))
  with pytest.raises(ValueError, match=f"bad.json: .*{message}"):
    getattr(annotations, reader)(path)


def test_a_split_the_file_does_not_hold_names_the_splits_it_holds(tmp_path):
  """`read_coin(coin_test_30.json, "train")` used to return [] (a run then had no training data, or worse, a
  merged read silently dropped a split)."""
  with pytest.raises(ValueError, match=r"youcookii_annotations_trainval.json: file: no video of the 'test' split "
                                       r"asked for: the file holds train \(1,333 videos\) and val \(457 videos\)"):
    annotations.read_youcook2(YC2, "test")
  path = tmp_path / "train.json"
  path.write_text(json.dumps({"database": {"a": _COIN_ENTRY}}))
  assert len(annotations.read_annotations("coin", f"{path},{COIN_TEST}", "test")) == 3006  # one file holds it
  with pytest.raises(ValueError, match=r"no video of the 'val' split asked for in .*train.json holds train \(1 "
                                       r"video\); .*coin_test_30.json holds test \(3,006 videos\)"):
    annotations.read_annotations("coin", f"{path},{COIN_TEST}", "val")


def test_crosstask_reads_every_csv_whatever_the_case_of_its_suffix(tmp_path):
  """`10003_pan00000001.CSV` used to be dropped (glob("*.csv") is case-sensitive): a video silently gone."""
  root = _copy_crosstask(tmp_path)
  (root / "annotations" / "10003_pan00000001.csv").rename(root / "annotations" / "10003_pan00000001.CSV")
  videos = annotations.read_crosstask(root)
  assert [v.video_id for v in videos] == ["pan00000001"] and len(videos[0].clips) == 4


@pytest.mark.parametrize("file,content,message", [
    # A stray quote used to swallow the lines after it into one field.
    ("videos.csv", '10003,"pan00000001,https://x\n10001,jel_lo-0001,https://y\n', "line 1: not one ','-delimited row"),
    ("annotations/10003_pan00000001.csv", '1,"1.0,2.0\n2,3.0,4.0\n', "line 1: not one ','-delimited row"),
    ("videos.csv", "10003,pan00000001,https://x,extra\n", "line 1: expected 'task_id,youtube_id,url'"),
    ("videos.csv", "10003, \x00 ,https://x\n", "line 1: the youtube id must be a video id without control"),
    ("tasks_primary.txt", "10003\nPan\x00cakes\nhttp://x\n1\nflip\n", "the task name holds a NUL character"),
    ("tasks_primary.txt", "\n\n", "file: expected at least one task block"),
    ("annotations/10003_pan00000001.csv", "1,0,1e9\n", r"'segment' \[0.0, 1000000000.0\] ends past 86400 s"),
    ("annotations/10003_pan00000001.csv", "", "annotations: folder: expected at least one annotation file"),
    ("tasks_primary.txt", "1,5.00,11.83\n", "file: expected a CrossTask task file .*this looks like a CrossTask "
     "annotation csv"),
])
def test_issue62_crosstask_faults(tmp_path, file, content, message):
  root = _copy_crosstask(tmp_path)
  (root / file).write_text(content)
  with pytest.raises(ValueError, match=message):
    annotations.read_crosstask(root)


def test_crosstask_given_a_file_says_it_wants_the_folder(tmp_path):
  with pytest.raises(ValueError, match="videos.csv: file: expected the CrossTask release folder .*got a file; this "
                                       "looks like a CrossTask videos.csv"):
    annotations.read_crosstask(CROSSTASK / "videos.csv")
