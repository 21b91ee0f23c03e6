"""Inputs that used to give silently wrong results now give one clear error naming the file/store and key/id."""
import json
import os
from pathlib import Path
import re

import numpy as np
import pytest

from vidjax import io
from vidjax.data import annotations
from vidjax.data.features import FeatureStore, NonFiniteFeatureError, write_arrays


def test_a_duplicate_json_key_is_an_error_naming_file_and_key(tmp_path):
  # A YouCook2 file whose "database" names one video twice: json.loads would keep the second silently.
  path = tmp_path / "yc2.json"
  entry = '{"subset": "training", "recipe_type": "1", "annotations": [{"segment": [0, 1], "id": 0, "sentence": "%s"}]}'
  path.write_text('{"database": {"vid1": %s, "vid1": %s}}' % (entry % "cut", entry % "boil"))
  with pytest.raises(io.DuplicateKeyError, match=r"yc2.json.*'vid1' appears twice"):
    annotations.read_youcook2(path)
  # ActivityNet Captions: two entries for one video id.
  an = tmp_path / "val_1.json"
  an.write_text('{"v_a": {"duration": 5.0, "timestamps": [[0, 1]], "sentences": ["x"]}, '
                '"v_a": {"duration": 9.0, "timestamps": [[0, 2]], "sentences": ["y"]}}')
  with pytest.raises(io.DuplicateKeyError, match=r"val_1.json.*'v_a'"):
    annotations.read_activitynet_captions(an)
  assert io.loads_json('{"a": {"b": 1}, "c": {"b": 2}}') == {"a": {"b": 1}, "c": {"b": 2}}  # same key, two objects: fine


def test_non_finite_features_are_refused_on_write_and_on_load(tmp_path):
  ids = [f"v{i}" for i in range(6)]
  good = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
  bad = good.copy()
  bad[2, 1], bad[4, 0] = np.inf, np.nan
  with pytest.raises(NonFiniteFeatureError, match=r"kind 'text'.*'v2'"):
    write_arrays(tmp_path / "a", {"text": (ids, bad)})
  # A shard written by someone else (not through the writer) is checked once, when first read.
  write_arrays(tmp_path / "b", {"text": (ids, good)})
  shard = next((tmp_path / "b" / "text").glob("*.npy"))
  np.save(shard, bad)
  with pytest.raises(NonFiniteFeatureError, match=r"feature store .*b, kind 'text'.*2 of 6 items.*'v2', 'v4'"):
    FeatureStore(tmp_path / "b").get("text", ["v0"])


def test_evaluators_refuse_non_finite_inputs():
  from vidjax import evaluate
  text = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
  video = text.copy()
  text[3] = np.inf  # used to raise T2V R@1: a NaN / Inf score ranks first
  with pytest.raises(ValueError, match=r"queries: input 'text' holds NaN or Inf in 1 of 5 rows \(rows \[3\]\)"):
    evaluate.evaluate_gallery(evaluate.CosineScorer(), {"text": text}, {"candidates": video}, np.arange(5))
  with pytest.raises(ValueError, match="input 'candidates' holds NaN"):
    evaluate.score_pools(evaluate.CosineScorer(), {"text": video, "candidates": np.stack([text, video], 1)})


def test_reimporting_changed_values_is_refused_not_kept_silently(tmp_path):
  from vidjax.data.features import StaleFeatureError
  ids = ["a", "b"]
  x = np.ones((2, 3), np.float32)
  write_arrays(tmp_path, {"clip": (ids, x)})
  write_arrays(tmp_path, {"clip": (ids, x)})  # the same values again: a resume, nothing new is written
  assert len(list((tmp_path / "clip").glob("*.npy"))) == 1
  with pytest.raises(StaleFeatureError, match=r"kind 'clip'.*id 'a' is already stored with other values"):
    write_arrays(tmp_path, {"clip": (ids, 2 * x)})
  np.testing.assert_array_equal(FeatureStore(tmp_path).get("clip", ids), x)  # what was written is kept


def test_vedje_k_sweep_of_zero_is_a_config_error():
  from pathlib import Path
  from vidjax.experiments import vedje
  from vidjax.experiments.common import load_config
  config = load_config(Path(__file__).resolve().parents[1] / "configs/vedje_msrvtt.py:smoke")
  config.eval.k_sweep = (0, 10)  # used to print a "K=0" row holding the K=10 numbers
  with pytest.raises(ValueError, match=r"config.eval.k_sweep=\(0, 10\) is invalid: expected positive integers"):
    vedje.validate(config)


