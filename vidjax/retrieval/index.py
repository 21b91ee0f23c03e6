"""The composed stack's index on disk: the format `vidjax.search` opens (`configs/stack_<dataset>.py` writes it).

    <index>/manifest.json   {"format": INDEX_FORMAT, "dataset", "synthetic", "backbone", "dim", "clips",
                             "text_encoder": {"kind": "caption_lookup" | "text_tower", "file", "backbone"[, "tower"]},
                             "recall": {"kind": "dense" | ..., "file", "k", "backbone", ...the kind's fields},
                             "stages": [{"name", "kind", "k", "file", "backbone", ...the kind's fields}],
                             "omitted_stages": [{"name", "kind", "why"}],
                             "files": {name: {"bytes", "sha256"}},
                             "manifest_sha256": SHA-256 of every other field}   (written last: an index without it
                                                                                 is incomplete)
    <index>/corpus.npz      ids [N], vectors [N, D], captions [N], videos [N]
    <index>/texts.npz       captions [C], vectors [C, D] (each caption's mean text embedding: the query encoder of a
                            space without a text tower)
    <index>/<stage>.npz     each stage's (and a generative recall's) parameters, `{"params": ...}`

`write_index` writes it, `StackIndex` opens it (checking every field of the manifest's, then the manifest against its
own hash and every file against what it recorded, then the corpus) and searches it. What a stage or recall kind *is*
(the model behind "pair_reranker", "cast_ensemble", "grdr") is not this module's business: the reader is given `Kinds`, builders by kind (`vidjax.search.KINDS`), so
that the format imports no model and no method. The dense recall is built here (`DenseIndex`, this package's).
"""
from __future__ import annotations

import dataclasses
import hashlib
import io as _io
import json
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import ml_collections
import numpy as np

from vidjax import checkpoints, io, ops
from vidjax.retrieval import files
from vidjax.retrieval.dense import DenseIndex
from vidjax.retrieval.stack import Stack, Stage

INDEX_FORMAT = "vidjax-stack-index/2"  # 2: the manifest hashes its own fields (manifest_sha256); 1 is refused
MANIFEST = "manifest.json"
MANIFEST_HASH = "manifest_sha256"
TEXT_ENCODERS = ("caption_lookup", "text_tower")
REBUILD = "rebuild it (python -m vidjax.main --config configs/stack_<dataset>.py --workdir DIR writes DIR/index)"


@dataclasses.dataclass(frozen=True)
class Kinds:
  """What the reader builds each kind with:
    recalls     kind -> (section, params, vectors [N, D], ids [N], dim) -> a recall stage (`Stack`'s first argument);
    stages      kind -> (section, params, dim) -> a `Scorer`;
    text_tower  (the manifest's `tower`) -> `texts -> [N, D]`, or None: an index whose queries need one cannot be
                searched."""
  recalls: Mapping[str, Callable[..., Any]]
  stages: Mapping[str, Callable[..., Any]]
  text_tower: Callable[[dict], Callable[[Sequence[str]], np.ndarray]] | None = None


def manifest_digest(manifest: Mapping[str, Any]) -> str:
  """SHA-256 of a manifest's fields but `MANIFEST_HASH` (canonical JSON: sorted keys, no spaces), which the manifest
  records: stages, weights, context lengths, `synthetic`, omitted stages and the text encoder are then covered like
  the files are."""
  fields = {k: v for k, v in manifest.items() if k != MANIFEST_HASH}
  return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
                        ).hexdigest()


def _npz_bytes(**arrays) -> bytes:
  buf = _io.BytesIO()
  np.savez(buf, **arrays)
  return buf.getvalue()


