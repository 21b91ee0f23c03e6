"""Provenance, shared by every method, for a user's store and a world's alike: which videos a run evaluates
(`data.skip_missing`) and where its features came from (results.json's `path`, `provenance` and `skipped_videos`)."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Mapping, Sequence

from vidjax import io
from vidjax.sharding import is_writer

SKIP_FILE = "skipped_videos.txt"
MARKER = "SYNTHETIC"  # what vidjax.worlds.release writes beside a rendered corpus's videos
STORE_RECORD = "store.json"
PREPARE = "python -m vidjax.main --config configs/prepare.py --config.dataset=DATASET"


_READING: list[bool] = []  # set inside `reading()`


@contextlib.contextmanager
def reading():
  """Within it a finished run is read, never written: `real_path` and `check_store` leave its workdir as it is
  (`vidjax.experiments.evaluate_all` loads the runs it compares so; it writes only in its own workdir)."""
  _READING.append(True)
  try:
    yield
  finally:
    _READING.pop()


def writes() -> bool:
  """Whether this process writes a run's provenance files: process 0, outside `reading()`."""
  return is_writer() and not _READING


def is_rendered(videos: str | Path) -> bool:
  """Whether `videos` is a folder of the rendered release corpus (`vidjax.worlds.release` leaves a `SYNTHETIC`
  file beside it): what is extracted or trained from it, and every result downstream, is labelled synthetic."""
  folder = Path(videos)
  return any((d / MARKER).is_file() for d in (folder, folder.parent))


def present_videos(config, store, kinds: Sequence[str], ids: Sequence[str], what: str) -> tuple[list[str], list[str]]:
  """(kept, skipped) ids of `ids`: those the store has every kind of, by `data.skip_missing` (default on: the
  others are skipped and counted; off: one missing video is an error). A kind the store lacks altogether, or a
  store holding none of `ids`, is an error naming the preparation command (`configs/prepare.py`)."""
  missing_kinds = [k for k in kinds if k not in store.kinds()]
  if missing_kinds:
    raise ValueError(f"feature store {store.root} has no kind {missing_kinds} ({what} need {list(kinds)}; it has "
                     f"{store.kinds()}): prepare the store with `{PREPARE} --config.data.videos=... "
                     "--config.data.annotations=...`")
  complete = store.complete(kinds, ids)
  kept = [i for i in ids if i in complete]
  skipped = [i for i in ids if i not in complete]
  if not kept:
    raise ValueError(f"feature store {store.root} has none of the {len(ids)} {what} the annotations name (e.g. "
                     f"{list(ids)[:3]}): is it the store of this dataset? Prepare it with `{PREPARE} ...`")
  if skipped and not config.data.skip_missing:
    raise ValueError(f"{len(skipped)} of {len(ids)} {what} have no {list(kinds)} features in {store.root} (e.g. "
                     f"{skipped[:5]}); with data.skip_missing=True (the default) they are skipped and counted")
  if skipped:
    print(f"skipping {len(skipped)} of {len(ids)} {what} without features in {store.root} (listed in {SKIP_FILE}): "
          f"{', '.join(skipped[:5])}{' ...' if len(skipped) > 5 else ''}", flush=True)
  return kept, skipped


def skipped_line(skipped: Mapping[str, str], total: int, videos: str | Path, listing: str | Path) -> str:
  """prepare's one line on the videos it skipped (`skipped`: {video id: reason}, the reasons "no video file" and
  "does not decode"), counted by reason: an absent file is "no video file" under `videos`, never an invalid one."""
  counts: dict[str, int] = {}
  for why in skipped.values():
    counts[why] = counts.get(why, 0) + 1
  said = {"no video file": f"no video file under {videos} (files are found by video id)",
          "does not decode": "a file that does not decode"}
  reasons = "; ".join(f"{n} {'has' if n == 1 else 'have'} {said.get(why, why)}" for why, n in sorted(counts.items()))
  return f"{len(skipped)} of {total} videos are skipped: {reasons} (listed with the reason in {listing})"


def backbone_as_built(metadata: Mapping[str, Any]) -> str:
  """The backbone a store's features came from, as it was built: its config name plus the overrides of that
  config's shape it was built with (the smoke model's `model_dim=32, num_heads=2, ...`: not the named base model),
  and "random init" when no checkpoint was loaded. What results.json's `provenance.backbone` says."""
  name = str(metadata.get("backbone", "") or "unknown")
  overrides = metadata.get("model_overrides") or {}
  if overrides:
    name += " with " + ", ".join(f"{k}={tuple(v) if isinstance(v, list) else v}" for k, v in sorted(overrides.items()))
  if metadata.get("random_init"):
    name += " (random init)"
  return name


