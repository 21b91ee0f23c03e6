"""vidjax's X-Pool held against the official code (layer6ai-labs/xpool): the golden `tests/golden/xpool.npz`
(`bench/goldens/dense.py xpool`: `modules/transformer.py`'s `Transformer`, `modules/metrics.py`'s
`sim_matrix_training`, `modules/loss.py`'s `CLIPLoss`, run by torch on random weights, 1 and 4 heads, inputs at CLIP
features' scale and at unit scale) loaded through `vidjax.convert.xpool` into `DenseRetriever(pooling="xpool")`.

Deviation by design, not compared: vidjax's X-Pool reads the CLIP towers' outputs (frozen; their features are its
inputs), so the golden's inputs are the towers' outputs and `frame_proj` / `text_proj` are the identity (the text
tower, which embeds the queries, is converted as its own part and held against the official code in
tests/test_reference_clip_text.py).
Not compared: dropout (training only; both apply it to FC's output before the residual, `XPool`).
"""
import json
from pathlib import Path

import jax
import numpy as np
import pytest

from vidjax import convert, losses
from vidjax.convert import ConversionError, StateDict
from vidjax.convert import xpool as convert_xpool
from vidjax.convert.__main__ import main as convert_main
from vidjax.models.dense import DenseConfig, DenseRetriever, init_params

pytestmark = pytest.mark.highest_precision

GOLDEN = Path(__file__).parent / "golden" / "xpool.npz"
# float32 on both sides, summed in different orders; LayerNorm divides inputs of a few hundredths by their spread,
# which scales rounding up ~25x. Measured on CPU: pooled 2e-6, cosines 2e-7, loss 2e-6 (logit scale 50). The
# LayerNorm epsilon vidjax had (flax's 1e-6 for torch's 1e-5) moved the real-scale pooled embeddings by 5e-3 and the
# cosines by 2e-4: far outside these.
POOLED_ATOL, SIMS_ATOL, LOSS_RTOL = 2e-5, 2e-6, 1e-5


@pytest.fixture(scope="module")
def golden():
  with np.load(GOLDEN) as z:
    return {k: z[k] for k in z.files}


def _sd(golden, drop=(), **extra):
  sd = {k[len("sd/"):]: v for k, v in golden.items() if k.startswith("sd/") and k[len("sd/"):] not in drop}
  return StateDict({**sd, **extra}, "xpool.npz")


def _model(info, params):
  c = info["config"]
  model = DenseRetriever(DenseConfig(pooling="xpool", **info["widths"], xpool_heads=c["model.xpool_heads"],
                                     temperature=c["model.temperature"],
                                     learn_logit_scale=c["model.learn_logit_scale"]))
  return model, {"params": params[convert_xpool.RETRIEVER]}


def test_golden_records_the_official_commit(golden):
  meta = json.loads(str(golden["meta"]))
  assert meta["official_repo"] == "layer6ai-labs/xpool"
  assert meta["commit"] == "bc88718199007d395136adc99a3e69adbee874a0"
  assert meta["generator"].startswith("bench/goldens/dense.py") and meta["torch"] and "seed" in meta


@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("scale", ["real", "unit"])
def test_pooling_similarity_and_loss_match_the_official_code(golden, heads, scale):
  params, info = convert_xpool.convert(_sd(golden), heads=heads)
  model, variables = _model(info, params)
  text, frames = golden[f"in/{scale}/text"], golden[f"in/{scale}/frames"]
  out = f"out/{scale}/heads{heads}/"

  def pooled_fn(m, t, f):
    return m.xpool(m.text_proj(t), m.encode_frames(f), True)

  pooled = np.asarray(model.apply(variables, text, frames, method=pooled_fn))
  # The official layout is [videos, texts, D]; vidjax's [texts, videos, D].
  np.testing.assert_allclose(pooled, golden[out + "pooled"].transpose(1, 0, 2), rtol=1e-5, atol=POOLED_ATOL)
  sims = np.asarray(model.apply(variables, text, frames, method=DenseRetriever.similarity))
  np.testing.assert_allclose(sims, golden[out + "sims"], rtol=1e-5, atol=SIMS_ATOL)
  # The loss of a batch of V (text, video) pairs, at the checkpoint's logit scale (clip.logit_scale = ln 50).
  v = frames.shape[0]
  scale_value = model.apply(variables, method=DenseRetriever.logit_scale)
  assert float(scale_value) == pytest.approx(50.0, rel=1e-6)
  loss = float(losses.similarity_infonce(sims[:v], scale_value))
  assert loss == pytest.approx(float(golden[out + "loss"]), rel=LOSS_RTOL)


def test_converted_params_have_the_models_structure_and_the_cli_round_trips(golden, tmp_path):
  sd = {k[len("sd/"):]: v for k, v in golden.items() if k.startswith("sd/")}
  np.savez(tmp_path / "xpool_checkpoint.npz", **sd)
  assert convert_main(["--from", "xpool", "--checkpoint", str(tmp_path / "xpool_checkpoint.npz"), "--out",
                       str(tmp_path / "out"), "--option", "heads=4", "--option", "learn_logit_scale=true"]) == 0
  record = json.loads((tmp_path / "out" / convert.INFO_FILE).read_text())
  info = record["info"]
  assert info["config"]["model.xpool_heads"] == 4 and set(record["skipped"]) == {"clip.visual."}
  assert info["parts"] == [convert_xpool.RETRIEVER, convert_xpool.TEXT_TOWER]
  assert info["config"]["model.temperature"] == pytest.approx(1 / 50, rel=1e-6)
  model = DenseRetriever(DenseConfig(pooling="xpool", **info["widths"], xpool_heads=4, learn_logit_scale=True))
  params, _ = convert.into(init_params(model, jax.random.PRNGKey(0)), tmp_path / "out",
                           expect_from=("xpool",), subtree=convert_xpool.RETRIEVER)
  assert float(params["log_logit_scale"]) == pytest.approx(np.log(50.0), rel=1e-6)
  text, frames = golden["in/real/text"], golden["in/real/frames"]
  sims = np.asarray(model.apply({"params": params}, text, frames, method=DenseRetriever.similarity))
  np.testing.assert_allclose(sims, golden["out/real/heads4/sims"], rtol=1e-5, atol=SIMS_ATOL)


def test_the_converter_refuses_what_does_not_fit(golden):
  w = golden["sd/pool_frames.cross_attn.k_proj.weight"]
  with pytest.raises(ConversionError, match=r"xpool.npz: unknown key 'pool_frames.extra.weight'"):
    convert_xpool.convert(_sd(golden, **{"pool_frames.extra.weight": w}))
  with pytest.raises(ConversionError, match=r"missing key 'pool_frames.cross_attn.k_proj.weight'"):
    convert_xpool.convert(_sd(golden, drop=("pool_frames.cross_attn.k_proj.weight",)))
  with pytest.raises(ConversionError, match=r"key 'pool_frames.linear_proj.weight' has shape \(64, 32\), "
                                            r"expected \(64, 64\)"):
    convert_xpool.convert(_sd(golden, **{"pool_frames.linear_proj.weight": w[:, :32]}))
  with pytest.raises(ConversionError, match=r"heads=3 must be a positive divisor of the width 64"):
    convert_xpool.convert(_sd(golden), heads=3)
  with pytest.raises(ConversionError, match=r"missing key 'clip.logit_scale'"):
    convert_xpool.convert(_sd(golden, drop=("clip.logit_scale",)))
