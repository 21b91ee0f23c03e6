"""Tests for the text-video retrieval readers (MSR-VTT, DiDeMo, ActivityNet Captions, MSVD, LSMDC)
and the paragraph protocol (vidjax/data/annotations)."""
import collections
import csv
import functools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from vidjax.data import annotations
from vidjax.data.annotations import didemo as didemo_lib
from vidjax.data.annotations import types

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
MSRVTT = SHARED / "msrvtt"
DIDEMO = SHARED / "didemo"
ANET = SHARED / "activitynet_captions"
MSVD = SHARED / "msvd"
FIXTURES = Path(__file__).parent / "fixtures" / "retrieval"


def _check_model(data):
  """The `RetrievalData` contract: sorted unique videos, unique caption ids, known videos, clean text."""
  ids = data.video_ids()
  assert ids == sorted(ids) and len(set(ids)) == len(ids)
  caption_ids = [c.caption_id for c in data.captions]
  assert len(set(caption_ids)) == len(caption_ids)
  known = set(ids)
  durations = {v.video_id: v.duration for v in data.videos}
  for c in data.captions:
    assert c.video_id in known and c.text and c.text == c.text.strip()
    assert (c.start is None) == (c.end is None)
    if c.start is not None:
      assert 0 <= c.start <= c.end
      if durations[c.video_id] is not None:
        assert c.end <= durations[c.video_id]


@functools.cache
def _read(reader, *args):
  return getattr(annotations, reader)(*args)


# ------------------------------------------------------------------------------------------------
# MSR-VTT


def test_msrvtt_1ka_real_csv_matches_the_id_list():
  data = _read("read_msrvtt", MSRVTT / "MSRVTT_JSFUSION_test.csv")
  _check_model(data)
  assert len(data.videos) == 1000 and len(data.captions) == 1000
  listed = (MSRVTT / "val_list_jsfusion.txt").read_text().split()
  assert set(data.video_ids()) == set(listed) and len(listed) == 1000
  assert all(v.split == "test" and v.duration is None for v in data.videos)
  first = data.captions[0]
  assert (first.caption_id, first.video_id, first.text) == ("ret0", "video9770", "a person is connecting something to system")
  by_video = {c.video_id: c.text for c in data.captions}
  assert by_video["video9258"] == "a person is using a phone"
  restricted = annotations.read_msrvtt(MSRVTT / "MSRVTT_JSFUSION_test.csv", MSRVTT / "val_list_jsfusion.txt")
  assert restricted == data


def test_msrvtt_comma_layout_of_the_real_file_reads_the_same(tmp_path):
  rows = list(csv.reader(open(MSRVTT / "MSRVTT_JSFUSION_test.csv", newline=""), delimiter=";"))
  comma = tmp_path / "MSRVTT_JSFUSION_test.csv"
  with open(comma, "w", newline="") as f:
    csv.writer(f).writerows(rows)  # the original comma-delimited layout, LF line ends
  data = annotations.read_msrvtt(comma)
  real = _read("read_msrvtt", MSRVTT / "MSRVTT_JSFUSION_test.csv")
  assert data.videos == real.videos and data.captions == real.captions


def test_msrvtt_fixture_layouts():
  comma = annotations.read_msrvtt(FIXTURES / "msrvtt_jsfusion_comma.csv")
  _check_model(comma)
  assert [(c.caption_id, c.video_id, c.text) for c in comma.captions] == [
      ("ret0", "video7020", "a woman creating a fondant baby and flower"),
      ("ret1", "video7021", "a man, a dog and a red ball"),  # quoted field with the delimiter inside
      ("ret2", "video7024", "people are dancing on a stage")]

  train = annotations.read_msrvtt(FIXTURES / "msrvtt_train.csv")
  assert train.video_ids() == ["video0", "video1", "video2"] and train.captions == ()
  assert {v.split for v in train.videos} == {"train"}

  data = annotations.read_msrvtt(FIXTURES / "MSRVTT_data.json")
  _check_model(data)
  assert [(v.video_id, v.split) for v in data.videos] == [("video0", "train"), ("video1", "val"), ("video2", "test")]
  assert data.videos[0].duration == 11.72 and data.videos[2].duration == 10.0
  assert [c.caption_id for c in data.captions] == ["0", "1", "20", "40", "41"]
  assert data.captions[2].text == "a man is talking about cars"  # stripped

  listed = annotations.read_msrvtt(FIXTURES / "MSRVTT_data.json", FIXTURES / "msrvtt_list.txt")
  assert listed.video_ids() == ["video0", "video2"]
  assert [c.caption_id for c in listed.captions] == ["0", "1", "40", "41"]
  as_csv_list = annotations.read_msrvtt(FIXTURES / "MSRVTT_data.json", FIXTURES / "msrvtt_train.csv")
  assert as_csv_list.video_ids() == ["video0", "video1", "video2"]  # a one-column csv works as a list


# ------------------------------------------------------------------------------------------------
# DiDeMo


