"""Tests for the CVR benchmark / training-set builder (vidjax/data/cvr.py, CAST §2.2, App. B)."""
import functools
import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from vidjax.data import annotations
from vidjax.data import cvr
from vidjax.data.annotations.types import make_video

pytestmark = pytest.mark.highest_precision  # compares with NumPy or a reference (tests/conftest.py)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
YC2 = SHARED / "youcook2" / "youcookii_annotations_trainval.json"
COIN_TEST = SHARED / "coin" / "coin_test_30.json"
CROSSTASK = Path(__file__).parent / "fixtures" / "crosstask"


def fake_embed(texts):
  """Cheap deterministic caption embedding: hashed bag of words, [N, 64]."""
  out = np.zeros((len(texts), 64), np.float32)
  for i, text in enumerate(texts):
    for word in text.lower().split():
      out[i, zlib.crc32(word.encode()) % 64] += 1.0
  return out


@functools.cache
def yc2(split):
  return annotations.read_youcook2(YC2, split)


def _yc2_build(out_dir, seed=0):
  # Real validation split as the benchmark; a slice of the training split keeps the test fast.
  return cvr.build_cvr(yc2("train")[:120], yc2("val"), out_dir, seed=seed, embed_fn=fake_embed,
                       **cvr.DATASET_RULES["youcook2"]).stats


@pytest.fixture(scope="module")
def yc2_out(tmp_path_factory):
  out = tmp_path_factory.mktemp("yc2")
  stats = _yc2_build(out)
  files = {p.name: json.loads(p.read_text()) for p in out.glob("*.json")}
  return out, stats, files


def _clip_index(videos):
  return {c.clip_id: c for v in videos for c in v.clips}


def _check_pools(records, clips, pool_size=10):
  for r in records:
    cands = r["candidates"]
    assert len(cands) == pool_size and len(set(cands)) == pool_size
    assert cands.count(r["target"]) == 1 and r["target"] == r["query_id"]
    assert set(r["negative_types"]) == set(cands) - {r["target"]}
    target = clips[r["target"]]
    assert r["text"] == target.text and r["video_id"] == target.video_id and r["task"] == target.task
    for c, kind in r["negative_types"].items():
      same_video = clips[c].video_id == target.video_id
      assert same_video == (kind == "state"), (r["query_id"], c, kind)
      if kind == "state":
        assert clips[c].text != target.text


def test_yc2_one_query_per_step_except_first(yc2_out):
  _, stats, files = yc2_out
  records = files["benchmark.json"]
  videos = yc2("val")
  expected = [c.clip_id for v in videos for c in v.clips[1:]]
  assert [r["query_id"] for r in records] == expected
  assert stats["benchmark"]["queries"] == len(expected) == 3492 - 457
  assert stats["benchmark"]["videos"] == 457 and stats["benchmark"]["step_clips"] == 3492
  by_id = {v.video_id: v for v in videos}
  for r in records:
    clips = by_id[r["video_id"]].clips
    t = int(r["target"].split("#")[1])
    assert r["context"] == [c.clip_id for c in clips[max(0, t - 5):t]]


def test_yc2_pool_invariants_and_composition(yc2_out):
  _, stats, files = yc2_out
  records = files["benchmark.json"]
  _check_pools(records, _clip_index(yc2("val")))
  counts = {"state": 0, "identity": 0, "easy": 0}
  for r in records:
    kinds = list(r["negative_types"].values())
    for k in kinds:
      counts[k] += 1
    if not r["backfilled"]:
      assert sorted(kinds) == ["easy"] * 3 + ["identity"] * 3 + ["state"] * 3
    else:
      assert kinds.count("state") + kinds.count("identity") == 6  # backfilled from the other hard pool
  assert counts == stats["benchmark"]["negatives"]
  assert sum(r["backfilled"] for r in records) == stats["benchmark"]["pools_backfilled"] > 0
  # Candidate order is shuffled: the target is not always in the same slot.
  positions = np.bincount([r["candidates"].index(r["target"]) for r in records], minlength=10)
  assert positions.min() > 0.5 * len(records) / 10


