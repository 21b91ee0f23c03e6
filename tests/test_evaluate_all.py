"""configs/evaluate_all.py: every smoke model on every smoke benchmark, cells checked against the runs' own results."""
import json
from pathlib import Path


import pytest

from vidjax import main
from vidjax.experiments import evaluate_all as E
from vidjax.experiments.common import load_config
from vidjax.methods import METHODS, Line, Method

ROOT = Path(__file__).resolve().parents[1]
KINDS = tuple(METHODS)


def _files(folder: Path) -> dict:
  """{path: (size, mtime)} of every file under `folder` (what a reader must leave as it was)."""
  return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def compared(smoke_runs, tmp_path_factory):
  runs = {k: smoke_runs(k) for k in KINDS}
  config = load_config(ROOT / "configs/evaluate_all.py")
  config.workdirs = tuple(str(runs[k][0]) for k in KINDS)
  workdir = tmp_path_factory.mktemp("evaluate_all")
  before = {k: _files(runs[k][0]) for k in KINDS}
  results = E.run(config, workdir)
  after = {k: _files(runs[k][0]) for k in KINDS}
  runs["touched"] = {k: sorted(str(p) for p in before[k].keys() | after[k].keys()
                               if before[k].get(p) != after[k].get(p)) for k in KINDS}
  return runs, workdir, results


def _close(cell, expected, keys, scale=1.0):
  for key, name in keys.items():
    assert cell[key] == pytest.approx(scale * expected[name], abs=0.011), key


def test_every_cell_is_metrics_or_a_reason_and_matches_the_runs_own_numbers(compared):
  runs, workdir, results = compared
  assert runs["touched"] == {k: [] for k in KINDS}  # evaluate_all wrote nothing in the runs it read
  table = json.loads((workdir / "comparison.json").read_text())
  assert table == results["metrics"] and results["synthetic"] is True
  names = {f"{r}/{m}" for r, ms in (("cast_coin", ("cast", "zero_shot")),
                                     ("comp_activitynet", ("zero_shot", "contrastive", "negclip", "comploss",
                                                           "negclip_pref", "comppretrain_comploss",
                                                           "comppretrain_negclip_pref")),
                                     ("genstate", ("zero_shot", "vidclip")),
                                     ("grdr_msrvtt", ("dense_backbone", "grdr_rerank")),
                                     ("vedje_msrvtt", ("vedje_stage1", "vedje")),
                                     ("dense_msrvtt", ("dense_backbone", "clip4clip_meanp", "clip4clip_seqtransf",
                                                       "xpool"))) for m in ms}
  assert set(table) == names
  benches = set(next(iter(table.values())))
  assert all(b.endswith("[SYNTHETIC]") for b in benches) and len(benches) == 9
  assert all(set(row) == benches for row in table.values())
  for model, row in table.items():
    for bench, cell in row.items():
      assert ("n/a" in cell and isinstance(cell["n/a"], str) and cell["n/a"]) or \
          (cell and all(isinstance(v, float) for k, v in cell.items() if k != "notes") and
           all(isinstance(n, str) and n for n in cell.get("notes", {}).values())), (model, bench)
  # Each model's own benchmark reproduces its run's results.json.
  own = {k: json.loads((runs[k][0] / "results.json").read_text()) for k in KINDS}
  genstate_keys = {k: k for k in ("r1", "r5", "r10", "acc_temp", "acc_sem", "acc_tri")}
  for m in ("zero_shot", "vidclip"):
    _close(table[f"genstate/{m}"]["GenState (rendered) [SYNTHETIC]"], own["genstate"]["metrics"][m],
           genstate_keys)
  cvr_keys = {k: k for k in ("acc", "state_acc", "ident_acc")}
  for m in ("cast", "zero_shot"):
    _close(table[f"cast_coin/{m}"]["CVR (coin) [SYNTHETIC]"], own["cast"]["metrics"][m], cvr_keys)
  comp_keys = {k: k for k in ("temp_reorder", "action_replace", "seg_mismatch", "all")}
  for m in ("negclip", "negclip_pref", "comppretrain_comploss"):
    _close(table[f"comp_activitynet/{m}"]["Comp (comp_activitynet) [SYNTHETIC]"], own["comp"]["metrics"][m],
           comp_keys)
    _close(table[f"comp_activitynet/{m}"]["R@K (comp_activitynet) [SYNTHETIC]"], own["comp"]["metrics"][m],
           {"t2v_r1": "t2v_r1"})
  t2v = {f"t2v_r{k}": f"t2v_r{k}" for k in (1, 5, 10)}
  _close(table["vedje_msrvtt/vedje"]["R@K (vedje_msrvtt) [SYNTHETIC]"], own["vedje"]["metrics"]["vedje"], t2v)
  _close(table["vedje_msrvtt/vedje_stage1"]["R@K (vedje_msrvtt) [SYNTHETIC]"], own["vedje"]["metrics"]["stage1"], t2v)
  for m, name in (("dense_backbone", "backbone"), ("clip4clip_seqtransf", "clip4clip_seqtransf"), ("xpool", "xpool")):
    _close(table[f"dense_msrvtt/{m}"]["R@K (dense_msrvtt) [SYNTHETIC]"], own["dense"]["metrics"][name], t2v)
  for m, name in (("dense_backbone", "dense_backbone"), ("grdr_rerank", "grdr")):
    _close(table[f"grdr_msrvtt/{m}"]["R@K (polysemous) [SYNTHETIC]"], own["grdr"]["full_corpus"][name], t2v)  # both in percent
  # Cells a model cannot fill say why.
  assert "trained on the procedural world" not in table["cast_coin/cast"]["CVR (coin) [SYNTHETIC]"]
  assert table["cast_coin/cast"]["GenState (rendered) [SYNTHETIC]"]["n/a"].startswith("trained on the coin")
  assert table["grdr_msrvtt/grdr_rerank"]["R@K (rendered) [SYNTHETIC]"]["n/a"].startswith("trained on the polysemous")
  # The rendered world's dual encoders fill all three of its benchmarks.
  for m in ("zero_shot", "vidclip"):
    for b in ("GenState (rendered)", "Comp pairs (rendered)", "R@K (rendered)"):
      assert "n/a" not in table[f"genstate/{m}"][f"{b} [SYNTHETIC]"]
  # Provenance: every run's path, synthetic flag and store provenance; skips counted once per store.
  assert [r["workdir"] for r in results["runs"]] == [str(runs[k][0]) for k in KINDS]
  assert all(set(r) == {"workdir", "name", "path", "synthetic", "provenance"} for r in results["runs"])
  assert isinstance(results["provenance"]["stores"], list)
  assert results["skipped_videos"]["count"] == sum(results["skipped_videos"]["by_store"].values())
  md = (workdir / "comparison.md").read_text()
  assert md.startswith("**SYNTHETIC DATA") and "other space" in md and "\nS1: the coin procedural world" in md
  assert md.count("\n| ") == 1 + len(names)


