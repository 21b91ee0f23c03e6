"""The polysemous world: GRDR's embedded default (SYNTHETIC), generated from a seed in seconds.

A video means several things at once (GRDR §3.2: "videos are inherently polysemous"), and each query
asks for one of them. Generative story (../shared/notes/grdr_world.md; all vectors in R^dim,
^ = L2-normalised, noise ~ N(0, I / dim)):

  * a topic hierarchy: `coarse` topics c_a^ with `sub` sub-topics s_ab^ each;
  * video v has 2-4 facets (uniform), each from a random (coarse, sub) topic:
    facet = (w_coarse c_a + w_sub s_ab + w_own o)^ with a video-specific o;
  * its frozen feature is f_v = (mean of its facets + video_noise n)^, the stand-in of a backbone's
    clip embedding (what GRDR's tokenizer reads);
  * a query mentions one facet: q = (facet + query_noise m)^, the stand-in of a text embedding.

Splits: `train_fraction` of the videos are training videos with `train_queries` queries each
(facets drawn uniformly, so the k-means of a video's queries recovers its facets: GRDR's query
intents); the rest are test videos with `test_queries` queries each, never seen in training (the
inductive setting, §4.1). The full-corpus setting searches train + test videos with the test queries.

Calibration (defaults; `python -m vidjax.worlds.polysemous` prints it): exact dense retrieval (cosine
of q with f_v) over the 1,000 test videos has R@1 0.44-0.45 (R@10 0.89-0.91, R@100 ~1.0, seeds
0-2); over the full corpus of 10,000 R@1 0.18 and R@100 0.90-0.92. The note's prototype on the same
world measured that one semantic ID per video recalls the target among 150 candidates for ~0.76 of
the queries and four (one per intent) for ~0.97: the multi-view mechanism GRDR claims.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from vidjax.metrics import rank_of_target
from vidjax.ops import check_positive_fields, l2_normalize


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

  def __post_init__(self):
    check_positive_fields(self, ("num_videos", "dim", "coarse", "sub", "min_facets", "max_facets",
                                 "train_queries", "test_queries"))
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
  """SYNTHETIC. Videos `v00000..`, features float32 [V, dim]; queries float32 [Q, dim] with the
  index of their video and of the facet they mention; `train` / `test` are sorted video indices."""
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
  return PolysemousWorld(cfg, seed, ids, features, facets, topics, train, test, tq, tv, tf, eq, ev, ef)


def dense_recall(world: PolysemousWorld, pool: str = "inductive", ks=(1, 5, 10, 100)) -> dict[str, float]:
  """Exact cosine retrieval of the test queries over the test videos ("inductive") or all videos
  ("full_corpus"); recall@k as fractions. The reference GRDR's recall + rerank is measured against."""
  if pool not in ("inductive", "full_corpus"):
    raise ValueError(f"pool must be 'inductive' or 'full_corpus', got {pool!r}")
  videos = world.test if pool == "inductive" else np.arange(len(world.video_ids))
  scores = world.test_queries @ world.features[videos].T
  rank = rank_of_target(scores, np.searchsorted(videos, world.test_query_video))  # ties pessimistic
  return {f"r{k}": float(np.mean(rank <= k)) for k in ks}


@dataclasses.dataclass(frozen=True)
class WorldQueries:
  """The world's own multi-intent training queries (one facet each), as GRDR's `PseudoQueries` provider: called
  with the training videos' rows, it returns query vectors and the position in `rows` of the video each describes."""
  world: PolysemousWorld

  def __call__(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    position = {int(v): i for i, v in enumerate(rows)}
    keep = np.asarray([int(v) in position for v in self.world.train_query_video])
    video = np.asarray([position[int(v)] for v in self.world.train_query_video[keep]], np.int64)
    return self.world.train_queries[keep], video


if __name__ == "__main__":
  for s in range(3):
    w = make_polysemous_world(seed=s)
    print(f"seed {s} (SYNTHETIC): inductive {dense_recall(w)}  full corpus {dense_recall(w, 'full_corpus')}")