def test_didemo_real_test_and_val():
  test = _read("read_didemo", DIDEMO / "test_data.json")
  val = _read("read_didemo", DIDEMO / "val_data.json")
  for data in (test, val):
    _check_model(data)
    assert all(c.start % 5 == 0 and c.end % 5 == 0 and c.end - c.start >= 5 for c in data.captions)
    assert all(c.end <= 30 for c in data.captions)
  assert len(test.captions) == 4021 and len(test.videos) == 1037
  assert len(val.captions) == 4180 and len(val.videos) == 1094
  assert len(annotations.paragraphs(test).captions) == 1037
  assert len(annotations.paragraphs(val).captions) == 1094
  raw = json.loads((DIDEMO / "test_data.json").read_text())
  for entry, caption in list(zip(raw, test.captions))[::97]:
    assert caption.caption_id == str(entry["annotation_id"]) and caption.video_id == entry["video"]
    counts = collections.Counter(tuple(t) for t in entry["times"])
    best = max(counts.values())
    s, e = min(p for p, k in counts.items() if k == best)
    assert (caption.start, caption.end) == (5.0 * s, 5.0 * (e + 1))
  # The first test description: annotators say [4,4] x4 and [0,0] x3 -> [20 s, 25 s].
  assert (test.captions[0].start, test.captions[0].end) == (20.0, 25.0)


def test_didemo_fixture_time_rule():
  data = annotations.read_didemo(FIXTURES / "didemo_data.json")
  _check_model(data)
  assert data.video_ids() == ["1234@N00_111_aaa.mov", "5678@N01_222_bbb.mp4"]
  assert [(c.caption_id, c.text, c.start, c.end) for c in data.captions] == [
      ("11", "the dog jumps into the water.", 10.0, 20.0),  # [2, 3] twice: the mode
      ("12", "a boat passes by", 0.0, 5.0),                 # [4,5], [0,0], [1,1] twice each: earliest
      ("20", "first time we see the red car", 0.0, 10.0)]   # all once: earliest [0, 1]
  assert didemo_lib.consensus_moment([(4, 5), (0, 0), (4, 5), (0, 0)]) == (0, 0)
  assert didemo_lib.consensus_moment([(0, 0), (4, 5), (4, 5)]) == (4, 5)
  assert didemo_lib.moment_seconds(5, 5) == (25.0, 30.0)


# ------------------------------------------------------------------------------------------------
# ActivityNet Captions


@pytest.mark.parametrize("name,videos,captions,clipped", [
    ("val_1.json", 4917, 17505, 134),
    ("val_2.json", 4885, 17031, 111),
    ("train_modified.json", 10009, 37421, 261),
])
def test_activitynet_real_files(name, videos, captions, clipped):
  data = _read("read_activitynet_captions", ANET / name)
  _check_model(data)
  assert len(data.videos) == videos and len(data.captions) == captions
  assert len(annotations.paragraphs(data).captions) == videos
  raw = json.loads((ANET / name).read_text())
  raw_ends = [e for v in raw.values() for _, e in v["timestamps"]]
  # Ends past `duration` (float rounding, at most 0.01 s) are clipped; nothing else changes.
  assert sum(c.end != e for c, e in zip(data.captions, raw_ends)) == clipped
  assert max(e - raw[c.video_id]["duration"] for c, e in zip(data.captions, raw_ends)) <= 0.0100001
  v = data.videos[0]
  assert v.duration == raw[v.video_id]["duration"]
  first = next(c for c in data.captions if c.video_id == v.video_id)
  assert first.caption_id == f"{v.video_id}#000" and first.text == raw[v.video_id]["sentences"][0].strip()


def test_activitynet_fixture_clips_and_strips():
  data = annotations.read_activitynet_captions(FIXTURES / "activitynet_captions.json")
  _check_model(data)
  assert [(v.video_id, v.duration) for v in data.videos] == [
      ("v_fixture0001", 60.0), ("v_fixture0002", 20.01), ("v_fixture0003", 8.0)]
  assert [c.caption_id for c in data.captions] == [
      "v_fixture0001#000", "v_fixture0001#001", "v_fixture0001#002", "v_fixture0001#003", "v_fixture0002#000"]
  assert data.captions[0].text == "Then he jumps." and data.captions[1].text == "A man stands on a board."
  assert (data.captions[4].start, data.captions[4].end) == (5.0, 20.01)  # clipped to the duration


def test_activitynet_negative_start_is_clipped_to_zero(tmp_path):
  path = tmp_path / "anet.json"
  path.write_text(json.dumps({"v_x": {"duration": 9.5, "timestamps": [[-0.5, 3.0]], "sentences": ["a cat."]}}))
  (caption,) = annotations.read_activitynet_captions(path).captions
  assert (caption.start, caption.end) == (0.0, 3.0)


# ------------------------------------------------------------------------------------------------
# MSVD and LSMDC


def test_msvd_real_mapping():
  data = _read("read_msvd", MSVD / "youtube_mapping.txt")
  _check_model(data)
  n_lines = len((MSVD / "youtube_mapping.txt").read_text().splitlines())
  assert len(data.videos) == n_lines == 1970 and data.captions == ()
  assert collections.Counter(v.split for v in data.videos) == {"train": 1200, "val": 100, "test": 670}
  by_id = {v.video_id: v for v in data.videos}
  assert by_id["-4wsuPCjDBc_5_15"] == types.RetrievalVideo("-4wsuPCjDBc_5_15", 10.0, "train")
  assert all(2 <= v.duration <= 60 for v in data.videos)


