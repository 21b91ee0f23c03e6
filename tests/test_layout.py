"""The house rules of ../shared/ARCHITECTURE.md, checked on the source: every import points down; experiments import
no other experiment; search imports no method; worlds import no experiment; data imports no world and no model; only
the table of methods (`vidjax.methods.METHODS`) lists the methods."""
import ast
import os
import subprocess
import sys
from pathlib import Path

from vidjax.methods import METHODS

ROOT = Path(__file__).resolve().parents[1]

# What each part may import from vidjax (besides itself). Leaves first; nothing imports upwards.
ALLOWED = {
    "ops": set(),
    "io": set(),
    "sharding": set(),
    "progress": set(),
    "tokenizers": {"io"},
    "metrics": {"ops"},
    "losses": {"ops"},
    "models": {"ops", "tokenizers"},
    "retrieval": {"ops", "io", "metrics", "data", "progress", "checkpoints"},  # checkpoints: the index's .npz files
    "data": {"ops", "io", "metrics", "sharding"},  # what real data passes through: never a world
    "worlds": {"data", "ops", "io", "metrics"},     # the embedded SYNTHETIC worlds write what real data would
    "defaults": {"worlds", "ops"},  # only the numpy-level world configs; no jax (tests/test_configs.py)
    "checkpoints": {"ops", "io", "models", "tokenizers"},
    "train": {"io", "sharding", "losses", "progress", "data"},  # data: the Grain index batches of fit_epochs
    "evaluate": {"metrics", "ops", "retrieval"},
    "extract": {"data", "io", "sharding", "progress", "checkpoints", "models", "ops", "tokenizers"},  # + the backbone it
                                                                                                      # runs; io: inputs.json
    "scorers": {"evaluate", "metrics", "models", "ops", "defaults", "data"},  # data: the feature store a scorer reads
    # A method's library code: its model built from a config, its loss in the one loop, restore, index.
    # Official checkpoints -> vidjax params (and X-Pool's text tower embedding a store's captions): above the models it
    # fills and the data it writes, below the methods that load its output.
    "convert": {"io", "ops", "data", "models"},
    "methods": {"checkpoints", "convert", "data", "defaults", "evaluate", "extract", "io", "losses", "metrics", "models", "ops",
                "retrieval", "scorers", "sharding", "tfds", "tokenizers", "train", "worlds"},
    "experiments": {"checkpoints", "convert", "data", "defaults", "evaluate", "extract", "io", "losses", "metrics", "methods",
                    "models", "ops", "progress", "scorers", "sharding", "train", "retrieval", "tokenizers", "tfds", "worlds"},
    "tfds": {"data", "io", "checkpoints"},  # TFDS builders (the [tfds] extra) over the data layer
    "main": {"experiments", "methods", "sharding"},  # methods: the table a method's run is dispatched through
    # The index format (retrieval.index) and each stage kind's model / scorer; a method's code only inside the builder
    # of an index that needs it (test_search_imports_no_method).
    "search": {"defaults", "extract", "methods", "models", "retrieval", "scorers"},  # extract: a store's text tower
    "real_path": {"io", "methods"},  # the summary of launch/real_path.sh: results.json files and the methods' lines
}


def _part(module: str) -> str:
  return module.split(".")[1] if module.count(".") else module


def _imports(path: Path):
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vidjax"):
      if node.module == "vidjax":
        yield from (a.name for a in node.names)
      else:
        yield _part(node.module)
    elif isinstance(node, ast.Import):
      yield from (_part(a.name) for a in node.names if a.name.startswith("vidjax."))


def test_every_import_points_down():
  bad = []
  for path in sorted((ROOT / "vidjax").rglob("*.py")):
    rel = path.relative_to(ROOT / "vidjax")
    part = rel.parts[0].removesuffix(".py")
    if part == "__init__":
      continue
    assert part in ALLOWED, f"{rel}: new top-level part {part!r}; add it to ALLOWED with its layer"
    for target in _imports(path):
      if target != part and target not in ALLOWED[part]:
        bad.append(f"{rel} imports vidjax.{target}")
  assert not bad, "imports that point up or sideways:\n" + "\n".join(bad)


# Every way a method is named: its name (config.experiment) and its label.
METHOD_NAMES = sorted({m.name for m in METHODS.values()} | {m.label for m in METHODS.values()})


def test_train_and_evaluate_know_no_method_by_name():
  for name in ("train.py", "evaluate.py"):
    text = (ROOT / "vidjax" / name).read_text().lower()
    for method in (n for n in METHOD_NAMES if n != "comp"):  # "comp" is a benchmark kind too
      code = [l for l in text.splitlines() if method in l and not l.strip().startswith(("#", '"', "'"))]
      assert not any("import" in l or f"{method}." in l or f"{method}_" in l for l in code), (name, method, code)


