"""`python -m vidjax.convert.embed_text`: captions -> CLIP's tokenizer (a tokenizer.json, read by `tokenizers`) ->
a converted X-Pool checkpoint's text tower -> a store kind keyed by caption id, against the official outputs of
`tests/golden/clip_text.npz` (`bench/goldens/clip_text.py`).

The tokenizer here is a tiny WordLevel tokenizer.json built with the `tokenizers` API: the golden's vocabulary of 100
("w<i>" is id i, `<|startoftext|>` 98, `<|endoftext|>` 99, last as in CLIP's) with CLIP's start / end template, so
that each caption tokenizes to one of the golden's rows. The real vocabulary (CLIP's byte-level BPE of 49408) is the
user's `tokenizer.json`; the path through the tokenizer, the truncation, the padding and the store is the same.
"""
import json
from pathlib import Path

import numpy as np
import pytest
import tokenizers

from vidjax import convert
from vidjax.convert.__main__ import main as convert_main
from vidjax.convert.embed_text import KIND, main
from vidjax.data.features import FeatureStore

pytestmark = pytest.mark.highest_precision

GOLDEN = Path(__file__).parent / "golden" / "clip_text.npz"
START, END = 98, 99
ATOL = 2e-5  # as tests/test_reference_clip_text.py (the same tower; here unit-normalised outputs of norm 1)


@pytest.fixture(scope="module")
def golden():
  with np.load(GOLDEN) as z:
    return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def converted(golden, tmp_path_factory):
  out = tmp_path_factory.mktemp("xpool")
  np.savez(out / "xpool.npz", **{k[len("sd/"):]: v for k, v in golden.items() if k.startswith("sd/")})
  assert convert_main(["--from", "xpool", "--checkpoint", str(out / "xpool.npz"), "--out", str(out / "ckpt"),
                       "--option", "text_heads=4"]) == 0
  return out / "ckpt"


def tokenizer_file(path: Path, end_last: bool = True, template: bool = True) -> Path:
  """The module docstring's tokenizer (`end_last=False`: `<|endoftext|>` and "w0" swap ids)."""
  end_id = END if end_last else 0
  vocab = {f"w{i}": i for i in range(1, START)}
  vocab.update({"w0": END - end_id, "<|startoftext|>": START, "<|endoftext|>": end_id})
  tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<|endoftext|>"))
  tok.normalizer = tokenizers.normalizers.Lowercase()
  tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
  if template:
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>", special_tokens=[("<|startoftext|>", START),
                                                                   ("<|endoftext|>", end_id)])
  tok.save(str(path))
  return path


def words(row: np.ndarray) -> str:
  """The caption that tokenizes to a golden row: its tokens between the start and the first end token."""
  ids = row.tolist()
  return " ".join(f"W{i}" if n % 2 else f"w{i}" for n, i in enumerate(ids[1:ids.index(END)]))


def unit(x: np.ndarray) -> np.ndarray:
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_captions_and_paragraphs_are_embedded_as_the_official_tower_embeds_them(golden, converted, tmp_path):
  rows, want = golden["in/full/ids"], unit(golden["out/hf/real/full"])
  # Row 2 fills the context (16): its caption gets 3 more words, which truncation drops.
  captions = [words(rows[0]), "  " + words(rows[1]) + " ", words(rows[2]) + " w1 w2 w3"]
  msrvtt = tmp_path / "msrvtt_ret_test.json"
  msrvtt.write_text(json.dumps([{"video": "video7.mp4", "caption": captions[0]},
                                {"video": "video7.mp4", "caption": captions[1]},
                                {"video": "video8.mp4", "caption": captions[2]}]))
  tok = tokenizer_file(tmp_path / "tokenizer.json")
  store = tmp_path / "store"
  args = ["--checkpoint", str(converted), "--tokenizer", str(tok), "--store", str(store), "--dataset", "msrvtt",
          "--annotations", str(msrvtt)]
  assert main(args) == 0
  got = FeatureStore(store).get(KIND, ["video7_0", "video7_1", "video8_0"])
  np.testing.assert_allclose(got, want[:3], atol=ATOL)
  meta = FeatureStore(store).metadata["kind_sources"][KIND]
  assert meta["normalised"] and meta["text_tower"]["layout"] == "huggingface" and meta["tokenizer_sha256"]
  assert main(args) == 0  # a rerun finds every query stored and embeds none
  # DiDeMo's paragraph protocol: every video's sentences joined, under the video id (and each sentence too).
  first = words(rows[0]).split()
  didemo = tmp_path / "didemo_ret_test.json"
  didemo.write_text(json.dumps([{"video": "v9.mp4", "caption": [" ".join(first[:2]), " ".join(first[2:])]}]))
  assert main(["--checkpoint", str(converted), "--tokenizer", str(tok), "--store", str(tmp_path / "didemo"),
               "--dataset", "didemo", "--annotations", str(didemo)]) == 0
  assert sorted(FeatureStore(tmp_path / "didemo").ids(KIND)) == ["v9", "v9_0", "v9_1"]
  np.testing.assert_allclose(FeatureStore(tmp_path / "didemo").get(KIND, ["v9"])[0], want[0], atol=ATOL)


def test_what_does_not_fit_is_one_error(converted, tmp_path, capsys):
  ann = tmp_path / "msrvtt_ret_test.json"
  ann.write_text(json.dumps([{"video": "video7.mp4", "caption": "w3 w4"}]))

  def run(checkpoint, tok):
    code = main(["--checkpoint", str(checkpoint), "--tokenizer", str(tok), "--store", str(tmp_path / "s"),
                 "--dataset", "msrvtt", "--annotations", str(ann)])
    return code, capsys.readouterr().err

  code, err = run(converted, tokenizer_file(tmp_path / "first.json", end_last=False))
  assert code == 2 and "<|endoftext|> is id 0 of a vocabulary of 100" in err
  code, err = run(converted, tokenizer_file(tmp_path / "plain.json", template=False))
  assert code == 2 and "post-processor does not add CLIP's start and end tokens" in err
  other = convert.save(tmp_path / "other", {"a": np.zeros(1)}, {"from": "clip4clip", "info": {}})
  code, err = run(other, tmp_path / "plain.json")
  assert code == 2 and "not an X-Pool conversion with a text tower" in err
  assert not (tmp_path / "s").exists()
