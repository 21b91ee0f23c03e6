"""The composed stack's experiment (corpus-scale CVR on the smoke procedural world), its index and
`python -m vidjax.search`: results contract, the recall row against a NumPy brute force, the CLI's output
and each of its errors."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from vidjax import io, losses, metrics
from vidjax.defaults.common import with_values
from vidjax.experiments import common
from vidjax.experiments import stack as stack_experiment
from vidjax.methods import stack as stack_method
from vidjax.models.pair import PairReranker
from vidjax import search
from vidjax.retrieval import index as index_format

pytestmark = pytest.mark.highest_precision  # compares with NumPy or a reference (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]


def _config(**overrides):
  return with_values(common.load_config(ROOT / "configs/stack_coin.py:smoke"), overrides)


@pytest.fixture(scope="module")
def run(smoke_runs):
  return smoke_runs("stack")  # configs/stack_coin.py:smoke, shared with the stack notebook's test


def test_results_contract_and_the_mechanism(run):
  workdir, results = run
  assert json.loads((workdir / "results.json").read_text()) == json.loads(json.dumps(results))
  assert results["synthetic"] is True and "synthetic" in results["dataset"]
  assert list(results["metrics"]) == ["recall", "recall_rerank", "full_stack"]
  stages = {"recall": {"recall"}, "recall_rerank": {"recall", "rerank"}, "full_stack": {"recall", "rerank", "cast"}}
  for row, values in results["metrics"].items():
    assert set(values) == {"r1", "r5", "r10", "state_confusion", "ident_confusion", "latency_ms"}
    assert set(values["latency_ms"]) == stages[row] | {"total"} and all(v > 0 for v in values["latency_ms"].values())
    assert 0 <= values["r1"] <= values["r5"] <= values["r10"] <= 100
  assert results["corpus"]["clips"] > results["corpus"]["queries"] > 0
  assert list(results["rerank_k_sweep"]) == ["20"]
  # CAST's consistency with the context is what finds the query's own video (smoke: seconds of training).
  m = results["metrics"]
  assert m["full_stack"]["r10"] >= m["recall"]["r10"] + 10, m
  assert (workdir / "stack.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_recall_row_equals_a_numpy_brute_force(run):
  """Cosine of every query text with every evaluation clip, the context clips dropped, top 10."""
  workdir, results = run
  index = search.open_index(workdir / "index")
  # the recall stage is the backend the config's `index` section chose (the exact one by default)
  assert index.manifest["recall"]["index"]["backend"] == index.recall.backend == "jax" and index.recall.exact
  records = io.read_json(workdir / "cvr" / "benchmark.json")
  vectors = np.asarray(index.vectors, np.float64)
  vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
  from vidjax.data.features import FeatureStore
  store = FeatureStore(workdir / "world" / "features")
  targets = [r["target"] for r in records]
  text = dict(zip(targets, store.get("text", targets)))
  ranked, kinds = [], []
  video = lambda c: c.split("#")[0]  # noqa: E731  (procedural clip ids: <video>#<index>)
  steps = dict(zip(index.ids, index.captions))
  for r in records:
    q = np.asarray(text[r["target"]], np.float64)
    scores = vectors @ (q / np.linalg.norm(q))
    order = [index.ids[i] for i in np.argsort(-scores, kind="stable") if index.ids[i] not in r["context"]][:10]
    ranked.append(order)
    kinds.append([metrics.GT if c == r["target"] else metrics.STATE if video(c) == video(r["target"]) else
                  metrics.IDENTITY if steps[c] == steps[r["target"]] else metrics.EASY for c in order])
  expected = metrics.recall_from_ranked(np.array(ranked), np.array([r["target"] for r in records]))
  expected.update(metrics.confusion_rates(np.array(kinds), 10))
  for key, value in expected.items():
    assert results["metrics"]["recall"][key] == pytest.approx(value, abs=1e-3), key


def test_search_prints_ranked_results_and_json(run, capsys):
  workdir, _ = run
  index = search.open_index(workdir / "index")
  caption, context = index.captions[1], index.ids[:1]
  assert search.main(["--index", str(workdir / "index"), caption, "--context", *context, "--k", "5"]) == 0
  text = capsys.readouterr().out
  assert text.startswith("stages: dense recall -> rerank -> cast\n")  # the first line: the stages it ran
  assert "SYNTHETIC" in text and text.count("\n") >= 8 and "cast" in text and context[0] not in text.split("\n", 2)[2]
  assert search.main(["--index", str(workdir / "index"), caption, "--json"]) == 0
  out = json.loads(capsys.readouterr().out)
  assert out["stages"] == ["recall", "rerank"] and len(out["results"]) == 10 and out["synthetic"] is True
  scores = [r["score"] for r in out["results"]]
  assert scores == sorted(scores, reverse=True) and [r["rank"] for r in out["results"]] == list(range(1, 11))
  assert all(set(r["scores"]) == {"recall", "rerank"} for r in out["results"])


def test_search_as_a_module_end_to_end(run):
  workdir, _ = run
  index = search.open_index(workdir / "index")
  proc = subprocess.run([sys.executable, "-m", "vidjax.search", "--index", str(workdir / "index"), index.captions[0],
                         "--context", index.ids[0], index.ids[1], "--json"], capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout)
  assert out["stages"] == ["recall", "rerank", "cast"] and not {index.ids[0], index.ids[1]} & {r["id"] for r in out["results"]}


def test_search_errors_are_one_clear_line(run, tmp_path, capsys):
  workdir, _ = run
  good = workdir / "index"
  caption = search.open_index(good).captions[0]
  other = tmp_path / "other"
  shutil.copytree(good, other)
  manifest = json.loads((other / "manifest.json").read_text())
  manifest["stages"][1]["backbone"] = "videoprism_lvt_public_v1_base"
  (other / "manifest.json").write_text(json.dumps(manifest))  # edited after the build: its own hash disagrees
  rebuilt = tmp_path / "rebuilt"  # as a writer with that value would have written it
  shutil.copytree(other, rebuilt)
  manifest[index_format.MANIFEST_HASH] = index_format.manifest_digest(manifest)
  (rebuilt / "manifest.json").write_text(json.dumps(manifest))
  (tmp_path / "empty").mkdir()
  cases = [
      (["--index", str(tmp_path / "missing"), caption], "no such directory"),
      (["--index", str(tmp_path / "empty"), caption], "no manifest.json"),
      (["--index", str(good), caption, "--context", "nope#000"], "unknown context clip 'nope#000'"),
      (["--index", str(other), caption], "its fields do not match the manifest_sha256 it recorded"),
      (["--index", str(rebuilt), caption], "stage 'cast' was built for backbone 'videoprism_lvt_public_v1_base'"),
      (["--index", str(good), "no such caption"], "is not a caption of this index's space"),
      (["--index", str(good), caption, "--k", "500"], "--k must be in [1, 50]"),
  ]
  for argv, message in cases:
    assert search.main(argv) == 2, argv
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, (argv, err)


def test_grdr_recall_stage_end_to_end(run, tmp_path, capsys):
  """stack.recall = "grdr": GRDR trained on the training clips' captions recalls from the corpus (then its dense
  rerank); CAST and the reranker of the dense run are reused; the index names its GRDR and vidjax.search loads it."""
  shared, dense = run
  workdir = tmp_path / "grdr"
  shutil.copytree(shared, workdir)
  results = stack_experiment.run(_config(**{"stack.recall": "grdr", "stack.latency_queries": 2}), workdir)
  assert results["corpus"]["recall"] == "grdr" and list(results["metrics"]) == list(dense["metrics"])
  assert not (workdir / "train" / "cast" / "grdr").exists() and (workdir / "train" / "grdr").is_dir()
  # Every stage after recall sees only what GRDR recalled.
  cr = results["candidate_recall"]["full_stack"]
  assert cr["cast"] <= cr["rerank"] <= cr["recall"] < 100
  manifest = json.loads((workdir / "index" / "manifest.json").read_text())
  assert manifest["recall"]["kind"] == "grdr"
  index = search.open_index(workdir / "index")
  capsys.readouterr()  # the run's tables
  assert search.main(["--index", str(workdir / "index"), index.captions[0], "--json"]) == 0
  out = json.loads(capsys.readouterr().out)
  assert out["stages"] == ["recall", "rerank"] and 1 <= len(out["results"]) <= 10


def test_bad_configs_are_refused_before_any_work(tmp_path):
  for overrides, message in [({"stack.rerank_k": 60}, "10 <= k <= rerank_k <= k_recall"),
                             ({"stack.rerank_k_sweep": (5,)}, "stack.rerank_k_sweep"),
                             ({"data.source": "tfds", "data.tfds": "x"}, "data.source"),
                             ({"rerank.candidates": 1}, "rerank.candidates"),
                             ({"stack.recall": "bm25"}, "stack.recall")]:
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
      stack_experiment.run(_config(**overrides), tmp_path / "w")
  assert not (tmp_path / "w").exists()


def test_pair_reranker_starts_at_the_prior_and_learns_a_hidden_match():
  """Untrained it returns the prior; trained on tiny data it finds the candidate t maps onto (v = R t)."""
  rng = np.random.default_rng(0)
  d, b, k = 8, 64, 6
  rot = np.linalg.qr(rng.normal(size=(d, d)))[0]
  text = rng.normal(size=(b, d)).astype(np.float32)
  cands = rng.normal(size=(b, k, d)).astype(np.float32)
  cands[:, 0] = text @ rot.T + 0.1 * rng.normal(size=(b, d))
  prior = rng.normal(size=(b, k)).astype(np.float32)
  positive = np.zeros((b, k), np.float32)
  positive[:, 0] = 1
  model = PairReranker()
  params = model.init(jax.random.PRNGKey(0), text, cands, prior)["params"]
  np.testing.assert_allclose(model.apply({"params": params}, text, cands, prior), prior, atol=1e-6)
  assert model.apply({"params": params}, text, cands, prior).shape == (b, k)
  import optax
  opt = optax.adam(0.05)
  state = opt.init(params)
  loss = lambda p: losses.multi_positive_softmax(model.apply({"params": p}, text, cands, prior), positive)  # noqa: E731
  step = jax.jit(lambda p, s: (lambda g: (optax.apply_updates(p, opt.update(g, s)[0]), opt.update(g, s)[1]))(
      jax.grad(loss)(p)))
  for _ in range(100):
    params, state = step(params, state)
  top = np.argmax(np.asarray(model.apply({"params": params}, text, cands, prior)), axis=1)
  assert np.mean(top == 0) > 0.9 > np.mean(np.argmax(prior, axis=1) == 0)
  with pytest.raises(ValueError, match="PairReranker expects"):
    model.apply({"params": params}, text, cands, prior[:, :3])


def test_real_youcook2_annotations_with_a_store(tmp_path):
  """The stack on the real YouCook2 file (a 24 + 12 video slice) with a feature store: the corpus is every clip of
  the slice's val videos, and without step labels an identity confusion is another video of the same recipe."""
  from vidjax.data import features
  from vidjax.data.annotations import read_youcook2
  videos = read_youcook2(ROOT.parent / "shared" / "data" / "youcook2" / "youcookii_annotations_trainval.json")
  keep = [v for v in videos if v.split == "train"][:24] + [v for v in videos if v.split == "val"][:12]
  (tmp_path / "available.txt").write_text("\n".join(v.video_id for v in keep))
  ids = [c.clip_id for v in keep for c in v.clips]
  emb = np.random.default_rng(0).normal(size=(len(ids), 16)).astype(np.float32)
  features.write_arrays(tmp_path / "store", {"clip": (ids, emb), "text": (ids, emb + 0.3)},
                        {"backbone": "random-test-features", "synthetic": True})
  config = common.load_config(ROOT / "configs/stack_youcook2.py:smoke,real")
  config.data.update(annotations=str(ROOT.parent / "shared" / "data" / "youcook2" / "youcookii_annotations_trainval.json"),
                     features=str(tmp_path / "store"), available_videos=str(tmp_path / "available.txt"),
                     heldout_fraction=0.3)
  config.train.batch_size = 16
  config.stack.update(k_recall=1000, rerank_k=30, rerank_k_sweep=(10,))  # more than the corpus: clipped to it
  results = stack_experiment.run(config, tmp_path / "run")
  val = [v for v in keep if v.split == "val"]
  assert results["corpus"]["clips"] == sum(len(v.clips) for v in val) and results["synthetic"] is True
  assert list(results["metrics"]) == ["recall", "recall_rerank", "full_stack"]
  corpus = stack_method.Corpus(val)
  assert len(set(corpus.label)) == len({v.task for v in val})  # no step labels: the recipe is the label
  manifest = json.loads((tmp_path / "run" / "index" / "manifest.json").read_text())
  assert manifest["backbone"] == "random-test-features" and manifest["dataset"] == "youcook2"
  # The index keeps the budgets the run evaluated (clipped to the corpus), so a search with its defaults runs.
  assert manifest["recall"]["k"] == results["corpus"]["k_recall"] == results["corpus"]["clips"] < 1000
  out = search.search(search.parse(["--index", str(tmp_path / "run" / "index"), str(corpus.captions[0])]))
  assert len(out["results"]) == 10 and out["stages"] == ["recall", "rerank"]  # no context: CAST skipped