def test_a_negative_seed_is_one_clear_error(tmp_path):
  from pathlib import Path
  from vidjax.experiments import retrieval
  from vidjax.experiments.common import load_config
  config = load_config(Path(__file__).resolve().parents[1] / "configs/retrieval_msrvtt.py:smoke")
  config.seed = -1  # used to fail inside NumPy without naming the key
  with pytest.raises(ValueError, match=r"config.seed=-1 is invalid: expected an integer in \[0, 2\*\*32 - 1\]"):
    retrieval.run(config, tmp_path / "run")
  assert not (tmp_path / "run").exists()  # validated before anything is written


def _release_entry(**over):
  e = {"key": "k0", "video_id": "v", "type": "temp_reorder", "original_video/start_time": 0.0,
       "original_video/end_time": 10.0, "query_video/start_time": 0.0, "query_video/end_time": 10.0,
       "positive_text": "a b. then c d.", "negative_text": "c d. then a b.", "positive_start_time": 0.0,
       "positive_end_time": 10.0, "negative_start_time": 0.0, "negative_end_time": 10.0}
  e.update(over)
  return e


@pytest.mark.parametrize("over,message", [
    ({"negative_text": "a b. then c d."}, "k0.*negative text equals the positive"),
    ({"positive_end_time": 12.5}, r"k0.*\[positive_start_time, positive_end_time\] = \[0.0, 12.5\] lies outside"),
    ({"query_video/start_time": -0.0, "query_video/end_time": 11.0}, "query_video/end_time.*outside"),
])
def test_videocomp_release_entries_that_were_accepted_but_wrong(tmp_path, over, message):
  from vidjax.data import comp
  path = tmp_path / "release.json"
  path.write_text(json.dumps([_release_entry(**over)]))
  with pytest.raises(ValueError, match=message):
    comp.read_release(path)
  path.write_text(json.dumps([_release_entry()]))
  assert len(comp.read_release(path)) == 1


def test_annotation_times_past_the_video(tmp_path):
  yc2 = tmp_path / "yc2.json"
  yc2.write_text(json.dumps({"database": {"v": {"subset": "training", "recipe_type": "1", "duration": 30.0,
                                                "annotations": [{"segment": [20, 45], "id": 0, "sentence": "x"}]}}}))
  with pytest.raises(ValueError, match=r"yc2.json: video 'v' annotation #0: segment \[20.0, 45.0\] ends after the video"):
    annotations.read_youcook2(yc2)
  an = tmp_path / "an.json"
  an.write_text(json.dumps({"v_a": {"duration": 10.0, "timestamps": [[0, 10.004], [2, 4]], "sentences": ["x", "y"]}}))
  data = annotations.read_activitynet_captions(an)
  assert data.clipped == 1 and data.captions[0].end == 10.0  # float rounding: clipped and counted
  an.write_text(json.dumps({"v_a": {"duration": 10.0, "timestamps": [[0, 13.0]], "sentences": ["x"]}}))
  with pytest.raises(ValueError, match=r"sentence #0: timestamp \[0.0, 13.0\] runs 3.000 s past the video"):
    annotations.read_activitynet_captions(an)


@pytest.mark.parametrize("damage,message", [
    (lambda d: (d / "clip").glob("*.npy").__next__().write_bytes(b"\x93NUMPY"), r"clip/p0-00000.*cannot be read"),
    (lambda d: (d / "clip").glob("*.npy").__next__().write_bytes(b""), r"clip/p0-00000.*cannot be read"),
    (lambda d: (d / "clip" / "p0-00000.ids.json").write_text(json.dumps(
        {**json.loads((d / "clip" / "p0-00000.ids.json").read_text()), "ids": ["a", "b", "c"]})), r"3 ids but an array"),
    (lambda d: (d / "clip" / "p0-00000.ids.json").write_text('{"rows": ["a"]}'), r"has no 'ids' list"),
])
def test_a_corrupt_shard_names_the_store_and_shard(tmp_path, damage, message):
  write_arrays(tmp_path, {"clip": (["a", "b"], np.ones((2, 3), np.float32))})
  damage(tmp_path)
  with pytest.raises(ValueError, match=message):
    FeatureStore(tmp_path).get("clip", ["a"])


