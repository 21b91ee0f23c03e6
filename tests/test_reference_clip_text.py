"""vidjax's CLIP text tower (X-Pool's query encoder) held against the official code: the golden
`tests/golden/clip_text.npz` (`bench/goldens/clip_text.py`: GRDR's copy of X-Pool builds `CLIPTransformer` with
Hugging Face's `CLIPModel` (transformers 4.47.0, GRDR's pin; `get_text_features` as X-Pool calls it) and with OpenAI's
`CLIP` (`encode_text`), tiny and random, on token ids padded in every way a tokenizer pads) loaded through
`vidjax.convert.xpool` into `vidjax.models.clip_text.CLIPTextTower`.

Deviation by design, not compared: the image towers (vidjax reads their outputs, the per-frame features); the
golden zeroes them and the converter skips them.
"""
import json
from pathlib import Path

import jax
import numpy as np
import pytest

from vidjax import convert
from vidjax.convert import ConversionError, StateDict
from vidjax.convert import xpool as convert_xpool
from vidjax.convert.__main__ import main as convert_main
from vidjax.models.clip_text import CLIPTextConfig, CLIPTextTower, init_params

pytestmark = pytest.mark.highest_precision

GOLDEN = Path(__file__).parent / "golden" / "clip_text.npz"
HEADS = 4  # the golden's; CLIP's default rule width // 64 gives 0 at its width 32
# float32 on both sides, summed in other orders (torch's sdpa / nn.MultiheadAttention, XLA's einsums), through up to
# 2 layers and 5 LayerNorms that divide CLIP-scale embeddings (a few hundredths) by their spread. Measured on CPU:
# 2.2e-6 at most, on outputs up to ~3. flax's LayerNorm epsilon (1e-6 for torch's 1e-5) moves the CLIP-scale outputs
# by 5e-2: far outside (at unit scale by 7e-6, which is why the golden has both scales).
ATOL, RTOL = 2e-5, 1e-5


@pytest.fixture(scope="module")
def golden():
  with np.load(GOLDEN) as z:
    return {k: z[k] for k in z.files}


def _sd(golden, prefix="sd/", drop=(), **extra):
  sd = {k[len(prefix):]: v for k, v in golden.items() if k.startswith(prefix)}
  return StateDict({**{k: v for k, v in sd.items() if k not in drop}, **extra}, "clip_text.npz")


def _tower(golden, prefix="sd/", **replace):
  params, info = convert_xpool.convert(_sd(golden, prefix, **replace), text_heads=HEADS)
  return CLIPTextTower(CLIPTextConfig(**info["text_tower"]["config"])), params[convert_xpool.TEXT_TOWER], info


def test_golden_records_the_official_commit(golden):
  meta = json.loads(str(golden["meta"]))
  assert meta["official_repo"] == "JasonCodeMaker/GRDR"
  assert meta["commit"] == "3ca3367fefb59a9ee18585412ad10b11e0acf6b1"
  assert meta["generator"] == "bench/goldens/clip_text.py" and meta["torch"] and "seed" in meta
  assert meta["huggingface"]["transformers"] == "4.47.0" and meta["huggingface"]["text_config"]["eos_token_id"] == 2


@pytest.mark.parametrize("scale", ["real", "unit"])
@pytest.mark.parametrize("batch", ["full", "short"])
def test_huggingface_tower_matches_get_text_features(golden, scale, batch):
  unit = {k[len("unit/sd/"):]: v for k, v in golden.items() if k.startswith("unit/sd/")} if scale == "unit" else {}
  tower, params, info = _tower(golden, **unit)
  assert info["text_tower"]["layout"] == "huggingface"
  assert info["text_tower"]["config"] == {"width": 32, "layers": 2, "heads": HEADS, "context": 16, "vocab": 100,
                                          "projection": 16, "mlp_width": 128}
  # The attention mask is not an input: under the causal mask nothing after the end-of-text token reaches it.
  out = np.asarray(tower.apply({"params": params}, golden[f"in/{batch}/ids"]))
  np.testing.assert_allclose(out, golden[f"out/hf/{scale}/{batch}"], rtol=RTOL, atol=ATOL)


