"""GenState-AI: render a state-transition world, extract it, train an order-aware model, evaluate triplets.

`run(config, workdir)`:
  1. the rendered SYNTHETIC world (`vidjax.worlds.rendered`): every clip of the training and evaluation
     queries written as `<workdir>/world/videos/<clip_id>.mp4` (resumable), and the evaluation queries as a
     GenState metadata file `<workdir>/world/genstate_test.json` (`vidjax.data.genstate` format);
  2. extraction through the real engine (`vidjax.extract.extract_videos`: decoding, padding of corrupt
     clips, a feature store at `<workdir>/features`) with the STAND-IN pixel-statistics backbone, or with
     VideoPrism when `extract.model.checkpoint` is given (then the prompts go through its LvT text tower);
  3. `zero_shot`: order-blind cosine of the frame-mean clip feature and the prompt's text embedding;
  4. `vidclip`: VidCLIP trained on the training queries' clips with NegCLIP hard negatives (one loop,
     `<workdir>/models/vidclip`, resumable);
  5. §5.1 pools per subset and the §4.3 metrics (`evaluate.evaluate_triplet_pools`), the Table-3-shaped
     table, the order histogram as `<workdir>/order_histogram.png` (Figures 3-4) and `results.json`:
     {"metrics": {method: {r1, r5, r10, acc_temp, acc_sem, acc_tri (%), order_histogram (counts)}},
      "subsets": {subset: {method: {...}}}}.

With `data.metadata` and `data.features` the run evaluates a user's own benchmark instead (the real path; a store
prepared by `configs/prepare.py --config.dataset=genstate`): the zero-shot cosine of the store's `data.video_kind`
(per video id) and `data.text_kind` (per query id), and with `data.train_metadata` VidCLIP trained on the training
triplets' clips (their `tokens`; each clip a positive of its own prompt when the metadata gives the negatives'
`temporal_prompt` / `semantic_prompt`, else the main clip of its query). `evaluate_all` reads such a run on its own
benchmark, never the rendered world.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from vidjax import evaluate, losses, train
from vidjax import extract as engine
from vidjax import progress as progress_lib
from vidjax.data import genstate
from vidjax.worlds import rendered
from vidjax.data import video as video_lib
from vidjax.data.features import FeatureStore
from vidjax.defaults.genstate import METHODS, METRICS
from vidjax.experiments import common
from vidjax.methods import vidclip
from vidjax.models import pixelstats

# Besides `common.is_resumable`'s rule: the extraction's batching does not change the features it writes.
RESUMABLE = ("extract.batch_size", "extract.decode_workers", "extract.text_batch_size")


# ----------------------------------------------------------------------------------------------
# Config checks.


def validate(config) -> None:
  if bool(config.data.metadata) != bool(config.data.features):
    common.bad_value("data.metadata", config.data.metadata, "set together with data.features (a user's benchmark) "
                     "or both empty (the rendered world)")
  if config.data.train_metadata and not config.data.metadata:
    common.bad_value("data.train_metadata", config.data.train_metadata, "set with data.metadata and data.features "
                     "(a user's benchmark); the rendered world brings its own training triplets")
  if config.data.metadata:
    common.check_positive_int(config, ["eval.chunk"])
    if not config.data.train_metadata:
      return
  else:
    try:
      world_config(config)
    except (TypeError, ValueError) as e:
      raise ValueError(f"config.world: {e}") from None
  common.check_positive_int(config, [f"model.{k}" for k in (
      "frames", "width", "pool_queries", "pool_heads", "pool_mlp", "embed_dim", "text_hidden", "text_layers",
      "text_heads", "text_mlp", "max_text_len")])
  vidclip.check_text_tower(config, "model")
  common.check_choice(config, "model.frame_input", ("frame", "patches"))
  common.compute_dtype(config, "model.dtype")
  common.check_fraction(config, "model.init_temperature")
  common.check_positive_int(config, [f"train.{k}" for k in ("batch_size", "group", "steps", "checkpoint_every",
                                                           "log_every")])
  common.check_positive(config, ["train.lr"])
  common.check_choice(config, "train.mode", losses.COMP_MODES)
  if config.train.batch_size % config.train.group:
    common.bad_value("train.batch_size", config.train.batch_size, f"a multiple of train.group={config.train.group}")
  if config.train.group not in (1, 3):
    common.bad_value("train.group", config.train.group, "1 (shuffled clips) or 3 (a query's three clips together)")
  common.check_positive_int(config, ["eval.chunk", "extract.batch_size", "extract.decode_workers"])
  if config.data.metadata:
    return
  if config.extract.model.name == pixelstats.NAME and config.extract.model.checkpoint:
    common.bad_value("extract.model.name", pixelstats.NAME, "a VideoPrism model name with extract.model.checkpoint")
  if config.extract.model.name != pixelstats.NAME and not config.extract.model.checkpoint:
    common.bad_value("extract.model.checkpoint", "", f"a VideoPrism checkpoint for {config.extract.model.name!r} "
                     f"(or extract.model.name={pixelstats.NAME!r}, the stand-in)")


def world_config(config) -> rendered.RenderedWorldConfig:
  fields = dict(config.world)
  fields["categories"] = tuple(fields["categories"])
  return rendered.RenderedWorldConfig(**fields)


# ----------------------------------------------------------------------------------------------
# Render and extract.


def write_world(world: rendered.RenderedWorld, workdir: Path, progress: bool) -> None:
  """The world as a user's data: its mp4 clips (resumable) and a GenState metadata file per split."""
  render_clips(world, progress)
  for split in ("train", "test"):
    rendered.write_metadata(world, workdir / "world" / f"genstate_{split}.json", split)


