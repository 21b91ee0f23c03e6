"""GRDR held against the official code (JasonCodeMaker/GRDR): goldens written by bench/goldens/grdr.py from the
official modules (each golden's `meta` names the commit, files, torch / transformers versions and seed), loaded into
vidjax through `vidjax.convert.grdr`.

What is the same computation and must match: the residual quantizer (codes by cosine, the unnormalised residual
arithmetic, each layer's cosine logits, the RQ loss and its gradients with the official stop-gradients, the
per-layer straight-through), the T5 at T5-Small's shape (encoder, decoder, relative-position buckets past 128, masks,
RMSNorm), GRDR's query path (start vector, codebook entries as decoder inputs, cosine code logits with the clamped
scale), its video path (views, codes of every view, reconstruction), the training losses composed from vidjax's
primitives, the trie-constrained beam search (routes and scores), and the `.code` sidecar.

Deviations by design, one line each (the tests below pin them):
  * view MLPs: the official views are one linear map; vidjax's W2 GELU(W1 f) + b2 + S f holds it as W1 = W2 = 0.
  * L_HC: vidjax sums over the earlier layers (eq. 10), the official code averages: vidjax = (m - 1) x official.
  * HF beam search ends a beam whose code equals T5's eos id (1): such IDs come back cut short; vidjax does not.
"""
import functools
import itertools
import json
import math
import zlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidjax import losses
from vidjax.convert import grdr as convert_grdr
from vidjax.convert.state_dict import ConversionError, StateDict
from vidjax.models.grdr import GRDR, RetrieverConfig, TokenizerConfig, residual_quantize, straight_through
from vidjax.models.t5 import T5Config, T5Decoder
from vidjax.ops import l2_normalize
from vidjax.retrieval.trie import SemanticIdTrie, beam_search

pytestmark = pytest.mark.highest_precision

GOLDEN = Path(__file__).parent / "golden"
COMMIT = "3ca3367fefb59a9ee18585412ad10b11e0acf6b1"
# float32 through a few layers of random weights on O(1) activations: differences in summation order only.
ATOL, RTOL = 2e-5, 2e-5


def _load(name: str):
  z = np.load(GOLDEN / name)
  return z, json.loads(str(z["meta"]))


def _state_dict(z, source: str) -> StateDict:
  return StateDict({k[3:]: z[k] for k in z.files if k.startswith("sd/")}, source)


def _model(info: dict) -> GRDR:
  """The vidjax GRDR the converted params fit (`info["model"]`)."""
  m = info["model"]
  t5 = T5Config(vocab_size=0, dropout_rate=0.0, **m["retriever"]["t5"])
  return GRDR(TokenizerConfig(**m["tokenizer"]),
              RetrieverConfig(t5=t5, query_encoder="t5", vocab_size=m["retriever"]["vocab_size"]))


def _apply(model, params, method, *args):
  return jax.jit(lambda p, *a: model.apply({"params": p}, *a, method=method))(params, *args)


def _converted(z, name: str, **options):
  sd = _state_dict(z, name)
  params, info = convert_grdr.convert(sd, **options)
  sd.finish()
  return _model(info), jax.tree.map(jnp.asarray, params), info


