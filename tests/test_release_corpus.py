"""The SYNTHETIC release-format corpus (vidjax.worlds.release): every real reader reads it, every id finds its video."""
import dataclasses
import os
from pathlib import Path

import av
import pytest

from vidjax import io
from vidjax.data import annotations as ann
from vidjax.data import comp
from vidjax.data import genstate
from vidjax.data import video
from vidjax.data.annotations import msrvtt as msrvtt_lib
from vidjax.data.video import index_videos
from vidjax.worlds import release

CFG = release.SIZES["smoke"]
N_TRAIN, N_TEST = 32, 16  # 4 tasks x 12 videos, every third a test video
N_ORDER = 2 * (CFG.order_train + CFG.order_test)  # MSR-VTT's ordered-event clips (two a pair)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  root = tmp_path_factory.mktemp("release") / "corpus"
  return root, release.write_corpus(root, CFG, seed=0)


def _splits(items):
  out = {}
  for item in items:
    out[item.split] = out.get(item.split, 0) + 1
  return out


def _frame_count(path) -> int:
  with av.open(str(path)) as container:
    return sum(1 for _ in container.decode(video=0))


def test_manifest_is_marked_synthetic_and_names_existing_paths(corpus):
  root, m = corpus
  assert m["synthetic"] is True and "SYNTHETIC" in m["note"] and m["seed"] == 0
  assert m["config"] == dataclasses.asdict(CFG)
  assert set(release.DATASETS) <= set(m)
  for name in release.DATASETS:
    for key, value in m[name].items():
      for path in value.split(","):
        assert Path(path).is_absolute() and Path(path).exists(), (name, key, path)
  assert io.read_json(root / "manifest.json") == m


def test_procedure_readers_read_the_release_files(corpus):
  _, m = corpus
  yc = ann.read_youcook2(m["youcook2"]["annotations"])
  assert _splits(yc) == {"train": N_TRAIN, "val": N_TEST}
  assert len({v.task for v in yc}) == CFG.tasks and all(len(v.clips) == CFG.steps for v in yc)
  train_file, test_file = m["coin"]["annotations"].split(",")
  coin_train, coin_test = ann.read_coin(train_file), ann.read_coin(test_file)
  assert _splits(coin_train) == {"train": N_TRAIN} and _splits(coin_test) == {"test": N_TEST}
  # CVR structure: the videos of one task share its step ids, step k in position k.
  by_task = {}
  for v in coin_train + coin_test:
    by_task.setdefault(v.task, set()).add(tuple((c.step, c.text) for c in v.clips))
  assert len(by_task) == CFG.tasks and all(len(s) == 1 for s in by_task.values())
  ct = ann.read_crosstask(m["crosstask"]["annotations"])
  test = int(round(0.2 * (N_TRAIN + N_TEST)))  # the reader's own 80/20 seed-42 split
  assert _splits(ct) == {"train": N_TRAIN + N_TEST - test, "test": test}
  assert {k: c for k, c in m["counts"]["crosstask"].items() if k != "release_lists"} == _splits(ct)
  tasks = ann.read_crosstask_tasks(m["crosstask"]["tasks"])
  assert len(tasks) == CFG.tasks and all(len(steps) == CFG.steps for _, steps in tasks.values())
  for v in ct:
    assert [c.text for c in v.clips] == list(tasks[v.task][1])
    assert [c.step for c in v.clips] == [str(k + 1) for k in range(CFG.steps)]
  for videos in (yc, coin_train, coin_test):
    for v in videos:
      assert v.duration == CFG.video_seconds and all(0 <= c.start < c.end <= v.duration for c in v.clips)
  for v in ct:
    assert all(0 <= c.start < c.end <= CFG.video_seconds for c in v.clips)


def test_place_words():
  obj = lambda *cells: release.rendered.Obj("red", "circle", tuple(cells))  # noqa: E731
  assert release.place([obj((0, 0), (0, 1))], 4) == "in the top left"
  assert release.place([obj((1, 1)), obj((2, 2))], 4) == "in the middle"
  assert release.place([obj((3, 0), (3, 3))], 4) == "at the bottom"
  assert release.place([obj((1, 3)), obj((2, 3))], 4) == "on the right"


