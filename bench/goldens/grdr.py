"""Writes the GRDR and TIGER goldens (tests/test_reference_grdr.py, tests/test_reference_tiger.py hold vidjax's
`vidjax.models.grdr.GRDR`, `residual_quantize`, `vidjax.retrieval.trie.beam_search` and
`vidjax.models.gr_baselines.RQVAE` against them through `vidjax.convert.grdr`).

Not run by CI (it needs torch and transformers 4.47.0, the version the official README pins, installed by hand, and
the official repository checked out):

    python bench/goldens/grdr.py --repo /work/refs/JasonCodeMaker+GRDR --extra /work/refs/extra --out tests/golden

`--extra` holds TIGER's RQ-VAE files of the same repository at older commits (baselines/mm_semantictvr/index/models:
rqvae.py and rq.py at 5a11a4a7, vq.py at 6b1f2e97; its layers.py is stored at no commit, so MLPLayers comes from
models/video_rqvae/layers.py of the checked-out commit, built with activation="relu" (the default of the LC-Rec
layers.py this quantizer code descends from; the checked-out copy's default is "gelu")).

Everything on the compared path runs in the official code, imported from `--repo`:
  * grdr_rq.npz: `models.video_rqvae.rq.ResidualVectorQuantizer` as `VideoRQVAE_V2` builds it (beta 0.65, no
    Sinkhorn): codes, the quantized vectors, each layer's input residual and cosine logits (1 - d / 2), the RQ loss,
    and by autograd the loss's gradients (input and codebooks) and the straight-through gradient of the quantized
    vectors; D = 512, K = 8, M = 3, inputs [3, 2, D] (rows x views) at two scales: "real" (unit-norm vectors, a few
    hundredths a coordinate, as the 512-d InternVideo2 features are) and "unit" (N(0, 1)).
  * grdr_losses.npz: a tiny official GRDR (`models.grdr.GRDR` over `models.t5.T5ForConditionalGeneration` and
    `utils.model_utils.create_videorqvae`, as `trainer/trainer.py train` builds it; T5 d_model 32, 2 heads, d_ff 64,
    2 + 2 layers, vocabulary 50; features 64-d, N_v = 2, K = 8, code_length 3), its state dict under `sd/`, and
    `trainer.trainer.OurTrainer.train_step` on one batch (eval mode: no dropout) with the intermediate tensors it
    reads, and `build_loss_weights` of run.py's defaults for each phase (1 pre-train, 2 main, 3 fit) with the
    weighted totals as the training loop sums them. Also `grdr_tiny.code`: the `.code` sidecar as
    `trainer.evaluator.save_code` writes it ({sample key: [c_1 .. c_m]}, JSON) for the batch's samples.
  * grdr_beam.npz: the same tiny GRDR's trie-constrained generation as `trainer.evaluator.test` runs it
    (`model.generate(..., max_length=code_length + 1, num_beams=W, num_return_sequences=W,
    prefix_allowed_tokens_fn=utils.model_utils.Tree over [0, *ID])`), and the table of the official model's
    log-probabilities log_softmax(GRDR(...).logits[:, -1]) for every prefix of every ID, on which the routes are
    compared alone. Two tries: "plain" (no code equal to T5's eos id 1) and "eos" (IDs with code 1: HF beam search
    ends a beam whose last token is the eos id, so such IDs come back cut short: an official quirk, recorded).
  * grdr_t5.npz: the release's shape (T5-Small: d_model 512, 8 heads of 64, d_ff 2048, 6 + 6 layers, relative
    attention 32 buckets up to 128; features 512-d, N_v = 4, K = 128, code_length 3; the vocabulary cut to 512
    tokens). Its 60M weights would not fit the repository, so they are a counter hash of each parameter's name
    (`hashed`, below; the test recomputes them bit-exactly and checks each tensor's float64 sum stored here): uniform
    with T5's init scales (q (d_model d_kv)^-1/2, k / v / wi d_model^-1/2, o (H d_kv)^-1/2, wo d_ff^-1/2, embeddings
    and the relative-position tables 1), RMSNorm scales in [0.5, 1.5], logit_scale ln 150 (the [20, 100] clamp
    active). Outputs: the encoder (selected positions of 2 queries of 160 and 100 tokens, offsets past 128), the
    GRDR query path (decoder states and code logits), a 140-step decoder over given inputs_embeds (unidirectional
    buckets past 128), the video path (codes of every view, reconstruction, logits, RQ loss) and the beam search of
    10 beams over a trie of the videos' IDs and random ones.
  * tiger_rqvae.npz: `baselines/mm_semantictvr/index/models/rqvae.RQVAE` as train_rqvae.py builds it (Euclidean
    quantizer, beta 0.55, no Sinkhorn, no EMA), small: in_dim 256, layers [48, 32], e_dim 16, 4 layers of 16 codes;
    forward (reconstruction, loss, codes, encoder output), compute_loss (MSE + quantization loss) and by autograd
    the total loss's gradients of the encoder's first weight and of the codebooks.

Weights of the stored goldens are random (matrices N(0, 1 / fan_in), biases N(0, 0.1) (TIGER's 0.01), norm scales
1 + N(0, 0.2),
embeddings N(0, 1), codebook rows of decreasing length per layer), rounded to bfloat16 values (stored and computed as
float32: the zero low mantissa bits halve the compressed files).
"""
import argparse
import contextlib
import functools
import io
import importlib.machinery
import json
import subprocess
import sys
import types
import zlib
from pathlib import Path

