"""Experiment `prepare`: a dataset's videos + its release annotation files -> the one feature store every method reads.

    python -m vidjax.main --config configs/prepare.py --workdir RUN --config.dataset=msrvtt \
        --config.data.videos=VIDEOS --config.data.annotations=MSRVTT_data.json,MSRVTT_JSFUSION_test.csv \
        --config.model.checkpoint=CKPT.npz --config.model.spm_path=c4_en.model

`data.annotations` takes the release files as published, comma-separated (COIN's `coin_train_70.json,
coin_test_30.json`, ActivityNet's `train.json,val_1.json`, MSVD's `youtube_mapping.txt,AllVideoDescriptions.txt`,
GenState's `train.json,test.json`; CrossTask: its release folder). One run extracts every kind the methods read,
keyed as they look them up (frame_clip: each frame's embedding in the text space, what CLIP4Clip and X-Pool read;
an LvT backbone's kind):

  CVR datasets (youcook2, coin, crosstask)   each annotated step `video#index`: clip, clip_mean, tokens, and its
                                             caption as text (CAST, the stack); YouCook2 also each whole video
                                             (id = video id: VideoComp's YouCook2-Comp reads its tokens)
  retrieval datasets (msrvtt, didemo,        each video: clip, clip_mean, tokens; text of every caption (caption
  activitynet, msvd, lsmdc)                  id: per-sentence queries and VEDJE's training text); DiDeMo and
                                             ActivityNet also every video's paragraph (video id: their
                                             paragraph-to-video test protocol)
  genstate                                   each clip the metadata names: clip, clip_mean, tokens; every query's
                                             text (query id)

Or it imports GRDR's released features instead of extracting (`data.import_features`, the folder
`download_features.py --features` wrote; `data.import_frames`, its X-Pool video features): the annotations are GRDR's
own files (`vidjax.data.annotations.grdr`), and the store gets `clip` and `text` (InternVideo2) and `frame_clip`
(X-Pool's CLIP frames), keyed as GRDR's records name them (`vidjax.data.grdr_release`); nothing is decoded, and a
video the release lacks is an error, not a skip::

    python -m vidjax.main --config configs/prepare.py --workdir PREP --config.dataset=msrvtt \
        --config.data.annotations=msrvtt_ret_train.json,msrvtt_ret_test.json \
        --config.data.import_features=dataset/features \
        --config.data.import_frames=reranker/xpool/video_features_cache/msrvtt

The valid-video rule is the same for every dataset: a video counts when it has a file under `data.videos`
(matched by id, or by the id's stem) that decodes to at least one frame. The others are listed with the reason
in `<store>/skipped_videos.txt`, counted in results.json, and every method skips them (`data.skip_missing`, the
default) or stops on them (`data.skip_missing=False`). The run is resumable (the extraction skips what the store
has) and shows progress; a video whose file changed since its features were extracted (size, modification time) is
re-extracted, and a text that changed re-embedded, each said in one line (`vidjax.extract.forget_changed_inputs`);
a video id that matches two files is an error naming both. Frames per clip follow each paper (`FRAMES`; CAST App. A:
8 on YouCook2, 4 on COIN / CrossTask; VEDJE A.2: T = 16).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from vidjax import extract as engine
from vidjax import io
from vidjax.data import genstate
from vidjax.data.annotations import annotation_paths, paragraphs, read_annotations
from vidjax.data.annotations.grdr import is_release_file
from vidjax.data.features import FeatureStore
from vidjax.data.grdr_release import RELEASE_DIRS, import_release
from vidjax.data.retrieval import read_dataset
from vidjax.data.provenance import SKIP_FILE
from vidjax.defaults.common import bad_value, check_choice, check_positive_int
from vidjax.sharding import is_writer
from vidjax.experiments import common
from vidjax.data import provenance
from vidjax.data.video import video_finder
from vidjax.extract import extract_into

CVR = ("youcook2", "coin", "crosstask")
RETRIEVAL = ("msrvtt", "didemo", "activitynet", "msvd", "lsmdc")
DATASETS = CVR + RETRIEVAL + ("genstate",)
PARAGRAPHS = ("didemo", "activitynet")  # tested paragraph-to-video: their stores also hold each video's paragraph
# Frames per clip (`num_frames` 0): CAST App. A (8 on YouCook2, 4 on COIN / CrossTask); VEDJE A.2 (T = 16) for the
# retrieval datasets (VideoComp and GRDR read the same store); GenState: VideoPrism's 16.
FRAMES = {"youcook2": 8, "coin": 4, "crosstask": 4, **{d: 16 for d in RETRIEVAL}, "genstate": 16}


def frames(c) -> int:
  return c.num_frames or FRAMES.get(c.dataset, 16)


@dataclasses.dataclass
class Plan:
  """What a dataset's release files ask the store to hold: clips per video, and texts (each with the video it
  describes: a caption's or paragraph's video, a GenState query's main clip)."""
  segments: dict[str, list[tuple[str, float | None, float | None]]]  # video id -> [(clip id, start, end)]
  texts: dict[str, str]                                              # text id -> text
  owner: dict[str, str] = dataclasses.field(default_factory=dict)    # text id -> video id

  def add_text(self, text_id: str, text: str, where: str, video_id: str) -> None:
    old = self.texts.get(text_id)
    if old is not None and old != text:
      raise ValueError(f"{where}: text id {text_id!r} has two different texts ({old!r} and {text!r})")
    self.texts[text_id] = text
    self.owner.setdefault(text_id, video_id)

  def texts_of(self, videos) -> dict[str, str]:
    """The texts of `videos` only: a text whose video has no file is not embedded (no method can use it)."""
    keep = set(videos)
    return {t: text for t, text in self.texts.items() if self.owner[t] in keep}