def test_a_crosstask_file_that_is_not_utf8_names_the_file(tmp_path):
  import shutil
  from pathlib import Path
  root = tmp_path / "crosstask"
  shutil.copytree(Path(__file__).resolve().parent / "fixtures" / "crosstask", root)
  victim = sorted((root / "annotations").glob("*.csv"))[0]
  victim.write_bytes(b"1,0.0,1.5\n\xff\xfe2,2.0,3.0\n")
  with pytest.raises(ValueError, match=rf"{victim.name}: file: expected UTF-8 text"):
    annotations.read_crosstask(root)


def test_a_shard_is_on_disk_whole_or_not_at_all(tmp_path):
  store = FeatureStore.create(tmp_path, {})
  with store.writer("clip") as w:
    w.add("a", np.ones(3, np.float32))
  # A writer killed between a shard's array file and its id list (the commit) leaves an orphan array file.
  np.save(tmp_path / "clip" / "p0-00001.npy", np.zeros((5, 3), np.float32))
  assert FeatureStore(tmp_path).ids("clip") == ["a"]  # readers never see it
  with store.writer("clip") as w:  # the next writer removes it before it commits anything
    w.add("b", np.full(3, 2.0, np.float32))
  assert sorted(p.name for p in (tmp_path / "clip").iterdir()) == [
      "p0-00000.ids.json", "p0-00000.npy", "p0-00001.ids.json", "p0-00001.npy"]
  np.testing.assert_array_equal(FeatureStore(tmp_path).get("clip", ["a", "b"]), [[1, 1, 1], [2, 2, 2]])


def test_strict_refuses_a_batch_larger_than_the_training_set_before_anything_is_written(tmp_path):
  """`strict=True`: the size is refused (not clipped), naming the key, the value, what fits and `strict`; the run
  wrote nothing but its pending config record and the world it read."""
  from pathlib import Path
  from vidjax.experiments import cast
  from vidjax.experiments.common import load_config
  config = load_config(Path(__file__).resolve().parents[1] / "configs/cast_coin.py:smoke")
  config.train.batch_size = 100_000
  config.strict = True
  with pytest.raises(ValueError, match=r"config.train.batch_size=100000 does not fit the data: at most \d+ fits "
                                       r"\(the \d+ training instances of this coin benchmark\); strict=True refuses"):
    cast.run(config, tmp_path / "run")
  written = {p.relative_to(tmp_path / "run").parts[0] for p in (tmp_path / "run").rglob("*") if p.is_file()}
  assert written == {"config.pending.json", "world"}


def test_a_workdir_trained_on_other_features_is_refused_before_any_checkpoint_is_read(tmp_path):
  from vidjax.data.provenance import check_store  # pylint: disable=g-import-not-at-top
  ids = ["a", "b"]
  store = write_arrays(tmp_path / "store", {"clip": (ids, np.ones((2, 8), np.float32))}, {"backbone": "lvt_base"})
  check_store(tmp_path / "run", store, ["clip", "text"])  # first use: recorded
  check_store(tmp_path / "run", store, ["clip", "text"])  # the same features: fine
  # The store re-extracted in place with a wider backbone: the run's checkpoints no longer fit.
  import shutil  # pylint: disable=g-import-not-at-top
  shutil.rmtree(tmp_path / "store")
  wider = write_arrays(tmp_path / "store", {"clip": (ids, np.ones((2, 16), np.float32))}, {"backbone": "lvt_base"})
  with pytest.raises(ValueError, match=r"kind 'clip' \[8\] -> \[16\].*use a new --workdir"):
    check_store(tmp_path / "run", wider, ["clip", "text"])
  other = write_arrays(tmp_path / "other", {"clip": (ids, np.ones((2, 8), np.float32))}, {"backbone": "lvt_large"})
  with pytest.raises(ValueError, match=r"backbone 'lvt_base' -> 'lvt_large'"):
    check_store(tmp_path / "run", other, ["clip"])


ROOT = Path(__file__).resolve().parents[1]