def render_clips(world: rendered.RenderedWorld, progress: bool) -> int:
  """Writes every clip not yet on disk (atomic files, so a killed run resumes); returns how many it wrote."""
  world.video_dir.mkdir(parents=True, exist_ok=True)
  todo = [c for c in world.all_clips() if not world.path(c.clip_id).exists()]
  with progress_lib.bar(len(todo), "render clips", "clip", disable=not progress or not todo) as bar:
    for clip in todo:
      video_lib.write_video(world.path(clip.clip_id), rendered.clip_frames(world, clip), fps=world.config.fps)
      bar.update(1)
  return len(todo)


def extract(config, world: rendered.RenderedWorld, store_root: Path, prompts: Mapping[str, str]):
  """Clip features (`clip_mean`, `tokens`, and VideoPrism's `clip`) and, with VideoPrism, the `prompts`
  ({text id: prompt}) through its text tower."""
  model, variables, meta = engine.load_model(config.extract)
  lvt = engine.is_lvt(model)
  kinds = (["clip"] if lvt else []) + ["clip_mean", "tokens"]
  wc = world.config
  store = engine.open_store(store_root, {**meta, "num_frames": wc.frames, "resolution": wc.size, "aspect": "squash",
                                         "dtype": config.extract.store_dtype, "kinds": kinds,
                                         "dataset": "rendered_genstate (SYNTHETIC)"})
  mesh = engine.local_mesh()
  clips = [engine.VideoSegment(c.clip_id, str(world.path(c.clip_id))) for c in world.all_clips()]
  with common.precision(config, "extract"):
    stats = engine.extract_videos(store, clips, engine.make_video_fn(model, variables, mesh, kinds),
                                  num_frames=wc.frames, resolution=wc.size, batch_size=config.extract.batch_size,
                                  kinds=kinds, mesh=mesh, dtype=config.extract.store_dtype,
                                  decode_workers=config.extract.decode_workers, progress=config.progress)
  if lvt:
    from vidjax.tokenizers.sentencepiece import SentencePieceTokenizer  # pylint: disable=g-import-not-at-top
    if not config.extract.model.spm_path:
      common.bad_value("extract.model.spm_path", "", "the LvT SentencePiece model (the prompts go through its text tower)")
    tok = SentencePieceTokenizer(config.extract.model.spm_path)
    with common.precision(config, "extract"):
      engine.extract_texts(store, dict(prompts), engine.make_text_fn(model, variables, tok, mesh),
                           batch_size=config.extract.text_batch_size, dtype=config.extract.store_dtype,
                           progress=config.progress)
  report = engine.finalize(store)
  engine.verify(store, [c.clip_id for c in clips], list(prompts) if lvt else [], kinds)
  return store, lvt, {"clips": len(clips), "clips_written": stats.clips, "clips_skipped": stats.skipped,
                      "padded_videos": report["padded_videos"], "failed_videos": report["failed_videos"]}


# ----------------------------------------------------------------------------------------------
# Pools and evaluation.


def pool_inputs(triplets: Sequence[genstate.Triplet], query_emb: np.ndarray, video_emb: Callable[[list[str]], np.ndarray]):
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


def evaluate_method(scorer, inputs, chunk: int) -> tuple[dict, dict]:
  """(all-queries metrics, {subset: metrics}) with the results.json keys."""
  out = evaluate.evaluate_triplet_pools(scorer, inputs, chunk)
  keep = lambda m: {**{k: m[k] for k in METRICS}, "order_histogram": m["order_histogram"]}  # noqa: E731
  return keep(out["all"]), {s: keep(m) for s, m in out["subsets"].items()}


