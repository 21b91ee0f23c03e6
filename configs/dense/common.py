"""Dense baselines: CLIP4Clip and X-Pool trained on a store's frame features, the frozen backbone's cosine beside them
(jax-free, instant to load; each `configs/dense_<dataset>.py` calls `get_config(<dataset>, arg)`; another method's
config that trains one carries `dense_section()`).

Rows (`rows`): `backbone` (the store's text and clip embeddings by cosine: the reference), `clip4clip_meanp` and
`clip4clip_seqtransf` (Luo et al. 2021, §3.2: mean pooling; a 4-layer transformer over frames + position
embeddings, residual, then mean pooling), `xpool` (Gorti et al. CVPR 2022, §4: text-conditioned attention pooling).

The papers' settings:
  * CLIP4Clip (§4.1-4.2 and its release): 12 frames, batch 128, 5 epochs, lr 1e-4 for the new modules (CLIP itself
    at 1e-7), Adam with weight decay 0.2, linear warm-up over 10% of the steps then cosine decay; seqTransf 4 layers,
    D / 64 heads, 77 frame-position embeddings (CLIP's context length: modeling.py sizes the table so);
  * X-Pool (§5.1 and its release): 12 frames, batch 32, lr 3e-5 for the new modules on MSR-VTT 9k (1e-5 on MSVD and
    LSMDC; CLIP at 1e-6), AdamW weight decay 0.2, warm-up 10% then cosine decay, 15 epochs (the release's default),
    1 head, dropout 0.3 (MSVD 0.4), projections initialised to the identity;
  * both: the symmetric InfoNCE over the batch's similarity matrix with CLIP's logit scale (trained to 100 by CLIP and
    fine-tuned at CLIP's tiny lr: here fixed at temperature 0.01; `model.learn_logit_scale` learns it). Every other
    pair of the batch is a negative, a second caption of the same video included: `train.<paper>.mask_same_video=
    False`, the default, as the papers train. Both official losses take the batch's diagonal as the only positives
    (X-Pool's `CLIPLoss`, CLIP4Clip's `CrossEn`), and their samplers let a video's captions share a batch (X-Pool
    shuffles every (video, caption) pair; CLIP4Clip iterates the captions on MSVD and LSMDC, and on MSR-VTT with
    `--expand_msrvtt_sentences`, its default drawing one caption per video per epoch). True leaves a video's other
    captions out of both softmaxes (vidjax's option; vidjax's dense rows trained so before it was one).

Deviations (each forced by a frozen-feature setting, and stated):
  * the text and frame towers are frozen (the store's features are the inputs): what trains is the pooling and two
    identity-initialised linear maps that stand in for fine-tuning the towers' last projections (`frame_proj`,
    `text_proj`, `vidjax.models.dense`); with them the trained rows start at the backbone's own space;
  * the frame features are the backbone's own per-frame embeddings in the joint space (`frame_clip`: VideoPrism's
    contrastive pooler applied to each frame's tokens after the space-time auxiliary encoder, so a frame's embedding
    sees the other frames, unlike CLIP's image embedding of each frame alone);
  * seqTransf's transformer starts from random weights (CLIP4Clip copies CLIP's text-transformer weights into it);
  * each trained row is evaluated after its last epoch (the papers keep the best epoch on the test split).

With `data.features` empty the run writes the embedded SYNTHETIC moving-object world as the dataset's release files and
store under `<workdir>/world` (`vidjax.worlds.moving_objects.write_world`: MSR-VTT, DiDeMo, ActivityNet, MSVD and
LSMDC layouts) and reads them as a user's.
"""
from __future__ import annotations

import dataclasses

import ml_collections

from vidjax.defaults import common
from vidjax.worlds.moving_objects import RELEASE_FILES, MovingObjectWorldConfig

ROWS = ("backbone", "clip4clip_meanp", "clip4clip_seqtransf", "xpool")
# dataset -> (reader protocol, test split, training file's reader split) as the retrieval and VEDJE configs read them;
# LSMDC (per caption) as GRDR's configs read it.
# The training file's split is asked for by name, so a file of another split given as training data (DiDeMo's
# val_data.json) is refused naming the split it holds (a file whose name states no split is taken as asked).
PROTOCOLS = {"msrvtt": ("captions", "", "train"), "didemo": ("paragraphs", "", "train"),
             "activitynet": ("paragraphs", "", "train"), "msvd": ("captions", "test", "train"),
             "lsmdc": ("captions", "", "train")}
# X-Pool's release per dataset: (lr of the new modules, dropout)
XPOOL = {"msrvtt": (3e-5, 0.3), "msvd": (1e-5, 0.4), "lsmdc": (1e-5, 0.3)}


def _schedule(**kw) -> ml_collections.ConfigDict:
  base = dict(batch_size=128, epochs=5, lr=1e-4, weight_decay=0.2, warmup_fraction=0.1,
              mask_same_video=False,  # True: a video's other captions in the batch are not negatives (not the papers')
              checkpoint_every=500, log_every=50, progress=True)
  base.update(kw)
  return ml_collections.ConfigDict(base)