def test_msvd_fixture_with_captions():
  data = annotations.read_msvd(FIXTURES / "msvd_youtube_mapping.txt", FIXTURES / "msvd_AllVideoDescriptions.txt")
  _check_model(data)
  assert data.videos == (
      types.RetrievalVideo("-4wsuPCjDBc_5_15", 10.0, "train"),
      types.RetrievalVideo("ab_cd-ef_gh_0_4", 4.0, "val"),  # '_' inside the YouTube id
      types.RetrievalVideo("zzzzzzzzzzz_30_36", 6.0, "test"))
  assert [(c.caption_id, c.text) for c in data.captions] == [
      ("-4wsuPCjDBc_5_15#000", "a squirrel is eating a peanut in its shell"),
      ("-4wsuPCjDBc_5_15#001", "A chipmunk is eating."),
      ("zzzzzzzzzzz_30_36#000", "a man plays a guitar"),
      ("-4wsuPCjDBc_5_15#002", "a small animal eats")]  # keyed by its vid<N> alias
  assert all(c.start is None for c in data.captions)


def test_lsmdc_fixture():
  data = annotations.read_lsmdc(FIXTURES / "LSMDC16_annos_fixture.csv")
  _check_model(data)
  ab1, ab2, unb = data.videos
  assert ab1.video_id == "0001_American_Beauty_00.00.51.926-00.00.54.129" and ab1.duration == 4.0
  assert ab2.duration == 3.0 and unb.duration == 3.5 and unb.video_id.startswith("1012_Unbreakable")
  assert [(c.caption_id.rsplit("#", 1)[1], c.text) for c in data.captions] == [
      ("000", "Someone lies asleep in bed."), ("000", "Someone opens the door."), ("001", "He looks outside."),
      ("000", "Someone walks into the station.")]
  assert data.captions[2].video_id == ab2.video_id and all(c.start is None for c in data.captions)
  assert annotations.lsmdc.parse_time("00.02.17.945") == pytest.approx(137.945)
  assert annotations.lsmdc.parse_time("01.10.02.31") == pytest.approx(4202.31)
  assert annotations.lsmdc.parse_time("00.61.00.000") is None
  # the worlds write their LSMDC files with format_time, parse_time's inverse
  assert annotations.lsmdc.format_time(137.945) == "00.02.17.945" and annotations.lsmdc.format_time(0) == "00.00.00.000"
  for seconds in np.random.default_rng(0).uniform(0, 20_000, 50).round(3):
    assert annotations.lsmdc.parse_time(annotations.lsmdc.format_time(seconds)) == pytest.approx(seconds, abs=1e-9)


# ------------------------------------------------------------------------------------------------
# Paragraphs


def test_paragraphs_time_order_on_fixture():
  data = annotations.read_activitynet_captions(FIXTURES / "activitynet_captions.json")
  para = annotations.paragraphs(data)
  assert para.videos == data.videos  # the caption-less v_fixture0003 stays, without a paragraph
  assert [c.caption_id for c in para.captions] == ["v_fixture0001", "v_fixture0002"]
  first = para.captions[0]
  # File order is 30.5, 0 (ends 12.25), 12.25, 0 (ends 10): by (start, end) -> #003 #001 #002 #000.
  assert first.text == "The water is calm. A man stands on a board. He paddles out Then he jumps."
  assert (first.start, first.end) == (0.0, 59.999999999) and first.video_id == "v_fixture0001"
  assert (para.captions[1].text, para.captions[1].end) == ("Someone is cooking.", 20.01)
  didemo = annotations.paragraphs(annotations.read_didemo(FIXTURES / "didemo_data.json"))
  assert didemo.captions[0].text == "a boat passes by the dog jumps into the water."
  assert (didemo.captions[0].start, didemo.captions[0].end) == (0.0, 20.0)


def test_paragraphs_ties_and_untimed_captions():
  C = types.Caption
  data = types.RetrievalData(
      source="hand-made",
      videos=(types.RetrievalVideo("a"), types.RetrievalVideo("b"), types.RetrievalVideo("c")),
      captions=(C("b1", "b", "untimed first"), C("a1", "a", "tie one", 3.0, 4.0), C("b2", "b", "timed", 5.0, 6.0),
                C("a2", "a", "early", 1.0, 9.0), C("a3", "a", "tie two", 3.0, 4.0), C("b3", "b", "untimed last")))
  para = annotations.paragraphs(data)
  assert para.source == "hand-made [paragraphs]" and para.videos == data.videos
  assert para.captions == (
      C("a", "a", "early tie one tie two", 1.0, 9.0),        # exact ties keep file order
      C("b", "b", "timed untimed first untimed last", None, None))  # timed first, then file order
  msrvtt = annotations.read_msrvtt(FIXTURES / "MSRVTT_data.json")
  assert annotations.paragraphs(msrvtt).captions[0] == C(
      "video0", "video0", "a cartoon animals runs through an ice cave in a video game a character is running in the snow")


# ------------------------------------------------------------------------------------------------
# Malformed inputs: one ValueError naming the file, the place and what was expected.

_MSRVTT_JSON = json.loads((FIXTURES / "MSRVTT_data.json").read_text())
_DIDEMO = json.loads((FIXTURES / "didemo_data.json").read_text())
_ANET = json.loads((FIXTURES / "activitynet_captions.json").read_text())


def _edit(obj, fn):
  obj = json.loads(json.dumps(obj))
  fn(obj)
  return json.dumps(obj)


_LSMDC_OK = "clip_a\t00.00.01.000\t00.00.02.000\t00.00.00.500\t00.00.02.500\tSomeone runs.\n"