def plot_order_histogram(by_method: Mapping[str, Mapping[str, Mapping[str, int]]], path: Path, synthetic: bool) -> Path:
  """Figures 3-4: per panel (all queries, then each subset) the share of queries in each ordering, per method."""
  plt = common.pyplot()
  from vidjax import metrics  # pylint: disable=g-import-not-at-top

  panels = list(next(iter(by_method.values())))
  fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.2), dpi=110, sharey=True, squeeze=False)
  orders = metrics.TRIPLET_ORDERS
  width = 0.8 / len(by_method)
  for ax, panel in zip(axes[0], panels):
    for i, (method, hists) in enumerate(by_method.items()):
      counts = np.array([hists[panel][o] for o in orders], np.float64)
      ax.bar(np.arange(len(orders)) + (i - (len(by_method) - 1) / 2) * width, 100 * counts / max(counts.sum(), 1),
             width, label=method)
    ax.set_xticks(np.arange(len(orders)), [">".join(o) for o in orders], rotation=45, fontsize=7)
    ax.set_title(f"{panel} (n={int(sum(next(iter(by_method.values()))[panel].values()))})", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
  axes[0][0].set_ylabel("% of queries (M=main, T=temporal, S=semantic)")
  axes[0][0].legend(fontsize=7)
  fig.suptitle(("SYNTHETIC: " if synthetic else "") + "GenState relative-order histogram (Figs. 3-4 shape)", fontsize=9)
  return common.save_figure(fig, path)


def _write(config, workdir: Path, metrics_by_method: dict, subsets: dict, synthetic: bool, extra: dict) -> dict:
  rows = {"all": metrics_by_method, **subsets}
  table = {f"{subset} / {method}": m for subset, by in rows.items() for method, m in by.items()}
  where = "the rendered world, STAND-IN backbone" if not config.data.metadata else config.data.metadata
  printed = [evaluate.format_table(table, f"GenState triplets on {where} (Table 3 shape; %)", synthetic, list(METRICS))]
  hists = {m: {subset: by[m]["order_histogram"] for subset, by in rows.items()} for m in metrics_by_method}
  plot_order_histogram(hists, workdir / "order_histogram.png", synthetic)
  world = not config.data.metadata
  results = common.results_dict(config, dataset="rendered" if world else str(config.data.metadata),
                                synthetic=synthetic, metrics=metrics_by_method,
                                note=rendered.SYNTHETIC_NOTE if world else "", subsets=subsets, **extra)
  common.write_results(workdir, results, printed)
  return results


def _regroup(per_method_subsets: Mapping[str, Mapping[str, dict]]) -> dict:
  """{method: {subset: m}} -> {subset: {method: m}}."""
  out: dict = {}
  for method, by in per_method_subsets.items():
    for subset, m in by.items():
      out.setdefault(subset, {})[method] = m
  return out


def _present(config, store, triplets, kinds, what):
  """The triplets whose three videos the store has (`data.skip_missing`), their pools' distractors likewise."""
  videos = sorted({v for t in triplets for v in (*t.videos, *t.distractors)})
  kept, skipped = common.present_videos(config, store, kinds, videos, what)
  keep = set(kept)
  triplets = [dataclasses.replace(t, distractors=tuple(v for v in t.distractors if v in keep)) for t in triplets
              if set(t.videos) <= keep]
  return triplets, skipped


def user_models(config, workdir: Path, restore: bool = False):
  """A user's benchmark (`data.metadata`, `data.features`): its test triplets, the encoders of every method
  (`zero_shot`: the store's `data.text_kind` per query id against `data.video_kind`; with `data.train_metadata`
  also `vidclip` trained on the training triplets' clips, from the store's `tokens`), the skipped videos."""
  store = FeatureStore(config.data.features)
  test, skipped = _present(config, store, genstate.read_triplets(config.data.metadata), [config.data.video_kind],
                           "benchmark videos")
  if not test:
    raise ValueError(f"{config.data.metadata}: no query has all three of its videos in {store.root}")
  query_id = {t.query: t.query_id for t in test}
  encoders = {"zero_shot": (lambda texts: store.get(config.data.text_kind, [query_id[t] for t in texts]),
                            lambda vs: store.get(config.data.video_kind, list(vs)))}
  if config.data.train_metadata:
    common.check_store(workdir, store, ["tokens"])
    train_set, skipped_train = _present(config, store, genstate.read_triplets(config.data.train_metadata),
                                        ["tokens"], "training videos")
    items, group = user_items(train_set)
    ids = list(dict.fromkeys([c for c, _, _ in items] + [v for t in test for v in (*t.videos, *t.distractors)]))
    encoders["vidclip"] = fit_vidclip(config, workdir, store, ids, items, group if group == 1 else config.train.group,
                                      restore)
    skipped = skipped + skipped_train
  return test, encoders, store, skipped


def run_user_benchmark(config, workdir: Path) -> dict:
  """The zero-shot cosine (and, with training triplets, VidCLIP) on a user's metadata file and feature store."""
  test, encoders, store, skipped = user_models(config, workdir)
  overall, per = {}, {}
  for name, (texts, videos) in encoders.items():
    inputs = pool_inputs(test, texts([t.query for t in test]), videos)
    overall[name], per[name] = evaluate_method(evaluate.CosineScorer("text"), inputs, config.eval.chunk)
  return _write(config, workdir, overall, _regroup(per), bool(store.metadata.get("synthetic", False)),
                {"counts": {"queries": len(test)}, **common.real_path(workdir, store, skipped)})


# ----------------------------------------------------------------------------------------------
# The run.


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
                group: int, restore: bool = False):
  """VidCLIP (`config.model`, `config.train`) over the store's `tokens` of `ids`, trained on `items` (clip id, its
  prompt, its hard-negative prompts; runs of `group` consecutive items share a batch) through the one loop in
  `<workdir>/models/vidclip` (`restore`: its final checkpoint, nothing trains); returns the two encoders
  (prompt texts -> [N, D], clip ids -> [N, D])."""
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
    with common.precision(config, "train"):
      params = vidclip.train_model("vidclip", model, fresh, ex, feats, tokens, tc, tc.mode, config.seed, workdir,
                                   group=group)
  enc = vidclip.Encoder(model, feats, config.eval.chunk)

  def videos(vs):
    return enc.videos(params, np.array([[row[v]] * mc.frames for v in vs]), np.tile(frame_rows, (len(vs), 1)))

  def strings(prompts):
    return enc.strings(params, prompts, tokenizer, mc.max_text_len)

  return strings, videos