def write_index(path: Path, *, ids: Sequence[str], vectors: np.ndarray, captions: Sequence[str],
                videos: Sequence[str], text_captions: Sequence[str], text_vectors: np.ndarray, dataset: str,
                synthetic: bool, backbone: str, text_encoder: dict, recall: dict, stages: Sequence[dict],
                omitted: Sequence[dict] = ()) -> Path:
  """Writes `<path>/`: corpus.npz (`ids` [N], `vectors` [N, D], `captions` [N], `videos` [N]), texts.npz
  (`text_captions` [C], `text_vectors` [C, D]) and, last, manifest.json with the given sections. The files the
  recall and the stages name (their parameters) must be in `path` already: the manifest records every named file's
  size and SHA-256, which `StackIndex` checks. `omitted`: the stages the run had that the index does not keep
  ({"name", "kind", "why"} each; `python -m vidjax.search` names them on its first output line)."""
  path.mkdir(parents=True, exist_ok=True)
  io.atomic_write_bytes(path / "texts.npz", _npz_bytes(captions=np.array(text_captions),
                                                       vectors=np.asarray(text_vectors)))
  io.atomic_write_bytes(path / "corpus.npz", _npz_bytes(ids=np.array(ids), vectors=np.asarray(vectors, np.float32),
                                                        captions=np.array(captions), videos=np.array(videos)))
  manifest = {"format": INDEX_FORMAT, "dataset": dataset, "synthetic": synthetic, "backbone": backbone,
              "dim": int(np.shape(vectors)[1]), "clips": len(ids), "text_encoder": text_encoder, "recall": recall,
              "stages": list(stages), "omitted_stages": [dict(o) for o in omitted]}
  named = ["corpus.npz", text_encoder["file"], recall["file"], *(st["file"] for st in stages)]
  manifest["files"] = {name: files.file_record(path / name) for name in dict.fromkeys(named)}  # checked on open
  manifest[MANIFEST_HASH] = manifest_digest(json.loads(json.dumps(manifest)))  # as it reads back
  io.atomic_write_json(path / MANIFEST, manifest)
  return path


