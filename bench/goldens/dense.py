"""Writes tests/golden/xpool.npz and tests/golden/clip4clip.npz: the official X-Pool and CLIP4Clip poolings, their
similarities and their losses on fixed random weights and inputs (tests/test_reference_xpool.py,
tests/test_reference_clip4clip.py hold vidjax's `DenseRetriever` against them through `vidjax.convert`).

Not run by CI (it needs torch, installed by hand, and the official repositories checked out):

    python bench/goldens/dense.py xpool --repo /work/refs/layer6ai-labs+xpool --out tests/golden
    python bench/goldens/dense.py clip4clip --repo /work/refs/ArrowLuo+CLIP4Clip --out tests/golden

Everything on the compared path runs in the official code, imported from `--repo`:
  * X-Pool: `model.clip_transformer.CLIPTransformer` is built (its CLIP tower a tiny `model.clip_model.CLIP`, so
    that nothing downloads), its `pool_frames` (`modules.transformer.Transformer`) pools, `modules.metrics.
    sim_matrix_training` gives the similarities and `modules.loss.CLIPLoss` the loss with `clip.logit_scale`, as
    `trainer/trainer.py` calls them. The same weights run with 1 head (the release's `num_mha_heads`) and 4 heads.
  * CLIP4Clip: `modules.modeling.CLIP4Clip` is built with `loose_type` (meanP / seqTransf) on a tiny CLIP state dict;
    `_loose_similarity` gives the logits (logit scale included); the pooled video embeddings are read through the same
    method with the D standard basis vectors as the texts (each logit is then logit_scale x one coordinate of the
    normalised pooled embedding); a forward hook on `transformerClip` records its output (before the residual); the
    loss is `loss_fct` (CrossEn) on the logits and their transpose, averaged, as `CLIP4Clip.forward` does.
    `transformerClip` (`module_cross.Transformer`) is rebuilt with 4 heads (the official rule width // 64 gives 1 at
    the width 64 used here) so that the head split shows.

Sizes (small on purpose, the goldens are data in the repository): width D = 64, 5 texts, 4 videos of 12 frames, all
frames valid (vidjax samples a fixed number of frames per video and has no frame mask). Two input scales: "real"
(the first D coordinates of unit-norm 512-d vectors, a few hundredths each, as CLIP features are; a video's frames
share a direction) and "unit" (N(0, 1)). Weights are random (not the identity / N(0, 0.02) inits; values on the
bfloat16 grid, stored and computed as float32), LayerNorm scales and biases included, so every constant (LayerNorm
epsilons, scalings) shows. The CLIP towers (frozen in vidjax, whose inputs are their features) are zeroed: they are
off the compared path and zeros keep the file small; `clip.logit_scale` is set to ln 50 so that the logit scale the
loss reads is the checkpoint's.
"""
import argparse
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import torch

D, NUM_TEXTS, NUM_VIDEOS, NUM_FRAMES = 64, 5, 4, 12
SEED = 0
LOGIT_SCALE = float(np.log(50.0))


def inputs(seed: int) -> dict:
  """{scale: (texts [Q, D], frames [V, T, D])} float32 (the module docstring)."""
  rng = np.random.default_rng(seed)

  def unit512(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True))[..., :D]

  base = rng.normal(size=(NUM_VIDEOS, 1, 512))
  real = (unit512(rng.normal(size=(NUM_TEXTS, 512))),
          unit512(base + 0.5 * rng.normal(size=(NUM_VIDEOS, NUM_FRAMES, 512))))
  unit = (rng.normal(size=(NUM_TEXTS, D)), rng.normal(size=(NUM_VIDEOS, NUM_FRAMES, D)))
  return {k: tuple(np.asarray(a, np.float32) for a in v) for k, v in (("real", real), ("unit", unit))}


def randomise(module: torch.nn.Module, gen: torch.Generator, embedding_std: float = 0.02) -> None:
  """Every parameter of `module` random: matrices N(0, 1 / fan_in), biases N(0, 0.1), LayerNorm scales 1 + N(0, 0.2),
  embedding tables N(0, embedding_std); each value rounded to the nearest bfloat16 (still float32, computed in float32:
  the zero low mantissa bits halve the compressed file)."""
  with torch.no_grad():
    for name, p in module.named_parameters():
      if isinstance(module.get_submodule(name.rsplit(".", 1)[0]) if "." in name else module, torch.nn.Embedding):
        value = embedding_std * torch.randn(p.shape, generator=gen)
      elif p.ndim >= 2:
        value = torch.randn(p.shape, generator=gen) / np.sqrt(p.shape[-1])
      elif name.endswith("bias"):
        value = 0.1 * torch.randn(p.shape, generator=gen)
      else:  # a LayerNorm's scale
        value = 1.0 + 0.2 * torch.randn(p.shape, generator=gen)
      p.copy_(value.bfloat16().float())


def zero_tower(clip: torch.nn.Module) -> None:
  with torch.no_grad():
    for name, p in clip.named_parameters():
      p.copy_(torch.full_like(p, LOGIT_SCALE) if name == "logit_scale" else torch.zeros_like(p))


