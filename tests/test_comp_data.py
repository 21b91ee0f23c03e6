"""VideoComp benchmarks (vidjax.data.comp): release reader, builder rules on the real dense-caption files."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from vidjax.data import comp
from vidjax.data.annotations import read_activitynet_captions, read_youcook2

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def _entry(key="k0", **kw):
  e = {"key": key, "video_id": "v0", "type": "temp-reorder", "original_video/start_time": 0.0,
       "original_video/end_time": 30.0, "query_video/start_time": 5.0, "query_videl/end_time": 20.0,
       "positive_text": "a man cuts bread. then he eats it.", "negative_text": "he eats it. then a man cuts bread.",
       "positive_start_time": 5.0, "positive_end_time": 20.0, "negative_start_time": 5.0, "negative_end_time": 20.0,
       "question": "q", "answer": "A"}
  e.update(kw)
  return e


def test_release_reader_accepts_the_documented_format(tmp_path):
  path = tmp_path / "release.json"
  path.write_text(json.dumps([_entry(), _entry("k1", type="Segment mismatch")]))
  a, b = comp.read_release(path)
  assert a.type == "temp_reorder" and a.query == (5.0, 20.0) and a.video_span == (0.0, 30.0)
  assert b.type == "seg_mismatch" and b.video_span == (5.0, 20.0)  # the original trimmed to the query times


@pytest.mark.parametrize("change, message", [
    ({"positive_text": None}, "missing field 'positive_text'"),
    ({"negative_text": "  "}, "'negative_text' must be a non-empty string"),
    ({"positive_end_time": 1.0}, "'positive_end_time' \\(1.0\\) is before 'positive_start_time'"),
    ({"type": "colour-swap"}, "unknown type 'colour-swap'"),
    ({"original_video/start_time": "0"}, "'original_video/start_time' must be a non-negative number"),
])
def test_malformed_release_entries_name_the_key(tmp_path, change, message):
  bad = _entry("broken")
  for k, v in change.items():
    if v is None:
      del bad[k]
    else:
      bad[k] = v
  path = tmp_path / "release.json"
  path.write_text(json.dumps([_entry(), bad]))
  with pytest.raises(ValueError, match=f"release.json: entry 1 \\(key 'broken'\\): {message}"):
    comp.read_release(path)


def test_positive_events_drop_global_captions_and_iou_duplicates():
  video = comp.EventVideo("v", 100.0, (
      (0.0, 100.0, "global summary of everything."),  # covers the three events below: dropped
      (10.0, 20.0, "first."), (30.0, 40.0, "second."), (31.0, 41.0, "second again, shorter? no."),
      (60.0, 80.0, "third.")))
  kept = comp.positive_events(video, drop_global=True, iou_threshold=0.5)
  assert [e[2] for e in kept] == ["first.", "second.", "third."]  # equal lengths: the earlier one kept
  assert len(comp.positive_events(video, drop_global=False, iou_threshold=1.0)) == 5


def test_interval_and_reorder_rules_hold_for_many_draws():
  rng = np.random.default_rng(0)
  for n in range(2, 9):
    for _ in range(50):
      pair = comp._seg_intervals(list(range(n)), rng)
      if pair is None:
        continue
      a, b = (set(range(*x)) for x in pair)
      assert a and b and a - b and b - a and len(a ^ b) >= 2
      order = comp._reorder([f"s{i}" for i in range(n)], rng)
      assert order is not None and order != [f"s{i}" for i in range(n)]
  assert comp._reorder(["same", "same"], rng) is None  # no order reads differently


@pytest.fixture(scope="module")
def built():
  anet = comp.events_from_activitynet(read_activitynet_captions(SHARED / "activitynet_captions" / "val_1.json"))
  yc2 = comp.events_from_youcook2(read_youcook2(SHARED / "youcook2" / "youcookii_annotations_trainval.json", "val"))
  return {"activitynet": (anet, *comp.build_comp(anet, split="val", name="activitynet-comp")),
          "youcook2": (yc2, *comp.build_comp(yc2, split="val", drop_global=False, name="youcook2-comp"))}


@pytest.mark.parametrize("dataset", ["activitynet", "youcook2"])
def test_real_files_give_all_three_types_and_the_rules_hold(built, dataset, capsys):
  videos, triplets, counts = built[dataset]
  print(comp.format_counts([counts]))
  assert "temp_reorder" in capsys.readouterr().out
  for t in comp.EVAL_TYPES:
    assert counts[t] > 100, (dataset, counts)
  assert counts["total"] == len(triplets) == sum(counts[t] for t in comp.EVAL_TYPES)
  duration = {v.video_id: v.duration for v in videos}
  lexicon = comp.load_lexicon()
  for x in triplets:
    assert x.negative != x.positive
    p, r = comp.word_overlap(x.negative, x.positive) if x.type == "action_replace" else (1.0, 1.0)
    assert p >= 0.8 and r >= 0.8
    if x.type == "seg_mismatch":
      assert 0.0 <= x.query[0] < x.query[1] <= duration[x.video_id] and x.query == x.positive_span
      assert x.negative_span != x.positive_span
    if x.type == "action_replace":  # exactly one word changed, to another word of its lexicon group
      pw, nw = (re.findall(r"[\w'-]+", t) for t in (x.positive, x.negative))
      diff = [(a, b) for a, b in zip(pw, nw) if a != b]
      assert len(pw) == len(nw) and len(diff) == 1, (x.positive, x.negative)
      a, b = (w.lower() for w in diff[0])
      assert b in lexicon[a]
    if x.type == "temp_reorder":
      assert sorted(x.positive.lower().split()) != sorted(x.negative.lower().split()) or x.positive != x.negative


def test_validation_threshold_drops_and_counts(built):
  videos, _, counts = built["youcook2"]
  _, strict = comp.build_comp(videos[:60], split="val", drop_global=False, min_overlap=0.95)
  _, default = comp.build_comp(videos[:60], split="val", drop_global=False)
  assert sum(strict["dropped_validation"].values()) > sum(default["dropped_validation"].values())
  assert strict["total"] < default["total"]


def test_same_inputs_and_seed_give_byte_identical_files(built, tmp_path):
  videos, triplets, _ = built["youcook2"]
  again, _ = comp.build_comp(videos, split="val", drop_global=False, name="youcook2-comp")
  comp.write_release(tmp_path / "a.json", triplets)
  comp.write_release(tmp_path / "b.json", again)
  assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
  assert comp.read_release(tmp_path / "a.json") == triplets  # the builder writes the release format
  other, _ = comp.build_comp(videos, split="val", drop_global=False, name="youcook2-comp", seed=1)
  assert other != triplets


def test_command_line_writes_counts(tmp_path, capsys):
  comp.main(["--dataset", "youcook2", "--annotations",
             str(SHARED / "youcook2" / "youcookii_annotations_trainval.json"), "--out", str(tmp_path)])
  counts = json.loads((tmp_path / "counts.json").read_text())
  assert [c["split"] for c in counts] == ["train", "val"] and counts[0]["multi"] > 0
  assert "youcook2-Comp" in capsys.readouterr().out
  assert comp.read_release(tmp_path / "youcook2_comp_val.json")
