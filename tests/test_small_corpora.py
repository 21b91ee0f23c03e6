"""Small corpora run as written, within memory (issue 64): each method's plain guide command (docs/real_data.md
section 2, its config and flags as written) run whole on a ~30-video real-format corpus (`small_corpora`: 15
placeholder videos a split of the published release files, SYNTHETIC pixels, the tiny random VideoPrism) in its own
process. Each finishes and writes its results, its peak resident memory (`resource.getrusage`) stays under 8 GB, and
every size it fitted to the data (batches, budgets, the tables 15 test queries cannot resolve) is printed and
recorded in results.json's `clipped`. Their times are BENCHMARKS.md's ("Small corpora", `launch/small_corpora.sh`),
not asserted here. VEDJE's, GRDR's (`test_small_corpora_grdr.py`) and VideoComp's (`test_small_corpora_comp.py`) are
marked `heavy`: the paper's
reranker and T5 take 4-7 CPU minutes each, VideoComp's VidCLIP about half an hour, so the README's test command
deselects them (pytest.ini) and `launch/small_corpora.sh` runs them.
"""
import pytest

import small_corpora as sc


@pytest.fixture(scope="module")
def data(tmp_path_factory, worker_id, real_path):
  _, corpus = real_path("corpus")  # GenState: a user's own triplets (the rendered corpus's clips and metadata)
  return sc.corpus(sc.shared_root(tmp_path_factory, worker_id), ("COIN", "MSR-VTT", "GenState"), corpus["genstate"])


def _methods():
  """Every method of the table but those with a file of their own (`small_corpora.OWN_FILE`), stage-1 retrieval, and
  the minutes-long ones (`small_corpora.HEAVY`) marked `heavy`."""
  from vidjax.methods import METHODS  # pylint: disable=g-import-not-at-top
  names = ["retrieval"] + [m for m in METHODS if m not in sc.OWN_FILE]
  return [pytest.param(m, marks=pytest.mark.heavy) if m in sc.HEAVY else m for m in names]


@pytest.mark.parametrize("method", _methods())
def test_the_plain_command_finishes_within_memory_on_a_small_corpus(method, data, tmp_path):
  out = sc.run_checked(method, data, tmp_path)
  clipped = out["results"]["clipped"]
  if method == "vedje":  # 15 test queries: the main model only; a batch of the 15 training videos
    assert clipped["ablations"][1] == [] and clipped["diagnostics"] == [True, False]
    assert clipped["train.batch_size"] == [64, 15]
  elif method != "retrieval":  # a batch of the paper's size holds more than the corpus's training items
    assert any(k.endswith("batch_size") for k in clipped), clipped
  if method == "genstate":  # 4 training triplets: 25 passes over their 12 items, not 2,500 steps
    assert clipped["train.steps"] == [2500, 25], clipped
