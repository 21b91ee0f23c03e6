"""Feature-extraction engine: videos + captions -> a `FeatureStore` of frozen-backbone features.

This is the "feature extraction (once)" stage of ARCHITECTURE.md, following the VideoPrism protocol
of CAST App. A (T uniformly sampled frames at 288x288, black frames for undecodable video, clip
embeddings L2-normalized). The engine knows no model: it takes

  video_fn(frames [B, T, H, W, 3] float32 in [0, 1], sharded over 'data') -> {kind: [B, ...]}
  text_fn(texts: list[str] of length B) -> [B, D]

and writes these kinds (the experiment `vidjax/experiments/extract.py` wires VideoPrism in):

  clip           [D]        LvT pooled video embedding, L2-normalized (the text-video space CAST uses)
  frame_clip     [T, D]     each frame's embedding in the same text-video space: the LvT pooler applied to the
                            frame's auxiliary-encoder tokens, L2-normalized (the per-frame embedding CLIP gives
                            CLIP4Clip and X-Pool; `FactorizedVideoCLIP(return_frame_embeddings=True)`)
  clip_mean      [D]        encoder tokens mean-pooled over time and space, L2-normalized (CAST App. A)
  tokens         [T, N, D]  per-frame patch tokens (optional; VEDJE's frame-local cache needs them)
  text           [D]        caption embeddings, keyed by caption id
  padded_frames  [T]        1.0 where the clip's frame was black padding (always written; the
                            manifest's padded / failed counts are computed from it, so they stay
                            exact across resumed and multi-host runs)

Execution. Clips are grouped by video so each file is decoded once for all its segments; a pool of
decoding worker processes (every usable core but one by default: PyAV decodes ~900 frames/s per process at
288 px, a GPU embeds several thousand) decodes up to 2 videos per worker ahead of the model, and the
results are consumed in submission order, so the store does not depend on worker timing. Batches have
a fixed shape (the last one is padded with black clips whose outputs are dropped) so `video_fn`
compiles once; they travel as uint8, are scaled to [0, 1] on the device and are split over a
`('data',)` mesh of this process's local devices with `NamedSharding(mesh, P('data'))`. The host
fetches batch i only after batch i+1 was dispatched, so decoding, transfer and compute overlap.

Resuming. Clips (captions) whose ids are already in every requested kind are skipped before
decoding; the store's writers commit shards atomically, so a killed run loses at most its unflushed
buffer and a restart writes exactly the missing ids. What each stored clip and text was made from is recorded in
`<store>/inputs.json` (a clip's video file: path, size and modification time, and its segment; a text's SHA-256), so
a rerun re-extracts a clip whose video file changed (or a text that did) and says so, instead of keeping stale
features under the old id (`forget_changed_inputs`). A video id that names two files is refused
(`one_file_per_video`).

Multi-host. Every process takes every `process_count`-th video, runs on its own local devices
(extraction needs no collective) and writes shards with prefix `p{process_index}`; after a barrier
process 0 merges the manifest.
"""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import hashlib
import logging
import multiprocessing
import os
from pathlib import Path
import time
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidjax import checkpoints
from vidjax import io
from vidjax import progress as progress_lib
from vidjax import sharding
from vidjax.data import video as video_lib
from vidjax.data.features import FeatureStore
from vidjax.models import pixelstats
from vidjax.models import videoprism as vp
from vidjax.ops import l2_normalize, unflatten_dict

VIDEO_KINDS = ("clip", "frame_clip", "clip_mean", "tokens")
TEXT_KIND = "text"
PADDED_KIND = "padded_frames"
INPUTS_FILE = "inputs.json"  # <store>/inputs.json: what each stored clip and text was made from
# Manifest keys that must agree between a store and a run resuming into it: mixing features of
# another backbone, checkpoint, frame count or resolution under one kind would be silent corruption.
IDENTITY_KEYS = ("backbone", "model_overrides", "checkpoint_hash", "random_init", "seed", "fprop_dtype", "num_frames",
                 "resolution", "aspect", "dtype")
_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class VideoSegment:
  """One clip to embed: a whole video (start = end = None) or the segment [start, end) seconds."""
  clip_id: str
  video: str
  start: float | None = None
  end: float | None = None

  @property
  def segment(self) -> tuple[float, float] | None:
    return None if self.start is None else (float(self.start), float(self.end))


@dataclasses.dataclass
class VideoStats:
  """What one `extract_videos` call did (this process only)."""
  clips: int = 0          # clips embedded and written by this call
  skipped: int = 0        # clips already in the store
  padded_clips: int = 0   # written clips with at least one black padding frame
  failed_clips: int = 0   # written clips whose frames are all padding (unreadable video)
  frames: int = 0         # frames decoded and embedded
  seconds: float = 0.0    # wall time of the call
  compile_seconds: float = 0.0  # spent in the first video_fn call (tracing + XLA compile)

  @property
  def frames_per_s(self) -> float:
    """Throughput excluding compilation (decode + transfer + compute + write)."""
    busy = self.seconds - self.compile_seconds
    return self.frames / busy if busy > 0 else 0.0