import numpy as np
import torch

SEED = 0


def hashed(name: str, shape, std: float, mean: float = 0.0) -> np.ndarray:
  """float32 array of `shape`, uniform with the given mean and standard deviation, from a splitmix64 counter hash of
  (crc32(name), element index): bit-exact on every machine and NumPy version (tests/test_reference_grdr.py has the
  same function)."""
  n = int(np.prod(shape))
  z = np.arange(n, dtype=np.uint64) + np.uint64(zlib.crc32(name.encode()) * 0x9E3779B97F4A7C15 % (1 << 64))
  z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
  z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
  z = z ^ (z >> np.uint64(31))
  u = (z >> np.uint64(40)).astype(np.float64) / float(1 << 24)  # [0, 1), 24 bits
  return (mean + std * np.sqrt(3.0) * (2.0 * u - 1.0)).astype(np.float32).reshape(shape)


def commit(repo: Path) -> str:
  return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                        check=True).stdout.strip()


def import_official(repo: Path):
  """Puts the checkout first on sys.path; `wandb` (imported by trainer/trainer.py, used only by its training loop)
  is stubbed."""
  sys.path.insert(0, str(repo))
  stub = types.ModuleType("wandb")
  stub.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
  sys.modules.setdefault("wandb", stub)


def bf16(x: torch.Tensor) -> torch.Tensor:
  return x.bfloat16().float()


def unit_rows(rng, shape) -> np.ndarray:
  x = rng.normal(size=shape)
  return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def scales(rng, shape) -> dict:
  """{"real": unit-norm rows, "unit": N(0, 1)}, float32, bfloat16 values."""
  out = {"real": unit_rows(rng, shape), "unit": rng.normal(size=shape).astype(np.float32)}
  return {k: bf16(torch.from_numpy(v)).numpy() for k, v in out.items()}


def state_dict(module: torch.nn.Module) -> dict:
  return {f"sd/{k}": v.detach().float().numpy().copy() for k, v in module.state_dict().items()}


def randomise(model: torch.nn.Module, gen: torch.Generator, book_lengths=(1.0, 0.6, 0.35), bias_std=0.1) -> None:
  """Every parameter random (module docstring); codebook l's rows of length ~book_lengths[l]."""
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "rq.vq_layers." in name:
        layer = int(name.split("rq.vq_layers.")[1].split(".")[0])
        value = torch.randn(p.shape, generator=gen) * book_lengths[layer] / np.sqrt(p.shape[-1])
      elif name.endswith("logit_scale"):
        value = torch.tensor(float(np.log(30.0)))  # inside the official clamp [20, 100]
      elif any(s in name for s in ("shared", "embed_tokens", "start_token", "relative_attention_bias")):
        value = torch.randn(p.shape, generator=gen)
      elif "layer_norm" in name:
        value = 1.0 + 0.2 * torch.randn(p.shape, generator=gen)
      elif name.endswith("bias"):
        value = bias_std * torch.randn(p.shape, generator=gen)
      elif ".q.weight" in name:  # T5 folds 1/sqrt(d_kv) into q (the tiny T5's d_kv: 16)
        value = torch.randn(p.shape, generator=gen) / np.sqrt(p.shape[-1] * 16)
      else:
        value = torch.randn(p.shape, generator=gen) / np.sqrt(p.shape[-1])
      p.copy_(bf16(value))


