"""VideoComp (../shared/papers/videocomp.txt) on YouCook2-Comp: VidCLIP, CompLoss, CompPretrain.

    python -m vidjax.main --config configs/comp_youcook2.py --workdir /tmp/comp_youcook2              # synthetic world, a few CPU minutes
    python -m vidjax.main --config configs/comp_youcook2.py:smoke --workdir /tmp/comp_youcook2_smoke  # seconds (tests)

With `data.features` empty the run uses the embedded SYNTHETIC moving-object world (four events per video,
its event sentences turned into paragraphs by the same builder) and labels every output synthetic.
Real data: `--config.data.features=<store with per-frame tokens [16, N, 768] keyed by video id>` and
`--config.data.annotations=../shared/data/youcook2/youcookii_annotations_trainval.json` (train to fine-tune,
`data.eval_split` = val to evaluate);
or official release files with `data.release_eval` / `data.release_train`. Defaults and deviations:
vidjax/defaults/comp.py (the text tower starts from all-MiniLM-L6-v2 instead of the paper's CLIP text
transformer, which is not available offline; with real VideoPrism weights `--config.model.init=lvt` starts it
from VideoPrism's LvT text encoder instead, see there). results.json: methods zero_shot, contrastive, negclip,
comploss, comppretrain_comploss x temp_reorder, action_replace, seg_mismatch, all, t2v_r1, v2t_r1.
"""
from vidjax.defaults import comp


def get_config(arg=None):
  """`arg`: None (the defaults) or "smoke" (a tiny world, seconds on a CPU)."""
  return comp.get_config("youcook2", arg)