def test_the_embedded_default_trains_its_runs_then_compares(tmp_path, capsys):
  results = E.run(load_config(ROOT / "configs/evaluate_all.py:smoke"), tmp_path)
  out = capsys.readouterr().out
  assert "evaluate_all: training configs/genstate_rendered.py:smoke" in out and "SYNTHETIC DATA" in out
  assert (tmp_path / "runs" / "genstate" / "results.json").exists()
  assert set(results["metrics"]) == {"genstate/zero_shot", "genstate/vidclip"}
  again = E.run(load_config(ROOT / "configs/evaluate_all.py:smoke"), tmp_path)  # finished runs are not retrained
  assert "training" not in capsys.readouterr().out and again["metrics"] == results["metrics"]


def test_bad_inputs_get_one_clear_error(tmp_path):
  config = load_config(ROOT / "configs/evaluate_all.py")
  config.workdirs = (str(tmp_path / "nothing"),)
  with pytest.raises(FileNotFoundError, match="nothing: not a finished vidjax run"):
    E.run(config, tmp_path / "a")
  unknown = tmp_path / "retrieval_run"
  unknown.mkdir()
  (unknown / "results.json").write_text("{}")
  (unknown / "config.json").write_text(json.dumps({"experiment": "retrieval", "name": "x"}))
  config.workdirs = (str(unknown),)
  with pytest.raises(ValueError, match="experiment 'retrieval' has no models to compare"):
    E.run(config, tmp_path / "b")
  config = load_config(ROOT / "configs/evaluate_all.py")
  config.runs = ("configs/retrieval_msrvtt.py:smoke",)
  with pytest.raises(ValueError, match="config.runs: .* 'retrieval' run, which has no models to compare"):
    E.run(config, tmp_path / "c")
  config.runs = ("configs/nope.py",)
  with pytest.raises(FileNotFoundError, match="config file 'configs/nope.py' not found"):
    E.run(config, tmp_path / "d")
  config.runs = ()
  with pytest.raises(ValueError, match="config.runs=.* at least one config"):
    E.run(config, tmp_path / "e")
  config.seed = -1
  with pytest.raises(ValueError, match="config.seed=-1 is invalid"):
    E.run(config, tmp_path / "f")
  with pytest.raises(ValueError, match="occur twice"):
    E.compare([E.evaluate.Model("m", "s", {}), E.evaluate.Model("m", "s", {})], [])



