"""GenState triplet benchmarks (vidjax/data/genstate.py): reader, §5.1 pools, the moving-object world."""
import json

import numpy as np
import pytest

from vidjax import metrics
from vidjax.data import genstate
from vidjax.worlds import moving_objects


def _entry(i, subset="Home", **kw):
  e = {"id": f"q{i}", "query": f"query {i}", "main": f"m{i}", "temporal_negative": f"t{i}",
       "semantic_negative": f"s{i}", "subset": subset}
  e.update(kw)
  return e


def test_pools_follow_section_5_1(tmp_path):
  entries = [_entry(0), _entry(1), _entry(2, subset="Toy", distractors=["x9"]), _entry(3)]
  path = tmp_path / "meta.json"
  path.write_text(json.dumps(entries))
  triplets = genstate.read_triplets(path)
  p = genstate.pools(triplets)
  assert p[0][:3] == ["m0", "t0", "s0"] and sorted(p[0][3:]) == p[0][3:]
  assert set(p[0][3:]) == {"m1", "t1", "s1", "m3", "t3", "s3"}  # the other Home queries' videos only
  assert p[2] == ["m2", "t2", "s2", "x9"]                         # Toy has one query: only its own extra
  assert all(len(set(pool)) == len(pool) for pool in p)
  assert genstate.subsets(triplets) == {"Home": [0, 1, 3], "Toy": [2]}


@pytest.mark.parametrize("entries, message", [
    ({"id": "q"}, "expected a JSON list"),
    ([["q"]], "expected a JSON object"),
    ([{k: v for k, v in _entry(0).items() if k != "temporal_negative"}], "missing key 'temporal_negative'"),
    ([_entry(0, query="  ")], "'query' must be a non-empty string"),
    ([_entry(0, main=3)], "'main' must be a non-empty string"),
    ([_entry(0), _entry(0)], "duplicate query id"),
    ([_entry(0, semantic_negative="m0")], "three different videos"),
    ([_entry(0, distractors="m5")], "'distractors' must be a list"),
    ([], "no queries"),
])
def test_malformed_metadata_gets_one_clear_error(tmp_path, entries, message):
  path = tmp_path / "bad.json"
  path.write_text(json.dumps(entries))
  with pytest.raises(ValueError, match=message) as info:
    genstate.read_triplets(path)
  assert "bad.json" in str(info.value)


def test_truncated_metadata_file_is_a_clear_error(tmp_path):
  path = tmp_path / "cut.json"
  path.write_text(json.dumps([_entry(0)])[:-5])
  with pytest.raises(ValueError, match="cut.json"):
    genstate.read_triplets(path)


def test_moving_object_world_triplets_and_an_order_blind_scorer():
  world = moving_objects.make_moving_object_world(
      moving_objects.MovingObjectWorldConfig(num_train_groups=5, num_eval_groups=100), seed=0)
  triplets = moving_objects.genstate_triplets(world)
  assert len(triplets) == 100 and {t.subset for t in triplets} == {"2 objects", "3 objects"}
  row = {v: i for i, v in enumerate(world.data.video_ids())}
  query = np.stack([world.text[row[t.main]] for t in triplets])  # caption i describes video i
  three = np.stack([world.clip[[row[v] for v in t.videos]] for t in triplets])
  m = metrics.triplet_metrics(np.einsum("qd,qcd->qc", query, three))
  # Stage 1 is blind to where objects go: the end-state variant (same objects) is near chance against
  # the main clip, while the substituted object is usually rejected.
  assert abs(m["acc_temp"] - 50) <= 15 and m["acc_sem"] >= 80, m


def test_prompt_texts_key_the_query_and_the_negatives_prompts():
  triplets = genstate.parse_triplets([_entry(0, temporal_prompt="t prompt", semantic_prompt="s prompt"), _entry(1)])
  assert genstate.prompt_texts(triplets) == {"q0": "query 0", "q0/temporal_prompt": "t prompt",
                                             "q0/semantic_prompt": "s prompt", "q1": "query 1"}
  assert genstate.prompt_texts(triplets, negatives=False) == {"q0": "query 0", "q1": "query 1"}
  assert genstate.video_prompts(triplets) == {"m0": ("q0", "query 0"), "t0": ("q0/temporal_prompt", "t prompt"),
                                              "s0": ("q0/semantic_prompt", "s prompt"), "m1": ("q1", "query 1")}
  assert list(genstate.video_prompts(triplets, {"q0", "q1"})) == ["m0", "m1"]  # only the texts a store holds


@pytest.mark.parametrize("entries, message", [
    # Typos of the optional keys used to be ignored: the distractors or prompts they hold silently dropped.
    ([_entry(0, distractor=["x9"])], r"entry 0: unknown key 'distractor' \(did you mean 'distractors'\?\)"),
    ([_entry(0, temporal_promt="t", semantic_prompt="s")], r"unknown key 'temporal_promt' \(did you mean "
     r"'temporal_prompt'\?\)"),
    ([_entry(0, notes="x")], r"unknown key 'notes'; the keys are \['id', 'query'"),
    # Empty, whitespace-only or NUL-bearing ids and texts.
    ([_entry(0, main="m\x000")], "'main' must be a video id without control characters"),
    ([_entry(0, query="the bear \x00moves")], "'query' holds a NUL character"),
    ([_entry(0, distractors=[" "])], "a distractor must be a non-empty video id"),
    ([_entry(0, subset="Home\x00")], "'subset' must be a subset name without control characters"),
    # Query ids and prompt ids live apart: "q0/temporal_prompt" used to overwrite q0's temporal prompt in the store.
    ([_entry(0, temporal_prompt="t", semantic_prompt="s"), _entry(1, id="q0/temporal_prompt")],
     r"entry 1 \(id 'q0/temporal_prompt'\): a query id holds no '/'"),
    # Another dataset's file.
    ([{"annotation_id": 1, "video": "a.mp4", "description": "x", "times": [[0, 0]]}], "this looks like a DiDeMo file"),
])
def test_issue62_metadata_faults(tmp_path, entries, message):
  path = tmp_path / "bad.json"
  path.write_text(json.dumps(entries))
  with pytest.raises(ValueError, match=f"bad.json: .*{message}"):
    genstate.read_triplets(path)


def test_a_query_id_equal_to_a_prompt_id_is_refused_wherever_triplets_come_from():
  triplets = [genstate.Triplet("q0", "a", "m0", "t0", "s0", "Home", negative_prompts=("t", "s")),
              genstate.Triplet("q0/semantic_prompt", "b", "m1", "t1", "s1", "Home")]
  with pytest.raises(ValueError, match="text id 'q0/semantic_prompt' names two texts"):
    genstate.prompt_texts(triplets)
