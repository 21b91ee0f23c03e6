"""GenState-AI as a method (../shared/papers/genstate_ai.txt §4.3, §5.1): its data, its models, its metrics.

One data path: a GenState metadata file (`vidjax.data.genstate`) and a feature store, whether a user's (a store
prepared by `configs/prepare.py --config.dataset=genstate`) or the rendered world's (`write_world`: the world
writes its mp4 clips and metadata files, then the one extraction, `vidjax.extract.extract_into`, embeds them).

  load(config)              the test (and training) triplets whose videos the store has (`data.skip_missing`)
  encoders(config, ...)     every method as two encoders (prompt texts -> [N, D], clip ids -> [N, D]; the cosine of
                            the two is its score): `zero_shot`, the store's `data.text_kind` per text id against its
                            `data.video_kind`; with training triplets `vidclip`, VidCLIP trained on their clips
                            (`tokens`) through the one loop in `<workdir>/models/vidclip`
  evaluate_methods(...)     the §5.1 pools per subset and the §4.3 metrics of every method
  suite(config, workdir)    a finished run's models and benchmarks for `configs/evaluate_all.py`
"""
from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Callable, Sequence

import ml_collections
import numpy as np

from vidjax import evaluate, train
from vidjax import extract as engine
from vidjax.data import genstate
from vidjax.data.features import FeatureStore
from vidjax.data.provenance import check_store, present_videos
from vidjax.defaults.common import steps_in_passes
from vidjax.methods import vidclip
from vidjax.models import pixelstats
from vidjax.worlds import rendered

METHODS = ("zero_shot", "vidclip")
METRICS = ("r1", "r5", "r10", "acc_temp", "acc_sem", "acc_tri")
WORLD_NAME = "rendered"  # the rendered world's `data.name`: its tables say "GenState (rendered)"

Encoders = dict[str, tuple[Callable[[Sequence[str]], np.ndarray], Callable[[Sequence[str]], np.ndarray]]]


# ----------------------------------------------------------------------------------------------
# The rendered world, written as a user's data.


def world_config(config) -> rendered.RenderedWorldConfig:
  fields = dict(config.world)
  fields["categories"] = tuple(fields["categories"])
  return rendered.RenderedWorldConfig(**fields)


def extraction_config(config, wc: rendered.RenderedWorldConfig) -> ml_collections.ConfigDict:
  """`config.extract` as `engine.extract_into` reads it: the world's frames and size, squashed, with tokens."""
  ex = config.extract.copy_and_resolve_references()
  with ex.unlocked():
    ex.update(num_frames=wc.frames, resolution=wc.size, aspect="squash", save_tokens=True, progress=config.progress)
  return ex


def stand_in_texts(texts: Sequence[str]) -> np.ndarray:
  """`[N, pixelstats.DIM]`: the order-blind text side of the stand-in space, the bag of each prompt's colour words
  in the stand-in backbone's hue-histogram entries (`pixelstats.colour_bag`)."""
  return np.stack([pixelstats.colour_bag(rendered.colour_words(t)) for t in texts])


def write_world(config, root: Path, bar=None) -> dict[str, str]:
  """Writes the rendered world (`config.world`, `config.seed`) as a user's GenState data under `root`: the mp4
  clips (`root/videos`, resumable) and metadata files (`rendered.write_release`), and the feature store
  `root/features` through the one extraction (every clip: `clip_mean` and `tokens`, with VideoPrism also `clip`;
  every test prompt as `text`, keyed as `genstate.prompt_texts` says: through the LvT text tower, or with the
  stand-in backbone its colour bag, `stand_in_texts`). The store's manifest says SYNTHETIC and names the world.
  Returns the `data.*` keys that name them (`experiments.common.world_data`)."""
  world = rendered.make_world(world_config(config), config.seed, Path(root) / "videos")
  files = rendered.write_release(world, root, bar)
  clips = [engine.VideoSegment(c.clip_id, str(world.path(c.clip_id))) for c in world.all_clips()]
  store_root = Path(root) / "features"
  counts, _ = engine.extract_into(extraction_config(config, world.config), str(store_root), clips,
                                      genstate.prompt_texts(world.triplets["test"]), "rendered_genstate (SYNTHETIC)",
                                      text_fn=stand_in_texts)
  store = FeatureStore(store_root)
  store.update_metadata({"synthetic": True, "world": "rendered (vidjax.worlds.rendered)",
                         "note": rendered.SYNTHETIC_NOTE, "world_extract": counts})
  return {"metadata": files["metadata"], "train_metadata": files["train_metadata"], "features": store_root,
          "video_kind": "clip" if "clip" in store.kinds() else "clip_mean", "name": WORLD_NAME}