def test_yc2_state_negatives_avoid_predecessor_and_are_diverse(yc2_out):
  _, _, files = yc2_out
  by_id = {v.video_id: v for v in yc2("val")}
  used_predecessor = 0
  for r in files["benchmark.json"]:
    clips = by_id[r["video_id"]].clips
    t = int(r["target"].split("#")[1])
    state = {int(c.split("#")[1]) for c, k in r["negative_types"].items() if k == "state"}
    eligible = {j for j, c in enumerate(clips) if j != t and c.text.lower() != clips[t].text.lower()}
    assert state <= eligible
    if t - 1 in state:
      used_predecessor += 1
      assert state == eligible or len(state) == 3 and eligible - state == set(), r["query_id"]
    past, future = {j for j in eligible if j < t - 1}, {j for j in eligible if j > t}
    if past and future:
      assert state & past and state & future, r["query_id"]
  assert used_predecessor > 0  # short videos exist where it is the only option


def test_yc2_identity_negatives_are_top_caption_neighbours(yc2_out):
  _, _, files = yc2_out
  clips = [c for v in yc2("val") for c in v.clips]
  pos = {c.clip_id: i for i, c in enumerate(clips)}
  emb = fake_embed([c.text for c in clips]).astype(np.float64)
  emb /= np.linalg.norm(emb, axis=1, keepdims=True)
  sim = emb @ emb.T
  vid = np.array([c.video_id for c in clips])
  for r in files["benchmark.json"][::7]:
    g = pos[r["target"]]
    cross = np.where(vid != vid[g], sim[g], -np.inf)
    ident = [pos[c] for c, k in r["negative_types"].items() if k == "identity"]
    # Nominal pools take the top-3 neighbours; backfilled ones continue down the ranking (top-6).
    assert len(ident) == 3 or r["backfilled"] and 3 < len(ident) <= 6
    bound = np.sort(cross)[-len(ident)]
    assert all(vid[i] != vid[g] for i in ident)
    assert all(sim[g, i] >= bound - 1e-4 for i in ident), r["query_id"]