MALFORMED = [
    # MSR-VTT csv
    ("read_msrvtt", "msrvtt_bad.csv", "key\tvid_key\tvideo_id\tsentence\nret0\tmsr1\tvideo1\ta cat\n",
     "header line: expected the columns key,vid_key,video_id,sentence"),
    ("read_msrvtt", "msrvtt_bad.csv", "key;vid_key;video_id;sentence\r\nret0;msr1;video1\r\n",
     "line 2: expected 4 ';'-delimited fields"),
    ("read_msrvtt", "msrvtt_bad.csv", "key,vid_key,video_id,sentence\nret0,msr1,video1,a cat\nret0,msr2,video2,a dog\n",
     "line 3: caption key 'ret0' appears twice"),
    ("read_msrvtt", "msrvtt_bad.csv", "key,vid_key,video_id,sentence\nret0,msr1,video1,  \n",
     "line 2: 'sentence' must be a non-empty caption"),
    ("read_msrvtt", "msrvtt_bad.csv", "video_id\nvideo1\nvideo1\n", "line 3: video 'video1' is listed twice"),
    # MSR-VTT json
    ("read_msrvtt", "msrvtt_bad.json", json.dumps(_MSRVTT_JSON)[:200], "is not valid JSON"),
    ("read_msrvtt", "msrvtt_bad.json", _edit(_MSRVTT_JSON, lambda d: d.pop("sentences")),
     "top level: missing key 'sentences'"),
    ("read_msrvtt", "msrvtt_bad.json", _edit(_MSRVTT_JSON, lambda d: d["sentences"][3].update(video_id="video9")),
     r"sentences\[3\] \(sen_id 40\): unknown video 'video9'"),
    ("read_msrvtt", "msrvtt_bad.json", _edit(_MSRVTT_JSON, lambda d: d["sentences"][1].update(sen_id=0)),
     "sen_id 0 appears twice"),
    ("read_msrvtt", "msrvtt_bad.json", _edit(_MSRVTT_JSON, lambda d: d["videos"][1].update({"end time": 10.0})),
     r"videos\[1\] \('video1'\): 'start time' and 'end time' must be seconds with 0 <= start <= end"),
    ("read_msrvtt", "msrvtt_bad.json", _edit(_MSRVTT_JSON, lambda d: d["videos"][0].update({"start time": "1:02"})),
     "'start time' must be int or float, got str"),
    ("read_msrvtt", "msrvtt_bad.json", _edit(_MSRVTT_JSON, lambda d: d["videos"][2].update(split="dev")),
     "'split' must be one of"),
    ("read_msrvtt", "msrvtt_bad.json", _edit(_MSRVTT_JSON, lambda d: d["videos"].append(d["videos"][0])),
     r"videos\[3\] \('video0'\): video 'video0' appears twice"),
    # DiDeMo
    ("read_didemo", "didemo_bad.json", json.dumps(_DIDEMO)[:-30], "is not valid JSON"),
    ("read_didemo", "didemo_bad.json", json.dumps({"x": _DIDEMO}), "top level: expected a JSON list of descriptions"),
    ("read_didemo", "didemo_bad.json", _edit(_DIDEMO, lambda d: d[2].update(annotation_id=11)),
     r"description #2 \(annotation_id 11\): annotation_id 11 appears twice \(first at description #0\)"),
    ("read_didemo", "didemo_bad.json", _edit(_DIDEMO, lambda d: d[1].pop("description")),
     "description #1 .*missing key 'description'"),
    ("read_didemo", "didemo_bad.json", _edit(_DIDEMO, lambda d: d[1].update(description=" ")),
     "'description' must be a non-empty caption"),
    ("read_didemo", "didemo_bad.json", _edit(_DIDEMO, lambda d: d[0].update(times=[[2, "3"]])),
     r"'times'\[0\] must be \[start_chunk, end_chunk\] \(two integers\)"),
    ("read_didemo", "didemo_bad.json", _edit(_DIDEMO, lambda d: d[0].update(times=[[2, 3], [-1, 3]])),
     r"'times'\[1\] must satisfy 0 <= start_chunk <= end_chunk"),
    ("read_didemo", "didemo_bad.json", _edit(_DIDEMO, lambda d: d[0].update(times=[[3, 2]])),
     r"'times'\[0\] must satisfy 0 <= start_chunk <= end_chunk < num_segments = 6, got \[3, 2\]"),
    ("read_didemo", "didemo_bad.json", _edit(_DIDEMO, lambda d: d[2].update(times=[[0, 5]])),
     "end_chunk < num_segments = 5"),
    ("read_didemo", "didemo_bad.json", _edit(_DIDEMO, lambda d: d[0].update(times=[])),
     "'times' must list at least one"),
    # ActivityNet Captions
    ("read_activitynet_captions", "anet_bad.json", json.dumps(_ANET)[:50], "is not valid JSON"),
    ("read_activitynet_captions", "anet_bad.json", json.dumps([_ANET]), "top level: expected a JSON object"),
    ("read_activitynet_captions", "anet_bad.json",
     _edit(_ANET, lambda d: d["v_fixture0001"]["timestamps"].__setitem__(2, [40.0, 12.25])),
     r"video 'v_fixture0001' sentence #2: timestamp must satisfy start <= end, got reversed \[40.0, 12.25\]"),
    ("read_activitynet_captions", "anet_bad.json",
     _edit(_ANET, lambda d: d["v_fixture0002"]["timestamps"].__setitem__(0, [-5, -1])),
     r"sentence #0: timestamp \[-5.0, -1.0\] must overlap the video \[0, duration = 20.01\]"),
    ("read_activitynet_captions", "anet_bad.json",
     _edit(_ANET, lambda d: d["v_fixture0002"]["timestamps"].__setitem__(0, [21, 25])),
     "must overlap the video"),
    ("read_activitynet_captions", "anet_bad.json",
     _edit(_ANET, lambda d: d["v_fixture0001"]["timestamps"].__setitem__(1, ["0.0", 12.25])),
     r"sentence #1: timestamp must be \[start, end\] in seconds \(two finite numbers\)"),
    ("read_activitynet_captions", "anet_bad.json", _edit(_ANET, lambda d: d["v_fixture0001"]["sentences"].pop()),
     "'timestamps' and 'sentences' must have the same length, got 4 and 3"),
    ("read_activitynet_captions", "anet_bad.json", _edit(_ANET, lambda d: d["v_fixture0003"].update(duration="8s")),
     "video 'v_fixture0003': 'duration' must be int or float, got str"),
    ("read_activitynet_captions", "anet_bad.json", _edit(_ANET, lambda d: d["v_fixture0003"].update(duration=0)),
     "'duration' must be a positive number of seconds"),
    ("read_activitynet_captions", "anet_bad.json",
     _edit(_ANET, lambda d: d["v_fixture0002"]["sentences"].__setitem__(0, "   ")),
     "sentence #0: sentence must be a non-empty caption"),
    ("read_activitynet_captions", "anet_bad.json", _edit(_ANET, lambda d: d["v_fixture0002"].pop("timestamps")),
     "video 'v_fixture0002': missing key 'timestamps'"),
    # MSVD mapping
    ("read_msvd", "mapping_bad.txt", "-4wsuPCjDBc_5_15 vid1\nabc_1_2 vid2 extra\n",
     r"line 2: expected '<youtube clip name> vid<N>'"),
    ("read_msvd", "mapping_bad.txt", "-4wsuPCjDBc_15_5 vid1\n", "line 1: clip '-4wsuPCjDBc_15_5' must satisfy start < end"),
    ("read_msvd", "mapping_bad.txt", "-4wsuPCjDBc_5_x vid1\n", r"clip name must be '<youtube id>_<start>_<end>'"),
    ("read_msvd", "mapping_bad.txt", "aaa_1_2 vid1\nbbb_1_2 vid1\n", "line 2: clip 'bbb_1_2' / vid1 is mapped twice"),
    ("read_msvd", "mapping_bad.txt", "aaa_1_2 vid1971\n", "clip number must be vid1..vid1970"),
]


