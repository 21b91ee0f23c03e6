"""Every config loads, carries the paper's settings, and rejects unknown keys and bad values."""
import itertools
import random
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vidjax.defaults.common import get_key
from vidjax.methods import cast
from vidjax.experiments.common import load_config

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p.name for p in (ROOT / "configs").glob("*.py"))


def load(name, arg=None):
  return load_config(f"{ROOT / 'configs' / name}" + (f":{arg}" if arg else ""))


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("arg", [None, "smoke"])
def test_every_config_loads(name, arg):
  config = load(name, arg)
  assert config.experiment and "seed" in config


@pytest.mark.parametrize("name,epochs,split", [("cast_coin.py", 30, "test"), ("cast_youcook2.py", 30, "val"),
                                               ("cast_crosstask.py", 50, "test")])
def test_cast_configs_carry_paper_settings(name, epochs, split):
  c = load(name)
  assert (c.train.lr, c.train.weight_decay, c.train.batch_size, c.train.epochs) == (1e-4, 1e-3, 512, epochs)
  assert (c.train.tau, c.train.lambda_s, c.train.lambda_i) == (0.07, 5.0, 1.0)
  assert (c.model.context_len, c.model.num_heads, c.model.dropout_rate) == (5, 8, 0.1)
  assert c.data.eval_split == split
  assert tuple(c.eval.w_v_grid) == (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
  assert tuple(c.eval.w_p_grid)[0] == 0.2 and tuple(c.eval.w_p_grid)[-1] == 1.5 and len(c.eval.w_p_grid) == 14
  assert tuple(c.sweep.context_lengths) == (0, 1, 2, 3, 4, 5)
  cast.validate(c)


def test_crosstask_split_is_the_papers():
  c = load("cast_crosstask.py")
  assert (c.data.crosstask_test_fraction, c.data.crosstask_split_seed) == (0.2, 42)


def test_youcook2_plain_config_mines_captions_as_the_paper_and_the_world_keeps_its_rule(tmp_path):
  """The plain config runs the paper's identity rule (caption similarity, App. B) on a user's store; `real` names
  the same; the procedural world brings the dataset's rule for its files through the data keys it writes (caption
  similarity on YouCook2, whose world captions name task and step; task + step on COIN)."""
  from vidjax.experiments.common import world_data  # pylint: disable=g-import-not-at-top
  from vidjax.worlds import procedural  # pylint: disable=g-import-not-at-top
  assert load("cast_youcook2.py").data.identity_rule == "caption_similarity"
  assert load("cast_youcook2.py", "real").data.identity_rule == "caption_similarity"
  for name, rule in (("cast_youcook2.py", "caption_similarity"), ("cast_coin.py", "task_step")):
    config = load(name, "smoke")
    world = world_data(config, tmp_path / name, lambda c, root: {
        "annotations": root / "a.json", "features": root / "f", "identity_rule": procedural.IDENTITY_RULES[c.dataset]})
    assert world.data.identity_rule == rule


def test_every_method_config_has_strict_off():
  for name in ("cast_coin.py", "comp_activitynet.py", "genstate_rendered.py", "grdr_msrvtt.py", "vedje_msrvtt.py",
               "retrieval_msrvtt.py"):
    assert load(name).strict is False


def test_locked_config_rejects_new_keys():
  with pytest.raises(AttributeError):
    load("cast_coin.py").train.epochz = 3


@pytest.mark.parametrize("key,value,message", [
    ("train.batch_size", 0, "train.batch_size=0 is invalid"),
    ("dataset", "msrvtt", "config.dataset='msrvtt' is invalid"),
    ("model.compute_dtype", "float16", "model.compute_dtype='float16'"),
    ("data.heldout_fraction", 1.5, "data.heldout_fraction=1.5"),
])
def test_bad_values_give_one_clear_error(key, value, message):
  c = load("cast_coin.py")
  section, _, field = key.rpartition(".")
  (c[section] if section else c)[field] = value
  with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
    cast.validate(c)


def test_cli_rejects_unknown_config_key(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run(
      [sys.executable, "-m", "vidjax.main", "--config", "configs/cast_coin.py:smoke", "--config.train.epochz=3",
       "--workdir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
  assert proc.returncode == 2
  # One line naming the key, with ml_collections' hint (it used to be a ~50-line chained traceback).
  assert proc.stderr.strip().splitlines() == [
      "vidjax: unknown config key 'epochz'; Did you mean \"epochs\" instead of \"epochz\"?"], proc.stderr
  assert not (tmp_path / "results.json").exists()


def test_loading_every_config_imports_no_jax():
  """Configs build from the light defaults modules: loading one must not import jax or flax."""
  script = (
      "import importlib.util, pathlib, sys\n"
      "for path in sorted(pathlib.Path('configs').glob('*.py')):\n"
      "  spec = importlib.util.spec_from_file_location(path.stem, path)\n"
      "  module = importlib.util.module_from_spec(spec)\n"
      "  spec.loader.exec_module(module)\n"
      "  module.get_config(None); module.get_config('smoke')\n"
      "heavy = sorted(m for m in ('jax', 'flax', 'optax', 'orbax', 'grain') if m in sys.modules)\n"
      "assert not heavy, heavy\n"
      "print('ok')\n")
  proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_clip_variant_restores_the_clip_rows_and_variants_combine():
  assert load("cast_coin.py", "clip").train.epochs == 20  # Table 11, CLIP row
  assert load("cast_youcook2.py", "clip").train.epochs == 30 and load("cast_crosstask.py", "clip").train.epochs == 50
  both = load("cast_youcook2.py", "smoke,real")
  assert both.train.epochs == 2 and both.data.identity_rule == "caption_similarity"
  with pytest.raises(ValueError, match="unknown variant 'bogus'"):
    load("cast_coin.py", "bogus")


@pytest.mark.parametrize("dataset", ["msrvtt", "didemo", "activitynet", "lsmdc"])
def test_grdr_configs_carry_paper_settings(dataset):
  c = load(f"grdr_{dataset}.py")
  views, codes = (1, 200) if dataset == "lsmdc" else (4, 128)  # GRDR §4.3
  assert (c.model.num_views, c.model.num_layers, c.model.num_codes) == (views, 3, codes)
  w = load(f"grdr_{dataset}.py", "world")
  assert (w.model.num_views, w.model.num_codes) == (views, codes)
  assert (c.model.t5.d_model, c.model.t5.encoder_layers, c.model.t5.decoder_layers) == (512, 6, 6)  # T5-Small
  a1 = c.train.algorithm1  # Algorithm 1 as its authors run it (configs/grdr/common.py names each value's source)
  assert (c.train.schedule, a1.lr, c.train.batch_size) == ("progressive", 1e-4, 512)
  # §4.3's 3 / 1 alignment epochs and 4 co-training epochs: the official main (2) and fit (2) phases
  assert (a1.first_align_epochs, a1.align_epochs, a1.cotrain_epochs, a1.fit_epochs) == (3, 1, 2, 2)
  assert dict(a1.phase_weights) == {"align": (0.5, 0.0, 0.5, 0.0, 0.0), "cotrain": (0.2, 0.5, 0.8, 0.1, 0.3),
                                    "fit": (0.0, 1.0, 1.0, 0.0, 0.0)}
  assert (c.eval.beam_width, c.eval.candidates) == (100, 300)  # the release's routes and candidate_handoff_cap
  for name, s in c.official.followed.items():  # every sourced value is the config's (the dataset configs scale none)
    assert s.key is None or get_key(c, s.key) == s.official, name
  assert ("didemo_codebook_size" in c.official.not_followed) == (dataset == "didemo")  # the paper's K = 128 there
  # X-Pool reranks every GR row (§4.2-4.3), trained at its paper's settings (configs/dense/common.py) on the store's
  # per-frame embeddings in the text space, the kind prepare and both worlds write
  assert c.eval.reranker == "xpool" and c.data.frames_kind == w.data.frames_kind == "frame_clip"
  assert (c.dense.train.xpool.batch_size, c.dense.train.xpool.epochs, c.dense.model.num_frames) == (32, 15, 12)


def test_seeds_run_each_seed_and_report_mean_and_std(tmp_path):
  """`config.seeds` (VEDJE's `:seeds3`): one run per seed in its own folder, then the same results shape with the
  means, a std tree (population std) and the seeds; a bad list is one clear error."""
  from vidjax.experiments import common  # pylint: disable=g-import-not-at-top
  config = load_config(ROOT / "configs/vedje_msrvtt.py:smoke,seeds3")
  assert tuple(config.seeds) == (0, 1, 2)
  seen = []

  def fake_run(c, workdir):
    assert "seeds" not in c
    seen.append((c.seed, Path(workdir).name))
    return {"experiment": "x", "dataset": "d", "synthetic": True, "path": "world", "skipped_videos": [],
            "config": {}, "metrics": {"m": {"r1": 10.0 * c.seed, "name": "same"}},
            "ablations": {"t": {"row": {"r1": float(c.seed ** 2)}}}}

  out = common.run_seeds(fake_run, config, tmp_path)
  assert seen == [(0, "seed_0"), (1, "seed_1"), (2, "seed_2")]
  assert out["metrics"]["m"] == {"r1": 10.0, "name": "same"} and out["std"]["metrics"]["m"] == {"r1": 8.165}
  assert out["ablations"]["t"]["row"]["r1"] == pytest.approx(5 / 3, abs=1e-4)
  assert out["std"]["ablations"]["t"]["row"]["r1"] == pytest.approx(np.std([0, 1, 4]), abs=1e-4)
  assert out["seeds"] == [0, 1, 2] and (tmp_path / "results.json").is_file()
  with config.unlocked():
    config.seeds = (1, 1)
  with pytest.raises(ValueError, match="seeds=.* is invalid"):
    common.run_seeds(fake_run, config, tmp_path)


def _variants(name):
  """The variant names `configs/<name>` knows (from its one error for an unknown one)."""
  with pytest.raises(ValueError, match="unknown variant") as err:
    load(name, "no_such_variant")
  known = re.search(r"\(known: (.*)\)$", str(err.value)).group(1)
  return [] if known == "none" else known.split(", ")


def _load_or_error(name, arg):
  try:
    return load(name, arg).to_dict()
  except ValueError as e:
    return str(e)


@pytest.mark.parametrize("name", CONFIGS)
def test_variants_mean_the_same_in_any_order(name):
  """`smoke,world` used to undo `smoke` (VEDJE: 750 steps, an hour) while `world,smoke` gave smoke: the variants of
  every config now give the same config (or the same error, for two that exclude each other) in any order."""
  names = _variants(name)
  # Every pair in both orders, and all of them in three orders (declared, reversed, shuffled): every permutation
  # of all of them would be up to 720 loads a config.
  orders = [order for pair in itertools.combinations(names, 2) for order in (pair, pair[::-1])]
  if len(names) > 2:
    shuffled = list(names)
    random.Random(0).shuffle(shuffled)
    orders += [tuple(names), tuple(names[::-1]), tuple(shuffled)]
  for group in {tuple(sorted(o)) for o in orders}:
    results = {o: _load_or_error(name, ",".join(o)) for o in orders if tuple(sorted(o)) == group}
    first = next(iter(results.values()))
    assert all(r == first for r in results.values()), (name, group)


@pytest.mark.parametrize("name", ["vedje_msrvtt.py", "comp_activitynet.py", "grdr_msrvtt.py"])
def test_smoke_wins_over_world_in_either_order(name):
  values = lambda arg: {k: v for k, v in load(name, arg).to_dict().items() if k != "variants"}  # noqa: E731
  smoke = values("smoke")
  assert values("smoke,world") == smoke == values("world,smoke")
  assert load(name, "smoke,world").variants == load(name, "world,smoke").variants == ("world", "smoke")
  if name == "vedje_msrvtt.py":
    assert smoke["train"]["epochs"] == 1 and smoke["model"]["hidden_size"] == 32


def test_shrinking_variants_apply_last():
  assert load("cast_coin.py", "smoke,clip").train.epochs == load("cast_coin.py", "clip,smoke").train.epochs == 2


@pytest.mark.parametrize("name", CONFIGS)
def test_contradicting_variants_are_one_error(name):
  """Where the data and the model come from (`world`, `rendered`: the embedded world or the rendered corpus's store)
  and `smoke` (a tiny world) contradict `rendered` in every config that has both, in either order: the stack's
  `smoke,rendered` used to run `smoke` and drop `rendered` silently."""
  known = _variants(name)
  pairs = [p for p in (("world", "rendered"), ("smoke", "rendered"), ("fast", "all")) if set(p) <= set(known)]
  for pair in pairs:
    for order in (pair, pair[::-1]):
      with pytest.raises(ValueError, match=rf"variants '{pair[0]}' and '{pair[1]}' exclude each other|"
                                           rf"variants '{pair[1]}' and '{pair[0]}' exclude each other"):
        load(name, ",".join(order))


def test_a_config_records_the_variants_it_was_made_with():
  """results.json's `variants` (a run started as `comp_activitynet.py:rendered` said nowhere that it was)."""
  from vidjax.experiments import common  # pylint: disable=g-import-not-at-top
  assert load("cast_coin.py", "smoke,clip").variants == load("cast_coin.py", "clip,smoke").variants == ("clip", "smoke")
  assert load("cast_coin.py").variants == ()
  config = load("comp_activitynet.py", "rendered")
  results = common.results_dict(config, dataset="d", synthetic=False, metrics={})
  assert results["variants"] == ["rendered"] and results["config"]["variants"] == ["rendered"]
  # The names may change between runs in one workdir: the values they set are what `check_workdir` compares.
  assert common.is_resumable("variants")


def _range_leaves(config):
  """(key, out-of-range value) for every leaf `check_ranges` covers."""
  from vidjax.defaults import common as defaults  # pylint: disable=g-import-not-at-top
  out = []
  for key, value in defaults._leaves(config):  # pylint: disable=protected-access
    name = key.rpartition(".")[2]
    for matches, ok, _ in defaults.RANGES:
      if matches(name) and value is not None:
        out.append((key, next(v for v in (2.0, -1.0, 0.0, float("nan")) if not ok(v) or v != v)))
  return out


@pytest.mark.parametrize("name", CONFIGS)
def test_every_rate_probability_and_fraction_is_range_checked(name):
  """`--config.model.dropout_rate=2.0` used to train and exit 0: every rate, probability, fraction (and learning
  rate, temperature, weight decay) of every config is checked before any work, one error naming the key."""
  from vidjax.defaults import common as defaults  # pylint: disable=g-import-not-at-top
  config = load(name, "smoke")
  defaults.check_ranges(config)  # the defaults themselves are in range
  defaults.check_heads(config)
  for key, bad in _range_leaves(config):
    changed = load(name, "smoke")
    section, _, leaf = key.rpartition(".")
    with changed.unlocked():
      (defaults.get_key(changed, section) if section else changed)[leaf] = bad
    with pytest.raises(ValueError, match=rf"config\.{re.escape(key)}={re.escape(repr(bad))} is invalid"):
      defaults.check_ranges(changed)


def test_a_bad_rate_or_head_count_stops_before_the_workdir_is_made(tmp_path):
  from vidjax.experiments import cast as cast_experiment, common, vedje  # pylint: disable=g-import-not-at-top
  config = load("vedje_msrvtt.py", "smoke")
  config.model.dropout_rate = 2.0
  with pytest.raises(ValueError, match=r"config.model.dropout_rate=2.0 is invalid: expected a dropout rate in \[0, 1\)"):
    vedje.run(config, tmp_path / "a")
  config = load("vedje_msrvtt.py", "smoke")
  config.model.num_heads = 3  # hidden_size 32: used to fail inside JAX tracing after 69 files were written
  with pytest.raises(ValueError, match=r"config.model.num_heads=3 is invalid: .*dividing model.hidden_size=32"):
    vedje.run(config, tmp_path / "b")
  config = load("comp_activitynet.py", "smoke")
  config.model.pool_heads = 3
  with pytest.raises(ValueError, match=r"config.model.pool_heads=3 is invalid: .*model.width=32"):
    common.start_run(config, tmp_path / "c", lambda c: None)
  config = load("cast_coin.py", "smoke")
  config.model.num_heads = 3  # CAST's heads split the world's 32 dimensions: 3 silently dropped 2 of them
  with pytest.raises(ValueError, match=r"config.model.num_heads=3 is invalid: .*dividing world.dim=32"):
    cast_experiment.run(config, tmp_path / "d")
  assert not any((tmp_path / d).exists() for d in "abcd")


def _cli(*args, env=None, timeout=180):
  return subprocess.run([sys.executable, "-m", "vidjax.main", *args], cwd=ROOT, capture_output=True, text=True,
                        env=dict(os.environ, JAX_PLATFORMS="cpu", **(env or {})), timeout=timeout)


def test_cli_errors_about_input_are_one_line(tmp_path):
  """Config, input and workdir errors the project raises print one line and exit 2 (they used to print 9-16-frame
  tracebacks, a 12-frame one for a missing --config file, FileExistsError from os.mkdir for a --workdir file);
  VIDJAX_DEBUG=1 (or --debug) shows the traceback."""
  (tmp_path / "file").write_text("x")
  cases = [
      (["--config", "configs/nope.py:smoke", "--workdir", str(tmp_path / "a")],
       "vidjax: error: --config configs/nope.py: no such config file"),
      (["--config", "configs/retrieval_msrvtt.py:bogus", "--workdir", str(tmp_path / "a")],
       "vidjax: configs/retrieval_msrvtt.py: unknown variant 'bogus' (known: smoke)"),
      (["--config", "configs/vedje_msrvtt.py:smoke", "--config.model.dropout_rate=2.0", "--workdir",
        str(tmp_path / "b")], "vidjax: error: config.model.dropout_rate=2.0 is invalid: expected a dropout rate"),
  ]
  # One case per way an error reaches the CLI (before absl, in absl's flag parsing, in a run); the other messages
  # (a --workdir that is a file, a missing input) are the same ValueError path, checked in-process in
  # tests/test_bad_inputs.py. Each case is a fresh interpreter (~3 s).
  for args, line in cases:
    proc = _cli(*args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(line), (args, proc.stderr[-3000:])
  assert not any((tmp_path / d).exists() for d in "ab")
  debug = _cli(*cases[2][0], env={"VIDJAX_DEBUG": "1"})
  assert debug.returncode != 0 and "Traceback (most recent call last)" in debug.stderr
  assert "config.model.dropout_rate=2.0 is invalid" in debug.stderr


def test_cli_helpers():
  from vidjax import main  # pylint: disable=g-import-not-at-top
  assert main._config_file(["--config", "a.py:smoke", "--workdir", "w"]) == "a.py"  # pylint: disable=protected-access
  assert main._config_file(["--config=b.py", "--config.x=1"]) == "b.py"  # pylint: disable=protected-access
  assert main._config_file(["--workdir", "w"]) is None  # pylint: disable=protected-access
  import errno  # pylint: disable=g-import-not-at-top
  assert "no space left" in main.user_error(OSError(errno.ENOSPC, "No space left on device", "/d/x")).lower()
  try:
    import numpy as np_  # pylint: disable=g-import-not-at-top
    np_.ones(2) + np_.ones(3)
  except ValueError as e:  # a library's own error: a bug's traceback, not a one-line user error
    assert main.user_error(e) is None


def test_the_stacks_rendered_vedje_stage_keeps_its_own_schedule():
  """The stack's VEDJE stage on the rendered corpus reads VEDJE's `rendered` model but not its schedule (10 epochs of
  stage-1 neighbourhoods, sized for MSR-VTT's 600 ordered-event clips): one epoch, in-batch candidates (C = 8)."""
  stack = load_config(ROOT / "configs/stack_youcook2.py:rendered")
  vedje = load_config(ROOT / "configs/vedje_msrvtt.py:rendered")
  assert stack.vedje.model == vedje.model and vedje.train.epochs == 10 and vedje.train.vtm_candidates == "stage1"
  assert (stack.vedje.train.epochs, stack.vedje.train.vtm_candidates, stack.vedje.train.in_batch_negatives) == \
      (1, "in_batch", 7)