# ----------------------------------------------------------------------------------------------
# Data.


@dataclasses.dataclass
class Data:
  """A benchmark as the run reads it: its store, the test and training triplets whose videos it has, the rest."""
  store: FeatureStore
  test: list[genstate.Triplet]
  train: list[genstate.Triplet]
  skipped: list[str]


def benchmark_name(config, short: bool = False) -> str:
  """How results.json names the benchmark: `data.name`, else the metadata file's path (`short`: its file name, as
  evaluate_all's tables say)."""
  return config.data.name or (Path(config.data.metadata).name if short else str(config.data.metadata))


def _present(config, store, triplets, kinds, what):
  """The triplets whose three videos the store has (`data.skip_missing`), their pools' distractors likewise."""
  videos = sorted({v for t in triplets for v in (*t.videos, *t.distractors)})
  kept, skipped = present_videos(config, store, kinds, videos, what)
  keep = set(kept)
  triplets = [dataclasses.replace(t, distractors=tuple(v for v in t.distractors if v in keep)) for t in triplets
              if set(t.videos) <= keep]
  return triplets, skipped


def load(config) -> Data:
  """`data.metadata`'s test triplets (`data.video_kind` in `data.features`) and, with `data.train_metadata`, the
  training triplets (their `tokens`), each restricted to the videos the store has."""
  store = FeatureStore(config.data.features)
  test, skipped = _present(config, store, genstate.read_triplets(config.data.metadata), [config.data.video_kind],
                           "benchmark videos")
  if not test:
    raise ValueError(f"{config.data.metadata}: no query has all three of its videos in {store.root}")
  train_set = []
  if config.data.train_metadata:
    train_set, skipped_train = _present(config, store, genstate.read_triplets(config.data.train_metadata),
                                        ["tokens"], "training videos")
    skipped = skipped + skipped_train
  return Data(store, test, train_set, skipped)


# ----------------------------------------------------------------------------------------------
# Models.


class _Features:
  """The store's tokens of every clip as one array, with `gather(video_rows, frame_rows)` for VidCLIP.

  `layout="frame"` concatenates each frame's patch tokens into one per-frame vector (`[V, T, 1, N * D]`: the
  slot says where, so the spatial layout survives pooling); "patches" keeps `[V, T, N, D]`. With
  `standardize` every input feature is centred and scaled by its mean and standard deviation over the
  training clips (`fit_rows`); features constant there become 0.
  """

  def __init__(self, store: FeatureStore, ids: list[str], layout: str, standardize: bool, fit_rows: np.ndarray):
    self.row = {v: i for i, v in enumerate(ids)}
    tokens = store.get("tokens", ids)
    if layout == "frame":
      tokens = tokens.reshape(*tokens.shape[:2], 1, -1)
    if standardize:
      fit = tokens[fit_rows].reshape(-1, tokens.shape[-1]).astype(np.float64)
      mean, std = fit.mean(0), fit.std(0)
      tokens = ((tokens - mean) / np.where(std > 1e-6, std, np.inf)).astype(np.float32)
    self.tokens = tokens

  def gather(self, video_rows, frame_rows):
    return self.tokens[video_rows, frame_rows]


def fit_vidclip(config, workdir: Path, store: FeatureStore, ids: list[str], items: list[tuple[str, str, list[str]]],
                group: int, restore: bool = False, precision=None):
  """VidCLIP (`config.model`, `config.train`) over the store's `tokens` of `ids`, trained on `items` (clip id, its
  prompt, its hard-negative prompts; runs of `group` consecutive items share a batch) through the one loop in
  `<workdir>/models/vidclip` inside the `precision` context (`restore`: its final checkpoint, nothing trains);
  returns the two encoders (prompt texts -> [N, D], clip ids -> [N, D])."""
  mc, tc = config.model, config.train
  row = {v: i for i, v in enumerate(ids)}
  feats = _Features(store, ids, mc.frame_input, mc.standardize, np.array([row[c] for c, _, _ in items]))
  model, tokenizer, fresh = vidclip.vidclip_setup(mc, feats.tokens.shape[-1], feats.tokens.shape[-2])
  texts = vidclip.TextTable()
  frame_rows = np.round(np.linspace(0, feats.tokens.shape[1] - 1, mc.frames)).astype(np.int64)
  width = max(len(negs) for _, _, negs in items)
  ex = vidclip.Examples(np.array([[row[c]] * mc.frames for c, _, _ in items]), np.tile(frame_rows, (len(items), 1)),
                        np.array([texts(p) for _, p, _ in items]),
                        np.array([[texts(n) for n in negs] + [-1] * (width - len(negs)) for _, _, negs in items],
                                 np.int64).reshape(len(items), width))
  tokens = texts.tokens(tokenizer, mc.max_text_len)
  if restore:
    params = train.load_params(workdir / "models" / "vidclip")
  else:
    with precision or contextlib.nullcontext():
      params = vidclip.train_model("vidclip", model, fresh, ex, feats, tokens, tc, tc.mode, config.seed, workdir,
                                   group=group)
  enc = vidclip.Encoder(model, feats, config.eval.chunk)

  def videos(vs):
    return enc.videos(params, np.array([[row[v]] * mc.frames for v in vs]), np.tile(frame_rows, (len(vs), 1)))

  def strings(prompts):
    return enc.strings(params, prompts, tokenizer, mc.max_text_len)

  return strings, videos


