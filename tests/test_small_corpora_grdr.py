"""GRDR's plain guide command on the ~30-video real-format corpus (`test_small_corpora.py` has the contract): it
finishes within 8 GB, Tables 1-3's other rows left out on its 15 test queries and its sizes fitted, each printed and
recorded in `clipped`; the capped row, whose cap cannot bind on 30 videos, is the main row."""
import pytest

import small_corpora as sc

pytestmark = pytest.mark.heavy  # minutes: deselected from the README's test command (pytest.ini)


@pytest.fixture(scope="module")
def data(tmp_path_factory, worker_id):
  return sc.corpus(sc.shared_root(tmp_path_factory, worker_id), ("MSR-VTT",), None)


def test_grdr_finishes_within_memory_on_a_small_corpus(data, tmp_path):
  out = sc.run_checked("grdr", data, tmp_path)
  r = out["results"]
  for key in ("eval.table3", "eval.baselines", "eval.compare_single_view", "eval.dense_rows"):
    assert key in r["clipped"], key
  assert {"model.num_codes", "train.batch_size", "eval.beam_width"} <= set(r["clipped"])
  table = r["metrics"]["inductive"]
  assert not any(k.startswith(("tiger", "avg", "t2vindexer", "grdr_nv1", "clip4clip")) for k in table), list(table)
  cap = [k for k in table if k.startswith("grdr_cap")]
  assert cap and table[cap[0]]["t2v_r1"] == table["grdr"]["t2v_r1"]
  assert table[cap[0]]["num_candidates"] == table["grdr"]["num_candidates"]