# A sixth method: its own files (an experiment module with `run` and `suite`, a config) and one entry in the table.
_TOY_MODULE = """
import numpy as np
from vidjax import evaluate
from vidjax.experiments import common


@common.precision_policy
def run(config, workdir):
  workdir = common.start_run(config, workdir, lambda c: None)
  results = common.results_dict(config, dataset="toy", synthetic=True, metrics={"toy": {"t2v_r1": 100.0}},
                                path="world", skipped_videos={"count": 0, "file": ""})
  common.write_results(workdir, results)
  return results


def suite(config, workdir):
  keys = [f"q{i}" for i in range(config.n)]
  vectors = dict(zip(keys, np.eye(config.n, dtype=np.float32)))
  encode = lambda ks: np.stack([vectors[k] for k in ks])
  return ([evaluate.dual_encoder("toy", "the toy space", encode, encode)],
          [evaluate.Benchmark("R@K (toy)", "gallery", "the toy space", (keys, keys, np.arange(config.n)))])
"""
_TOY_CONFIG = """
import ml_collections
from vidjax.defaults import common


def get_config(arg=None):
  c = ml_collections.ConfigDict(dict(experiment="toy", name="toy_run", seed=0, n=4,
                                     precision=common.precision_section()))
  return common.apply_variants(c, arg, {"smoke": lambda c: None}, "toy.py")
"""


def test_a_new_method_is_one_table_entry_plus_its_own_files(tmp_path, monkeypatch, capsys):
  """main dispatches it, evaluate_all trains it from its smoke config and compares its suite's models, the real path's
  summary checks its line: no other list to edit."""
  from vidjax import real_path  # pylint: disable=g-import-not-at-top
  (tmp_path / "toy_method.py").write_text(_TOY_MODULE)
  (tmp_path / "toy.py").write_text(_TOY_CONFIG)
  monkeypatch.syspath_prepend(str(tmp_path))
  toy = Method("toy", "toy", str(tmp_path / "toy.py:smoke"), experiment="toy_method", suite_module="toy_method",
               real_path=(Line("toy", "toy_run", "toy R@1 >= 99", "metrics.toy.t2v_r1", "metrics.toy.t2v_r1",
                               factor=0.0, offset=99.0),))
  monkeypatch.setitem(METHODS, "toy", toy)
  # main's dispatch
  results = main.run(load_config(tmp_path / "toy.py"), tmp_path / "runs" / "toy_run")
  assert results["metrics"] == {"toy": {"t2v_r1": 100.0}}
  # evaluate_all: the table's smoke config is among its default runs, trained on demand and compared
  config = load_config(ROOT / "configs/evaluate_all.py")
  assert toy.smoke in config.runs
  config.runs = (toy.smoke,)
  compared = main.run(config, tmp_path / "all")
  assert "evaluate_all: training" in capsys.readouterr().out
  cell = compared["metrics"]["toy_run/toy"]["R@K (toy) [SYNTHETIC]"]
  assert list(compared["metrics"]) == ["toy_run/toy"] and list(compared["metrics"]["toy_run/toy"]) == [
      "R@K (toy) [SYNTHETIC]"]
  assert {k: v for k, v in cell.items() if k != "notes"} == {"t2v_r1": 100.0, "t2v_r5": 100.0, "t2v_r10": 100.0}
  assert set(cell["notes"]) == {"t2v_r5", "t2v_r10"}  # 4 videos: R@5 and R@10 cannot miss (issue 62)
  # the real path's summary
  summary = real_path.summarize(tmp_path)
  assert [l["holds"] for l in summary["lines"] if l["method"] == "toy"] == [True]