def local_mesh() -> jax.sharding.Mesh:
  """`('data',)` mesh over this process's devices (extraction runs per process, no collectives)."""
  return sharding.make_mesh(devices=jax.local_devices())


def data_parallel(fn: Callable[[Any, jax.Array], Any], mesh: jax.sharding.Mesh) -> Callable[[Any, jax.Array], Any]:
  """Jits `fn(params, batch)` with params replicated and batch / outputs split over `'data'`."""
  return jax.jit(fn, in_shardings=(sharding.replicated(mesh), sharding.data_sharded(mesh)),
                 out_shardings=sharding.data_sharded(mesh))


def open_store(root, metadata: Mapping[str, Any]) -> FeatureStore:
  """Creates the store at `root`, or reopens it after checking `IDENTITY_KEYS` agree with `metadata`.

  Raises:
    ValueError naming the key and both values when an existing store was extracted differently.
  """
  try:
    existing = FeatureStore(root)
  except FileNotFoundError:
    return FeatureStore.create(root, dict(metadata))
  for key in IDENTITY_KEYS:
    if key in metadata and key in existing.metadata and existing.metadata[key] != metadata[key]:
      raise ValueError(
          f"feature store {root} was extracted with {key}={existing.metadata[key]!r} but this run uses "
          f"{key}={metadata[key]!r}; use another store directory (config.store) or delete the old one")
  existing.update_metadata(dict(metadata))
  return existing


def one_file_per_video(folder: str | os.PathLike, video_ids: Iterable[str] | None = None) -> None:
  """Refuses a video id that matches two files under `folder` (found as `vidjax.data.video.video_finder` finds them:
  by id, else by the id's stem; e.g. `a/x.mp4` and `b/x.mp4`, or `x.mp4` and `x.webm`): one of them would be embedded
  and the other silently ignored. `video_ids`: the ids a run looks up (None: every file stem)."""
  found: dict[str, list[str]] = {}
  for path in sorted(Path(folder).rglob("*")):
    if video_lib.is_video(path):
      found.setdefault(path.stem, []).append(str(path))
  for video_id in (found if video_ids is None else video_ids):
    paths = found.get(video_id) or found.get(Path(video_id).stem) or []
    if len(paths) > 1:
      raise ValueError(f"config.data.videos: video id {video_id!r} matches {len(paths)} files under {folder}: "
                       f"{paths[0]} and {paths[1]}{' ...' if len(paths) > 2 else ''}; a video id names one file: "
                       "move or rename the others")


def _video_state(clip: VideoSegment) -> dict | None:
  """What a clip's features are made from: its video file (path, size, modification time) and its segment; None
  when the file cannot be read (the decoder then says so)."""
  try:
    st = os.stat(clip.video)
  except (OSError, ValueError):
    return None
  return {"file": str(clip.video), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns,
          "segment": None if clip.segment is None else list(clip.segment)}


def _text_hash(text: str) -> str:
  return hashlib.sha256(str(text).encode("utf-8")).hexdigest()


def _changed(old: dict, now: dict) -> bool:
  """A clip's inputs changed: its video file's size or modification time, or its segment (a moved file is not)."""
  return any(old.get(k) != now[k] for k in ("bytes", "mtime_ns", "segment"))


def forget_changed_inputs(store: FeatureStore, clips: Sequence[VideoSegment], captions: Mapping[str, str],
                          kinds: Sequence[str] = (*VIDEO_KINDS, PADDED_KIND)) -> dict[str, int]:
  """Removes from the store the clips whose video file (size or modification time) or segment changed since they
  were extracted, and the captions whose text changed since they were embedded, so that the extraction that follows
  writes them again; says so in one line each; records what every clip and caption of this run is made from in
  `<store>/inputs.json`. Call on one process, before any process extracts.

  A store extracted before inputs were recorded has no record: its items are taken as they are, and recorded.

  Returns:
    {"clips_changed": clips removed for re-extraction, "texts_changed": captions removed for re-embedding}.
  """
  path = store.root / INPUTS_FILE
  with store.lock("inputs"):
    record = io.read_json(path, "extraction input record") if path.exists() else {}
    if not isinstance(record, dict) or not all(isinstance(record.get(k, {}), dict) for k in ("videos", "texts")):
      raise ValueError(f"{path}: not an extraction input record ({{\"videos\": {{...}}, \"texts\": {{...}}}}); the "
                       "file is corrupt: delete it (the store's items are then taken as they are)")
    videos, texts = dict(record.get("videos", {})), dict(record.get("texts", {}))
    held = [k for k in kinds if k in store.kinds()]
    changed, files = [], set()
    for clip in clips:
      now = _video_state(clip)
      if now is None:
        continue
      old = videos.get(clip.clip_id)
      if isinstance(old, dict) and _changed(old, now) and any(store.has(k, clip.clip_id) for k in held):
        changed.append(clip.clip_id)
        files.add(clip.video)
      videos[clip.clip_id] = now
    embedded = TEXT_KIND in store.kinds()
    retexts = [t for t, text in captions.items()
               if t in texts and texts[t] != _text_hash(text) and embedded and store.has(TEXT_KIND, t)]
    texts.update({t: _text_hash(text) for t, text in captions.items()})
    for kind in held:  # the old features go before the record says they are current
      store.remove(kind, changed)
    if retexts:
      store.remove(TEXT_KIND, retexts)
    io.atomic_write_json(path, {"videos": videos, "texts": texts}, indent=None)
  if changed:
    shown = ", ".join(Path(f).name for f in sorted(files)[:3]) + (" ..." if len(files) > 3 else "")
    print(f"{len(files)} video(s) changed since their features were extracted (file size, modification time or "
          f"segment: {shown}): re-extracting their {len(changed)} clip(s) into {store.root}", flush=True)
  if retexts:
    print(f"{len(retexts)} text(s) changed since they were embedded (e.g. {retexts[0]!r}): re-embedding them into "
          f"{store.root}", flush=True)
  store.refresh()
  return {"clips_changed": len(changed), "texts_changed": len(retexts)}


