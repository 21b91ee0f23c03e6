"""VideoComp's plain guide command on the ~30-video real-format corpus (`test_small_corpora.py` has the contract): it
finishes within 8 GB with Table 2's fine-tunings only (NegCLIP and the `negclip_pref` pair left out on its 15 test
videos) and its steps in the paper's passes, each printed and recorded in `clipped`."""
import pytest

import small_corpora as sc

pytestmark = pytest.mark.heavy  # about half an hour on 2 cores: deselected from the README's test command (pytest.ini)


@pytest.fixture(scope="module")
def data(tmp_path_factory, worker_id):
  return sc.corpus(sc.shared_root(tmp_path_factory, worker_id), ("ActivityNet Captions",), None)


def test_videocomp_finishes_within_memory_on_a_small_corpus(data, tmp_path):
  out = sc.run_checked("comp", data, tmp_path)
  clipped = out["results"]["clipped"]
  assert clipped["ablations"] == [["negclip", "negclip_pref"], []]
  assert set(out["results"]["metrics"]) == {"zero_shot", "contrastive", "comploss", "comppretrain_comploss"}
  assert clipped["finetune.steps"][1] < 100 and clipped["pretrain.steps"][1] < 10, clipped
  assert any(k.endswith("batch_size") for k in clipped), clipped
