"""Official GRDR checkpoints (JasonCodeMaker/GRDR) -> `vidjax.models.grdr.GRDR` params, and its `.code` sidecar.

The official trainer (trainer/trainer.py `train`, utils/training_utils.py `safe_save`) writes `best_model.pt`, the
whole `models.grdr.GRDR` state dict, flat:

  model.*                  the T5 (models/t5/modeling_t5.py T5ForConditionalGeneration): shared [V, d] (the query
                           token embedding; encoder.embed_tokens is the same tensor), encoder.block.{i}.layer.0
                           (SelfAttention q/k/v/o, relative_attention_bias in block 0 only, layer_norm) and .layer.1
                           (DenseReluDense wi/wo, layer_norm), encoder.final_layer_norm; decoder.block.{i}.layer.0
                           (SelfAttention), .layer.1 (EncDecAttention), .layer.2 (DenseReluDense),
                           decoder.final_layer_norm; decoder.embed_tokens and lm_head (T5's word vocabulary: GRDR's
                           decoder reads code vectors and predicts codes by cosine, so neither is used)
  video_rqvae.encoder.mlps.{v}.mlp_layers.1   view v's encoder, one linear map in_dim -> e_dim (VideoLatentEncoder_V2)
  video_rqvae.decoder.mlps.{v}.mlp_layers.1   view v's decoder, e_dim -> in_dim (VideoLatentDecoder_V2)
  video_rqvae.rq.vq_layers.{l}.embedding      the codebook C^(l+1) [K, e_dim]
  code_embedding.{l}, centroids.{l}.codebook  the same codebooks again (GRDR's modules share them)
  start_token_embedding [1, d]                the decoder's first input
  logit_scale []                              log of the code logits' scale (used clamped to [20, 100])

(`best_model.pt.model`, `.videorqvae`, `.centroids`, `.embedding`, `.start_token` hold the same tensors split by
module: convert `best_model.pt`.) The vidjax model these params fit (`info["model"]`): `TokenizerConfig(feature_dim
= in_dim, latent_dim = e_dim, num_views, num_layers = M, num_codes = K, hidden = the option, normalize_views=False)`
and `RetrieverConfig(query_encoder="t5", vocab_size = V + 1, t5 = T5Config(<the checkpoint's T5 shape>,
vocab_size=0))`. The correspondence, held against the official modules by tests/test_reference_grdr.py:

  * each view's linear map W f + b is vidjax's view MLP W2 GELU(W1 f) + b2 + S f with W1 = W2 = 0, b2 = b, S = W^T
    (`hidden` only sizes the zero block), the decoders likewise;
  * T5: q/k/v [H d_kv, d] -> kernels [d, H, d_kv], o [d, H d_kv] -> [H, d_kv, d], wi / wo transposed, the layer
    norms' weights -> RMSNorm scales, block 0's relative_attention_bias -> the stack's position-bias table;
  * query token ids: vidjax's are the T5 tokenizer's + 1 (0 = padding), so `query_embed` = [shared[0]; shared]
    (row 0, T5's pad embedding, is only ever read at padded positions);
  * start_token_embedding -> bos; logit_scale s -> log_tau_code = -s (vidjax clamps tau_code to [0.01, 0.05], the
    official clamps exp(s) to [20, 100]: the same logits); the alignment temperature has no official counterpart
    (the official L_CL is a raw dot product): `tau_align` sets it.

`read_codes(path)` reads the `.code` sidecar (trainer/evaluator.py `save_code`: JSON {sample key: [c_1 .. c_m]}, a
sample key being `<video id>_<caption index>`, the codes those of the view the caption is aligned with).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from vidjax.convert.state_dict import ConversionError, StateDict


def _count(sd: StateDict, pattern: str) -> int:
  """How many consecutive indices i have a key matching `pattern.format(i)` as a prefix."""
  n = 0
  while sd.has_prefix(pattern.format(n)):
    n += 1
  return n


def _same(sd: StateDict, key: str, want: np.ndarray) -> None:
  """Takes `key`, a copy of a tensor already converted (a shared module's second name), and checks it is equal."""
  got = sd.take(key, want.shape)
  if not np.array_equal(got, want):
    raise ConversionError(f"{sd.source}: key {key!r} should be the same tensor as its shared original, but differs")


def _attention(sd: StateDict, prefix: str, d: int, heads: int, d_kv: int) -> dict:
  inner = heads * d_kv
  qkv = {n: sd.take(f"{prefix}.{n}.weight", (inner, d)).T.reshape(d, heads, d_kv) for n in ("q", "k", "v")}
  o = sd.take(f"{prefix}.o.weight", (d, inner)).T.reshape(heads, d_kv, d)
  return {n: {"kernel": w} for n, w in {**qkv, "o": o}.items()}


def _ffn(sd: StateDict, prefix: str, d: int, d_ff: int) -> dict:
  return {"wi": {"kernel": sd.take(f"{prefix}.wi.weight", (d_ff, d)).T},
          "wo": {"kernel": sd.take(f"{prefix}.wo.weight", (d, d_ff)).T}}


def _norm(sd: StateDict, key: str, d: int) -> dict:
  return {"scale": sd.take(key, (d,))}


def _t5_stack(sd: StateDict, stack: str, layers: int, shape: dict) -> dict:
  """One T5 stack (`model.encoder` / `model.decoder`) -> `vidjax.models.t5.T5Encoder` / `T5Decoder` params."""
  d, heads, d_kv, d_ff, buckets = (shape[k] for k in ("d_model", "num_heads", "d_kv", "d_ff", "num_buckets"))
  p = f"model.{stack}.block"
  out = {"position_bias": {"rel_embedding": sd.take(f"{p}.0.layer.0.SelfAttention.relative_attention_bias.weight",
                                                    (buckets, heads))},
         "final_norm": _norm(sd, f"model.{stack}.final_layer_norm.weight", d)}
  sublayers = ((("attention", "SelfAttention"), ("ffn", "DenseReluDense")) if stack == "encoder" else
               (("self_attention", "SelfAttention"), ("cross_attention", "EncDecAttention"),
                ("ffn", "DenseReluDense")))
  for i in range(layers):
    for j, (ours, theirs) in enumerate(sublayers):
      key = f"{p}.{i}.layer.{j}"
      out[f"layer_{i}_{ours}"] = (_ffn(sd, f"{key}.{theirs}", d, d_ff) if ours == "ffn" else
                                  _attention(sd, f"{key}.{theirs}", d, heads, d_kv))
      out[f"layer_{i}_{ours}_norm"] = _norm(sd, f"{key}.layer_norm.weight", d)
  return out


def _views(sd: StateDict, part: str, n: int, d_in: int, d_out: int, hidden: int) -> dict:
  """The official views' linear maps `video_rqvae.<part>.mlps.{v}.mlp_layers.1` as `vidjax.models.grdr.ViewMLPs`
  params (W1 = W2 = 0: the module docstring)."""
  w = np.stack([sd.take(f"video_rqvae.{part}.mlps.{v}.mlp_layers.1.weight", (d_out, d_in)).T for v in range(n)])
  b = np.stack([sd.take(f"video_rqvae.{part}.mlps.{v}.mlp_layers.1.bias", (d_out,)) for v in range(n)])
  zeros = lambda *s: np.zeros((n,) + s, np.float32)  # noqa: E731
  return {"w1": zeros(d_in, hidden), "b1": zeros(hidden), "w2": zeros(hidden, d_out), "b2": b, "skip": w}


def convert(sd: StateDict, hidden: int = 1024, vocab_size: int | None = None, tau_align: float = 0.07):
  """An official GRDR state dict -> (vidjax GRDR params, info) (the module docstring).

  Args:
    sd: the checkpoint (`best_model.pt`).
    hidden: the vidjax view MLPs' hidden width (their hidden path is zero: any width computes the same).
    vocab_size: rows of `query_embed`, the vidjax query vocabulary (token ids + 1); default: T5's V + 1.
    tau_align: the alignment temperature (no official counterpart).

  Returns:
    params (a flax params tree) and info: {"model": the vidjax config fields the params fit, "logit_scale",
    "notes"}.
  """
  shared = sd.take("model.shared.weight")
  if shared.ndim != 2:
    raise ConversionError(f"{sd.source}: key 'model.shared.weight' has shape {shared.shape}, expected [V, d_model]")
  n_vocab, d = shared.shape
  buckets, heads = sd.take("model.encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight").shape
  inner = sd.take("model.encoder.block.0.layer.0.SelfAttention.q.weight").shape[0]
  shape = dict(d_model=d, num_heads=heads, d_kv=inner // heads, num_buckets=buckets,
               d_ff=sd.take("model.encoder.block.0.layer.1.DenseReluDense.wi.weight").shape[0],
               encoder_layers=_count(sd, "model.encoder.block.{}."),
               decoder_layers=_count(sd, "model.decoder.block.{}."))
  if inner % heads:
    raise ConversionError(f"{sd.source}: attention width {inner} is not a multiple of the {heads} heads")
  n_views = _count(sd, "video_rqvae.encoder.mlps.{}.")
  n_layers = _count(sd, "video_rqvae.rq.vq_layers.{}.")
  if not n_views or not n_layers:
    raise ConversionError(f"{sd.source}: no video_rqvae.encoder.mlps.0 / video_rqvae.rq.vq_layers.0 keys: not a GRDR "
                          "checkpoint (convert best_model.pt, the whole model)")
  book0 = sd.take("video_rqvae.rq.vq_layers.0.embedding.weight")
  n_codes, e_dim = book0.shape
  if e_dim != d:
    raise ConversionError(f"{sd.source}: codebook width {e_dim} differs from T5's d_model {d} (the official GRDR "
                          "builds them equal)")
  in_dim = sd.take("video_rqvae.encoder.mlps.0.mlp_layers.1.weight").shape[1]
  books = {f"codebook_{l}": sd.take(f"video_rqvae.rq.vq_layers.{l}.embedding.weight", (n_codes, e_dim))
           for l in range(n_layers)}
  for l in range(_count(sd, "code_embedding.{}.")):
    _same(sd, f"code_embedding.{l}.weight", books[f"codebook_{l}"])
  for l in range(_count(sd, "centroids.{}.")):
    _same(sd, f"centroids.{l}.codebook.weight", books[f"codebook_{l}"])
  if "model.encoder.embed_tokens.weight" in sd:
    _same(sd, "model.encoder.embed_tokens.weight", shared)
  sd.skip("model.decoder.embed_tokens.", "T5's word embedding in the decoder: GRDR's decoder reads the start vector "
                                         "and codebook entries (decoder_inputs_embeds)")
  sd.skip("model.lm_head.", "T5's word vocabulary head: GRDR predicts codes by cosine over the codebooks")
  sd.skip("video_rqvae.text_alignment_projector.", "VideoRQVAE_V2's text projector: not on GRDR's paths")
  tokenizer = {"encoder": _views(sd, "encoder", n_views, in_dim, e_dim, hidden),
               "decoder": _views(sd, "decoder", n_views, e_dim, in_dim, hidden), **books}
  rows = n_vocab + 1 if vocab_size is None else int(vocab_size)
  if not 1 < rows <= n_vocab + 1:
    raise ConversionError(f"{sd.source}: vocab_size {vocab_size} must be in [2, {n_vocab + 1}] (T5's {n_vocab} "
                          "token ids + 1)")
  scale = float(sd.take("logit_scale", ()))
  params = {
      "tokenizer": tokenizer,
      "query_embed": {"embedding": np.concatenate([shared[:1], shared])[:rows]},
      "encoder": _t5_stack(sd, "encoder", shape["encoder_layers"], shape),
      "decoder": _t5_stack(sd, "decoder", shape["decoder_layers"], shape),
      "bos": sd.take("start_token_embedding", (1, d))[0],
      "log_tau_code": np.float32(-scale),
      "log_tau_align": np.float32(math.log(tau_align)),
  }
  model = {"tokenizer": dict(feature_dim=in_dim, latent_dim=e_dim, hidden=hidden, num_views=n_views,
                             num_layers=n_layers, num_codes=n_codes, normalize_views=False),
           "retriever": dict(query_encoder="t5", vocab_size=rows, t5=dict(shape))}
  info = {"model": model, "logit_scale": scale, "code_scale": min(max(math.exp(scale), 20.0), 100.0),
          "notes": ["query token ids are the T5 tokenizer's + 1 (0 = padding), with its eos appended, as the "
                    "official data collator tokenizes",
                    "the T5 relative-position max_distance is not in the checkpoint: T5's 128 (vidjax's default)"]}
  return params, info


def read_codes(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
  """The `.code` sidecar (the module docstring) -> (sample keys str [N] in file order, codes int32 [N, m]); a file
  of per-view lists ({key: [[c_1 .. c_m] per view]}, `GRDR.gen_sid`'s form) gives codes [N, N_v, m]."""
  path = Path(path)
  try:
    data = json.loads(path.read_text())
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ConversionError(f"{path}: not a readable .code file (JSON {{sample key: codes}}): {e}") from e
  if not isinstance(data, dict) or not data:
    raise ConversionError(f"{path}: a .code file is a non-empty JSON object {{sample key: codes}}")
  keys = list(data)
  try:
    codes = np.asarray([data[k] for k in keys])
  except ValueError as e:
    raise ConversionError(f"{path}: the code lists differ in length ({e})") from e
  if codes.dtype == object or not np.issubdtype(codes.dtype, np.integer) or codes.ndim not in (2, 3):
    first = next((k for k in keys if np.asarray(data[k]).shape != np.asarray(data[keys[0]]).shape), keys[0])
    raise ConversionError(f"{path}: sample {first!r}: codes must be lists of integers of one length, got "
                          f"{str(data[first])[:80]}")
  bad = np.argwhere(codes < 0)
  if bad.size:
    raise ConversionError(f"{path}: sample {keys[bad[0][0]]!r} has a negative code")
  return np.asarray(keys, dtype=str), codes.astype(np.int32)


SAMPLE_KEY = re.compile(r"^(?P<video>.+)_(?P<caption>\d{1,2})$")


def video_of(sample_key: str) -> str:
  """The video id of a sample key: `<video>_<caption index>` loses its suffix (the official `strip_video_suffix`:
  one or two digits after the last underscore), anything else is its own video id."""
  match = SAMPLE_KEY.match(sample_key)
  return match.group("video") if match else sample_key