# ----------------------------------------------------------------------------------------------------------------


def golden_rq(repo: Path) -> dict:
  from models.video_rqvae.rq import ResidualVectorQuantizer  # pylint: disable=import-outside-toplevel
  d, k, m, beta = 512, 8, 3, 0.65
  rq = ResidualVectorQuantizer([k] * m, d, sk_epsilons=0.0, kmeans_init=False, beta=beta)  # as VideoRQVAE_V2
  rq.eval()
  randomise(rq, torch.Generator().manual_seed(SEED))
  rng = np.random.default_rng(SEED + 1)
  data = scales(rng, (3, 2, d))
  cotangent = rng.normal(size=(3, 2, d)).astype(np.float32)
  out = {"cotangent": cotangent}
  for scale, x in data.items():
    xt = torch.from_numpy(x).requires_grad_(True)
    x_q, loss, codes, distances, residuals = rq(xt, use_sk=False, return_probs=True)
    inputs = [xt] + residuals[:-1]  # the residual each layer quantized
    grads = torch.autograd.grad(loss, [xt] + [layer.embedding.weight for layer in rq.vq_layers], retain_graph=True)
    (st,) = torch.autograd.grad((x_q * torch.from_numpy(cotangent)).sum(), xt)
    out.update({f"in/{scale}/x": x, f"out/{scale}/codes": codes.numpy(), f"out/{scale}/x_q": x_q.detach().numpy(),
                f"out/{scale}/residuals": torch.stack(inputs, -2).detach().numpy(),
                f"out/{scale}/cos": torch.stack([1 - dd / 2 for dd in distances], -2).detach().numpy(),
                f"out/{scale}/loss": np.float32(loss.item()), f"out/{scale}/grad_x": grads[0].numpy(),
                f"out/{scale}/grad_books": torch.stack(grads[1:]).numpy(), f"out/{scale}/st_grad_x": st.numpy()})
  meta = {"files": ["models/video_rqvae/rq.py (ResidualVectorQuantizer.forward)",
                    "models/video_rqvae/vq.py (VectorQuantizer.forward)"],
          "config": {"e_dim": d, "n_e_list": [k] * m, "beta": beta, "sk_epsilons": 0.0, "use_sk": False,
                     "note": "beta 0.65 is VideoRQVAE_V2's default, which utils/model_utils.create_videorqvae keeps"},
          "outputs": "codes [3, 2, M]; x_q [3, 2, D] (value: the sum of the selected entries); residuals [3, 2, M, D] "
                     "(each layer's input: x, then x minus the entries so far); cos [3, 2, M, K] = 1 - d / 2 of each "
                     "layer's distances; loss: the mean over layers of mse(e, sg r^) + beta mse(sg e, r^) with r^ the "
                     "normalised residual; grad_x, grad_books [M, K, D]: d loss; st_grad_x: d sum(x_q * cotangent) "
                     "/ dx"}
  return {**state_dict(rq), **out}, meta


def tiny_grdr(repo: Path):
  """The tiny official GRDR (module docstring), built as trainer/trainer.py `train` builds it."""
  from models.grdr import GRDR  # pylint: disable=import-outside-toplevel
  from models.t5 import T5ForConditionalGeneration  # pylint: disable=import-outside-toplevel
  from transformers import T5Config  # pylint: disable=import-outside-toplevel
  from utils.model_utils import create_videorqvae  # pylint: disable=import-outside-toplevel
  torch.manual_seed(SEED)
  cfg = T5Config(vocab_size=50, d_model=32, d_kv=16, num_heads=2, d_ff=64, num_layers=2, num_decoder_layers=2,
                 relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.1,
                 feed_forward_proj="relu", decoder_start_token_id=0)  # t5-small's config.json, smaller
  rqvae = create_videorqvae(code_num=8, code_length=3, num_latent_tokens=2, e_dim=32, in_dim=64, device="cpu")
  model = GRDR(model=T5ForConditionalGeneration(cfg), code_length=3, use_constraint=False, sk_epsilon=1,
               zero_inp=False, code_number=8, videorqvae=rqvae)
  randomise(model, torch.Generator().manual_seed(SEED + 2))
  return model.eval(), {"t5": cfg.to_diff_dict(), "code_num": 8, "code_length": 3, "num_latent_tokens": 2,
                        "in_dim": 64, "e_dim": 32}