def _msrvtt_run(tmp_path, clip=None):
  """A tiny MSR-VTT 1k-A-layout test file and a store of its clip / text embeddings; the retrieval config on them."""
  from vidjax.experiments.common import load_config  # pylint: disable=g-import-not-at-top
  csv = tmp_path / "test.csv"
  csv.write_text("key,vid_key,video_id,sentence\n" + "".join(
      f"ret{i},msr{i},video{i},a caption of video {i} with object {i % 3}\n" for i in range(8)))
  data = annotations.read_msrvtt(csv)
  rng = np.random.default_rng(0)
  video = rng.normal(size=(8, 6)).astype(np.float32) if clip is None else clip
  text = rng.normal(size=(8, 6)).astype(np.float32)
  write_arrays(tmp_path / "store", {"clip": (data.video_ids(), video),
                                    "text": ([c.caption_id for c in data.captions], text)}, {"backbone": "test"})
  config = load_config(ROOT / "configs/retrieval_msrvtt.py")
  config.data.update(annotations=str(csv), features=str(tmp_path / "store"))
  return config


def test_a_failed_run_does_not_poison_its_workdir(tmp_path):
  """config.json used to be recorded before the inputs were checked: after a run that failed on a bad value or a
  missing annotation file, the corrected rerun was refused as "made by a different config"."""
  from vidjax.experiments import retrieval  # pylint: disable=g-import-not-at-top
  config = _msrvtt_run(tmp_path)
  good = config.data.annotations
  run = tmp_path / "run"
  config.data.annotations = str(tmp_path / "missing.csv")
  with pytest.raises(FileNotFoundError, match=r"config.data.annotations: no such file or folder: .*missing.csv"):
    retrieval.run(config, run)
  assert not run.exists()  # checked before the workdir is made
  # A file that exists but is not what it claims fails after the record: the record binds nothing while the
  # workdir holds nothing else.
  (tmp_path / "bad.csv").write_text("key,vid_key,video_id,sentence\nret0,msr0\n")
  config.data.annotations = str(tmp_path / "bad.csv")
  with pytest.raises(ValueError, match="bad.csv"):
    retrieval.run(config, run)
  assert sorted(p.name for p in run.iterdir()) == ["config.pending.json"]
  config.data.annotations = good
  results = retrieval.run(config, run)  # the corrected rerun goes ahead
  assert results["benchmark"]["queries"] == 8 and (run / "config.json").is_file()
  assert not (run / "config.pending.json").exists()
  config.seed = 3  # a finished run's record still refuses a different config
  with pytest.raises(ValueError, match=r"made by a different config \(changed: seed\)"):
    retrieval.run(config, run)


def test_a_killed_runs_record_binds_once_it_wrote_files(tmp_path):
  from vidjax.experiments import common  # pylint: disable=g-import-not-at-top
  config = _msrvtt_run(tmp_path)
  run = common.start_run(config, tmp_path / "run", lambda c: None)
  (run / "checkpoints").mkdir()
  (run / "checkpoints" / "x").write_text("state")  # a run killed after it wrote something
  config.seed = 5
  with pytest.raises(ValueError, match=r"made by a different config \(changed: seed\)"):
    common.start_run(config, run, lambda c: None)
  config.seed = 0
  common.start_run(config, run, lambda c: None)  # the same config resumes


def test_a_store_without_a_kind_names_it_and_prepare_before_anything_is_written(tmp_path):
  from vidjax.experiments import retrieval  # pylint: disable=g-import-not-at-top
  config = _msrvtt_run(tmp_path)
  config.data.text_kind = "text_lvt"
  with pytest.raises(ValueError, match=r"feature store .*store has no kind \['text_lvt'\] \(config.data.text_kind: "
                                       r"the query texts' embeddings; it has \['clip', 'text'\]\).*configs/prepare.py"):
    retrieval.run(config, tmp_path / "run")
  assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("clip,message", [
    (np.zeros((8, 6), np.float32), "all 8 corpus video vectors are zero"),
    (np.ones((8, 6), np.float32), "all 8 corpus video vectors are the same vector"),
])
def test_features_that_rank_nothing_are_refused(tmp_path, clip, message):
  """A store whose clip vectors are all zero used to run retrieval to exit 0 (R@1 0, R@5 100) without a warning."""
  from vidjax.experiments import retrieval  # pylint: disable=g-import-not-at-top
  config = _msrvtt_run(tmp_path, clip=clip)
  with pytest.raises(ValueError, match=rf"feature store .*store kind 'clip': {message}"):
    retrieval.run(config, tmp_path / "run")
  assert not (tmp_path / "run" / "results.json").exists()


