"""Feature store: round trips, resumable writes, bf16 storage, clear errors, import, integrity."""
import json

import numpy as np
import pytest

from vidjax.data import features


def test_write_read_roundtrip_and_missing_error(tmp_path):
  rng = np.random.default_rng(0)
  emb = rng.normal(size=(5, 4)).astype(np.float32)
  ids = [f"c{i}" for i in range(5)]
  store = features.write_arrays(tmp_path / "s", {"clip": (ids, emb)}, {"backbone": "test"})
  np.testing.assert_array_equal(store.get("clip", ["c3", "c1"]), emb[[3, 1]])
  reopened = features.FeatureStore(tmp_path / "s")
  assert reopened.metadata["backbone"] == "test"
  assert reopened.ids("clip") == sorted(ids)
  with pytest.raises(features.MissingFeatureError, match=r"no 'clip' features for 2 of 3 requested ids: 'x', 'y'"):
    reopened.get("clip", ["c0", "x", "y"])


def test_open_without_manifest_is_clear(tmp_path):
  with pytest.raises(FileNotFoundError, match="no feature store"):
    features.FeatureStore(tmp_path)


def test_writer_skips_existing_and_flushes_in_shards(tmp_path):
  store = features.FeatureStore.create(tmp_path, {})
  with store.writer("text", flush_every=2) as w:
    for i in range(5):
      w.add(f"t{i}", np.full(3, i, np.float32))
  assert len(list((tmp_path / "text").glob("*.npy"))) == 3
  # A resumed job re-adds everything (the same values); nothing new is written.
  with store.writer("text", flush_every=2) as w:
    assert not any(w.add(f"t{i}", np.full(3, i, np.float32)) for i in range(5))
  assert w.written == 0
  np.testing.assert_array_equal(store.get("text", ["t4"])[0], [4, 4, 4])
  assert store.verify()["text"] == {"items": 5, "shape": [3], "shards": 3}


def test_uncommitted_shard_is_invisible(tmp_path):
  store = features.FeatureStore.create(tmp_path, {})
  with store.writer("clip", flush_every=10) as w:
    w.add("a", np.ones(2))
  # A killed writer may leave an array without its id file; it must not be read.
  np.save(tmp_path / "clip" / "p0-00009.npy", np.ones((1, 2)))
  assert features.FeatureStore(tmp_path).ids("clip") == ["a"]


def test_bfloat16_storage(tmp_path):
  x = np.array([[1.0, 0.5, -2.0, 3.140625]], np.float32)
  features.write_arrays(tmp_path, {"clip": (["a"], x)}, dtype="bfloat16")
  assert np.load(next((tmp_path / "clip").glob("*.npy"))).dtype == np.uint16
  np.testing.assert_array_equal(features.FeatureStore(tmp_path).get("clip", ["a"]), x)


def test_import_npy_and_npz(tmp_path):
  x = np.arange(6, dtype=np.float32).reshape(3, 2)
  np.save(tmp_path / "a.npy", x)
  (tmp_path / "ids.txt").write_text("u\nv\nw\n")
  store = features.import_arrays(tmp_path / "s1", "clip", tmp_path / "a.npy", tmp_path / "ids.txt")
  np.testing.assert_array_equal(store.get("clip", ["w"]), x[2:])
  np.savez(tmp_path / "b.npz", emb=x, other=x)
  (tmp_path / "ids.json").write_text(json.dumps(["u", "v", "w"]))
  with pytest.raises(ValueError, match="pass array_key"):
    features.import_arrays(tmp_path / "s2", "clip", tmp_path / "b.npz", tmp_path / "ids.json")
  store = features.import_arrays(tmp_path / "s2", "clip", tmp_path / "b.npz", tmp_path / "ids.json", array_key="emb")
  np.testing.assert_array_equal(store.get("clip", ["u"]), x[:1])
  with pytest.raises(ValueError, match="3 rows but the id list has 2"):
    features.import_arrays(tmp_path / "s3", "clip", tmp_path / "a.npy", ["u", "v"])


def test_verify_detects_corruption_and_merge_manifest(tmp_path):
  store = features.write_arrays(tmp_path, {"clip": (["a", "b"], np.ones((2, 2)))})
  with store.writer("clip", shard_prefix="p1") as w:
    w.add("c", np.ones(2))
  counts = store.merge_manifest()
  assert counts == {"clip": 3}
  assert sorted(features.FeatureStore(tmp_path).metadata["shards"]["clip"]) == ["p0-00000", "p1-00000"]
  shard = tmp_path / "clip" / "p1-00000.npy"
  np.save(shard, np.array([[np.nan, 1.0]], np.float32))
  with pytest.raises(ValueError, match="NaN or Inf"):
    store.verify()


def test_command_line_verify_merge_import(tmp_path, capsys):
  np.save(tmp_path / "a.npy", np.ones((2, 3), np.float32))
  (tmp_path / "ids.txt").write_text("x\ny\n")
  store = str(tmp_path / "s")
  assert features.main(["import", store, "clip", str(tmp_path / "a.npy"), str(tmp_path / "ids.txt")]) == 0
  assert features.main(["merge", store]) == 0
  capsys.readouterr()
  assert features.main(["verify", store]) == 0
  assert json.loads(capsys.readouterr().out)["clip"] == {"items": 2, "shape": [3], "shards": 1}
  np.save(next((tmp_path / "s" / "clip").glob("*.npy")), np.full((2, 3), np.inf, np.float32))
  assert features.main(["verify", store]) == 1
  assert "NaN or Inf" in capsys.readouterr().err


@pytest.mark.parametrize("dtype, bits", [("float8_e4m3", 8), ("float4_e2m1", 4)])
def test_low_precision_kinds_store_exact_bytes_and_read_back_quantized(tmp_path, dtype, bits):
  from vidjax import ops
  rng = np.random.default_rng(0)
  caches = rng.normal(size=(3, 16, 384)).astype(np.float32) * 2  # VEDJE's compact cache: 16 tokens x 384
  odd = rng.normal(size=(3, 5, 3)).astype(np.float32)           # an odd number of values per item
  store = features.FeatureStore.create(tmp_path / "s", {"backbone": "test"})
  for kind, arrays in (("cache", caches), ("odd", odd)):
    with store.writer(kind, dtype=dtype) as w:
      for i, a in enumerate(arrays):
        w.add(f"v{i}", a)
  store = features.FeatureStore(tmp_path / "s")
  for kind, arrays in (("cache", caches), ("odd", odd)):
    got = store.get(kind, ["v2", "v0"])
    assert got.dtype == np.float32 and store.item_shape(kind) == arrays.shape[1:]
    np.testing.assert_array_equal(got, ops.quantize_dequantize(arrays[[2, 0]], dtype))
  on_disk = np.load(next((tmp_path / "s" / "cache").glob("*.npy")))
  assert on_disk.nbytes == 3 * ops.storage_bytes(16 * 384, dtype) == 3 * 16 * 384 * bits // 8
  assert store.verify()["cache"] == {"items": 3, "shape": [16, 384], "shards": 1}
  with pytest.raises(ValueError, match="feature store dtype"):
    store.writer("x", dtype="int4")