def query_tokens(rng, lengths, vocab: int, total: int) -> tuple[np.ndarray, np.ndarray]:
  """T5 tokenizer-like ids [B, total]: random pieces, then eos (1), then pad (0); the attention mask."""
  ids = np.zeros((len(lengths), total), np.int64)
  for i, n in enumerate(lengths):
    ids[i, :n - 1] = rng.integers(2, vocab, size=n - 1)
    ids[i, n - 1] = 1
  return ids, (ids > 0).astype(np.int64)


def golden_losses(repo: Path, out_dir: Path) -> dict:
  from trainer.trainer import OurTrainer, build_loss_weights  # pylint: disable=import-outside-toplevel
  model, shape = tiny_grdr(repo)
  rng = np.random.default_rng(SEED + 3)
  b = 6
  feats = scales(rng, (b, 64))
  features = np.concatenate([feats["real"][:3], feats["unit"][3:]])  # both scales in one batch
  ids, mask = query_tokens(rng, [7, 5, 9, 4, 9, 6], 50, 9)
  token_idx = rng.integers(0, 2, size=b)
  with torch.no_grad():
    codes = model.video_rqvae.get_indices(torch.from_numpy(features)).numpy()  # [B, N_v, 3]
  prior = codes[np.arange(b), token_idx, :2]  # the earlier layers' codes of each row's view (the `.code` targets)
  prior[0, 1] = (prior[0, 1] + 3) % 8  # one drifted row: the targets are the file's, not the current codes
  batch = {"caption_tokens": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
           "video_features": torch.from_numpy(features), "token_idx": torch.from_numpy(token_idx),
           "ids": torch.from_numpy(np.concatenate([np.zeros((b, 1), np.int64), prior], 1)), "aux_ids": None}
  seen = {}
  model.model.register_forward_hook(lambda mod, args, out: seen.__setitem__("decoder", out.decoder_hidden_states[-1]))
  losses = OurTrainer.train_step(model, batch, current_layer=2, gathered=False)
  decoder_states = seen["decoder"].detach().numpy()
  with torch.no_grad():
    video = model(video_features=batch["video_features"], token_idx=batch["token_idx"],
                  return_residual_layer=model.code_length)
    query = model(input_ids=batch["caption_tokens"], attention_mask=batch["attention_mask"],
                  decoder_input_ids=batch["ids"])
  weights = {phase: build_loss_weights(run_defaults(), phase) for phase in (1, 2, 3)}
  values = {k: float(v) for k, v in losses.items()}
  totals = {phase: float(sum(v * w[k] for k, v in losses.items())) for phase, w in weights.items()}
  # The `.code` sidecar: save_code's format, {sample key: previous codes[1:] + [new code]} as JSON.
  keys = [f"video{7000 + i}_{int(t)}" for i, t in enumerate(token_idx)]
  sidecar = {key: [int(c) for c in prior[i]] + [int(video.discrete_codes[i])] for i, key in enumerate(keys)}
  with open(out_dir / "grdr_tiny.code", "w") as f:
    json.dump(sidecar, f)
  arrays = {**state_dict(model), "in/caption_tokens": ids, "in/attention_mask": mask, "in/video_features": features,
            "in/token_idx": token_idx, "in/ids": batch["ids"].numpy(),
            "out/decoder_states": decoder_states, "out/query_logits": query.logits.numpy(),
            "out/query_total": query.total_embeds.numpy(), "out/video_codes": codes,
            "out/video_logits": video.logits.numpy(), "out/video_residual": video.continuous_embeds.numpy(),
            "out/video_code": video.discrete_codes.numpy(), "out/reconstruction": video.reconstructed_features.numpy(),
            **{f"out/loss/{k}": np.float32(v) for k, v in values.items()},
            **{f"out/total/phase{p}": np.float32(t) for p, t in totals.items()}}
  meta = {"files": ["models/grdr.py (GRDR._forward_text, GRDR._forward_video)", "trainer/trainer.py (train, "
                    "OurTrainer.train_step, compute_contrastive_loss, build_loss_weights)", "run.py (parse_args "
                    "defaults: the w1_* / w2_* / w3_* weights)", "utils/model_utils.py (create_videorqvae)",
                    "models/video_rqvae/*.py", "models/t5/modeling_t5.py", "trainer/evaluator.py (save_code: the "
                    ".code sidecar grdr_tiny.code)"],
          "model": shape, "weights": {str(p): w for p, w in weights.items()}, "losses": values,
          "totals": {str(p): t for p, t in totals.items()}, "sidecar": "grdr_tiny.code",
          "batch": "6 rows: features rows 0-2 real scale, 3-5 unit scale; ids = [0, prior codes of layers 1-2] (row "
                   "0's second code changed: targets come from the file, not the current codes); token_idx: each row's "
                   "view; current_layer 2 (loop 2: code_length 3); eval mode (no dropout)",
          "outputs": "decoder_states [B, 3, d]: T5's last decoder hidden states (after the final norm) in train_step's "
                     "query pass; query_logits [B, 3, K] = scale cos(h_l, C^(l)); query_total = sum_l h_l; video_*: "
                     "the video pass with return_residual_layer = code_length (train_step's, not DDP): "
                     "video_residual = the selected view's residual after all 3 layers, video_logits [B, 3, K] = "
                     "scale (1 - d_l / 2), video_code its last code; video_codes [B, N_v, 3] get_indices"}
  return arrays, meta


