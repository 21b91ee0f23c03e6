"""GRDR: the paper's settings in one file (../shared/papers/grdr.txt §4.3), and the variants.

`configs/grdr_<dataset>.py` load this file (`vidjax.defaults.common.config_module`) and return
`get_config(<dataset>, arg)`; `vidjax.experiments.grdr` runs the result. Light on purpose (no jax, no flax): loading
a config is instant.

Variants (`configs/grdr_<dataset>.py:<variant>[,<variant>]`): `world` (the embedded SYNTHETIC polysemous world,
written as release files and a store under `<workdir>/world`, and its small retriever), `smoke` (a tiny world,
seconds: tests), `tiny` (a tiny model on any data), `rendered` (the rendered release corpus's store), `sweep`
(Figure 7).

Tables 1-2's rows (results `metrics.<setting>.<row>`, settings "inductive" and "full_corpus"): the dense rows
`dense_backbone` (the frozen backbone's cosine), `clip4clip` (CLIP4Clip meanP) and `xpool` (X-Pool), each trained on
the training captions (`dense`, `eval.dense_rows`) and run alone over the pool; and the generative rows (`grdr`,
`grdr_paper`, `grdr_nv1`, `grdr_cap<N>`, `tiger`, `avg`, `t2vindexer`), each reranked by `eval.reranker` (§4.2-4.3:
X-Pool), the other reranker kept as a second reading (`readings.<name>`).

The paper's hyperparameters (../shared/papers/grdr.txt §4.3): N_v = 4 views, M = 3 codebook layers of
K = 128 codes (LSMDC: N_v = 1, K = 200); T5-Small retriever; AdamW lr 1e-4, batch 512; per layer
an alignment phase (3 epochs for the first layer, 1 after) and 4 co-training epochs; beam size 100 and every
de-duplicated video of the beams reranked, uncapped (`eval.beam_width = 100`, `eval.candidates = 0`): §4.3 "Beam
size B is tuned per dataset to generate approximately 100-150 candidate videos per query ... Generated semantic IDs
are then mapped to videos and deduplicated", and §4.7 "We select beam size 100 as the optimal balance between
recall coverage and reranking cost". The paper sets the beam, not a candidate count: the count is what the beam
brings (N_v IDs a video, videos sharing an ID). A cap (`eval.candidates > 0`) stays an option, and the main model
is also reported at the project's earlier reading, beam 250 cut at 150 videos (`eval.capped_*`, row `grdr_cap150`).

L_HC (eq. 10, `train.hc_targets`): "we apply a hierarchical consistency (HC) loss ... to prevent the learned codes in
all m - 1 previous layers from drifting", L_HC = -sum_{l<m} [log P(c_l | c_<l, q) + log P(c_l | c_<l, v)]. The
targets c_l are "the learned codes": what layer l's training learned, i.e. each (video, view)'s layer-l code as
layer l's co-training phase (the last phase that trains C^(l), Algorithm 1 line 2 freezes it afterwards) left it.
"fixed" (the default) reads them once, when that phase ends, and keeps them for every later phase, so the loss
pulls back towards them; "snapshot" (the option) re-reads the earlier layers' codes at every phase's start, so a
drift during layer m's alignment phase becomes layer m's co-training target, which is the drift eq. 10 is there to
prevent. Either way a query's targets are those of the view its intent is matched with in the phase (the view L_CL
and L_CE read), so the teacher-forced prefix and the trained layer's target name one view. Measured (SYNTHETIC
3,000-video polysemous world, seed 0, Algorithm 1): "fixed" keeps more of the codes (93.3% of the training views'
layer-1 codes at the end as layer 1 left them, against 87.9%) but does not retrieve better there (inductive R@1 49.7
vs 51.0, candidate recall 73.7 vs 76.7 over 300 queries: within noise); the default is the paper's reading, not a
tuned choice.

Choices the paper leaves open, stated where set: loss weights lambda_1..4 = 1, commitment beta 0.25
(RQ-VAE), both temperatures learnable from 0.07, AdamW weight decay 0.01 (PyTorch's default; not on
codebooks or temperatures), view MLP width, the view <-> intent matching rule (vidjax.models.grdr).

Deviations:
  * Training schedule: the dataset configs train Algorithm 1 (`train.schedule = "progressive"`, the paper's
    progressive co-training); the embedded world (`world`) trains the project's "tokenizer_first". tokenizer_first trains the view MLPs alone against
    each video's query-cluster centres (`losses.view_set_alignment_loss`: every centre near some view, every
    view near some centre; the view <-> cluster matching is then the best permutation, `match_views`),
    fixes the IDs by k-means codebooks, and trains the retriever last on those IDs (the recipe of
    ../shared/notes/grdr_world.md). Why: on the embedded world with a random-init retriever, Algorithm 1's
    co-training pulls the views off the queries and ends below the GRDR issue's candidate-recall check, which
    tokenizer_first meets (BENCHMARKS.md, "GRDR", has both). Its learning rates (views and retriever 1e-3,
    views 30 epochs of 256 videos, retriever 6 epochs) are the world's: the paper's 1e-4 is for a pretrained
    T5. It aligns views in the query space, so it needs latent_dim == query_dim.
  * T5-Small has no pretrained weights offline; `model.t5` is its exact shape (random init), and the query side is
    the paper's (`query_encoder="t5"`: a T5 encoder over the query text, tokenized by `data.tokenizer`, by default
    the SentencePiece model of the store's own text tower; T5's 32k vocabulary is not available offline). The
    frozen-embedding query encoder (`"minilm"`: the store's `text` embeddings as memory tokens) is a named option.
    The embedded world is 128-d, has query vectors and no text, and must train in CPU minutes, so its variant
    (`world`) uses a small T5 with the frozen-feature query encoder. `query_encoder="t5_features"` adds a trained
    2-layer T5 encoder stack over those memory tokens; it costs ~2.3x the retriever's training time per step on the
    world for a level inductive recall (BENCHMARKS.md, "GRDR"), so the frozen encoder stays the world's default.
  * `query_len`: 32 tokens for caption queries, 128 for the paragraph queries of DiDeMo and ActivityNet (the paper
    does not give T5's input length; a paragraph longer than that keeps its first 128 tokens).
"""
from __future__ import annotations