class StackIndex:
  """A built index: the corpus, the query encoder and the stages, ready to `search`.

  Opening it checks what the index claims before anything is trusted: every field of the manifest (one error naming
  the field and what it should be), the manifest against the hash of its fields it recorded (`MANIFEST_HASH`), every
  file it names against the size and SHA-256 it recorded (`"files"`, required), the corpus (ids distinct, as many as
  the manifest's clips, captions and videos one per id, vectors [clips, dim], finite, not all zero or all one vector)
  and the caption table (one finite [dim] vector per caption). Each mismatch is one ValueError naming the index and
  the file."""

  def __init__(self, path: str | Path, kinds: Kinds):
    path = Path(path)
    if not path.is_dir():
      raise FileNotFoundError(f"index {path}: no such directory (build one with python -m vidjax.main "
                              "--config configs/stack_<dataset>.py --workdir DIR; the index is DIR/index)")
    if not (path / MANIFEST).is_file():
      raise ValueError(f"index {path}: no {MANIFEST}; not a vidjax stack index, or its build did not finish")
    m = io.read_json(path / MANIFEST, "index manifest")
    if not isinstance(m, dict) or m.get("format") != INDEX_FORMAT:
      old = isinstance(m, dict) and m.get("format") == "vidjax-stack-index/1"
      raise ValueError(f"index {path}/{MANIFEST}: format {m.get('format') if isinstance(m, dict) else m!r} is not "
                       f"{INDEX_FORMAT!r}" + ("; an index written before its manifest's own fields were hashed: "
                                              + REBUILD if old else ""))
    self.path, self.manifest = path, m
    self._check_manifest()
    if m[MANIFEST_HASH] != manifest_digest(m):
      raise files.IndexFileError(f"index {path}/{MANIFEST}: its fields do not match the {MANIFEST_HASH} it recorded "
                                 "(the manifest was edited after the index was built); " + REBUILD)
    parts = [("the text encoder", m["text_encoder"]), ("the recall stage", m["recall"])] + [
        (f"stage {s['name']!r}", s) for s in m["stages"]]
    for what, part in parts:
      if part.get("backbone") != m["backbone"]:
        raise ValueError(f"index {path}: {what} was built for backbone {part.get('backbone')!r} but the index's corpus "
                         f"holds {m['backbone']!r} features; rebuild the index from one feature store")
      if not (path / part["file"]).is_file():
        raise ValueError(f"index {path}: {what}'s file {part['file']} is missing")
    for name, record in m["files"].items():
      files.check_file(path, name, record, f"index {path}", recorded_in=MANIFEST, rebuild=REBUILD)
    self.synthetic = bool(m["synthetic"])
    corpus = self._arrays("corpus.npz", "index corpus", ("ids", "vectors", "captions", "videos"))
    self.ids, self.captions, self.videos = (corpus[k].astype(str).tolist() for k in ("ids", "captions", "videos"))
    self.row = {c: i for i, c in enumerate(self.ids)}
    if len(self.row) != len(self.ids) or len(self.ids) != m["clips"]:
      raise self._bad("corpus.npz", f"holds {len(self.ids)} ids ({len(self.row)} distinct), the manifest says "
                      f"{m['clips']} clips")
    if corpus["vectors"].shape != (len(self.ids), m["dim"]) or len(self.captions) != len(self.ids) or len(
        self.videos) != len(self.ids):
      raise self._bad("corpus.npz", f"holds vectors {corpus['vectors'].shape}, {len(self.captions)} captions and "
                      f"{len(self.videos)} videos; the manifest says {len(self.ids)} clips x dim {m['dim']}")
    self.vectors = self._finite("corpus.npz", corpus["vectors"], self.ids)
    self._informative("corpus.npz", self.vectors, "clip")
    r = m["recall"]
    if r["kind"] == "dense":  # an index written before backends were configurable: the exact one
      section = r.get("index", {"backend": "jax", "dtype": "float32", "params": {}})
      try:
        self.recall = DenseIndex.from_config(self.ids, self.vectors, ml_collections.ConfigDict(section),
                                             query_batch=1)
      except (ValueError, KeyError, AttributeError, TypeError) as e:
        raise ValueError(f"index {path}/{MANIFEST}: recall index {section!r} is not one this vidjax builds: "
                         f"{str(e).strip()[:300]}") from None
    elif r["kind"] in kinds.recalls:
      params = self._params(r["file"], f"index {r['kind']} recall model")
      self.recall = kinds.recalls[r["kind"]](r, params, self.vectors, self.ids, m["dim"])
    else:
      raise ValueError(f"index {path}: recall stage of unknown kind {r['kind']!r} (known: "
                       f"{', '.join(['dense', *kinds.recalls])})")
    texts = self._arrays(m["text_encoder"]["file"], "index text table", ("captions", "vectors"))
    captions = texts["captions"].astype(str).tolist()
    if texts["vectors"].shape != (len(captions), m["dim"]):
      raise self._bad(m["text_encoder"]["file"], f"holds {len(captions)} captions and vectors "
                      f"{texts['vectors'].shape}, expected [{len(captions)}, dim {m['dim']}]")
    self.text_of = dict(zip(captions, self._finite(m["text_encoder"]["file"], texts["vectors"], captions)))
    self._informative(m["text_encoder"]["file"], texts["vectors"], "caption")
    self.stages, self.needs_context = [], set()
    self._text_tower = kinds.text_tower
    for s in m["stages"]:
      if s["kind"] not in kinds.stages:
        raise ValueError(f"index {path}: stage {s['name']!r} has unknown kind {s['kind']!r} (known: "
                         f"{', '.join(kinds.stages)})")
      scorer = kinds.stages[s["kind"]](s, self._params(s["file"], f"index stage {s['name']!r}"), m["dim"])
      if "context_len" in s:  # a stage that reads the query's last context clips (CAST's L)
        self.context_len = int(s["context_len"])
      if s.get("needs_context"):
        self.needs_context.add(s["name"])
      self.stages.append(Stage(s["name"], scorer, int(s["k"])))
    self.omitted = list(m["omitted_stages"])

  def stages_line(self, ran: Sequence[str]) -> str:
    """One line naming the stages a search ran, and the run's stages this index does not keep (with why)."""
    recall = self.manifest["recall"]["kind"]
    line = "stages: " + " -> ".join([f"{recall} recall", *ran])
    notes = [f"the index keeps no {o.get('kind', o.get('name', '?'))} stage: {o.get('why', '')}".rstrip(": ")
             for o in self.omitted]
    skipped = [s.name for s in self.stages if s.name not in ran]
    notes += [f"{name} skipped: no --context" for name in skipped]
    return line + (f" ({'; '.join(notes)})" if notes else "")

  def _bad(self, name: str, problem: str) -> ValueError:
    return files.IndexFileError(f"index {self.path}: {name} {problem}; the index is damaged or was changed after it "
                                f"was built: {REBUILD}")

  def _check_manifest(self) -> None:
    """Every field the index reads, present and of its type and range: one error naming the index file, the field
    and what it should be."""
    m = self.manifest
    missing = object()

    def check(obj, key, where, ok, expected):
      value = obj.get(key, missing)
      if value is missing or not ok(value):
        shown = ("missing" if value is missing else files.quote(value) if isinstance(value, str) else
                 json.dumps(value)[:80])
        raise files.IndexFileError(f"index {self.path}/{MANIFEST}: {where}{key} is {shown}, expected {expected}; "
                                   f"the index is damaged, incomplete or was edited after it was built: {REBUILD}")
      return value

    def integer(low, high=None):
      def ok(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= low and (high is None or v <= high)
      return ok, (f"an integer in [{low}, {high}]" if high is not None else
                  "a positive integer" if low == 1 else f"an integer >= {low}")

    def kind_of(t, what):
      return (lambda v: isinstance(v, t) and not (isinstance(v, bool) and t is not bool)), what

    text, obj, array, flag = kind_of(str, "a string"), kind_of(dict, "an object"), kind_of(list, "a list"), \
        kind_of(bool, "true or false")
    file_name = (lambda v: isinstance(v, str) and v not in ("", ".", "..") and Path(v).name == v,
                 "a file name inside the index")
    number = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v), "a finite number")
    digest = (lambda v: isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v),
              "64 hex digits (SHA-256)")

    for key, rule in (("dataset", text), ("synthetic", flag), ("backbone", text), ("dim", integer(1)),
                      ("clips", integer(1)), ("text_encoder", obj), ("recall", obj), ("stages", array),
                      ("files", obj), (MANIFEST_HASH, digest)):
      check(m, key, "", *rule)
    te, recall = m["text_encoder"], m["recall"]
    check(te, "kind", "text_encoder.", lambda v: v in TEXT_ENCODERS, f"one of {TEXT_ENCODERS}")
    for key, rule in (("file", file_name), ("backbone", text)):
      check(te, key, "text_encoder.", *rule)
    if te["kind"] == "text_tower":
      check(te, "tower", "text_encoder.", *obj)
    for key, rule in (("kind", text), ("file", file_name), ("backbone", text), ("k", integer(1, m["clips"]))):
      check(recall, key, "recall.", *rule)
    if "index" in recall:
      check(recall, "index", "recall.", *obj)
    if recall["kind"] == "grdr":
      check(recall, "model", "recall.", *obj)
      check(recall, "context_len", "recall.", *integer(0))
    previous, names = recall["k"], {"recall"}
    for i, s in enumerate(m["stages"]):
      if not isinstance(s, dict):
        check({f"[{i}]": s}, f"[{i}]", "stages", *obj)
      where = f"stages[{i}]."
      check(s, "name", where, lambda v: isinstance(v, str) and v not in names and bool(v),
            f"a name no earlier stage has (not {sorted(names)})")
      names.add(s["name"])
      for key, rule in (("kind", text), ("file", file_name), ("backbone", text), ("k", integer(1, previous))):
        check(s, key, where, *rule)
      previous = s["k"]
      if "needs_context" in s:
        check(s, "needs_context", where, *flag)
      if s["kind"] == "cast_ensemble":
        check(s, "num_heads", where, lambda v: integer(1)[0](v) and m["dim"] % v == 0,
              f"a positive integer that divides dim {m['dim']}")
        check(s, "context_len", where, *integer(0))
        check(s, "w_v", where, *number)
        check(s, "w_p", where, *number)
    check(m, "omitted_stages", "", lambda v: isinstance(v, list) and all(
        isinstance(o, dict) and all(isinstance(o.get(k), str) for k in ("name", "kind", "why")) for o in v),
          "a list of {name, kind, why} strings")
    for name, record in m["files"].items():
      check(m["files"], name, "files.", lambda r: isinstance(r, dict) and integer(0)[0](r.get("bytes")) and
            digest[0](r.get("sha256")), "{bytes, sha256} of the file")
    named = {"text_encoder.file": te["file"], "recall.file": recall["file"],
             **{f"stages[{i}].file": s["file"] for i, s in enumerate(m["stages"])}}
    for field, name in named.items():
      if name not in m["files"]:
        raise files.IndexFileError(f"index {self.path}/{MANIFEST}: files does not record {field} {name!r} (its size "
                                   f"and SHA-256); the index is damaged or incomplete: {REBUILD}")

  def _arrays(self, name: str, what: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
    arrays = checkpoints.read_npz(self.path / name, what)
    missing = [k for k in keys if k not in arrays]
    if missing:
      raise self._bad(name, f"lacks the arrays {missing} (it has {sorted(arrays)[:10]})")
    return arrays

  def _informative(self, name: str, vectors: np.ndarray, what: str) -> None:
    """Refuses vectors that rank nothing (`ops.uninformative`), as stage-1 retrieval does."""
    problem = ops.uninformative(vectors)
    if problem:
      raise ValueError(f"index {self.path}: {name}: all {len(vectors)} {what} vectors are {problem}; they rank "
                       "nothing (every score ties): rebuild the index from features that do (re-extract them)")

  def _finite(self, name: str, vectors: np.ndarray, ids: Sequence[str]) -> np.ndarray:
    if not np.issubdtype(vectors.dtype, np.floating):
      raise self._bad(name, f"holds {vectors.dtype} vectors, not floats")
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=tuple(range(1, vectors.ndim))))
    if bad.size:
      raise self._bad(name, f"vectors of {', '.join(files.quote(ids[i], 40) for i in bad[:5])} are not finite "
                      f"(NaN or Inf; {bad.size} rows)")
    return vectors

  def _params(self, name: str, what: str):
    tree = ops.unflatten_dict(checkpoints.read_npz(self.path / name, what))
    if "params" not in tree:
      raise self._bad(name, "holds no 'params' (not a parameter file)")
    return tree["params"]

  def encode(self, text: str) -> np.ndarray:
    """The query's text embedding: the store's text tower (built on first use), or for a space without one its
    caption table."""
    if self.manifest["text_encoder"]["kind"] == "text_tower":
      if not hasattr(self, "_encoder"):
        if self._text_tower is None:
          raise ValueError(f"index {self.path}: its queries are encoded by a text tower, which this reader cannot build")
        self._encoder = self._text_tower(self.manifest["text_encoder"]["tower"])
      if not text.strip():
        raise ValueError("the query is empty")
      return self._encoder([text])[0]
    found = self.text_of.get(text) if text in self.text_of else next(
        (v for t, v in self.text_of.items() if t.lower() == text.strip().lower()), None)
    if found is None:
      examples = ", ".join(files.quote(t) for t in list(self.text_of)[:3])
      raise ValueError(f"query {files.quote(text)} is not a caption of this index's space (its text encoder is a caption table "
                       f"of {len(self.text_of)} captions, e.g. {examples})")
    return found

  def search(self, text: str, context: Sequence[str] = (), k: int = 10):
    """(StackResult for one query, stages used): recall -> rerank -> CAST when `context` clips are given."""
    unknown = [c for c in context if c not in self.row]
    if unknown:
      raise ValueError(f"unknown context clip {files.quote(unknown[0])}: not a clip of this index's corpus "
                       f"({len(self.ids)} clips, e.g. {self.ids[0]!r})")
    stages = [s for s in self.stages if context or s.name not in self.needs_context]
    last = stages[-1].k if stages else self.manifest["recall"]["k"]
    if not 1 <= k <= last:
      raise ValueError(f"--k must be in [1, {last}] for this index, got {k}")
    query = {"text": self.encode(text)[None].astype(np.float32)}
    if self.needs_context:
      length = getattr(self, "context_len", len(context))
      history = np.zeros((1, length, self.vectors.shape[1]), np.float32)
      mask = np.zeros((1, length), np.float32)
      recent = list(context)[-length:] if length else []
      if recent:
        history[0, length - len(recent):] = self.vectors[[self.row[c] for c in recent]]
        mask[0, length - len(recent):] = 1.0
      query.update(history=history, history_mask=mask)
    stack = Stack(self.recall, int(self.manifest["recall"]["k"]), stages, query_batch=1)
    return stack.search(query, k, exclude=[list(context)]), [s.name for s in stages]
