"""`clip_to_data`: a size that does not fit the data is clipped (one line, a record) or, with `strict`, refused."""
import ml_collections
import pytest

from vidjax.defaults.common import (TABLE_MIN_QUERIES, check_passes, check_strict, checking, clip_to_data, fit_tables,
                                    steps_in_passes)


def _config(**kw):
  c = ml_collections.ConfigDict(dict(strict=False, train=dict(batch_size=512, view_batch_size=8),
                                     eval=dict(ks=(1, 5, 10), name="x"), **kw))
  c.lock()
  return c


def test_clips_what_does_not_fit_says_so_once_and_records_it(capsys):
  config = _config()
  out, clipped = clip_to_data(config, {"train.batch_size": (115, "the 115 training instances"),
                                       "train.view_batch_size": (20, "the 20 training videos"),
                                       "eval.ks": (6, "the 6 ranked ids")})
  assert clipped == {"train.batch_size": [512, 115], "eval.ks": [[1, 5, 10], [1, 5, 6]]}
  assert (out.train.batch_size, out.train.view_batch_size, out.eval.ks) == (115, 8, (1, 5, 6))
  assert config.train.batch_size == 512 and config.eval.ks == (1, 5, 10)  # the asked config is untouched
  lines = capsys.readouterr().out.splitlines()
  assert lines == ["clipped config.train.batch_size: asked 512, used 115 (the 115 training instances; "
                   "--config.strict=True refuses instead)",
                   "clipped config.eval.ks: asked (1, 5, 10), used (1, 5, 6) (the 6 ranked ids; "
                   "--config.strict=True refuses instead)"]
  with pytest.raises(AttributeError):  # locked again: a mistyped field stays an error downstream
    out.train.batch_sise = 3


def test_nothing_to_clip_is_the_same_config_and_an_empty_record(capsys):
  config = _config()
  assert clip_to_data(config, {"train.batch_size": (512, "512 instances")}) == (config, {})
  assert clip_to_data(config, {}) == (config, {})
  assert capsys.readouterr().out == ""


def test_strict_refuses_naming_the_key_the_value_what_fits_and_strict():
  config = _config(name="y")
  with config.unlocked():
    config.strict = True
  with pytest.raises(ValueError, match=r"^config.train.batch_size=512 does not fit the data: at most 115 fits \(the "
                                       r"115 training instances\); strict=True refuses instead of clipping"):
    clip_to_data(config, {"train.batch_size": (115, "the 115 training instances")})
  with pytest.raises(ValueError, match="config.train.batch_size=512"):  # `say=False` (an early check) refuses too
    clip_to_data(config, {"train.batch_size": (115, "the 115 training instances")}, say=False)


def test_nothing_fits_is_an_error_either_way_and_a_least_may_be_zero(capsys):
  with pytest.raises(ValueError, match=r"config.train.batch_size=512 does not fit the data: nothing fits \(no "):
    clip_to_data(_config(), {"train.batch_size": (0, "no training instances")})
  out, clipped = clip_to_data(_config(), {"train.view_batch_size": (0, "none left", 0)})
  assert out.train.view_batch_size == 0 and clipped == {"train.view_batch_size": [8, 0]}
  assert clip_to_data(_config(), {"train.batch_size": (10, "quiet")}, say=False)[1] == {"train.batch_size": [512, 10]}
  assert "quiet" not in capsys.readouterr().out


def test_an_exact_fit_is_clipped_and_recorded_even_when_strict(capsys):
  config = _config()
  with config.unlocked():
    config.strict = True
  out, clipped = clip_to_data(config, {"train.view_batch_size": (5, "the longest text is 5 tokens")},
                              exact=("train.view_batch_size",))
  assert out.train.view_batch_size == 5 and clipped == {"train.view_batch_size": [8, 5]}
  assert "(the longest text is 5 tokens; it changes no output)" in capsys.readouterr().out
  with pytest.raises(ValueError, match="strict=True refuses"):  # any other key is still refused
    clip_to_data(config, {"train.batch_size": (115, "x"), "train.view_batch_size": (5, "y")},
                 exact=("train.view_batch_size",))


def _tables(**kw):
  c = ml_collections.ConfigDict({**dict(strict=False, ablations=("a", "b"), diagnostics=True,
                                        eval=dict(table3=True, rows=("x",))), **kw})
  c.lock()
  return c


OFF = {"ablations": (), "diagnostics": False, "eval.table3": False, "eval.rows": ()}


