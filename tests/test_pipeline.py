"""Tests for vidjax/data/pipeline.py: feature tables (in memory and streamed), batching, text batches."""
import numpy as np
import pytest

from vidjax import train
from vidjax.data import cvr, pipeline
from vidjax.data.features import FeatureStore, MissingFeatureError, write_arrays
from vidjax.tokenizers.wordpiece import WordPieceTokenizer


def _token_store(tmp_path, n=40, shape=(4, 3, 8), dtype="float32", shards=3):
  rng = np.random.default_rng(0)
  ids = [f"v{i:03d}" for i in range(n)]
  tokens = rng.normal(size=(n,) + shape).astype(np.float32)
  store = FeatureStore.create(tmp_path / "store", {"backbone": "test"})
  per = -(-n // shards)
  for s in range(shards):  # several shards, so a streamed gather crosses shard boundaries
    with store.writer("tokens", shard_prefix=f"p{s}", dtype=dtype) as w:
      for i in range(s * per, min(n, (s + 1) * per)):
        w.add(ids[i], tokens[i])
  return FeatureStore(tmp_path / "store"), ids, tokens


def test_feature_kind_over_the_memory_budget_streams_through_the_pipeline(tmp_path):
  store, ids, tokens = _token_store(tmp_path)
  item_bytes = 4 * tokens[0].size
  streamed = pipeline.FeatureTable(store, "tokens", ids, memory_budget_bytes=10 * item_bytes)  # 40 items > 10
  in_memory = pipeline.FeatureTable(store, "tokens", ids, memory_budget_bytes=None)
  assert not streamed.in_memory and not hasattr(streamed, "_emb")  # nothing of the kind held in RAM
  assert in_memory.in_memory and streamed.item_shape == (4, 3, 8)
  rows = np.array([[3, -1, 39], [0, 17, 17]])
  np.testing.assert_array_equal(streamed.gather(rows), in_memory.gather(rows))
  np.testing.assert_array_equal(streamed.gather(rows)[0, 1], np.zeros((4, 3, 8)))  # -1 pads with zeros
  np.testing.assert_array_equal(streamed.gather(rows)[1, 1], tokens[17])

  # Through the Grain pipeline and the loader: the same batches either way.
  def batches(table):
    ds = pipeline.make_index_batches(len(ids), 8, seed=1, batch_fn=lambda i: {"tokens": table.gather(i)})
    it = iter(pipeline.loader(ds))
    return [next(it)["tokens"] for _ in range(7)]  # more than one epoch
  for a, b in zip(batches(streamed), batches(in_memory)):
    np.testing.assert_array_equal(a, b)
  assert batches(streamed)[0].shape == (8, 4, 3, 8)


def test_streamed_bfloat16_kind_converts_rows(tmp_path):
  store, ids, tokens = _token_store(tmp_path, n=9, shape=(5,), dtype="bfloat16", shards=2)
  table = pipeline.FeatureTable(store, "tokens", ids, memory_budget_bytes=0)
  assert not table.in_memory
  np.testing.assert_allclose(table.gather(np.arange(9)), tokens, rtol=1e-2, atol=1e-2)
  np.testing.assert_array_equal(table.gather(np.arange(9)), store.get("tokens", ids))


def test_feature_table_names_missing_ids(tmp_path):
  store, ids, _ = _token_store(tmp_path, n=5)
  with pytest.raises(MissingFeatureError, match="'nope'"):
    pipeline.FeatureTable(store, "tokens", ids + ["nope"], memory_budget_bytes=0)


def _cvr_tables(tmp_path, d=3):
  ids = ["a", "b", "c", "d", "e"]
  clip = np.arange(1, 1 + 5 * d, dtype=np.float32).reshape(5, d)
  write_arrays(tmp_path / "s", {"clip": (ids, clip), "text": (ids, -clip)})
  store = FeatureStore(tmp_path / "s")
  return pipeline.FeatureTable(store, "clip", ids), pipeline.FeatureTable(store, "text", ids), clip


def test_cvr_train_source_pads_left_masks_and_zero_negatives(tmp_path):
  clips, texts, clip = _cvr_tables(tmp_path)
  inst = [{"target": "c", "context": ["a", "b"], "state_negatives": ["d"], "identity_negatives": []},
          {"target": "e", "context": ["a", "b", "c", "d"], "state_negatives": ["a", "b", "c", "d"],
           "identity_negatives": ["b"]}]
  src = cvr.CVRTrainSource(inst, clips, texts, context_len=3, num_state=2, num_identity=2,
                           zero_negatives_in_loss=False)
  b = src.collate([0, 1])
  np.testing.assert_array_equal(b["history_mask"], [[0, 1, 1], [1, 1, 1]])  # left padding
  np.testing.assert_array_equal(b["history"][0], [np.zeros(3), clip[0], clip[1]])
  np.testing.assert_array_equal(b["history"][1], clip[1:4])  # truncated to the last 3 clips
  np.testing.assert_array_equal(b["text"][0], -clip[2])
  np.testing.assert_array_equal(b["positive"][1], clip[4])
  np.testing.assert_array_equal(b["state_negs"][1], clip[0:2])  # capped at num_state
  np.testing.assert_array_equal(b["state_mask"], [[1, 0], [1, 1]])
  np.testing.assert_array_equal(b["ident_negs"][0], np.zeros((2, 3)))
  np.testing.assert_array_equal(b["ident_mask"], [[0, 0], [1, 0]])
  kept = cvr.CVRTrainSource(inst, clips, texts, 3, 2, 2, zero_negatives_in_loss=True).collate([0])
  np.testing.assert_array_equal(kept["ident_mask"], [[1, 1]])  # the paper: zero vectors stay in the loss
  assert src[1]["history"].shape == (3, 3)


def test_truncate_context_keeps_the_last_slots(tmp_path):
  clips, texts, clip = _cvr_tables(tmp_path)
  rec = [{"target": "e", "context": ["a", "b", "c"], "candidates": ["e", "a"], "negative_types": {"a": "state"}}]
  arrays = cvr.cvr_eval_arrays(rec, clips, texts, context_len=3)
  one = cvr.truncate_context(arrays, 1)
  np.testing.assert_array_equal(one["history"][0], [clip[2]])
  assert cvr.truncate_context(arrays, 0)["history"].shape == (1, 0, 3)
  np.testing.assert_array_equal(arrays["neg_types"], [[0, 1]])


def test_text_token_batch_has_fixed_length(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "red", "cube", "moves", "left"]) + "\n")
  tok = WordPieceTokenizer.from_vocab(vocab)
  out = pipeline.text_token_batch(tok, ["the red cube moves left", "cube"], max_length=8)
  assert out["input_ids"].shape == out["attention_mask"].shape == (2, 8)
  assert out["input_ids"].dtype == np.int32
  np.testing.assert_array_equal(out["attention_mask"].sum(1), [7, 3])
  with pytest.raises(TypeError):
    pipeline.text_token_batch(tok, "one string", 8)


def test_fit_reads_from_the_loader():
  assert not hasattr(train, "make_batches")  # batching lives in the pipeline only
