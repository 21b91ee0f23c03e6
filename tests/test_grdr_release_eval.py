"""GRDR's released checkpoints evaluated as released (`vidjax.methods.grdr_release`): the converted model is built
from the conversion's own record and indexes videos as the official model does; queries are tokenized as the
official collator does (as written, eos appended)."""
from pathlib import Path

import jax
import numpy as np
import pytest

from vidjax import convert
from vidjax.convert.__main__ import main as convert_main
from vidjax.methods import grdr_release
from vidjax.tokenizers.sentencepiece import SentencePieceTokenizer

pytestmark = pytest.mark.highest_precision  # compares with the official model's outputs (a golden)
GOLDEN = Path(__file__).parent / "golden"
SPM = Path(__file__).resolve().parents[2] / "shared" / "data" / "videoprism_assets" / "test_spm.model"


def test_a_converted_checkpoint_builds_its_model_and_indexes_videos_as_the_official(tmp_path):
  z = np.load(GOLDEN / "grdr_losses.npz")
  np.savez(tmp_path / "best_model.npz", **{k[3:]: z[k] for k in z.files if k.startswith("sd/")})
  assert convert_main(["--from", "grdr", "--checkpoint", str(tmp_path / "best_model.npz"),
                       "--out", str(tmp_path / "ckpt")]) == 0
  model, params, record = grdr_release.released(tmp_path / "ckpt")
  assert record["from"] == "grdr" and model.tokenizer.normalize_views is False
  codes = jax.jit(lambda p, f: model.apply({"params": p}, f, method=type(model).video_codes))(
      params, z["in/video_features"])
  np.testing.assert_array_equal(codes, z["out/video_codes"])  # every view's semantic ID, exactly the official's


def test_a_conversion_of_another_model_is_refused(tmp_path):
  convert.save(tmp_path / "x", {"a": np.zeros(1)}, {"from": "xpool"})
  with pytest.raises(convert.ConversionError, match="converted from 'xpool'; .* takes a GRDR conversion"):
    grdr_release.released(tmp_path / "x")


def test_release_tokens_are_the_text_as_written_with_eos():
  sp = SentencePieceTokenizer(SPM)
  text = "A Man, Playing GUITAR!"
  ids = sp.encode_one(text, add_bos=False, canonicalize=False)
  assert ids != sp.encode_one(text, add_bos=False)  # vidjax's own path canonicalises; the official one does not
  got = grdr_release.release_tokens(sp, [text, "x"], len(ids) + 3, sp.vocab_size + 1)
  np.testing.assert_array_equal(got[0], np.asarray(ids + [grdr_release.EOS_ID, -1, -1]) + 1)
  short = grdr_release.release_tokens(sp, [text], 3, sp.vocab_size + 1)  # truncated, the eos kept last
  np.testing.assert_array_equal(short[0], np.asarray(ids[:2] + [grdr_release.EOS_ID]) + 1)
  with pytest.raises(ValueError, match="past the converted model's"):
    grdr_release.release_tokens(sp, [text], 8, 3)


def _conversion(directory: Path, feature_dim: int, vocab: int) -> None:
  """A GRDR conversion as `python -m vidjax.convert --from grdr` records one, of a small model with random weights."""
  from vidjax.models.grdr import GRDR, RetrieverConfig, TokenizerConfig  # pylint: disable=g-import-not-at-top
  from vidjax.models.t5 import T5Config  # pylint: disable=g-import-not-at-top
  t5 = dict(d_model=32, num_heads=2, d_kv=16, d_ff=64, encoder_layers=1, decoder_layers=1)
  tok = dict(feature_dim=feature_dim, latent_dim=32, hidden=16, num_views=2, num_layers=2, num_codes=8,
             normalize_views=False)
  model = GRDR(TokenizerConfig(**tok), RetrieverConfig(t5=T5Config(vocab_size=0, **t5), query_encoder="t5",
                                                       vocab_size=vocab))
  params = jax.device_get(model.init(jax.random.PRNGKey(3), np.zeros((1, feature_dim)), np.ones((1, 4), np.int32))
                          ["params"])
  convert.save(directory, params, {"from": "grdr", "checkpoint": "best_model.pt", "sha256": "0" * 64, "info": {
      "model": {"tokenizer": tok, "retriever": {"query_encoder": "t5", "vocab_size": vocab, "t5": t5}}}})


def test_a_run_evaluates_a_released_checkpoint_without_training(tmp_path):
  from vidjax import main  # pylint: disable=g-import-not-at-top
  from vidjax.experiments.common import load_config  # pylint: disable=g-import-not-at-top
  config = load_config(str(Path(__file__).resolve().parents[1] / "configs/grdr_msrvtt.py:smoke"))
  _conversion(tmp_path / "ckpt", config.world.dim, SentencePieceTokenizer(SPM).vocab_size + 1)
  config.init_checkpoint, config.data.tokenizer = str(tmp_path / "ckpt"), str(SPM)
  config.eval.reranker, config.eval.dense_rows = "dense_backbone", ()
  results = main.run(config, tmp_path / "run")
  assert results["released"]["trained"] is False and results["released"]["reranker"] == "dense_backbone"
  for setting in ("inductive", "full_corpus"):
    row = results["metrics"][setting]["grdr"]
    assert 0 < row["num_candidates"] and 0.0 <= row["t2v_r1"] <= row["candidate_recall"] <= 100.0
    assert set(results["metrics"][setting]) == {"grdr"}
  assert not (tmp_path / "run" / "models").exists()  # nothing trained
  config.init_checkpoint = ""
  config.dense.init_checkpoint = str(tmp_path / "ckpt")
  with pytest.raises(ValueError, match="dense.init_checkpoint=.* empty unless init_checkpoint names"):
    main.run(config, tmp_path / "other")
