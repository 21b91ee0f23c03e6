"""vidjax's CLIP4Clip (meanP, seqTransf) held against the official code (ArrowLuo/CLIP4Clip): the golden
`tests/golden/clip4clip.npz` (`bench/goldens/dense.py clip4clip`: `modules/modeling.py`'s `CLIP4Clip.
_loose_similarity` with its `frame_position_embeddings` and `transformerClip` (`module_cross.Transformer`), and the
CrossEn loss as `CLIP4Clip.forward` applies it, run by torch on random weights, inputs at CLIP features' scale and at
unit scale) loaded through `vidjax.convert.clip4clip` into `DenseRetriever(pooling="meanp" | "seqtransf")`.

Deviations by design, not compared: vidjax holds no CLIP towers (frozen; their features are its inputs), so the
golden's inputs are the towers' outputs and `frame_proj` / `text_proj` are the identity; vidjax has no frame mask
(it samples a fixed number of frames per video), so the golden's video masks are all ones.
"""
import json
from pathlib import Path

import jax
import numpy as np
import pytest

from vidjax import convert, losses
from vidjax.convert import ConversionError, StateDict
from vidjax.convert import clip4clip as convert_clip4clip
from vidjax.convert.__main__ import main as convert_main
from vidjax.models.dense import DenseConfig, DenseRetriever, init_params

pytestmark = pytest.mark.highest_precision

GOLDEN = Path(__file__).parent / "golden" / "clip4clip.npz"
SEQ_KEYS = ("transformerClip.", "frame_position_embeddings.")
# float32 on both sides, summed in different orders. Measured on CPU: contextualised frames (entries up to ~10) 2e-6,
# pooled embeddings and cosines 1e-7, logits (x 50) 4e-6, loss 1e-6. The LayerNorm epsilon vidjax had (flax's 1e-6
# for the release's 1e-12) moved the real-scale frames by 9e-4, the pooled embeddings by 6e-5 and the logits by 2e-3:
# far outside these.
FRAMES_ATOL, POOLED_ATOL, LOGITS_ATOL, LOSS_RTOL = 2e-5, 2e-6, 5e-5, 1e-5


@pytest.fixture(scope="module")
def golden():
  with np.load(GOLDEN) as z:
    return {k: z[k] for k in z.files}


def _state_dict(golden, pooling="seqtransf", drop=(), **extra):
  """The golden's seqTransf state dict, or its meanP twin's (the same keys less the temporal transformer's)."""
  sd = {k[len("sd/"):]: v for k, v in golden.items() if k.startswith("sd/")}
  sd = {k: v for k, v in sd.items() if k not in drop and (pooling == "seqtransf" or not k.startswith(SEQ_KEYS))}
  return {**sd, **extra}


def _model(info, params):
  c = info["config"]
  seq = {k.split(".")[1]: c[k] for k in ("model.seq_layers", "model.seq_head_dim", "model.max_positions") if k in c}
  model = DenseRetriever(DenseConfig(pooling=info["pooling"], **info["widths"], **seq,
                                     temperature=c["model.temperature"],
                                     learn_logit_scale=c["model.learn_logit_scale"]))
  return model, {"params": params}


def test_golden_records_the_official_commit(golden):
  meta = json.loads(str(golden["meta"]))
  assert meta["official_repo"] == "ArrowLuo/CLIP4Clip"
  assert meta["commit"] == "508ffa3de39ba0563a03199c440ab602a72e9b6f"
  assert meta["generator"].startswith("bench/goldens/dense.py") and meta["torch"] and "seed" in meta


@pytest.mark.parametrize("pooling", ["meanp", "seqtransf"])
@pytest.mark.parametrize("scale", ["real", "unit"])
def test_pooling_similarity_and_loss_match_the_official_code(golden, pooling, scale):
  heads = {"heads": 4} if pooling == "seqtransf" else {}  # the golden's transformerClip has 4 heads (its meta)
  params, info = convert_clip4clip.convert(StateDict(_state_dict(golden, pooling), "clip4clip.npz"),
                                           learn_logit_scale=True, **heads)
  assert info["pooling"] == pooling  # read from the checkpoint's keys
  model, variables = _model(info, params)
  text, frames = golden[f"in/{scale}/text"], golden[f"in/{scale}/frames"]
  out = f"out/{scale}/{pooling}/"
  if pooling == "seqtransf":  # the transformer's output plus the input frames (the residual)
    contextual = np.asarray(model.apply(variables, frames, method=DenseRetriever.encode_frames))
    np.testing.assert_allclose(contextual, golden[out + "transformer_out"] + frames, rtol=1e-5, atol=FRAMES_ATOL)
  pooled = np.asarray(model.apply(variables, frames, method=DenseRetriever.encode_video))
  np.testing.assert_allclose(pooled, golden[out + "pooled"], rtol=1e-5, atol=POOLED_ATOL)
  sims = np.asarray(model.apply(variables, text, frames, method=DenseRetriever.similarity))
  scale_value = model.apply(variables, method=DenseRetriever.logit_scale)
  assert float(scale_value) == pytest.approx(50.0, rel=1e-6)  # the checkpoint's clip.logit_scale = ln 50
  np.testing.assert_allclose(sims * float(scale_value), golden[out + "logits"], rtol=1e-5, atol=LOGITS_ATOL)
  v = frames.shape[0]  # the loss of a batch of V (text, video) pairs
  loss = float(losses.similarity_infonce(sims[:v], scale_value))
  assert loss == pytest.approx(float(golden[out + "loss"]), rel=LOSS_RTOL)