def test_a_model_that_cannot_encode_a_benchmark_of_its_space_gets_a_reason():
  """Two runs on one store share its space but key their items differently (VEDJE's captions by id, a VideoComp
  benchmark's videos by row): the cell says so, decided from the keys before anything is encoded; an error while
  scoring stays an error (it used to be caught as a KeyError and shown as n/a, whatever raised it)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  ids = {"c1": 0, "c2": 1, "c3": 2}
  table = np.eye(3, dtype=np.float32)
  encode = lambda ks: table[[ids[k] for k in ks]]  # noqa: E731  keys by caption id
  by_id = E.evaluate.dual_encoder("vedje_run/vedje_stage1", "store S", encode, encode, keys=E.evaluate.STORE_IDS,
                                  texts=ids, videos=ids)

  def never(keys):
    raise AssertionError(f"encoded {keys} of a benchmark it cannot read")

  by_row = E.evaluate.dual_encoder("comp_run/negclip", "store S", never, never, keys="the items of run comp_run",
                                   videos=range(2))
  rows = E.evaluate.Benchmark("R@K (comp_run)", "gallery", "store S", (["a b", "c d"], [0, 1], np.arange(2)),
                              keys="the items of run comp_run")
  own = E.evaluate.Benchmark("R@K (vedje_run)", "gallery", "store S", (["c1", "c2"], ["c1", "c2"], np.arange(2)),
                             keys=E.evaluate.STORE_IDS)
  other_split = E.evaluate.Benchmark("R@K (dense_run)", "gallery", "store S", (["c1", "c9"], ["c1", "c2"], [0, 1]),
                                     keys=E.evaluate.STORE_IDS)
  table_ = E.compare([by_id], [rows, own, other_split])
  why = table_["vedje_run/vedje_stage1"][E.benchmark_key(rows)]["n/a"]
  assert why.startswith("vedje_run/vedje_stage1 reads items keyed by the store's query") and "comp_run" in why
  assert table_["vedje_run/vedje_stage1"][E.benchmark_key(own)]["t2v_r1"] == 100.0
  assert table_["vedje_run/vedje_stage1"][E.benchmark_key(other_split)]["n/a"].startswith(
      "its encoders have no text item 'c9' (1 of the benchmark's 2 text keys")
  assert "reads items keyed by the items of run comp_run" in E.cell(by_row, own)["n/a"]  # the comp run's IndexError
  # An encoder that fails while scoring is a bug: its error, not a cell.
  broken = E.evaluate.dual_encoder("vedje_run/broken", "store S", lambda ks: {}[ks[0]], encode,
                                   keys=E.evaluate.STORE_IDS)
  with pytest.raises(KeyError):
    E.cell(broken, own)


def _fake_run(root: Path, name: str, experiment: str) -> Path:
  run = root / name
  run.mkdir(parents=True)
  (run / "results.json").write_text("{}")
  (run / "config.json").write_text(json.dumps({"experiment": experiment, "name": name}))
  return run


def test_a_run_list_that_cannot_be_compared_is_refused_before_anything_loads(tmp_path, monkeypatch):
  """Two workdirs of one config name (their models' names collide) used to be found after every run had loaded
  (minutes of checkpoints); a workdir given twice likewise; an evaluate_all workdir inside a run it reads wrote its
  files into that run."""
  loaded = []
  monkeypatch.setattr(E, "load_run", lambda d: loaded.append(d) or ([], []))
  a = _fake_run(tmp_path / "x", "cast_coin", "cast")
  b = _fake_run(tmp_path / "y", "cast_coin", "cast")
  config = load_config(ROOT / "configs/evaluate_all.py")
  config.workdirs = (str(a), str(b))
  with pytest.raises(ValueError, match=r"config.workdirs: .*x/cast_coin and .*y/cast_coin are both runs named "
                                       r"'cast_coin'"):
    E.run(config, tmp_path / "out")
  config.workdirs = (str(a), str(a))
  with pytest.raises(ValueError, match=r"config.workdirs: .*x/cast_coin is given twice"):
    E.run(config, tmp_path / "out")
  config.workdirs = (str(a),)
  with pytest.raises(ValueError, match=r"--workdir .*x/cast_coin/comparison is inside the run .*x/cast_coin it reads"):
    E.run(config, a / "comparison")
  config.workdirs = (str(a), str(_fake_run(tmp_path, "retrieval_run", "retrieval")))
  with pytest.raises(ValueError, match="experiment 'retrieval' has no models to compare"):
    E.run(config, tmp_path / "out")
  assert loaded == [] and not (tmp_path / "out").exists() and not (a / "comparison").exists()


def test_a_shared_stores_skipped_videos_count_once(tmp_path):
  """Two runs on one store (overlapping skip lists) and one on another: the skips are the union per store."""
  def run(name, store, skipped):
    d = tmp_path / name
    d.mkdir()
    (d / "skipped_videos.txt").write_text("".join(f"{v}\n" for v in skipped))
    (d / "results.json").write_text(json.dumps({
        "path": "real", "synthetic": False, "config": {"name": name},
        "provenance": {"store": store, "fingerprint": store + "-fp"},
        "skipped_videos": {"count": len(skipped), "file": "skipped_videos.txt" if skipped else ""}}))
    return d
  dirs = [run("vedje_msrvtt", "/s/a", ["v1", "v2", "v3"]), run("comp_msrvtt", "/s/a", ["v2", "v3", "v4"]),
          run("cast_coin", "/s/b", ["w1"])]
  from vidjax.data import provenance  # pylint: disable=g-import-not-at-top
  out = provenance.runs_provenance(dirs, [json.loads((d / "results.json").read_text()) for d in dirs])
  assert out["skipped_videos"]["by_store"] == {"/s/a": 4, "/s/b": 1} and out["skipped_videos"]["count"] == 5
  assert out["path"] == "real" and [r["name"] for r in out["runs"]] == ["vedje_msrvtt", "comp_msrvtt", "cast_coin"]
  assert [p["store"] for p in out["provenance"]["stores"]] == ["/s/a", "/s/b"]
  assert out["runs"][0]["provenance"]["fingerprint"] == "/s/a-fp" and out["runs"][0]["synthetic"] is False


_SUITES = {"rows_suite": """
import numpy as np
from vidjax import evaluate

ROWS = np.eye(3, dtype=np.float32)
TEXTS = {"a": 0, "bb": 1, "ccc": 2}


def suite(config, workdir):  # VideoComp's way: videos by evaluation-input row, texts by paragraph
  encode = lambda keys: ROWS[list(keys)]  # a string key: IndexError, as methods/comp.py raised
  model = evaluate.dual_encoder("negclip", "the feature store /s", lambda texts: ROWS[[TEXTS[t] for t in texts]],
                                encode, videos=range(3))
  return [model], [evaluate.Benchmark("R@K (comp_run)", "gallery", "the feature store /s",
                                      (list(TEXTS), [0, 1, 2], np.arange(3)))]
""", "ids_suite": """
import numpy as np
from vidjax import evaluate

IDS = {"v0": 0, "v1": 1, "v2": 2}


def suite(config, workdir):  # dense's and VEDJE's way: the store's query ids and video ids
  from pathlib import Path
  from vidjax.data import provenance
  from vidjax.data.features import write_arrays
  store = write_arrays(Path(workdir).parent / "store", {"clip": (list(IDS), np.eye(3, dtype=np.float32))})
  provenance.check_store(workdir, store, ["clip"])  # a run's suite reads its data as the run did: these wrote
  provenance.real_path(workdir, store, ["v9"])      # store.json and skipped_videos.txt into the run it read
  encode = lambda keys: np.eye(3, dtype=np.float32)[[IDS[k] for k in keys]]
  model = evaluate.dual_encoder("dense_backbone", "the feature store /s", encode, encode, keys=evaluate.STORE_IDS,
                                texts=IDS, videos=IDS)
  return [model], [evaluate.Benchmark("R@K (dense_run)", "gallery", "the feature store /s",
                                      (list(IDS), list(IDS), np.arange(3)), keys=evaluate.STORE_IDS)]
"""}


def test_runs_on_one_store_keyed_differently_get_reasons_not_a_crash(tmp_path, monkeypatch):
  """A VideoComp run sharing a store with dense / VEDJE runs crashed evaluate_all with an IndexError in
  methods/comp.py (its video encoder indexed rows with the other run's video ids); a run's own items are now keyed
  by the run, so each model reads its own and the shared-id runs' benchmarks, and says why not the others'."""
  for module, text in _SUITES.items():
    (tmp_path / f"{module}.py").write_text(text)
    monkeypatch.setitem(METHODS, module, Method(module, module, "none.py", suite_module=module))
  monkeypatch.syspath_prepend(str(tmp_path))
  config = load_config(ROOT / "configs/evaluate_all.py")
  config.workdirs = (str(_fake_run(tmp_path, "comp_run", "rows_suite")),
                     str(_fake_run(tmp_path, "dense_run", "ids_suite")))
  before = _files(tmp_path / "dense_run")
  table = E.run(config, tmp_path / "out")["metrics"]
  assert _files(tmp_path / "dense_run") == before  # evaluate_all wrote nothing in a run it read
  assert table["comp_run/negclip"]["R@K (comp_run) [SYNTHETIC]"]["t2v_r1"] == 100.0
  assert table["dense_run/dense_backbone"]["R@K (dense_run) [SYNTHETIC]"]["t2v_r1"] == 100.0
  why = table["comp_run/negclip"]["R@K (dense_run) [SYNTHETIC]"]["n/a"]
  assert why == (f"comp_run/negclip reads items keyed by the items of run {tmp_path / 'comp_run'}; R@K (dense_run)'s "
                 "are keyed by the store's query (caption) ids and video ids (one store, but not one key space)")
  assert "keyed by the items of run" in table["dense_run/dense_backbone"]["R@K (comp_run) [SYNTHETIC]"]["n/a"]
