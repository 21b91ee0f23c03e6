"""TIGER's RQ-VAE (`vidjax.models.gr_baselines.RQVAE`) held against the official baseline of GRDR's Tables 1-2
(JasonCodeMaker/GRDR baselines/mm_semantictvr/index/models/rqvae.py RQVAE; tests/golden/tiger_rqvae.npz, written by
bench/goldens/grdr.py; its meta names the files' commits): the MLP encoder and decoder, the Euclidean residual
quantizer (codes, quantized latent, the official stop-gradients and its per-layer straight-through), and the losses
composed from vidjax's primitives with the gradients they give the encoder and the codebooks.

The official loss reduces by element means (mse: over rows and D, then the mean over layers); vidjax's
`euclidean_rq_loss` sums over the layers and D: the official value is vidjax's / (M D) (pinned below).
"""
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidjax import losses
from vidjax.models.gr_baselines import RQVAE, RQVAEConfig

pytestmark = pytest.mark.highest_precision

GOLDEN = Path(__file__).parent / "golden"


def _params(z, layers: int, hidden: int) -> dict:
  """The official state dict as RQVAE params: MLPLayers' Linear i sits at mlp_layers.{3 i + 1} (Dropout, Linear,
  ReLU per layer); torch's [out, in] weights are flax's kernels transposed."""
  def mlp(part):
    names = [f"dense_{i}" for i in range(hidden)] + ["out"]
    return {n: {"kernel": z[f"sd/{part}.mlp_layers.{3 * i + 1}.weight"].T,
                "bias": z[f"sd/{part}.mlp_layers.{3 * i + 1}.bias"]} for i, n in enumerate(names)}
  return {"encoder": mlp("encoder"), "decoder": mlp("decoder"),
          **{f"codebook_{l}": z[f"sd/rq.vq_layers.{l}.embedding.weight"] for l in range(layers)}}


@pytest.mark.parametrize("scale", ["real", "unit"])
def test_rqvae_forward_losses_and_gradients_equal_the_official(scale):
  z = np.load(GOLDEN / "tiger_rqvae.npz")
  meta = json.loads(str(z["meta"]))
  cfg = meta["config"]
  m, e_dim = len(cfg["num_emb_list"]), cfg["e_dim"]
  model = RQVAE(RQVAEConfig(feature_dim=cfg["in_dim"], hidden=tuple(cfg["layers"]), latent_dim=e_dim, num_layers=m,
                            num_codes=cfg["num_emb_list"][0]))
  params = jax.tree.map(jnp.asarray, _params(z, m, len(cfg["layers"])))
  x = jnp.asarray(z[f"in/{scale}/x"])
  out = jax.jit(model.apply)({"params": params}, x)
  np.testing.assert_allclose(out["z"], z[f"out/{scale}/encoded"], rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(out["codes"], z[f"out/{scale}/codes"])
  np.testing.assert_allclose(out["z_hat"], z[f"out/{scale}/x_q"], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out["reconstruction"], z[f"out/{scale}/reconstruction"], rtol=1e-5, atol=1e-6)

  def official_loss(p):  # rqvae.RQVAE.compute_loss: mse(reconstruction, x) + the quantizer's mean of layer losses
    o = model.apply({"params": p}, x)
    rq = losses.euclidean_rq_loss(o["residuals"], o["selected"], cfg["beta"]) / (m * e_dim)
    recon = jnp.mean(jnp.square(o["reconstruction"] - x))
    return rq + recon, (rq, recon)

  (total, (rq, recon)), grads = jax.value_and_grad(official_loss, has_aux=True)(params)
  np.testing.assert_allclose(rq, z[f"out/{scale}/rq_loss"], rtol=1e-5)
  np.testing.assert_allclose(recon, z[f"out/{scale}/recon_loss"], rtol=1e-5)
  np.testing.assert_allclose(total, z[f"out/{scale}/total"], rtol=1e-5)
  # gradients: the straight-through is one per layer (M x the identity into the encoder) and the residuals subtract
  # the codewords under a stop-gradient (the commitment term moves no earlier codebook); relative to their size
  g_enc = z[f"out/{scale}/grad_encoder_0"].T
  np.testing.assert_allclose(grads["encoder"]["dense_0"]["kernel"], g_enc, rtol=1e-4,
                             atol=1e-5 * np.abs(g_enc).max())
  g_books = z[f"out/{scale}/grad_books"]
  got_books = np.stack([grads[f"codebook_{l}"] for l in range(m)])
  np.testing.assert_allclose(got_books, g_books, rtol=1e-4, atol=1e-5 * np.abs(g_books).max())
