"""Training objectives, each a pure function of arrays.

VEDJE (../shared/papers/vedje.txt eq. 4, 6, App. A.3): L = L_vtm + L_vtc + L_mlm + L_delta at equal
weights -- `vtm_loss` (softmax cross-entropy over each query's candidate scores, tau = 1),
`vtc_loss` (symmetric InfoNCE, logit scale 20, against frozen stage-1 video embeddings),
`mlm_loss` (cross-entropy on the masked text positions) and `future_delta_loss` (eq. 4).

GRDR (../shared/papers/grdr.txt §3.2-3.3): `rq_loss` (eq. 6, codebook + β·commitment),
`cosine_reconstruction_loss` (L_Rec = 1 - cos), `alignment_loss` (L_CL, eq. 9) and
`code_cross_entropy` (eq. 8 + 11; summed over earlier layers and both modalities it is L_HC, eq. 10).

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

from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

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
  # Zero vectors (the paper's padding) normalise to 0, so their cosine is 0 (ops.l2_normalize).
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


# ------------------------------------------------------------------------------------------------
# VEDJE (eq. 4, 6; App. A.3).


def _masked_logits(logits: jax.Array, mask: Optional[jax.Array]) -> jax.Array:
  logits = jnp.asarray(logits, jnp.float32)
  if mask is None:
    return logits
  _check("mask", mask, logits.shape)
  return jnp.where(jnp.asarray(mask) > 0, logits, -jnp.inf)


def vtm_loss(scores: jax.Array, positive: jax.Array, mask: Optional[jax.Array] = None,
             tau: float = 1.0) -> jax.Array:
  """L_vtm: softmax cross-entropy over each query's candidate scores with the positive as target.

  Args:
    scores: [B, K] pair scores s(q_b, v_k) (the positive among them).
    positive: int [B], the positive's column.
    mask: [B, K] 1 = a real candidate (padding slots are left out of the softmax); None = all real.
    tau: temperature (1.0 in App. A.3).

  Returns:
    the mean over rows of -log softmax(scores / tau)[positive].
  """
  if scores.ndim != 2:
    raise ValueError(f"scores must be [B, K], got {tuple(scores.shape)}")
  _check("positive", positive, scores.shape[:1])
  logits = _masked_logits(scores, mask) / tau
  logp = jax.nn.log_softmax(logits, axis=-1)
  return -jnp.mean(jnp.take_along_axis(logp, jnp.asarray(positive)[:, None], axis=1))


def multi_positive_softmax(scores: jax.Array, positive: jax.Array, mask: Optional[jax.Array] = None,
                           tau: float = 1.0) -> jax.Array:
  """Softmax cross-entropy over each query's candidates with every positive as the target (the stack's
  pair reranker, `vidjax.models.pair`): -log(sum_pos e^{s/tau} / sum_all e^{s/tau}).

  Args:
    scores: [B, K] pair scores.
    positive: [B, K] 1 = the candidate matches the query (at least one per row with a real candidate).
    mask: [B, K] 1 = a real candidate (padding slots are left out of both sums); None = all real.
    tau: temperature.

  Returns:
    the mean over rows; a row without a positive among its real candidates contributes 0.
  """
  if scores.ndim != 2:
    raise ValueError(f"scores must be [B, K], got {tuple(scores.shape)}")
  _check("positive", positive, scores.shape)
  logits = _masked_logits(scores, mask) / tau
  pos = jnp.asarray(positive) > 0
  if mask is not None:
    pos = pos & (jnp.asarray(mask) > 0)
  has = pos.any(axis=1)
  top = jax.nn.logsumexp(jnp.where(pos, logits, -1e30), axis=1)  # finite: no NaN gradient without positives
  every = jax.nn.logsumexp(logits, axis=1)
  return jnp.mean(jnp.where(has, every - top, 0.0))


def vtc_loss(text: jax.Array, video: jax.Array, logit_scale: float = 20.0) -> jax.Array:
  """L_vtc: symmetric in-batch InfoNCE between text projections and frozen video embeddings.

  Args:
    text: [B, D] projected text [CLS] vectors; video: [B, D] stage-1 video embeddings of the
      matching videos (row b matches row b). Both are L2-normalized here.
    logit_scale: 20.0 (App. A.3).

  Returns:
    (CE(text -> video) + CE(video -> text)) / 2, each averaged over the batch.
  """
  _check("video", video, text.shape)
  t, v = l2_normalize(jnp.asarray(text, jnp.float32)), l2_normalize(jnp.asarray(video, jnp.float32))
  logits = logit_scale * t @ v.T
  diag = jnp.arange(t.shape[0])
  t2v = -jnp.mean(jax.nn.log_softmax(logits, axis=1)[diag, diag])
  v2t = -jnp.mean(jax.nn.log_softmax(logits, axis=0)[diag, diag])
  return 0.5 * (t2v + v2t)


def mlm_loss(logits: jax.Array, labels: jax.Array, mask: jax.Array) -> jax.Array:
  """L_mlm: cross-entropy of the vocabulary logits at the masked text positions.

  Args:
    logits: [B, S, V]; labels: int [B, S] original token ids; mask: [B, S] 1 = a masked position
      to predict.

  Returns:
    the mean over masked positions (0 when nothing is masked).
  """
  if logits.ndim != 3:
    raise ValueError(f"logits must be [B, S, V], got {tuple(logits.shape)}")
  _check("labels", labels, logits.shape[:2])
  _check("mask", mask, logits.shape[:2])
  logp = jax.nn.log_softmax(jnp.asarray(logits, jnp.float32), axis=-1)
  nll = -jnp.take_along_axis(logp, jnp.asarray(labels)[..., None], axis=-1)[..., 0]
  m = jnp.asarray(mask, jnp.float32)
  return jnp.sum(nll * m) / jnp.maximum(jnp.sum(m), 1.0)


def future_delta_targets(patches: jax.Array, horizons=(3,), absolute: bool = False):
  """The targets of eq. 4 and their validity: Delta_{t,h} = X_{t+h} - X_t over Omega.

  Args:
    patches: [B, T, P, d_v] frozen patch features X.
    horizons: the horizon set H ({3} by default, A.3).
    absolute: the A.12 ablation (Table 14): the target is the absolute future feature X_{t+h} instead of the delta,
      each patch vector L2-normalised ("target features L2-normalized", Table 14's caption).

  Returns:
    (targets [B, T, |H|, P, d_v], valid [T, |H|]) with valid[t, i] = t + h_i < T (0-based t).
  """
  b, t_len, p, d = patches.shape
  x = jnp.asarray(patches, jnp.float32)
  targets, valid = [], []
  for h in horizons:
    if not 1 <= h:
      raise ValueError(f"horizons must be >= 1, got {tuple(horizons)}")
    future = jnp.concatenate([x[:, h:], jnp.zeros((b, min(h, t_len), p, d), x.dtype)], axis=1)[:, :t_len]
    targets.append(l2_normalize(future) if absolute else future - x)
    valid.append(jnp.arange(t_len) + h < t_len)
  return jnp.stack(targets, axis=2), jnp.stack(valid, axis=1).astype(jnp.float32)


def future_delta_loss(pred: jax.Array, targets: jax.Array, valid: jax.Array) -> jax.Array:
  """L_delta (eq. 4): the per-element mean squared error, averaged over the valid (t, h) in Omega.

  Args:
    pred: [B, T, |H|, P, d_v] predicted deltas; targets: same shape; valid: [T, |H|] (or
      [B, T, |H|]) 1 = (t, h) in Omega.

  Returns:
    (1/|Omega|) sum over Omega of mean_{p, d} (pred - target)^2, averaged over the batch.
  """
  _check("targets", targets, pred.shape)
  err = jnp.mean(jnp.square(jnp.asarray(pred, jnp.float32) - targets), axis=(-2, -1))  # [B, T, |H|]
  w = jnp.broadcast_to(jnp.asarray(valid, jnp.float32), err.shape)
  return jnp.sum(err * w) / jnp.maximum(jnp.sum(w), 1.0)


def vedje_loss(outputs, batch, *, tau_vtm: float = 1.0, logit_scale: float = 20.0,
               weights=(1.0, 1.0, 1.0, 1.0)):
  """L = L_vtm + L_vtc + L_mlm + L_delta (eq. 6, equal weights in the paper).

  Args:
    outputs: `vidjax.models.vedje.Vedje`'s training outputs: 'scores' [B, K], 'text_embedding'
      [B, D_clip], 'mlm_logits' [B, S, V], 'deltas' [B, T, |H|, P, d_v].
    batch: 'positive' int [B] (the positive's column of 'scores'), optional 'candidate_mask' [B, K],
      'stage1_video' [B, D_clip] (frozen stage-1 embeddings of the batch's videos), 'input_ids'
      [B, S] (original ids) and 'mlm_mask' [B, S], 'delta_targets' and 'delta_valid' from
      `future_delta_targets`.
    weights: (vtm, vtc, mlm, delta); a zero drops a term (the A.13 loss-stack ablation).

  Returns:
    (loss, {"vtm", "vtc", "mlm", "delta"}).
  """
  terms = {
      "vtm": vtm_loss(outputs["scores"], batch["positive"], batch.get("candidate_mask"), tau=tau_vtm),
      "vtc": vtc_loss(outputs["text_embedding"], batch["stage1_video"], logit_scale=logit_scale),
      "mlm": mlm_loss(outputs["mlm_logits"], batch["input_ids"], batch["mlm_mask"]),
      "delta": future_delta_loss(outputs["deltas"], batch["delta_targets"], batch["delta_valid"]),
  }
  loss = sum(w * terms[k] for w, k in zip(weights, ("vtm", "vtc", "mlm", "delta")))
  return loss, terms


def rq_loss(z_hat: jax.Array, z: jax.Array, beta: float = 0.25) -> jax.Array:
  """L_RQ (GRDR eq. 6): ||z_hat - sg[z]||^2 + beta * ||sg[z_hat] - z||^2.

  Args:
    z_hat: [..., D] the quantized vectors (sum of the selected codebook entries); the codebook
      term moves the codebook towards the encoder output.
    z: [..., D] the encoder's latent vectors; the commitment term moves them towards the codebook.
    beta: commitment weight. The paper does not give it; 0.25 is the VQ-VAE / RQ-VAE value.

  Returns:
    the squared L2 norms (summed over D) averaged over the leading dims.
  """
  _check("z_hat", z_hat, z.shape)
  z_hat, z = jnp.asarray(z_hat, jnp.float32), jnp.asarray(z, jnp.float32)
  codebook = jnp.sum(jnp.square(z_hat - jax.lax.stop_gradient(z)), axis=-1)
  commit = jnp.sum(jnp.square(jax.lax.stop_gradient(z_hat) - z), axis=-1)
  return jnp.mean(codebook + beta * commit)


def cosine_reconstruction_loss(target: jax.Array, reconstruction: jax.Array) -> jax.Array:
  """L_Rec (GRDR §3.2): mean over rows of 1 - cos(f_v, f~_v); [..., D] each."""
  _check("reconstruction", reconstruction, target.shape)
  t = l2_normalize(jnp.asarray(target, jnp.float32))
  r = l2_normalize(jnp.asarray(reconstruction, jnp.float32))
  return jnp.mean(1.0 - jnp.sum(t * r, axis=-1))


def alignment_loss(z: jax.Array, h: jax.Array, tau: jax.Array) -> jax.Array:
  """L_CL (GRDR eq. 9): each query's cumulative decoder feature h^(m) against the batch's views.

  Args:
    z: [B, D] the latent view z_i of each row's video that the row's query is aligned with.
    h: [B, D] the retriever's cumulative decoder features h^(m) = sum_{l <= m} h_l of the queries.
    tau: the (learnable) temperature, a scalar.

  Returns:
    mean over rows b of -log( exp(cos(z_b, h_b)/tau) / sum_j exp(cos(z_j, h_b)/tau) ).
  """
  _check("h", h, z.shape)
  logits = (l2_normalize(jnp.asarray(h, jnp.float32)) @ l2_normalize(jnp.asarray(z, jnp.float32)).T) / tau
  return jnp.mean(jax.nn.logsumexp(logits, axis=1) - jnp.diagonal(logits))


def view_set_alignment_loss(z: jax.Array, centres: jax.Array, valid: jax.Array, use_weight: float = 0.5) -> jax.Array:
  """Aligns a video's N_v views with its query-cluster centres as a set (no fixed view <-> cluster pairing).

  Cover: every valid centre is near its closest view; use: every view is near its closest valid centre
  (so no view drifts off to nothing). Distances are 1 - cosine.

  Args:
    z: [B, N, D] the views of B videos; centres: [B, K, D] their query-cluster centres (any order);
    valid: [B, K] 1 = the cluster has queries (each row needs at least one).
    use_weight: weight of the use term.

  Returns:
    mean over videos of  mean_{valid k} (1 - max_i cos(z_i, c_k)) + use_weight * mean_i (1 - max_{valid k} cos(z_i, c_k)).
  """
  _check("valid", valid, centres.shape[:2])
  sim = jnp.einsum("bid,bkd->bik", l2_normalize(jnp.asarray(z, jnp.float32)), l2_normalize(jnp.asarray(centres, jnp.float32)))
  m = jnp.asarray(valid, jnp.float32)
  cover = jnp.sum((1.0 - jnp.max(sim, axis=1)) * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)
  use = jnp.mean(1.0 - jnp.max(jnp.where(m[:, None, :] > 0, sim, -1.0), axis=2), axis=1)
  return jnp.mean(cover + use_weight * use)


def code_logits(h: jax.Array, codebook: jax.Array, tau: jax.Array) -> jax.Array:
  """GRDR eq. 8 before the softmax: cos(h, C) / tau; h [..., D], codebook [K, D] -> [..., K]."""
  return (l2_normalize(jnp.asarray(h, jnp.float32)) @ l2_normalize(jnp.asarray(codebook, jnp.float32)).T) / tau


def code_cross_entropy(h: jax.Array, codebook: jax.Array, targets: jax.Array, tau: jax.Array,
                       mask: Optional[jax.Array] = None) -> jax.Array:
  """-log P(c | ·) with P = softmax(cos(h, C) / tau) (GRDR eq. 8, 11), averaged over the rows.

  With h the retriever's decoder output at step m and the tokenizer's code as target this is L_CE
  (eq. 11); with h the video's residual at layer l < m it is the video half of L_HC (eq. 10).

  Args:
    h: [..., D]; codebook: [K, D] (one layer's C^(m)); targets: int [...] codes in [0, K).
    tau: temperature, a scalar.
    mask: optional [...] weights (1 = counted); the mean is over the counted rows.
  """
  _check("targets", targets, h.shape[:-1])
  logp = jax.nn.log_softmax(code_logits(h, codebook, tau), axis=-1)
  nll = -jnp.take_along_axis(logp, jnp.asarray(targets)[..., None], axis=-1)[..., 0]
  if mask is None:
    return jnp.mean(nll)
  mask = jnp.asarray(mask, jnp.float32)
  return jnp.sum(nll * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def fixed_id_loss(h: jax.Array, codebooks: jax.Array, codes: jax.Array, tau: jax.Array):
  """L_CE (eq. 11) summed over the M layers towards fixed semantic IDs (a retriever trained after its tokenizer:
  GRDR's tokenizer_first schedule, Table 3's two-stage row, TIGER, T2VIndexer). h [B, M, D] (teacher-forced),
  codebooks [M, K, D], codes int [B, M]. Returns (loss, {"ce<l>": value})."""
  ces = [code_cross_entropy(h[:, l], codebooks[l], codes[:, l], tau) for l in range(codes.shape[1])]
  return sum(ces), {f"ce{l + 1}": c for l, c in enumerate(ces)}


def euclidean_rq_loss(residuals: jax.Array, selected: jax.Array, beta: float = 0.25) -> jax.Array:
  """TIGER's RQ loss (Rajput et al. 2023 §3.1): sum over the M layers of ||sg[r_d] - e_{c_d}||^2 + beta *
  ||r_d - sg[e_{c_d}]||^2 (codebook and commitment terms), averaged over the rows.

  Args:
    residuals: [..., M, D] the residual each layer quantized (r_1 = z); selected: [..., M, D] the codewords it chose.
    beta: commitment weight (TIGER: 0.25).
  """
  _check("selected", selected, residuals.shape)
  r, e = jnp.asarray(residuals, jnp.float32), jnp.asarray(selected, jnp.float32)
  codebook = jnp.sum(jnp.square(jax.lax.stop_gradient(r) - e), axis=(-2, -1))
  commit = jnp.sum(jnp.square(r - jax.lax.stop_gradient(e)), axis=(-2, -1))
  return jnp.mean(codebook + beta * commit)


# ----------------------------------------------------------------------------------------------
# VideoComp (../shared/papers/videocomp.txt §3.2, eq. 1-2).


# The objectives of `comp_total_loss`: L_con (eq. 1), NegCLIP, eq. 2 on L_con, eq. 2 on NegCLIP's L_con.
COMP_MODES = ("contrastive", "negclip", "comploss", "negclip_pref")


def clip_contrastive_loss(video: jax.Array, text: jax.Array, tau: jax.Array,
                          text_negatives: Optional[jax.Array] = None,
                          negative_mask: Optional[jax.Array] = None) -> jax.Array:
  """L_con (eq. 1): symmetric in-batch InfoNCE on cosine similarities / tau; NegCLIP with negatives.

  Args:
    video, text: [B, D]; row b of each is a positive pair (L2-normalised here).
    tau: the (learnable) temperature.
    text_negatives: optional [B, N, D] disrupted texts. NegCLIP (Yuksekgonul et al.): they join the
      text side of the V2T softmax for every video of the batch (B + B·N texts); T2V is unchanged.
    negative_mask: optional [B, N], 1 = a real negative, 0 = padding (left out of every softmax).

  Returns:
    (L_V2T + L_T2V) / 2, each averaged over the batch.
  """
  _check("text", text, video.shape)
  v, t = l2_normalize(jnp.asarray(video, jnp.float32)), l2_normalize(jnp.asarray(text, jnp.float32))
  logits = v @ t.T / tau
  diag = jnp.arange(v.shape[0])
  t2v = -jnp.mean(jax.nn.log_softmax(logits, axis=0)[diag, diag])
  v2t_logits = logits
  if text_negatives is not None:
    b, n = text_negatives.shape[:2]
    _check("text_negatives", text_negatives, (b, n, video.shape[1]))
    neg = l2_normalize(jnp.asarray(text_negatives, jnp.float32)).reshape(b * n, -1)
    neg_logits = v @ neg.T / tau
    if negative_mask is not None:
      _check("negative_mask", negative_mask, (b, n))
      neg_logits = jnp.where(jnp.asarray(negative_mask).reshape(1, b * n) > 0, neg_logits, -jnp.inf)
    v2t_logits = jnp.concatenate([logits, neg_logits], axis=1)
  v2t = -jnp.mean(jax.nn.log_softmax(v2t_logits, axis=1)[diag, diag])
  return 0.5 * (v2t + t2v)


def similarity_infonce(sims: jax.Array, logit_scale: jax.Array, same: Optional[jax.Array] = None) -> jax.Array:
  """Symmetric InfoNCE over a batch's similarity matrix: CLIP4Clip's and X-Pool's loss (X-Pool §4: s(t, v) is per
  pair, so the matrix holds B x B text-conditioned video embeddings' cosines).

  Args:
    sims: [B, B] similarities, row i the i-th text, column j the j-th video; (i, i) are the positives.
    logit_scale: scalar, 1 / temperature.
    same: optional bool [B, B], True where text i also describes video j (a second caption of one video in the
      batch): such off-diagonal entries are left out of both softmaxes rather than counted as negatives.

  Returns:
    (L_t2v + L_v2t) / 2: cross-entropy of each text over the videos (rows) and of each video over the texts
    (columns), each averaged over the batch.
  """
  b = sims.shape[0]
  _check("sims", sims, (b, b))
  logits = jnp.asarray(sims, jnp.float32) * logit_scale
  if same is not None:
    _check("same", same, (b, b))
    logits = jnp.where(jnp.asarray(same) & ~jnp.eye(b, dtype=bool), -jnp.inf, logits)
  diag = jnp.arange(b)
  t2v = -jnp.mean(jax.nn.log_softmax(logits, axis=1)[diag, diag])
  v2t = -jnp.mean(jax.nn.log_softmax(logits, axis=0)[diag, diag])
  return 0.5 * (t2v + v2t)


def grouped_infonce(video: jax.Array, text: jax.Array, groups: jax.Array, tau: jax.Array) -> jax.Array:
  """Symmetric in-batch InfoNCE where rows with the same text are all positives (a backbone's contrastive
  pretraining on captions that several clips share: `vidjax.methods.backbone`).

  Args:
    video, text: [B, D]; row b of each is a pair (L2-normalised here).
    groups: int [B], the text's id; rows b, c with groups[b] == groups[c] count as matching pairs.
    tau: the (learnable) temperature.

  Returns:
    (L_T2V + L_V2T) / 2 of `multi_positive_softmax` over the [B, B] cosine / tau matrix and its transpose.
  """
  _check("text", text, video.shape)
  _check("groups", groups, video.shape[:1])
  v, t = l2_normalize(jnp.asarray(video, jnp.float32)), l2_normalize(jnp.asarray(text, jnp.float32))
  logits = t @ v.T / tau
  same = jnp.asarray(groups)[:, None] == jnp.asarray(groups)[None, :]
  return 0.5 * (multi_positive_softmax(logits, same) + multi_positive_softmax(logits.T, same))


def frame_text_infonce(frames: jax.Array, text: jax.Array, groups: jax.Array, valid: jax.Array,
                       tau: jax.Array) -> jax.Array:
  """Symmetric in-batch InfoNCE between single frames and texts (a CLIP-style image-text term beside
  `grouped_infonce`'s clip-text one): every frame of a valid row is a positive of every valid text of its group.

  `grouped_infonce` cannot express it: its queries and candidates are the same B rows, and rows that take no part
  (`valid` 0: a whole video, whose frames show several steps) would still sit in every denominator.

  Args:
    frames: [B, T, D] per-frame embeddings (L2-normalised here).
    text: [B, D] each row's text.
    groups: int [B], the text's id; frame (b, t) and text c match when groups[b] == groups[c].
    valid: [B], 1 = the row's frames and text take part; 0 = left out of every query and every denominator.
    tau: the temperature.

  Returns:
    (L_T2F + L_F2T) / 2: -log(sum over positives of the softmax) of each valid text over the valid rows' B*T
    frames, averaged over the valid texts, and of each valid frame over the valid texts, averaged over the valid
    frames; 0 when no row is valid.
  """
  b, t, d = frames.shape
  _check("text", text, (b, d))
  _check("groups", groups, (b,))
  _check("valid", valid, (b,))
  f = l2_normalize(jnp.asarray(frames, jnp.float32)).reshape(b * t, d)
  logits = l2_normalize(jnp.asarray(text, jnp.float32)) @ f.T / tau                          # [B, B*T]
  keep = jnp.asarray(valid) > 0
  same = jnp.repeat(jnp.asarray(groups)[:, None] == jnp.asarray(groups)[None, :], t, axis=1)  # [B, B*T]
  pair = jnp.repeat(keep[:, None] & keep[None, :], t, axis=1)
  count = jnp.maximum(keep.sum(), 1)

  def term(x, pos, real, rows, n):
    # Finite fills: a left-out row gets a finite loss (dropped by `rows`) and no NaN gradient.
    every = jax.nn.logsumexp(jnp.where(real, x, -1e30), axis=1)
    top = jax.nn.logsumexp(jnp.where(real & pos, x, -1e30), axis=1)
    return jnp.sum(jnp.where(rows, every - top, 0.0)) / n

  t2f = term(logits, same, pair, keep, count)
  f2t = term(logits.T, same.T, pair.T, jnp.repeat(keep, t), count * t)
  return 0.5 * (t2f + f2t)


def instance_infonce(video: jax.Array, groups: jax.Array, tau: jax.Array) -> jax.Array:
  """In-batch instance discrimination among video embeddings: each row's positives are the other rows of its
  group (the other clips of its source video), its negatives every other row; the row itself is left out.

  Args:
    video: [B, D] (L2-normalised here).
    groups: int [B], each row's source video; a row alone in its group contributes 0.
    tau: the temperature.

  Returns:
    `multi_positive_softmax` over the [B, B] cosine / tau matrix without its diagonal.
  """
  _check("groups", groups, video.shape[:1])
  v = l2_normalize(jnp.asarray(video, jnp.float32))
  others = ~jnp.eye(v.shape[0], dtype=bool)
  same = (jnp.asarray(groups)[:, None] == jnp.asarray(groups)[None, :]) & others
  return multi_positive_softmax(v @ v.T / tau, same, others)


def comp_preference_loss(sim_pos: jax.Array, sim_neg: jax.Array, mask: Optional[jax.Array] = None,
                         levels: Optional[Sequence[int]] = None) -> jax.Array:
  """L_pref (eq. 2): the positive above every negative, and each negative above the more disrupted ones.

  Args:
    sim_pos: [B] sim(V, T) (cosine).
    sim_neg: [B, N] sim(V, T_neg^i), columns in the hierarchy order: column i is less disrupted than
      column j > i (the order is the caller's config, e.g. temp-reorder, action-replace, multi).
    mask: optional [B, N], 1 = the negative exists; a hinge enters only when both of its sides exist.
    levels: optional [N] non-decreasing disruption levels of the columns; a hinge between two negatives
      enters only when their levels differ (equal levels: no order between them). None = 0..N-1, eq. 2 as
      written: every pair i < j hinged (VideoComp's default reading, `pref_order="paper"`).

  Returns:
    mean over the batch of  sum_i [s_i - s_pos]_+ + sum_{i<j, level_i<level_j} [s_j - s_i]_+.
  """
  b, n = sim_neg.shape
  _check("sim_pos", sim_pos, (b,))
  m = jnp.ones((b, n), jnp.float32) if mask is None else jnp.asarray(mask, jnp.float32)
  _check("mask", m, (b, n))
  lv = jnp.arange(n) if levels is None else jnp.asarray(levels)
  if lv.shape != (n,):
    raise ValueError(f"levels must have one entry per negative column ({n}), got shape {lv.shape}")
  to_pos = jnp.sum(m * jax.nn.relu(sim_neg - sim_pos[:, None]), axis=1)
  upper = (lv[:, None] < lv[None, :]).astype(jnp.float32)  # pairs i less disrupted than j
  pair = jax.nn.relu(sim_neg[:, None, :] - sim_neg[:, :, None])  # [b, i, j] = [s_j - s_i]_+
  pairs = jnp.sum(pair * upper * m[:, :, None] * m[:, None, :], axis=(1, 2))
  return jnp.mean(to_pos + pairs)


def comp_mode_weights(mode: str, lam: float) -> np.ndarray:
  """A `comp_total_loss` mode as numbers: float32 [2] = (1 if L_con holds the negatives (NegCLIP) else 0, the weight of
  L_pref: λ or 0). A train step that takes them as an input compiles once for every mode."""
  if mode not in COMP_MODES:
    raise ValueError(f"comp_total_loss: mode={mode!r} is not one of {COMP_MODES}")
  return np.array([mode in ("negclip", "negclip_pref"), lam if mode in ("comploss", "negclip_pref") else 0.0],
                  np.float32)


def comp_total_loss(video: jax.Array, text: jax.Array, text_negatives: jax.Array, negative_mask: jax.Array,
                    tau: jax.Array, *, mode: str = "comploss", lam: float = 100.0,
                    levels: Optional[Sequence[int]] = None, weights: Optional[jax.Array] = None
                    ) -> tuple[jax.Array, dict]:
  """The VideoComp training objectives (§3.2, §4.2; Table 4 rows) on unit or raw embeddings.

  Two readings of CompLoss: "comploss" is eq. 2 added to the plain L_con of eq. 1; "negclip_pref" reads §3.2's
  "we extend the standard contrastive loss" as extending NegCLIP's, so L_con already holds the disrupted texts as
  negatives (exactly the "negclip" mode's term) and eq. 2 is added on top.

  Args:
    video, text: [B, D] positive pairs; text_negatives: [B, N, D] in the hierarchy order; negative_mask:
      [B, N], 1 = the negative exists.
    tau: the temperature of L_con.
    mode: "contrastive" (L_con, eq. 1), "negclip" (L_con with the negatives in the text side of the
      softmax), "comploss" (L_total = L_con + lam * L_pref, eq. 2) or "negclip_pref" (NegCLIP's L_con +
      lam * L_pref).
    lam: λ (100, §4.2).
    levels: the negatives' disruption levels for L_pref (`comp_preference_loss`).
    weights: optional [2], possibly traced: `comp_mode_weights(mode, lam)`, given instead of `mode` and `lam` (which
      are then ignored), so that one compiled train step serves every mode.

  Returns:
    (loss, {"con": L_con, "pref": L_pref}); L_pref is reported in every mode (cosine similarities).
  """
  if weights is None:
    weights = comp_mode_weights(mode, lam)  # constants: XLA folds the selects below away
  v = l2_normalize(jnp.asarray(video, jnp.float32))
  t = l2_normalize(jnp.asarray(text, jnp.float32))
  n = l2_normalize(jnp.asarray(text_negatives, jnp.float32))
  con = clip_contrastive_loss(v, t, tau)
  if n.shape[1]:  # no negatives (N = 0): NegCLIP's L_con is L_con
    con = jnp.where(weights[0] > 0, clip_contrastive_loss(v, t, tau, n, negative_mask), con)
  pref = comp_preference_loss(jnp.sum(v * t, -1), jnp.einsum("bd,bnd->bn", v, n), negative_mask, levels)
  loss = jnp.where(weights[1] != 0, con + weights[1] * pref, con)
  return loss, {"con": con, "pref": pref}
