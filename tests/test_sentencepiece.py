"""SentencePiece tokenizer for VideoPrism LvT: canonicalization, BOS rule, no EOS, padding, truncation.

Uses the real test model of the official VideoPrism repository (vocab 1000, bos 1,
eos 2, unk 0, no pad id; "blah" -> [80, 180, 60]).
"""
from pathlib import Path

import numpy as np
import pytest
import sentencepiece

from vidjax.models import videoprism as vp
from vidjax.tokenizers import SentencePieceTokenizer
from vidjax.tokenizers import sentencepiece as vsp

TEST_SPM = str(Path(__file__).resolve().parents[2] / "shared" / "data" / "videoprism_assets" / "test_spm.model")


@pytest.fixture(scope="module")
def tok():
  return SentencePieceTokenizer(TEST_SPM)


def test_canonicalize_text():
  assert vsp.canonicalize_text("Hello, World!") == "hello world."
  assert vsp.canonicalize_text("It's  a DOG's life!") == "it s a dog s life."
  assert vsp.canonicalize_text("") == "."
  assert vsp.canonicalize_text("a video of Cutting_onions.") == "a video of cutting onions."
  assert vsp.canonicalize_text("  tabs\tand\nnewlines — kept ") == "tabs and newlines — kept."


def test_official_models_test_case(tok):
  ids, pads = tok.encode(["blah", "blah blah", "blah blah blah"], max_length=6, add_bos=False,
                         canonicalize=False)
  assert ids.dtype == np.int32 and pads.dtype == np.float32
  np.testing.assert_array_equal(ids, [[80, 180, 60, 0, 0, 0], [80, 180, 60, 80, 180, 60],
                                      [80, 180, 60, 80, 180, 60]])
  np.testing.assert_array_equal(pads, [[0, 0, 0, 1, 1, 1], [0] * 6, [0] * 6])


def test_model_ids_and_auto_bos(tok):
  assert (tok.vocab_size, tok.bos_id, tok.eos_id) == (1000, 1, 2)
  # This model defines a BOS, so the default (auto) prepends it; c4_en has none and gets no BOS.
  ids, pads = tok.encode(["blah"], max_length=6, canonicalize=False)
  np.testing.assert_array_equal(ids, [[1, 80, 180, 60, 0, 0]])
  np.testing.assert_array_equal(pads, [[0, 0, 0, 0, 1, 1]])
  ids, _ = tok.encode(["blah"], max_length=6, add_bos=True, canonicalize=False)
  np.testing.assert_array_equal(ids, [[1, 80, 180, 60, 0, 0]])


def test_default_canonicalized_encoding_without_eos(tok):
  sp = sentencepiece.SentencePieceProcessor(model_file=TEST_SPM)
  texts = ["A man is slicing TOMATOES!", "Hello, world"]
  ids, pads = tok.encode(texts, add_bos=False)
  assert ids.shape == (2, 64) and pads.shape == (2, 64)
  for row, pad, text in zip(ids, pads, ["a man is slicing tomatoes.", "hello world."]):
    want = sp.EncodeAsIds(text)
    n = len(want)
    np.testing.assert_array_equal(row[:n], want)
    np.testing.assert_array_equal(row[n:], 0)  # Right-padded with id 0, no EOS (2) appended.
    np.testing.assert_array_equal(pad, [0.0] * n + [1.0] * (64 - n))


def test_truncation_keeps_first_ids(tok):
  text = " ".join(["blah"] * 40)  # 120 ids + BOS.
  ids, pads = tok.encode([text], canonicalize=False)
  assert ids.shape == (1, 64) and not pads.any()
  np.testing.assert_array_equal(ids[0, :7], [1, 80, 180, 60, 80, 180, 60])
  np.testing.assert_array_equal(ids[0], tok.encode_one(text, canonicalize=False)[:64])


def test_errors_and_constants(tmp_path):
  with pytest.raises(FileNotFoundError, match="missing.model"):
    SentencePieceTokenizer(tmp_path / "missing.model")
  with pytest.raises(TypeError, match="list of strings"):
    SentencePieceTokenizer(TEST_SPM).encode("blah")
  assert vsp.C4_EN_SPM_PATH.endswith("cc_en.32000/sentencepiece.model")
  assert vp.C4_EN_SPM_PATH == vsp.C4_EN_SPM_PATH and vp.TEXT_MAX_LEN == vsp.MAX_LENGTH == 64