def test_real_data_layer_imports_no_world_and_no_model():
  """`vidjax/data/` is what a user's real data passes through: it never reaches into the synthetic worlds, and a
  builder that needs embeddings takes an embedding function instead of importing a model."""
  bad = [f"{p.relative_to(ROOT)} imports vidjax.{t}" for p in sorted((ROOT / "vidjax" / "data").rglob("*.py"))
         for t in sorted({"worlds", "models"} & set(_imports(p)))]
  assert not bad, bad


def test_worlds_import_no_experiment():
  """A world writes files and a store; the experiments read them: never the other way round."""
  bad = [f"{p.relative_to(ROOT)} imports vidjax.{t}" for p in sorted((ROOT / "vidjax" / "worlds").rglob("*.py"))
         for t in sorted({"experiments", "methods", "main"} & set(_imports(p)))]
  assert not bad, bad


def _vidjax_modules(path: Path):
  """Full dotted names of the vidjax modules `path` imports (`from vidjax.x import y` counts vidjax.x.y too)."""
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vidjax"):
      yield node.module
      yield from (f"{node.module}.{a.name}" for a in node.names)
    elif isinstance(node, ast.Import):
      yield from (a.name for a in node.names if a.name.startswith("vidjax"))


def test_experiments_import_no_other_experiment():
  """An experiment holds one experiment: what another needs lives in the package (`vidjax/methods/`, ...).
  `evaluate_all` included: it trains a missing run and reads finished runs through the table of methods."""
  experiments = ROOT / "vidjax" / "experiments"
  names = {p.stem for p in experiments.glob("*.py")} - {"__init__", "common"}
  bad = []
  for path in sorted(experiments.glob("*.py")):
    others = {m.split(".")[2] for m in _vidjax_modules(path) if m.startswith("vidjax.experiments.")} & names
    bad += [f"experiments/{path.name} imports vidjax.experiments.{o}" for o in sorted(others - {path.stem})]
  assert not bad, bad


def test_search_imports_no_method():
  """`python -m vidjax.search` loads the index format (`vidjax.retrieval.index`) and the models of its stages, not
  every method: no experiment at all, and a method module only inside the builder of an index kind that needs it
  (checked on the source and in a fresh interpreter)."""
  tree = ast.parse((ROOT / "vidjax" / "search.py").read_text())
  top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
  top_modules = [n.module for n in top if isinstance(n, ast.ImportFrom)] + [a.name for n in top
                                                                          if isinstance(n, ast.Import) for a in n.names]
  assert not [m for m in top_modules if m and m.startswith(("vidjax.methods", "vidjax.experiments"))], top_modules
  assert not [m for m in _vidjax_modules(ROOT / "vidjax" / "search.py") if m.startswith("vidjax.experiments")]
  code = ("import sys, vidjax.search; print(sorted(m for m in sys.modules if m.startswith(('vidjax.methods.', "
          "'vidjax.experiments'))))")
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu"))
  assert out.stdout.strip() == "[]", out.stdout


def _listed_method(value: str) -> str | None:
  """The method a string literal names: the name itself or one of its config files (`configs/<name>_...`)."""
  if value in METHOD_NAMES:
    return value
  return next((n for n in METHOD_NAMES if value.startswith(f"configs/{n}_")), None)


def test_only_the_table_lists_the_methods():
  """No module but `vidjax/methods/__init__.py` holds a literal list, tuple, set or dict (keys) naming three or more
  methods (by name, label or config file): what goes over every method reads `METHODS`."""
  bad = []
  for path in sorted([*(ROOT / "vidjax").rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
                      *(ROOT / "configs").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]):
    text = path.read_text()
    quoted = sum(f"configs/{n}_" in text or any(f"{q}{n}{e}" in text for q in "'\"" for e in (q, "_"))
                 for n in METHOD_NAMES)
    if path == ROOT / "vidjax" / "methods" / "__init__.py" or quoted < 3:  # fewer than 3 names: nothing to parse
      continue
    for node in ast.walk(ast.parse(text)):
      items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
      if not isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
        continue
      named = {_listed_method(e.value) for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)}
      if len(named - {None}) >= 3:
        bad.append(f"{path.relative_to(ROOT)}:{node.lineno} lists {sorted(named - {None})}")
  assert not bad, "method lists outside vidjax.methods.METHODS:\n" + "\n".join(bad)
