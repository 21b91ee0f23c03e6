"""End to end on a tiny config: real mp4 segments -> VideoPrism feature store -> CAST trains on them.

Sixteen "videos" in YouCook2's annotation format all point at the real demo clip
(../shared/data/videoprism_assets/water_bottle_drumming.mp4), each annotated with four segments and
captions; a tiny random LvT model extracts clip and caption embeddings into a store, and the CAST
experiment builds its benchmark from the same annotation file and trains on the store for a few steps.
"""
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from vidjax.data.features import FeatureStore
from vidjax.experiments import cast as cast_experiment
from vidjax.methods import cast as cast_method
from vidjax.experiments import extract as extract_experiment
from vidjax.experiments.common import load_config

ROOT = Path(__file__).resolve().parents[1]
MP4 = ROOT.parent / "shared" / "data" / "videoprism_assets" / "water_bottle_drumming.mp4"
STEPS = ["pick up the bottle", "tap the bottle with a stick", "drum a fast rhythm", "put the bottle down"]




@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("e2e")
  videos = tmp / "videos"
  videos.mkdir()
  database = {}
  for v in range(16):
    vid = f"drum{v:02d}"
    os.symlink(MP4, videos / f"{vid}.mp4")
    database[vid] = {
        "duration": 8.3, "subset": "training" if v < 12 else "validation", "recipe_type": str(100 + v % 3),
        "video_url": "", "annotations": [{"id": i, "segment": [2 * i, 2 * i + 2], "sentence": s}
                                         for i, s in enumerate(STEPS)]}
  annotations = tmp / "annotations.json"
  annotations.write_text(json.dumps({"database": database}))
  config = load_config(ROOT / "configs/extract_videoprism.py:smoke")
  config.data.videos = str(videos)
  config.data.annotations = str(annotations)
  config.data.format = "youcook2"
  config.store = str(tmp / "store")
  config.progress = False
  results = extract_experiment.run(config, tmp / "extract")
  return tmp, annotations, results


def test_store_holds_clip_and_caption_embeddings(extracted):
  tmp, _, results = extracted
  assert results["metrics"]["extract"]["clips"] == 64
  store = FeatureStore(tmp / "store")
  assert len(store.ids("clip")) == 64 and len(store.ids("text")) == 64
  clip = store.get("clip", ["drum00#001"])
  text = store.get("text", ["drum00#001"])
  assert clip.shape == text.shape and math.isclose(float(np.linalg.norm(clip)), 1.0, rel_tol=1e-4)
  # Different segments of the clip have different embeddings; the same segment of two "videos" (the
  # same file) has the same one.
  np.testing.assert_allclose(store.get("clip", ["drum00#002"]), store.get("clip", ["drum05#002"]), atol=1e-6)
  assert not np.allclose(store.get("clip", ["drum00#000"]), store.get("clip", ["drum00#003"]))


def test_cast_trains_on_extracted_features(extracted):
  tmp, annotations, _ = extracted
  config = load_config(ROOT / "configs/cast_youcook2.py:smoke")
  config.data.annotations = str(annotations)
  config.data.features = str(tmp / "store")
  config.data.heldout_fraction = 0.34  # 4 of 12 training videos: enough for 1-vs-9 pools
  config.train.batch_size = 8
  config.train.epochs = 3
  config.eval.chunk = 8
  config.sweep.context_lengths = (2,)
  results = cast_experiment.run(config, tmp / "cast")
  assert results["synthetic"] is False  # real video features...
  assert results["features"]["random_init"] is True  # ...of a random-weight backbone, and results say so
  assert results["dataset"] == "youcook2"
  assert set(results["metrics"]) == set(cast_method.METHODS)
  log = [json.loads(line) for line in (tmp / "cast" / "train" / "cast" / "metrics.jsonl").read_text().splitlines()]
  assert log and all(math.isfinite(r["train/loss"]) for r in log)