def test_a_workdir_that_is_a_file_is_one_clear_error(tmp_path):
  from vidjax.experiments import common  # pylint: disable=g-import-not-at-top
  (tmp_path / "f").write_text("x")
  config = _msrvtt_run(tmp_path)
  for workdir in (tmp_path / "f", tmp_path / "f" / "run"):
    with pytest.raises(FileExistsError, match=rf"--workdir {workdir}: {tmp_path / 'f'} is a file, not a folder"):
      common.start_run(config, workdir, lambda c: None)


# One interpreter for every command-line case: it imports vidjax.main once and forks a child per case, which runs
# `entry()` with that command line (each is a fresh parse; none gets past the command line and the config file).
_CLI_DRIVER = r"""
import json, os, sys
from vidjax import main
out = []
for argv in json.loads(sys.argv[1]):
  r, w = os.pipe()
  pid = os.fork()
  if pid == 0:
    os.close(r)
    os.dup2(w, 1)
    os.dup2(w, 2)
    sys.argv = ["vidjax.main", *argv]
    code = 0
    try:
      main.entry()
    except SystemExit as e:
      code = e.code if isinstance(e.code, int) else 1
    except BaseException:
      import traceback
      traceback.print_exc()
      code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
  os.close(w)
  text = b""
  while chunk := os.read(r, 65536):
    text += chunk
  os.close(r)
  out.append({"rc": os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), "output": text.decode()})
print(json.dumps(out))
"""


def _cli_cases(cases, env=None):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  proc = subprocess.run([sys.executable, "-c", _CLI_DRIVER, json.dumps(cases)], cwd=ROOT, capture_output=True,
                        text=True, timeout=120, env=dict(os.environ, JAX_PLATFORMS="cpu", **(env or {})))
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_command_line_and_config_file_errors_are_one_line_and_exit_2(tmp_path):
  """A config file with a syntax error, without get_config, or whose get_config returns a dict or names an unknown
  experiment, and a command line without --workdir, with an empty one or an extra argument: each used to print a
  traceback or absl's usage screen with exit status 1. Now one line, exit 2, before any JAX work."""
  (tmp_path / "syntax.py").write_text("def get_config(arg=None:\n  pass\n")
  (tmp_path / "none.py").write_text("X = 1\n")
  (tmp_path / "dict.py").write_text("def get_config(arg=None):\n  return {'experiment': 'cast'}\n")
  (tmp_path / "typo.py").write_text("def get_config(arg=None):\n  return configdict\n")
  (tmp_path / "unknown.py").write_text("import ml_collections\n\ndef get_config(arg=None):\n"
                                       "  return ml_collections.ConfigDict({'experiment': 'castt', 'seed': 0})\n")
  w = str(tmp_path / "w")
  cases = {
      "syntax": (["--config", str(tmp_path / "syntax.py"), "--workdir", w],
                 rf"--config {tmp_path}/syntax.py: {tmp_path}/syntax.py:1: SyntaxError: "),
      "none": (["--config", str(tmp_path / "none.py"), "--workdir", w], r"the file defines no get_config\(arg\)"),
      "dict": (["--config", str(tmp_path / "dict.py"), "--workdir", w],
               r"dict.py: get_config returned a dict, not an ml_collections.ConfigDict"),
      "typo": (["--config", str(tmp_path / "typo.py"), "--workdir", w],
               r"typo.py:2: NameError: name 'configdict' is not defined"),
      "unknown": (["--config", str(tmp_path / "unknown.py"), "--workdir", w],
                  r"unknown.py: config.experiment='castt' is not one of \['backbone', 'cast',"),
      "no workdir": (["--config", "configs/cast_coin.py:smoke"], r"--workdir is required"),
      "empty workdir": (["--config", "configs/cast_coin.py:smoke", "--workdir="], r"--workdir is empty \(''\)"),
      "extra argument": (["--config", "configs/cast_coin.py:smoke", "--workdir", w, "smoke"],
                         r"unexpected argument\(s\) 'smoke'"),
      "no config": (["--workdir", w], r"--config is required"),
  }
  results = _cli_cases([args for args, _ in cases.values()])
  for (name, (_, pattern)), got in zip(cases.items(), results):
    lines = got["output"].strip().splitlines()
    assert got["rc"] == 2 and len(lines) == 1 and lines[0].startswith("vidjax: error: "), (name, got["output"][-2000:])
    assert re.search(pattern, lines[0]), (name, lines[0])
  assert not (tmp_path / "w").exists()
  debug = _cli_cases([cases["dict"][0]], env={"VIDJAX_DEBUG": "1"})[0]
  assert debug["rc"] != 2 and "Traceback (most recent call last)" in debug["output"]