@pytest.mark.parametrize("reader,name,content,message", MALFORMED,
                         ids=[f"{i:02d}-{case[1]}" for i, case in enumerate(MALFORMED)])
def test_malformed_inputs(tmp_path, reader, name, content, message):
  path = tmp_path / name
  path.write_text(content)
  with pytest.raises(ValueError, match=f"{re.escape(name)}.*{message}"):
    getattr(annotations, reader)(path)


@pytest.mark.parametrize("content,message", [
    ("-4wsuPCjDBc_5_15 a squirrel\nvid9 a dog runs\n",
     "line 2: unknown video 'vid9': expected a clip name \\(or vid<N>\\)"),
    ("# header\nzzzzzzzzzzz_30_36\n", "line 2: expected '<clip name> <description>', got an empty description"),
])
def test_msvd_malformed_captions(tmp_path, content, message):
  path = tmp_path / "captions_bad.txt"
  path.write_text(content)
  with pytest.raises(ValueError, match=f"captions_bad.txt.*{message}"):
    annotations.read_msvd(FIXTURES / "msvd_youtube_mapping.txt", path)


@pytest.mark.parametrize("content,message", [
    (_LSMDC_OK.replace("\tSomeone", "Someone"), "line 1: expected 6 tab-separated fields"),
    (_LSMDC_OK.replace("\t", ","), "line 1: expected 6 tab-separated fields"),  # wrong delimiter
    (_LSMDC_OK.replace("00.00.02.000", "00.00.xx.000"),
     "'end_aligned' must be a timestamp hh.mm.ss.mmm \\(e.g. 00.02.17.945\\), got '00.00.xx.000'"),
    (_LSMDC_OK.replace("00.00.01.000\t00.00.02.000", "00.00.03.000\t00.00.02.000"),
     "the aligned times must satisfy start <= end"),
    (_LSMDC_OK.replace("Someone runs.", " "), "'sentence' must be a non-empty caption"),
    (_LSMDC_OK + _LSMDC_OK.replace("00.00.02.500", "00.00.03.500"),
     "line 2: clip 'clip_a' is extracted from .* with other times at line 1"),
    ("\n\n", "expected at least one annotation line"),
])
def test_lsmdc_malformed(tmp_path, content, message):
  path = tmp_path / "lsmdc_bad.csv"
  path.write_text(content)
  with pytest.raises(ValueError, match=f"lsmdc_bad.csv.*{message}"):
    annotations.read_lsmdc(path)


@pytest.mark.parametrize("content,message", [
    ("video0\nvideo9\n", "lsts_bad.txt: video list: 1 listed video ids are not videos of"),
    ("video0\nvideo0\n", "lsts_bad.txt: line 2: video id 'video0' is listed twice"),
    ("video0,video1\n", "lsts_bad.txt: line 1: expected one video id per line"),
])
def test_msrvtt_bad_video_list(tmp_path, content, message):
  path = tmp_path / "lsts_bad.txt"
  path.write_text(content)
  with pytest.raises(ValueError, match=message):
    annotations.read_msrvtt(FIXTURES / "MSRVTT_data.json", path)


