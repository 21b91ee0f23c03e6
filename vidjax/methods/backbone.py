"""A VideoPrism-LvT-shaped backbone trained on a release's own clips and captions, written in the official format.

No pretrained VideoPrism weights are reachable offline, and features from a random backbone carry no meaning. On a
corpus with videos and captions of its own (the rendered release corpus, `vidjax.worlds.release`, or any CVR-format
release) this trains the same two towers the official checkpoint holds -- `FactorizedVideoCLIP`'s video encoder and
its LvT text encoder, at a small size -- with a contrastive loss through the one train loop, and saves them as an
official `.npz` (`params/...` keys, `vidjax.checkpoints.save_npz`), so `configs/prepare.py` loads it exactly as it
loads the official checkpoint (`--config.model.checkpoint=...`, the same model overrides).

Pairs (`pairs_of`): each annotated step of a video (its segment, its caption) and each whole video (all its frames,
its steps' captions as one paragraph, `vidjax.data.comp.plain_paragraph`). Several clips may share a text (every video
of a rendered task shows the same steps): the loss counts them all as positives (`losses.grouped_infonce`) and the
summary counts a retrieved clip as correct when its text is the query (`metrics.best_relevant_ranks`).
"""
from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidjax import extract as engine
from vidjax import losses, metrics, sharding
from vidjax.data import pipeline
from vidjax.data import video as video_lib
from vidjax.data.annotations.types import Video
from vidjax.data.comp import plain_paragraph
from vidjax.models import videoprism as vp

KINDS = ("step", "video")  # a step's segment with its caption; a whole video with its paragraph


@dataclasses.dataclass
class Pairs:
  """Clips and their texts.

  Attributes:
    frames: uint8 [N, T, R, R, 3].
    text_index: int32 [N], each clip's text in `texts`.
    texts: the distinct texts.
    kinds: [N] strings from `KINDS`.
    video_ids: [N] the source video of each clip.
  """
  frames: np.ndarray
  text_index: np.ndarray
  texts: list[str]
  kinds: np.ndarray
  video_ids: list[str]

  def __len__(self) -> int:
    return len(self.text_index)


def pairs_of(videos: Sequence[Video], path_of: Callable[[str], str | None], num_frames: int, resolution: int,
             aspect: str = "squash", workers: int = 2) -> tuple[Pairs, dict[str, str]]:
  """Decodes every video once: its steps and itself (module docstring). Returns (pairs, {video id: why skipped})
  -- a video without a file, or whose file does not decode in full, is skipped."""
  skipped: dict[str, str] = {}
  found = []
  for v in videos:
    path = path_of(v.video_id)
    if path is None:
      skipped[v.video_id] = "no video file"
    else:
      found.append((v, path))

  def decode(item):
    v, path = item
    segments = [(c.start, c.end) for c in v.clips] + [None]
    return video_lib.decode_clips(path, segments, num_frames, resolution, aspect, uint8=True)

  frames, texts, kinds, video_ids = [], {}, [], []
  index = []
  with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
    for (v, _), decoded in zip(found, pool.map(decode, found)):
      if decoded.error is not None:
        skipped[v.video_id] = f"does not decode: {decoded.error}"
        continue
      captions = [c.text for c in v.clips]
      for text, kind in zip(captions + [plain_paragraph(captions)], ["step"] * len(captions) + ["video"]):
        index.append(texts.setdefault(text, len(texts)))
        kinds.append(kind)
        video_ids.append(v.video_id)
      frames.append(decoded.frames)
  if not frames:
    raise ValueError(f"none of the {len(videos)} videos has a decodable file (e.g. "
                     f"{list(skipped.items())[:3]})")
  return Pairs(np.concatenate(frames), np.asarray(index, np.int32), list(texts), np.asarray(kinds),
               video_ids), skipped