def test_tables_on_too_few_test_queries_are_left_out_said_and_recorded(capsys):
  config = _tables()
  with checking() as plan:
    out, clipped = fit_tables(config, TABLE_MIN_QUERIES - 1, OFF)
  assert clipped == {"ablations": [["a", "b"], []], "diagnostics": [True, False], "eval.table3": [True, False],
                     "eval.rows": [["x"], []]}
  assert (tuple(out.ablations), out.diagnostics, out.eval.table3, tuple(out.eval.rows)) == ((), False, False, ())
  assert plan["clipped"] == clipped and plan["config"]["diagnostics"] is False  # a check run's plan has it
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 4 and lines[0] == (
      f"clipped config.ablations: asked ('a', 'b'), used () (the {TABLE_MIN_QUERIES - 1} test queries cannot resolve "
      f"its rows (at least table_min_queries={TABLE_MIN_QUERIES}: R@1's standard error is above 5 points below 100 "
      "queries); --config.table_min_queries=0 runs it)")
  # enough queries, a key already off, or table_min_queries=0: nothing changes
  assert fit_tables(config, TABLE_MIN_QUERIES, OFF) == (config, {})
  assert fit_tables(_tables(diagnostics=False), 3, {"diagnostics": False})[1] == {}
  assert fit_tables(_tables(table_min_queries=0), 3, OFF) == (_tables(table_min_queries=0), {})
  assert fit_tables(_tables(table_min_queries=10), 9, {"diagnostics": False})[1] == {"diagnostics": [True, False]}


def test_strict_refuses_to_leave_a_table_out():
  with pytest.raises(ValueError, match=r"^config.eval.table3=True asks for a table the 7 test queries cannot resolve "
                                       r"its rows .*strict=True refuses"):
    fit_tables(_tables(strict=True), 7, {"eval.table3": False})


def test_strict_must_be_a_bool():
  with pytest.raises(ValueError, match=r"config.strict='yes' is invalid"):
    check_strict(ml_collections.ConfigDict(dict(strict="yes")))
  check_strict(ml_collections.ConfigDict(dict(strict=True)))
  check_strict(ml_collections.ConfigDict(dict(other=1)))


def _experiment(log, late_check=None):
  """A method's run in miniature: reads its data, clips, checks what only the data can say, then trains."""
  import optax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from vidjax import train  # pylint: disable=g-import-not-at-top

  def run(config, workdir):
    config, clipped = clip_to_data(config, {"train.batch_size": (115, "the 115 training instances")})
    log.append("clipped")
    if late_check:
      late_check(config)
    train.fit(init_fn=lambda rng: {"w": np.zeros(2, np.float32)}, loss_fn=lambda p, b, r: ((p["w"] ** 2).sum(), {}),
              optimizer=optax.sgd(0.1), dataset=[{"x": np.zeros((1,), np.float32)}] * 2, num_steps=1,
              workdir=f"{workdir}/model", progress=False)
    log.append("trained")
    return {"clipped": clipped}
  return run


def test_a_check_run_runs_every_check_up_to_the_first_training_step_and_stops_there(tmp_path, capsys):
  import json  # pylint: disable=g-import-not-at-top
  from vidjax.experiments.common import check_run  # pylint: disable=g-import-not-at-top
  log = []
  config = _config(experiment="x")
  plan = check_run(_experiment(log), config, tmp_path)
  assert log == ["clipped"] and not (tmp_path / "model").exists()  # stopped at fit, before it wrote anything
  assert plan["clipped"] == {"train.batch_size": [512, 115]} and plan["config"]["train"]["batch_size"] == 115
  assert json.loads((tmp_path / "check.json").read_text()) == json.loads(json.dumps(plan))
  assert "check: the data fit; clipped" in capsys.readouterr().out

  def late(config):  # a check after the clipping (e.g. a beam wider than the test videos' trie) still runs
    raise ValueError("config.eval.beam_width=100 is wider than the trie allows")
  with pytest.raises(ValueError, match="beam_width=100"):
    check_run(_experiment([], late), config, tmp_path / "late")
  from vidjax import train  # pylint: disable=g-import-not-at-top
  assert not train._BEFORE_TRAINING  # pylint: disable=protected-access  (the hook ends with its check run)


def test_steps_in_passes_caps_a_budget_at_passes_over_the_data():
  """`<section>.steps` at most `max_passes` passes over n items at the batch clipped to n (ceil, at least 1); no limit
  at 0 passes or without data; a bad `max_passes` is one error naming it."""
  c = ml_collections.ConfigDict({"train": {"steps": 2500, "batch_size": 48, "max_passes": 25.0}})
  assert steps_in_passes(c, "train", 4800, "items", "why")["train.steps"][0] == 2500  # 25 x 4,800 / 48
  assert steps_in_passes(c, "train", 12, "items", "why") == {
      "train.steps": (25, "train.max_passes=25 passes over the 12 items: why")}  # a batch of the 12 items
  assert steps_in_passes(c, "train", 100, "items", "why")["train.steps"][0] == 53  # ceil(25 x 100 / 48)
  c.train.max_passes = 0.01
  assert steps_in_passes(c, "train", 100, "items", "why")["train.steps"][0] == 1
  assert clip_to_data(c, steps_in_passes(c, "train", 100, "items", "why"), say=False)[1] == {
      "train.steps": [2500, 1]}
  c.train.max_passes = 0.0
  assert steps_in_passes(c, "train", 100, "items", "why") == {}
  c.train.max_passes = 25.0
  assert steps_in_passes(c, "train", 0, "items", "why") == {}
  check_passes(c, "train")
  for bad in (-1.0, "25", True):
    with pytest.raises(ValueError, match="train.max_passes"):
      check_passes(ml_collections.ConfigDict({"train": {"max_passes": bad}}), "train")
