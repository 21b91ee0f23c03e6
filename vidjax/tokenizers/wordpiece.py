"""BERT (uncased) WordPiece tokenization on Hugging Face's `tokenizers` (Rust; no PyTorch).

The text tower of all-MiniLM-L6-v2 (Sentence-BERT) reads BERT uncased WordPiece ids. CAST (App. B)
mines YouCook2 identity negatives by all-MiniLM-L6-v2 caption similarity, and VEDJE reuses the same
BERT encoder as its text tower, so both need ids that match the original tokenizer exactly.

Pipeline (the model's own `tokenizer.json`: BertNormalizer, BertPreTokenizer, WordPiece)::

  split out special tokens written literally in the text ("[CLS]", "[SEP]", ...)
  normalizer:       clean text (drop NUL / U+FFFD / control chars, map whitespace to ' ')
                    -> surround CJK ideographs with spaces -> strip accents (NFD, drop Mn) -> lowercase
  pre-tokenizer:    split on whitespace, split off punctuation (ASCII symbols and Unicode P*)
  wordpiece:        greedy longest-match-first over the vocab, '##' marks a word-internal piece;
                    a word longer than 100 characters or with an unmatchable rest -> [UNK]
  framing:          [CLS] pieces[:max_length - 2] [SEP], right-padded with [PAD] (done here, so one
                    tokenizer serves any max_length without mutating the Rust object between calls)

The library carries its own Unicode tables, so it differs from a pure-Python BERT tokenizer (which
reads the running Python's `unicodedata`) only on characters none of our captions contain: code
points unassigned in Python's Unicode version (Python drops them, the library keeps them -> [UNK]),
~500 characters whose category is newer than the library's tables, the first 256 ideographs of CJK
Extension F (U+2B820-U+2B91F, outside the library's CJK ranges) and a word-final Greek capital sigma
(the library lowercases it to 'σ', Python to 'ς'). On all of these it gives what the model's own
`tokenizer.json` gives. `bench/wordpiece.py` times both and compares ids on every real caption.

Usage::

  tok = WordPieceTokenizer.from_vocab(".../vocab.txt")
  input_ids, attention_mask = tok(["chop the onions", "dice the onion"])   # int32 [B, S] each
"""
from __future__ import annotations

import os
from typing import Iterable, Mapping, Sequence

import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def load_vocab(path: str | os.PathLike) -> dict[str, int]:
  """Reads a BERT `vocab.txt` (one token per line, id = line number) into {token: id}."""
  try:
    with open(path, encoding="utf-8") as f:
      tokens = [line.rstrip("\n").rstrip("\r") for line in f]
  except FileNotFoundError:
    raise FileNotFoundError(f"WordPiece vocab file not found: {path}") from None
  if tokens and tokens[-1] == "":
    tokens.pop()
  vocab = {}
  for i, tok in enumerate(tokens):
    if tok in vocab:
      raise ValueError(f"{path}: line {i + 1}: token {tok!r} repeats line {vocab[tok] + 1}; "
                       "a vocab file must list each token once")
    vocab[tok] = i
  return vocab


def _check_texts(texts: Sequence[str]) -> None:
  # The library would read a tuple as a (text, pair) input and a list as pre-split words.
  for text in texts:
    if not isinstance(text, str):
      raise TypeError(f"WordPieceTokenizer expects str texts, got {type(text).__name__}: {text!r}")