def run_defaults() -> dict:
  """run.py's parse_args defaults (the weights `build_loss_weights` reads)."""
  import run  # pylint: disable=import-outside-toplevel
  argv, sys.argv = sys.argv, ["run.py"]
  try:
    with contextlib.redirect_stdout(io.StringIO()):
      return vars(run.parse_args())
  finally:
    sys.argv = argv


def prefix_index(prefix) -> int:
  """Row of a prefix (length 0 .. 2, codes in [0, 8)) in the log-probability table: 0, 1 + c1, 9 + 8 c1 + c2."""
  return [0, 1, 9][len(prefix)] + sum(c * 8 ** (len(prefix) - 1 - i) for i, c in enumerate(prefix))


def generate(model, ids, mask, trie_ids, width: int, code_length: int):
  """The official constrained generation, as trainer/evaluator.py `test` calls it."""
  from utils.model_utils import Tree  # pylint: disable=import-outside-toplevel
  tree = Tree()
  with contextlib.redirect_stderr(io.StringIO()):
    tree.set_all([[0, *map(int, c)] for c in trie_ids])
  with torch.no_grad():
    out = model.generate(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                         max_length=code_length + 1, num_beams=width, num_return_sequences=width,
                         prefix_allowed_tokens_fn=tree, return_dict_in_generate=True, output_scores=True)
  return out.sequences.numpy(), out.sequences_scores.numpy()


def golden_beam(repo: Path) -> dict:
  model, shape = tiny_grdr(repo)
  rng = np.random.default_rng(SEED + 4)
  ids, mask = query_tokens(rng, [6, 9, 4], 50, 9)
  prefixes = [()] + [(a,) for a in range(8)] + [(a, b) for a in range(8) for b in range(8)]
  table = np.zeros((len(ids), len(prefixes), 8), np.float32)
  with torch.no_grad():
    for prefix in prefixes:
      dec = torch.from_numpy(np.tile(np.asarray([[0, *prefix]], np.int64), (len(ids), 1)))
      logits = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                     decoder_input_ids=dec).logits
      table[:, prefix_index(prefix)] = torch.log_softmax(logits[:, -1].float(), -1).numpy()
  no_eos = [c for c in range(8) if c != 1]
  plain = {tuple(rng.choice(no_eos, 3)) for _ in range(40)}
  plain = np.asarray(sorted(plain)[:24], np.int64)
  eos = np.concatenate([plain, np.asarray([[1, 3, 4], [1, 0, 2], [2, 1, 5], [3, 4, 1], [5, 1, 1]], np.int64)])
  arrays = {"in/caption_tokens": ids, "in/attention_mask": mask, "out/logp_table": table}
  for name, trie in (("plain", plain), ("eos", eos)):
    seqs, scores = generate(model, ids, mask, trie, width=5, code_length=3)
    arrays.update({f"in/{name}/trie_ids": trie, f"out/{name}/sequences": seqs, f"out/{name}/scores": scores})
  meta = {"files": ["trainer/evaluator.py (test: model.generate with prefix_allowed_tokens_fn=Tree)",
                    "utils/model_utils.py (Tree)", "models/grdr.py (GRDR as a GenerationMixin)",
                    "transformers 4.47.0 generation/utils.py (beam search, as the official README pins)"],
          "model": shape, "width": 5, "max_length": 4,
          "weights": "grdr_losses.npz's sd/ (the same tiny model, same seed)",
          "outputs": "logp_table [Q, 73, K]: log_softmax(GRDR(input_ids, decoder_input_ids=[0, *prefix]).logits[:, "
                     "-1]) for every prefix (row: 0 for (), 1 + c1, 9 + 8 c1 + c2); <trie>/sequences [Q W, 4] "
                     "(decoder start 0 then the route, W per query, best first), <trie>/scores [Q W] = the route's "
                     "summed log-probabilities / its generated length (length_penalty 1); trie 'eos' holds IDs with "
                     "code 1, T5's eos_token_id: HF ends such a beam early (pads it with 0)"}
  return arrays, meta