def plan(dataset: str, annotations: str) -> Plan:
  """The clips and texts `dataset`'s release files (`annotations`, comma-separated) name (module docstring)."""
  out = Plan({}, {})
  if dataset in CVR:
    for video in read_annotations(dataset, annotations):
      out.segments[video.video_id] = [(c.clip_id, c.start, c.end) for c in video.clips]
      for c in video.clips:
        out.add_text(c.clip_id, c.text, annotations, video.video_id)
      if dataset == "youcook2":
        out.segments[video.video_id].append((video.video_id, None, None))
  elif dataset in RETRIEVAL:
    files = [annotations] if dataset == "msvd" else annotation_paths(annotations)
    for path in files:
      records = read_dataset(dataset, path)
      for video_id in records.video_ids():
        out.segments.setdefault(video_id, [(video_id, None, None)])
      for c in records.captions + (paragraphs(records).captions if dataset in PARAGRAPHS else ()):
        out.add_text(c.caption_id, c.text, path, c.video_id)
  elif dataset == "genstate":
    for path in annotation_paths(annotations):
      for t in genstate.read_triplets(path):
        out.add_text(t.query_id, t.query, path, t.main)
        for video_id in (t.main, t.temporal_negative, t.semantic_negative, *t.distractors):
          out.segments.setdefault(video_id, [(video_id, None, None)])
  else:
    bad_value("dataset", dataset, f"one of {DATASETS}")
  return out


def validate(config) -> None:
  check_choice(config, "dataset", DATASETS)
  d = config.data
  if d.import_frames and not d.import_features:
    bad_value("data.import_frames", d.import_frames, "'' without data.import_features (the X-Pool frames are imported "
              "with GRDR's released features)")
  if d.import_features:
    if config.dataset not in RELEASE_DIRS:
      bad_value("dataset", config.dataset, f"one of {tuple(RELEASE_DIRS)} with data.import_features (GRDR's release "
                "covers these)")
    if d.videos:
      bad_value("data.videos", d.videos, "'' with data.import_features (the release's features are imported, no "
                "video is decoded)")
  elif not d.videos:
    bad_value("data.videos", "", "the folder of the dataset's videos (searched recursively, by video id)")
  if not d.annotations:
    bad_value("data.annotations", "", "the dataset's release annotation file(s), comma-separated")
  check_positive_int(config, ["batch_size", "text_batch_size", "resolution"])


