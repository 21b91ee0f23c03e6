"""How much of a video's identity a CVR store's features carry, per kind (README, "Real data": why CAST's line is
not reached on the rendered corpus).

For each step clip, the nearest clip (cosine, features centred) among the clips of the OTHER steps of the same
task's videos: is it from the same video? Chance is 1 / (videos per task). CAST's context (the other clips of the
query's video) can only tell an identity negative (the same step in another video of the task) from the target
when the clip embeddings carry this.

    python bench/identity_probe.py --dataset coin --store STORE/features \
        --annotations coin_train_70.json,coin_test_30.json
"""
from __future__ import annotations

import argparse

import numpy as np

from vidjax.data.annotations import read_annotations
from vidjax.data.features import FeatureStore


def same_video_top1(x: np.ndarray, video: np.ndarray, step: np.ndarray, task: np.ndarray) -> tuple[float, float]:
  """(same-video top-1 %, chance %) of rows `x` [N, D] with their video, step index and task (each [N])."""
  x = x - x.mean(0)
  x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
  hits, chance = [], []
  for t in np.unique(task):
    rows = np.flatnonzero(task == t)
    sims = x[rows] @ x[rows].T
    for i, row in enumerate(rows):
      other = np.flatnonzero(step[rows] != step[row])
      if len(other):
        hits.append(video[rows[other[np.argmax(sims[i, other])]]] == video[row])
        chance.append(1 / len(np.unique(video[rows])))
  return 100 * float(np.mean(hits)), 100 * float(np.mean(chance))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--dataset", required=True, choices=("youcook2", "coin", "crosstask"))
  parser.add_argument("--store", required=True, help="a prepared store's features folder")
  parser.add_argument("--annotations", required=True, help="the release file(s), comma-separated")
  parser.add_argument("--kinds", default="clip,clip_mean,tokens")
  args = parser.parse_args()
  clips = {c.clip_id: c for v in read_annotations(args.dataset, args.annotations) for c in v.clips}
  store = FeatureStore(args.store)
  print(f"SYNTHETIC if the store is the rendered corpus's. {args.store}")
  print("| kind | same-video top-1 (%) | chance (%) | clips |\n|---|---:|---:|---:|")
  for kind in args.kinds.split(","):
    ids = [i for i in store.ids(kind) if i in clips]
    x = np.stack([np.asarray(store.get_one(kind, i), np.float32) for i in ids])
    x = x.reshape(len(ids), -1, x.shape[-1]).mean(1)  # tokens [T, N, D]: their mean
    hit, chance = same_video_top1(x, np.array([clips[i].video_id for i in ids]),
                                  np.array([clips[i].index for i in ids]), np.array([clips[i].task for i in ids]))
    print(f"| {kind} | {hit:.1f} | {chance:.1f} | {len(ids)} |")


if __name__ == "__main__":
  main()