def test_the_cli_round_trips_a_seqtransf_checkpoint(golden, tmp_path):
  np.savez(tmp_path / "pytorch_model.npz", **_state_dict(golden))
  assert convert_main(["--from", "clip4clip", "--checkpoint", str(tmp_path / "pytorch_model.npz"), "--out",
                       str(tmp_path / "out"), "--option", "heads=4"]) == 0
  record = json.loads((tmp_path / "out" / convert.INFO_FILE).read_text())
  info = record["info"]
  assert info["pooling"] == "seqtransf" and set(record["skipped"]) == {"clip."}
  assert info["config"]["model.max_positions"] == 77 and info["config"]["model.seq_layers"] == 2
  assert info["config"]["model.seq_head_dim"] == 16 and info["config"]["model.temperature"] == pytest.approx(1 / 50)
  model, _ = _model(info, None)
  params, _ = convert.into(init_params(model, jax.random.PRNGKey(0)), tmp_path / "out", expect_from=("clip4clip",))
  text, frames = golden["in/real/text"], golden["in/real/frames"]
  sims = np.asarray(model.apply({"params": params}, text, frames, method=DenseRetriever.similarity))
  np.testing.assert_allclose(sims * 50.0, golden["out/real/seqtransf/logits"], rtol=1e-5, atol=LOGITS_ATOL)


def test_the_pooling_follows_the_checkpoint_and_the_converter_refuses_what_does_not_fit(golden):
  def conv(sd, **options):
    return convert_clip4clip.convert(StateDict(sd, "clip4clip.npz"), **options)

  assert conv(_state_dict(golden, "meanp"))[1]["pooling"] == "meanp"
  # The release's head rule (width // 64) when the option is absent: 1 head at width 64.
  assert conv(_state_dict(golden))[1]["config"]["model.seq_head_dim"] == 64
  with pytest.raises(ConversionError, match=r"pooling='meanp', but the checkpoint's keys are seqtransf's"):
    conv(_state_dict(golden), pooling="meanp")
  w = golden["sd/transformerClip.resblocks.0.mlp.c_fc.weight"]
  with pytest.raises(ConversionError, match=r"a seqLSTM checkpoint \(keys lstm_visual\.\*\)"):
    conv(_state_dict(golden, **{"lstm_visual.weight_ih_l0": w}))
  with pytest.raises(ConversionError, match=r"a tightTransf checkpoint \(keys cross\.\*\)"):
    conv(_state_dict(golden, "meanp", **{"cross.pooler.dense.weight": w}))
  with pytest.raises(ConversionError, match=r"unknown key 'transformerClip.resblocks.0.attn.extra'"):
    conv(_state_dict(golden, **{"transformerClip.resblocks.0.attn.extra": w}), heads=4)
  with pytest.raises(ConversionError, match=r"missing key 'transformerClip.resblocks.1.ln_2.bias'"):
    conv(_state_dict(golden, drop=("transformerClip.resblocks.1.ln_2.bias",)), heads=4)
  with pytest.raises(ConversionError, match=r"key 'transformerClip.resblocks.0.mlp.c_fc.weight' has shape "
                                            r"\(256, 32\), expected \(256, 64\)"):
    conv(_state_dict(golden, **{"transformerClip.resblocks.0.mlp.c_fc.weight": w[:, :32]}), heads=4)
  with pytest.raises(ConversionError, match=r"transformerClip.resblocks.\* must be numbered 0..L-1, found \[0, 2\]"):
    conv(_state_dict(golden, drop=[k[len("sd/"):] for k in golden if k.startswith("sd/transformerClip.resblocks.1")])
         | {k.replace("resblocks.1", "resblocks.2"): v for k, v in _state_dict(golden).items()
            if k.startswith("transformerClip.resblocks.1")}, heads=4)