def test_captions_name_where_each_video_draws_a_step_and_the_pixels_agree(corpus):
  """Every format but COIN's and CrossTask's step lists gets per-video captions (prompt + place); the place words
  agree with where the step's objects are in the pixels (their centroid over the step's frames, in grid cells
  from the board's centre) on at least 90% of the directional words (measured: 241 of 253 at seed 0; objects
  that appear or vanish mid-step pull the pixel centroid away from the cells' centre)."""
  import numpy as np
  _, m = corpus
  videos = release.make_videos(CFG, 0)
  assert m["distinct_paragraphs"] == {"train": N_TRAIN, "test": N_TEST}  # every smoke video has its own
  yc = {v.video_id: v for v in ann.read_youcook2(m["youcook2"]["annotations"])}
  assert sorted(tuple(c.text for c in v.clips) for v in yc.values()) == sorted(tuple(v.captions) for v in videos)
  for v in videos:
    assert v.captions == [f"{p} {w}" for p, w in zip(v.prompts, v.places)] and len(v.places) == CFG.steps
  coin = ann.read_coin(m["coin"]["annotations"].split(",")[0])
  assert {c.text for v in coin for c in v.clips} <= {s.prompt for v in videos for s in v.task.steps}
  agree = total = 0
  for v in videos:
    frames = release.video_frames(CFG, 0, v).astype(np.float32)
    tint = np.array(release._variation(CFG, 0, v.task, v.index)[0], np.float32)
    for k, place in enumerate(v.places):
      hits = (np.abs(frames[k * CFG.frames_per_step:(k + 1) * CFG.frames_per_step] - tint).sum(-1) > 60).sum(0)
      ys, xs = np.nonzero(hits)
      centre = [(np.average(a, weights=hits[ys, xs]) + 0.5) / CFG.size * CFG.grid - 0.5 - (CFG.grid - 1) / 2
                for a in (ys, xs)]
      for offset, (low, high) in zip(centre, (("top", "bottom"), ("left", "right"))):
        if low in place or high in place:
          total += 1
          agree += (offset < 0) == (low in place)
  assert total > 100 and agree >= 0.9 * total, (agree, total)


def test_retrieval_readers_read_the_release_files(corpus):
  _, m = corpus
  mr = m["msrvtt"]
  data = ann.read_msrvtt(mr["annotations"])
  assert _splits(data.videos) == {"train": N_TRAIN + 2 * CFG.order_train, "test": N_TEST + 2 * CFG.order_test}
  procedure = [v for v in data.videos if v.duration == CFG.video_seconds]
  assert len(procedure) == N_TRAIN + N_TEST
  assert len(data.captions) == (N_TRAIN + N_TEST) * (1 + CFG.steps) + N_ORDER
  assert _splits(ann.read_msrvtt(mr["annotations"], mr["train_list"]).videos) == {"train": N_TRAIN}
  assert _splits(ann.read_msrvtt(mr["annotations"], mr["val_list"]).videos) == {"test": N_TEST}
  test_csv = ann.read_msrvtt(mr["test_csv"])
  assert len(test_csv.videos) == len(test_csv.captions) == N_TEST
  assert set(test_csv.video_ids()) == set(msrvtt_lib.read_video_list(mr["val_list"]))

  for name, train_key, test_key, reader in (("didemo", "train_annotations", "test_annotations", ann.read_didemo),
                                            ("activitynet", "train_annotations", "test_annotations",
                                             ann.read_activitynet_captions)):
    for key, n in ((train_key, N_TRAIN), (test_key, N_TEST)):
      data = reader(m[name][key])
      assert len(data.videos) == n and len(data.captions) == n * CFG.steps, (name, key)
      # Step k is the moment [k, k + 1] * step seconds, inside the video.
      for vid, caps in data.captions_by_video().items():
        assert [(c.start, c.end) for c in caps] == [(k * CFG.step_seconds, (k + 1) * CFG.step_seconds)
                                                    for k in range(CFG.steps)], (name, vid)
      assert data.clipped == 0
  assert all(Path(v).suffix for v in ann.read_didemo(m["didemo"]["test_annotations"]).video_ids())

  msvd = ann.read_msvd(m["msvd"]["annotations"], m["msvd"]["captions"])
  assert _splits(msvd.videos) == {"train": N_TRAIN, "test": N_TEST}
  assert all(v.duration == CFG.video_seconds for v in msvd.videos)
  assert len(msvd.captions) == (N_TRAIN + N_TEST) * (1 + CFG.steps)