def test_openai_tower_matches_encode_text(golden):
  tower, params, info = _tower(golden, "openai/sd/")
  assert info["text_tower"]["layout"] == "openai" and info["text_tower"]["config"]["layers"] == 1
  out = np.asarray(tower.apply({"params": params}, golden["in/openai/ids"]))
  np.testing.assert_allclose(out, golden["out/openai/real/full"], rtol=RTOL, atol=ATOL)


def test_cli_round_trips_both_parts(golden, tmp_path):
  sd = {k[len("sd/"):]: v for k, v in golden.items() if k.startswith("sd/")}
  np.savez(tmp_path / "xpool_hf.npz", **sd)
  assert convert_main(["--from", "xpool", "--checkpoint", str(tmp_path / "xpool_hf.npz"), "--out",
                       str(tmp_path / "out"), "--option", f"text_heads={HEADS}"]) == 0
  record = json.loads((tmp_path / "out" / convert.INFO_FILE).read_text())
  assert record["skipped"] == {p: record["skipped"][p] for p in ("clip.vision_model.", "clip.visual_projection.")}
  config = CLIPTextConfig(**record["info"]["text_tower"]["config"])
  params, _ = convert.into(init_params(config, jax.random.PRNGKey(0)), tmp_path / "out", ("xpool",),
                           subtree=convert_xpool.TEXT_TOWER)
  out = np.asarray(CLIPTextTower(config).apply({"params": params}, golden["in/full/ids"]))
  np.testing.assert_allclose(out, golden["out/hf/real/full"], rtol=RTOL, atol=ATOL)
  with pytest.raises(ConversionError, match=r"holds the parts \['retriever', 'text_tower'\]; name the one"):
    convert.into(init_params(config, jax.random.PRNGKey(0)), tmp_path / "out")


def test_the_converter_refuses_what_does_not_fit(golden):
  tower = "clip.text_model.encoder.layers.1.mlp.fc2.weight"
  with pytest.raises(ConversionError, match=rf"missing key '{tower}'"):
    convert_xpool.convert(_sd(golden, drop=(tower,)), text_heads=HEADS)
  with pytest.raises(ConversionError, match=r"missing key 'clip.text_projection.weight'"):
    convert_xpool.convert(_sd(golden, drop=("clip.text_projection.weight",)), text_heads=HEADS)
  with pytest.raises(ConversionError, match=r"unknown key 'clip.text_model.encoder.layers.2.mlp.fc1.bias'"):
    convert_xpool.convert(_sd(golden, **{"clip.text_model.encoder.layers.2.mlp.fc1.bias": np.zeros(128)}),
                          text_heads=HEADS)
  with pytest.raises(ConversionError, match=r"text_heads=0 must be a positive divisor of the text tower's width 32"):
    convert_xpool.convert(_sd(golden))  # CLIP's rule width // 64
  with pytest.raises(ConversionError, match=r"position_ids is not 0 \.\. 15"):
    convert_xpool.convert(_sd(golden, **{"clip.text_model.embeddings.position_ids": np.zeros((1, 16), np.int64)}),
                          text_heads=HEADS)
  # An older transformers' checkpoint holds the position ids as a buffer: taken and checked.
  sd = _sd(golden, **{"clip.text_model.embeddings.position_ids": np.arange(16)[None]})
  convert_xpool.convert(sd, text_heads=HEADS)
  with pytest.raises(ConversionError, match=r"text tower projects to 12 but the pooling is 16 wide"):
    w = golden["sd/clip.text_projection.weight"]
    convert_xpool.convert(_sd(golden, **{"clip.text_projection.weight": w[:12]}), text_heads=HEADS)
  no_text = [k for k in golden if k.startswith("sd/clip.text")]
  with pytest.raises(ConversionError, match=r"no CLIP text tower: neither clip.text_model"):
    convert_xpool.convert(_sd(golden, drop=tuple(k[len("sd/"):] for k in no_text)), text_heads=HEADS)