def commit(repo: Path) -> str:
  return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                        check=True).stdout.strip()


def state_dict(model: torch.nn.Module) -> dict:
  return {f"sd/{k}": v.detach().float().numpy().copy() for k, v in model.state_dict().items()}


def xpool(repo: Path) -> tuple[dict, dict]:
  from config.base_config import Config  # pylint: disable=import-outside-toplevel
  import model.clip_model as clip_model  # pylint: disable=import-outside-toplevel
  from model.clip_transformer import CLIPTransformer  # pylint: disable=import-outside-toplevel
  from modules.loss import CLIPLoss  # pylint: disable=import-outside-toplevel
  from modules.metrics import sim_matrix_training  # pylint: disable=import-outside-toplevel
  from modules.transformer import Transformer  # pylint: disable=import-outside-toplevel

  class TinyConfig(Config):
    """The release's defaults (config/all_config.py) for what the pooling reads, at width D."""

    def __init__(self, heads):  # pylint: disable=super-init-not-called
      self.huggingface, self.clip_arch, self.num_frames, self.input_res = False, "tiny", NUM_FRAMES, 8
      self.embed_dim, self.num_mha_heads, self.transformer_dropout = D, heads, 0.3

    def parse_args(self):
      raise NotImplementedError

  # The tower is frozen in vidjax (its features are the inputs): a tiny official CLIP stands in, so nothing downloads.
  clip_model.load_clip = lambda name: clip_model.CLIP(D, 8, 1, 64, 4, 77, 16, D, 1, 1)
  torch.manual_seed(SEED)
  model = CLIPTransformer(TinyConfig(1)).eval()
  randomise(model.pool_frames, torch.Generator().manual_seed(SEED))
  zero_tower(model.clip)
  out = {}
  data = inputs(SEED + 1)
  for heads in (1, 4):
    pool = Transformer(TinyConfig(heads)).eval()  # the same weights (their shapes do not depend on the heads)
    pool.load_state_dict(model.pool_frames.state_dict())
    for scale, (text, frames) in data.items():
      with torch.no_grad():
        t, f = torch.from_numpy(text), torch.from_numpy(frames)
        pooled = pool(t, f)                                            # [V, Q, D]
        sims = sim_matrix_training(t, pooled, "transformer")           # [Q, V]
        loss = CLIPLoss()(sims[:NUM_VIDEOS], model.clip.logit_scale)  # the batch of V pairs
      out.update({f"out/{scale}/heads{heads}/pooled": pooled.numpy(), f"out/{scale}/heads{heads}/sims": sims.numpy(),
                  f"out/{scale}/heads{heads}/loss": np.float32(loss.item())})
  arrays = {**state_dict(model), **{f"in/{s}/text": t for s, (t, _) in data.items()},
            **{f"in/{s}/frames": f for s, (_, f) in data.items()}, **out}
  meta = {
      "official_repo": "layer6ai-labs/xpool", "commit": commit(repo),
      "files": ["model/clip_transformer.py (CLIPTransformer)", "modules/transformer.py (Transformer, "
                "MultiHeadedAttention)", "modules/metrics.py (sim_matrix_training)", "modules/loss.py (CLIPLoss)",
                "model/clip_model.py (CLIP, a tiny zeroed tower)"],
      "config": {"embed_dim": D, "num_mha_heads": [1, 4], "transformer_dropout": 0.3, "eval": True},
      "shapes": {"texts": NUM_TEXTS, "videos": NUM_VIDEOS, "frames": NUM_FRAMES},
      "outputs": "pooled: pool_frames(text, frames), [videos, texts, D] (the official layout); sims: "
                 "sim_matrix_training(text, pooled, 'transformer'), [texts, videos]; loss: CLIPLoss(sims[:videos], "
                 "clip.logit_scale) (exp inside)",
      "inputs": "real: the first 64 coordinates of unit-norm 512-d vectors; unit: N(0, 1); all frames valid",
      "weights": "pool_frames random (bench/goldens/dense.py randomise); clip.* zeroed except logit_scale = ln 50",
      "generator": "bench/goldens/dense.py xpool", "torch": torch.__version__, "seed": SEED,
  }
  return arrays, meta