def test_facet_queries_name_one_step_of_their_own_video_and_no_other(corpus):
  """MSR-VTT's facet file: one query per test video (but those whose every step caption another test video shares),
  each one of its own step captions, which no other test video has, drawn per video from the seed."""
  _, m = corpus
  mr = m["msrvtt"]
  facets = ann.read_msrvtt(mr["facets_csv"])
  whole = ann.read_msrvtt(mr["annotations"])
  steps = {vid: [c.text for c in caps][1:] for vid, caps in whole.captions_by_video().items()}  # the paragraph first
  test_ids = set(msrvtt_lib.read_video_list(mr["val_list"]))
  assert set(facets.video_ids()) <= test_ids and len(facets.captions) == len(facets.videos) >= N_TEST // 2
  # One store embeds both test files' captions by key (launch/real_path.sh prepares MSR-VTT with both).
  assert not {c.caption_id for c in facets.captions} & {c.caption_id for c in ann.read_msrvtt(mr["test_csv"]).captions}
  for c in facets.captions:
    assert c.text in steps[c.video_id], c
    assert not any(c.text in steps[other] for other in test_ids - {c.video_id}), c
  assert len({steps[c.video_id].index(c.text) for c in facets.captions}) > 1  # not always the same step
  videos = release.make_videos(CFG, 0)
  assert release.facet_queries(videos, 0) == release.facet_queries(videos, 0)


def test_ordered_event_clips_are_twins_that_only_order_tells_apart(corpus):
  """MSR-VTT's ordered-event clips: each test clip is one query of MSRVTT_order_test.csv, its twin (the same events,
  drawn alike, in another order) is in the same gallery; the training clips are listed in train_list_order.txt
  alone (the JSFUSION lists are unchanged). Twins hold the same frames in another order: equal frame means."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  root, m = corpus
  mr = m["msrvtt"]
  order = ann.read_msrvtt(mr["order_csv"])
  assert len(order.captions) == len(order.videos) == 2 * CFG.order_test
  train = set(msrvtt_lib.read_video_list(mr["order_train_list"]))
  assert len(train) == 2 * CFG.order_train and not train & set(msrvtt_lib.read_video_list(mr["train_list"]))
  clips = release.make_ordered(CFG, 0)
  by_id = dict(zip(release.ordered_ids(release.make_videos(CFG, 0), clips).values(), clips))
  assert {by_id[v].split for v in train} == {"train"}
  for caption in order.captions:
    clip = by_id[caption.video_id]
    twin = next(c for c in clips if c.clip == clip.twin)
    assert caption.text == clip.caption and " then " in caption.text
    assert sorted(e.prompt for e in twin.events) == sorted(e.prompt for e in clip.events)
    assert twin.caption != clip.caption and twin.tint == clip.tint and 2 <= len(clip.events) <= 3
    a, b = (release.ordered_frames(CFG, 0, c, noise=False).astype(np.float64) for c in (clip, twin))
    assert a.shape == b.shape and np.allclose(a.mean(0), b.mean(0)) and not np.allclose(a, b)
  # each twin of a test clip is a query too (in the gallery), and every clip file decodes at its length
  assert {by_id[c.video_id].twin for c in order.captions} == {by_id[c.video_id].clip for c in order.captions}
  some = by_id[order.captions[0].video_id]
  assert _frame_count(root / "clips" / f"{some.clip}.mp4") == len(some.events) * CFG.frames_per_step
  # pair i of a split draws from its own stream: more pairs leave the first ones as they were
  more = release.make_ordered(dataclasses.replace(CFG, order_train=CFG.order_train + 3), 0)
  assert more[:2 * CFG.order_train] == clips[:2 * CFG.order_train] and more[-2:] == clips[-2:]


def test_oracles_say_which_mechanism_decides_each_query(corpus):
  """corpus_summary.json: the order queries need order (the frame-mean oracle ties each clip with its twin, the
  order-aware oracle decides every one), the facet queries need per-frame attention on most (the aligned oracle
  decides all, the frame-mean one fewer), the GenState temporal negatives that reverse the main clip need order."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from vidjax.worlds import oracles  # pylint: disable=g-import-not-at-top
  root, m = corpus
  summary = io.read_json(root / "corpus_summary.json", "summary")
  assert summary["synthetic"] is True and m["corpus_summary"] == str(root / "corpus_summary.json")
  order, facets, states = summary["order"], summary["facets"], summary["states"]
  assert (order["queries"], order["frame_mean_r1"], order["aligned_r1"], order["share"]) == (
      2 * CFG.order_test, 0.0, 100.0, 100.0)
  assert facets["aligned_r1"] == 100.0 and facets["frame_mean_r1"] < 100.0 and facets["share"] > 0
  assert facets["share"] == pytest.approx(100.0 - facets["frame_mean_r1"])
  assert states["queries"] == 4 * CFG.genstate_test and 0 < states["share"] < 100 and states["aligned_r1"] == 100
  # the oracles themselves, on frames made by hand: a clip and its reversal tie under the frame mean
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 4, 3))  # two "events" of 4 frames, 3 features
  clip, twin, other = np.concatenate([x[0], x[1]]), np.concatenate([x[1], x[0]]), rng.normal(size=(8, 3))
  gallery = [clip, twin, other]
  mean, seq = oracles.frame_mean_scores([clip], gallery), oracles.sequence_scores([clip], gallery)
  assert mean[0, 0] == pytest.approx(mean[0, 1]) and not oracles.decided(mean, np.array([0]))[0]
  assert oracles.decided(seq, np.array([0]))[0] and not oracles.decided(seq, np.array([1]))[0]
  aligned = oracles.aligned_scores([x[1]], gallery, 4)  # the second event: found in the clip and in its twin
  assert aligned[0, 0] == pytest.approx(0.0, abs=1e-6) and aligned[0, 1] == pytest.approx(0.0, abs=1e-6)


