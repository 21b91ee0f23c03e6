"""VideoComp (../shared/papers/videocomp.txt) on YouCook2-Comp: VidCLIP, CompLoss, CompPretrain.

    python -m vidjax.main --config configs/comp_youcook2.py --workdir DIR \
        --config.data.features=<store with per-frame tokens [16, N, 768] keyed by video id> \
        --config.data.annotations=../shared/data/youcook2/youcookii_annotations_trainval.json
    python -m vidjax.main --config configs/comp_youcook2.py:world --workdir DIR   # embedded SYNTHETIC world, a few CPU minutes
    python -m vidjax.main --config configs/comp_youcook2.py:smoke --workdir DIR   # seconds (tests)

The plain config is the paper's settings and needs a store (or official release files: `data.release_eval` /
`data.release_train`); the `world` variant runs the embedded SYNTHETIC moving-object world with a small model
sized for it, written as files under <workdir>/world and read as a user's. The paper's settings, the variants and
the deviations: configs/comp/common.py. results.json: methods zero_shot, contrastive, negclip, comploss,
negclip_pref, comppretrain_comploss, comppretrain_negclip_pref x temp_reorder, action_replace, seg_mismatch, all,
t2v_r1, v2t_r1, hierarchy; comploss_reading / comppretrain_reading (eq. 2's order: "paper", every pair of the
hierarchy, the default; "levels" with --config.finetune.pref_order=levels) and eq2_pairs.
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "comp" / "common.py")


def get_config(arg=None):
  """`arg`: comma-separated variants: "world" (the embedded SYNTHETIC world), "smoke" (tiny, seconds), "tiny",
  "rendered" (configs/comp/common.py)."""
  return _common.get_config("youcook2", arg)
