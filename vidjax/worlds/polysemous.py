"""The polysemous world: GRDR's embedded default (SYNTHETIC), generated from a seed in seconds.

A video means several things at once (GRDR §3.2: "videos are inherently polysemous"), and each query
asks for one of them. Generative story (../shared/notes/grdr_world.md; all vectors in R^dim,
^ = L2-normalised, noise ~ N(0, I / dim)):

  * a topic hierarchy: `coarse` topics c_a^ with `sub` sub-topics s_ab^ each;
  * video v has 2-4 facets (uniform), each from a random (coarse, sub) topic:
    facet = (w_coarse c_a + w_sub s_ab + w_own o)^ with a video-specific o;
  * its frozen feature is f_v = (mean of its facets + video_noise n)^, the stand-in of a backbone's
    clip embedding (what GRDR's tokenizer reads);
  * a query mentions one facet: q = (facet + query_noise m)^, the stand-in of a text embedding;
  * its `frames` per-frame features (the stand-in of a backbone's frame embeddings, what CLIP4Clip and X-Pool read,
    GRDR's reranker): the video shows its facets one after another, in contiguous segments of equal length (frame t
    of T shows facet k(t) = floor(t n / T); T = 12, X-Pool's and CLIP4Clip's frames, splits evenly into 2, 3 or 4
    segments), and frame_t = (f_v + frame_weight (facet_k(t) - mean of its facets) + frame_noise e_t)^. With the
    segments equal the deviations sum to zero over the frames, so the frames' mean stays at f_v (up to the noise and
    the normalisation: mean pooling recovers the clip feature), while a frame of facet k carries that facet whole
    (frame_weight 1: nothing scaled) and is closer to a query about facet k than the other frames are: what a
    text-conditioned pooling (X-Pool) can use and mean pooling cannot. frame_noise = video_noise (0.3): a frame is
    as noisy as the clip feature. Neither weight was tuned on a retrieval number. The frames come from their own
    random stream (`np.random.default_rng([seed, 1])`, drawn after everything else), so the clip features, queries
    and splits are those of the world without frames, bit for bit, for every seed (the calibration below holds).

Splits: `train_fraction` of the videos are training videos with `train_queries` queries each
(facets drawn uniformly, so the k-means of a video's queries recovers its facets: GRDR's query
intents); the rest are test videos with `test_queries` queries each, never seen in training (the
inductive setting, §4.1). The full-corpus setting searches train + test videos with the test queries.

Calibration (defaults; `python -m vidjax.worlds.polysemous` prints it): exact dense retrieval (cosine
of q with f_v) over the 1,000 test videos has R@1 0.44-0.45 (R@10 0.89-0.91, R@100 ~1.0, seeds
0-2); over the full corpus of 10,000 R@1 0.18 and R@100 0.90-0.92. The note's prototype on the same
world measured that one semantic ID per video recalls the target among 150 candidates for ~0.76 of
the queries and four (one per intent) for ~0.97: the multi-view mechanism GRDR claims.

The world is data (`write_world`, through `vidjax.experiments.common.world_data`): it writes what a user of GRDR
has, and the experiment reads it as it reads a user's files::

    root/<dataset>/...            the release-format caption files of the config's dataset (MSR-VTT:
                                  MSRVTT_data.json with the training split's captions + MSRVTT_JSFUSION_test.csv;
                                  DiDeMo: train_data.json / test_data.json; ActivityNet Captions: train.json /
                                  val_1.json; LSMDC: LSMDC16_annos_training.csv /
                                  LSMDC16_challenge_1000_publictect.csv),
                                  one caption per query, its text "<video> query <j>" (the world's queries are
                                  vectors: the text only names the query)
    root/features/                a feature store (manifest: SYNTHETIC, the world's config and seed): `clip` per
                                  video (f_v), `frames` per video ([T, dim] frame features: the trained dense
                                  rows and their rerank), `text` per caption id (the query vector q: the store's
                                  "text embeddings", read by query_encoder "minilm" / "t5_features", the intents,
                                  the rerank)
    root/world_truth.json         world truth no reader sees (`TRUTH_FILE`): each caption id's sense (the facet
                                  index it mentions, `query_sense`) and each video's facet topics [[coarse, sub]]
                                  (`video_topics`), for diagnostics of the query intents

A test caption's id is the reader's: MSR-VTT's `ret<i>`, LSMDC's / ActivityNet's `<video>#<j>`, DiDeMo's
`annotation_id`; under the paragraph protocol (DiDeMo, ActivityNet) a test query is its video's paragraph, id the
video id, so the world must have one test query per video there.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from vidjax import io
from vidjax.data.annotations import lsmdc
from vidjax.data.features import write_arrays
from vidjax.metrics import rank_of_target
from vidjax.ops import check_positive_fields, l2_normalize

WORLD_NAME = "polysemous"  # the store's `world_name` (results.json's label: "synthetic polysemous world")
TRUTH_FILE = "world_truth.json"
FORMATS = ("msrvtt", "didemo", "activitynet", "lsmdc")


@dataclasses.dataclass(frozen=True)
class PolysemousWorldConfig:
  num_videos: int = 10_000
  dim: int = 128
  coarse: int = 32
  sub: int = 8
  min_facets: int = 2
  max_facets: int = 4
  w_coarse: float = 0.6
  w_sub: float = 0.6
  w_own: float = 0.5
  video_noise: float = 0.3
  query_noise: float = 0.7
  train_fraction: float = 0.9
  train_queries: int = 12
  test_queries: int = 1
  frames: int = 12           # T per video (X-Pool's and CLIP4Clip's 12 frames)
  frame_weight: float = 1.0  # a frame shows its facet's deviation from the video's mean facet, unscaled
  frame_noise: float = 0.3   # = video_noise

  def __post_init__(self):
    check_positive_fields(self, ("num_videos", "dim", "coarse", "sub", "min_facets", "max_facets",
                                 "train_queries", "test_queries", "frames"))
    if self.frame_weight < 0 or self.frame_noise < 0:
      raise ValueError(f"PolysemousWorldConfig: frame_weight ({self.frame_weight}) and frame_noise "
                       f"({self.frame_noise}) must be >= 0")
    if self.max_facets < self.min_facets:
      raise ValueError(f"PolysemousWorldConfig: max_facets ({self.max_facets}) < min_facets ({self.min_facets})")
    if not 0.0 < self.train_fraction < 1.0:
      raise ValueError(f"PolysemousWorldConfig.train_fraction must be in (0, 1), got {self.train_fraction!r}")
    n_test = self.num_videos - int(round(self.train_fraction * self.num_videos))
    if n_test < 1 or n_test == self.num_videos:
      raise ValueError(f"PolysemousWorldConfig: {self.num_videos} videos at train_fraction {self.train_fraction} "
                       "leave an empty split")


@dataclasses.dataclass
class PolysemousWorld:
  """SYNTHETIC. Videos `v00000..`, features float32 [V, dim], frames float32 [V, T, dim] (`frame_facet` int [V, T]:
  the facet each frame shows); queries float32 [Q, dim] with the index of their video and of the facet they mention;
  `train` / `test` are sorted video indices."""
  config: PolysemousWorldConfig
  seed: int
  video_ids: np.ndarray
  features: np.ndarray
  facets: list  # per video: float32 [n_facets, dim]
  facet_topics: list  # per video: int [n_facets, 2] (coarse, sub)
  train: np.ndarray
  test: np.ndarray
  train_queries: np.ndarray
  train_query_video: np.ndarray
  train_query_facet: np.ndarray
  test_queries: np.ndarray
  test_query_video: np.ndarray
  test_query_facet: np.ndarray
  frames: np.ndarray
  frame_facet: np.ndarray
  synthetic: bool = True


def make_polysemous_world(config: PolysemousWorldConfig | None = None, seed: int = 0) -> PolysemousWorld:
  cfg = config or PolysemousWorldConfig()
  rng = np.random.default_rng(seed)
  d = cfg.dim
  noise = lambda *shape: rng.standard_normal(shape) / np.sqrt(d)  # noqa: E731
  coarse = l2_normalize(rng.standard_normal((cfg.coarse, d)))
  sub = l2_normalize(rng.standard_normal((cfg.coarse, cfg.sub, d)))
  facets, topics, features = [], [], np.empty((cfg.num_videos, d), np.float32)
  for v in range(cfg.num_videos):
    n = int(rng.integers(cfg.min_facets, cfg.max_facets + 1))
    a, b = rng.integers(0, cfg.coarse, n), rng.integers(0, cfg.sub, n)
    own = l2_normalize(rng.standard_normal((n, d)))
    f = l2_normalize(cfg.w_coarse * coarse[a] + cfg.w_sub * sub[a, b] + cfg.w_own * own)
    facets.append(f.astype(np.float32))
    topics.append(np.stack([a, b], 1))
    features[v] = l2_normalize(f.mean(0) + cfg.video_noise * noise(d))
  order = rng.permutation(cfg.num_videos)
  n_train = int(round(cfg.train_fraction * cfg.num_videos))
  train, test = np.sort(order[:n_train]), np.sort(order[n_train:])

  def queries(videos, per_video):
    vid = np.repeat(videos, per_video)
    facet = np.array([rng.integers(0, len(facets[v])) for v in vid], np.int64)
    q = np.stack([facets[v][k] for v, k in zip(vid, facet)]) + cfg.query_noise * noise(len(vid), d)
    return l2_normalize(q).astype(np.float32), vid, facet

  tq, tv, tf = queries(train, cfg.train_queries)
  eq, ev, ef = queries(test, cfg.test_queries)
  ids = np.char.add("v", np.char.zfill(np.arange(cfg.num_videos).astype(str), 5))
  frames, frame_facet = make_frames(cfg, seed, features, facets)
  return PolysemousWorld(cfg, seed, ids, features, facets, topics, train, test, tq, tv, tf, eq, ev, ef, frames,
                         frame_facet)


def make_frames(cfg: PolysemousWorldConfig, seed: int, features: np.ndarray, facets: list):
  """The videos' frame features float32 [V, T, dim] and the facet each frame shows int [V, T] (the module
  docstring's story), from their own random stream: the rest of the world does not depend on them."""
  rng = np.random.default_rng([seed, 1])
  t, d = cfg.frames, cfg.dim
  which = np.stack([(np.arange(t) * len(f)) // t for f in facets])  # contiguous segments, one per facet, in order
  shown = np.stack([f[k] - f.mean(0) for f, k in zip(facets, which)])  # [V, T, dim]
  x = features[:, None] + cfg.frame_weight * shown + cfg.frame_noise * rng.standard_normal(shown.shape) / np.sqrt(d)
  return l2_normalize(x).astype(np.float32), which


def dense_recall(world: PolysemousWorld, pool: str = "inductive", ks=(1, 5, 10, 100)) -> dict[str, float]:
  """Exact cosine retrieval of the test queries over the test videos ("inductive") or all videos
  ("full_corpus"); recall@k as fractions. The reference GRDR's recall + rerank is measured against."""
  if pool not in ("inductive", "full_corpus"):
    raise ValueError(f"pool must be 'inductive' or 'full_corpus', got {pool!r}")
  videos = world.test if pool == "inductive" else np.arange(len(world.video_ids))
  scores = world.test_queries @ world.features[videos].T
  rank = rank_of_target(scores, np.searchsorted(videos, world.test_query_video))  # ties pessimistic
  return {f"r{k}": float(np.mean(rank <= k)) for k in ks}


# ----------------------------------------------------------------------------------------------
# The world as files (the module docstring's layout).


def write_world(config, root: str | Path) -> dict[str, str]:
  """`experiments.common.world_data`'s writer: the world of `config.world` and `config.seed` as the release files of
  `config.dataset` (its test queries under `config.data.protocol`) and a feature store under `root`; returns the
  `data.*` keys naming them."""
  w = config.world
  world = make_polysemous_world(PolysemousWorldConfig(num_videos=w.num_videos, dim=w.dim,
                                                      train_queries=w.train_queries, test_queries=w.test_queries,
                                                      frames=w.get("frames", PolysemousWorldConfig.frames)),
                                seed=config.seed)
  return write_files(world, root, config.dataset, config.data.protocol)


def write_files(world: PolysemousWorld, root: str | Path, dataset: str = "msrvtt",
                protocol: str = "captions") -> dict[str, str]:
  """Writes `world` under `root` (the module docstring's layout); returns {"annotations", "train_annotations",
  "features"}: the test and training files and the store."""
  if dataset not in FORMATS:
    raise ValueError(f"the polysemous world writes the release formats {FORMATS}, not {dataset!r}")
  if protocol == "paragraphs" and world.config.test_queries != 1:
    raise ValueError(f"{dataset}'s paragraph protocol makes one query of each test video's captions: the polysemous "
                     f"world needs test_queries=1 there, got {world.config.test_queries}")
  root = Path(root)
  ids = world.video_ids
  splits = {}
  for split, video, facet in (("train", world.train_query_video, world.train_query_facet),
                              ("test", world.test_query_video, world.test_query_facet)):
    j = np.arange(len(video)) - np.searchsorted(video, video)  # the query's index within its video
    splits[split] = [(str(ids[v]), int(k), f"{ids[v]} query {k}") for v, k in zip(video, j)]
  files, caption_ids = _WRITERS[dataset](root / dataset, world, splits)
  if protocol == "paragraphs":
    caption_ids["test"] = [v for v, _, _ in splits["test"]]
  query_ids = caption_ids["train"] + caption_ids["test"]
  vectors = np.concatenate([world.train_queries, world.test_queries])
  write_arrays(root / "features", {"clip": (list(ids), world.features), "frame_clip": (list(ids), world.frames),
                                   "text": (query_ids, vectors)},
               {"backbone": "synthetic-polysemous-world", "synthetic": True, "seed": world.seed,
                "world": dataclasses.asdict(world.config), "world_name": WORLD_NAME})
  senses = np.concatenate([world.train_query_facet, world.test_query_facet])
  io.atomic_write_json(root / TRUTH_FILE, {
      "note": "SYNTHETIC polysemous world truth (vidjax.worlds.polysemous): query_sense = the facet a caption's "
              "query mentions; video_topics = each video's facets as [coarse, sub] topics",
      "query_sense": {q: int(f) for q, f in zip(query_ids, senses)},
      "video_topics": {str(v): t.tolist() for v, t in zip(ids, world.facet_topics)}})
  return {**{k: str(v) for k, v in files.items()}, "features": str(root / "features")}


def _write_msrvtt(d: Path, world: PolysemousWorld, splits):
  """MSRVTT_data.json (every video, the training captions, sen_id = caption id) and the 1k-A-style test csv."""
  test = set(world.test.tolist())
  videos = [{"video_id": str(v), "category": 0, "url": f"synthetic://polysemous/{v}", "start time": 0.0,
             "end time": 10.0, "split": "test" if i in test else "train", "id": i}
            for i, v in enumerate(world.video_ids)]
  sentences = [{"caption": text, "video_id": v, "sen_id": i} for i, (v, _, text) in enumerate(splits["train"])]
  io.atomic_write_json(d / "MSRVTT_data.json", {"info": {"description": "SYNTHETIC polysemous world"},
                                                 "videos": videos, "sentences": sentences})
  rows = [("key", "vid_key", "video_id", "sentence")] + [(f"ret{i}", f"msr{v}", v, text)
                                                         for i, (v, _, text) in enumerate(splits["test"])]
  io.atomic_write_text(d / "MSRVTT_JSFUSION_test.csv", io.csv_text(rows))
  return ({"annotations": d / "MSRVTT_JSFUSION_test.csv", "train_annotations": d / "MSRVTT_data.json"},
          {"train": [str(i) for i in range(len(splits["train"]))],
           "test": [f"ret{i}" for i in range(len(splits["test"]))]})


def _write_didemo(d: Path, world: PolysemousWorld, splits):
  """train_data.json / test_data.json: one description per query (one 5-second chunk, four annotators)."""
  files, caption_ids, n = {}, {}, 1
  for split, name in (("train", "train_data.json"), ("test", "test_data.json")):
    entries = [{"annotation_id": n + i, "video": v, "description": text, "times": [[0, 0]] * 4, "num_segments": 1,
                "dl_link": f"synthetic://polysemous/{v}"} for i, (v, _, text) in enumerate(splits[split])]
    io.atomic_write_json(d / name, entries)
    files[split], caption_ids[split] = d / name, [str(e["annotation_id"]) for e in entries]
    n += len(entries)
  return {"annotations": files["test"], "train_annotations": files["train"]}, caption_ids


def _write_activitynet(d: Path, world: PolysemousWorld, splits):
  """train.json / val_1.json: each video's queries as its sentences, each spanning the whole 10-second video."""
  files, caption_ids = {}, {}
  for split, name in (("train", "train.json"), ("test", "val_1.json")):
    records = {}
    for v, _, text in splits[split]:
      r = records.setdefault(v, {"duration": 10.0, "timestamps": [], "sentences": []})
      r["timestamps"].append([0.0, 10.0])
      r["sentences"].append(text)
    io.atomic_write_json(d / name, records)
    files[split], caption_ids[split] = d / name, [f"{v}#{k:03d}" for v, k, _ in splits[split]]
  return {"annotations": files["test"], "train_annotations": files["train"]}, caption_ids


def _write_lsmdc(d: Path, world: PolysemousWorld, splits):
  """LSMDC16_annos_training.csv / LSMDC16_challenge_1000_publictect.csv: a line per query, each clip 10 seconds."""
  files, caption_ids = {}, {}
  times = "\t".join([lsmdc.format_time(0), lsmdc.format_time(10)] * 2)
  for split, name in (("train", "LSMDC16_annos_training.csv"), ("test", "LSMDC16_challenge_1000_publictect.csv")):
    io.atomic_write_text(d / name, "".join(f"{v}\t{times}\t{text}\n" for v, _, text in splits[split]))
    files[split], caption_ids[split] = d / name, [f"{v}#{k:03d}" for v, k, _ in splits[split]]
  return {"annotations": files["test"], "train_annotations": files["train"]}, caption_ids


_WRITERS = {"msrvtt": _write_msrvtt, "didemo": _write_didemo, "activitynet": _write_activitynet,
            "lsmdc": _write_lsmdc}


if __name__ == "__main__":
  for s in range(3):
    w = make_polysemous_world(seed=s)
    print(f"seed {s} (SYNTHETIC): inductive {dense_recall(w)}  full corpus {dense_recall(w, 'full_corpus')}")
