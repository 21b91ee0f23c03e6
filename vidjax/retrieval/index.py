"""The composed stack's index on disk: the format `vidjax.search` opens (`configs/stack_<dataset>.py` writes it).

    <index>/manifest.json   {"format": INDEX_FORMAT, "dataset", "synthetic", "backbone", "dim", "clips",
                             "text_encoder": {"kind": "caption_lookup" | "text_tower", "file", "backbone"[, "tower"]},
                             "recall": {"kind": "dense" | ..., "file", "k", "backbone", ...the kind's fields},
                             "stages": [{"name", "kind", "k", "file", "backbone", ...the kind's fields}],
                             "files": {name: {"bytes", "sha256"}}}      (written last: an index without it is
                                                                          incomplete)
    <index>/corpus.npz      ids [N], vectors [N, D], captions [N], videos [N]
    <index>/texts.npz       captions [C], vectors [C, D] (each caption's mean text embedding: the query encoder of a
                            space without a text tower)
    <index>/<stage>.npz     each stage's (and a generative recall's) parameters, `{"params": ...}`

`write_index` writes it, `StackIndex` opens it (checking the manifest's fields and every file against what it
recorded) and searches it. What a stage or recall kind *is* (the model behind "pair_reranker", "cast_ensemble",
"grdr") is not this module's business: the reader is given `Kinds`, builders by kind (`vidjax.search.KINDS`), so
that the format imports no model and no method. The dense recall is built here (`DenseIndex`, this package's).
"""
from __future__ import annotations

import dataclasses
import io as _io
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import ml_collections
import numpy as np

from vidjax import checkpoints, io, ops
from vidjax.retrieval import files
from vidjax.retrieval.dense import DenseIndex
from vidjax.retrieval.stack import Stack, Stage

INDEX_FORMAT = "vidjax-stack-index/1"
MANIFEST = "manifest.json"
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
  io.atomic_write_json(path / MANIFEST, manifest)
  return path


class StackIndex:
  """A built index: the corpus, the query encoder and the stages, ready to `search`.

  Opening it checks what the index claims before anything is trusted: the manifest's fields (one error naming the
  field), every file it names against the size and SHA-256 the manifest recorded (`"files"`; an index written before
  they were recorded gets every other check), the corpus (ids distinct, as many as the manifest's clips, captions and
  videos one per id, vectors [clips, dim] and finite) and the caption table (one finite [dim] vector per caption).
  Each mismatch is one ValueError naming the index and the file."""

  def __init__(self, path: str | Path, kinds: Kinds):
    path = Path(path)
    if not path.is_dir():
      raise FileNotFoundError(f"index {path}: no such directory (build one with python -m vidjax.main "
                              "--config configs/stack_<dataset>.py --workdir DIR; the index is DIR/index)")
    if not (path / MANIFEST).is_file():
      raise ValueError(f"index {path}: no {MANIFEST}; not a vidjax stack index, or its build did not finish")
    m = io.read_json(path / MANIFEST, "index manifest")
    if not isinstance(m, dict) or m.get("format") != INDEX_FORMAT:
      raise ValueError(f"index {path}/{MANIFEST}: format {m.get('format') if isinstance(m, dict) else m!r} is not "
                       f"{INDEX_FORMAT!r}")
    self.path, self.manifest = path, m
    self._check_manifest()
    parts = [("the text encoder", m["text_encoder"]), ("the recall stage", m["recall"])] + [
        (f"stage {s['name']!r}", s) for s in m["stages"]]
    for what, part in parts:
      if part.get("backbone") != m["backbone"]:
        raise ValueError(f"index {path}: {what} was built for backbone {part.get('backbone')!r} but the index's corpus "
                         f"holds {m['backbone']!r} features; rebuild the index from one feature store")
      if not (path / part["file"]).is_file():
        raise ValueError(f"index {path}: {what}'s file {part['file']} is missing")
    for name, record in (m.get("files") or {}).items():
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
    self.omitted = list(m.get("omitted_stages", []))  # an index written before it was recorded: none named

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
    """Every field the index reads, present and of its type: one error naming the field."""
    m = self.manifest

    def need(obj, key, kind, where):
      value = obj.get(key) if isinstance(obj, dict) else None
      ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
      if not ok or (kind is int and value < 1):
        raise ValueError(f"index {self.path}/{MANIFEST}: {where}{key} is {str(value)[:80] if key in obj else 'missing'}"
                         f", expected {'a positive integer' if kind is int else getattr(kind, '__name__', 'a number')}"
                         f"; the index is damaged or incomplete: {REBUILD}")
      return value

    for key, kind in (("synthetic", bool), ("backbone", str), ("dim", int), ("clips", int), ("text_encoder", dict),
                      ("recall", dict), ("stages", list)):
      need(m, key, kind, "")
    for key, kind in (("kind", str), ("file", str), ("backbone", str)):
      need(m["text_encoder"], key, kind, "text_encoder.")
    for key, kind in (("kind", str), ("file", str), ("backbone", str), ("k", int)):
      need(m["recall"], key, kind, "recall.")
    if m["recall"]["kind"] == "grdr":
      need(m["recall"], "model", dict, "recall.")
      need(m["recall"], "context_len", (int,), "recall.")
    for i, s in enumerate(m["stages"]):
      if not isinstance(s, dict):
        raise ValueError(f"index {self.path}/{MANIFEST}: stages[{i}] is not an object; {REBUILD}")
      for key, kind in (("name", str), ("kind", str), ("file", str), ("backbone", str), ("k", int)):
        need(s, key, kind, f"stages[{i}].")
      if s["kind"] == "cast_ensemble":
        for key, kind in (("num_heads", int), ("context_len", (int,)), ("w_v", (int, float)), ("w_p", (int, float))):
          need(s, key, kind, f"stages[{i}].")
    if "files" in m and not (isinstance(m["files"], dict) and all(
        isinstance(r, dict) and isinstance(r.get("bytes"), int) and isinstance(r.get("sha256"), str)
        for r in m["files"].values())):
      raise ValueError(f"index {self.path}/{MANIFEST}: files must map each file to its bytes and sha256; "
                       f"{REBUILD}")
    names = [m["text_encoder"]["file"], m["recall"]["file"], *(s["file"] for s in m["stages"])]
    outside = [n for n in names if Path(n).name != n]
    if outside:
      raise ValueError(f"index {self.path}/{MANIFEST}: file {outside[0]!r} is not a file name inside the index")

  def _arrays(self, name: str, what: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
    arrays = checkpoints.read_npz(self.path / name, what)
    missing = [k for k in keys if k not in arrays]
    if missing:
      raise self._bad(name, f"lacks the arrays {missing} (it has {sorted(arrays)[:10]})")
    return arrays

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