def user_items(triplets: Sequence[genstate.Triplet]) -> tuple[list[tuple[str, str, list[str]]], int]:
  """(VidCLIP training items, group) from a user's training triplets: with the negatives' generation prompts each
  of a query's three clips is a positive of its own prompt and the other two prompts are its hard negatives (the
  world's recipe, group 3); without them the main clip and its query (in-batch negatives only, group 1)."""
  if all(t.negative_prompts for t in triplets):
    items = []
    for t in triplets:
      prompts = (t.query, *t.negative_prompts)
      items += [(v, p, [q for q in prompts if q != p]) for v, p in zip(t.videos, prompts)]
    return items, 3
  return [(t.main, t.query, []) for t in triplets], 1


@dataclasses.dataclass
class Trained:
  """The rendered world and its trained models, each as two encoders: prompt texts -> [N, D] and clip ids ->
  [N, D] (the cosine of the two is the model's score)."""
  world: rendered.RenderedWorld
  test: list[genstate.Triplet]
  encoders: dict[str, tuple[Callable[[Sequence[str]], np.ndarray], Callable[[Sequence[str]], np.ndarray]]]
  lvt: bool
  extract_info: dict

  @property
  def backbone(self) -> str:
    return "STAND-IN pixel statistics (vidjax.models.pixelstats), not VideoPrism" if not self.lvt else "VideoPrism"