def _missing(store: FeatureStore, kinds: Sequence[str], item_id: str) -> bool:
  return any(not store.has(kind, item_id) for kind in kinds)


def _group_by_video(clips: Sequence[VideoSegment]) -> list[tuple[str, list[VideoSegment]]]:
  groups: dict[str, list[VideoSegment]] = collections.OrderedDict()
  for clip in clips:
    groups.setdefault(clip.video, []).append(clip)
  return list(groups.items())


def usable_cores() -> int:
  """CPU cores this process may run on (its affinity mask, so a container's CPU limit counts)."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not on Linux
    return os.cpu_count() or 1


def default_decode_workers() -> int:
  """Decoding workers when a config says 0: every usable core but one, which the process feeding the device keeps
  (16 cores: 15 decoding processes; 2 cores: one decoding thread, no process to start)."""
  return max(1, usable_cores() - 1)


def _worker_context() -> multiprocessing.context.BaseContext:
  # Not "fork": the parent runs JAX's threads, and a forked copy of a multithreaded process can deadlock. The fork
  # server (Unix) is started once per parent and forks each later pool's workers from a clean process, so only the
  # first pool pays for a fresh interpreter; elsewhere "spawn".
  if "forkserver" not in multiprocessing.get_all_start_methods():
    return multiprocessing.get_context("spawn")
  context = multiprocessing.get_context("forkserver")
  # Loaded once in the server, not in every worker: the main module (Python's default, which a worker would
  # otherwise import anew, often with jax) and PyAV with the decoder.
  context.set_forkserver_preload(["__main__", "vidjax.data.video"])
  return context


def decode_ahead(groups, num_frames, resolution, aspect, workers) -> Iterator[tuple[VideoSegment, np.ndarray, np.ndarray]]:
  """Yields (clip, frames [T, H, W, 3] uint8, padded [T]) in the order of `groups`.

  `groups`: `[(video path, [VideoSegment of that video])]`. `workers` processes decode whole videos (one group
  each) ahead of the consumer, at most 2 * workers videos in flight; results are taken in submission order, so the
  order, and hence the store, does not depend on which worker finishes first. Each worker's decoder gets an equal
  share of the cores (FFmpeg's frame threads), so the pool does not oversubscribe the host.
  """
  workers = max(1, min(workers, len(groups)))
  threads = max(1, usable_cores() // workers)
  depth = 2 * workers
  # One worker (or one video) needs no process: a thread ahead of the model overlaps the same way (PyAV releases
  # the GIL while decoding) without a worker's start-up (about a second on a busy 2-core machine).
  pool = (concurrent.futures.ThreadPoolExecutor(max_workers=1) if workers == 1 else
          concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=_worker_context()))
  with pool:
    pending: collections.deque = collections.deque()
    it = iter(groups)

    def submit():
      group = next(it, None)
      if group is not None:
        path, clips = group
        # The task is `video.decode_clips` itself, so a worker imports only that light module (not jax); the
        # parent logs failures (`warn_if_failed`), so they reach its own log.
        pending.append((path, clips, pool.submit(video_lib.decode_clips, path, [c.segment for c in clips],
                                                 num_frames, resolution, aspect, True, threads, False)))
    try:
      for _ in range(depth):
        submit()
      while pending:
        path, clips, future = pending.popleft()
        decoded = future.result()
        submit()
        video_lib.warn_if_failed(path, decoded)
        for j, clip in enumerate(clips):
          yield clip, decoded.frames[j], decoded.padded[j]
    finally:
      # A consumer that stops early (an error in the model, a killed job) must not wait for queued videos.
      for _, _, future in pending:
        future.cancel()


def _batches(items: Iterator, batch_size: int) -> Iterator[list]:
  batch = []
  for item in items:
    batch.append(item)
    if len(batch) == batch_size:
      yield batch
      batch = []
  if batch:
    yield batch


def extract_videos(store: FeatureStore, clips: Sequence[VideoSegment], video_fn: Callable[[jax.Array], Mapping[str, Any]], *,
                   num_frames: int, resolution: int, batch_size: int, kinds: Sequence[str] = ("clip", "clip_mean"),
                   mesh: jax.sharding.Mesh | None = None, aspect: str = "squash", dtype: str | None = None,
                   flush_every: int = 256, decode_workers: int | None = None, progress: bool = True,
                   process_index: int | None = None, process_count: int | None = None) -> VideoStats:
  """Embeds every clip not yet in the store and writes `kinds` plus `padded_frames`.

  Args:
    store: destination; ids already present in every kind are skipped.
    clips: all clips of the job (every process passes the same list).
    video_fn: frames `[B, T, H, W, 3]` float32 in [0, 1] (a `jax.Array` sharded `P('data')` over
      `mesh`) -> dict with at least `kinds`, each `[B, ...]`. Called once per batch; should be jitted.
    num_frames, resolution: T and H = W of the decoded frames.
    batch_size: B, rounded up to a multiple of the mesh size; the last batch is padded.
    kinds: which outputs of `video_fn` to store (subset of `VIDEO_KINDS` or any other names).
    mesh: `('data',)` mesh; `local_mesh()` when None.
    aspect: frame resizing, see `vidjax.data.video`.
    dtype: storage dtype "float32" | "bfloat16" (store default when None).
    flush_every: items buffered per kind before a shard is committed (`tokens` flushes at most
      every 64 items to bound host memory).
    decode_workers: decoding processes (None or 0: `default_decode_workers()`, every usable core but one). They decode
      whole videos ahead of the model; PyAV decodes about 900 frames/s per process at 288 px, so a GPU that embeds
      a few thousand frames/s needs several.
    process_index, process_count: this process's slice of the videos (JAX's values when None).

  Returns:
    `VideoStats` of this call.
  """
  mesh = mesh or local_mesh()
  n_dev = mesh.devices.size
  batch_size = -(-batch_size // n_dev) * n_dev
  pi = jax.process_index() if process_index is None else process_index
  pc = jax.process_count() if process_count is None else process_count
  all_kinds = tuple(kinds) + (PADDED_KIND,)
  stats = VideoStats()

  groups = _group_by_video(clips)[pi::pc]
  todo_groups = []
  for path, group in groups:
    todo = [c for c in group if _missing(store, all_kinds, c.clip_id)]
    stats.skipped += len(group) - len(todo)
    if todo:
      todo_groups.append((path, todo))
  total = sum(len(g) for _, g in todo_groups)
  if total == 0:
    return stats

  # Token arrays are large ([T, N, D] per clip), so their buffer is kept short.
  writers = {k: store.writer(k, shard_prefix=f"p{pi}", dtype=dtype,
                             flush_every=min(flush_every, 64) if k == "tokens" else flush_every) for k in kinds}
  writers[PADDED_KIND] = store.writer(PADDED_KIND, shard_prefix=f"p{pi}", flush_every=flush_every, dtype="float32")
  data_sharding = sharding.data_sharded(mesh)
  # Frames travel to the device as uint8 (a quarter of float32's bytes, and no host pass over every pixel) and are
  # scaled there through a 256-entry table, bit for bit as `video.decode_video` scales them (XLA turns a division
  # by 255 into a multiplication that can differ in the last bit).
  table = jnp.asarray(np.arange(256, dtype=np.float32) / np.float32(255))
  to_unit = jax.jit(lambda x: table[x.astype(jnp.int32)], out_shardings=data_sharding)
  zeros = np.zeros((num_frames, resolution, resolution, 3), np.uint8)
  workers = decode_workers or default_decode_workers()
  start = time.perf_counter()

  def write(batch, outputs):
    outputs = {k: np.asarray(jax.device_get(outputs[k])) for k in kinds}
    for row, (clip, _, padded) in enumerate(batch):
      for k in kinds:  # only the kinds the store lacks: a kind added to an existing store leaves the others as they are
        if not store.has(k, clip.clip_id):
          writers[k].add(clip.clip_id, outputs[k][row])
      if not store.has(PADDED_KIND, clip.clip_id):
        writers[PADDED_KIND].add(clip.clip_id, padded.astype(np.float32))
      stats.clips += 1
      stats.frames += num_frames
      stats.padded_clips += int(padded.any())
      stats.failed_clips += int(padded.all())
    bar.update(len(batch))

  with progress_lib.bar(total, f"extract p{pi}", "clip", disable=not progress, smoothing=0.1) as bar:
    in_flight = None  # (batch, outputs) dispatched but not yet fetched
    decoded = contextlib.closing(decode_ahead(todo_groups, num_frames, resolution, aspect, workers))
    with decoded as clip_frames:  # closing: an error below stops the decoding workers at once
      for batch in _batches(clip_frames, batch_size):
        frames = np.stack([f for _, f, _ in batch] + [zeros] * (batch_size - len(batch)))
        first = in_flight is None and stats.clips == 0
        t = time.perf_counter()
        outputs = video_fn(to_unit(jax.device_put(frames, data_sharding)))
        if first:  # jit dispatch is asynchronous, so the first call times the compiles
          stats.compile_seconds = time.perf_counter() - t
        missing = [k for k in kinds if k not in outputs]
        if missing:
          raise KeyError(f"video_fn returned {sorted(outputs)} but the extraction asks for kinds {missing}")
        if in_flight is not None:
          write(*in_flight)
        in_flight = (batch, outputs)
        busy = time.perf_counter() - start - stats.compile_seconds
        bar.set_postfix(frames_per_s=f"{stats.frames / max(busy, 1e-9):.1f}")
    if in_flight is not None:
      write(*in_flight)
    for w in writers.values():
      w.flush()
  stats.seconds = time.perf_counter() - start
  return stats


def extract_texts(store: FeatureStore, captions: Mapping[str, str], text_fn: Callable[[list[str]], Any], *,
                  batch_size: int, dtype: str | None = None, flush_every: int = 1024, progress: bool = True,
                  process_index: int | None = None, process_count: int | None = None) -> int:
  """Embeds every caption not yet in the store (kind `text`, keyed by caption id).

  Args:
    captions: `{caption_id: text}`.
    text_fn: list of exactly `batch_size` strings -> `[B, D]`; the last batch is padded with "".
  Returns:
    Number of captions written by this call.
  """
  pi, pc = _process(process_index, process_count)
  todo = [i for i in sorted(captions)[pi::pc] if not store.has(TEXT_KIND, i)]

  def compute(batch_ids):
    return text_fn([str(captions[i]) for i in batch_ids] + [""] * (batch_size - len(batch_ids)))

  return _write_batches(store, TEXT_KIND, todo, compute, batch_size=batch_size, dtype=dtype,
                        flush_every=flush_every, progress=progress, label=f"text p{pi}", prefix=f"p{pi}",
                        unit="text")


def _process(process_index: int | None, process_count: int | None) -> tuple[int, int]:
  return (jax.process_index() if process_index is None else process_index,
          jax.process_count() if process_count is None else process_count)


def _write_batches(store: FeatureStore, kind: str, todo: Sequence[str], compute, *, batch_size: int,
                   dtype: str | None, flush_every: int, progress: bool, label: str, prefix: str, unit: str,
                   check_finite: bool = False) -> int:
  """Runs `compute(batch_ids) -> [batch_size, ...]` over `todo` in batches and stores each real row."""
  if not todo:
    return 0
  written = 0
  with store.writer(kind, shard_prefix=prefix, flush_every=flush_every, dtype=dtype) as w, \
       progress_lib.bar(len(todo), label, unit, disable=not progress) as bar:
    for batch_ids in _batches(iter(todo), batch_size):
      out = np.asarray(jax.device_get(compute(batch_ids)))
      if out.shape[0] != batch_size:
        raise ValueError(f"{kind}: the function returned {out.shape[0]} rows for a batch of {batch_size}")
      if check_finite and not np.all(np.isfinite(out[:len(batch_ids)])):
        raise FloatingPointError(f"{kind}: NaN or Inf for ids {batch_ids[:5]}")
      for row, i in enumerate(batch_ids):
        written += int(w.add(i, out[row]))
      bar.update(len(batch_ids))
  return written


def transform_kind(store: FeatureStore, src_kind: str, dst_kind: str, fn: Callable[[np.ndarray], Any], *,
                   batch_size: int, ids: Sequence[str] | None = None, dtype: str | None = None,
                   flush_every: int = 1024, progress: bool = True, process_index: int | None = None,
                   process_count: int | None = None) -> int:
  """Writes `dst_kind = fn(src_kind)` for every id not yet in `dst_kind` (resumable, one compile).

  The offline half of a cached method: e.g. VEDJE's compressor turns per-frame patch tokens
  (`tokens`) into its cache (`cache`, in float32 / bfloat16 / float8_e4m3 / float4_e2m1 storage).
  Batches always hold `batch_size` items (the last is padded by repeating its first row, and the
  padding's outputs are dropped), so a jitted `fn` compiles once. Each process takes every
  `process_count`-th id and writes its own shards, as extraction does.

  Args:
    fn: float32 `[batch_size, *src_shape]` -> `[batch_size, *dst_shape]`.
    ids: the ids to transform (default: every id of `src_kind`).
  Returns:
    Number of items written by this call.
  """
  pi, pc = _process(process_index, process_count)
  todo = [i for i in sorted(store.ids(src_kind) if ids is None else ids)[pi::pc] if not store.has(dst_kind, i)]

  def compute(batch_ids):
    x = store.get(src_kind, batch_ids)
    return np.asarray(fn(np.concatenate([x, np.repeat(x[:1], batch_size - len(batch_ids), axis=0)])), np.float32)

  return _write_batches(store, dst_kind, todo, compute, batch_size=batch_size, dtype=dtype,
                        flush_every=flush_every, progress=progress, label=f"{dst_kind} p{pi}", prefix=f"p{pi}",
                        unit="item", check_finite=True)


def decode_report(store: FeatureStore) -> dict:
  """Counts from the store's `padded_frames`: clips with any / all frames padded, padded frames."""
  ids = store.ids(PADDED_KIND)
  if not ids:
    return {"padded_videos": 0, "failed_videos": 0, "padded_frames": 0}
  mask = store.get(PADDED_KIND, ids) > 0.5
  return {"padded_videos": int(mask.any(1).sum()), "failed_videos": int(mask.all(1).sum()),
          "padded_frames": int(mask.sum())}


def finalize(store: FeatureStore, metadata: Mapping[str, Any] | None = None) -> dict:
  """Barrier (multi-host), then on process 0: merge the manifest and record decode counts."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices("vidjax_extract_done")
  store.refresh()
  report = decode_report(store)
  if jax.process_index() == 0:
    store.merge_manifest()
    store.update_metadata({**dict(metadata or {}), "decode": report})
  return report


def verify(store: FeatureStore, clip_ids: Iterable[str] = (), caption_ids: Iterable[str] = (),
           kinds: Sequence[str] = ("clip", "clip_mean")) -> dict:
  """Integrity check: `store.verify()` plus every expected id present in every kind.

  Returns:
    `store.verify()`'s report.
  Raises:
    ValueError naming the store, the kind and (up to 10) missing ids.
  """
  report = store.verify()
  expected = [(k, list(clip_ids)) for k in tuple(kinds) + (PADDED_KIND,)] + [(TEXT_KIND, list(caption_ids))]
  for kind, ids in expected:
    if not ids:
      continue
    missing = [i for i in ids if not store.has(kind, i)]
    if missing:
      shown = ", ".join(repr(m) for m in missing[:10]) + (" ..." if len(missing) > 10 else "")
      raise ValueError(f"feature store {store.root}: kind {kind!r} lacks {len(missing)} of {len(ids)} expected ids: "
                       f"{shown}; re-run the extraction to fill them in")
  return report


# ----------------------------------------------------------------------------------------------
# The backbone: VideoPrism (or the stand-in) from a config section, and its jitted video / text functions.


def is_lvt(model) -> bool:
  return isinstance(model, vp.FactorizedVideoCLIP)


def make_video_fn(model, variables, mesh, kinds):
  """`frames [B, T, H, W, 3] -> {kind: [B, ...]}` for `kinds` ⊆ `VIDEO_KINDS` (clip and frame_clip: LvT models
  only), jitted over `mesh`."""
  kinds = tuple(kinds)

  def forward(variables, frames):
    b, t = frames.shape[:2]
    if is_lvt(model):
      clip, _, out = model.apply(variables, frames, None, None, train=False,
                                 return_frame_embeddings="frame_clip" in kinds)
      tokens = out["video_tokens"]
    else:
      tokens, _ = model.apply(variables, frames, train=False)
      clip = None
    tokens = tokens.astype(jnp.float32)
    result = {}
    if "clip" in kinds:
      result["clip"] = clip.astype(jnp.float32)
    if "frame_clip" in kinds:
      result["frame_clip"] = out["frame_embeddings"].astype(jnp.float32)
    if "clip_mean" in kinds:
      result["clip_mean"] = l2_normalize(tokens.mean(axis=1))  # CAST App. A: mean pool + L2 norm
    if "tokens" in kinds:
      result["tokens"] = tokens.reshape(b, t, -1, tokens.shape[-1])
    return result

  fn = data_parallel(forward, mesh)
  variables = jax.device_put(variables, sharding.replicated(mesh))
  return functools.partial(fn, variables)


def make_text_fn(model, variables, tokenizer, mesh):
  """`list of B texts -> [B, D]` LvT text embeddings (L2-normalized), jitted over `mesh`."""
  def forward(variables, batch):
    _, text, _ = model.apply(variables, None, batch["ids"], batch["paddings"], train=False)
    return text.astype(jnp.float32)

  fn = data_parallel(forward, mesh)
  variables = jax.device_put(variables, sharding.replicated(mesh))
  data = sharding.data_sharded(mesh)

  def text_fn(texts):
    ids, paddings = tokenizer.encode(list(texts), max_length=vp.TEXT_MAX_LEN)
    return fn(variables, jax.device_put({"ids": ids, "paddings": paddings}, data))
  return text_fn


def random_variables(model, seed: int) -> dict:
  """Seeded random variables `{'params': ...}` without compiling the model's init.

  Shapes come from `jax.eval_shape`; values are N(0, 0.02) for matrices and zeros for vectors
  (biases, LayerNorm gain deltas). Only for smoke runs and benchmarks: features from random
  weights carry no meaning, and the manifest says `random_init: true`.
  """
  rng = np.random.default_rng(seed)
  flat = {}
  for key, spec in sorted(vp.param_shapes(model).items()):
    value = rng.normal(0.0, 0.02, spec.shape) if len(spec.shape) >= 2 else np.zeros(spec.shape)
    flat[key] = jnp.asarray(value, spec.dtype)
  return unflatten_dict(flat)


FPROP_DTYPES = ("auto", "float32", "bfloat16")


def fprop_dtype(config, platform: str | None = None) -> str:
  """The activation dtype `config.model.fprop_dtype` asks for on `platform` (the default backend's when None):
  "auto" = "bfloat16" on an accelerator (bf16 operands, float32 parameters and float32 accumulation in every matmul,
  layer norms and softmax in float32: about 6x faster than true float32 on a GPU, and how the papers' encoders run;
  docs/scaling.md gives its distance from float32 on the same clips) and "float32" on a CPU (XLA:CPU emulates
  bfloat16 and gains nothing); "float32" for bit-for-bit stores on any machine (with `precision.extract`, "highest"
  by default). A store records the dtype that ran (its manifest's `fprop_dtype`, one of its identity keys)."""
  value = config.model.get("fprop_dtype", "float32")
  if value not in FPROP_DTYPES:
    raise ValueError(f"config.model.fprop_dtype={value!r} is invalid: expected one of {FPROP_DTYPES}")
  if value != "auto":
    return value
  return "float32" if (platform or jax.default_backend()) == "cpu" else "bfloat16"


def build_model(config):
  """The VideoPrism module `config.model` names (`name`, `fprop_dtype` as `fprop_dtype` resolves it, `overrides`,
  `attention_impl`), without weights."""
  overrides = dict(config.model.overrides)
  if "pos_emb_shape" in overrides:
    overrides["pos_emb_shape"] = tuple(overrides["pos_emb_shape"])
  impl = config.model.get("attention_impl") or None
  return vp.get_model(config.model.name, fprop_dtype=jnp.dtype(fprop_dtype(config)), attention_impl=impl,
                      **overrides)


def load_model(config) -> tuple[Any, Any, dict]:
  """Model, variables and the manifest's model metadata (random init when no checkpoint is given)."""
  overrides = dict(config.model.overrides)
  if config.model.name == pixelstats.NAME:  # the parameter-free stand-in (never a substitute for VideoPrism)
    _LOG.warning("extracting with the STAND-IN pixel-statistics backbone (vidjax.models.pixelstats), not VideoPrism")
    return (pixelstats.PixelStats(**overrides), {},
            {"backbone": pixelstats.NAME, "model_overrides": overrides, "fprop_dtype": "float32", "checkpoint": "",
             "random_init": False, "checkpoint_hash": None})
  model = build_model(config)
  meta = {"backbone": config.model.name, "model_overrides": {k: list(v) if isinstance(v, tuple) else v
                                                             for k, v in overrides.items()},
          "fprop_dtype": fprop_dtype(config), "attention_impl": config.model.get("attention_impl") or ""}
  if config.model.checkpoint:
    variables = checkpoints.load_videoprism(config.model.checkpoint, model)
    local = "://" not in config.model.checkpoint
    meta.update(checkpoint=config.model.checkpoint, random_init=False,
                checkpoint_hash=checkpoints.file_hash(config.model.checkpoint) if local else None)
  else:
    _LOG.warning("config.model.checkpoint is empty: extracting with RANDOM VideoPrism weights (seed %d)", config.seed)
    variables = random_variables(model, config.seed)
    meta.update(checkpoint="", random_init=True, checkpoint_hash=None, seed=config.seed)
  return model, variables, meta


# ----------------------------------------------------------------------------------------------
# Extraction as the experiments run it: one call that embeds clips and captions into a store.


def extract_into(config, store_root: str, clips: list[VideoSegment], captions: dict[str, str], dataset: str,
                 missing_videos: int = 0, num_frames: int | None = None, text_fn=None) -> tuple[dict, dict]:
  """The backbone of `config.model` embeds `clips` (kinds clip / frame_clip / clip_mean / tokens; `num_frames` each,
  default `config.num_frames`) and `captions` (kind text) into the store at `store_root`, resumably; returns (the
  extraction's counts, the backbone's metadata). `text_fn` (`texts [B] -> [B, D]`) embeds the captions when the
  backbone has no text tower (the rendered world's stand-in: `pixelstats.colour_bag` of the colour words)."""
  num_frames = num_frames or config.num_frames
  model, variables, meta = load_model(config)
  lvt = is_lvt(model)
  kinds = (["clip", "frame_clip"] if lvt else []) + ["clip_mean"] + (["tokens"] if config.save_tokens else [])
  if captions and not lvt and text_fn is None:
    _LOG.warning("%s has no text tower; %d captions are not embedded", config.model.name, len(captions))
    captions = {}
  tokenizer = None
  if captions and lvt:
    if not config.model.spm_path:
      raise ValueError(f"{len(captions)} captions need the LvT SentencePiece model: set config.model.spm_path to a "
                       "local copy of the T5 c4_en model (gs://t5-data/vocabs/cc_en.32000/sentencepiece.model for the "
                       "public checkpoints; download it once, runs are offline)")
    if str(config.model.spm_path).startswith(("gs://", "http://", "https://")):
      raise ValueError(f"config.model.spm_path={config.model.spm_path!r} is a remote URL; runs read a local copy: "
                       "download it once and set config.model.spm_path to the file")
    from vidjax.tokenizers.sentencepiece import SentencePieceTokenizer  # pylint: disable=g-import-not-at-top
    tokenizer = SentencePieceTokenizer(config.model.spm_path)
    if tokenizer.vocab_size > model.vocabulary_size:
      raise ValueError(f"SentencePiece model {config.model.spm_path} has {tokenizer.vocab_size} pieces but "
                       f"{config.model.name} embeds only {model.vocabulary_size}")

  metadata = {**meta, "num_frames": num_frames, "resolution": config.resolution, "aspect": config.aspect,
              "dtype": config.store_dtype, "kinds": kinds + ([TEXT_KIND] if captions else []),
              "spm_path": config.model.spm_path if captions else "", "dataset": dataset}
  store = open_store(store_root, metadata)
  changed = {"clips_changed": 0, "texts_changed": 0}
  if jax.process_index() == 0:
    changed = forget_changed_inputs(store, clips, captions)
  if jax.process_count() > 1:  # no process extracts before the changed items are gone
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices("vidjax_extract_inputs_checked")
    store.refresh()
  mesh = local_mesh()

  stats = extract_videos(
      store, clips, make_video_fn(model, variables, mesh, kinds), num_frames=num_frames,
      resolution=config.resolution, batch_size=config.batch_size, kinds=kinds, mesh=mesh, aspect=config.aspect,
      dtype=config.store_dtype, decode_workers=config.decode_workers, progress=config.progress)
  texts = 0
  if captions:
    texts = extract_texts(store, captions, make_text_fn(model, variables, tokenizer, mesh) if lvt else text_fn,
                                 batch_size=config.text_batch_size, dtype=config.store_dtype,
                                 progress=config.progress)
  report = finalize(store, {"missing_videos": missing_videos})
  verify(store, [c.clip_id for c in clips], list(captions), kinds)
  return {"clips": len(clips), "texts": len(captions), "padded_videos": report["padded_videos"],
          "failed_videos": report["failed_videos"], "missing_videos": missing_videos,
          "frames_per_s": stats.frames_per_s, "compile_s": stats.compile_seconds, "clips_written": stats.clips,
          "clips_skipped": stats.skipped, "texts_written": texts, **changed}, meta


TEXT_TOWER_KEYS = ("backbone", "model_overrides", "fprop_dtype", "checkpoint", "random_init", "seed", "spm_path")


def text_tower(meta: dict) -> dict | None:
  """What rebuilds the text tower that embedded a store's captions (its manifest's backbone fields), or None when
  the store has none (no captions, or a backbone without a text tower)."""
  if not meta.get("spm_path") or not str(meta.get("backbone", "")).startswith("videoprism_lvt"):
    return None
  return {k: meta.get(k) for k in TEXT_TOWER_KEYS}


def make_query_encoder(tower: dict):
  """`texts -> [N, D]` with the text tower `text_tower` describes: the same weights (the checkpoint, or the same
  seeded random init), tokenizer and pooling as the extraction that embedded the captions."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  from vidjax.tokenizers.sentencepiece import SentencePieceTokenizer  # pylint: disable=g-import-not-at-top
  if tower["checkpoint"] and not Path(tower["checkpoint"]).is_file() and "://" not in tower["checkpoint"]:
    raise FileNotFoundError(f"the query encoder's checkpoint {tower['checkpoint']} (the one the store was extracted "
                            "with) is not there any more")
  if not Path(tower["spm_path"]).is_file():
    raise FileNotFoundError(f"the query encoder's SentencePiece model {tower['spm_path']} (the one the store was "
                            "extracted with) is not there any more")
  config = ml_collections.ConfigDict(dict(seed=int(tower.get("seed") or 0), model=dict(
      name=tower["backbone"], checkpoint=tower["checkpoint"] or "", fprop_dtype=tower["fprop_dtype"] or "float32",
      overrides=dict(tower["model_overrides"] or {}))))
  model, variables, _ = load_model(config)
  fn = make_text_fn(model, variables, SentencePieceTokenizer(tower["spm_path"]), local_mesh())
  return lambda texts: np.asarray(fn(list(texts)))