def store_provenance(store) -> dict:
  """`store.provenance()` with the backbone named as built (`backbone_as_built`) and its `model_overrides`."""
  return {**store.provenance(), "backbone": backbone_as_built(store.metadata),
          "model_overrides": dict(store.metadata.get("model_overrides") or {})}


def real_path(workdir: str | Path, store, skipped: Sequence[str]) -> dict:
  """results.json's keys of a run on a store: `path` ("real", or "world" for a store a world wrote), `provenance` (the store's backbone, checkpoint or
  `random_init`, path and fingerprint) and `skipped_videos` (count, and the file listing them)."""
  name = ""
  if skipped:
    name = SKIP_FILE
    if writes():
      io.atomic_write_text(Path(workdir) / SKIP_FILE, "".join(f"{v}\n" for v in skipped))
  path = "world" if "world" in store.metadata else "real"  # a world's store (`experiments.common.world_data`)
  return {"path": path, "provenance": store_provenance(store), "skipped_videos": {"count": len(skipped), "file": name}}


def store_benchmark(config, workdir: str | Path, store, bench, kinds: Sequence[str]):
  """(the retrieval benchmark on the corpus videos `store` has every kind of, results.json's path keys):
  `present_videos`' rule, then `real_path`."""
  kept, skipped = present_videos(config, store, kinds, bench.corpus, "corpus videos")
  return bench.restrict(kept), real_path(workdir, store, skipped)


def check_store(workdir: str | Path, store, kinds: Sequence[str]) -> None:
  """Refuses a workdir whose models were trained on other features: the first run records the backbone and the
  item shape of each of `kinds` in `<workdir>/store.json`; a later run whose store (re-extracted in place, or
  another store under the same path) holds another backbone or shape stops here with one error, before any
  checkpoint is read (a restore would fail on the shapes, or silently mix two feature spaces)."""
  now = {"backbone": store.metadata.get("backbone", ""),
         "shapes": {k: list(store.item_shape(k)) for k in kinds if k in store.kinds()}}
  path = Path(workdir) / STORE_RECORD
  if path.exists():
    old = io.read_json(path, "store record")
    changed = [k for k in now["shapes"] if k in old["shapes"] and old["shapes"][k] != now["shapes"][k]]
    if changed or old["backbone"] != now["backbone"]:
      what = (", ".join(f"kind {k!r} {old['shapes'][k]} -> {now['shapes'][k]}" for k in changed)
              or f"backbone {old['backbone']!r} -> {now['backbone']!r}")
      raise ValueError(f"workdir {workdir} was trained on other features than the store {store.root} now holds "
                       f"({what}): its checkpoints do not fit them; use a new --workdir")
  elif writes():
    Path(workdir).mkdir(parents=True, exist_ok=True)
    io.atomic_write_json(path, now)


def skipped_ids(workdir: Path, record: Mapping[str, Any]) -> set[str] | None:
  """The video ids a run skipped (its skip file), or None when it recorded a count but no readable list."""
  name = record.get("file", "")
  if not record.get("count", 0):
    return set()
  if not name or not (workdir / name).is_file():
    return None
  return {line.strip() for line in (workdir / name).read_text().splitlines() if line.strip()}


def runs_provenance(dirs, runs: Sequence[Mapping[str, Any]]) -> dict:
  """The path keys of a comparison of finished runs (`dirs`, their results.json `runs`; evaluate_all): "real" only when every run it reads is; `runs`: each run's path,
  synthetic flag and store provenance; `skipped_videos` counted once per store (the union of the ids its runs
  skipped; a run with a count but no list adds its count only when it is more than the store's union so far)."""
  dirs = [Path(d) for d in dirs]
  kinds = {r.get("path", "world") for r in runs}
  per_store: dict[str, tuple[set[str], int]] = {}
  for d, r in zip(dirs, runs):
    record = r.get("skipped_videos", {})
    store = (r.get("provenance") or {}).get("store") or str(d)  # no store recorded: the run is its own
    ids, count = per_store.get(store, (set(), 0))
    listed = skipped_ids(d, record)
    if listed is None:
      count = max(count, record.get("count", 0))
    else:
      ids |= listed
    per_store[store] = (ids, count)
  by_store = {store: max(len(ids), count) for store, (ids, count) in per_store.items()}
  stores = {p["store"]: p for p in (r.get("provenance") for r in runs) if isinstance(p, Mapping) and p.get("store")}
  return {"path": kinds.pop() if len(kinds) == 1 else "mixed",
          "provenance": {"stores": list(stores.values())},
          "runs": [{"workdir": str(d), "name": r.get("config", {}).get("name", d.name), "path": r.get("path", "world"),
                    "synthetic": r.get("synthetic"), "provenance": r.get("provenance")} for d, r in zip(dirs, runs)],
          "skipped_videos": {"count": sum(by_store.values()), "by_store": by_store, "file": ""}}
