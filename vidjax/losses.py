"""Training objectives, each a pure function of arrays.

CAST (../shared/papers/cast.txt §2.4, eq. 6-9): the type-aware contrastive objective
    L = L_batch + λ_s·L_state + λ_i·L_ident
with an in-batch InfoNCE term (eq. 6) and two local terms that contrast the positive against its
own mined state negatives (eq. 7) and identity negatives (eq. 8) in separate denominators.

Masks and the paper's zero-vector padding. App. B says that when an instance has too few mined
negatives the missing ones are "zero vectors". A zero vector has cosine similarity 0 with
anything, so it still adds exp(0/τ) = 1 to the denominator. `cast_loss` follows the paper when the
pipeline pads with zero vectors and passes mask = 1 for them (the default when no mask is given);
passing mask = 0 instead drops the padded slots from the denominator entirely. A row whose
negatives are all masked contributes log(1) = 0 to that term, and every term is still averaged over
all B rows (the 1/B of eq. 7-8). The in-batch term has no mask: as in eq. 6 every other row's
positive is a negative, even if two rows share one target clip.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from vidjax.ops import l2_normalize


def _check(name, x, shape):
  if tuple(x.shape) != tuple(shape):
    raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(x.shape)}")


def _local_term(pos_logit: jax.Array, neg_logits: jax.Array, neg_mask: jax.Array) -> jax.Array:
  """Mean over rows of -log(e^pos / (e^pos + Σ_masked e^neg)): [B], [B, K], [B, K] -> []."""
  neg_logits = jnp.where(neg_mask > 0, neg_logits, -jnp.inf)
  logits = jnp.concatenate([pos_logit[:, None], neg_logits], axis=1)
  return jnp.mean(jax.nn.logsumexp(logits, axis=1) - pos_logit)


def type_aware_contrastive(sim_pos: jax.Array, sim_batch: jax.Array, sim_state: jax.Array,
                           state_mask: jax.Array, sim_ident: jax.Array, ident_mask: jax.Array,
                           tau: float = 0.07, lambda_s: float = 5.0, lambda_i: float = 1.0):
  """CAST type-aware contrastive loss (eq. 6-9) from precomputed similarities.

  Args:
    sim_pos: [B] sim(v̂_i, v_i^+), the numerator of eq. 7-8.
    sim_batch: [B, B] sim(v̂_i, v_j^+); the diagonal holds the positives (eq. 6 numerator).
    sim_state: [B, Ks] sim(v̂_i, state negative k).
    state_mask: [B, Ks] 1 = include in the eq. 7 denominator, 0 = exclude.
    sim_ident: [B, Ki] sim(v̂_i, identity negative k).
    ident_mask: [B, Ki] 1 = include in the eq. 8 denominator, 0 = exclude.
    tau: temperature τ (0.07 in the paper).
    lambda_s, lambda_i: weights of the state and identity terms (5.0 and 1.0 in the paper).

  Returns:
    (loss [], {"batch": [], "state": [], "ident": []}) float32; loss = batch + λ_s·state +
    λ_i·ident. Any score works in place of cosine similarity (e.g. Late Fusion (Learned) scores).
  """
  b = sim_pos.shape[0]
  _check("sim_pos", sim_pos, (b,))
  _check("sim_batch", sim_batch, (b, b))
  _check("state_mask", state_mask, (b, sim_state.shape[-1]))
  _check("sim_state", sim_state, (b, sim_state.shape[-1]))
  _check("ident_mask", ident_mask, (b, sim_ident.shape[-1]))
  _check("sim_ident", sim_ident, (b, sim_ident.shape[-1]))
  f32 = lambda x: jnp.asarray(x, jnp.float32)
  batch_logits = f32(sim_batch) / tau
  l_batch = jnp.mean(jax.nn.logsumexp(batch_logits, axis=1) - jnp.diagonal(batch_logits))
  pos_logit = f32(sim_pos) / tau
  l_state = _local_term(pos_logit, f32(sim_state) / tau, state_mask)
  l_ident = _local_term(pos_logit, f32(sim_ident) / tau, ident_mask)
  loss = l_batch + lambda_s * l_state + lambda_i * l_ident
  return loss, {"batch": l_batch, "state": l_state, "ident": l_ident}


def cast_loss(v_hat: jax.Array, pos: jax.Array, state_negs: jax.Array,
              state_mask: Optional[jax.Array], ident_negs: jax.Array,
              ident_mask: Optional[jax.Array], tau: float = 0.07, lambda_s: float = 5.0,
              lambda_i: float = 1.0):
  """CAST loss from embeddings: cosine similarities, then `type_aware_contrastive`.

  Args:
    v_hat: [B, D] predicted next-state embeddings.
    pos: [B, D] ground-truth continuation embeddings v^+ (also the in-batch negatives).
    state_negs: [B, Ks, D] mined state negatives (zero vectors where missing).
    state_mask: [B, Ks] or None (= all ones, the paper's zero-vector padding kept).
    ident_negs: [B, Ki, D] mined identity negatives (zero vectors where missing).
    ident_mask: [B, Ki] or None (= all ones).
    tau, lambda_s, lambda_i: as in `type_aware_contrastive`.

  Returns:
    (loss [], {"batch", "state", "ident"}) as `type_aware_contrastive`.
  """
  # Zero vectors (the paper's padding) normalise to 0, so their cosine is 0 (ops.NORM_EPS).
  v, p = (l2_normalize(jnp.asarray(x, jnp.float32)) for x in (v_hat, pos))
  s, i = (l2_normalize(jnp.asarray(x, jnp.float32)) for x in (state_negs, ident_negs))
  if state_mask is None:
    state_mask = jnp.ones(s.shape[:2], jnp.float32)
  if ident_mask is None:
    ident_mask = jnp.ones(i.shape[:2], jnp.float32)
  sim_batch = v @ p.T
  return type_aware_contrastive(
      jnp.sum(v * p, axis=-1), sim_batch, jnp.einsum("bd,bkd->bk", v, s), state_mask,
      jnp.einsum("bd,bkd->bk", v, i), ident_mask, tau=tau, lambda_s=lambda_s, lambda_i=lambda_i)
