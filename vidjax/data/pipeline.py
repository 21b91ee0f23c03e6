"""From CVR records + a feature store to model inputs (CAST paper §2.4, App. B).

Two consumers:
  * `CVRTrainSource`: a random-access source of training examples for the Grain pipeline in
    `vidjax.train.make_batches`. Embeddings are gathered from one in-memory table per kind, so an
    example costs a few row lookups and the table is read from the store once.
  * `cvr_eval_arrays`: dense arrays of a 1-vs-9 benchmark for `vidjax.evaluate.evaluate_cvr`.

History convention (shared with `vidjax.models.cast`): the context is *left-padded* to `context_len`
with zeros and a 0 mask, oldest first, so the last slot is the anchor state v_{t-1}.
Missing training negatives (App. B: "if both are unavailable, we use zero vectors") are zero
vectors; `zero_negatives_in_loss` says whether their (constant) similarity stays in the loss
denominators as in the paper (mask 1) or is dropped (mask 0).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from vidjax.data.features import FeatureStore

NEG_CODES = {"state": 1, "identity": 2, "easy": 3}  # == vidjax.metrics STATE / IDENTITY / EASY; GT is 0


class EmbeddingTable:
  """Rows of one feature kind for a fixed id set: `rows(ids)` -> int indices, -1 for padding.

  Reading the whole set at construction makes a store that misses any id fail at once, with one
  error naming the ids (`MissingFeatureError`), before any training starts.
  """

  def __init__(self, store: FeatureStore, kind: str, ids: Sequence[str]):
    self.ids = sorted(set(ids))
    self.index = {i: n for n, i in enumerate(self.ids)}
    emb = store.get(kind, self.ids)
    # Row len(ids) is the zero vector used for padding (index -1 maps there via `gather`).
    self.emb = np.concatenate([emb, np.zeros((1,) + emb.shape[1:], np.float32)]).astype(np.float32)

  @property
  def dim(self) -> int:
    return self.emb.shape[-1]

  def rows(self, ids: Sequence[str], length: int | None = None, left_pad: bool = False) -> np.ndarray:
    """Indices of `ids`, padded with -1 to `length` (on the left when `left_pad`)."""
    rows = [self.index[i] for i in ids]
    if length is not None:
      rows = rows[-length:] if left_pad else rows[:length]
      pad = [-1] * (length - len(rows))
      rows = pad + rows if left_pad else rows + pad
    return np.asarray(rows, np.int32)

  def gather(self, rows: np.ndarray) -> np.ndarray:
    """`rows` [...] -> embeddings [..., D]; -1 gives zeros."""
    return self.emb[np.where(rows < 0, len(self.ids), rows)]


def _history_rows(clips: EmbeddingTable, context: Sequence[str], context_len: int) -> np.ndarray:
  if context_len == 0:
    return np.zeros((0,), np.int32)
  return clips.rows(context, context_len, left_pad=True)


class CVRTrainSource:
  """Training examples (App. B "Training Candidate Construction") as a random-access sequence.

  Item `i` is a dict of float32 arrays: text [D], history [L, D], history_mask [L], positive [D],
  state_negs [Ks, D], state_mask [Ks], ident_negs [Ki, D], ident_mask [Ki].
  """

  def __init__(self, instances: Sequence[Mapping], clips: EmbeddingTable, texts: EmbeddingTable,
               context_len: int, num_state: int = 3, num_identity: int = 3,
               zero_negatives_in_loss: bool = True):
    self.clips, self.texts = clips, texts
    self.zero_in_loss = zero_negatives_in_loss
    self.text = np.array([texts.index[r["target"]] for r in instances], np.int32)
    self.pos = clips.rows([r["target"] for r in instances])
    self.hist = np.stack([_history_rows(clips, r["context"], context_len) for r in instances]) \
        if instances else np.zeros((0, context_len), np.int32)
    self.state = np.stack([clips.rows(r["state_negatives"], num_state) for r in instances])
    self.ident = np.stack([clips.rows(r["identity_negatives"], num_identity) for r in instances])

  def __len__(self) -> int:
    return len(self.text)

  def __getitem__(self, i: int) -> dict[str, np.ndarray]:
    """One example (arrays without a batch dimension)."""
    return {k: v[0] for k, v in self.collate([i]).items()}

  def collate(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
    """The batch of examples `indices`, gathered at once: `[len(indices), ...]` arrays.

    Use as the `batch_fn` of `vidjax.train.make_index_batches`: a batch is then a handful of
    vectorized gathers instead of per-example Python work.
    """
    i = np.asarray(indices, np.int64)
    hist, state, ident = self.hist[i], self.state[i], self.ident[i]
    neg_mask = lambda rows: (np.ones(rows.shape, np.float32) if self.zero_in_loss  # noqa: E731
                             else (rows >= 0).astype(np.float32))
    return {
        "text": self.texts.gather(self.text[i]),
        "history": self.clips.gather(hist),
        "history_mask": (hist >= 0).astype(np.float32),
        "positive": self.clips.gather(self.pos[i]),
        "state_negs": self.clips.gather(state),
        "state_mask": neg_mask(state),
        "ident_negs": self.clips.gather(ident),
        "ident_mask": neg_mask(ident),
    }


def cvr_eval_arrays(records: Sequence[Mapping], clips: EmbeddingTable, texts: EmbeddingTable,
                    context_len: int) -> dict[str, np.ndarray]:
  """Dense arrays of a 1-vs-9 benchmark (records as written by `vidjax.data.cvr`).

  Returns:
    {text [Q, D], history [Q, L, D], history_mask [Q, L], candidates [Q, C, D], target_index [Q],
     neg_types [Q, C] (0 = GT, 1 = state, 2 = identity, 3 = easy)}.
  """
  if not records:
    raise ValueError("the CVR benchmark has no queries")
  hist = np.stack([_history_rows(clips, r["context"], context_len) for r in records]) \
      if context_len else np.zeros((len(records), 0), np.int32)
  cand = np.stack([clips.rows(r["candidates"]) for r in records])
  target = np.array([r["candidates"].index(r["target"]) for r in records], np.int32)
  types = np.array([[0 if c == r["target"] else NEG_CODES[r["negative_types"][c]] for c in r["candidates"]]
                    for r in records], np.int32)
  return {
      "text": texts.gather(np.array([texts.index[r["target"]] for r in records])),
      "history": clips.gather(hist),
      "history_mask": (hist >= 0).astype(np.float32),
      "candidates": clips.gather(cand),
      "target_index": target,
      "neg_types": types,
  }


def truncate_context(arrays: Mapping[str, np.ndarray], context_len: int) -> dict[str, np.ndarray]:
  """Keeps only the last `context_len` history slots (the Figure 6 sweep); L = 0 drops all."""
  out = dict(arrays)
  length = arrays["history"].shape[1]
  keep = slice(length - context_len, length) if context_len else slice(length, length)
  out["history"] = arrays["history"][:, keep]
  out["history_mask"] = arrays["history_mask"][:, keep]
  return out