def pixel_stats(frames: np.ndarray, max_pixels: int = 1 << 20) -> tuple[np.ndarray, np.ndarray]:
  """Per-channel mean and std of uint8 frames [..., 3] in [0, 1] units (a strided subsample of the pixels)."""
  flat = frames.reshape(-1, 3)
  rows = flat[::max(1, len(flat) // max_pixels)].astype(np.float32) / np.float32(255)
  return rows.mean(axis=0), np.maximum(rows.std(axis=0), np.float32(1e-3))


def fold_pixel_norm(params: Mapping, mean: np.ndarray, std: np.ndarray) -> dict:
  """The model's params with the training input normalisation `(x - mean) / std` folded into the vision
  encoder's patch projection, so the result takes [0, 1] frames (the official input, what `configs/prepare.py`
  feeds) and computes exactly what the trained model computed on normalised frames. Patch vectors are in
  (row, col, channel) order (`vp.patchify`): row r of the kernel reads channel r % 3."""
  params = jax.tree.map(np.asarray, params)
  proj = params["vision_encoder"]["patch_projection"]["linear"]
  kernel, bias = proj["kernel"], proj["bias"]
  reps = kernel.shape[0] // 3
  inv = np.tile(1.0 / np.asarray(std, np.float64), reps)[:, None]
  shift = np.tile(np.asarray(mean, np.float64) / np.asarray(std, np.float64), reps)
  new_kernel = (kernel.astype(np.float64) * inv).astype(kernel.dtype)
  new_bias = (bias.astype(np.float64) - shift @ kernel.astype(np.float64)).astype(bias.dtype)
  out = copy.deepcopy(params)
  out["vision_encoder"]["patch_projection"]["linear"] = {"kernel": new_kernel, "bias": new_bias}
  return out


def init_fn(model, tau: float) -> Callable[[jax.Array], Any]:
  """rng -> {"model": the module's params (Flax's initialisers), "log_tau": log of the initial temperature}.

  The text tower's CLS embedding starts at zero: with Flax's init it is a random vector as large as a token's,
  shared by every text and carried by the residual stream to the output, so every caption's embedding starts at
  cosine ~0.998 to every other one and the contrastive gradient (which needs both towers to tell their inputs
  apart) is near zero. At zero, the CLS output is the attention over the caption's own tokens."""
  def fn(rng):
    params = vp.init_params(model, rng)["params"]
    text = dict(params["text_encoder"])
    text["cls_emb"] = jnp.zeros_like(text["cls_emb"])
    return {"model": {**params, "text_encoder": text}, "log_tau": jnp.log(jnp.float32(tau))}
  return fn


def loss_fn(model, min_tau: float = 0.01, pixel_mean=(0.0, 0.0, 0.0), pixel_std=(1.0, 1.0, 1.0),
            identity_weight: float = 0.0, frame_weight: float = 0.0):
  """`(params, batch, rng) -> (loss, aux)`: `losses.grouped_infonce` of the video and text embeddings, plus
  `identity_weight` x `losses.instance_infonce` of the video embeddings over the batch's instance groups (`batch_fn`'s
  partners: with "video" the clips of one video are each other's positives, so the embedding keeps which video a
  clip is from, which the caption term alone does not ask for), plus `frame_weight` x `losses.frame_text_infonce`
  of each frame's embedding and the texts. Batch: frames uint8 [B, T, R, R, 3], ids int [B, L], paddings [B, L]
  (1 = pad), group int [B] (the text's index), video int [B] (the instance group), step int [B] (1 = a step's
  segment), and with "clip" partners shift int [B, 2] (`shift_frames`).

  The frame term is CLIP's image-text loss beside the clip-text one, so that a single frame's embedding (the store's
  `frame_clip`, which X-Pool and CLIP4Clip attend over) lies in the text space too. Its frame embeddings are the ones
  extraction writes: the same forward pass with `return_frame_embeddings` (the LvT pooler on each frame's tokens).
  Every frame of a step row shows that step, so it is a positive of the row's caption group; whole-video rows span
  several steps and the batch has no per-frame step labels, so they are left out of the frame term (`step` 0), on
  both the frame and the text side. `frame_weight` 0 computes exactly the loss without the term.

  Frames go in as `(x / 255 - pixel_mean) / pixel_std` (per channel; `pixel_stats` of the training frames):
  the rendered frames are a flat grey board (mean ~0.57, std ~0.07), so in raw [0, 1] units the patch
  projection's output is nearly the same constant for every clip and the video embeddings start at cosine
  ~0.999 to each other. `fold_pixel_norm` moves the normalisation into the saved weights."""
  mean = jnp.asarray(pixel_mean, jnp.float32)
  std = jnp.asarray(pixel_std, jnp.float32)
  def fn(params, batch, rng):
    del rng  # VideoPrism has no dropout
    frames = shift_frames(batch["frames"], batch["shift"]) if "shift" in batch else batch["frames"]
    frames = (frames.astype(jnp.float32) / 255.0 - mean) / std
    video, text, out = model.apply({"params": params["model"]}, frames, batch["ids"], batch["paddings"], train=True,
                                   return_frame_embeddings=bool(frame_weight))
    tau = jnp.exp(jnp.maximum(params["log_tau"], jnp.log(min_tau)))
    loss = losses.grouped_infonce(video, text, batch["group"], tau)
    aux = {"tau": tau}
    if identity_weight:
      aux["identity"] = losses.instance_infonce(video, batch["video"], tau)
      loss = loss + identity_weight * aux["identity"]
    if frame_weight:
      aux["frame"] = losses.frame_text_infonce(out["frame_embeddings"], text, batch["group"], batch["step"], tau)
      loss = loss + frame_weight * aux["frame"]
    return loss, aux
  return fn


# `batch_fn(partners="clip")`: a partner view's largest shift, as a fraction of the frame's height and width
CLIP_SHIFT = 0.0625


def batch_rows(pairs: Pairs, ids: np.ndarray, paddings: np.ndarray,
               partners: str = "") -> tuple[Callable[[np.ndarray], dict], pipeline.Gather]:
  """(index batch [B] -> the loss's batch with frames and texts as rows, the `pipeline.Gather` of those rows):
  training gathers the frames (`pairs.frames`) and the tokenized texts (`ids` / `paddings` [len(pairs.texts), L]) on
  the device. `batch_fn` is the same batch gathered on the host.

  `partners` ("" = none): the batch's second half is replaced by a partner of each pair of its first half, so that
  `losses.instance_infonce` has positives in every batch; the batch's `video` holds the instance groups. "video": the
  partner is another clip of the same video, drawn at random, and the groups are the source videos. "clip": the
  partner is the same clip shifted by up to `CLIP_SHIFT` of its height and width (wrapping round; one shift per
  clip, every frame; the batch's `shift` int32 [B, 2], applied by `shift_frames` in the step), and the groups are the
  clips. Draws are seeded by the batch's indices: a resumed run sees the same batches."""
  video = np.unique(np.asarray(pairs.video_ids), return_inverse=True)[1].astype(np.int32)
  step = (pairs.kinds == "step").astype(np.int32)  # the rows whose frames `losses.frame_text_infonce` uses
  order = np.argsort(video, kind="stable")
  starts = np.searchsorted(video[order], np.arange(video.max() + 2))
  sizes = np.diff(starts)
  rank = np.empty_like(order)
  rank[order] = np.arange(len(order)) - starts[video[order]]  # each pair's position among its video's pairs
  if partners not in ("", "video", "clip"):
    raise ValueError(f"backbone: partners must be '', 'video' or 'clip', not {partners!r}")
  if partners == "video" and sizes.min() < 2:
    raise ValueError(f"backbone: video {pairs.video_ids[order[starts[np.argmin(sizes)]]]!r} has one clip; "
                     "an identity partner needs two")

  def rows(idx, groups, extra=None):
    text = pairs.text_index[idx]
    return {"frames": idx.astype(np.int32), "ids": text, "paddings": text, "group": text, "video": groups,
            "step": step[idx], **(extra or {})}

  def fn(idx):
    idx = np.asarray(idx)
    if not partners:
      return rows(idx, video[idx])
    anchors = idx[:(len(idx) + 1) // 2]
    rng = np.random.default_rng(idx)
    if partners == "video":
      v = video[anchors]
      pick = rng.integers(0, sizes[v] - 1)  # a random other clip of the anchor's video: skip its own position
      chosen = order[starts[v] + pick + (pick >= rank[anchors])]
      idx = np.concatenate([anchors, chosen])[:len(idx)]
      return rows(idx, video[idx])
    chosen = anchors[:len(idx) - len(anchors)]
    height, width = pairs.frames.shape[2:4]
    limit = np.array([max(1, round(CLIP_SHIFT * height)), max(1, round(CLIP_SHIFT * width))])
    shifts = rng.integers(-limit, limit + 1, size=(len(chosen), 2))
    idx = np.concatenate([anchors, chosen])
    shift = np.concatenate([np.zeros((len(anchors), 2), np.int64), shifts]).astype(np.int32)
    return rows(idx, idx.astype(np.int32), {"shift": shift})

  gather = pipeline.Gather({"frames": pairs.frames, "ids": ids, "paddings": paddings},
                           {"frames": "frames", "ids": "ids", "paddings": "paddings"})
  return fn, gather


def shift_frames(frames: jax.Array, shift: jax.Array) -> jax.Array:
  """Each clip of `frames` [B, T, H, W, C] rolled by its `shift` [B, 2] (rows, columns), wrapping round, every
  frame alike (`batch_rows(partners="clip")`)."""
  return jax.vmap(lambda f, s: jnp.roll(f, (s[0], s[1]), axis=(1, 2)))(frames, shift)


def batch_fn(pairs: Pairs, ids: np.ndarray, paddings: np.ndarray,
             partners: str = "") -> Callable[[np.ndarray], dict]:
  """Index batch [B] -> the loss's batch gathered on the host (frames, ids, paddings as arrays; a "clip" partner's
  frames already shifted): what training's device-side gather and `shift_frames` give the loss (`batch_rows`)."""
  fn, gather = batch_rows(pairs, ids, paddings, partners)

  def host(idx):
    batch = gather.gather_all(fn(idx))
    if "shift" in batch:
      batch["frames"] = np.asarray(shift_frames(batch["frames"], batch.pop("shift")))
    return batch
  return host


def _padded_batches(n: int, batch_size: int):
  for start in range(0, n, batch_size):
    idx = np.arange(start, min(start + batch_size, n))
    yield idx, np.pad(idx, (0, batch_size - len(idx)), mode="edge")


def embed(model, variables: Mapping, tokenizer, frames: np.ndarray, texts: Sequence[str],
          batch_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(video [N, D], text [U, D], frame [N, T, D]) through the extraction's own functions (`make_video_fn` /
  `make_text_fn`: what `configs/prepare.py` writes into a store as `clip`, the texts and `frame_clip`), in batches of
  one shape (one compile each)."""
  mesh = engine.local_mesh()
  batch_size = -(-batch_size // mesh.size) * mesh.size
  video_fn = engine.make_video_fn(model, variables, mesh, ["clip", "frame_clip"])
  text_fn = engine.make_text_fn(model, variables, tokenizer, mesh)
  data = sharding.data_sharded(mesh)
  out = [video_fn(jax.device_put(frames[padded].astype(np.float32) / np.float32(255), data))
         for _, padded in _padded_batches(len(frames), batch_size)]
  sizes = [len(idx) for idx, _ in _padded_batches(len(frames), batch_size)]
  video, frame = (np.concatenate([np.asarray(o[kind])[:n] for o, n in zip(out, sizes)])
                  for kind in ("clip", "frame_clip"))
  texts = list(texts)
  text = np.concatenate([np.asarray(text_fn([texts[i] for i in padded]))[:len(idx)]
                         for idx, padded in _padded_batches(len(texts), batch_size)])
  return video, text, frame


def retrieval_summary(video: np.ndarray, text: np.ndarray, pairs: Pairs, frame: np.ndarray | None = None) -> dict:
  """Per kind of `KINDS`: text -> clip and clip -> text R@1 / R@5 (%) among that kind's clips and distinct texts,
  a clip correct when its text is the query (`metrics.best_relevant_ranks`), with chance levels and counts. With
  `frame`, the "step" row also holds text -> frame R@1 / R@5 (`t2f_r1`, `t2f_r5`): each step text retrieves among
  every single frame of the step clips, a frame correct when its clip's text is the query (every frame of a step's
  segment shows the step), with its chance level `chance_t2f_r1` and the count `frames`: how much of the text
  meaning a single frame's embedding (the store's `frame_clip`) carries, beside the whole clip's.

  Args:
    video: [N, D] embeddings of `pairs`' clips; text: [len(pairs.texts), D]; frame: None or [N, T, D], each clip's
      frame embeddings; all L2-normalised.
  """
  out = {}
  for kind in KINDS:
    rows = np.flatnonzero(pairs.kinds == kind)
    if not len(rows):
      continue
    groups = pairs.text_index[rows]
    queries = np.unique(groups)
    scores = text[queries] @ video[rows].T          # [U, N]
    relevant = queries[:, None] == groups[None, :]  # several clips may share a text
    t2v = metrics.retrieval_metrics(metrics.best_relevant_ranks(scores, relevant), "t2v_", (1, 5))
    v2t = metrics.retrieval_metrics(metrics.best_relevant_ranks(scores.T, relevant.T), "v2t_", (1, 5))
    out[kind] = {**{k: v for k, v in {**t2v, **v2t}.items() if k[4:] in ("r1", "r5")},
                 "chance_t2v_r1": float(100.0 * np.mean(relevant.sum(axis=1) / len(rows))),
                 "chance_v2t_r1": float(100.0 / len(queries)), "texts": int(len(queries)), "clips": int(len(rows))}
    if kind == "step" and frame is not None:
      frames = frame[rows].reshape(-1, frame.shape[-1])     # [N * T, D], clip by clip
      relevant = np.repeat(relevant, frame.shape[1], axis=1)  # a frame is relevant when its clip is
      t2f = metrics.retrieval_metrics(metrics.best_relevant_ranks(text[queries] @ frames.T, relevant), "t2f_",
                                      (1, 5))
      out[kind].update({k: v for k, v in t2f.items() if k[4:] in ("r1", "r5")},
                       chance_t2f_r1=float(100.0 * np.mean(relevant.sum(axis=1) / len(frames))),
                       frames=int(len(frames)))
  return out
