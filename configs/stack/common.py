"""The composed stack's settings (`configs/stack_<dataset>.py` load this file): a CAST config plus the stack's stages.

The stack (`vidjax.experiments.stack`) trains and reads the CAST run of the same config (its world or feature
store, its CVR benchmark, its trained CAST and Full-Ensemble weights), adds a rerank stage and evaluates
corpus-scale Consistent Video Retrieval: every query against every clip of the evaluation split.

    stack.recall     "dense" (exact DenseIndex) or "grdr" (GRDR's generative recall, then its dense rerank)
    stack.k_recall   K candidates of the recall stage (100: the recall K of VEDJE's A.7 sweep and of GRDR's
                     rerank, and the K of `bench/stack_latency.py`)
    stack.rerank_k   candidates the rerank stage passes on to CAST (100: all of them; see below)
    stack.k          results returned (10: R@10 and the confusion rates read the top 10)

The rerank stage (`stack.reranker`): "vedje" on a store prepared with the clips' frame tokens
(`configs/prepare.py`: the composed stack as designed, recall -> VEDJE -> CAST; section `vedje`), or "xpool" on the
same stores (X-Pool, GRDR's reranker, over the clips' frame features; section `dense`). VEDJE reads
frame-local caches and captions, which a space of one embedding per clip and per caption does not have (the
procedural world, a store of clip / text embeddings only); there the stage is "pair":
`vidjax.models.pair.PairReranker`, a learned bilinear correction to the recall score trained on the recall
stage's hard candidates (its docstring says why not an MLP). Its settings are vidjax's (no paper has it): AdamW
lr 1e-3, batch 256, one epoch (it overfits after), 32 candidates a training query, tau 0.1.

Why the rerank stage keeps all 100 candidates by default: a text query cannot say which of the videos showing
its step it means, so a text-side rerank that keeps fewer candidates than there are such videos cuts the
query's clip before CAST (which reads the context) can find it (`rerank_k_sweep` in results.json measures it;
BENCHMARKS.md, "Composed stack"); VEDJE's own default K = 20 (A.7) is for text-to-video retrieval, where one
video is the answer.
"""
from __future__ import annotations

from pathlib import Path

import ml_collections

from vidjax.defaults import common

_CONFIGS = Path(__file__).resolve().parents[1]
vedje_defaults = common.config_module(_CONFIGS / "vedje" / "common.py")  # the VEDJE rerank stage
grdr = common.config_module(_CONFIGS / "grdr" / "common.py")  # GRDR's recall
dense = common.config_module(_CONFIGS / "dense" / "common.py")  # the X-Pool rerank stage
cast = common.config_module(_CONFIGS / "cast" / "common.py")  # CAST's half


def get_config(dataset: str, arg: str | None, *, eval_split: str, identity_rule: str,
               variants: dict | None = None) -> ml_collections.ConfigDict:
  """The CAST config of `dataset` plus the stack's fields, then the variants of `arg` (CAST's, with `smoke`
  shrinking the stack's stages too)."""
  c = cast.default_config(dataset=dataset, epochs=cast.EPOCHS["videoprism"][dataset], eval_split=eval_split,
                          identity_rule=identity_rule)
  c.experiment = "stack"
  c.name = f"stack_{dataset}"
  c.stack = ml_collections.ConfigDict(dict(
      recall="dense",        # "dense": exact DenseIndex | "grdr": GRDR generative recall + its dense rerank
      reranker="pair",       # "pair": the PairReranker below | "vedje": VEDJE over the clips' frame tokens (a store
                             # prepared with tokens, configs/prepare.py; section `vedje`) | "xpool": X-Pool over
                             # the clips' frame features (the same stores; section `dense`)
      k_recall=100,
      rerank_k=100,
      rerank_k_sweep=(20, 50),  # full-stack rows with the rerank stage keeping fewer (results.json rerank_k_sweep)
      k=10,
      query_batch=64,        # queries per pass through the stages (metrics)
      latency_queries=100,   # queries timed one at a time (batch 1) for latency_ms
  ))
  c.rerank = ml_collections.ConfigDict(dict(
      tau=0.1,
      candidates=32,         # stage-1 candidates of each training query in its softmax (the hard negatives)
      epochs=1, batch_size=256, lr=1e-3, weight_decay=1e-4,
      log_every=50, checkpoint_every=1000, progress=True,
  ))
  c.grdr = _grdr("world")
  c.vedje = _vedje()
  c.dense = _dense()
  c.index = common.index_section()  # the dense recall stage's index (recall "dense"): exact by default
  # CAST's variants with `rendered` before `smoke` (they apply in this order whatever their order in `arg`), and
  # `smoke` shrinking the stack's stages too. `smoke` and `rendered` each set the VEDJE stage (the tiny world's or the
  # rendered corpus's): one of them.
  known = {name: v for name, v in cast.known_variants(dataset, variants).items() if name != "smoke"}
  known["rendered"] = _rendered
  known["smoke"] = lambda cfg: (cast.smoke(cfg), _smoke(cfg))
  return common.apply_variants(c, arg, known, f"configs/stack_{dataset}.py", exclusive=(("smoke", "rendered"),))