def training_items(triplets: Sequence[genstate.Triplet]) -> tuple[list[tuple[str, str, list[str]]], int]:
  """(VidCLIP training items, group) from training triplets: with the negatives' generation prompts each of a
  query's three clips is a positive of its own prompt and the other two prompts are its hard negatives (the
  rendered world's recipe, group 3); without them the main clip and its query (in-batch negatives only, group 1)."""
  if all(t.negative_prompts for t in triplets):
    items = []
    for t in triplets:
      prompts = (t.query, *t.negative_prompts)
      items += [(v, p, [q for q in prompts if q != p]) for v, p in zip(t.videos, prompts)]
    return items, 3
  return [(t.main, t.query, []) for t in triplets], 1


def limits(config, data: Data) -> dict[str, tuple[int, str]]:
  """What must fit the data (`clip_to_data`): a VidCLIP batch at most its training items (`training_items`: a
  triplet's three clips with the negatives' prompts, else its main clip), in whole `train.group`s, and its steps
  at most `train.max_passes` passes over them; {} without training triplets (nothing trains)."""
  if not data.train:
    return {}
  items, _ = training_items(data.train)
  group = config.train.group
  whole = f", in whole groups of train.group={group}" if group > 1 else ""
  why = f"the {len(items)} VidCLIP training items of {len(data.train)} training triplets{whole}"
  return {"train.batch_size": (len(items) // group * group, why),
          **steps_in_passes(config, "train", len(items), "VidCLIP training items",
                            "the most the measured runs trained for and generalized (configs/genstate/common.py)")}


def text_ids(config, data: Data) -> dict[str, str]:
  """{prompt: text id} of the test triplets' prompts the store embedded as `data.text_kind`."""
  have = set(data.store.ids(config.data.text_kind)) if config.data.text_kind in data.store.kinds() else set()
  out: dict[str, str] = {}
  for text_id, text in genstate.prompt_texts(data.test).items():
    if text_id in have:
      out.setdefault(text, text_id)
  return out


def encoders(config, workdir: Path, data: Data, restore: bool = False, precision=None) -> Encoders:
  """{method: (prompt texts -> [N, D], clip ids -> [N, D])}: `zero_shot` (the store's `data.text_kind` of each
  prompt's text id against its `data.video_kind`: order-blind) and, with training triplets, `vidclip` (trained in
  the `precision` context; `restore`: read from its final checkpoint)."""
  store, text_id = data.store, text_ids(config, data)
  out = {"zero_shot": (lambda texts: store.get(config.data.text_kind, [text_id[t] for t in texts]),
                       lambda vs: store.get(config.data.video_kind, list(vs)))}
  if data.train:
    check_store(workdir, store, ["tokens"])
    items, group = training_items(data.train)
    ids = list(dict.fromkeys([c for c, _, _ in items] + [v for t in data.test for v in (*t.videos, *t.distractors)]))
    out["vidclip"] = fit_vidclip(config, workdir, store, ids, items, group if group == 1 else config.train.group,
                                 restore, precision)
  return out


# ----------------------------------------------------------------------------------------------
# Evaluation.


def pool_inputs(triplets: Sequence[genstate.Triplet], query_emb: np.ndarray,
                video_emb: Callable[[list[str]], np.ndarray]):
  """{subset: {"text": [q, D], "candidates": [q, P, D]}} of the §5.1 pools (rows of `triplets`)."""
  pools = genstate.pools(triplets)
  out = {}
  for subset, rows in genstate.subsets(triplets).items():
    ids = [pools[r] for r in rows]
    width = {len(p) for p in ids}
    if len(width) != 1:  # per-entry distractors make pools uneven: evaluate those queries one by one
      raise ValueError(f"subset {subset!r}: pools of different sizes {sorted(width)}; give every query of a subset "
                       "the same extra distractors")
    flat = video_emb([v for p in ids for v in p])
    out[subset] = {"text": query_emb[np.asarray(rows)], "candidates": flat.reshape(len(rows), width.pop(), -1)}
  return out


def evaluate_methods(config, test: Sequence[genstate.Triplet], encoders_: Encoders) -> tuple[dict, dict]:
  """({method: all-queries metrics}, {subset: {method: metrics}}) with the results.json keys (§4.3 metrics in %,
  the relative-order histogram in counts)."""
  keep = lambda m: {**evaluate.rounded(m, None, METRICS), "order_histogram": m["order_histogram"]}  # noqa: E731
  overall, subsets = {}, {}
  for name, (texts, videos) in encoders_.items():
    inputs = pool_inputs(test, texts([t.query for t in test]), videos)
    out = evaluate.evaluate_triplet_pools(evaluate.CosineScorer("text"), inputs, config.eval.chunk)
    overall[name] = keep(out["all"])
    for subset, m in out["subsets"].items():
      subsets.setdefault(subset, {})[name] = keep(m)
  return overall, subsets


def suite(config, workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """A finished run for `configs/evaluate_all.py`: its models (restored) on its own test triplets' §5.1 pools,
  on Comp-style text pairs (each main clip against its temporal / semantic negative's prompt) where the store
  embedded the negatives' prompts, and on R@K of every test prompt the store embedded over every test video."""
  workdir = Path(workdir)
  data = load(config)
  test, name = data.test, benchmark_name(config, short=True)
  space = f"the feature store {data.store.root}"
  synthetic = bool(data.store.metadata.get("synthetic", False))
  # The keys each model's encoders have (checked before scoring): the zero-shot store lookups know the embedded
  # prompts and the store's videos; VidCLIP's text tower reads any prompt, its video table the clips it was given.
  known = {"zero_shot": (set(text_ids(config, data)), set(data.store.ids(config.data.video_kind)))}
  if data.train:
    known["vidclip"] = (None, {c for c, _, _ in training_items(data.train)[0]} |
                        {v for t in data.test for v in (*t.videos, *t.distractors)})
  models = [evaluate.dual_encoder(m, space, *enc, chunk=config.eval.chunk, keys=evaluate.PROMPTS,
                                  texts=known[m][0], videos=known[m][1])
            for m, enc in encoders(config, workdir, data, restore=True).items()]
  pools = genstate.pools(test)
  pool_data = {s: (np.array([test[r].query for r in rows], object), np.array([pools[r] for r in rows], object))
               for s, rows in genstate.subsets(test).items()}
  benchmarks = [evaluate.Benchmark(f"GenState ({name})", "genstate", space, pool_data, synthetic, evaluate.PROMPTS)]
  prompt = {v: p for v, (_, p) in genstate.video_prompts(test, set(text_ids(config, data).values())).items()}
  if all(v in prompt for t in test for v in t.videos):
    pairs = {kind: ([t.main for t in test], [prompt[t.main] for t in test], [prompt[getattr(t, role)] for t in test])
             for kind, role in (("temporal", "temporal_negative"), ("semantic", "semantic_negative"))}
    benchmarks.append(evaluate.Benchmark(f"Comp pairs ({name})", "comp", space, pairs, synthetic, evaluate.PROMPTS))
  gallery = list(dict.fromkeys(v for t in test for v in t.videos))
  row = {v: i for i, v in enumerate(gallery)}
  benchmarks.append(evaluate.Benchmark(f"R@K ({name})", "gallery", space,
                                       (list(prompt.values()), gallery, np.array([row[v] for v in prompt])), synthetic,
                                       evaluate.PROMPTS))
  return models, benchmarks


def results_keys(data: Data) -> dict:
  """results.json's keys of a run besides its metrics: where the benchmark came from and what it counted."""
  return {"note": data.store.metadata.get("note", ""), "decode": data.store.metadata.get("decode", {}),
          "counts": {"queries": len(data.test), "train_queries": len(data.train),
                     "subsets": {s: len(r) for s, r in genstate.subsets(data.test).items()}}}