T5_SMALL = dict(vocab_size=512, d_model=512, d_kv=64, num_heads=8, d_ff=2048, num_layers=6, num_decoder_layers=6,
                relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.1,
                layer_norm_epsilon=1e-6, feed_forward_proj="relu", decoder_start_token_id=0)
ENCODER_POSITIONS = [0, 80, 99, 100, 159]
DECODER_POSITIONS = [0, 15, 16, 100, 139]


def t5_small_recipe(name: str, shape) -> tuple[float, float]:
  """(std, mean) of each parameter of the T5-Small-shape GRDR (module docstring)."""
  d, d_kv, h, d_ff = T5_SMALL["d_model"], T5_SMALL["d_kv"], T5_SMALL["num_heads"], T5_SMALL["d_ff"]
  if "rq.vq_layers." in name:
    layer = int(name.split("rq.vq_layers.")[1].split(".")[0])
    return (1.0, 0.6, 0.35)[layer] / np.sqrt(shape[-1]), 0.0
  if "layer_norm" in name:
    return 1.0 / np.sqrt(12.0), 1.0
  if name.endswith("bias"):
    return 0.01, 0.0
  if "shared" in name or "relative_attention_bias" in name or "start_token" in name:
    return 1.0, 0.0
  if ".q.weight" in name:
    return 1.0 / np.sqrt(d * d_kv), 0.0
  if ".o.weight" in name:
    return 1.0 / np.sqrt(h * d_kv), 0.0
  if ".wo.weight" in name:
    return 1.0 / np.sqrt(d_ff), 0.0
  return 1.0 / np.sqrt(shape[-1]), 0.0


