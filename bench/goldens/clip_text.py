"""Writes tests/golden/clip_text.npz: X-Pool's query encoder, CLIP's text tower, on fixed random weights and token ids
(tests/test_reference_clip_text.py holds vidjax's `CLIPTextTower` against it through `vidjax.convert.xpool`).

Not run by CI (it needs torch and transformers 4.47.0, GRDR's pin, installed by hand, and GRDR's checkout):

    python bench/goldens/clip_text.py --repo /work/refs/JasonCodeMaker+GRDR --out tests/golden

Everything on the compared path runs in the official code: GRDR's copy of X-Pool (`reranker/xpool`, the release's
reranker) builds `model.clip_transformer.CLIPTransformer` twice, as its two layouts:
  * `huggingface` (the release's default, `config/all_config.py`): its tower is `transformers.CLIPModel`, which the
    official code loads from `openai/clip-vit-base-patch32`; here `CLIPModel.from_pretrained` returns a tiny
    `CLIPModel` instead (nothing downloads) whose text config keeps that checkpoint's legacy `eos_token_id` 2 (the
    end-of-text token is the argmax of the ids). The outputs are `clip.get_text_features(input_ids=...,
    attention_mask=...)`, X-Pool's call on its tokenizer's output (`trainer/evaluator.py`).
  * OpenAI's (`--huggingface` off): `model.clip_model.CLIP` at a tiny size, `clip.encode_text(ids)` on ids zero-padded
    to the context length (`modules/tokenization_clip.py`'s `SimpleTokenizer` pads so).

The ids use a vocabulary of 100 with `<|startoftext|>` 98 and `<|endoftext|>` 99 (last, as CLIP's 49406 / 49407);
rows end at their first 99 and are padded with 99 (as CLIPTokenizer pads), with zeros, with other tokens (masked), or
not at all (a full context: the truncated case). "full" batches are the context length (16); "short" is a batch of
7 positions (X-Pool's `padding=True` pads to the longest row, and its per-query evaluator encodes one unpadded query).

Weights are random (matrices N(0, 1 / fan_in), biases N(0, 0.1), LayerNorm scales 1 + N(0, 0.2); each value rounded
to bfloat16, computed in float32): token and position embeddings at CLIP's scale (N(0, 0.02), N(0, 0.01)), and a
second set at unit scale (`unit/sd/`: those two tables only, the rest shared), so that LayerNorm's epsilon shows. The
vision towers and the pooling (`pool_frames`, `tests/golden/xpool.npz` covers it) are zeroed: they are off the
compared path, and zeros keep the file small.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

SEED = 0
VOCAB, CONTEXT, WIDTH, HEADS, PROJECTION = 100, 16, 32, 4, 16
BOS, EOT = 98, 99
HF_LAYERS, OPENAI_LAYERS = 2, 1
TEXT_HF = "clip.text_model.embeddings."
VISION = ("vision_model.", "visual_projection.", "visual.")  # both layouts' vision towers, zeroed
UNIT_KEYS = (TEXT_HF + "token_embedding.weight", TEXT_HF + "position_embedding.weight")


def token_ids(seed: int) -> dict:
  """{name: (ids [B, L] int64, attention mask [B, L] int64)} of the module docstring's batches."""
  rng = np.random.default_rng(seed)
  words = lambda n: rng.integers(1, BOS, n).tolist()  # noqa: E731  (ordinary tokens: below <|startoftext|>)
  rows = [  # (tokens through <|endoftext|>, padding)
      ([BOS, *words(5), EOT], [EOT] * 9),                  # CLIPTokenizer's padding: <|endoftext|>
      ([BOS, *words(8), EOT], words(6)),                   # other tokens after the end (masked)
      ([BOS, *words(CONTEXT - 2), EOT], []),               # a full context, as truncation leaves it
      ([BOS, EOT], [0] * (CONTEXT - 2)),                   # an empty caption, zero-padded
      ([BOS, *words(3), BOS, *words(2), EOT], [EOT] * 8),  # <|startoftext|> inside the text
  ]
  full = np.array([t + p for t, p in rows], np.int64)
  full_mask = np.array([[1] * len(t) + [0] * len(p) for t, p in rows], np.int64)
  short_rows = [[BOS, *words(5), EOT], [BOS, *words(3), EOT, EOT, EOT]]
  short = np.array(short_rows, np.int64)
  short_mask = np.array([[1] * 7, [1] * 5 + [0] * 2], np.int64)
  return {"full": (full, full_mask), "short": (short, short_mask)}