def test_genstate_and_videocomp_read(corpus):
  _, m = corpus
  g = m["genstate"]
  train, test = genstate.read_triplets(g["train_annotations"]), genstate.read_triplets(g["test_annotations"])
  assert (len(train), len(test)) == (4 * CFG.genstate_train, 4 * CFG.genstate_test)
  index = index_videos(g["videos"])
  assert all(vid in index for t in train + test for vid in t.videos)
  path = index[test[0].main]
  assert _frame_count(path) == CFG.genstate_frames
  activitynet = {split: set(ann.read_activitynet_captions(m["activitynet"][f"{split}_annotations"]).video_ids())
                 for split in ("train", "test")}
  for split, types in (("train", comp.TRAIN_TYPES), ("test", comp.EVAL_TYPES)):
    triplets = comp.read_release(m["videocomp"][f"{split}_annotations"])
    assert {t.type for t in triplets} == set(types)
    assert {t.video_id for t in triplets} == activitynet[split]
    assert all(t.original == (0.0, CFG.video_seconds) for t in triplets)
  assert m["videocomp"]["videos"] == m["activitynet"]["videos"]


def test_every_annotated_id_resolves_to_a_video_file(corpus):
  _, m = corpus
  ids = {
      "youcook2": [v.video_id for v in ann.read_youcook2(m["youcook2"]["annotations"])],
      "coin": [v.video_id for f in m["coin"]["annotations"].split(",") for v in ann.read_coin(f)],
      "crosstask": [v.video_id for v in ann.read_crosstask(m["crosstask"]["annotations"])],
      "msrvtt": ann.read_msrvtt(m["msrvtt"]["annotations"]).video_ids(),
      "didemo": [v for k in ("train_annotations", "test_annotations")
                 for v in ann.read_didemo(m["didemo"][k]).video_ids()],
      "activitynet": [v for k in ("train_annotations", "test_annotations")
                      for v in ann.read_activitynet_captions(m["activitynet"][k]).video_ids()],
      "msvd": ann.read_msvd(m["msvd"]["annotations"]).video_ids(),
  }
  decoded = 0
  for name, vids in ids.items():
    assert len(vids) == len(set(vids)) == N_TRAIN + N_TEST + (N_ORDER if name == "msrvtt" else 0), name
    index = index_videos(m[name]["videos"])
    assert len(index) == len(vids), name
    # DiDeMo ids keep their extension; extraction looks them up by stem (extract._retrieval_clips).
    paths = [index.get(v) or index.get(Path(v).stem) for v in vids]
    assert all(paths), (name, [v for v, p in zip(vids, paths) if not p][:3])
    assert all(os.path.islink(p) and not os.path.isabs(os.readlink(p)) for p in paths)
    if name in ("youcook2", "didemo"):  # decode a couple, to stay fast
      path = paths[-1]
      assert _frame_count(path) == CFG.video_frames
      frames, padded, error = video.decode_video(path, 8, 32)
      assert error is None and not padded.any() and frames.shape == (8, 32, 32, 3)
      decoded += 1
  assert decoded == 2


