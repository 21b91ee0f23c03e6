"""A trained dense retriever (`vidjax.models.dense`: CLIP4Clip meanP / seqTransf, X-Pool) as a Scorer.

A rerank batch for Q queries x K candidates (the composed stack's rerank stage, `vidjax.retrieval.pipeline`)::

    text        [Q, D]          query text embeddings (the store's text kind)
    candidates  [Q, K, T, D_v]  each query's candidates' frame features
    prior       [Q, K]          optional: the previous stage's scores; -inf marks padding, which stays -inf
    -> scores   float32 [Q, K]

A gallery batch (`vidjax.evaluate.evaluate_gallery`: one gallery shared by every query) has `candidates`
`[C, T, D_v]` and gives `[Q, C]`. Running the model alone over a whole corpus (`corpus_metrics`): meanP and seqTransf
pool every video once and score by a matmul; X-Pool pools per (text, video) pair, so the corpus is scored in
blocks of `query_chunk` x `gallery_chunk` pairs (memory bounded by one block's `[q, g, D]` pooled embeddings).
"""
from __future__ import annotations

from typing import Any, Mapping

import jax
import numpy as np

from vidjax import evaluate
from vidjax.models.dense import DenseRetriever


class DenseScorer:
  """Scores (text, video) pairs with a trained `DenseRetriever`; each function jits once per input shape."""

  def __init__(self, model: DenseRetriever, params: Any):
    self.model, self.params = model, params
    apply = lambda method: jax.jit(  # noqa: E731  (params an argument: never baked into the program)
        lambda p, *args: model.apply({"params": p}, *args, method=method))
    self._pairs = apply(DenseRetriever.pair_scores)
    self._gallery = apply(DenseRetriever.similarity)
    self._text = apply(DenseRetriever.encode_text)
    self._video = apply(DenseRetriever.encode_video) if model.config.pooling != "xpool" else None

  @property
  def per_pair(self) -> bool:
    """Whether a video's embedding depends on the text (X-Pool): no video can be pooled ahead of the query."""
    return self._video is None

  def score(self, batch: Mapping[str, Any]) -> np.ndarray:
    if "text" not in batch or "candidates" not in batch:
      raise KeyError(f"a dense-retriever batch needs 'text' [Q, D] and 'candidates' ([Q, K, T, D_v] or "
                     f"[C, T, D_v]); it has {sorted(batch)}")
    text, cands = np.asarray(batch["text"], np.float32), np.asarray(batch["candidates"], np.float32)
    if cands.ndim == 3:
      return np.asarray(self._gallery(self.params, text, cands), np.float32)
    if cands.ndim != 4 or cands.shape[0] != text.shape[0]:
      raise ValueError(f"candidates must be [Q={text.shape[0]}, K, T, D_v] or [C, T, D_v], got {cands.shape}")
    scores = np.asarray(self._pairs(self.params, text, cands), np.float32)
    if "prior" in batch:  # padded candidates (-inf prior) score -inf whatever the model says
      scores = np.where(np.isneginf(np.asarray(batch["prior"], np.float32)), -np.inf, scores).astype(np.float32)
    return scores

  def text_embeddings(self, text: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """`[Q, D]` -> the normalised query embeddings `[Q, D]`."""
    return evaluate.chunked(lambda b: self._text(self.params, b["text"]), {"text": np.asarray(text, np.float32)},
                            chunk)

  def video_embeddings(self, frames: np.ndarray, chunk: int = 256) -> np.ndarray:
    """meanP / seqTransf: `[N, T, D_v]` -> one normalised embedding per video `[N, D]` (pooled once)."""
    if self.per_pair:
      raise ValueError("X-Pool pools a video per query text: there is no text-free video embedding")
    return evaluate.chunked(lambda b: self._video(self.params, b["frames"]),
                            {"frames": np.asarray(frames, np.float32)}, chunk)

  def corpus_metrics(self, text: np.ndarray, frames: np.ndarray, relevant: np.ndarray, *, query_chunk: int = 64,
                     gallery_chunk: int = 256) -> dict[str, float]:
    """R@1/5/10, MdR, MnR both ways of every query `[Q, D]` against the whole corpus `[N, T, D_v]`
    (`relevant`: int [Q], each query's video row), the model alone (`vidjax.evaluate.evaluate_gallery`)."""
    if self.per_pair:
      return evaluate.evaluate_gallery(self, {"text": text}, {"candidates": frames}, relevant,
                                       query_chunk=query_chunk, gallery_chunk=gallery_chunk)
    return evaluate.evaluate_gallery(evaluate.CosineScorer(), {"text": self.text_embeddings(text)},
                                     {"candidates": self.video_embeddings(frames)}, relevant,
                                     query_chunk=max(query_chunk, 1024), gallery_chunk=max(gallery_chunk, 4096))