def randomise_text_tower(clip: torch.nn.Module, gen: torch.Generator) -> None:
  """The docstring's random weights for every parameter of `clip` but its vision tower (embedding tables at CLIP's
  scale); the logit scale ln 50."""
  with torch.no_grad():
    for name, p in clip.named_parameters():
      if name.startswith(VISION):
        continue
      if name == "logit_scale":
        p.fill_(float(np.log(50.0)))
        continue
      if name.endswith(("token_embedding.weight", "position_embedding.weight")) or name == "positional_embedding":
        std = 0.01 if "position" in name else 0.02
        value = std * torch.randn(p.shape, generator=gen)
      elif p.ndim >= 2:
        value = torch.randn(p.shape, generator=gen) / np.sqrt(p.shape[-1])
      elif name.endswith("bias"):
        value = 0.1 * torch.randn(p.shape, generator=gen)
      else:  # a LayerNorm's scale
        value = 1.0 + 0.2 * torch.randn(p.shape, generator=gen)
      p.copy_(value.bfloat16().float())


def zero(module: torch.nn.Module) -> None:
  with torch.no_grad():
    for p in module.parameters():
      p.zero_()


def commit(repo: Path) -> str:
  return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                        check=True).stdout.strip()


def tiny_config(heads: int):
  from config.base_config import Config  # pylint: disable=import-outside-toplevel

  class TinyConfig(Config):
    """What CLIPTransformer and its pooling read (config/all_config.py's names) at the tiny width."""

    def __init__(self, huggingface):  # pylint: disable=super-init-not-called
      self.huggingface, self.clip_arch, self.num_frames, self.input_res = huggingface, "tiny", 4, 8
      self.embed_dim, self.num_mha_heads, self.transformer_dropout = PROJECTION, heads, 0.3

    def parse_args(self):
      raise NotImplementedError

  return TinyConfig