def _grdr(variants: str) -> ml_collections.ConfigDict:
  """stack.recall = "grdr": GRDR (`configs/grdr_*.py`'s embedded-world model and schedule) trained on the training
  clips with their captions as queries, one view (a clip has one caption: no intents to split), the beam as wide
  as k_recall; its query width follows the space's text embeddings. Algorithm 1 here: the stack's GRDR learns
  from one caption per clip (no query clusters for the tokenizer_first schedule to align views with)."""
  g = grdr.get_config("msrvtt", variants)
  section = ml_collections.ConfigDict(dict(model=g.model, train=g.train))
  section.model.num_views = 1
  section.train.schedule = "progressive"
  return section


def _vedje(variant: str | None = None) -> ml_collections.ConfigDict:
  """stack.reranker = "vedje": VEDJE (`configs/vedje_*.py`'s paper settings, or one of its variants) trained on
  the training clips with their step captions as queries, reranking the recall stage's candidates from caches of
  the evaluation clips (written to `<workdir>/features`). Its frames T are the store's (CAST App. A's 8 on YouCook2
  and 4 on COIN, not VEDJE's 16: one store feeds CAST and the reranker)."""
  v = vedje_defaults.get_config("msrvtt", variant)
  return ml_collections.ConfigDict(dict(model=v.model, train=v.train, precision=v.cache.precision,
                                        pair_block=v.eval.pair_block, tokens_kind=v.data.tokens_kind))


def _dense(variant: str | None = None) -> ml_collections.ConfigDict:
  """stack.reranker = "xpool": X-Pool (`configs/dense_*.py`'s paper settings, or one of its variants) trained on the
  training clips with their step captions as pseudo queries (`vidjax.methods.dense.fit_dense`), reranking the recall
  stage's candidates by the evaluation clips' frame features (kind `frames_kind`, all the store's frames up to
  `model.num_frames`)."""
  d = dense.get_config("msrvtt", variant)
  return ml_collections.ConfigDict(dict(model=d.model, train=d.train, frames_kind=d.data.frames_kind))


def _rendered(c: ml_collections.ConfigDict) -> None:
  """On the rendered release corpus's store (`launch/real_path.sh OUT full`): the VEDJE stage at its `rendered`
  model (the world's reranker; the paper's would take CPU hours), trained one epoch over the YouCook2 training step
  clips with the paper's in-batch VTM candidates (C = 8): VEDJE's own `rendered` schedule (10 epochs of stage-1
  neighbourhoods) is sized for MSR-VTT's 600 ordered-event clips and would take 10 times as long here."""
  c.vedje = _vedje("rendered")
  c.vedje.train.update(vtm_candidates="in_batch", in_batch_negatives=7, epochs=1)


def _smoke(c: ml_collections.ConfigDict) -> None:
  c.vedje = _vedje("tiny")
  c.dense = _dense("tiny")
  c.grdr = _grdr("smoke")
  c.grdr.model.latent_dim = 32
  c.stack.update(k_recall=50, rerank_k=50, rerank_k_sweep=(20,), latency_queries=8)
  c.grdr.model.num_layers = 1  # one alignment and one co-training phase (tests)
  c.rerank.update(candidates=16, epochs=2, batch_size=64, log_every=5, progress=False)