from pathlib import Path

import ml_collections

from vidjax.defaults import common

_dense = common.config_module(Path(__file__).resolve().parents[1] / "dense" / "common.py")  # the dense rows' settings

DATASETS = ("msrvtt", "didemo", "activitynet", "lsmdc")


def _t5(**kw) -> ml_collections.ConfigDict:
  base = dict(d_model=512, num_heads=8, d_kv=64, d_ff=2048, encoder_layers=6, decoder_layers=6,
              dropout_rate=0.1, dtype="float32")  # T5-Small (§4.3)
  base.update(kw)
  return ml_collections.ConfigDict(base)


def _model(**kw) -> ml_collections.ConfigDict:
  base = dict(
      num_views=4, num_layers=3, num_codes=128,   # N_v, M, K (§4.3)
      latent_dim=512,            # d_z: view / codebook / decoder-output space (not given; vidjax's choice)
      hidden=1024,               # view-MLP width (not given)
      # "t5": the paper's, a T5 encoder over the query text (data.tokenizer's ids) | "minilm": the frozen query
      # embeddings (the store's text kind) as memory tokens | "t5_features": a T5 encoder over those tokens
      query_encoder="t5",
      query_len=32,              # "t5": query tokens kept (MSR-VTT / LSMDC captions fit; paragraphs are cut here)
      query_dim=0,               # the store's text embeddings' width (intents, the dense rerank; "minilm": the input);
                                 # 0: read from the store (768 for VideoPrism LvT base, 32 for the smoke backbone)
      query_tokens=4,            # a feature query becomes this many memory tokens
      tau_init=0.07,
      t5=_t5(),
  )
  base.update(kw)
  return ml_collections.ConfigDict(base)