def test_config_values_checked_only_after_training_are_refused_before_any_work(tmp_path):
  """eval.chunk=0, a NaN or string in CAST's w_p_grid, a seed past 32 bits (PRNGKey(2**32) == PRNGKey(0): the run
  silently repeated seed 0's) and num_frames=-1 used to pass the config checks and fail (or not) after training."""
  from vidjax.experiments import common, extract, prepare  # pylint: disable=g-import-not-at-top
  from vidjax.experiments.common import load_config  # pylint: disable=g-import-not-at-top
  from vidjax.methods import cast  # pylint: disable=g-import-not-at-top
  cases = [
      ("cast_coin.py:smoke", "eval.chunk", 0, cast.validate, r"config.eval.chunk=0 is invalid: expected a positive "),
      ("cast_coin.py:smoke", "eval.w_p_grid", (0.2, float("nan")), cast.validate,
       r"config.eval.w_p_grid=\(0.2, nan\) is invalid: expected finite numbers >= 0"),
      ("stack_coin.py:smoke", "eval.w_v_grid", (0.1, -0.5), cast.validate, r"config.eval.w_v_grid=\(0.1, -0.5\)"),
      ("cast_coin.py:smoke", "seed", 2**32, cast.validate, r"config.seed=4294967296 is invalid: expected an integer in "
                                                           r"\[0, 2\*\*32 - 1\]"),
      ("cast_coin.py:smoke", "data.crosstask_split_seed", -1, cast.validate, r"config.data.crosstask_split_seed=-1"),
      ("genstate_rendered.py:smoke", "extract.seed", 2**40, lambda c: None, r"config.extract.seed=1099511627776"),
      ("prepare.py:smoke", "num_frames", -1, prepare.validate, r"config.num_frames=-1 is invalid: expected an integer "
                                                               r">= 0"),
      ("extract_videoprism.py:smoke", "num_frames", -1, extract.validate, r"config.num_frames=-1 is invalid"),
      ("cast_coin.py:smoke", "train.num_state_negatives", -1, cast.validate,
       r"config.train.num_state_negatives=-1 is invalid"),
      ("vedje_msrvtt.py:smoke", "eval.query_chunk", 0, lambda c: None, r"config.eval.query_chunk=0 is invalid"),
  ]
  for i, (spec, key, value, validate, message) in enumerate(cases):
    config = load_config(ROOT / "configs" / spec)
    *parents, leaf = key.split(".")
    section = config
    for part in parents:
      section = section[part]
    with config.unlocked():
      section[leaf] = value
    if spec.startswith("prepare"):
      config.data.update(videos=str(tmp_path), annotations=str(tmp_path / "none.json"))
      (tmp_path / "none.json").write_text("{}")
    with pytest.raises(ValueError, match=message):
      common.start_run(config, tmp_path / f"run{i}", validate)
    assert not (tmp_path / f"run{i}").exists(), spec
  config = load_config(ROOT / "configs/vedje_msrvtt.py:smoke,seeds3")
  config.seeds = (0, 2**32)
  with pytest.raises(ValueError, match=r"config.seeds=\(0, 4294967296\) is invalid: expected two or more distinct "
                                       r"integers in \[0, 2\*\*32 - 1\]"):
    common.run_seeds(lambda c, w: None, config, tmp_path / "seeds")


