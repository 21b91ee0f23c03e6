"""BERT (uncased) WordPiece tokenization, written from scratch in pure Python.

The text tower of all-MiniLM-L6-v2 (Sentence-BERT) reads BERT uncased WordPiece ids. CAST (App. B)
mines YouCook2 identity negatives by all-MiniLM-L6-v2 caption similarity, and VEDJE reuses the same
BERT encoder as its text tower, so both need ids that match the original tokenizer exactly.

Pipeline (the same as the reference BERT tokenizer with ``do_lower_case=True``)::

  split out special tokens written literally in the text ("[CLS]", "[SEP]", ...)
  basic tokenizer:  clean text (drop NUL / U+FFFD / control chars, map whitespace to ' ')
                    -> surround CJK ideographs with spaces -> split on whitespace
                    -> lowercase -> strip accents (NFD, drop category Mn) -> split off punctuation
  wordpiece:        greedy longest-match-first over the vocab, '##' marks a word-internal piece;
                    a word longer than 100 characters or with an unmatchable rest -> [UNK]
  framing:          [CLS] pieces[:max_length - 2] [SEP], right-padded with [PAD]

Usage::

  tok = WordPieceTokenizer.from_vocab(".../vocab.txt")
  input_ids, attention_mask = tok(["chop the onions", "dice the onion"])   # int32 [B, S] each
"""
from __future__ import annotations

import os
import re
import unicodedata
from typing import Iterable, Mapping, Sequence

import numpy as np

_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# CJK Unified Ideographs blocks (BERT's definition; Hangul and kana are written with spaces
# or are handled by WordPiece like other scripts, so they are not in this list).
_CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)


def _is_whitespace(ch: str) -> bool:
  if ch in (" ", "\t", "\n", "\r"):
    return True
  return unicodedata.category(ch) == "Zs"


def _is_control(ch: str) -> bool:
  # \t \n \r are Cc but count as whitespace, not as junk to drop.
  if ch in ("\t", "\n", "\r"):
    return False
  return unicodedata.category(ch).startswith("C")


def _is_punctuation(ch: str) -> bool:
  cp = ord(ch)
  # All non-alphanumeric ASCII counts, including '$', '^', '`' which Unicode files under S*.
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
  return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


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
    # Longest first so that no special token is matched by a prefix of another.
    specials = sorted(_SPECIAL_TOKENS, key=len, reverse=True)
    self._special_re = re.compile("(" + "|".join(re.escape(s) for s in specials) + ")")

  @classmethod
  def from_vocab(cls, path: str | os.PathLike, lowercase: bool = True,
                 **kwargs) -> "WordPieceTokenizer":
    """Builds a tokenizer from a BERT `vocab.txt`; kwargs go to the constructor."""
    return cls(load_vocab(path), lowercase=lowercase, **kwargs)

  @property
  def vocab_size(self) -> int:
    return len(self.vocab)

  # ---- basic tokenizer -------------------------------------------------------------------------

  def _clean(self, text: str) -> str:
    out = []
    for ch in text:
      cp = ord(ch)
      if cp == 0 or cp == 0xFFFD or _is_control(ch):
        continue
      if _is_whitespace(ch):
        out.append(" ")
      elif self.tokenize_cjk_chars and _is_cjk(cp):
        out.append(f" {ch} ")
      else:
        out.append(ch)
    return "".join(out)

  def _split_punctuation(self, word: str) -> list[str]:
    pieces, current = [], []
    for ch in word:
      if _is_punctuation(ch):
        if current:
          pieces.append("".join(current))
          current = []
        pieces.append(ch)
      else:
        current.append(ch)
    if current:
      pieces.append("".join(current))
    return pieces

  def basic_tokenize(self, text: str) -> list[str]:
    """Splits text into words and punctuation marks (no special-token handling)."""
    words = []
    for word in self._clean(text).split():
      if self.lowercase:
        word = word.lower()
      if self.strip_accents:
        word = "".join(c for c in unicodedata.normalize("NFD", word)
                       if unicodedata.category(c) != "Mn")
      words.extend(self._split_punctuation(word))
    return words

  # ---- wordpiece -------------------------------------------------------------------------------

  def wordpiece(self, word: str) -> list[str]:
    """Greedy longest-match-first split of one word; ['[UNK]'] if it cannot be covered."""
    if len(word) > self.max_input_chars_per_word:
      return ["[UNK]"]
    pieces, start = [], 0
    while start < len(word):
      end = len(word)
      piece = None
      while start < end:
        candidate = word[start:end] if start == 0 else "##" + word[start:end]
        if candidate in self.vocab:
          piece = candidate
          break
        end -= 1
      if piece is None:
        return ["[UNK]"]
      pieces.append(piece)
      start = end
    return pieces

  def tokenize(self, text: str) -> list[str]:
    """Text -> WordPiece tokens, without [CLS]/[SEP]; literal special tokens are kept whole."""
    if not isinstance(text, str):
      raise TypeError(f"WordPieceTokenizer expects str texts, got {type(text).__name__}: {text!r}")
    tokens = []
    for i, part in enumerate(self._special_re.split(text)):
      if i % 2:  # odd parts are the captured special tokens
        tokens.append(part)
        continue
      for word in self.basic_tokenize(part):
        tokens.extend(self.wordpiece(word))
    return tokens

  # ---- ids -------------------------------------------------------------------------------------

  def encode(self, text: str, max_length: int | None = None) -> list[int]:
    """Text -> [CLS] ids [SEP], truncated to max_length (default self.max_length) ids in all."""
    max_length = self.max_length if max_length is None else max_length
    if max_length < 2:
      raise ValueError(f"max_length must be >= 2 to hold [CLS] and [SEP], got {max_length}")
    ids = [self.vocab[t] for t in self.tokenize(text)][:max_length - 2]
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
    if isinstance(texts, str):
      texts = [texts]
    max_length = self.max_length if max_length is None else max_length
    if padding not in ("longest", "max_length"):
      raise ValueError(f"padding must be 'longest' or 'max_length', got {padding!r}")
    seqs = [self.encode(t, max_length) for t in texts]
    return self.pad(seqs, max_length if padding == "max_length" else None)

  def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
    return [self.inv_vocab[int(i)] for i in ids]