def test_missing_files_are_file_not_found(tmp_path):
  for reader in ("read_msrvtt", "read_didemo", "read_activitynet_captions", "read_msvd", "read_lsmdc"):
    with pytest.raises(FileNotFoundError, match="nope"):
      getattr(annotations, reader)(tmp_path / "nope.json")
  with pytest.raises(FileNotFoundError, match="nope.csv"):
    annotations.read_msrvtt(tmp_path / "nope.csv")


def test_msvd_refuses_the_mapping_as_its_captions(tmp_path):
  """`read_msvd(map_file, map_file)` used to read every video's caption as its own vid<N> id."""
  mapping = FIXTURES / "msvd_youtube_mapping.txt"
  with pytest.raises(ValueError, match=r"msvd_youtube_mapping.txt: file: the caption file is the clip mapping"):
    annotations.read_msvd(mapping, mapping)
  copy = tmp_path / "captions.txt"
  copy.write_text(mapping.read_text())  # a copy under another name: every "caption" is its clip's vid<N>
  with pytest.raises(ValueError, match=r"captions.txt: file: every line is '<clip name> vid<N>', the clip mapping"):
    annotations.read_msvd(mapping, copy)


def test_activitynet_reader_on_a_youcook2_file_says_what_it_is():
  """It used to fail with a 12,085-character message listing every key of the YouCook2 file's "database"."""
  yc2 = SHARED / "youcook2" / "youcookii_annotations_trainval.json"
  with pytest.raises(ValueError) as err:
    annotations.read_activitynet_captions(yc2)
  text = str(err.value)
  assert len(text) < 500, len(text)
  assert "top level: expected a JSON object mapping video ids to" in text
  assert "found a JSON object of ['database']; this looks like a YouCook2 release file" in text


# ------------------------------------------------------------------------------------------------
# Issue 62: a file is read whole or refused; ids and captions are clean; cross-fields, times and durations are
# checked; a file without records, or of another dataset's format, is one error; a split asked for that a file
# does not hold is named.

_CSV_HEAD = "key,vid_key,video_id,sentence\n"
_CSV_OK = "".join(f"ret{i},msr{i},video{i},caption {i}\n" for i in range(4))


def _write(tmp_path, name, content):
  path = tmp_path / name
  if isinstance(content, bytes):
    path.write_bytes(content)
  else:
    path.write_text(content, encoding="utf-8")
  return path


def test_one_stray_quote_in_a_msrvtt_csv_is_an_error_naming_its_line_not_one_row(tmp_path):
  """The csv module let the quote run to the end of the file: the 4-row file read as one caption, and a run
  reported R@1 100 on 1 video."""
  rows = _CSV_OK.splitlines(keepends=True)
  rows[1] = 'ret1,msr1,video1,"a man opens\n'
  for content, line in ((_CSV_HEAD + "".join(rows), 3),
                        (_CSV_HEAD.replace(",", ";") + "".join(rows).replace(",", ";"), 3),
                        (_CSV_HEAD + _CSV_OK.replace("caption 2", '"caption" 2'), 4),  # text after a closing quote
                        ("video_id\nvideo0\n\"video1\nvideo2\n", 3)):                # the training id list
    path = _write(tmp_path, "MSRVTT_JSFUSION_test.csv", content)
    with pytest.raises(ValueError, match=rf"MSRVTT_JSFUSION_test.csv: line {line}: not one '[,;]'-delimited row "
                                         r"\(.*\): a quoted field must close on its line"):
      annotations.read_msrvtt(path)
  # Quoting as pandas writes it still reads: a delimiter inside a quoted field, a doubled quote.
  path = _write(tmp_path, "ok.csv", _CSV_HEAD + 'ret0,msr0,video0,"a man, a dog and a ""ball"""\n')
  assert annotations.read_msrvtt(path).captions[0].text == 'a man, a dog and a "ball"'


def test_a_file_is_read_whole_bom_blank_lines_and_line_separators_inside_a_caption(tmp_path):
  plain = annotations.read_msrvtt(_write(tmp_path, "a.csv", _CSV_HEAD + _CSV_OK))
  rows = _CSV_OK.splitlines(keepends=True)
  odd = annotations.read_msrvtt(_write(tmp_path, "b.csv", b"\xef\xbb\xbf" + (_CSV_HEAD + rows[0] + rows[1] + "\n  \n"
                                                                          + rows[2] + rows[3]).encode()))
  assert odd.captions == plain.captions and odd.videos == plain.videos
  with pytest.raises(ValueError, match="b.csv: line 6: expected 4 ','-delimited fields"):  # numbered as an editor does
    annotations.read_msrvtt(_write(tmp_path, "b.csv", _CSV_HEAD + rows[0] + "\n\n" + rows[1] + "ret9,msr9\n"))
  # A form feed or U+2028 inside an LSMDC sentence is text, not a line break (the line used to split in two).
  line = _LSMDC_OK.replace("Someone runs.", "Someone\u2028runs\x0cfast.")
  data = annotations.read_lsmdc(_write(tmp_path, "lsmdc.csv", line + _LSMDC_OK.replace("clip_a", "clip_b")))
  assert [c.text for c in data.captions] == ["Someone\u2028runs\x0cfast.", "Someone runs."]


