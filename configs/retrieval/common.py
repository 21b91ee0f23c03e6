"""Stage-1 text-video retrieval: the settings every `configs/retrieval_<dataset>.py` shares (jax-free, instant to
load; each dataset file calls `get_config(<dataset>, arg)`).

Zero-shot dual-encoder retrieval from a feature store (text and clip kinds, e.g. VideoPrism-LvT
embeddings from configs/extract_videoprism.py), evaluated with the standard R@K protocol in both
directions (`vidjax.data.retrieval`; its `DATASETS` gives each dataset's protocol and split). With
`data.features` empty the run writes the embedded SYNTHETIC moving-object world (`vidjax.worlds.moving_objects`)
as the dataset's release files and store under `<workdir>/world`, reads them as a user's, and labels every
output synthetic.
"""
from __future__ import annotations

import dataclasses

import ml_collections

from vidjax.data.retrieval import DATASETS
from vidjax.defaults import common
from vidjax.worlds.moving_objects import MovingObjectWorldConfig


def get_config(dataset: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """What `configs/retrieval_<dataset>.py` return; `arg` may be `smoke` (a tiny world, for tests)."""
  if dataset not in DATASETS:
    raise ValueError(f"unknown retrieval dataset {dataset!r}; known: {sorted(DATASETS)}")
  protocol, split = DATASETS[dataset]
  c = ml_collections.ConfigDict()
  c.experiment = "retrieval"
  c.name = f"retrieval_{dataset}"
  c.seed = 0  # drives the synthetic world
  c.precision = common.precision_section()  # matmul precision per phase (README "Precision")
  c.strict = common.STRICT  # True: a batch size / budget larger than the data is an error, not clipped
  c.dataset = dataset
  c.data = ml_collections.ConfigDict(dict(
      annotations="",     # the dataset's annotation file (see configs/retrieval_<dataset>.py)
      video_list="",      # MSR-VTT: optional id-list file restricting the videos (e.g. val_list_jsfusion.txt)
      features="",        # feature store directory; "" = the synthetic moving-object world (written to
                          # <workdir>/world with its annotation files, which set data.annotations)
      clip_kind="clip",   # store kind of video embeddings, keyed by video id
      text_kind="text",   # store kind of caption embeddings, keyed by caption id (paragraphs: video id)
      protocol=protocol,  # "captions" (one query per caption) or "paragraphs" (one per video)
      split=split,        # reader split to evaluate ("" = every video the file lists); with source="tfds" the
                          # TFDS split (msrvtt "test", didemo "test", activitynet "val_1")
      skip_missing=True,  # evaluate on the videos the store has (the others counted, listed in skipped_videos.txt);
                          # False: a video the annotations name without features is an error
      source="store",     # or "tfds": queries + embeddings from a built VidjaxRetrieval dataset (data.tfds)
      tfds="",            # with source="tfds": <data_dir>/vidjax_retrieval/<config>/<version>
  ))
  c.world = ml_collections.ConfigDict(dataclasses.asdict(MovingObjectWorldConfig()))
  c.eval = ml_collections.ConfigDict(dict(query_chunk=1024, gallery_chunk=4096))
  # Stage 1 is scored against the whole gallery (R@K, MdR, MnR, exact). Another index here (e.g.
  # `--config.index.backend=faiss --config.index.params.factory=HNSW32`) also searches the videos through it and
  # reports its T2V R@1/5/10 beside the exact row, as `metrics.stage1_index`.
  c.index = common.index_section()
  return common.apply_variants(c, arg, {"smoke": smoke}, f"configs/retrieval_{dataset}.py")


def smoke(c: ml_collections.ConfigDict) -> None:
  """A tiny moving-object world, seconds on a CPU (tests)."""
  c.world.update(num_train_groups=40, num_eval_groups=30)
  c.eval.update(query_chunk=64, gallery_chunk=128)
