"""The documentation stays true to the code: README's size and test command, links that resolve, and every
`python -m vidjax.main --config X --config.key=...` command in README.md and docs/ names a config file, a variant
and keys that exist (so a moved config or a renamed key breaks a test, not a user's first command)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "launch" / "README.md",
               *(ROOT / "docs").rglob("*.md")])


def test_readme_is_short_and_runs_the_ci_test_command():
  readme = (ROOT / "README.md").read_text()
  assert len(readme.splitlines()) <= 300
  ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
  assert ci.startswith("pip install") and ci in readme.splitlines()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
  for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
    if "://" not in target:
      assert (doc.parent / target).exists(), f"{doc.relative_to(ROOT)}: broken link {target}"


def commands(text):
  """(config spec, [keys]) for every vidjax.main command line of a doc's code blocks, comments cut."""
  runs = []
  for block in re.findall(r"```bash\n(.*?)```", text, re.S):
    for line in block.replace("\\\n", " ").splitlines():
      line = line.split("  #")[0]
      m = re.search(r"--config (configs/\S+)", line)
      if m and ("vidjax.main" in line or line.lstrip().startswith("$M")):
        runs.append((m.group(1), re.findall(r"--config\.([\w.]+)=", line)))
  return runs


def test_every_documented_command_names_a_config_and_keys_that_exist():
  from vidjax.experiments.common import get_key, load_config  # pylint: disable=g-import-not-at-top
  runs = [run for doc in DOCS for run in commands(doc.read_text())]
  assert len(runs) >= 40, len(runs)
  configs = {}
  for spec, keys in runs:
    if spec not in configs:
      configs[spec] = load_config(ROOT / spec)
    for key in keys:
      get_key(configs[spec], key)  # raises on a key the config lacks
