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
      # Triples (0, 10), (0, 20), (10, 20): intervals [0, 2) and [1, 3) cover the same span (0, 20).
      events = [(20.0 * (i // 3) + (0, 0, 10)[i % 3], 20.0 * (i // 3) + (10, 20, 20)[i % 3], f"s{i}") for i in range(n)]
      pair = comp._seg_intervals(events, rng)
      if pair is None:
        continue
      a, b = (set(range(*x)) for x in pair)
      assert a and b and a - b and b - a and len(a ^ b) >= 2
      assert comp._span(events, pair[0]) != comp._span(events, pair[1])  # the two crops differ
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


# ---------------------------------------------------------------------------------------------- training data


def _triplet(vid, kind, pos, neg, span=(0.0, 10.0)):
  query = span if kind == "seg_mismatch" else (0.0, 10.0)
  return comp.CompTriplet(f"k/{vid}/{kind}", vid, kind, (0.0, 10.0), query, pos, neg, span, span)


def test_training_groups_collect_the_hierarchy_per_video_span():
  triplets = [_triplet("a", "temp_reorder", "P", "R"), _triplet("a", "multi", "P2", "M"),
              _triplet("a", "seg_mismatch", "S", "N", span=(2.0, 5.0)), _triplet("b", "action_replace", "Q", "A")]
  groups = comp.training_groups(triplets, ("temp_reorder", "action_replace", "seg_mismatch", "multi"))
  assert groups == [comp.CompGroup("a", (0.0, 10.0), "P", ("R", None, None, "M")),
                    comp.CompGroup("a", (2.0, 5.0), "S", (None, None, "N", None)),
                    comp.CompGroup("b", (0.0, 10.0), "Q", (None, "A", None, None))]
  assert comp.training_groups(triplets, ("multi",)) == [comp.CompGroup("a", (0.0, 10.0), "P2", ("M",))]
  with pytest.raises(ValueError, match="distinct types"):
    comp.training_groups(triplets, ("temp_reorder", "temp_reorder"))


def test_stacked_examples_reorder_never_identity_and_partial_is_a_proper_ordered_subset():
  rng = np.random.default_rng(0)
  rewriter = comp.TemplateRewriter(connectives=False)
  clips = [(f"v{i}", (0.0, 1.0), f"Caption number {i}") for i in range(4)]
  for _ in range(50):
    pos, reordered, partial = comp.stacked_example(clips, rng, rewriter)
    assert pos == comp.plain_paragraph([c for _, _, c in clips])
    assert reordered != pos
    order = [int(s.split()[-1].rstrip(".")) for s in reordered.split(". ")]
    assert sorted(order) == [0, 1, 2, 3] and order != [0, 1, 2, 3]
    kept = [int(s.split()[-1].rstrip(".")) for s in partial.split(". ")]
    assert 1 <= len(kept) < 4 and kept == sorted(kept)
  assert comp.stacked_example(clips[:1], rng, rewriter)[1:] == (None, None)


def test_span_frames_sample_inside_the_span():
  idx = comp.span_frames(16, 16.0, (4.0, 12.0), 16)
  assert idx.min() == 4 and idx.max() == 11 and np.all(np.diff(idx) >= 0) and len(idx) == 16
  np.testing.assert_array_equal(comp.span_frames(8, 80.0, (0.0, 80.0), 4), [0, 2, 4, 6])
  assert comp.span_frames(4, 8.0, (2.9, 3.0), 3).tolist() == [1, 1, 1]   # no centre inside: the nearest frame
  with pytest.raises(ValueError, match="duration"):
    comp.span_frames(4, 0.0, (0.0, 1.0), 2)


def test_world_events_build_every_type_and_motion_tokens_carry_the_events():
  from vidjax.worlds import moving_objects as mo
  world = mo.make_moving_object_world(mo.MovingObjectWorldConfig(num_train_groups=12, num_eval_groups=4, num_events=4), 0)
  videos = mo.comp_events(world, "train")
  assert len(videos) == 12 and all(len(v.events) == 4 and v.duration == 16.0 for v in videos)
  assert videos[0].events[1][:2] == (4.0, 8.0) and videos[0].events[1][2].startswith("The ")
  rewriter = comp.TemplateRewriter(mo.COMP_LEXICON, connectives=False)
  triplets, counts = comp.build_comp(videos, split="train", rewriter=rewriter)
  assert all(counts[t] >= 10 for t in comp.TRAIN_TYPES) and sum(counts["dropped_validation"].values()) == 0
  by_video = {}
  for t in triplets:
    by_video.setdefault(t.video_id, {})[t.type] = t
  nested = 0
  for g in by_video.values():  # multi = the temp-reorder shuffle of the action-replace sentences
    if {"temp_reorder", "action_replace", "multi"} <= set(g):
      assert len({g[k].positive for k in ("temp_reorder", "action_replace", "multi")}) == 1
      sent = lambda p: p.rstrip(".").split(". ")  # noqa: E731
      pos, order, rep, multi = (sent(x) for x in (g["multi"].positive, g["temp_reorder"].negative,
                                                  g["action_replace"].negative, g["multi"].negative))
      edit = [(a, b) for a, b in zip(pos, rep) if a != b]
      assert len(edit) == 1 and sorted(multi) == sorted(rep)
      assert [(a, b) for a, b in zip(order, multi) if a != b] == edit  # the same edit, in the shuffled order
      nested += 1
  assert nested >= 10
  replaced = [t for t in triplets if t.type == "action_replace"]
  for t in replaced:  # a direction of motion changed, nothing else
    diff = [(a, b) for a, b in zip(t.positive.split(), t.negative.split()) if a != b]
    assert len(diff) == 1 and diff[0][0].rstrip(".") in mo.COMP_LEXICON
  tokens = mo.motion_tokens(world, seed=0, noise=0.0)
  assert tokens.shape == (len(world.data.videos), 16, world.config.max_objects, world.config.dim)
  i = [v.video_id for v in world.data.videos].index(videos[0].video_id)
  scene = world.scenes[videos[0].video_id]
  mover = scene.events[0][0]
  others = [o for o in range(len(scene.objects)) if o != mover]
  # During event 0 the moving object's token changes with its direction code; the others' do not move.
  if scene.events[1][0] != mover:
    assert np.abs(tokens[i, 3, mover] - tokens[i, 4, mover]).max() > 0.1
  for o in others:
    if all(e[0] != o for e in scene.events[:1]):
      np.testing.assert_allclose(tokens[i, 0, o], tokens[i, 3, o], atol=1e-6)