def golden_t5(repo: Path) -> dict:
  from models.grdr import GRDR  # pylint: disable=import-outside-toplevel
  from models.t5 import T5ForConditionalGeneration  # pylint: disable=import-outside-toplevel
  from transformers import T5Config  # pylint: disable=import-outside-toplevel
  from utils.model_utils import create_videorqvae  # pylint: disable=import-outside-toplevel
  torch.manual_seed(SEED)
  cfg = T5Config(**T5_SMALL)
  rqvae = create_videorqvae(code_num=128, code_length=3, num_latent_tokens=4, e_dim=512, in_dim=512, device="cpu")
  model = GRDR(model=T5ForConditionalGeneration(cfg), code_length=3, use_constraint=False, sk_epsilon=1,
               zero_inp=False, code_number=128, videorqvae=rqvae).eval()
  recipe, sums = {}, {}
  with torch.no_grad():
    for name, p in model.named_parameters():  # each shared tensor once, under its first name
      if name == "logit_scale":
        p.fill_(float(np.log(150.0)))
        continue
      std, mean = t5_small_recipe(name, tuple(p.shape))
      value = hashed(name, tuple(p.shape), std, mean)
      p.copy_(torch.from_numpy(value))
      recipe[name] = [list(p.shape), float(std), float(mean)]
      sums[name] = float(value.astype(np.float64).sum())
  rng = np.random.default_rng(SEED + 5)
  ids, mask = query_tokens(rng, [160, 100], 512, 160)
  prefix = np.asarray([[0, 17, 90], [0, 3, 127]], np.int64)
  feats = scales(rng, (3, 512))
  features = np.concatenate([feats["real"], feats["unit"]])
  token_idx = np.asarray([0, 3, 1, 2, 3, 0])
  seen = {}
  model.model.register_forward_hook(lambda mod, args, out: seen.__setitem__("decoder", out.decoder_hidden_states[-1]))
  t, m = torch.from_numpy(ids), torch.from_numpy(mask)
  with torch.no_grad():
    encoder = model.model.encoder(input_ids=t, attention_mask=m).last_hidden_state
    query = model(input_ids=t, attention_mask=m, decoder_input_ids=torch.from_numpy(prefix))
    query_decoder = seen["decoder"].numpy()
    long_in = torch.from_numpy(hashed("in/long_decoder", (2, 140, 512), 1.0))
    long_out = model.model(encoder_outputs=(encoder,), attention_mask=m, decoder_inputs_embeds=long_in,
                           output_hidden_states=True).decoder_hidden_states[-1]
    video = model(video_features=torch.from_numpy(features), token_idx=torch.from_numpy(token_idx))
    codes = model.video_rqvae.get_indices(torch.from_numpy(features)).numpy()
  video_ids = codes.reshape(-1, 3)
  others = rng.integers(0, 128, size=(80, 3))
  trie = np.unique(np.concatenate([video_ids, others]), axis=0)
  trie = trie[~(trie == 1).any(1)]  # no code equal to T5's eos id (grdr_beam.npz's "eos" trie shows that quirk)
  seqs, scores = generate(model, ids, mask, trie, width=10, code_length=3)
  arrays = {"in/caption_tokens": ids, "in/attention_mask": mask, "in/prefix": prefix, "in/video_features": features,
            "in/token_idx": token_idx, "in/trie_ids": trie,
            "out/encoder": encoder[:, ENCODER_POSITIONS].numpy(), "out/query_decoder": query_decoder,
            "out/query_logits": query.logits.numpy(), "out/long_decoder": long_out[:, DECODER_POSITIONS].numpy(),
            "out/video_codes": codes, "out/reconstruction": video.reconstructed_features.numpy(),
            "out/video_logits": video.logits.numpy(), "out/rq_loss": np.float32(video.rq_loss.item()),
            "out/beam_sequences": seqs, "out/beam_scores": scores}
  meta = {"files": ["models/t5/modeling_t5.py (T5ForConditionalGeneration, T5Stack)", "models/grdr.py (GRDR)",
                    "utils/model_utils.py (create_videorqvae)", "models/video_rqvae/*.py",
                    "trainer/evaluator.py (test: generate)"],
          "t5": T5_SMALL, "code_num": 128, "code_length": 3, "num_latent_tokens": 4, "in_dim": 512,
          "logit_scale": float(np.log(150.0)),
          "weights": "hashed(name, shape, std, mean) for every parameter in `recipe` {name: [shape, std, mean]} "
                     "(named_parameters: one name per shared tensor; `sums` their float64 sums); logit_scale ln 150",
          "recipe": recipe, "sums": sums, "long_decoder_inputs": "hashed('in/long_decoder', (2, 140, 512), 1.0)",
          "encoder_positions": ENCODER_POSITIONS, "decoder_positions": DECODER_POSITIONS,
          "outputs": "encoder [2, 5, d] at encoder_positions (query 1 has 100 real tokens: position 100 is padding); "
                     "query_decoder [2, 3, d], query_logits [2, 3, K]: GRDR(input_ids, decoder_input_ids=prefix) (the "
                     "decoder's last hidden states, after the final norm; scale cos(h_l, C^(l))); long_decoder [2, 5, "
                     "d]: T5 decoder over the hashed inputs_embeds at decoder_positions; video_codes [6, N_v, 3] "
                     "get_indices; reconstruction, video_logits, rq_loss: GRDR(video_features, token_idx); "
                     "beam_sequences [2 x 10, 4], beam_scores: generate over trie_ids (10 beams)"}
  return arrays, meta