def import_features(config, workdir: Path) -> dict:
  """The import path (module docstring): GRDR's released features for the videos and texts of `data.annotations`
  into the store; results.json counts what was imported and which split each annotation file is."""
  store_root = config.store or str(workdir / "features")
  d = config.data
  files = annotation_paths(d.annotations)
  for path in files:
    if not is_release_file(path):
      bad_value("data.annotations", d.annotations, "GRDR's own annotation files with data.import_features "
                f"({{video, caption}} lists, plain or gzipped: the release keys its features by their rows); {path} "
                "is not one")
  records = [(path, read_dataset(config.dataset, path)) for path in files]
  metadata = {"backbone": "internvideo2 (GRDR release)", "checkpoint": "", "random_init": False, "synthetic": False,
              "source": f"GRDR release: {d.import_features}", "frames_source": d.import_frames or "",
              "frames_backbone": "X-Pool CLIP ViT-B/32 (GRDR release)" if d.import_frames else ""}
  counts = {}
  if is_writer():
    counts = import_release(store_root, config.dataset, records, d.import_features, d.import_frames or None, metadata)
  splits = counts.pop("splits", {})
  results = common.results_dict(
      config, dataset=config.dataset, synthetic=False, metrics={"prepare": counts}, path="real",
      provenance=provenance.store_provenance(FeatureStore(store_root)), splits=splits,
      skipped_videos={"count": 0, "file": ""})
  rows = "\n".join([f"  {k:<16} {v}" for k, v in counts.items()] + [f"  {p}: {s}" for p, s in splits.items()])
  common.write_results(workdir, results, [f"prepare {config.dataset} <- GRDR release {d.import_features} -> "
                                          f"{store_root}\n{rows}"])
  return results


@common.precision_policy
def run(config, workdir: str) -> dict:
  """Prepares `config.dataset`'s store at `config.store` (default `<workdir>/features`); writes results.json."""
  workdir = common.start_run(config, workdir, validate)
  if config.data.import_features:
    return import_features(config, workdir)
  wanted = plan(config.dataset, config.data.annotations)
  path_of = video_finder(config.data.videos)
  engine.one_file_per_video(config.data.videos, wanted.segments)  # a video id found at two paths: one error
  skipped = {v: "no video file" for v in wanted.segments if path_of(v) is None}
  clips = [engine.VideoSegment(clip_id, path_of(v), start, end) for v, segs in wanted.segments.items()
           if v not in skipped for clip_id, start, end in segs]
  if not clips:
    raise ValueError(f"none of the {len(wanted.segments)} videos the annotations name has a file under "
                     f"{config.data.videos} (e.g. {list(wanted.segments)[:3]}); files are found by video id")
  store_root = config.store or str(workdir / "features")
  texts = wanted.texts_of(v for v in wanted.segments if v not in skipped)
  print(f"{config.dataset}: {len(wanted.segments) - len(skipped)} of {len(wanted.segments)} annotated videos have a "
        f"file; embedding {len(clips)} clips and the {len(texts)} of {len(wanted.texts)} texts that describe them",
        flush=True)
  with common.precision(config, "extract"):
    metrics, meta = extract_into(config, store_root, clips, texts, config.dataset, len(skipped),
                                 num_frames=frames(config))
  synthetic = provenance.is_rendered(config.data.videos)
  store = FeatureStore(store_root)
  clip_ids = [c.clip_id for c in clips]
  valid = store.complete(["clip_mean"], clip_ids)
  for v, segs in wanted.segments.items():
    if v not in skipped and any(clip_id not in valid for clip_id, _, _ in segs):
      skipped[v] = "does not decode"
  if is_writer():
    io.atomic_write_text(Path(store_root) / SKIP_FILE, "".join(f"{v}\t{why}\n" for v, why in sorted(skipped.items())))
    store.update_metadata({"synthetic": synthetic, "skipped_videos": len(skipped)})
  if skipped:
    print(provenance.skipped_line(skipped, len(wanted.segments), config.data.videos, Path(store_root) / SKIP_FILE),
          flush=True)
  metrics.update(videos=len(wanted.segments), valid_videos=len(wanted.segments) - len(skipped),
                 release_texts=len(wanted.texts))
  results = common.results_dict(
      config, dataset=config.dataset, synthetic=synthetic, metrics={"prepare": metrics},
      path="real", provenance=provenance.store_provenance(FeatureStore(store_root)),
      skipped_videos={"count": len(skipped), "file": str(Path(store_root) / SKIP_FILE)})
  rows = "\n".join(f"  {k:<16} {v:.2f}" if isinstance(v, float) else f"  {k:<16} {v}" for k, v in metrics.items())
  common.write_results(workdir, results, [f"prepare {config.dataset} -> {store_root}"
                                          + ("  [RANDOM WEIGHTS]" if meta["random_init"] else "")
                                          + ("  [SYNTHETIC VIDEOS]" if synthetic else "") + "\n" + rows])
  return results