def test_a_folder_given_as_a_file_names_the_key(tmp_path):
  """A folder where a key names a file (or a file where it names a folder) used to pass `check_inputs` and fail in
  a reader, after the workdir was made, with IsADirectoryError naming no key."""
  from vidjax.experiments import common  # pylint: disable=g-import-not-at-top
  config = _msrvtt_run(tmp_path)
  good = dict(config.data)
  (tmp_path / "folder").mkdir()
  config.data.annotations = str(tmp_path / "folder")
  with pytest.raises(IsADirectoryError, match=rf"config.data.annotations: {tmp_path}/folder is a folder; it names "
                                              "a file"):
    common.start_run(config, tmp_path / "a", lambda c: None)
  config.data.update(annotations=good["annotations"], features=good["annotations"])
  with pytest.raises(NotADirectoryError, match=r"config.data.features: .*test.csv is a file; it names a folder"):
    common.start_run(config, tmp_path / "b", lambda c: None)
  from vidjax.experiments.common import load_config  # pylint: disable=g-import-not-at-top
  comp = load_config(ROOT / "configs/comp_activitynet.py:smoke")
  comp.model.spm_path = str(tmp_path / "folder")
  with pytest.raises(IsADirectoryError, match=r"config.model.spm_path: .*folder is a folder; it names a file"):
    common.start_run(comp, tmp_path / "c", lambda c: None)
  assert not any((tmp_path / d).exists() for d in "abc")
  from vidjax import main  # pylint: disable=g-import-not-at-top
  try:
    common.check_inputs(config)
  except NotADirectoryError as e:
    assert main.user_error(e).startswith("config.data.features: ")  # one line at the command line


def test_a_storage_library_failure_is_one_summary_line(tmp_path):
  """orbax / TensorStore errors (a checkpoint that does not read) used to print a trace of 60+ lines ending in a
  tensorstore spec of 1,000 characters; the command line now prints one summary line (--debug: the trace)."""
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  from vidjax import main, train  # pylint: disable=g-import-not-at-top
  manager = ocp.CheckpointManager(tmp_path / "checkpoints")
  manager.save(1, args=ocp.args.Composite(state=ocp.args.StandardSave({"params": {"w": np.zeros(3, np.float32)}})))
  manager.wait_until_finished()
  manager.close()
  for path in (tmp_path / "checkpoints" / "1" / "state").rglob("manifest.ocdbt"):
    path.write_bytes(b"garbage")
  with pytest.raises(Exception) as err:  # whatever orbax raises
    train.load_params(tmp_path)
  line = main.user_error(err.value)
  assert line is not None and "\n" not in line and len(line) < 700, line
  assert line.startswith("checkpoint storage failed in train.py:") and "tensorstore_spec" not in line
  assert "--debug" in line
  assert main.storage_error(ValueError("plain")) is None


def test_sizes_the_data_cannot_fill_are_clipped_and_recorded_or_refused(tmp_path):
  """CAST's negatives per instance past what the CVR files mine (3) only added zero-vector slots to every loss; the
  stack's and VEDJE's k past the corpus were used clipped while the tables named the k asked for."""
  from vidjax import main  # pylint: disable=g-import-not-at-top
  from vidjax.defaults.common import clip_to_data  # pylint: disable=g-import-not-at-top
  from vidjax.experiments import stack  # pylint: disable=g-import-not-at-top
  from vidjax.experiments.common import load_config  # pylint: disable=g-import-not-at-top
  from vidjax.methods import vedje  # pylint: disable=g-import-not-at-top
  config = load_config(ROOT / "configs/cast_coin.py:smoke")
  config.train.num_state_negatives = 5
  plan = main.run(config, tmp_path / "cast", check=True)  # stops before training: the data read, every size fitted
  assert plan["clipped"]["train.num_state_negatives"] == [5, 3]
  assert plan["config"]["train"]["num_state_negatives"] == 3
  config.strict = True
  with pytest.raises(ValueError, match=r"config.train.num_state_negatives=5 does not fit the data: at most 3 fits "
                                       r"\(the most state negatives a training instance .* holds: 3\); strict=True"):
    main.run(config, tmp_path / "cast_strict", check=True)
  # The k of VEDJE's rerank and of the stack's stages: clipped to the gallery / corpus, the used k in the config.
  v = load_config(ROOT / "configs/vedje_msrvtt.py:smoke")
  out, clipped = clip_to_data(v, {**vedje.limits(v, 100), **vedje.gallery_limits(7)}, say=False)
  assert clipped == {"eval.k": [10, 7], "eval.cost_k": [100, 7]} and out.eval.k == 7
  s = load_config(ROOT / "configs/stack_coin.py:smoke")
  out, clipped = clip_to_data(s, stack.limits(30), say=False)
  assert clipped == {"stack.k_recall": [50, 30], "stack.rerank_k": [50, 30]}  # rerank_k_sweep (20,) and k 10 fit
  assert out.stack.k_recall == out.stack.rerank_k == 30
  with pytest.raises(ValueError, match=r"config.stack.k_recall=50 does not fit the data: nothing fits"):
    clip_to_data(s, stack.limits(8), say=False)


