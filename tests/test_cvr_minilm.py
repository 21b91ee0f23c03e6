"""YouCook2 identity negatives mined with the REAL all-MiniLM-L6-v2 weights (CAST App. B), end to end.

The builder's rules are tested with a cheap fake embedding in test_cvr.py; here the experiment's wiring
(`vidjax.methods.cast._embed_fn` -> Flax BERT on the shipped safetensors) is exercised on a slice
of the real validation split, and the mined negatives are checked against an independent NumPy
ranking of the same embeddings.
"""
from pathlib import Path

import ml_collections
import numpy as np
import pytest

from vidjax.data import cvr
from vidjax.data.annotations import read_youcook2
from vidjax.experiments import cast
from vidjax.methods import cast as cast_method

YC2 = Path(__file__).resolve().parents[2] / "shared" / "data" / "youcook2" / "youcookii_annotations_trainval.json"


@pytest.fixture(scope="module")
def mined():
  videos = read_youcook2(YC2, split="val")[:30]
  config = ml_collections.ConfigDict({"data": {"identity_rule": "caption_similarity", "minilm_dir": ""}})
  embed_fn = cast_method._embed_fn(config)
  records, stats = cvr.build_benchmark(videos, identity_rule="caption_similarity", embed_fn=embed_fn, seed=0)
  clips = [c for v in videos for c in v.clips]
  return videos, clips, records, stats, embed_fn([c.text for c in clips])


def test_real_minilm_pools_keep_the_invariants(mined):
  videos, clips, records, stats, _ = mined
  video_of = {c.clip_id: c.video_id for c in clips}
  assert len(records) == sum(len(v.clips) - 1 for v in videos) == stats["queries"]
  for r in records:
    assert len(r["candidates"]) == 10 == len(set(r["candidates"])) and r["candidates"].count(r["target"]) == 1
    for c, kind in r["negative_types"].items():
      assert (video_of[c] == r["video_id"]) == (kind == "state"), (r["query_id"], c, kind)


def test_identity_negatives_are_the_top_minilm_neighbours(mined):
  _, clips, records, _, emb = mined
  assert emb.shape == (len(clips), 384)
  np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
  index = {c.clip_id: i for i, c in enumerate(clips)}
  sim = emb.astype(np.float64) @ emb.astype(np.float64).T
  for r in records:
    q = index[r["target"]]
    others = [i for i, c in enumerate(clips) if c.video_id != r["video_id"]]
    value = {i: round(sim[q, i], 5) for i in others}
    identity = {index[c] for c, kind in r["negative_types"].items() if kind == "identity"}
    # A top-|identity| set of the ranking; equal similarities may be taken in any order (the builder's seeded one).
    ranked = sorted(value.values(), reverse=True)
    assert sorted((value[i] for i in identity), reverse=True) == ranked[:len(identity)], r["query_id"]
    assert len(identity) >= 3  # more when a short state pool was backfilled


def test_the_youcook2_world_mined_by_the_papers_rule_gives_same_step_identity_negatives(tmp_path):
  """The procedural world's YouCook2 files carry no step ids; the world runs YouCook2's rule (caption similarity by
  the real MiniLM), and its captions name task and step, so every identity negative is the target's step of the same
  task in another video (what the task + step rule gives on COIN), never another step that the text alone rejects."""
  from vidjax.data.annotations import read_youcook2 as read  # pylint: disable=g-import-not-at-top
  from vidjax.worlds import procedural  # pylint: disable=g-import-not-at-top
  assert procedural.IDENTITY_RULES["youcook2"] == "caption_similarity"
  world = procedural.make_procedural_world(procedural.world_config_from(
      {"num_train_videos": 4, "num_eval_videos": 80, "num_tasks": 2}, "history"), seed=0)
  path = procedural.write_release(world, tmp_path, "youcook2", train_split="train", eval_split="val")
  videos = read(path, split="val")
  truth = {c.clip_id: (c.task, c.step) for v in world.eval_videos for c in v.clips}
  embed_fn = cast_method._embed_fn(  # the experiment's own wiring, as above
      ml_collections.ConfigDict({"data": {"identity_rule": "caption_similarity", "minilm_dir": ""}}))
  records, _ = cvr.build_benchmark(videos, identity_rule="caption_similarity", embed_fn=embed_fn, seed=0)
  identity = [(r["target"], c) for r in records for c, kind in r["negative_types"].items() if kind == "identity"]
  assert len(identity) >= 3 * len(records)
  assert all(truth[c] == truth[t] for t, c in identity), [(t, c) for t, c in identity if truth[c] != truth[t]][:5]
