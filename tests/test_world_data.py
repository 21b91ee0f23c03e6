"""`experiments.common.world_data`: a world is written once as files and read through the one data path."""
import ml_collections

from vidjax.experiments import common


def _config(seed=0, n=3, features=""):
  c = ml_collections.ConfigDict(dict(seed=seed, data=dict(features=features, annotations=""), world=dict(n=n)))
  c.lock()
  return c


def test_world_is_written_once_and_named_in_data_keys(tmp_path):
  calls = []

  def write(config, root):
    calls.append(config.world.n)
    root.mkdir(parents=True, exist_ok=True)
    (root / "ann.json").write_text("{}")
    return {"annotations": root / "ann.json", "features": root / "features"}

  out = common.world_data(_config(), tmp_path, write)
  assert out.data.annotations == str(tmp_path / "world" / "ann.json")
  assert out.data.features == str(tmp_path / "world" / "features")
  assert not common.runs_world(out)  # the returned config reads files, as a user's does
  common.world_data(_config(), tmp_path, write)
  assert calls == [3]  # the same world section and seed: read as written
  common.world_data(_config(n=4), tmp_path, write)
  assert calls == [3, 4]  # another world: written again


def test_a_users_store_is_not_a_world(tmp_path):
  c = _config(features=str(tmp_path))
  assert common.world_data(c, tmp_path, lambda *_: 1 / 0) is c


def test_config_module_loads_a_shared_config_file_once(tmp_path):
  from vidjax.defaults.common import config_module  # pylint: disable=g-import-not-at-top
  (tmp_path / "m").mkdir()
  (tmp_path / "m" / "common.py").write_text("VALUE = 3\n")
  module = config_module(tmp_path / "m" / "common.py")
  assert module.VALUE == 3 and config_module(tmp_path / "m" / ".." / "m" / "common.py") is module
  import pytest  # pylint: disable=g-import-not-at-top
  with pytest.raises(FileNotFoundError, match="config file not found"):
    config_module(tmp_path / "nope.py")


def test_a_world_written_by_a_failed_start_does_not_block_the_corrected_rerun(tmp_path):
  """A run refused after its world was written (e.g. a batch larger than the world's training set) leaves only
  the pending record and the world's files: the rerun with the corrected value goes ahead."""
  def write(config, root):
    (root / "features").mkdir(parents=True)
    (root / "features" / "shard.npy").write_bytes(b"x")
    return {"features": root / "features"}

  c = ml_collections.ConfigDict(dict(seed=0, data=dict(features="", annotations=""), world=dict(n=3),
                                     train=dict(batch_size=512)))
  common.record_config(c, tmp_path)
  common.world_data(c, tmp_path, write)
  c.train.batch_size = 64  # the corrected rerun
  common.record_config(c, tmp_path)  # no "made by a different config"
  (tmp_path / "checkpoint").write_text("trained")  # once the run wrote its own files, the record binds
  c.train.batch_size = 32
  import pytest  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match="different config"):
    common.record_config(c, tmp_path)