def _train(**kw) -> ml_collections.ConfigDict:
  base = dict(
      batch_size=512, lr=1e-4, weight_decay=0.01,        # §4.3 (weight decay: PyTorch AdamW default)
      first_align_epochs=3, align_epochs=1, cotrain_epochs=4,   # Algorithm 1 schedule (§4.3)
      loss_weights=(1.0, 1.0, 1.0, 1.0),                 # lambda_1..4, eq. 12
      beta=0.25,                                         # L_RQ commitment (eq. 6)
      kmeans_iters=20,
      # L_HC's targets (eq. 10): "fixed": each layer's codes as its co-training phase left them, for every later phase
      # (the module docstring says why); "snapshot": the earlier layers' codes re-read at every phase's start
      hc_targets="fixed",
      # "progressive": Algorithm 1 (the paper); "tokenizer_first": views aligned with the query-cluster centres,
      # codebooks by k-means then frozen, the retriever trained last (the module docstring says why the world
      # uses it). Its phases: view_* (over videos) and retriever_* (over queries).
      schedule="progressive",
      # tokenizer_first's views phase, and TIGER's RQ-VAE (over videos):
      view_epochs=30, view_lr=1e-3, view_batch_size=256, use_weight=0.5,
      # a retriever trained alone on fixed IDs (tokenizer_first, Table 3's two-stage row, TIGER, T2VIndexer): as many
      # epochs over the queries as Algorithm 1's M co-training phases, at the paper's lr
      retriever_epochs=12, retriever_lr=1e-4,
      checkpoint_every=500, log_every=50, progress=True,
  )
  base.update(kw)
  return ml_collections.ConfigDict(base)


