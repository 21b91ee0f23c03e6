"""The house rules of ../shared/ARCHITECTURE.md, checked on the source: every import points down."""
import ast
from pathlib import Path

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
    "retrieval": {"ops", "io", "metrics", "data", "progress"},
    "data": {"ops", "io", "metrics", "sharding"},  # what real data passes through: never a world
    "worlds": {"data", "ops", "io", "metrics"},     # the embedded SYNTHETIC worlds write what real data would
    "defaults": {"worlds", "ops"},  # only the numpy-level world configs; no jax (tests/test_configs.py)
    "checkpoints": {"ops", "io", "models", "tokenizers"},
    "train": {"io", "sharding", "losses", "progress", "data"},  # data: the Grain index batches of fit_epochs
    "evaluate": {"metrics", "ops", "retrieval"},
    "extract": {"data", "sharding", "progress", "checkpoints", "models", "ops"},  # + the backbone it runs
    "scorers": {"evaluate", "metrics", "models", "ops", "defaults", "data"},  # data: the feature store a scorer reads
    # A method's library code: its model built from a config, its loss in the one loop, restore, index.
    "methods": {"checkpoints", "data", "defaults", "evaluate", "extract", "io", "losses", "metrics", "models", "ops",
                "retrieval", "scorers", "sharding", "tfds", "tokenizers", "train", "worlds"},
    "experiments": {"checkpoints", "data", "defaults", "evaluate", "extract", "io", "losses", "metrics", "methods",
                    "models", "ops", "progress", "scorers", "sharding", "train", "retrieval", "tokenizers", "tfds", "worlds"},
    "tfds": {"data", "io", "checkpoints"},  # TFDS builders (the [tfds] extra) over the data layer
    "main": {"experiments", "sharding"},
    "search": {"methods"},
    "real_path": {"io"},  # the summary of launch/real_path.sh: reads results.json files, imports no experiment
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


def test_train_and_evaluate_know_no_method_by_name():
  for name in ("train.py", "evaluate.py"):
    text = (ROOT / "vidjax" / name).read_text().lower()
    for method in ("cast", "vedje", "grdr", "videocomp", "genstate"):
      code = [l for l in text.splitlines() if method in l and not l.strip().startswith(("#", '"', "'"))]
      assert not any("import" in l or f"{method}." in l or f"{method}_" in l for l in code), (name, method, code)


def test_real_data_layer_imports_no_world():
  """`vidjax/data/` is what a user's real data passes through: it never reaches into the synthetic worlds."""
  bad = [f"{p.relative_to(ROOT)} imports vidjax.worlds" for p in sorted((ROOT / "vidjax" / "data").rglob("*.py"))
         if "worlds" in set(_imports(p))]
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
  """An experiment holds one experiment: what another needs lives in the package (`vidjax/methods/`, ...). Only
  `evaluate_all` reaches into the experiments (to train a missing run and to read finished runs' models)."""
  experiments = ROOT / "vidjax" / "experiments"
  names = {p.stem for p in experiments.glob("*.py")} - {"__init__", "common"}
  bad = []
  for path in sorted(experiments.glob("*.py")):
    if path.stem == "evaluate_all":
      continue
    others = {m.split(".")[2] for m in _vidjax_modules(path) if m.startswith("vidjax.experiments.")} & names
    bad += [f"experiments/{path.name} imports vidjax.experiments.{o}" for o in sorted(others - {path.stem})]
  assert not bad, bad


def test_search_imports_no_experiment():
  assert not [m for m in _vidjax_modules(ROOT / "vidjax" / "search.py") if m.startswith("vidjax.experiments")]