def _didemo(**over):
  entry = {"annotation_id": 1, "video": "a.mp4", "description": "a dog runs", "times": [[0, 1]], "num_segments": 6}
  entry.update(over)
  return json.dumps([{k: v for k, v in entry.items() if v is not None}])


def _anet(video="v_a", duration=10.0, sentence="a dog runs", times=(0.0, 5.0)):
  return json.dumps({video: {"duration": duration, "timestamps": [list(times)], "sentences": [sentence]}})


def _msrvtt_json(video_id="video0", caption="a dog runs", sen_id=0, end=10.0):
  return json.dumps({"videos": [{"video_id": video_id, "split": "train", "start time": 0.0, "end time": end}],
                     "sentences": [{"caption": caption, "video_id": video_id, "sen_id": sen_id}]})


_MAPPING = "-4wsuPCjDBc_5_15 vid1\n"

ISSUE62 = [
    # Empty, whitespace-only or NUL-bearing ids and captions.
    ("read_msrvtt", "a.csv", _CSV_HEAD + "ret0,msr0,video0,a \x00dog\n", r"line 2: 'sentence' holds a NUL character"),
    ("read_msrvtt", "a.csv", _CSV_HEAD + "ret\x000,msr0,video0,a dog\n", r"line 2: 'key' must be a caption id without "
     r"control characters, got 'ret\\x000' \(holds '\\x00'"),
    ("read_msrvtt", "a.csv", _CSV_HEAD + "ret0,msr0,vid\x00eo0,a dog\n", "line 2: 'video_id' must be a video id without"),
    ("read_msrvtt", "a.csv", _CSV_HEAD + "ret0, ,video0,a dog\n", "line 2: 'vid_key' must be a non-empty video key"),
    ("read_msrvtt", "a.csv", "video_id\nvideo0\nvideo\x001\n", "line 3: 'video_id' must be a video id without"),
    ("read_msrvtt", "a.json", _msrvtt_json(video_id="video\x000"), r"videos\[0\]: 'video_id' must be a video id without"),
    ("read_msrvtt", "a.json", _msrvtt_json(caption="a \x00dog"), r"sentences\[0\] \(sen_id 0\): 'caption' holds a NUL"),
    ("read_msrvtt", "a.json", _msrvtt_json(sen_id=" "), r"sentences\[0\]: 'sen_id' must be a non-empty caption id"),
    ("read_didemo", "d.json", _didemo(annotation_id=" "), "description #0: 'annotation_id' must be a non-empty"),
    ("read_didemo", "d.json", _didemo(video="a\x00.mp4"), "'video' must be a video name without control characters"),
    ("read_didemo", "d.json", _didemo(description="a \x00dog"), "'description' holds a NUL character"),
    ("read_activitynet_captions", "n.json", _anet(video=" "), "video ' ': the video id must be a non-empty video id"),
    ("read_activitynet_captions", "n.json", _anet(video="v_\x00"), "the video id must be a video id without control"),
    ("read_activitynet_captions", "n.json", _anet(sentence="a\x00"), "sentence #0: sentence holds a NUL character"),
    ("read_msvd", "m.txt", "ab\x00c_1_2 vid1\n", "line 1: the clip name must be a clip name without control"),
    ("read_lsmdc", "l.csv", _LSMDC_OK.replace("clip_a", "clip\x00a"), "line 1: 'clip_id' must be a clip name without"),
    ("read_lsmdc", "l.csv", _LSMDC_OK.replace("runs", "r\x00uns"), "line 1: 'sentence' holds a NUL character"),
    # Cross-fields.
    ("read_msrvtt", "a.csv", _CSV_HEAD + "ret0,msr7,video8,a dog\n",
     r"line 2: 'vid_key' 'msr7' does not name the video 'video8': expected 'msr8'"),
    ("read_msrvtt", "a.csv", _CSV_HEAD + "ret0,k1,clip_a,a dog\nret1,k2,clip_a,a cat\n",
     r"line 3: 'clip_a' goes with 'k2' here but with 'k1' at line 2: a video has one vid_key"),
    ("read_didemo", "d.json", _didemo(times=[[0, 6]], num_segments=None),
     r"'times'\[0\] must satisfy 0 <= start_chunk <= end_chunk < num_segments = 6 \(the default\), got \[0, 6\]"),
    ("read_didemo", "d.json", _didemo(times=[[0, 8]], num_segments=9), "'num_segments' must be an integer in 1..6"),
    # Absurd times and durations.
    ("read_msvd", "m.txt", "-4wsuPCjDBc_5_5 vid1\n", "line 1: clip '-4wsuPCjDBc_5_5' must satisfy start < end"),
    ("read_msvd", "m.txt", "-4wsuPCjDBc_0_999999 vid1\n", "ends past 86400 s"),
    ("read_activitynet_captions", "n.json", _anet(duration=1e9, times=(0.0, 1e9 - 1)),
     "'duration' must be a positive number of seconds, at most 86400"),
    ("read_msrvtt", "a.json", _msrvtt_json(end=1e7), r"videos\[0\] \('video0'\): 'end time' must be seconds in "
     r"\[0, 86400\]"),
    ("read_lsmdc", "l.csv", _LSMDC_OK.replace("00.00.02.000", "99.00.02.000"), "'end_aligned' .*must be seconds in"),
    # MSVD: one clip under two names, two clips under one number.
    ("read_msvd", "m.txt", _MAPPING + "-4wsuPCjDBc_05_15 vid2\n", "line 2: .*must be written without leading zeros"),
    ("read_msvd", "m.txt", _MAPPING + "zzzzzzzzzzz_30_36 vid01\n", "line 2: .*must be written without leading zeros"),
    # No records.
    ("read_didemo", "d.json", "[]", "top level: expected at least one description"),
    ("read_activitynet_captions", "n.json", "{}", "top level: expected at least one video"),
    ("read_msrvtt", "a.json", json.dumps({"videos": [], "sentences": []}), "expected at least one video and one "
     "sentence"),
    # Trailing garbage after the JSON (json's own check: a regression guard).
    ("read_didemo", "d.json", _didemo() + "\n]", r"is not valid JSON: Extra data: line 2"),
    # Another dataset's file.
    ("read_lsmdc", "l.csv", _CSV_HEAD + _CSV_OK, "file: expected an LSMDC annotation file .*; this looks like an "
     "MSR-VTT JSFusion csv"),
    ("read_msrvtt", "a.csv", _LSMDC_OK, "file: expected an MSR-VTT csv .*; this looks like an LSMDC annotation file"),
    ("read_msrvtt", "a.json", _didemo(), "top level: expected an MSR-VTT MSRVTT_data.json .*this looks like a DiDeMo"),
    ("read_didemo", "d.json", json.dumps([{"video": "a.mp4", "caption": "x"}]), "this looks like a GRDR release"),
    ("read_didemo", "d.json", _anet(), "top level: expected a DiDeMo file.*this looks like an ActivityNet Captions"),
    ("read_msvd", "m.txt", "# header\n-4wsuPCjDBc_5_15 a squirrel eats\n", "file: expected an MSVD youtube_mapping.txt"
     r".*; this looks like an MSVD caption file .*read_msvd's second file"),
    ("read_lsmdc", "l.csv", _didemo(), "this looks like a DiDeMo file"),
]