def get_config(dataset: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """What `configs/grdr_<dataset>.py` return: the paper's settings, then the variants of `arg` ("world": the
  embedded SYNTHETIC polysemous world and its small retriever; "smoke": a tiny world, seconds)."""
  if dataset not in DATASETS:
    raise ValueError(f"grdr: unknown dataset {dataset!r}; expected one of {DATASETS}")
  c = ml_collections.ConfigDict()
  c.experiment = "grdr"
  c.name = f"grdr_{dataset}"
  c.dataset = dataset
  c.seed = 0
  c.precision = common.precision_section()  # matmul precision per phase (README "Precision")
  c.strict = common.STRICT  # True: a batch size / budget larger than the data is an error, not clipped
  c.model = _model(**(dict(num_views=1, num_codes=200) if dataset == "lsmdc" else {}))
  c.train = _train()
  c.eval = ml_collections.ConfigDict(dict(
      beam_width=100,          # B (§4.3, §4.7: "We select beam size 100"; it yields ~100-150 candidate videos)
      candidates=0,            # 0: every de-duplicated video of the beams goes to the reranker, uncapped (§4.3);
                               # > 0: at most this many (a budget the paper does not set)
      capped_row=True,         # also report the main model at a capped budget (results "grdr_cap<N>"):
      capped_beam_width=250,   # the project's earlier default reading, beam 250 cut at 150 videos
      capped_candidates=150,
      dense_candidates=150,    # the dense row's candidate recall is its R@this (the paper's 100-150, upper end)
      latency_queries=100,     # queries timed one at a time (batch 1, §4.1)
      compare_single_view=True,  # also train N_v = 1 (results "grdr_nv1")
      baselines=True,          # Tables 1-2's GR baselines TIGER, AVG, T2VIndexer (`baselines`; methods.grdr_baselines)
      table3=True,             # Table 3: Algorithm 1 without the multi-view tokenizer / unified co-training / L_HC / L_CL
      index_frames=12,         # Figure 4's frame-level index: frames per video kept (X-Pool's 12, the paper's reranker)
      # The GR rows' reranker (results' `reranker`): "xpool", the paper's (§4.3: "we employ T5-Small as the generative
      # retriever and X-Pool for dense reranking"; §4.2 likewise for every GR baseline), trained on the corpus's
      # training captions (section `dense`); "dense_backbone": the frozen backbone's cosine
      # (the store's text and clip embeddings). The other one, when available, is a second reading of every GR row
      # (`readings.<name>`).
      reranker="xpool",
      # Tables 1-2's trained dense rows (`vidjax.methods.dense`, section `dense`), each alone over the pool:
      # "clip4clip" (CLIP4Clip meanP), "clip4clip_seqtransf", "xpool" (trained anyway when it is the reranker)
      dense_rows=("clip4clip", "xpool"),
  ))
  # The trained dense rows' model and schedules (configs/dense/common.py: CLIP4Clip's and X-Pool's papers), trained on
  # the same training captions as GRDR's pseudo queries, over the store's per-frame features (`data.frames_kind`).
  c.dense = _dense.dense_section(dataset)
  # The GR baselines of Tables 1-2 (`vidjax.methods.grdr_baselines`). §4.2: "We configure all baseline methods with 4
  # codebook layers of size 256". TIGER (Rajput et al. 2023 §3.1, §4.1): RQ-VAE encoder widths 512-256-128 (the
  # decoder mirrors them), 32-d latent, commitment beta 0.25, and one collision token appended to every ID (its
  # vocabulary: up to `collision_codes` videos per RQ-VAE ID; TIGER's IDs are 3 codes + this token, here M = 4 codes
  # + this token). AVG: TIGER + a cross-modal alignment loss in the RQ-VAE, its weight and temperature (neither GRDR
  # nor this project's reading of AVG gives them: vidjax's choice). The RQ-VAE trains with `train.view_*`, the
  # retrievers with `train.retriever_*`.
  c.baselines = ml_collections.ConfigDict(dict(num_layers=4, num_codes=256, hidden=(512, 256, 128), latent_dim=32,
                                               beta=0.25, collision_codes=256, align_weight=1.0, align_tau=0.07))
  c.index = common.index_section()  # the dense row's index (Table 1's exact ceiling; an ANN backend shows its cost)
  protocol, split = PROTOCOLS[dataset]
  c.model.query_len = 128 if protocol == "paragraphs" else 32
  c.data = ml_collections.ConfigDict(dict(
      features="",            # a feature store (configs/prepare.py): `clip` per video, `text` per caption / paragraph
      clip_kind="clip", text_kind="text",   # the text embeddings: the query intents, the dense rerank, and "minilm"'s input
      frames_kind="frame_clip",  # per-frame features of the dense rows and the X-Pool rerank: [T, D_v] frame
                              # embeddings in the text space (configs/prepare.py's kind; the worlds write it too) or
                              # [T, P, D_v] patch tokens averaged over P ("tokens": not in the text space)
      tokenizer="",           # query_encoder "t5": a SentencePiece model ("": the one the store's text tower used)
      annotations="",         # the test split's file (MSR-VTT: MSRVTT_JSFUSION_test.csv; DiDeMo test_data.json; ...)
      video_list="",          # MSR-VTT: optional id list of the test videos
      protocol=protocol, split=split,
      train_annotations="",   # the training split's file: each caption is a pseudo query of its video (§4.3)
      train_video_list="",    # MSR-VTT: the training id list (train_list_jsfusion.txt: the 9k)
      train_split="train" if dataset == "msrvtt" else "",  # MSR-VTT's JSON marks "train" (an id list replaces it)
      skip_missing=True,      # videos without features are skipped and counted (False: an error)
  ))
  # Declared in the order they apply, whatever their order in `arg` (`common.apply_variants`); `rendered` runs on the
  # rendered corpus's store, which the embedded world (`world`, and `smoke`, which implies it) replaces.
  return common.apply_variants(c, arg, {"world": world, "rendered": rendered, "smoke": smoke, "tiny": tiny,
                                        "sweep": sweep},
                               f"configs/grdr_{dataset}.py", exclusive=(("world", "rendered"), ("smoke", "rendered")))


# Test protocol (reader protocol, split) of each dataset (§4.1): MSR-VTT 1k-A and LSMDC per caption; DiDeMo and
# ActivityNet Captions paragraph-to-video.
PROTOCOLS = {"msrvtt": ("captions", ""), "didemo": ("paragraphs", ""), "activitynet": ("paragraphs", ""),
             "lsmdc": ("captions", "")}


def world(c: ml_collections.ConfigDict) -> None:
  """The embedded SYNTHETIC polysemous world (128-d, 10,000 videos) and a retriever sized for it: a small T5
  (d_model 128, 4 heads, d_ff 512, 2 decoder layers) with the frozen-feature query encoder, whose query vectors
  stand in for frozen all-MiniLM-L6-v2 sentence embeddings (query_encoder "minilm")."""
  c.world = ml_collections.ConfigDict(dict(num_videos=10_000, dim=128, train_queries=12, test_queries=1, frames=12))
  c.train.schedule = "tokenizer_first"  # the module docstring says why
  # The dense rows on the world's 108,000 training captions, sized to train in a few CPU minutes: one epoch each at
  # batch 128 and lr 1e-4 (a deviation: the papers train CLIP4Clip 5 epochs at batch 128, lr 1e-4, and X-Pool 15 at
  # batch 32, lr 3e-5; X-Pool's epoch here is 844 steps, ~4 minutes on 2 CPU cores at the 3.3 steps/s measured on
  # the 3,000-video world). Both start from identity maps (vidjax.models.dense).
  for paper in ("clip4clip", "xpool"):
    c.dense.train[paper].update(batch_size=128, epochs=1, lr=1e-4)
  c.train.update(retriever_epochs=6, retriever_lr=1e-3)  # the world's random-init retriever (module docstring)
  c.model = _model(latent_dim=128, hidden=256, query_dim=128, query_encoder="minilm",
                   t5=_t5(d_model=128, num_heads=4, d_kv=32, d_ff=512, encoder_layers=2, decoder_layers=2),
                   **(dict(num_views=1, num_codes=200) if c.dataset == "lsmdc" else {}))


def rendered(c: ml_collections.ConfigDict) -> None:
  """On the rendered release corpus's store (`launch/real_path.sh OUT full`): Algorithm 1 with the world's small T5
  over the query text (the paper's T5-small would take CPU hours), in the store's 64-d text space (the rendered
  backbone's width), paragraph-length queries; the Tables 1-2 rows (the dense rows at the papers' schedules over the
  store's frame tokens, TIGER, AVG, T2VIndexer, each GR row reranked by X-Pool), no Table 3 or N_v = 1 extra
  models."""
  c.model.update(latent_dim=64, hidden=256, query_dim=64,
                 t5=_t5(d_model=128, num_heads=4, d_kv=32, d_ff=512, encoder_layers=2, decoder_layers=2))
  c.eval.update(table3=False, compare_single_view=False)
  # the corpus's MSR-VTT test captions are its videos' paragraphs (96-141 pieces of the store's SentencePiece
  # model). GRDR reads the first 64, the pieces the rendered backbone's text tower read for the store's text
  # embeddings (LvT's length), so generative recall and the dense row see the same text; 128 (the paragraph
  # length the defaults give DiDeMo and ActivityNet) doubled the T5's cost, and the whole real path must run in
  # under an hour on 2 CPU cores (BENCHMARKS.md, "The whole real path in one go")
  c.model.query_len = 64


def smoke(c: ml_collections.ConfigDict) -> None:
  """A tiny world, seconds on a CPU (tests); implies `world` and `tiny`."""
  if "world" not in c:
    world(c)
  c.world.num_videos = 300
  c.world.train_queries = 6
  tiny(c)
  for paper in ("clip4clip", "xpool"):  # a few steps each (1,620 training captions: 25 steps)
    c.dense.train[paper].update(batch_size=64, epochs=1)


def _t5_scaled(t5: ml_collections.ConfigDict, width: float, depth: int) -> ml_collections.ConfigDict:
  """`t5` with its width (d_model, heads, d_ff) times `width` and its layers times `depth`, d_kv kept: T5-Base is
  T5-Small at (1.5, 2), T5-Large at (2, 4) (768 / 1024 wide, 12 / 16 heads, 12 / 24 layers a stack)."""
  return _t5(**{**t5.to_dict(), "d_model": int(t5.d_model * width), "num_heads": int(t5.num_heads * width),
                "d_ff": int(t5.d_ff * width), "encoder_layers": t5.encoder_layers * depth,
                "decoder_layers": t5.decoder_layers * depth})


def sweep(c: ml_collections.ConfigDict) -> None:
  """Figure 7's sensitivity sweep on the inductive pool (results.json's "sweep" and `metrics.sweep`, sweep.png, a
  table per axis), each row with R@1, candidate recall, candidates and latency (batch 1): one model per N_v, per
  codebook size K, per number of codebook layers M, and per T5 size (the config's schedule), and the main model at
  each beam width, uncapped (every video its beams' IDs name, §4.7: "circle size indicating average candidates").
  Adds to whatever else the config is (`world,sweep` on the embedded world).

  T5 size (§4.7: T5-Small / Base / Large): `t5_sizes` grows the config's own T5 as T5-Small grows into Base and
  Large (`_t5_scaled`: width x1.5 / x2, layers x2 / x4), so on the paper's settings they are the real three shapes;
  on the embedded world (whose T5 is d_model 128, 2 + 2 layers) they are three proportionally growing sizes
  (128 / 192 / 256 wide, 2 / 4 / 8 layers a stack; with the world's frozen query encoder, "minilm", only the
  decoder stack is a T5's), since the real ones would take CPU hours there and no pretrained T5 exists offline
  (random init at every size)."""
  t5 = c.model.t5
  c.sweep = ml_collections.ConfigDict(dict(
      num_views=(1, 2, 4, 6), num_codes=(64, 128, 256), num_layers=(2, 3, 4),
      t5_size=("small", "base", "large"),
      t5_sizes=dict(small=_t5(**t5.to_dict()), base=_t5_scaled(t5, 1.5, 2), large=_t5_scaled(t5, 2, 4)),
      beam_width=(20, 50, 100, 150, 200)))
  if c.train.batch_size <= 64:  # with tiny: a small sweep (N_v = 4, K = 16 and M = 2 are the main model's)
    c.sweep.update(num_views=(1, 4), num_codes=(8, 16), num_layers=(1, 2), beam_width=(4, 8))


def tiny(c: ml_collections.ConfigDict) -> None:
  """A tiny model and schedule, seconds on a CPU, on any data: with `world` the smoke test; on a user's store the
  real path's plumbing (model.query_dim: the store's text width). The T5 without dropout: its masks are a third of
  a tiny training step's compile time (the paper's 0.1 in every other variant; tests/test_t5.py trains through it)."""
  c.model.num_codes = 16
  c.model.num_layers = 2
  c.model.hidden = 32
  c.model.query_dim = 128
  c.model.t5 = _t5(d_model=32, num_heads=2, d_kv=16, d_ff=64, encoder_layers=1, decoder_layers=1, dropout_rate=0.0)
  c.train.batch_size = 64
  c.model.latent_dim = 128   # = query_dim: the tokenizer_first schedule aligns views in the query space
  c.train.update(first_align_epochs=1, align_epochs=1, cotrain_epochs=1, kmeans_iters=5,
                 view_epochs=2, view_batch_size=64, retriever_epochs=1)
  # the capped row at the main beam (one beam-search compilation for both rows), cut at 5
  c.eval.update(beam_width=8, capped_beam_width=8, capped_candidates=5, latency_queries=3)
  c.baselines.update(num_layers=2, num_codes=16, hidden=(32,), latent_dim=16,
                     collision_codes=512)  # up to every video of a small corpus on one ID
  c.train.progress = False
  tiny_dense = _dense.get_config("msrvtt", "tiny")  # the dense rows' tiny schedules: 4 frames, one epoch, batch 16
  c.dense = ml_collections.ConfigDict(dict(model=tiny_dense.model, train=tiny_dense.train))
