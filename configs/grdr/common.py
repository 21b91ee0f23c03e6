"""GRDR: the paper's settings in one file (../shared/papers/grdr.txt §4.3), Algorithm 1 as its authors run it, and
the variants.

`configs/grdr_<dataset>.py` load this file (`vidjax.defaults.common.config_module`) and return
`get_config(<dataset>, arg)`; `vidjax.experiments.grdr` runs the result. Light on purpose (no jax, no flax): loading
a config is instant.

Variants (`configs/grdr_<dataset>.py:<variant>[,<variant>]`): `world` (the embedded SYNTHETIC polysemous world,
written as release files and a store under `<workdir>/world`, and its small retriever), `smoke` (a tiny world,
seconds: tests), `tiny` (a tiny model on any data), `rendered` (the rendered release corpus's store), `sweep`
(Figure 7).

Tables 1-2's rows (results `metrics.<setting>.<row>`, settings "inductive" and "full_corpus"): the dense rows
`dense_backbone` (the frozen backbone's cosine), `clip4clip` (CLIP4Clip seqTransf: the paper's CLIP4Clip numbers are
seqTransf's; `clip4clip_meanp` is the meanP row, an option) and `xpool` (X-Pool), each trained on the training
captions (`dense`, `eval.dense_rows`; each row's results name its model, `model`) and run alone over the pool; and
the generative rows (`grdr`, `grdr_paper`, `grdr_nv1`, `grdr_cap<N>`, `tiger`, `avg`, `t2vindexer`), each reranked by
`eval.reranker` (§4.2-4.3: X-Pool), the other reranker kept as a second reading (`readings.<name>`).

The paper's hyperparameters (§4.3): N_v = 4 views, M = 3 codebook layers of K = 128 codes (LSMDC: N_v = 1,
K = 200); T5-Small retriever; AdamW lr 1e-4, batch 512; per layer an alignment phase (3 epochs for the first layer,
1 after) and 4 co-training epochs.

Algorithm 1 as its authors run it (`train.algorithm1`; the official code, JasonCodeMaker/GRDR, `OFFICIAL` below
names each setting's file and commit, and every run's results.json lists them as `algorithm1`). Per codebook layer
m = 1..M (run.py's loop), three phases, each a fresh AdamW with a constant learning rate:
  1. alignment ("pre-train"): 3 epochs for m = 1, 1 after; loss 0.5 L_CL + 0.5 L_HC;
  2. k-means initialisation of C^(m) on the residuals r^(m), then co-training ("main"): 2 epochs; loss
     0.2 L_CL + 0.5 L_CE + 0.8 L_HC + 0.1 L_Rec + 0.3 L_RQ;
  3. fit ("fit", run.py's --enable_fit): 2 epochs; loss L_CE + L_HC; the whole tokenizer (views, decoders, every
     codebook) frozen: only the retriever trains.
  The paper's "4 epochs of co-training" are the main and fit phases' 2 + 2. C^(1..m-1) are frozen in every phase of
  layer m and C^(m) learns at 10x the learning rate; no weight decay; gradients clipped to global norm 1; L_CE with
  label smoothing 0.1; L_RQ's commitment beta 0.65. A training query's view is its k-means cluster's index among its
  video's queries (§3.2: "sub-encoder phi_i learns to align with queries in cluster i"; the official dataset's
  `token_idx`), fixed for the whole run. L_HC's targets and the decoder's teacher-forced prefix are each layer's codes
  as that layer's last phase left them (the official `.code` file of the previous loop; `hc_targets="fixed"`). The
  k-means of C^(m) runs over every view of every training video (Algorithm 1 line 10: KMeans(r^(m))), each residual
  first shifted by its prefix group's mean to the global mean (the official `norm_by_prefix`), squared-L2 Lloyd
  iterations (faiss' k-means, 100 iterations). Recall: `eval.beam_width` = 100 beams (routes, the release's
  `num_candidates`), their semantic IDs expanded to videos and de-duplicated in beam order (§4.3), at most
  `eval.candidates` = 300 of them handed to the reranker (the release's `candidate_handoff_cap`).

  The model follows the official one where the paper is silent (vidjax/models/grdr.py, held against it by
  tests/test_reference_grdr.py): views of their own length (`model.normalize_views=False`), the earlier layers'
  codebook entries as the decoder's inputs, the code temperature from 0.01 clamped to [0.01, 0.05].

  What the official code does that vidjax does not (listed in `OFFICIAL_NOT_FOLLOWED`, and results.json's
  `algorithm1.not_followed`): a pretrained T5-Small (none offline: random init); LLM pseudo queries (~50 a video;
  here the training captions, or the world's queries); each phase keeping its best epoch by a metric on the test
  split (vidjax keeps the last epoch: the test split selects nothing); the formulas where the paper is explicit and
  the code differs (L_CL on cosine / a learnable tau against z, eq. 9; L_HC summed over the earlier layers, eq. 10;
  L_RQ on z_hat, eq. 6); one linear map per view (vidjax's view MLP holds it as a special case); DiDeMo's K = 96
  (§4.3: 128); the release's later additions beyond the paper (a bucket-route loss in the fit phase, the BARS
  reordering of the expanded candidates: §4.3 keeps the beam order).

Table 3's "w/o unified co-training" is the two-stage pipeline (`methods.grdr.train_two_stage`): the tokenizer alone
(views, codebooks, decoders: L_RQ, L_Rec and a query-guided contrastive loss against the training queries'
embeddings, as the official stand-alone VideoRQVAE baseline trains it), frozen, then the retriever alone on its IDs.

L_HC's targets (`train.algorithm1.hc_targets`): "fixed" (the default, above) reads each layer's codes once, when its
last phase ends, and keeps them for every later phase, so the loss pulls back towards them; "snapshot" (an option)
re-reads the earlier layers' codes at every phase's start, so a drift during layer m's alignment phase becomes layer
m's co-training target. Either way a query's targets are those of its view. Measured (SYNTHETIC 3,000-video
polysemous world, seed 0, the earlier Algorithm 1): "fixed" keeps more of the codes (93.3% of the training views'
layer-1 codes at the end as layer 1 left them, against 87.9%) but does not retrieve better there (inductive R@1 49.7
vs 51.0, candidate recall 73.7 vs 76.7 over 300 queries: within noise).

Choices neither the paper nor the official code settles, stated where set: the view MLP width, the alignment
temperature learnable from 0.07 (the official L_CL has none).

Deviations:
  * Training schedule: every config trains Algorithm 1 (`train.schedule = "progressive"`) unless `world` says
    otherwise (its docstring). `tokenizer_first`, the project's schedule, is an option: the view MLPs alone against
    each video's query-cluster centres (`losses.view_set_alignment_loss`), k-means codebooks, frozen, the retriever
    last on those IDs (../shared/notes/grdr_world.md); it aligns views in the query space, so it needs
    latent_dim == query_dim; its learning rates (views and retriever 1e-3, views 30 epochs of 256 videos, retriever
    6 epochs) are the world's.
  * T5-Small has no pretrained weights offline; `model.t5` is its exact shape (random init), and the query side is
    the paper's (`query_encoder="t5"`: a T5 encoder over the query text, tokenized by `data.tokenizer`, by default
    the SentencePiece model of the store's own text tower; T5's 32k vocabulary is not available offline). The
    frozen-embedding query encoder (`"minilm"`: the store's `text` embeddings as memory tokens) is a named option.
    The embedded world is 128-d, has query vectors and no text, and must train in CPU minutes, so its variant
    (`world`) uses a small T5 with the frozen-feature query encoder. `query_encoder="t5_features"` adds a trained
    2-layer T5 encoder stack over those memory tokens; it costs ~2.3x the retriever's training time per step on the
    world for a level inductive recall (BENCHMARKS.md, "GRDR"), so the frozen encoder stays the world's default.
  * `query_len`: 128 tokens (the official collate_fn's max_length; padding is masked, so a shorter caption reads the
    same at any length); `tiny` cuts it to 32.
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
      normalize_views=False,     # the views keep their length (the official tokenizer's; True: unit views)
      # "t5": the paper's, a T5 encoder over the query text (data.tokenizer's ids) | "minilm": the frozen query
      # embeddings (the store's text kind) as memory tokens | "t5_features": a T5 encoder over those tokens
      query_encoder="t5",
      query_len=128,             # "t5": query tokens kept (the official collate_fn's 128; padding is masked)
      query_dim=0,               # the store's text embeddings' width (intents, the dense rerank; "minilm": the input);
                                 # 0: read from the store (768 for VideoPrism LvT base, 32 for the smoke backbone)
      query_tokens=4,            # a feature query becomes this many memory tokens
      tau_init=0.07,
      t5=_t5(),
  )
  base.update(kw)
  return ml_collections.ConfigDict(base)


# The official code (JasonCodeMaker/GRDR) at the commits its files were read at: the published code (run.py,
# trainer/, models/, utils/, data/, scripts/train.sh), the release's reproduction config and its scripts.
GRDR_REPO = "JasonCodeMaker/GRDR"
CODE = "3ca3367fefb59a9ee18585412ad10b11e0acf6b1"
RELEASE = "4526a5855bb36d49e251275289de7723ef67267b"      # config/reproduction/grdr_release.json
TRAIN_SCRIPT = "14d2369531fe50f8dab2c1495e5dac860b00da54"  # scripts/Train/MSRVTT.sh
EVAL_SCRIPT = "aad76ba1ee521abc3c9445eccfffb711a159e83f"   # scripts/Eval/MSRVTT/Inductive.sh
BASELINE = "25d82dca970b2b6df07f3c699fc681159580d0ce"      # baselines/mm_semantictvr/index/train_videorqvae_v2.py


def _at(path: str, commit: str = CODE) -> str:
  return f"{path}@{commit}"


# Algorithm 1's settings the official run fixes, by name: (config key, official value, where it is set); key None: fixed
# in vidjax's code (methods/grdr.py), not a setting. results.json's `algorithm1.followed` lists each with the value the
# run used (a variant that scales one down says so there).
OFFICIAL_FOLLOWED = {
    "pretrain_epochs_first_layer": ("train.algorithm1.first_align_epochs", 3,
                                    _at("run.py") + ": config['epochs'] = 3 if loop == 0"),
    "pretrain_epochs": ("train.algorithm1.align_epochs", 1,
                        _at("run.py") + " --pretrain_epochs 1; " + _at("scripts/Train/MSRVTT.sh", TRAIN_SCRIPT)),
    "main_epochs": ("train.algorithm1.cotrain_epochs", 2,
                    _at("run.py") + " --main_epochs 2; " + _at("scripts/Train/MSRVTT.sh", TRAIN_SCRIPT)),
    "fit_epochs": ("train.algorithm1.fit_epochs", 2,
                   _at("run.py") + " --fit_epochs 2, --enable_fit default True; " +
                   _at("scripts/Train/MSRVTT.sh", TRAIN_SCRIPT) + " --enable_fit"),
    "learning_rate": ("train.algorithm1.lr", 1e-4,
                      _at("run.py") + " --pretrain_lr / --main_lr / --fit_lr 1e-4; " +
                      _at("scripts/Train/MSRVTT.sh", TRAIN_SCRIPT)),
    "batch_size": ("train.batch_size", 512, _at("scripts/train.sh") + " --batch_size 512"),
    "w1_pretrain_weights": ("train.algorithm1.phase_weights.align", (0.5, 0.0, 0.5, 0.0, 0.0),
                            _at("run.py") + " --w1_cl_loss 0.5 --w1_ce_loss 0 --w1_code_loss 0.5 --w1_cl_dd_loss 0 "
                            "--w1_rq_loss 0 (L_CL, L_CE, L_HC, L_Rec, L_RQ)"),
    "w2_main_weights": ("train.algorithm1.phase_weights.cotrain", (0.2, 0.5, 0.8, 0.1, 0.3),
                        _at("run.py") + " --w2_cl_loss 0.2 --w2_ce_loss 0.5 --w2_code_loss 0.8 --w2_cl_dd_loss 0.1 "
                        "--w2_rq_loss 0.3"),
    "w3_fit_weights": ("train.algorithm1.phase_weights.fit", (0.0, 1.0, 1.0, 0.0, 0.0),
                       _at("run.py") + " --w3_cl_loss 0 --w3_ce_loss 1 --w3_code_loss 1 --w3_cl_dd_loss 0 "
                       "--w3_rq_loss 0"),
    "current_codebook_lr_scale": ("train.algorithm1.codebook_lr_scale", 10.0,
                                  _at("utils/model_utils.py") + " get_optimizer: code_embedding.{m-1} at lr * 10"),
    "weight_decay": ("train.algorithm1.weight_decay", 0.0,
                     _at("utils/model_utils.py") + " get_optimizer: weight_decay 0.0 in every group"),
    "grad_clip_norm": ("train.algorithm1.grad_clip", 1.0,
                       _at("trainer/trainer.py") + " accelerator.clip_grad_norm_(model.parameters(), 1.)"),
    "lr_schedule": (None, "constant",
                    _at("trainer/trainer.py") + " get_constant_schedule(optimizer), a new optimizer per phase"),
    "ce_label_smoothing": ("train.algorithm1.label_smoothing", 0.1,
                           _at("trainer/trainer.py") + " F.cross_entropy(query_prob, codes_vid, label_smoothing=0.1)"),
    "rq_commitment_beta": ("train.algorithm1.beta", 0.65,
                           _at("models/video_rqvae/videorqvae.py") + " VideoRQVAE_V2(beta=0.65); " +
                           _at("utils/model_utils.py") + " create_videorqvae passes none"),
    "frozen_phase_parameters": (None, "C^(1..m-1) in every phase of layer m; the fit phase: the tokenizer",
                                _at("trainer/trainer.py") + " train(): loss_w 3 freezes code_embedding and "
                                "video_rqvae, else code_embedding[0..m-2]"),
    "view_of_query": ("train.algorithm1.view_assignment", "cluster",
                      _at("data/video_dataset.py") + " token_idx = the caption's k-means group (" +
                      _at("utils/data_utils.py") + " compute_kmeans_groupings, k = N_v)"),
    "hc_targets": ("train.algorithm1.hc_targets", "fixed",
                   _at("run.py") + " prev_id = the previous loop's last checkpoint's .code, for all three phases"),
    "codebook_kmeans_iterations": ("train.algorithm1.kmeans_iters", 100,
                                   _at("trainer/evaluator.py") + " kmeans(niter=100) in do_epoch_encode"),
    "codebook_kmeans_metric": ("train.algorithm1.kmeans_metric", "l2",
                               _at("trainer/evaluator.py") + " faiss.Kmeans (not spherical)"),
    "codebook_kmeans_prefix_centred": ("train.algorithm1.kmeans_prefix_centred", True,
                                       _at("trainer/evaluator.py") + " norm_by_prefix before kmeans"),
    "views_unnormalised": ("model.normalize_views", False,
                           _at("models/video_rqvae/encoder.py") + " VideoLatentEncoder_V2: a map per view, no "
                           "normalisation"),
    "code_temperature": (None, "logit scale exp(4.605) clamped to [20, 100]",
                         _at("models/grdr.py") + " GRDR.logit_scale (vidjax.models.grdr CODE_TAU_RANGE)"),
    "decoder_inputs": (None, "the earlier layers' codebook entries", _at("models/grdr.py") +
                       " code_embedding = the quantizer's embeddings (vidjax.models.grdr GRDR.decode)"),
    "num_views": ("model.num_views", 4, _at("scripts/train.sh") + " --num_latent_tokens 4"),
    "codebook_layers": ("model.num_layers", 3, _at("scripts/train.sh") + " --max_length 3"),
    "codebook_size": ("model.num_codes", 128, _at("scripts/train.sh") + " --code_num 128 (MSR-VTT, ActivityNet)"),
    "query_tokens": ("model.query_len", 128, _at("data/video_dataset.py") + " collate_fn max_length=128"),
    "num_candidates_routes": ("eval.beam_width", 100,
                              _at("config/reproduction/grdr_release.json", RELEASE) + " num_candidates 100; " +
                              _at("scripts/Eval/MSRVTT/Inductive.sh", EVAL_SCRIPT) + " (beams, before the IDs expand)"),
    "candidate_handoff_cap": ("eval.candidates", 300,
                              _at("config/reproduction/grdr_release.json", RELEASE) + " candidate_handoff_cap 300"),
}

# What the official code does that vidjax does not: (official, where, vidjax, why).
OFFICIAL_NOT_FOLLOWED = {
    "pretrained_t5": ("t5-small from HuggingFace", _at("trainer/trainer.py") + " T5ForConditionalGeneration."
                      "from_pretrained", "random init", "no pretrained T5 offline"),
    "pseudo_queries": ("captions + ~50 GPT pseudo queries a video (--use_pseudo_queries)",
                       _at("scripts/Train/MSRVTT.sh", TRAIN_SCRIPT), "the training captions (the world: its queries)",
                       "no LLM offline; PseudoQueries plugs a user's in"),
    "checkpoint_selection": ("each phase keeps its best epoch by test-split retrieval", _at("trainer/trainer.py") +
                             " safe_save(current_metric) with eval_retrieval(test_dataset)", "the last epoch",
                             "the test split selects nothing in vidjax"),
    "cl_form": ("raw dot products of the summed decoder states and the video's last residual, no temperature",
                _at("trainer/trainer.py") + " compute_contrastive_loss", "cos(z, h^(m)) / learnable tau",
                "the paper is explicit (eq. 9)"),
    "hc_reduction": ("mean over the earlier layers", _at("trainer/trainer.py") + " code_loss", "sum over them",
                     "the paper is explicit (eq. 10)"),
    "rq_form": ("per layer, element means on the normalised residual, then their mean",
                _at("models/video_rqvae/vq.py") + " VectorQuantizer.forward", "eq. 6 on z_hat and z",
                "the paper is explicit (eq. 6)"),
    "view_encoder": ("one linear map per view", _at("models/video_rqvae/encoder.py") + " MLPLayers([in_dim, e_dim])",
                     "W2 GELU(W1 f) + S f per view (model.hidden)", "models/grdr.py (the linear map is its W1 = W2 = 0 "
                     "case, which vidjax.convert.grdr writes)"),
    "didemo_codebook_size": (96, _at("scripts/train.sh") + " --code_num 96 (DiDeMo)", 128,
                             "the paper is explicit (§4.3: K = 128)"),
    "fit_bucket_route_loss": ("w3_bucket_route_loss 0.10", _at("scripts/Train/MSRVTT.sh", TRAIN_SCRIPT), "none",
                              "a loss added after the paper"),
    "bars_reorder": ("candidates reordered by beam score - 0.5 log(1 + bucket size) before the cap",
                     _at("scripts/Eval/MSRVTT/Inductive.sh", EVAL_SCRIPT) + " --inference_reorder_by_access_score",
                     "beam order", "§4.3: 'we preserve the beam ranking order'"),
}


# The released scripts' per-dataset shapes (scripts/train.sh): LSMDC N_v = 1 (written "41"), K = 200; DiDeMo K = 96.
OFFICIAL_LSMDC = {"num_views": ("model.num_views", 1, _at("scripts/train.sh") + " --num_latent_tokens 41 [sic] (LSMDC; "
                                "§4.3: N_v = 1)"),
                  "codebook_size": ("model.num_codes", 200, _at("scripts/train.sh") + " --code_num 200 (LSMDC)")}


def official_section(dataset: str) -> ml_collections.ConfigDict:
  """`OFFICIAL_*` for `dataset` as a config section (`official`): what results.json's `algorithm1` record is built
  from. DiDeMo's official K = 96 is not followed (§4.3's K = 128)."""
  table = {**OFFICIAL_FOLLOWED, **(OFFICIAL_LSMDC if dataset == "lsmdc" else {})}
  followed = {k: dict(key=key, official=v, source=src) for k, (key, v, src) in table.items()
              if not (dataset == "didemo" and k == "codebook_size")}
  skipped = {k: dict(official=v, source=src, vidjax=ours, why=why)
             for k, (v, src, ours, why) in OFFICIAL_NOT_FOLLOWED.items()
             if dataset == "didemo" or not k.startswith("didemo")}
  return ml_collections.ConfigDict(dict(
      repo=GRDR_REPO, commits=dict(code=CODE, release=RELEASE, train_script=TRAIN_SCRIPT, eval_script=EVAL_SCRIPT,
                                   baseline=BASELINE),
      followed=followed, not_followed=skipped))


def _algorithm1(**kw) -> ml_collections.ConfigDict:
  """Algorithm 1 as its authors run it (the module docstring; `OFFICIAL_FOLLOWED` names each value's source)."""
  base = dict(
      first_align_epochs=3, align_epochs=1, cotrain_epochs=2, fit_epochs=2,  # per layer: alignment, co-training, fit
      lr=1e-4,                                            # every phase (constant; a new optimizer per phase)
      # (L_CL, L_CE, L_HC, L_Rec, L_RQ) per phase
      phase_weights=dict(align=(0.5, 0.0, 0.5, 0.0, 0.0), cotrain=(0.2, 0.5, 0.8, 0.1, 0.3),
                         fit=(0.0, 1.0, 1.0, 0.0, 0.0)),
      codebook_lr_scale=10.0, weight_decay=0.0, grad_clip=1.0, label_smoothing=0.1, beta=0.65,
      # a query's view: "cluster" (its k-means cluster's index, fixed: the paper's and the official) or "matched"
      # (the best permutation between a video's views and its intents, re-read at each phase's start: vidjax's earlier)
      view_assignment="cluster",
      # L_HC's targets (module docstring): "fixed" (each layer's codes as its last phase left them) | "snapshot"
      hc_targets="fixed",
      kmeans_iters=100, kmeans_metric="l2", kmeans_prefix_centred=True,  # the k-means initialisation of C^(m)
  )
  base.update(kw)
  return ml_collections.ConfigDict(base)


def _train(**kw) -> ml_collections.ConfigDict:
  base = dict(
      batch_size=512,                                    # §4.3 (every phase over the training queries)
      # "progressive": Algorithm 1 (`algorithm1`); "tokenizer_first": the project's schedule (module docstring):
      # views aligned with the query-cluster centres, codebooks by k-means then frozen, the retriever trained last
      schedule="progressive",
      algorithm1=_algorithm1(),
      # tokenizer_first's views phase, and TIGER's RQ-VAE (over videos); their AdamW's weight decay (PyTorch's
      # default) and k-means iterations
      view_epochs=30, view_lr=1e-3, view_batch_size=256, use_weight=0.5, weight_decay=0.01, kmeans_iters=20,
      # a retriever trained alone on fixed IDs (tokenizer_first, TIGER, T2VIndexer): epochs over the queries, its lr
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
  # On fewer test queries Tables 1-3's other rows are left out, recorded in `clipped` (vidjax.experiments.grdr.TABLE_ROWS;
  # `vidjax.defaults.common.TABLE_MIN_QUERIES` says why); 0 runs them on any data
  c.table_min_queries = common.TABLE_MIN_QUERIES
  # A converted official GRDR checkpoint (`python -m vidjax.convert --from grdr`): the run evaluates it as released
  # (`vidjax.methods.grdr_release`: its own model, its IDs for every pool video, queries tokenized as the official
  # collator), nothing trains; `dense.init_checkpoint` (an X-Pool conversion) then reranks, reading the queries of
  # `data.rerank_text_kind`. "" = the run trains its rows.
  c.init_checkpoint = ""
  c.model = _model(**(dict(num_views=1, num_codes=200) if dataset == "lsmdc" else {}))
  c.train = _train()
  c.eval = ml_collections.ConfigDict(dict(
      # B: beams (routes) before their semantic IDs expand to videos (§4.3, §4.7: "We select beam size 100"; the
      # release's num_candidates 100)
      beam_width=100,
      # at most this many de-duplicated videos, in beam order, handed to the reranker (the release's
      # candidate_handoff_cap 300); 0: every video the beams bring
      candidates=300,
      capped_row=True,         # also report the main model at a capped budget (results "grdr_cap<N>"):
      capped_beam_width=250,   # the project's earlier default reading, beam 250 cut at 150 videos
      capped_candidates=150,
      dense_candidates=150,    # the dense row's candidate recall is its R@this when no cap is set (the paper's 100-150)
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
      # "clip4clip" (CLIP4Clip seqTransf, the paper's CLIP4Clip row), "clip4clip_meanp" (meanP), "xpool" (trained
      # anyway when it is the reranker)
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
  c.official = official_section(dataset)  # Algorithm 1's official settings, their sources (results' `algorithm1`)
  protocol, split = PROTOCOLS[dataset]
  c.data = ml_collections.ConfigDict(dict(
      features="",            # a feature store (configs/prepare.py): `clip` per video, `text` per caption / paragraph
      clip_kind="clip", text_kind="text",   # the text embeddings: the query intents, the dense rerank, and "minilm"'s input
      rerank_text_kind="",    # the X-Pool rerank's query embeddings with init_checkpoint ("" = text_kind; X-Pool's own
                              # text tower's: python -m vidjax.convert.embed_text writes them as xpool_text)
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
  stand in for frozen all-MiniLM-L6-v2 sentence embeddings (query_encoder "minilm").

  Its `grdr` row trains the project's `tokenizer_first`; Algorithm 1 as its authors run it is `grdr_paper` (and
  Table 3's rows), with one stated scale-up: the rate 1e-3 (`train.algorithm1.lr`; the official 1e-4 is for a
  pretrained T5-Small, the world's retriever starts from random weights, as tokenizer_first's retriever at 1e-3).
  Measured on a 2,000-video world (seed 0, backbone-cosine rerank, beam 100, cap 300; candidate recall, inductive
  200 / full corpus 2,000 videos): Algorithm 1 at 1e-4 66.5 / 11.0, at 1e-3 84.5 / 29.5; its N_v = 1 83.0 / 15.0
  and its two-stage ablation 84.5 / 16.0 (so more views and co-training both pay on the full corpus, as the paper's
  Table 3 says); tokenizer_first 97.0 / 55.5. Algorithm 1 is not the world's default because it recalls 12.5 / 26
  points less than tokenizer_first (docs/methods/grdr.md, "The synthetic world")."""
  c.world = ml_collections.ConfigDict(dict(num_videos=10_000, dim=128, train_queries=12, test_queries=1, frames=12))
  c.train.schedule = "tokenizer_first"
  c.train.algorithm1.lr = 1e-3  # the docstring's scale-up (a random-init retriever)
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
  # under an hour on 2 CPU cores (docs/benchmarks_history.md, "The whole real path in one go")
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
  c.table_min_queries = 0  # every row on the tiny data the tests read them on
  c.model.num_codes = 16
  c.model.num_layers = 2
  c.model.hidden = 32
  c.model.query_dim = 128
  c.model.t5 = _t5(d_model=32, num_heads=2, d_kv=16, d_ff=64, encoder_layers=1, decoder_layers=1, dropout_rate=0.0)
  c.train.batch_size = 64
  c.model.latent_dim = 128   # = query_dim: the tokenizer_first schedule aligns views in the query space
  c.train.algorithm1.update(first_align_epochs=1, align_epochs=1, cotrain_epochs=1, fit_epochs=1, kmeans_iters=5)
  c.train.update(kmeans_iters=5, view_epochs=2, view_batch_size=64, retriever_epochs=1)
  c.model.query_len = 32  # captions fit
  # the capped row at the main beam (one beam-search compilation for both rows), cut at 5
  c.eval.update(beam_width=8, capped_beam_width=8, capped_candidates=5, latency_queries=3)
  c.baselines.update(num_layers=2, num_codes=16, hidden=(32,), latent_dim=16,
                     collision_codes=512)  # up to every video of a small corpus on one ID
  c.train.progress = False
  tiny_dense = _dense.get_config("msrvtt", "tiny")  # the dense rows' tiny schedules: 4 frames, one epoch, batch 16
  c.dense = ml_collections.ConfigDict(dict(init_checkpoint="", model=tiny_dense.model, train=tiny_dense.train))