def golden_tiger(extra: Path) -> dict:
  sys.path.insert(0, str(extra))
  import baselines.mm_semantictvr.index.models.layers as layers  # pylint: disable=import-outside-toplevel
  import baselines.mm_semantictvr.index.models.rqvae as rqvae  # pylint: disable=import-outside-toplevel
  rqvae.MLPLayers = functools.partial(layers.MLPLayers, activation="relu")  # module docstring: layers.py
  torch.manual_seed(SEED)
  layer_sizes, m, k, e_dim, in_dim = [48, 32], 4, 16, 16, 256
  model = rqvae.RQVAE(in_dim=in_dim, num_emb_list=[k] * m, e_dim=e_dim, layers=layer_sizes, dropout_prob=0.0,
                      bn=False, loss_type="mse", kmeans_init=False, sk_epsilons=0.0, sk_iters=50).eval()
  # small biases and codewords: at the real scale the encoder's output (~0.15 long) is then its input's, not its bias
  randomise(model, torch.Generator().manual_seed(SEED + 6), book_lengths=(0.15, 0.1, 0.06, 0.04), bias_std=0.01)
  rng = np.random.default_rng(SEED + 7)
  out = {}
  for scale, x in scales(rng, (5, in_dim)).items():
    xt = torch.from_numpy(x)
    recon, rq_loss, codes, encoded = model(xt, use_sk=False)
    x_q = model.rq(encoded, use_sk=False)[0]
    total, recon_loss = model.compute_loss(recon, encoded, rq_loss, xt)
    first = model.encoder.mlp_layers[1].weight
    grads = torch.autograd.grad(total, [first] + [layer.embedding.weight for layer in model.rq.vq_layers])
    out.update({f"in/{scale}/x": x, f"out/{scale}/codes": codes.numpy(),
                f"out/{scale}/encoded": encoded.detach().numpy(), f"out/{scale}/x_q": x_q.detach().numpy(),
                f"out/{scale}/reconstruction": recon.detach().numpy(),
                f"out/{scale}/rq_loss": np.float32(rq_loss.item()),
                f"out/{scale}/recon_loss": np.float32(recon_loss.item()),
                f"out/{scale}/total": np.float32(total.item()), f"out/{scale}/grad_encoder_0": grads[0].numpy(),
                f"out/{scale}/grad_books": torch.stack(grads[1:]).numpy()})
  meta = {"files": ["baselines/mm_semantictvr/index/models/rqvae.py@5a11a4a795f44f9bf28639c5d2d5931aae0dc1c3 (RQVAE)",
                    "baselines/mm_semantictvr/index/models/rq.py@5a11a4a795f44f9bf28639c5d2d5931aae0dc1c3",
                    "baselines/mm_semantictvr/index/models/vq.py@6b1f2e975394245dad64d20603dbb0a90231d1e7",
                    "models/video_rqvae/layers.py@checkout (MLPLayers, activation='relu': the index copy's "
                    "layers.py is stored at no commit)", "baselines/mm_semantictvr/index/train_rqvae.py"
                    "@25d82dca970b2b6df07f3c699fc681159580d0ce (how it is built)"],
          "config": {"in_dim": in_dim, "layers": layer_sizes, "e_dim": e_dim, "num_emb_list": [k] * m, "beta": 0.55,
                     "loss_type": "mse", "quant_loss_weight": 1.0, "sk_epsilons": 0.0, "use_ema": False},
          "outputs": "codes [5, M]; encoded [5, e]; x_q (value: the summed codewords); reconstruction; rq_loss: the "
                     "mean over layers of mse(e, sg r) + beta mse(sg e, r); recon_loss: mse(reconstruction, x); "
                     "total = "
                     "recon_loss + rq_loss; grad_encoder_0 = d total / d encoder.mlp_layers.1.weight; grad_books [M, "
                     "K, e] = d total / d codebooks"}
  return {**state_dict(model), **out}, meta


def save(out: Path, name: str, arrays: dict, meta: dict, repo_commit: str, extra: dict = None) -> None:
  import transformers  # pylint: disable=import-outside-toplevel
  meta = {"official_repo": "JasonCodeMaker/GRDR", "commit": repo_commit, **(extra or {}), **meta,
          "generator": "bench/goldens/grdr.py", "torch": torch.__version__, "transformers": transformers.__version__,
          "seed": SEED}
  np.savez_compressed(out / name, meta=np.array(json.dumps(meta)), **arrays)
  print(f"{out / name}: {(out / name).stat().st_size:,} bytes")


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--repo", default="/work/refs/JasonCodeMaker+GRDR")
  parser.add_argument("--extra", default="/work/refs/extra")
  parser.add_argument("--out", default="tests/golden")
  parser.add_argument("--only", nargs="*", default=["rq", "losses", "beam", "t5", "tiger"])
  args = parser.parse_args()
  repo, out = Path(args.repo), Path(args.out)
  import_official(repo)
  torch.set_num_threads(2)
  c = commit(repo)
  if "rq" in args.only:
    save(out, "grdr_rq.npz", *golden_rq(repo), c)
  if "losses" in args.only:
    save(out, "grdr_losses.npz", *golden_losses(repo, out), c)
  if "beam" in args.only:
    save(out, "grdr_beam.npz", *golden_beam(repo), c)
  if "t5" in args.only:
    save(out, "grdr_t5.npz", *golden_t5(repo), c)
  if "tiger" in args.only:
    save(out, "tiger_rqvae.npz", *golden_tiger(Path(args.extra)), c,
         {"commit_note": "the checkout's commit; the TIGER files' own commits are in `files`"})


if __name__ == "__main__":
  main()
