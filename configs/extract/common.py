"""The feature extraction's settings (CAST App. A, Table 7): VideoPrism LvT base into a feature store.

Shared by `configs/extract_videoprism.py`, `configs/prepare.py` (a store per dataset: this backbone section) and
`configs/backbone_rendered.py` (the rendered corpus's backbone has the shape extraction then loads). Light on purpose
(no jax); loaded by path (`vidjax.defaults.common.config_module`).
"""
from __future__ import annotations

from pathlib import Path

import ml_collections

from vidjax.defaults import common

SHARED = Path(__file__).resolve().parents[2].parent / "shared"  # ../shared: the test SentencePiece model, the demo mp4


def default_config() -> ml_collections.ConfigDict:
  """The extraction defaults (VideoPrism LvT base, the paper's frame counts and resolution)."""
  c = ml_collections.ConfigDict()
  c.experiment = "extract_videoprism"
  c.seed = 0
  c.precision = common.precision_section()  # matmul precision per phase (README "Precision")

  c.model = ml_collections.ConfigDict()
  c.model.name = "videoprism_lvt_public_v1_base"  # or "pixel_stats" (a STAND-IN, no weights)
  c.model.checkpoint = ""          # official .npz (local or gs://); "" = random init
  # "auto": bfloat16 compute (float32 params and accumulation) on an accelerator, float32 on a CPU; "float32" for
  # bit-for-bit stores on any machine (with precision.extract="highest"); docs/scaling.md "Extraction precision"
  c.model.fprop_dtype = "auto"
  # jax.nn.dot_product_attention's backend where a layer has no logit cap: '' (JAX's choice) | 'xla' | 'cudnn' (GPU,
  # bfloat16; every stack of the public models caps its logits, which no fused kernel offers: see videoprism.attend)
  c.model.attention_impl = ""
  c.model.spm_path = ""            # a local copy of the T5 c4_en model (gs://t5-data/vocabs/cc_en.32000/sentencepiece.model)
  c.model.overrides = ml_collections.ConfigDict()  # constructor fields replacing the named config

  c.data = ml_collections.ConfigDict()
  c.data.videos = ""        # folder of videos, one video file, or a .txt / .json clip list
  c.data.annotations = ""   # annotation file (CrossTask: its root folder)
  c.data.format = ""        # 'youcook2' | 'coin' | 'crosstask' | 'msrvtt' | 'didemo' | 'activitynet' | 'lsmdc' | ''
  c.data.unit = "video"     # retrieval formats: 'video' (whole videos) | 'segment' (each timed caption)
  c.data.protocol = "captions"  # retrieval formats: 'captions' | 'paragraphs' (one text per video)
  c.data.split = ""         # annotation split to extract ('' = all)
  c.data.captions = ""      # optional JSON {caption_id: text}

  c.num_frames = 8          # CAST App. A: 8 on YouCook2, 4 on COIN / CrossTask
  c.resolution = 288
  c.aspect = "squash"       # 'squash' (official demo) | 'center_crop'
  c.batch_size = 8          # clips per step (rounded up to a multiple of the local device count)
  c.text_batch_size = 64
  c.decode_workers = 0        # decoding processes; 0 = every usable host core but one
  c.store = ""              # feature store directory; '' = <workdir>/features
  c.store_dtype = "float32" # 'float32' | 'bfloat16'
  c.save_tokens = False     # also store per-frame patch tokens [T, N, D] (VEDJE); large
  c.progress = True
  return c


def tiny_model(c: ml_collections.ConfigDict, shared: Path = SHARED) -> None:
  """A tiny random LvT (width 32, one layer each) with the VideoPrism test SentencePiece model at 36 px."""
  c.model.spm_path = str(Path(shared) / "data" / "videoprism_assets" / "test_spm.model")
  c.model.overrides = ml_collections.ConfigDict(dict(
      pos_emb_shape=(4, 2, 2), model_dim=32, num_heads=2, mlp_dim=64, num_spatial_layers=1,
      num_temporal_layers=1, num_auxiliary_layers=1, num_unimodal_layers=1, vocabulary_size=1000))
  c.resolution = 36


# The backbone `configs/backbone_rendered.py` trains on the rendered release corpus (`vidjax.methods.backbone`): the
# LvT shape at width 64, 72 px (the corpus's 64-px frames scaled so each 18-px patch is one cell of its 4 x 4 grid),
# up to 16 frames, the VideoPrism test SentencePiece model (1,000 pieces). Extraction must build the same shape.
RENDERED_SHAPE = dict(pos_emb_shape=(16, 4, 4), model_dim=64, num_heads=4, mlp_dim=256, num_spatial_layers=2,
                      num_temporal_layers=2, num_auxiliary_layers=1, num_unimodal_layers=2, vocabulary_size=1000)
RENDERED_RESOLUTION = 72


def rendered_model(c: ml_collections.ConfigDict, shared: Path = SHARED) -> None:
  """The rendered corpus's backbone shape (`RENDERED_SHAPE`) and resolution; its weights come from
  `model.checkpoint` (what `configs/backbone_rendered.py` wrote)."""
  c.model.spm_path = str(Path(shared) / "data" / "videoprism_assets" / "test_spm.model")
  c.model.overrides = ml_collections.ConfigDict(dict(RENDERED_SHAPE))
  c.resolution = RENDERED_RESOLUTION


def smoke(c: ml_collections.ConfigDict, shared: Path = SHARED) -> ml_collections.ConfigDict:
  """A tiny random model on the real demo mp4 in `shared/data/videoprism_assets`, seconds on CPU."""
  tiny_model(c, shared)
  c.data.videos = str(Path(shared) / "data" / "videoprism_assets")
  c.num_frames = 2
  c.batch_size = 2
  c.text_batch_size = 4
  c.save_tokens = True
  c.progress = False
  return c


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """What `configs/extract_videoprism.py` returns; `arg`: None (the defaults) or "smoke" (a tiny random model on the
  real demo mp4)."""
  return common.apply_variants(default_config(), arg, {"smoke": smoke}, "configs/extract_videoprism.py")
