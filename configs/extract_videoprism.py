"""Config: extract VideoPrism features (CAST App. A, Table 7) into a feature store.

Run:

  python -m vidjax.main --config configs/extract_videoprism.py --workdir DIR \
      --config.data.videos=/data/youcook2/raw_videos \
      --config.data.annotations=../shared/data/youcook2/youcookii_annotations_trainval.json \
      --config.data.format=youcook2 \
      --config.model.checkpoint=/ckpt/flax_lvt_base_f16r288_repeated.npz \
      --config.model.spm_path=/ckpt/c4_en.model

  python -m vidjax.main --config configs/extract_videoprism.py:smoke --workdir /tmp/extract_smoke

Defaults follow the paper's VideoPrism setting: the LvT base checkpoint, 8 frames per clip
(YouCook2; use 4 for COIN / CrossTask), 288x288, pooled LvT clip embeddings + mean-pooled encoder
tokens, L2-normalized. With `model.checkpoint` empty the weights are random (the manifest and
results say `random_init: true`); the official file is
`vidjax.models.videoprism.CHECKPOINTS[model.name]`. `smoke` runs a tiny random model on the real
demo mp4 at 36 px with the VideoPrism test SentencePiece model, in seconds on CPU.
"""
from pathlib import Path

import ml_collections

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.experiment = "extract_videoprism"
  c.seed = 0

  c.model = ml_collections.ConfigDict()
  c.model.name = "videoprism_lvt_public_v1_base"
  c.model.checkpoint = ""          # official .npz (local or gs://); "" = random init
  c.model.fprop_dtype = "float32"  # or "bfloat16"
  c.model.spm_path = "gs://t5-data/vocabs/cc_en.32000/sentencepiece.model"  # c4_en; a local copy offline
  c.model.overrides = ml_collections.ConfigDict()  # constructor fields replacing the named config

  c.data = ml_collections.ConfigDict()
  c.data.videos = ""        # folder of videos, one video file, or a .txt / .json clip list
  c.data.annotations = ""   # annotation file (CrossTask: its root folder)
  c.data.format = ""        # 'youcook2' | 'coin' | 'crosstask' | '' (no annotations)
  c.data.split = ""         # annotation split to extract ('' = all)
  c.data.captions = ""      # optional JSON {caption_id: text}

  c.num_frames = 8          # CAST App. A: 8 on YouCook2, 4 on COIN / CrossTask
  c.resolution = 288
  c.aspect = "squash"       # 'squash' (official demo) | 'center_crop'
  c.batch_size = 8          # clips per step (rounded up to a multiple of the local device count)
  c.text_batch_size = 64
  c.decode_workers = 2
  c.store = ""              # feature store directory; '' = <workdir>/features
  c.store_dtype = "float32" # 'float32' | 'bfloat16'
  c.save_tokens = False     # also store per-frame patch tokens [T, N, D] (VEDJE); large
  c.progress = True

  if arg == "smoke":
    c.model.spm_path = str(SHARED / "data" / "videoprism_assets" / "test_spm.model")
    c.model.overrides = ml_collections.ConfigDict(dict(
        pos_emb_shape=(4, 2, 2), model_dim=32, num_heads=2, mlp_dim=64, num_spatial_layers=1,
        num_temporal_layers=1, num_auxiliary_layers=1, num_unimodal_layers=1, vocabulary_size=1000))
    c.data.videos = str(SHARED / "data" / "videoprism_assets")
    c.num_frames = 2
    c.resolution = 36
    c.batch_size = 2
    c.text_batch_size = 4
    c.save_tokens = True
    c.progress = False
  elif arg:
    raise ValueError(f"configs/extract_videoprism.py: unknown argument {arg!r}; expected 'smoke' or nothing")
  return c