def huggingface(batches: dict) -> tuple[dict, dict]:
  import transformers  # pylint: disable=import-outside-toplevel
  from model.clip_transformer import CLIPTransformer  # pylint: disable=import-outside-toplevel

  config = transformers.CLIPConfig(
      text_config={"vocab_size": VOCAB, "hidden_size": WIDTH, "intermediate_size": 4 * WIDTH,
                   "num_hidden_layers": HF_LAYERS, "num_attention_heads": HEADS, "max_position_embeddings": CONTEXT,
                   "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5, "bos_token_id": 0, "eos_token_id": 2,
                   "pad_token_id": 1},
      vision_config={"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 1,
                     "image_size": 8, "patch_size": 4},
      projection_dim=PROJECTION)
  transformers.CLIPModel.from_pretrained = classmethod(lambda cls, name, **kw: cls(config))
  torch.manual_seed(SEED)
  model = CLIPTransformer(tiny_config(1)(True)).eval()
  zero(model)
  randomise_text_tower(model.clip, torch.Generator().manual_seed(SEED))
  sd = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
  out = {}
  gen = torch.Generator().manual_seed(SEED + 1)
  unit = {k: torch.randn(sd[k].shape, generator=gen).bfloat16().float() for k in UNIT_KEYS}
  for scale in ("real", "unit"):
    if scale == "unit":
      model.load_state_dict({**model.state_dict(), **{k: v.clone() for k, v in unit.items()}})
    for name, (ids, mask) in batches.items():
      with torch.no_grad():
        feats = model.clip.get_text_features(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
      out[f"out/hf/{scale}/{name}"] = feats.numpy()
  arrays = {**{f"sd/{k}": v for k, v in sd.items()}, **{f"unit/sd/{k}": v.numpy() for k, v in unit.items()}, **out}
  meta = {"class": "transformers.CLIPModel (CLIPTransformer.clip, huggingface=True), get_text_features",
          "transformers": transformers.__version__, "attn_implementation": model.clip.config._attn_implementation,
          "text_config": {"vocab_size": VOCAB, "hidden_size": WIDTH, "intermediate_size": 4 * WIDTH,
                          "num_hidden_layers": HF_LAYERS, "num_attention_heads": HEADS,
                          "max_position_embeddings": CONTEXT, "eos_token_id": 2, "projection_dim": PROJECTION}}
  return arrays, meta


def openai(batches: dict) -> tuple[dict, dict]:
  import model.clip_model as clip_model  # pylint: disable=import-outside-toplevel
  from model.clip_transformer import CLIPTransformer  # pylint: disable=import-outside-toplevel

  # CLIP(embed_dim, image_resolution, vision_layers, vision_width, vision_patch_size, context_length, vocab_size,
  #      transformer_width, transformer_heads, transformer_layers)
  clip_model.load_clip = lambda name: clip_model.CLIP(PROJECTION, 8, 1, 64, 4, CONTEXT, VOCAB, WIDTH, HEADS,
                                                      OPENAI_LAYERS)
  torch.manual_seed(SEED)
  model = CLIPTransformer(tiny_config(1)(False)).eval()
  zero(model)
  randomise_text_tower(model.clip, torch.Generator().manual_seed(SEED + 3))
  ids, _ = batches["full"]
  zero_padded = np.where(np.cumsum(ids == EOT, axis=1) - (ids == EOT) > 0, 0, ids)  # after the first EOT: 0
  with torch.no_grad():
    feats = model.clip.encode_text(torch.from_numpy(zero_padded))
  sd = {f"openai/sd/{k}": v.detach().numpy().copy() for k, v in model.state_dict().items()}
  arrays = {**sd, "in/openai/ids": zero_padded, "out/openai/real/full": feats.numpy()}
  meta = {"class": "model/clip_model.py CLIP (CLIPTransformer.clip, huggingface=False), encode_text",
          "config": {"embed_dim": PROJECTION, "context_length": CONTEXT, "vocab_size": VOCAB,
                     "transformer_width": WIDTH, "transformer_heads": HEADS, "transformer_layers": OPENAI_LAYERS}}
  return arrays, meta


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--repo", required=True, help="a checkout of JasonCodeMaker/GRDR (its reranker/xpool)")
  parser.add_argument("--out", default="tests/golden")
  args = parser.parse_args()
  repo = Path(args.repo).resolve()
  sys.path.insert(0, str(repo / "reranker" / "xpool"))
  batches = token_ids(SEED + 4)
  hf_arrays, hf_meta = huggingface(batches)
  openai_arrays, openai_meta = openai(batches)
  arrays = {**{f"in/{name}/ids": ids for name, (ids, _) in batches.items()},
            **{f"in/{name}/attention_mask": mask for name, (_, mask) in batches.items()}, **hf_arrays, **openai_arrays}
  meta = {
      "official_repo": "JasonCodeMaker/GRDR", "commit": commit(repo),
      "files": ["reranker/xpool/model/clip_transformer.py (CLIPTransformer: huggingface -> transformers.CLIPModel, "
                "else model/clip_model.py CLIP)", "reranker/xpool/trainer/evaluator.py (get_text_features on the "
                "tokenizer's input_ids and attention_mask)", "reranker/xpool/model/clip_model.py (CLIP.encode_text)"],
      "huggingface": hf_meta, "openai": openai_meta,
      "tokens": {"vocab": VOCAB, "startoftext": BOS, "endoftext": EOT, "context": CONTEXT},
      "outputs": "out/hf/{real,unit}/{full,short}: get_text_features [B, projection] of in/{full,short}/ids with "
                 "their attention_mask (unit: sd/ with unit/sd/'s two embedding tables); out/openai/real/full: "
                 "encode_text of in/openai/ids (in/full/ids zeroed after the first end-of-text)",
      "weights": "text towers random (bench/goldens/clip_text.py randomise, bfloat16-rounded); vision towers and "
                 "pool_frames zeroed; clip.logit_scale = ln 50",
      "generator": "bench/goldens/clip_text.py", "torch": torch.__version__, "seed": SEED,
  }
  Path(args.out).mkdir(parents=True, exist_ok=True)
  path = Path(args.out) / "clip_text.npz"
  np.savez_compressed(path, meta=np.array(json.dumps(meta)), **arrays)
  print("wrote", path, f"({path.stat().st_size} bytes, {len(arrays)} arrays)")


if __name__ == "__main__":
  main()