def clip4clip(repo: Path) -> tuple[dict, dict]:
  from modules.modeling import CLIP4Clip  # pylint: disable=import-outside-toplevel
  from modules.module_clip import CLIP  # pylint: disable=import-outside-toplevel
  from modules.module_cross import CrossConfig  # pylint: disable=import-outside-toplevel
  from modules.module_cross import Transformer as TransformerClip  # pylint: disable=import-outside-toplevel

  torch.manual_seed(SEED)
  clip_sd = CLIP(D, 8, 1, 64, 4, 77, 16, D, 1, 1).state_dict()  # a tiny ViT CLIP; only its shapes are read
  cross_config = CrossConfig(str(repo / "modules" / "cross-base" / "cross_config.json"))
  cross_config.hidden_size = D  # the frame-position table's width: cross-base's 512 is ViT-B's tower width
  out, sds, data = {}, {}, inputs(SEED + 2)
  seq = None
  for sim_header in ("meanP", "seqTransf"):
    task = types.SimpleNamespace(max_words=32, max_frames=NUM_FRAMES, loose_type=True, sim_header=sim_header,
                                 cross_num_hidden_layers=2, linear_patch="2d", local_rank=0)
    model = CLIP4Clip(cross_config, dict(clip_sd), task)
    if sim_header == "seqTransf":
      model.transformerClip = TransformerClip(width=D, layers=2, heads=4)
      randomise(model.transformerClip, torch.Generator().manual_seed(SEED))
      randomise(model.frame_position_embeddings, torch.Generator().manual_seed(SEED + 1))
      seq = model.transformerClip
    zero_tower(model.clip)
    model.eval()
    captured = []
    if seq is not None:
      seq.register_forward_hook(lambda mod, args, output: captured.append(output.permute(1, 0, 2)))
    key = sim_header.lower()
    for scale, (text, frames) in data.items():
      mask = torch.ones(NUM_VIDEOS, NUM_FRAMES)
      with torch.no_grad():
        t, f = torch.from_numpy(text)[:, None], torch.from_numpy(frames)
        logits = model._loose_similarity(t, f, None, mask, sim_header)  # pylint: disable=protected-access
        basis = model._loose_similarity(  # pylint: disable=protected-access
            torch.eye(D)[:, None], f, None, mask, sim_header)
        batch = logits[:NUM_VIDEOS]
        loss = (model.loss_fct(batch) + model.loss_fct(batch.T)) / 2
        pooled = (basis / model.clip.logit_scale.exp()).T
      out.update({f"out/{scale}/{key}/logits": logits.numpy(), f"out/{scale}/{key}/pooled": pooled.numpy(),
                  f"out/{scale}/{key}/loss": np.float32(loss.item())})
      if seq is not None:
        out[f"out/{scale}/{key}/transformer_out"] = captured[0].numpy()  # the first call: the real texts' videos
        captured.clear()
    sds[key] = model
  arrays = {**state_dict(sds["seqtransf"]), **{f"in/{s}/text": t for s, (t, _) in data.items()},
            **{f"in/{s}/frames": f for s, (_, f) in data.items()}, **out}
  meta = {
      "official_repo": "ArrowLuo/CLIP4Clip", "commit": commit(repo),
      "files": ["modules/modeling.py (CLIP4Clip._loose_similarity, _mean_pooling_for_similarity_visual, loss_fct = "
                "until_module.CrossEn as CLIP4Clip.forward applies it)", "modules/module_cross.py (Transformer as "
                "transformerClip: ResidualAttentionBlock, until_module.LayerNorm eps 1e-12, QuickGELU)",
                "modules/module_clip.py (CLIP, a tiny zeroed tower)"],
      "config": {"sim_header": ["meanP", "seqTransf"], "loose_type": True, "cross_num_hidden_layers": 2,
                 "transformerClip_heads": 4, "width": D, "frame_position_embeddings": [77, D], "eval": True},
      "deviation_from_release": "width 64 (cross_config.hidden_size and the tiny tower's; the release's 512); "
                                "transformerClip rebuilt with 4 heads (the release's rule width // 64 gives 1 at "
                                "width 64); 2 layers (the release's default 4)",
      "shapes": {"texts": NUM_TEXTS, "videos": NUM_VIDEOS, "frames": NUM_FRAMES},
      "outputs": "logits: _loose_similarity(text[:, None], frames, None, ones mask, sim_header), logit scale "
                 "included, [texts, videos]; pooled: the normalised pooled video embeddings [videos, D], read as "
                 "_loose_similarity(eye(D)[:, None], ...).T / exp(clip.logit_scale); transformer_out: "
                 "transformerClip's output (forward hook), [videos, frames, D], before the residual; loss: "
                 "(CrossEn(logits[:videos]) + CrossEn(logits[:videos].T)) / 2",
      "state_dict": "the seqTransf model's (its meanP twin has the same keys less frame_position_embeddings.* and "
                    "transformerClip.*)",
      "inputs": "real: the first 64 coordinates of unit-norm 512-d vectors; unit: N(0, 1); video_mask all ones",
      "weights": "frame_position_embeddings N(0, 0.02), transformerClip random (bench/goldens/dense.py randomise); "
                 "clip.* zeroed except logit_scale = ln 50",
      "generator": "bench/goldens/dense.py clip4clip", "torch": torch.__version__, "seed": SEED,
  }
  return arrays, meta


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("which", choices=("xpool", "clip4clip"))
  parser.add_argument("--repo", required=True, help="a checkout of the official repository")
  parser.add_argument("--out", default="tests/golden")
  args = parser.parse_args()
  repo = Path(args.repo).resolve()
  sys.path.insert(0, str(repo))
  arrays, meta = (xpool if args.which == "xpool" else clip4clip)(repo)
  Path(args.out).mkdir(parents=True, exist_ok=True)
  path = Path(args.out) / f"{args.which}.npz"
  np.savez_compressed(path, meta=np.array(json.dumps(meta)), **arrays)
  print("wrote", path, f"({path.stat().st_size} bytes, {len(arrays)} arrays)")


if __name__ == "__main__":
  main()
