"""VideoComp (../shared/papers/videocomp.txt) on ActivityNet-Comp: VidCLIP, CompLoss, CompPretrain.

    python -m vidjax.main --config configs/comp_activitynet.py --workdir /tmp/comp_activitynet              # synthetic world, a few CPU minutes
    python -m vidjax.main --config configs/comp_activitynet.py:smoke --workdir /tmp/comp_activitynet_smoke  # seconds (tests)

With `data.features` empty the run uses the embedded SYNTHETIC moving-object world (four events per video,
its event sentences turned into paragraphs by the same builder) and labels every output synthetic.
Real data: `--config.data.features=<store with per-frame tokens [16, N, 768] keyed by video id>`,
`--config.data.annotations=../shared/data/activitynet_captions/val_1.json` and
`--config.data.train_annotations=../shared/data/activitynet_captions/train_modified.json`;
or official release files with `data.release_eval` / `data.release_train`. Defaults and deviations:
vidjax/defaults/comp.py (the text tower starts from all-MiniLM-L6-v2 instead of the paper's CLIP text
transformer, which is not available offline; with real VideoPrism weights `--config.model.init=lvt` starts it
from VideoPrism's LvT text encoder instead, see there). results.json: methods zero_shot, contrastive, negclip,
comploss, comppretrain_comploss x temp_reorder, action_replace, seg_mismatch, all, t2v_r1, v2t_r1.
"""
from vidjax.defaults import comp


def get_config(arg=None):
  """`arg`: None (the defaults) or "smoke" (a tiny world, seconds on a CPU)."""
  return comp.get_config("activitynet", arg)
