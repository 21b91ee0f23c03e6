"""SentencePiece tokenization for the VideoPrism LvT text encoder.

Follows the official VideoPrism conventions (VideoPrism paper Sec. 3.2, the
video-text contrastive stage; official `tokenizers.py`): texts are canonicalized
(ASCII punctuation -> space, lowercase, whitespace collapsed, a final "."),
encoded with plain `EncodeAsIds`, a BOS is prepended only when asked (by default
only if the model defines one: the T5 c4_en model has none), an EOS is never
appended, and ids are truncated / right-padded with id 0 to a fixed length
(64), with paddings 1.0 on pad positions.
"""
from __future__ import annotations

import os
import string

import numpy as np
import sentencepiece

# The public LvT checkpoints use the T5 c4_en model (vocab 32000, pad 0, eos 1, unk 2, no BOS).
C4_EN_SPM_PATH = "gs://t5-data/vocabs/cc_en.32000/sentencepiece.model"
MAX_LENGTH = 64

_PUNCT_TO_SPACE = str.maketrans({c: " " for c in string.punctuation})


def canonicalize_text(text: str) -> str:
  """'Hello, World!' -> 'hello world.'; '' -> '.' (32 ASCII punctuation chars only; '—' is kept)."""
  text = text.translate(_PUNCT_TO_SPACE).lower()
  return " ".join(text.split()) + "."


class SentencePieceTokenizer:
  """Fixed-length SentencePiece tokenizer for the VideoPrism text tower.

  Args:
    model_path: a `.model` file; local, or any path etils.epath can read (e.g.
      `gs://...` with gcsfs installed). Defaults to the c4_en model of the public
      LvT checkpoints, which needs network access; pass a local copy offline.
  """

  def __init__(self, model_path: str | os.PathLike = C4_EN_SPM_PATH):
    self.model_path = os.fspath(model_path)
    self._sp = sentencepiece.SentencePieceProcessor()
    try:
      if "://" in self.model_path:
        from etils import epath  # Only remote paths need it.
        self._sp.LoadFromSerializedProto(epath.Path(self.model_path).read_bytes())
      else:
        if not os.path.exists(self.model_path):
          raise FileNotFoundError(f"SentencePiece model not found: {self.model_path}")
        self._sp.Load(self.model_path)
    except (OSError, RuntimeError) as e:
      if isinstance(e, FileNotFoundError):
        raise
      raise ValueError(f"cannot load SentencePiece model {self.model_path}: {e}") from None

  @property
  def vocab_size(self) -> int:
    return self._sp.GetPieceSize()

  @property
  def bos_id(self) -> int:
    return self._sp.bos_id()

  @property
  def eos_id(self) -> int:
    return self._sp.eos_id()

  @property
  def pad_id(self) -> int:
    return self._sp.pad_id()

  def encode_one(self, text: str, add_bos: bool | None = None, canonicalize: bool = True) -> list[int]:
    """Unpadded, untruncated ids of one text (BOS by the same rule as `encode`, never an EOS)."""
    if not isinstance(text, str):
      raise TypeError(f"expected a str, got {type(text).__name__}: {text!r}")
    if canonicalize:
      text = canonicalize_text(text)
    ids = list(self._sp.EncodeAsIds(text))
    if add_bos is None:
      add_bos = self.bos_id >= 0
    if add_bos:
      if self.bos_id < 0:
        raise ValueError(f"add_bos=True but SentencePiece model {self.model_path} has no BOS id")
      ids = [self.bos_id] + ids
    return ids

  def encode(self, texts: list[str], max_length: int = MAX_LENGTH, add_bos: bool | None = None,
             canonicalize: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Tokenizes a batch of texts to fixed length.

    Args:
      texts: B strings.
      max_length: L; longer sequences keep their first L ids.
      add_bos: prepend BOS; None means "if the model has one" (c4_en has not).
      canonicalize: apply `canonicalize_text` first (the official default).

    Returns:
      ids int32 `[B, L]` (right-padded with id 0), paddings float32 `[B, L]` (1.0 = pad).
    """
    if isinstance(texts, str):
      raise TypeError("encode expects a list of strings, got a single str")
    if max_length < 1:
      raise ValueError(f"max_length must be >= 1, got {max_length}")
    ids = np.zeros((len(texts), max_length), np.int32)
    paddings = np.ones((len(texts), max_length), np.float32)
    for i, text in enumerate(texts):
      seq = self.encode_one(text, add_bos=add_bos, canonicalize=canonicalize)[:max_length]
      ids[i, :len(seq)] = seq
      paddings[i, :len(seq)] = 0.0
    return ids, paddings

  __call__ = encode