def test_provenance_names_the_backbone_as_built(tmp_path):
  """A store extracted by the tiny smoke VideoPrism was reported as `videoprism_lvt_public_v1_base`."""
  from vidjax.data import provenance  # pylint: disable=g-import-not-at-top
  store = write_arrays(tmp_path / "store", {"clip": (["a", "b"], np.eye(2, dtype=np.float32))},
                       {"backbone": "videoprism_lvt_public_v1_base", "random_init": True,
                        "model_overrides": {"model_dim": 32, "num_heads": 2, "pos_emb_shape": [4, 2, 2]}})
  built = provenance.real_path(tmp_path / "run", store, [])["provenance"]
  assert built["backbone"] == ("videoprism_lvt_public_v1_base with model_dim=32, num_heads=2, pos_emb_shape=(4, 2, 2) "
                               "(random init)")
  assert built["model_overrides"] == {"model_dim": 32, "num_heads": 2, "pos_emb_shape": [4, 2, 2]}
  plain = write_arrays(tmp_path / "plain", {"clip": (["a", "b"], np.eye(2, dtype=np.float32))},
                       {"backbone": "videoprism_lvt_public_v1_base", "random_init": False})
  assert provenance.real_path(tmp_path / "run2", plain, [])["provenance"]["backbone"] == "videoprism_lvt_public_v1_base"


@pytest.mark.parametrize("wrapped", [False, True])  # orbax / tensorstore may wrap the OSError in their own types
def test_a_full_disk_while_checkpointing_is_one_error_and_leaves_nothing_half_written(tmp_path, monkeypatch, wrapped):
  """Training on a full disk used to end in a 239-line orbax trace and leave `checkpoints/N.orbax-checkpoint-tmp`."""
  import errno  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  from vidjax import sharding, train  # pylint: disable=g-import-not-at-top
  from vidjax.data import pipeline  # pylint: disable=g-import-not-at-top
  source = [{"x": np.full(2, i, np.float32)} for i in range(16)]

  def fit():
    return train.fit(init_fn=lambda rng: {"w": jnp.zeros(2)},
                     loss_fn=lambda p, b, rng: (jnp.mean((b["x"] - p["w"]) ** 2), {}),
                     optimizer=train.adamw(0.1, 0.0), dataset=pipeline.make_batches(source, 4, seed=0), num_steps=4,
                     workdir=tmp_path, checkpoint_every=2, log_every=2, progress=False, mesh=sharding.make_mesh(1))

  real_save = ocp.CheckpointManager.save

  def full_disk(self, step, *args, **kwargs):
    (Path(self.directory) / f"{step}.orbax-checkpoint-tmp-1234").mkdir(parents=True, exist_ok=True)  # orbax's
    full = OSError(errno.ENOSPC, "No space left on device")
    if wrapped:
      raise ValueError("tensorstore write failed") from full
    raise full

  monkeypatch.setattr(ocp.CheckpointManager, "save", full_disk)
  with pytest.raises(OSError, match=r"no space left on device while writing checkpoint step 2 to .*checkpoints") as err:
    fit()
  assert err.value.errno == errno.ENOSPC
  assert not list((tmp_path / "checkpoints").glob("*.orbax-checkpoint-tmp*"))
  # A process killed mid-save leaves the half-written step: the next run removes it and trains.
  (tmp_path / "checkpoints" / "2.orbax-checkpoint-tmp-99").mkdir()
  monkeypatch.setattr(ocp.CheckpointManager, "save", real_save)
  state, _ = fit()
  assert int(jax.device_get(state.step)) == 4
  assert not list((tmp_path / "checkpoints").glob("*.orbax-checkpoint-tmp*"))


def test_prepare_says_no_video_file_for_an_absent_video_not_an_invalid_one():
  """prepare used to print "N of M videos are not valid video files" for videos that have no file at all."""
  from vidjax.data import provenance  # pylint: disable=g-import-not-at-top
  line = provenance.skipped_line({"a": "no video file", "b": "does not decode", "c": "no video file"}, 10, "/videos",
                                 "/store/skipped_videos.txt")
  assert line == ("3 of 10 videos are skipped: 1 has a file that does not decode; 2 have no video file under /videos "
                  "(files are found by video id) (listed with the reason in /store/skipped_videos.txt)")
  assert "not valid" not in provenance.skipped_line({"a": "no video file"}, 1, "/videos", "x")