def _official_losses(out, features, query_total, scale, beta):
  """The official trainer's terms (trainer/trainer.py train_step) from vidjax's primitives: cl = CE(q_total .
  r_final), ce = label-smoothed (0.1) CE of the last layer, code = the mean over the earlier layers of the query and
  video code CEs, cl_dd = 1 - cos reconstruction, rq = the mean over layers of the element-mean codebook + beta
  commitment terms on the normalised residuals."""
  tau = 1.0 / scale
  view_res = out["view_residuals"]  # [B, m, D]
  m = view_res.shape[1]
  final = out["view_z"] - jnp.take_along_axis(out["z_hat"], out["view"][:, None, None], axis=1)[:, 0]
  sims = query_total @ final.T
  cl = jnp.mean(jax.nn.logsumexp(sims, 1) - jnp.diagonal(sims))
  logp = jax.nn.log_softmax(losses.code_logits(out["h"][:, m - 1], out["codebooks"][m - 1], tau), -1)
  target = jax.nn.one_hot(out["view_codes"][:, m - 1], logp.shape[-1]) * 0.9 + 0.1 / logp.shape[-1]
  ce = -jnp.mean(jnp.sum(target * logp, -1))
  code = sum(losses.code_cross_entropy(out["h"][:, l], out["codebooks"][l], out["hc_codes"][:, l], tau)
             + losses.code_cross_entropy(view_res[:, l], out["codebooks"][l], out["hc_codes"][:, l], tau)
             for l in range(m - 1)) / (m - 1)
  rec = losses.cosine_reconstruction_loss(features, out["reconstruction"])
  residuals = out["residuals"]  # [B, N_v, m, D]
  selected = jnp.stack([out["codebooks"][l][out["codes"][..., l]] for l in range(m)], -2)
  rq = losses.euclidean_rq_loss(l2_normalize(residuals), selected, beta) / (m * residuals.shape[-1])
  return {"cl_loss": cl, "ce_loss": ce, "code_loss": code, "cl_dd_loss": rec, "rq_loss": rq}


def test_goldens_record_the_official_commit():
  for name in ("grdr_rq.npz", "grdr_losses.npz", "grdr_beam.npz", "grdr_t5.npz", "tiger_rqvae.npz"):
    _, meta = _load(name)
    assert meta["official_repo"] == "JasonCodeMaker/GRDR" and meta["commit"] == COMMIT, name
    assert meta["generator"] == "bench/goldens/grdr.py" and meta["torch"] and meta["files"], name
    assert meta["transformers"] == "4.47.0", name  # the official README's pin


@pytest.mark.parametrize("scale", ["real", "unit"])
def test_residual_quantizer_codes_loss_and_gradients_equal_the_official(scale):
  z, meta = _load("grdr_rq.npz")
  beta = meta["config"]["beta"]
  books = jnp.asarray(np.stack([z[f"sd/vq_layers.{l}.embedding.weight"] for l in range(3)]))
  x = jnp.asarray(z[f"in/{scale}/x"])
  m, d = books.shape[0], books.shape[-1]
  codes, z_hat, residuals = residual_quantize(x, books, m)
  np.testing.assert_array_equal(codes, z[f"out/{scale}/codes"])
  np.testing.assert_allclose(z_hat, z[f"out/{scale}/x_q"], atol=1e-6)
  np.testing.assert_allclose(residuals, z[f"out/{scale}/residuals"], rtol=1e-6, atol=1e-6)
  cos = jnp.stack([losses.code_logits(residuals[..., l, :], books[l], 1.0) for l in range(m)], -2)
  np.testing.assert_allclose(cos, z[f"out/{scale}/cos"], atol=1e-6)

  def official_rq(x, books):  # the mean over layers of mse(e, sg r^) + beta mse(sg e, r^)
    codes, _, residuals = residual_quantize(x, books, m)
    selected = jnp.stack([books[l][codes[..., l]] for l in range(m)], -2)
    return losses.euclidean_rq_loss(l2_normalize(residuals), selected, beta) / (m * d)

  loss, (grad_x, grad_books) = jax.value_and_grad(official_rq, argnums=(0, 1))(x, books)
  np.testing.assert_allclose(loss, z[f"out/{scale}/loss"], rtol=1e-5)
  # gradients are ~1e-4 (1 / (M D) of O(1) terms): the tolerance is relative to that size
  np.testing.assert_allclose(grad_x, z[f"out/{scale}/grad_x"], rtol=1e-4, atol=1e-9)
  np.testing.assert_allclose(grad_books, z[f"out/{scale}/grad_books"], rtol=1e-4, atol=1e-9)
  # the straight-through: z_hat in value, each layer's normalised residual in gradient
  cotangent = jnp.asarray(z["cotangent"])
  st_grad = jax.grad(lambda x: jnp.sum(straight_through(residual_quantize(x, books, m)[2],
                                                        residual_quantize(x, books, m)[1]) * cotangent))(x)
  np.testing.assert_allclose(st_grad, z[f"out/{scale}/st_grad_x"], rtol=1e-5, atol=1e-7)