class WordPieceTokenizer:
  """BERT WordPiece tokenizer: text -> (input_ids, attention_mask) int32 [B, S].

  Attributes:
    vocab: {token: id}.
    lowercase: lowercase the text (and, as in BERT uncased, strip accents).
    strip_accents: NFD + drop combining marks; None means "same as lowercase" (BERT's rule).
    max_length: default length cap including [CLS] and [SEP] (256 for all-MiniLM-L6-v2).
  """

  def __init__(self, vocab: Mapping[str, int], *, lowercase: bool = True,
               strip_accents: bool | None = None, tokenize_cjk_chars: bool = True,
               max_length: int = 256, max_input_chars_per_word: int = 100):
    missing = [t for t in _SPECIAL_TOKENS if t not in vocab]
    if missing:
      raise ValueError(f"WordPiece vocab lacks special tokens {missing}; expected a BERT vocab "
                       f"containing all of {list(_SPECIAL_TOKENS)}")
    if max_length < 2:
      raise ValueError(f"max_length must be >= 2 to hold [CLS] and [SEP], got {max_length}")
    self.vocab = dict(vocab)
    self.inv_vocab = {i: t for t, i in self.vocab.items()}
    self.lowercase = lowercase
    self.strip_accents = lowercase if strip_accents is None else strip_accents
    self.tokenize_cjk_chars = tokenize_cjk_chars
    self.max_length = max_length
    self.max_input_chars_per_word = max_input_chars_per_word
    self.pad_id = self.vocab["[PAD]"]
    self.unk_id = self.vocab["[UNK]"]
    self.cls_id = self.vocab["[CLS]"]
    self.sep_id = self.vocab["[SEP]"]
    tok = Tokenizer(models.WordPiece(self.vocab, unk_token="[UNK]",
                                     max_input_chars_per_word=max_input_chars_per_word))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=tokenize_cjk_chars,
        strip_accents=self.strip_accents, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # Matched on the raw text before normalization, case-sensitively, and kept whole.
    tok.add_special_tokens(list(_SPECIAL_TOKENS))
    self._tok = tok

  @classmethod
  def from_vocab(cls, path: str | os.PathLike, lowercase: bool = True,
                 **kwargs) -> "WordPieceTokenizer":
    """Builds a tokenizer from a BERT `vocab.txt`; kwargs go to the constructor."""
    return cls(load_vocab(path), lowercase=lowercase, **kwargs)

  @property
  def vocab_size(self) -> int:
    return len(self.vocab)

  def basic_tokenize(self, text: str) -> list[str]:
    """Splits text into words and punctuation marks (no special-token handling)."""
    _check_texts([text])
    normalized = self._tok.normalizer.normalize_str(text)
    return [word for word, _ in self._tok.pre_tokenizer.pre_tokenize_str(normalized)]

  def wordpiece(self, word: str) -> list[str]:
    """Greedy longest-match-first split of one word; ['[UNK]'] if it cannot be covered."""
    _check_texts([word])
    return [token.value for token in self._tok.model.tokenize(word)]

  def tokenize(self, text: str) -> list[str]:
    """Text -> WordPiece tokens, without [CLS]/[SEP]; literal special tokens are kept whole."""
    _check_texts([text])
    return self._tok.encode(text, add_special_tokens=False).tokens

  def encode(self, text: str, max_length: int | None = None) -> list[int]:
    """Text -> [CLS] ids [SEP], truncated to max_length (default self.max_length) ids in all."""
    max_length = self._check_max_length(max_length)
    _check_texts([text])
    ids = self._tok.encode(text, add_special_tokens=False).ids[:max_length - 2]
    return [self.cls_id, *ids, self.sep_id]

  def pad(self, sequences: Sequence[Sequence[int]],
          length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Right-pads id lists with [PAD] to `length` (default: the longest).

    Returns:
      (input_ids int32 [B, S], attention_mask int32 [B, S]) with mask 1 on real tokens.
    """
    longest = max((len(s) for s in sequences), default=0)
    length = longest if length is None else length
    if longest > length:
      raise ValueError(f"cannot pad a sequence of {longest} ids to length {length}")
    ids = np.full((len(sequences), length), self.pad_id, dtype=np.int32)
    mask = np.zeros((len(sequences), length), dtype=np.int32)
    for row, seq in enumerate(sequences):
      ids[row, :len(seq)] = seq
      mask[row, :len(seq)] = 1
    return ids, mask

  def __call__(self, texts: str | Iterable[str], max_length: int | None = None,
               padding: str = "longest") -> tuple[np.ndarray, np.ndarray]:
    """Tokenizes a batch.

    Args:
      texts: a string or B strings.
      max_length: cap on ids per text including [CLS]/[SEP] (default self.max_length).
      padding: "longest" pads to the longest text in the batch; "max_length" pads to max_length.

    Returns:
      (input_ids int32 [B, S], attention_mask int32 [B, S]).
    """
    texts = [texts] if isinstance(texts, str) else list(texts)
    if padding not in ("longest", "max_length"):
      raise ValueError(f"padding must be 'longest' or 'max_length', got {padding!r}")
    max_length = self._check_max_length(max_length)
    _check_texts(texts)
    # encode_batch_fast (tokenizers >= 0.20) skips the character offsets we never read.
    encode_batch = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
    cap = max_length - 2
    seqs = [[self.cls_id, *e.ids[:cap], self.sep_id]
            for e in encode_batch(texts, add_special_tokens=False)]
    return self.pad(seqs, max_length if padding == "max_length" else None)

  def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
    return [self.inv_vocab[int(i)] for i in ids]

  def _check_max_length(self, max_length: int | None) -> int:
    max_length = self.max_length if max_length is None else max_length
    if max_length < 2:
      raise ValueError(f"max_length must be >= 2 to hold [CLS] and [SEP], got {max_length}")
    return max_length