def test_yc2_build_is_byte_identical_and_seeded(yc2_out, tmp_path):
  out, _, _ = yc2_out
  _yc2_build(tmp_path / "again")
  names = sorted(p.name for p in out.glob("*.json"))
  assert names == ["benchmark.json", "clips.json", "heldout.json", "splits.json", "stats.json", "train.json"]
  for name in names:
    assert (out / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name
  other, _ = cvr.build_benchmark(yc2("val")[:40], identity_rule="caption_similarity", embed_fn=fake_embed, seed=1)
  same, _ = cvr.build_benchmark(yc2("val")[:40], identity_rule="caption_similarity", embed_fn=fake_embed, seed=0)
  first = json.loads((out / "benchmark.json").read_text())
  assert other != same
  # Mining within a smaller video set changes cross-video pools, but not the query structure.
  assert [r["context"] for r in same] == [r["context"] for r in first[:len(same)]]


def test_yc2_heldout_and_training_are_video_disjoint(yc2_out):
  _, stats, files = yc2_out
  splits = files["splits.json"]
  train, heldout, ev = map(set, (splits["train"], splits["heldout"], splits["eval"]))
  assert len(heldout) == 12 and len(train) == 108 and len(ev) == 457
  assert not (train & heldout or train & ev or heldout & ev)
  clips = files["clips.json"]
  for name, allowed in (("benchmark.json", ev), ("heldout.json", heldout)):
    for r in files[name]:
      assert {clips[c]["video_id"] for c in r["candidates"] + r["context"]} <= allowed
  for inst in files["train.json"]:
    used = inst["context"] + [inst["target"]] + inst["state_negatives"] + inst["identity_negatives"]
    assert {clips[c]["video_id"] for c in used} <= train
  assert stats["train"]["instances"] == len(files["train.json"])
  assert stats["heldout"]["queries"] == len(files["heldout.json"])
  assert files["stats.json"] == json.loads(json.dumps(stats))
  assert "benchmark" in cvr.format_stats(stats) and str(stats["benchmark"]["queries"]) in cvr.format_stats(stats)


def test_yc2_training_instances(yc2_out):
  _, stats, files = yc2_out
  clips = files["clips.json"]
  n_state = n_ident = 0
  for inst in files["train.json"]:
    v = clips[inst["target"]]["video_id"]
    st, idn = inst["state_negatives"], inst["identity_negatives"]
    assert len(st) <= 3 and len(idn) <= 3 and len(set(st + idn + [inst["target"]])) == len(st) + len(idn) + 1
    if not inst["fallback"]:
      assert all(clips[c]["video_id"] == v for c in st)
      assert all(clips[c]["video_id"] != v for c in idn)
    n_state += len(st)
    n_ident += len(idn)
  assert (n_state, n_ident) == (stats["train"]["state_negatives"], stats["train"]["identity_negatives"])


def _tiny_world():
  """Two tasks; video 'a0' has a step no other video has, video 'solo' is its task's only video."""
  def video(vid, task, steps):
    return make_video(vid, task, "test", [(10.0 * i, 10.0 * i + 5, f"t{task} step {s}", str(s))
                                          for i, s in enumerate(steps)])
  return [video("a0", "1", [1, 2, 3, 9]), video("a1", "1", [1, 2, 3, 4]), video("a2", "1", [2, 3, 4]),
          video("b0", "2", [1, 2, 3]), video("b1", "2", [1, 3, 2]), video("solo", "3", [1, 2])]


def test_task_step_identity_rule_and_fallback():
  videos = _tiny_world()
  clips = _clip_index(videos)
  kw = dict(identity_rule="task_step", num_state=1, num_identity=2, pool_size=6)
  strict, stats = cvr.build_benchmark(videos, task_fallback=False, **kw)
  loose, _ = cvr.build_benchmark(videos, task_fallback=True, **kw)
  _check_pools(strict, clips, pool_size=6)
  _check_pools(loose, clips, pool_size=6)
  for records, fallback in ((strict, False), (loose, True)):
    for r in records:
      t = clips[r["target"]]
      for c, kind in r["negative_types"].items():
        n = clips[c]
        if kind == "identity":
          assert n.task == t.task and n.video_id != t.video_id
          assert n.step == t.step or fallback
        if kind == "easy":
          assert n.task != t.task
  # Step 9 of a0 exists nowhere else: strict backfills with state, fallback takes same task, other step.
  odd_strict = next(r for r in strict if r["target"] == "a0#003")
  odd_loose = next(r for r in loose if r["target"] == "a0#003")
  assert odd_strict["backfilled"] and "identity" not in odd_strict["negative_types"].values()
  ident = [c for c, k in odd_loose["negative_types"].items() if k == "identity"]
  assert len(ident) == 2 and all(clips[c].task == "1" and clips[c].step != "9" for c in ident)
  # 'solo' has no same-task video: its pool is its one state clip, then easy negatives.
  solo = next(r for r in loose if r["video_id"] == "solo")
  assert sorted(solo["negative_types"].values()) == ["easy"] * 4 + ["state"]
  assert stats["pools_easy_fill"] >= 1 and stats["queries"] == sum(len(v.clips) - 1 for v in videos)


def test_training_fallback_rules():
  videos = _tiny_world()
  inst, stats = cvr.build_training_instances(videos, identity_rule="task_step", task_fallback=False)
  by_target = {i["target"]: i for i in inst}
  # solo#001: state pool = predecessor only, identity pool empty -> short lists, zero padding.
  solo = by_target["solo#001"]
  assert solo["state_negatives"] == ["solo#000"] and solo["identity_negatives"] == [] and not solo["fallback"]
  # a0#003 (unique step 9): no identity clips, so identity slots fall back to the state pool (0 left after 3).
  odd = by_target["a0#003"]
  assert len(odd["state_negatives"]) == 3 and odd["identity_negatives"] == []
  # b0#001: both pools short (2 state incl. the predecessor last, 1 identity), nothing to fall back on.
  short = by_target["b0#001"]
  assert short["state_negatives"] == ["b0#002", "b0#000"] and short["identity_negatives"] == ["b1#002"]
  assert not short["fallback"]
  padded = sum(6 - len(i["state_negatives"]) - len(i["identity_negatives"]) for i in inst)
  assert stats["padded_slots"] == padded > 0
  two = [make_video("x", "1", "train", [(0, 1, "a", "1"), (1, 2, "b", "2")]),
         *[make_video(f"y{i}", "1", "train", [(0, 1, "a", "1"), (1, 2, "b", "2")]) for i in range(5)]]
  inst, stats = cvr.build_training_instances(two, identity_rule="task_step")
  x = next(i for i in inst if i["video_id"] == "x")
  assert x["state_negatives"][0] == "x#000" and len(x["state_negatives"]) == 3 and x["fallback"]
  assert all(c.startswith("y") for c in x["state_negatives"][1:] + x["identity_negatives"])
  assert all(c.endswith("#001") for c in x["identity_negatives"])
  assert stats["instances_state_fallback"] == 6


def test_caption_neighbours_match_numpy_bruteforce():
  rng = np.random.default_rng(0)
  texts = [f"caption {i}" for i in range(37)]
  table = rng.normal(size=(37, 8)).astype(np.float32)
  embed = lambda ts: table[[int(t.split()[1]) for t in ts]]
  video = np.repeat(np.arange(10), 4)[:37]
  got = cvr.caption_neighbours(texts, video, embed, k=5, chunk=8)
  e = table / np.linalg.norm(table, axis=1, keepdims=True)
  sim = e.astype(np.float64) @ e.T.astype(np.float64)
  for i in range(37):
    order = [j for j in np.argsort(-sim[i], kind="stable") if video[j] != video[i]]
    assert list(got[i]) == order[:5]
  # Only two clips of other videos exist for the first video: the rest is padded with -1.
  few = cvr.caption_neighbours(texts[:6], video[:6], embed, k=4)
  assert few.shape == (6, 4) and set(few[0][:2]) == {4, 5} and list(few[0][2:]) == [-1, -1]


def test_caption_neighbours_break_ties_in_a_seeded_order_per_caption():
  """Captions many clips share (every clip of a step says the same) rank equal: without a seed the lowest indices
  win every time; with one each caption takes its own draw of the tied clips, the same for the same seed."""
  texts = ["add salt"] * 40 + [f"other {i}" for i in range(10)]
  table = {"add salt": np.ones(8)} | {f"other {i}": np.eye(8)[i % 8] for i in range(10)}
  embed = lambda ts: np.stack([table[t] for t in ts])  # noqa: E731
  video = np.arange(50)
  plain = cvr.caption_neighbours(texts, video, embed, k=3)
  assert all(list(plain[i]) == [j for j in range(4) if j != i][:3] for i in range(40))
  drawn = cvr.caption_neighbours(texts, video, embed, k=3, tie_seed=7, chunk=16)
  np.testing.assert_array_equal(drawn, cvr.caption_neighbours(texts, video, embed, k=3, tie_seed=7))
  assert all(set(drawn[i]) <= set(range(40)) - {i} for i in range(40))  # still the top (tied) similarity
  assert len({int(j) for j in drawn[:40].ravel()}) > 20  # spread over the tied clips, not the first three
  assert not np.array_equal(drawn, cvr.caption_neighbours(texts, video, embed, k=3, tie_seed=8))


def test_coin_real_subset_rules():
  videos = annotations.read_coin(COIN_TEST)[:600]
  clips = _clip_index(videos)
  records, stats = cvr.build_benchmark(videos, seed=0, **cvr.DATASET_RULES["coin"])
  _check_pools(records, clips)
  for r in records:
    t = clips[r["target"]]
    for c, kind in r["negative_types"].items():
      n = clips[c]
      if kind == "identity":
        assert (n.task, n.step) == (t.task, t.step) and n.video_id != t.video_id
      elif kind == "easy":
        assert n.task != t.task
      else:
        assert n.video_id == t.video_id and n.step != t.step
  assert stats["queries"] == sum(len(v.clips) - 1 for v in videos)
  assert 0 < stats["pools_hard_backfill"] < stats["queries"]


def test_crosstask_build_from_fixture(tmp_path):
  videos = annotations.read_crosstask(CROSSTASK)
  stats = cvr.build_crosstask_cvr(videos, tmp_path, num_state=1, num_identity=1, pool_size=4,
                                  heldout_fraction=0.25, seed=0).stats
  names = sorted(p.name for p in tmp_path.glob("*.json"))
  assert names == ["clips.json", "crosstask_test.json", "crosstask_train.json", "heldout.json",
                   "splits.json", "stats.json"]
  splits = json.loads((tmp_path / "splits.json").read_text())
  assert splits["eval"] == sorted(v.video_id for v in videos if v.split == "test")  # same seed-42 split
  assert not set(splits["eval"]) & set(splits["train"] + splits["heldout"])
  test = json.loads((tmp_path / "crosstask_test.json").read_text())
  clips = _clip_index(videos)
  _check_pools(test, clips, pool_size=4)
  assert {clips[c].video_id for r in test for c in r["candidates"]} <= set(splits["eval"])
  flip = next(r for r in test if clips[r["target"]].text == "flip pancake")
  ident = [c for c, k in flip["negative_types"].items() if k == "identity"]
  # Only one video has 'flip pancake': the identity negative falls back to the same task, another step.
  assert len(ident) == 1 and clips[ident[0]].task == "10003" and clips[ident[0]].step != "3"
  train = json.loads((tmp_path / "crosstask_train.json").read_text())
  assert {clips[i["target"]].video_id for i in train} <= set(splits["train"])
  assert stats["config"]["identity_rule"] == "task_step" and stats["config"]["task_fallback"]


def test_builder_errors():
  videos = _tiny_world()
  with pytest.raises(ValueError, match="needs embed_fn"):
    cvr.build_benchmark(videos, identity_rule="caption_similarity")
  with pytest.raises(ValueError, match="identity_rule must be one of"):
    cvr.build_benchmark(videos, identity_rule="sbert")
  with pytest.raises(ValueError, match=r"query 'a0#001' needs \d+ easy negatives but only"):
    cvr.build_benchmark(videos[:2], identity_rule="task_step")
  with pytest.raises(ValueError, match="video-disjoint"):
    cvr.build_cvr(videos, videos[:1], "/tmp/never_written", identity_rule="task_step")
  # A held-out subset too small for its pools says it is the held-out subset and names the setting that sized it.
  with pytest.raises(ValueError, match=r"the held-out subset \(1 of the \d+ training videos: "
                                       r"config.data.heldout_fraction=0.25, .*needs \d+ easy negatives.*raise "
                                       r"data.heldout_fraction"):
    cvr.build_cvr(videos[2:], videos[:2], "/tmp/never_written", identity_rule="task_step", heldout_fraction=0.25,
                  pool_size=4, num_state=1, num_identity=1)
  with pytest.raises(ValueError, match="embed_fn must return finite"):
    cvr.build_benchmark(videos, identity_rule="caption_similarity", embed_fn=lambda t: np.zeros((1, 4)))
  with pytest.raises(ValueError, match="pool_size=5 leaves fewer"):
    cvr.build_benchmark(videos, identity_rule="task_step", pool_size=5)


def test_a_small_heldout_subset_grows_to_the_smallest_that_builds_its_pools(tmp_path):
  """Issue 52: 16 training videos at heldout_fraction 0.1 hold out 2, too few for 1-vs-10 pools. Refused with the
  setting named, or (grow_heldout, the default unless strict) grown one video at a time to the smallest subset
  that builds; the stats keep the fraction asked and the one used."""
  train, val = yc2("train")[:16], yc2("val")[:16]
  rules = dict(cvr.DATASET_RULES["youcook2"], embed_fn=fake_embed, seed=0)
  with pytest.raises(ValueError, match="heldout_fraction=0.1"):
    cvr.build_cvr(train, val, tmp_path / "refused", heldout_fraction=0.1, **rules)
  assert not (tmp_path / "refused" / "heldout.json").exists()
  stats = cvr.build_cvr(train, val, tmp_path / "grown", heldout_fraction=0.1, grow_heldout=True, **rules).stats
  used = stats["config"]["heldout_fraction"]
  assert stats["config"]["heldout_fraction_asked"] == 0.1 and used > 0.1
  count = round(used * 16)
  assert len(json.loads((tmp_path / "grown" / "splits.json").read_text())["heldout"]) == count
  with pytest.raises(ValueError, match="held-out subset"):  # one video fewer does not build
    cvr.build_cvr(train, val, tmp_path / "fewer", heldout_fraction=(count - 1) / 16, **rules)