def test_tiny_grdr_converts_and_its_forward_and_losses_equal_the_official():
  z, meta = _load("grdr_losses.npz")
  model, params, info = _converted(z, "grdr_losses.npz")
  assert info["model"]["tokenizer"]["normalize_views"] is False
  features = jnp.asarray(z["in/video_features"])
  queries = jnp.asarray(np.where(z["in/attention_mask"] > 0, z["in/caption_tokens"] + 1, 0), jnp.int32)
  view = jnp.asarray(z["in/token_idx"], jnp.int32)
  prior = jnp.asarray(z["in/ids"][:, 1:], jnp.int32)
  out = _apply(model, params, lambda m, *a: m.phase_outputs(*a, num_layers=3, train_layer=3, frozen_codes=prior),
               features, queries, view)
  scale = info["code_scale"]
  np.testing.assert_allclose(out["tau_code"], 1.0 / scale, rtol=1e-6)
  np.testing.assert_allclose(out["h"], z["out/decoder_states"], rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(jnp.sum(out["h"], 1), z["out/query_total"], rtol=RTOL, atol=ATOL)
  query_logits = jnp.stack([losses.code_logits(out["h"][:, l], out["codebooks"][l], out["tau_code"])
                            for l in range(3)], 1)
  np.testing.assert_allclose(query_logits, z["out/query_logits"], rtol=RTOL, atol=1e-4)
  np.testing.assert_array_equal(out["codes"], z["out/video_codes"])
  np.testing.assert_array_equal(out["view_codes"][:, -1], z["out/video_code"])
  np.testing.assert_allclose(out["reconstruction"], z["out/reconstruction"], rtol=RTOL, atol=ATOL)
  video_logits = jnp.stack([losses.code_logits(out["view_residuals"][:, l], out["codebooks"][l], out["tau_code"])
                            for l in range(3)], 1)
  np.testing.assert_allclose(video_logits, z["out/video_logits"], rtol=RTOL, atol=1e-4)

  terms = _official_losses({**out, "view": view}, features, jnp.sum(out["h"], 1), scale, beta=0.65)
  final = out["view_z"] - jnp.take_along_axis(out["z_hat"], view[:, None, None], axis=1)[:, 0]
  np.testing.assert_allclose(final, z["out/video_residual"], rtol=RTOL, atol=ATOL)
  for name, value in terms.items():
    np.testing.assert_allclose(value, z[f"out/loss/{name}"], rtol=1e-5, err_msg=name)
  for phase, weights in meta["weights"].items():  # the training loop's sum with build_loss_weights(config, phase)
    total = sum(float(terms[k]) * w for k, w in weights.items())
    np.testing.assert_allclose(total, z[f"out/total/phase{phase}"], rtol=1e-5)
  # Deviation (eq. 10): vidjax's L_HC sums the earlier layers' terms, the official averages them.
  tau = out["tau_code"]
  hc = sum(losses.code_cross_entropy(out["h"][:, l], out["codebooks"][l], prior[:, l], tau)
           + losses.code_cross_entropy(out["view_residuals"][:, l], out["codebooks"][l], prior[:, l], tau)
           for l in range(2))
  np.testing.assert_allclose(hc, 2 * z["out/loss/code_loss"], rtol=1e-5)


def hashed(name: str, shape, std: float, mean: float = 0.0) -> np.ndarray:
  """bench/goldens/grdr.py's weights: uniform (mean, std) from a splitmix64 hash of (crc32(name), index)."""
  n = int(np.prod(shape))
  z = np.arange(n, dtype=np.uint64) + np.uint64(zlib.crc32(name.encode()) * 0x9E3779B97F4A7C15 % (1 << 64))
  z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
  z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
  z = z ^ (z >> np.uint64(31))
  u = (z >> np.uint64(40)).astype(np.float64) / float(1 << 24)
  return (mean + std * np.sqrt(3.0) * (2.0 * u - 1.0)).astype(np.float32).reshape(shape)


def _t5_small_state_dict(meta) -> dict:
  """The T5-Small-shape GRDR's state dict, as the official `state_dict()` names it (shared tensors under each name)."""
  sd = {}
  for name, (shape, std, mean) in meta["recipe"].items():
    sd[name] = hashed(name, tuple(shape), std, mean)
    np.testing.assert_allclose(sd[name].astype(np.float64).sum(), meta["sums"][name], rtol=1e-12, err_msg=name)
  sd["logit_scale"] = np.asarray(meta["logit_scale"], np.float32)
  sd["model.encoder.embed_tokens.weight"] = sd["model.decoder.embed_tokens.weight"] = sd["model.shared.weight"]
  sd["model.lm_head.weight"] = sd["model.shared.weight"]
  for l in range(meta["code_length"]):
    book = sd[f"video_rqvae.rq.vq_layers.{l}.embedding.weight"]
    sd[f"code_embedding.{l}.weight"] = sd[f"centroids.{l}.codebook.weight"] = book
  return sd


@pytest.fixture(scope="module")
def t5_small():
  z, meta = _load("grdr_t5.npz")
  sd = StateDict(_t5_small_state_dict(meta), "grdr_t5.npz")
  params, info = convert_grdr.convert(sd)
  sd.finish()
  assert info["model"]["retriever"]["t5"] == dict(d_model=512, num_heads=8, d_kv=64, d_ff=2048, num_buckets=32,
                                                  encoder_layers=6, decoder_layers=6)
  model = _model(info)
  params = jax.tree.map(jnp.asarray, params)
  queries = jnp.asarray(np.where(z["in/attention_mask"] > 0, z["in/caption_tokens"] + 1, 0), jnp.int32)
  state = _apply(model, params, GRDR.encode_query, queries)
  return z, meta, model, params, info, queries, state


def test_t5_small_encoder_and_grdr_query_path_equal_the_official(t5_small):
  z, meta, model, params, info, _, state = t5_small
  enc = state["memory"][:, jnp.asarray(meta["encoder_positions"])]
  np.testing.assert_allclose(enc, z["out/encoder"], rtol=1e-4, atol=1e-4)  # 6 layers, 160 keys, O(1) outputs
  h = _apply(model, params, GRDR.decode, state, jnp.asarray(z["in/prefix"][:, 1:], jnp.int32))
  np.testing.assert_allclose(h, z["out/query_decoder"], rtol=1e-4, atol=1e-4)
  books, tau = params["tokenizer"], 1.0 / info["code_scale"]
  logits = jnp.stack([losses.code_logits(h[:, l], books[f"codebook_{l}"], tau) for l in range(3)], 1)
  assert info["code_scale"] == 100.0  # logit_scale ln 150: the official clamp to [20, 100] applies
  np.testing.assert_allclose(logits, z["out/query_logits"], rtol=1e-4, atol=2e-3)  # cosines x 100


def test_t5_small_decoder_relative_positions_past_128_equal_the_official(t5_small):
  z, meta, model, params, info, _, state = t5_small
  t5 = model.retriever.t5
  y = jnp.asarray(hashed("in/long_decoder", (2, 140, 512), 1.0))
  out = jax.jit(T5Decoder(t5).apply)({"params": params["decoder"]}, y, state["memory"], state["mask"])
  np.testing.assert_allclose(out[:, jnp.asarray(meta["decoder_positions"])], z["out/long_decoder"], rtol=1e-4,
                             atol=1e-4)


def test_t5_small_video_path_equals_the_official(t5_small):
  z, meta, model, params, info, _, _ = t5_small
  features = jnp.asarray(z["in/video_features"])
  tok = _apply(model, params, lambda m, f: m.tok(f), features)
  np.testing.assert_array_equal(tok["codes"], z["out/video_codes"])  # every view, both input scales
  np.testing.assert_allclose(tok["reconstruction"], z["out/reconstruction"], rtol=1e-4, atol=1e-5)
  view = jnp.asarray(z["in/token_idx"])
  res = jnp.take_along_axis(tok["residuals"], view[:, None, None, None], axis=1)[:, 0]
  books = params["tokenizer"]
  logits = jnp.stack([losses.code_logits(res[:, l], books[f"codebook_{l}"], 1.0 / info["code_scale"])
                      for l in range(3)], 1)
  np.testing.assert_allclose(logits, z["out/video_logits"], rtol=1e-4, atol=2e-4)
  selected = jnp.stack([books[f"codebook_{l}"][tok["codes"][..., l]] for l in range(3)], -2)
  rq = losses.euclidean_rq_loss(l2_normalize(tok["residuals"]), selected, 0.65) / (3 * 512)
  np.testing.assert_allclose(rq, z["out/rq_loss"], rtol=1e-5)


def test_t5_small_beam_search_routes_equal_the_official_generate(t5_small):
  z, meta, model, params, info, queries, state = t5_small
  ids = z["in/trie_ids"]
  trie = SemanticIdTrie([f"id{i}" for i in range(len(ids))], ids[:, None, :], num_codes=meta["code_num"])
  codes, leaves, scores = beam_search(_code_logp(model), trie.arrays(), params, state, width=10, depth=3)
  want = z["out/beam_sequences"].reshape(2, 10, 4)
  np.testing.assert_array_equal(codes, want[..., 1:])
  # HF's sequences_scores are the summed log-probabilities / the generated length (3)
  np.testing.assert_allclose(scores / 3, z["out/beam_scores"].reshape(2, 10), rtol=1e-4, atol=1e-4)


def _model_logp(model, params, state, prefix):
  return model.apply({"params": params}, state, prefix, method=GRDR.code_logp)


def _code_logp(model):
  return functools.partial(_model_logp, model)


# The log-probability table of grdr_beam.npz: row 0 for (), 1 + c1, 9 + 8 c1 + c2.
def _table_logp(table, queries, prefix):
  m = prefix.shape[-1]
  row = jnp.full(prefix.shape[:2], [0, 1, 9][m], jnp.int32)
  for i in range(m):
    row = row + prefix[..., i] * 8 ** (m - 1 - i)
  return jnp.take_along_axis(table, row[..., None], axis=1)


def test_beam_search_on_the_official_logits_gives_the_official_routes():
  z, meta = _load("grdr_beam.npz")
  table = jnp.asarray(z["out/logp_table"])
  width = meta["width"]
  ids = z["in/plain/trie_ids"]
  trie = SemanticIdTrie([f"id{i}" for i in range(len(ids))], ids[:, None, :], num_codes=8)
  codes, _, scores = beam_search(_table_logp, trie.arrays(), table, jnp.zeros((3, 1)), width=width, depth=3)
  want = z["out/plain/sequences"].reshape(3, width, 4)
  np.testing.assert_array_equal(codes, want[..., 1:])
  np.testing.assert_allclose(scores / 3, z["out/plain/scores"].reshape(3, width), rtol=1e-6)
  # the converted model's code_logp is that table (the official GRDR forward for every prefix)
  losses_z, _ = _load("grdr_losses.npz")
  model, params, _ = _converted(losses_z, "grdr_losses.npz")
  queries = jnp.asarray(np.where(z["in/attention_mask"] > 0, z["in/caption_tokens"] + 1, 0), jnp.int32)
  state = _apply(model, params, GRDR.encode_query, queries)
  got, _, got_scores = beam_search(_code_logp(model), trie.arrays(), params, state, width=width, depth=3)
  np.testing.assert_array_equal(got, codes)
  np.testing.assert_allclose(got_scores, scores, rtol=1e-5, atol=1e-5)
  # every prefix of each length at once, one beam a prefix (rows of the table: () 0, (c1,) 1 + c1, 9 + 8 c1 + c2)
  for m, first_row in enumerate((0, 1, 9)):
    prefixes = np.array(list(itertools.product(range(8), repeat=m)), np.int32).reshape(8 ** m, m)  # row order
    p = jnp.asarray(np.tile(prefixes[None], (3, 1, 1)))  # [Q = 3, 8^m beams, m]
    logp = _apply(model, params, GRDR.code_logp, state, p)
    np.testing.assert_allclose(logp, table[:, first_row:first_row + len(prefixes)], rtol=1e-5, atol=1e-5,
                               err_msg=f"prefixes of length {m}")


def test_official_generate_cuts_ids_at_the_eos_code_vidjax_does_not():
  """Deviation: HF beam search treats code 1 (T5's eos_token_id) as the end of the sequence."""
  z, meta = _load("grdr_beam.npz")
  ids = z["in/eos/trie_ids"]
  official = z["out/eos/sequences"][:, 1:]
  valid = {tuple(i) for i in ids}
  cut = [tuple(r) for r in official if tuple(r) not in valid]
  assert cut and all(r[0] == 1 and r[1:] == (0, 0) for r in cut)  # route [1] padded with 0: no such ID
  trie = SemanticIdTrie([f"id{i}" for i in range(len(ids))], ids[:, None, :], num_codes=8)
  codes, leaves, _ = beam_search(_table_logp, trie.arrays(), jnp.asarray(z["out/logp_table"]), jnp.zeros((3, 1)),
                                 width=meta["width"], depth=3)
  assert all(tuple(r) in valid for r in np.asarray(codes).reshape(-1, 3)) and bool((leaves >= 0).all())


def test_code_sidecar_reads_as_the_official_save_code_writes_it(tmp_path):
  z, _ = _load("grdr_losses.npz")
  keys, codes = convert_grdr.read_codes(GOLDEN / "grdr_tiny.code")
  b = len(z["in/token_idx"])
  assert list(keys) == [f"video{7000 + i}_{int(t)}" for i, t in enumerate(z["in/token_idx"])]
  want = np.concatenate([z["in/ids"][:, 1:], z["out/video_code"][:, None]], 1)
  np.testing.assert_array_equal(codes, want)
  assert codes.shape == (b, 3) and codes.dtype == np.int32
  assert [convert_grdr.video_of(k) for k in keys[:2]] == ["video7000", "video7001"]
  assert convert_grdr.video_of("v_abc") == "v_abc" and convert_grdr.video_of("clip_123") == "clip_123"
  nested = tmp_path / "views.code"
  nested.write_text(json.dumps({"a_0": [[1, 2], [3, 4]], "b_0": [[5, 6], [7, 0]]}))
  assert convert_grdr.read_codes(nested)[1].shape == (2, 2, 2)
  for bad, why in (({"a": [1, 2], "b": [1]}, "length"), ({"a": [1, -2]}, "negative"), ([], "non-empty"),
                   ({"a": ["x"]}, "integers")):
    path = tmp_path / "bad.code"
    path.write_text(json.dumps(bad))
    with pytest.raises(ConversionError, match=why):
      convert_grdr.read_codes(path)


def test_converter_refuses_unknown_missing_mismatched_and_diverging_keys():
  z, _ = _load("grdr_losses.npz")
  base = {k[3:]: z[k] for k in z.files if k.startswith("sd/")}
  sd = StateDict({**base, "video_rqvae.encoder.mlps.0.mlp_layers.4.weight": np.zeros((3, 3), np.float32)}, "x.pt")
  convert_grdr.convert(sd)
  with pytest.raises(ConversionError, match="unknown key 'video_rqvae.encoder.mlps.0.mlp_layers.4.weight'"):
    sd.finish()
  missing = {k: v for k, v in base.items() if k != "model.decoder.block.1.layer.2.DenseReluDense.wo.weight"}
  with pytest.raises(ConversionError, match="missing key 'model.decoder.block.1.layer.2.DenseReluDense.wo.weight'"):
    convert_grdr.convert(StateDict(missing, "x.pt"))
  wrong = {**base, "start_token_embedding": np.zeros((2, 32), np.float32)}
  with pytest.raises(ConversionError, match="'start_token_embedding' has shape"):
    convert_grdr.convert(StateDict(wrong, "x.pt"))
  diverged = {**base, "centroids.1.codebook.weight": base["centroids.1.codebook.weight"] + 1}
  with pytest.raises(ConversionError, match="centroids.1.codebook.weight"):
    convert_grdr.convert(StateDict(diverged, "x.pt"))
  params, info = convert_grdr.convert(StateDict(base, "x.pt"), vocab_size=20, hidden=4, tau_align=0.5)
  assert params["query_embed"]["embedding"].shape == (20, 32) and info["model"]["retriever"]["vocab_size"] == 20
  np.testing.assert_array_equal(params["query_embed"]["embedding"][1:], base["model.shared.weight"][:19])
  assert params["tokenizer"]["encoder"]["w1"].shape == (2, 64, 4)
  np.testing.assert_allclose(params["log_tau_align"], math.log(0.5), rtol=1e-6)
