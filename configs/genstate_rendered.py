"""GenState-AI (../shared/papers/genstate_ai.txt) on the rendered state-transition world (SYNTHETIC).

    python -m vidjax.main --config configs/genstate_rendered.py --workdir /tmp/genstate              # a few CPU minutes
    python -m vidjax.main --config configs/genstate_rendered.py:smoke --workdir /tmp/genstate_smoke  # seconds (tests)

Renders mp4 clips of coloured shapes (position, quantity, actor and relation changes, each with a temporal
and a semantic hard negative) with their GenState metadata files, extracts them through the one extraction
(`vidjax.extract.extract_into`) with the STAND-IN pixel-statistics backbone (not VideoPrism:
`--config.extract.model.name=videoprism_lvt_public_v1_base --config.extract.model.checkpoint=<.npz>
--config.extract.model.spm_path=<spm>` uses VideoPrism), evaluates an order-blind zero-shot dual encoder and a
VidCLIP trained on the world's training prompts, and writes the Table-3-shaped metrics, the order histogram
(order_histogram.png) and results.json.

A user's own clips: `--config.data.metadata=<GenState metadata .json> --config.data.features=<store>` (the
store holds `clip` per video id and `text` per query id; `--config.data.train_metadata=<.json>` trains VidCLIP
on the training triplets' `tokens`). The paper's settings and deviations: configs/genstate/common.py.
"""
from pathlib import Path

from vidjax.defaults.common import config_module

_common = config_module(Path(__file__).parent / "genstate" / "common.py")


def get_config(arg=None):
  """`arg`: None (the defaults) or "smoke" (a tiny world, seconds on a CPU)."""
  return _common.get_config(arg)