@pytest.mark.parametrize("reader,name,content,message", ISSUE62, ids=[f"{i:02d}-{c[0][5:]}" for i, c in enumerate(ISSUE62)])
def test_issue62_malformed_inputs_are_one_error(tmp_path, reader, name, content, message):
  path = _write(tmp_path, name, content)
  with pytest.raises(ValueError, match=f"{re.escape(name)}[: ].*{message}") as err:
    getattr(annotations, reader)(path)
  assert "\n" not in str(err.value)


@pytest.mark.parametrize("content,message", [
    ("# header\n\n# only comments\n", "file: expected '<clip name> <description>' lines, the file has none"),
    ("-4wsuPCjDBc_5_15 a \x00squirrel\n", "line 1: the description of '-4wsuPCjDBc_5_15' holds a NUL character"),
    ("-4wsuPCjDBc_5_15 \t \n", "line 1: expected '<clip name> <description>', got an empty description"),
])
def test_msvd_captions_no_records_and_nul(tmp_path, content, message):
  path = _write(tmp_path, "captions.txt", content)
  with pytest.raises(ValueError, match=f"captions.txt: {message}"):
    annotations.read_msvd(FIXTURES / "msvd_youtube_mapping.txt", path)


def test_msrvtt_json_under_another_name_reads_as_the_json(tmp_path):
  path = _write(tmp_path, "annotations.csv", _msrvtt_json())
  assert [(c.caption_id, c.text) for c in annotations.read_msrvtt(path).captions] == [("0", "a dog runs")]


def test_msrvtt_video_list_of_another_format_is_named(tmp_path):
  with pytest.raises(ValueError, match="list.csv: file: expected an MSR-VTT video id list .*this looks like an "
                                       "MSR-VTT JSFusion csv"):
    annotations.read_msrvtt(FIXTURES / "MSRVTT_data.json", _write(tmp_path, "list.csv", _CSV_HEAD + _CSV_OK))


def test_a_split_asked_for_that_the_file_does_not_hold_is_named(tmp_path):
  """DiDeMo's val_data.json given as the training file used to be read whole as training data (its split is in
  its name only)."""
  from vidjax.data.retrieval import build_benchmark
  val = _write(tmp_path, "val_data.json", (DIDEMO / "val_data.json").read_text())
  data = annotations.read_didemo(val)
  assert {v.split for v in data.videos} == {"val"}
  with pytest.raises(ValueError, match=r"val_data.json: no videos in split 'train' .*the file holds val \(1,094 "
                                       r"videos\), not the train split asked for"):
    build_benchmark(data, protocol="paragraphs", split="train")
  assert len(build_benchmark(data, protocol="paragraphs", split="val").corpus) == 1094
  # A file under another name does not say which split it holds: it is taken as the split asked for.
  mine = _write(tmp_path, "my_didemo.json", _didemo())
  assert build_benchmark(annotations.read_didemo(mine), split="train").corpus == ("a.mp4",)
  # The other readers whose release names the split in the file name.
  anet = _write(tmp_path, "val_1.json", _anet())
  assert annotations.read_activitynet_captions(anet).videos[0].split == "val"
  lsmdc = _write(tmp_path, "LSMDC16_annos_training.csv", _LSMDC_OK)
  assert annotations.read_lsmdc(lsmdc).videos[0].split == "train"
  with pytest.raises(ValueError, match="LSMDC16_annos_training.csv: no videos in split 'test'.*holds train"):
    build_benchmark(annotations.read_lsmdc(lsmdc), split="test")