def dense_section(dataset: str = "msrvtt") -> ml_collections.ConfigDict:
  """`model` and `train` of the trained rows (what `vidjax.methods.dense.fit_dense` reads), at the papers' settings
  for `dataset` (X-Pool's lr and dropout differ by dataset; its MSR-VTT 9k values elsewhere)."""
  lr, dropout = XPOOL.get(dataset, XPOOL["msrvtt"])
  return ml_collections.ConfigDict(dict(
      # A converted official checkpoint (`python -m vidjax.convert --from xpool|clip4clip`): its row (X-Pool's, or
      # CLIP4Clip's of the checkpoint's pooling) is evaluated with the released weights as they are, nothing trains,
      # and the checkpoint fixes that row's model.* values (heads, layers, logit scale); "" = every row trains.
      init_checkpoint="",
      model=ml_collections.ConfigDict(dict(
          num_frames=12,          # frames sampled uniformly per video (both papers: 12; 0 = all the store has)
          seq_layers=4,           # CLIP4Clip seqTransf depth
          seq_head_dim=64,        # ... heads = D // 64 (CLIP's rule)
          max_positions=77,       # ... frame-position embeddings (CLIP4Clip: CLIP's context length)
          xpool_heads=1,          # X-Pool: one head
          xpool_dropout=dropout,  # X-Pool: dropout after FC
          temperature=0.01,       # CLIP's logit scale 100 (fixed; see the module docstring)
          learn_logit_scale=False,
      )),
      train=ml_collections.ConfigDict(dict(
          clip4clip=_schedule(),                                     # CLIP4Clip's release
          xpool=_schedule(batch_size=32, epochs=15, lr=lr),          # X-Pool's release
      )),
  ))


def get_config(dataset: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """What `configs/dense_<dataset>.py` return; `arg`: "smoke" (a tiny world and tiny schedules: seconds, for
  tests), "tiny" (the smoke sizes on any data: the real path's plumbing), "world" (the embedded world, named),
  "rendered" (the rendered corpus's store: no world)."""
  if dataset not in PROTOCOLS:
    raise ValueError(f"dense: unknown dataset {dataset!r}; expected one of {sorted(PROTOCOLS)}")
  protocol, split, train_split = PROTOCOLS[dataset]
  c = ml_collections.ConfigDict()
  c.experiment = "dense"
  c.name = f"dense_{dataset}"
  c.dataset = dataset
  c.seed = 0  # the world, the models' init and the batches
  c.precision = common.precision_section()  # matmul precision per phase (README "Precision")
  c.strict = common.STRICT  # True: a batch size larger than the training set is an error, not clipped
  c.rows = ROWS
  c.data = ml_collections.ConfigDict(dict(
      features="",            # a feature store (configs/prepare.py): tokens, clip per video; text per caption / paragraph
                              # ("" = the SYNTHETIC moving-object world, written under <workdir>/world)
      annotations="",         # the test split's file (MSR-VTT: MSRVTT_JSFUSION_test.csv; DiDeMo: test_data.json; ...)
      video_list="",          # MSR-VTT: optional id list of the test videos
      train_annotations="",   # the training split's file: each caption (paragraph) a pseudo query of its video
      train_video_list="",    # MSR-VTT: the training id list (train_list_jsfusion.txt: the 9k)
      train_split=train_split,  # reader split of the training file (MSR-VTT's JSON marks "train"; an id list replaces it)
      protocol=protocol, split=split,
      frames_kind="frame_clip",  # per-frame features: [T, D_v] frame embeddings in the text space (the backbone's
                              # contrastive pooler per frame; configs/prepare.py writes them) or [T, P, D_v] patch
                              # tokens averaged over P ("tokens": the encoder's output, not in the text space)
      clip_kind="clip",       # the backbone row's video embeddings
      text_kind="text",       # the frozen text embeddings (queries and training captions)
      skip_missing=True,      # videos without features are skipped and counted (False: an error)
  ))
  c.update(dense_section(dataset))
  c.eval = ml_collections.ConfigDict(dict(query_chunk=64, gallery_chunk=256))  # X-Pool's blocks of pairs
  if dataset in RELEASE_FILES:
    c.world = ml_collections.ConfigDict(dataclasses.asdict(MovingObjectWorldConfig()))
    if dataset == "msvd":  # MSVD's release numbers 1,200 training videos: the world's 4 a group fit 300 groups
      c.world.num_train_groups = 300
  return common.apply_variants(c, arg, {"world": world, "rendered": rendered, "smoke": smoke, "tiny": tiny},
                               f"configs/dense_{dataset}.py", exclusive=(("world", "rendered"), ("smoke", "rendered")))


def world(c: ml_collections.ConfigDict) -> None:
  """The embedded world by name (its default with no `data.features`)."""
  if "world" not in c:
    raise ValueError(f"configs/dense_{c.dataset}.py:world: the moving-object world writes no {c.dataset} release "
                     "files; run it on a user's store (--config.data.features=...)")


def rendered(c: ml_collections.ConfigDict) -> None:
  """On the rendered release corpus's store (`launch/real_path.sh OUT full`): the papers' settings; no embedded world
  (a run without `data.features` is an error rather than a world run)."""
  if "world" in c:
    del c["world"]


def tiny(c: ml_collections.ConfigDict) -> None:
  """Tiny schedules (one epoch, small batches) and 4 frames, on any data: the smoke run's sizes."""
  c.model.update(num_frames=4, seq_layers=1)
  c.train.clip4clip.update(batch_size=16, epochs=1, lr=1e-3, log_every=5, progress=False)
  c.train.xpool.update(batch_size=16, epochs=1, lr=1e-3, log_every=5, progress=False)
  c.eval.update(query_chunk=32, gallery_chunk=64)


def smoke(c: ml_collections.ConfigDict) -> None:
  """A tiny world and `tiny`'s schedules: seconds on a CPU (tests)."""
  if "world" in c:
    c.world.update(num_train_groups=12, num_eval_groups=6)
  tiny(c)
