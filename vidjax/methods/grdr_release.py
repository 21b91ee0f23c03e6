"""GRDR's released checkpoints evaluated as released (`--config.init_checkpoint=DIR`, `python -m vidjax.convert --from
grdr` wrote DIR): nothing trains; the converted model indexes every pool video by the semantic IDs its own tokenizer
gives (as the official `test` recomputes them from the checkpoint; the `.code` sidecar holds the training captions'
codes, which inference does not read), and its T5 query encoder reads the test captions tokenized as the official
data collator does them.

    model, params, record = released(DIR)                  # GRDR of the conversion's `info["model"]`, its params
    tokens = release_tokens(tokenizer, texts, length)         # T5 ids + 1 (0 = padding), eos appended, as written

The official tokenizer is t5-small's SentencePiece model through Hugging Face's T5 tokenizer: the caption as written
(no canonicalising: vidjax's own T5 path lowercases and strips punctuation, as VideoPrism's text tower does) and its
end-of-sequence token `</s>` (id 1) appended, truncated to the length with the eos kept last.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from vidjax import convert
from vidjax.models.grdr import GRDR, RetrieverConfig, TokenizerConfig
from vidjax.models.t5 import T5Config

EOS_ID = 1  # T5's `</s>` (the SentencePiece model's eos id, as t5-small's tokenizer numbers it)


def released(directory: str | Path) -> tuple[GRDR, dict, dict]:
  """(the GRDR module the conversion's params fit, those params, the conversion record) of a converted official GRDR
  checkpoint; its paths and shapes are checked against the module (`vidjax.convert.into`)."""
  _, record = convert.load(directory)
  if record.get("from") != "grdr":
    raise convert.ConversionError(f"{directory}: converted from {record.get('from')!r}; config.init_checkpoint of a "
                                  "GRDR run takes a GRDR conversion (python -m vidjax.convert --from grdr)")
  spec = (record.get("info") or {}).get("model") or {}
  try:
    tok = TokenizerConfig(**spec["tokenizer"])
    ret = dict(spec["retriever"])
    ret["t5"] = T5Config(**{**ret["t5"], "vocab_size": 0})
    model = GRDR(tok, RetrieverConfig(**ret))
  except (KeyError, TypeError, ValueError) as e:
    raise convert.ConversionError(f"{directory}: its record's model ({spec!r}) does not build a GRDR module: {e}") \
        from e
  dummy = (jnp.zeros((1, tok.feature_dim)), jnp.ones((1, 4), jnp.int32))
  init = jax.device_get(jax.jit(lambda key: model.init(key, *dummy)["params"])(jax.random.PRNGKey(0)))
  params, record = convert.into(init, directory, ("grdr",))
  return model, params, record


def vocab_size(directory: str | Path) -> int:
  """The query vocabulary (T5's ids + 1) of a converted GRDR checkpoint, from its record."""
  _, record = convert.load(directory)
  try:
    return int(record["info"]["model"]["retriever"]["vocab_size"])
  except (KeyError, TypeError) as e:
    raise convert.ConversionError(f"{directory}: its record names no query vocabulary (info.model.retriever."
                                  "vocab_size): convert the checkpoint again with python -m vidjax.convert --from grdr") \
        from e


def release_tokens(tokenizer, texts, length: int, vocab_size: int) -> np.ndarray:
  """int32 [N, length]: each text's T5 ids + 1 (0 = padding) with the eos appended, as the official collator
  (the module docstring); `vocab_size`: the converted model's query vocabulary (ids past it are an error)."""
  out = np.zeros((len(texts), length), np.int32)
  for i, text in enumerate(texts):
    ids = tokenizer.encode_one(text, add_bos=False, canonicalize=False)[: length - 1] + [EOS_ID]
    out[i, :len(ids)] = np.asarray(ids) + 1
  if out.max(initial=0) >= vocab_size:
    raise ValueError(f"grdr: the query tokenizer gives id {int(out.max()) - 1}, past the converted model's "
                     f"{vocab_size - 1} token ids: data.tokenizer must be t5-small's SentencePiece model")
  return out


def evaluate(config, corpus, pools: dict) -> tuple[dict, dict]:
  """({setting: {row: metrics}}, info) of the released checkpoint `config.init_checkpoint` over each pool: the GRDR
  row (generative recall, then the rerank) and, with `config.dense.init_checkpoint`, X-Pool alone beside it. The
  rerank is the converted X-Pool over the candidates' frames, reading `corpus.rerank_queries` when the run has them
  (`data.rerank_text_kind`), else the backbone's cosine."""
  from vidjax.methods import dense as dense_method  # pylint: disable=g-import-not-at-top
  from vidjax.methods import grdr as GM  # pylint: disable=g-import-not-at-top
  model, params, record = released(config.init_checkpoint)
  if corpus.features.shape[1] != model.tokenizer.feature_dim:
    raise ValueError(f"grdr: init_checkpoint {config.init_checkpoint} indexes {model.tokenizer.feature_dim}-d video "
                     f"features, but the store's {config.data.clip_kind!r} are {corpus.features.shape[1]}-d")
  coder = lambda features: GM.video_codes(model, params, features)  # noqa: E731  (its own IDs, as the official test)
  rerankers, scorer, dense_info = (GM.BACKBONE,), None, {}
  if config.dense.init_checkpoint:
    if corpus.frames is None:
      raise ValueError("grdr: dense.init_checkpoint reranks over per-frame features: the run reads none (set "
                       "eval.reranker='xpool')")
    if corpus.rerank_queries is not None:  # X-Pool reads its own text tower's query embeddings
      corpus = dataclasses.replace(corpus, test_queries=corpus.rerank_queries)
    split = dense_method.Split([], corpus.test_queries, np.zeros(0, np.int64), [], corpus.frames[:1],
                               corpus.features[:1])
    dense_model, dense_params, dense_info = dense_method.from_checkpoint(config.dense, "xpool", split,
                                                                         config.dense.init_checkpoint)
    scorer = dense_method.scorer(dense_model, dense_params)
    rerankers = (GM.frames_reranker("xpool", scorer, corpus),)
  table = {s: {} for s in pools}
  rows, _, _ = GM.evaluate_row(config, corpus, model, params, coder, pools, rerankers=rerankers)
  for s in pools:
    table[s]["grdr"] = {**rows[s], "model": "released"}
    if scorer is not None:
      table[s]["xpool"] = {**GM.pair_setting(corpus, pools[s], config.eval, scorer), "model": "released"}
  info = {"init_checkpoint": str(config.init_checkpoint), "checkpoint": record.get("checkpoint"),
          "sha256": record.get("sha256"), "reranker": rerankers[0].name, "xpool": dense_info,
          "rerank_text_kind": config.data.rerank_text_kind or config.data.text_kind, "trained": False}
  return table, info