def trained(config, workdir: Path, restore: bool = False) -> Trained:
  """Renders and extracts the world and trains VidCLIP (each step resumes from what `workdir` holds); `restore`
  reads a finished run's final VidCLIP checkpoint instead (nothing trains)."""
  world = rendered.make_world(world_config(config), config.seed, workdir / "world" / "videos")
  common.on_writer("genstate_render", lambda: write_world(world, workdir, config.progress))
  test_clips = world.clips["test"]
  store, lvt, extract_info = extract(config, world, workdir / "features", {c.clip_id: c.prompt for c in test_clips})
  ids = [c.clip_id for c in world.all_clips()]

  # Zero-shot, order-blind: the frame-mean clip feature against the prompt's text embedding.
  if lvt:
    text_id: dict[str, str] = {}
    for c in test_clips:
      text_id.setdefault(c.prompt, c.clip_id)
    zero_shot = (lambda texts: store.get("text", [text_id[t] for t in texts]), lambda vs: store.get("clip", list(vs)))
  else:
    zero_shot = (lambda texts: np.stack([pixelstats.colour_bag(rendered.colour_words(t)) for t in texts]),
                 lambda vs: store.get("clip_mean", list(vs)))

  # VidCLIP on the training queries' clips: positive = the clip's own prompt, negatives = its triplet's other prompts.
  items = [(c.clip_id, c.prompt, [o.prompt for o in world.clips["train"][3 * (i // 3):3 * (i // 3) + 3] if o is not c])
           for i, c in enumerate(world.clips["train"])]
  vidclip_texts, vidclip_videos = fit_vidclip(config, workdir, store, ids, items, config.train.group, restore)

  return Trained(world, world.triplets["test"], {"zero_shot": zero_shot, "vidclip": (vidclip_texts, vidclip_videos)},
                 lvt, extract_info)


def suite(config, workdir: str | Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """The trained models and three benchmarks of the test clips (`configs/evaluate_all.py`): the GenState pools,
  Comp-style text pairs (each main clip against its temporal / semantic negative's prompt) and R@K of every
  test clip's prompt over every test clip."""
  if config.data.metadata:
    return user_suite(config, Path(workdir))
  t = trained(config, Path(workdir), restore=True)
  space = f"the rendered world (seed {config.seed}, {t.backbone} features)"
  models = [evaluate.dual_encoder(name, space, *enc, chunk=config.eval.chunk) for name, enc in t.encoders.items()]
  prompt = {c.clip_id: c.prompt for c in t.world.clips["test"]}
  pools = genstate.pools(t.test)
  pool_data = {s: (np.array([t.test[r].query for r in rows], object), np.array([pools[r] for r in rows], object))
               for s, rows in genstate.subsets(t.test).items()}
  pairs = {kind: ([x.main for x in t.test], [prompt[x.main] for x in t.test], [prompt[getattr(x, field)] for x in t.test])
           for kind, field in (("temporal", "temporal_negative"), ("semantic", "semantic_negative"))}
  clips = list(prompt)
  return models, [evaluate.Benchmark("GenState (rendered)", "genstate", space, pool_data),
                  evaluate.Benchmark("Comp pairs (rendered)", "comp", space, pairs),
                  evaluate.Benchmark("R@K (rendered)", "gallery", space, ([prompt[c] for c in clips], clips,
                                                                         np.arange(len(clips))))]


def user_suite(config, workdir: Path) -> tuple[list[evaluate.Model], list[evaluate.Benchmark]]:
  """A user's finished run for `configs/evaluate_all.py`: its models (restored) on its own triplets' pools and on
  R@K of every query over the test triplets' videos; never the rendered world."""
  test, encoders, store, _ = user_models(config, workdir, restore=True)
  space = f"the feature store {store.root}"
  synthetic = bool(store.metadata.get("synthetic", False))
  models = [evaluate.dual_encoder(name, space, *enc, chunk=config.eval.chunk) for name, enc in encoders.items()]
  pools = genstate.pools(test)
  pool_data = {s: (np.array([test[r].query for r in rows], object), np.array([pools[r] for r in rows], object))
               for s, rows in genstate.subsets(test).items()}
  clips = sorted({v for t in test for v in t.videos})
  row = {v: i for i, v in enumerate(clips)}
  name = Path(config.data.metadata).name
  return models, [evaluate.Benchmark(f"GenState ({name})", "genstate", space, pool_data, synthetic),
                  evaluate.Benchmark(f"R@K ({name})", "gallery", space,
                                     ([t.query for t in test], clips, np.array([row[t.main] for t in test])), synthetic)]


@common.precision_policy
def run(config, workdir: str | Path) -> dict:
  workdir = common.start_run(config, workdir, validate, RESUMABLE)
  if config.data.metadata:
    return run_user_benchmark(config, workdir)
  t = trained(config, workdir)
  overall, per = {}, {}
  for name, (texts, videos) in t.encoders.items():
    inputs = pool_inputs(t.test, texts([x.query for x in t.test]), videos)
    overall[name], per[name] = evaluate_method(evaluate.CosineScorer("text"), inputs, config.eval.chunk)
  counts = {"test_queries": len(t.test), "train_queries": len(t.world.triplets["train"]),
            "subsets": {s: len(r) for s, r in genstate.subsets(t.test).items()}}
  return _write(config, workdir, {m: overall[m] for m in METHODS}, _regroup(per), True,
                {"counts": counts, "extract": t.extract_info,
                 "backbone": t.backbone if not t.lvt else config.extract.model.name, **common.WORLD_PATH})
