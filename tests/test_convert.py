"""vidjax.convert's reader and CLI: torch.save's zip format read without torch, strict keys, the saved conversion.

The .pt fixture was written by torch itself (bench/goldens/torch_files.py); torch is never imported here.
"""
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from vidjax import convert
from vidjax.convert import ConversionError, StateDict, load_state_dict
from vidjax.convert.__main__ import main

pytestmark = pytest.mark.highest_precision  # compares with NumPy or a reference (tests/conftest.py)

GOLDEN = Path(__file__).parent / "golden"


def test_reads_torch_zip_without_torch():
  sd = load_state_dict(GOLDEN / "torch_save.pt")
  with np.load(GOLDEN / "torch_save.npz") as z:
    expected = {k[len("expected/"):]: z[k] for k in z.files if k.startswith("expected/")}
  assert set(sd) == set(expected)  # the wrapper dict unwrapped and DataParallel's prefix removed
  for k, v in expected.items():
    got = sd[k].astype(np.float32) if sd[k].dtype.name == "bfloat16" else sd[k]
    assert got.shape == v.shape and got.dtype == v.dtype, k
    np.testing.assert_array_equal(got, v, err_msg=k)  # bit-exact: bytes are reinterpreted, never computed
  assert sd["half"].dtype == np.float16 and sd["steps"].dtype == np.int64 and sd["mask"].dtype == np.bool_


def test_state_dict_is_strict():
  sd = StateDict({"a.weight": np.zeros((2, 3)), "a.bias": np.zeros(2), "tower.x": np.zeros(1)}, "ckpt.pth")
  with pytest.raises(ConversionError, match=r"ckpt.pth: key 'a.weight' has shape \(2, 3\), expected \(3, 2\)"):
    sd.take("a.weight", (3, 2))
  with pytest.raises(ConversionError, match="missing key 'a.kernel'"):
    sd.take("a.kernel")
  assert sd.take("a.weight", (2, 3)).dtype == np.float32
  sd.take("a.bias")
  with pytest.raises(ConversionError, match="unknown key 'tower.x'"):
    sd.finish()
  assert sd.skip("tower.", "frozen") == 1 and sd.skipped == {"tower.": "frozen"}
  sd.finish()


def test_bad_files_are_one_error(tmp_path):
  with pytest.raises(ConversionError, match="no such checkpoint file"):
    load_state_dict(tmp_path / "absent.pth")
  (tmp_path / "legacy.pth").write_bytes(b"\x80\x02not a zip")
  with pytest.raises(ConversionError, match="legacy format is not read"):
    load_state_dict(tmp_path / "legacy.pth")
  # A storage file missing from the archive.
  with zipfile.ZipFile(GOLDEN / "torch_save.pt") as src, zipfile.ZipFile(tmp_path / "cut.pth", "w") as dst:
    for name in src.namelist():
      if not name.endswith("/data/0"):
        dst.writestr(name, src.read(name))
  with pytest.raises(ConversionError, match="storage file data/0 is missing"):
    load_state_dict(tmp_path / "cut.pth")


def test_save_load_and_into(tmp_path):
  params = {"dense": {"kernel": np.ones((2, 3), np.float32), "bias": np.zeros(3, np.float32)}}
  convert.save(tmp_path / "c", params, {"from": "xpool"})
  loaded, record = convert.into({"dense": {"kernel": np.zeros((2, 3)), "bias": np.zeros(3)}}, tmp_path / "c",
                                ("xpool",))
  np.testing.assert_array_equal(loaded["dense"]["kernel"], 1.0)
  assert record["from"] == "xpool" and loaded["dense"]["kernel"].dtype == np.float64  # the model's dtype
  with pytest.raises(ConversionError, match=r"'dense/kernel' has shape \(2, 3\), the model's is \(3, 3\)"):
    convert.into({"dense": {"kernel": np.zeros((3, 3)), "bias": np.zeros(3)}}, tmp_path / "c")
  with pytest.raises(ConversionError, match="'other/bias' of the model is missing"):
    convert.into({**params, "other": {"bias": np.zeros(1)}}, tmp_path / "c")
  with pytest.raises(ConversionError, match="converted from 'xpool', but this model takes grdr"):
    convert.into(params, tmp_path / "c", ("grdr",))
  with pytest.raises(ConversionError, match="not a converted checkpoint"):
    convert.load(tmp_path)
  with pytest.raises(ConversionError, match="holds one model, not parts"):
    convert.into(params, tmp_path / "c", subtree="text_tower")
  # A conversion of several models (X-Pool's retriever and text tower): each loads its part.
  convert.save(tmp_path / "p", {"a": params, "b": {"x": np.ones(2, np.float32)}}, {"info": {"parts": ["a", "b"]}})
  loaded, _ = convert.into({"x": np.zeros(2, np.float32)}, tmp_path / "p", subtree="b")
  np.testing.assert_array_equal(loaded["x"], 1.0)
  with pytest.raises(ConversionError, match=r"holds the parts \['a', 'b'\]; name the one this model takes"):
    convert.into(params, tmp_path / "p")


def test_cli_errors_are_one_line(tmp_path, capsys):
  assert main(["--from", "xpool", "--checkpoint", str(tmp_path / "none.pth"), "--out", str(tmp_path / "o")]) == 2
  err = capsys.readouterr().err.strip()
  assert err.count("\n") == 0 and "no such checkpoint file" in err
  assert not (tmp_path / "o").exists()