def test_same_seed_same_bytes_other_seed_other_content_and_resume(corpus, tmp_path):
  root, m = corpus
  clip = root / "clips" / "task0002_video0005.mp4"
  mtime = clip.stat().st_mtime_ns
  assert release.write_corpus(root, CFG, seed=0) == m  # resumes: nothing to render, same manifest
  assert clip.stat().st_mtime_ns == mtime

  again = tmp_path / "again"
  release.write_corpus(again, CFG, seed=0)
  files = sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file() and not p.is_symlink()
                 and p.suffix != ".mp4" and p.name != "manifest.json")
  assert len(files) > 30
  for rel in files:
    assert (root / rel).read_bytes() == (again / rel).read_bytes(), rel
  for rel in ("clips/task0002_video0005.mp4", "genstate/videos/test00001_temp.mp4"):
    assert (root / rel).read_bytes() == (again / rel).read_bytes(), rel
  for rel in (Path("youcook2/videos"), Path("didemo/videos")):
    assert sorted(os.listdir(root / rel)) == sorted(os.listdir(again / rel))

  other = tmp_path / "other"
  release.write_corpus(other, CFG, seed=1, datasets=("youcook2",))
  assert (other / "clips/task0002_video0005.mp4").read_bytes() != clip.read_bytes()
  a = ann.read_youcook2(root / "youcook2/youcookii_annotations_trainval.json")
  b = ann.read_youcook2(other / "youcook2/youcookii_annotations_trainval.json")
  assert [c.text for c in a[0].clips] != [c.text for c in b[0].clips]
  assert {v.video_id for v in a}.isdisjoint(v.video_id for v in b)

  # A smaller config renders the same videos for the (task, video) it shares: counts do not shift content.
  small = dataclasses.replace(CFG, tasks=1, videos_per_task=3)
  release.write_corpus(tmp_path / "small", small, seed=0, datasets=("youcook2",))
  assert (tmp_path / "small/clips/task0000_video0002.mp4").read_bytes() == (
      root / "clips/task0000_video0002.mp4").read_bytes()
  with pytest.raises(ValueError, match="already holds a corpus of seed 0"):
    release.write_corpus(tmp_path / "small", CFG, seed=0)


def test_cli_prints_one_line_per_dataset(corpus, capsys):
  root, m = corpus
  release.main(["--root", str(root), "--seed", "0"])
  out = capsys.readouterr().out.splitlines()
  assert [line.split()[0] for line in out[:-1]] == list(release.DATASETS)
  assert "SYNTHETIC" in out[-1]


@pytest.mark.parametrize("fields, match", [
    ({"frames_per_step": 18}, "whole number of DiDeMo's 5-second chunks"),
    ({"steps": 1}, "steps must be >= 2"),
    ({"steps": 7}, "at most 6 chunks"),
    ({"videos_per_task": 2}, "leaves a task without a test video"),
    ({"tasks": 0}, "tasks must be a positive integer"),
    ({"object_px": 40}, "object_px"),
    ({"genstate_test": 0}, "num_test"),
    ({"noise": -1.0}, "noise must be"),
])
def test_bad_config_values_raise_clear_errors(fields, match):
  with pytest.raises(ValueError, match=match):
    release.ReleaseCorpusConfig(**fields)


def test_bad_write_arguments_raise_clear_errors(tmp_path):
  with pytest.raises(ValueError, match="subset of"):
    release.write_corpus(tmp_path, CFG, datasets=("kinetics",))
  with pytest.raises(ValueError, match="add 'activitynet'"):
    release.write_corpus(tmp_path, CFG, datasets=("videocomp",))
  with pytest.raises(ValueError, match="MSVD"):
    release.write_corpus(tmp_path, dataclasses.replace(CFG, tasks=400), datasets=("msvd",))
  assert not any(tmp_path.iterdir())  # refused before writing anything
