"""GenState-AI triplet benchmarks (../shared/papers/genstate_ai.txt §3-§5): metadata format, reader, pools.

The GenState-AI clips are not released, so vidjax reads a small metadata file that a user writes for
their own clips (and that `vidjax.worlds.moving_objects.genstate_triplets` builds for the embedded SYNTHETIC world). Format,
a JSON list with one object per query::

    [{"id": "q0001",                          # unique query id
      "query": "the teddy bear moves from next to the mug to in front of it",
      "main": "clip_0001",                    # video id of the ground truth
      "temporal_negative": "clip_0001_t",     # same scene and objects, other end state or order
      "semantic_negative": "clip_0001_s",     # same motion structure, another object or target
      "subset": "Home",                       # the paper's Home / Toy / Cartoon / Manipulation, or any name
      "distractors": ["clip_0042"],           # optional: extra videos for this query's pool
      "temporal_prompt": "...",               # optional: the prompts the two negatives were generated from
      "semantic_prompt": "..."},              # (training: each clip is then a positive of its own prompt)
     ...]

Video ids are keys of a feature store (or files for extraction); every id and text is a string with a non-space
character and no NUL, and the three roles of one query are three different videos. A key not listed above is an
error naming it (a typo such as "semantic_negtive" would otherwise drop what it holds). Texts in a store
(`prompt_texts`): each query under its id, and the negatives' generation prompts, where given, under
`<id>/temporal_prompt` and `<id>/semantic_prompt`; a query id holds no '/', so the two namespaces never meet.

Candidate pools exactly as §5.1: the ground truth, its temporal negative, its semantic negative, and,
as distractors, the videos of every other query of the same subset (their main and both negatives),
plus the entry's own `distractors`; no video appears twice in a pool. Columns are ordered main,
temporal, semantic, then the distractors sorted by id, which is what `vidjax.metrics.triplet_metrics`
(R@1/5/10, Acc_temp, Acc_sem, Acc_tri, the relative-order histogram; ties count against the model) reads.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
from typing import Sequence

from vidjax import io
from vidjax.data.annotations import types

ROLES = ("main", "temporal_negative", "semantic_negative")
PROMPT_KEYS = ("temporal_prompt", "semantic_prompt")
KEYS = ("id", "query", *ROLES, "subset", "distractors", *PROMPT_KEYS)  # every key an entry may have


@dataclasses.dataclass(frozen=True)
class Triplet:
  """One GenState query: its text, its three videos, its subset and optional extra distractors."""
  query_id: str
  query: str
  main: str
  temporal_negative: str
  semantic_negative: str
  subset: str
  distractors: tuple[str, ...] = ()
  negative_prompts: tuple[str, ...] = ()  # (temporal, semantic) generation prompts, when the metadata gives them

  @property
  def videos(self) -> tuple[str, str, str]:
    return (self.main, self.temporal_negative, self.semantic_negative)


def _fail(path, where: str, message: str):
  raise ValueError(f"{path}: {where}: {message}")


def parse_triplets(entries, source: str = "<metadata>") -> list[Triplet]:
  """Validates a list of metadata entries (see module docstring); one clear error per malformed entry."""
  types.refuse_other_json(entries, source, ("genstate",), "a GenState metadata file (a JSON list of query objects)")
  if not isinstance(entries, list):
    _fail(source, "top level", f"expected a JSON list of query objects, got {type(entries).__name__}")
  out, seen = [], set()
  for i, e in enumerate(entries):
    where = f"entry {i}"
    if not isinstance(e, dict):
      _fail(source, where, f"expected a JSON object, got {type(e).__name__}")
    unknown = [k for k in e if k not in KEYS]
    if unknown:
      close = difflib.get_close_matches(unknown[0], KEYS, n=1)
      _fail(source, where, f"unknown key {unknown[0]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; the keys are {list(KEYS)}")
    for key in ("id", "query", *ROLES, "subset"):
      if key not in e:
        _fail(source, where, f"missing key {key!r} (keys present: {sorted(e)})")
      if not isinstance(e[key], str) or not e[key].strip():
        _fail(source, where, f"{key!r} must be a non-empty string, got {e[key]!r}")
    query_id = types.clean_id(e["id"], source, where, "'id'", "query id")
    where = f"entry {i} (id {query_id!r})"
    if "/" in query_id:
      _fail(source, where, "a query id holds no '/': the negatives' prompts are keyed '<id>/temporal_prompt' and "
            "'<id>/semantic_prompt', and a query id must never equal one")
    if query_id in seen:
      _fail(source, where, "duplicate query id")
    seen.add(query_id)
    videos = [types.clean_id(e[r], source, where, repr(r), "video id") for r in ROLES]
    if len(set(videos)) != 3:
      _fail(source, where, f"main, temporal_negative and semantic_negative must be three different videos, "
                           f"got {videos}")
    extra = e.get("distractors", [])
    if not isinstance(extra, list) or not all(isinstance(x, str) for x in extra):
      _fail(source, where, f"'distractors' must be a list of video ids, got {extra!r}")
    extra = [types.clean_id(x, source, where, "a distractor", "video id") for x in extra]
    prompts = [e.get(k) for k in PROMPT_KEYS]
    if any(p is not None for p in prompts) and not all(isinstance(p, str) and p.strip() for p in prompts):
      _fail(source, where, f"{PROMPT_KEYS} must both be non-empty strings or both absent, got {prompts!r}")
    prompts = [types.clean_text(p, source, where, repr(k), "prompt") for k, p in zip(PROMPT_KEYS, prompts) if p]
    out.append(Triplet(query_id, types.clean_text(e["query"], source, where, "'query'", "query"), *videos,
                       types.clean_id(e["subset"], source, where, "'subset'", "subset name"), tuple(extra),
                       tuple(prompts)))
  if not out:
    _fail(source, "top level", "no queries")
  return out


def read_triplets(path: str | os.PathLike) -> list[Triplet]:
  """Reads a GenState metadata file (module docstring)."""
  return parse_triplets(io.read_json(path, "GenState metadata file"), str(path))


def pools(triplets: Sequence[Triplet]) -> list[list[str]]:
  """The §5.1 candidate pool of every query: [main, temporal, semantic, distractors sorted by id]."""
  by_subset: dict[str, set[str]] = {}
  for t in triplets:
    by_subset.setdefault(t.subset, set()).update(t.videos)
  out = []
  for t in triplets:
    own = set(t.videos)
    rest = sorted((by_subset[t.subset] | set(t.distractors)) - own)
    out.append(list(t.videos) + rest)
  return out


def subsets(triplets: Sequence[Triplet]) -> dict[str, list[int]]:
  """{subset: query rows}, subsets in first-appearance order."""
  out: dict[str, list[int]] = {}
  for i, t in enumerate(triplets):
    out.setdefault(t.subset, []).append(i)
  return out


def prompt_texts(triplets: Sequence[Triplet], negatives: bool = True) -> dict[str, str]:
  """{text id: text} of the prompts of `triplets` as a feature store keys them: each query under its id and (with
  `negatives`, where the metadata gives them) the negatives' generation prompts under `<id>/<key>` for the keys of
  `PROMPT_KEYS`. Two texts under one id (a query id with a '/', which `parse_triplets` refuses) are an error."""
  out = {}
  for t in triplets:
    ids = [t.query_id] + ([f"{t.query_id}/{k}" for k in PROMPT_KEYS[:len(t.negative_prompts)]] if negatives else [])
    for text_id, text in zip(ids, (t.query, *t.negative_prompts)):
      if text_id in out:
        raise ValueError(f"GenState text id {text_id!r} names two texts (a query id and a negative's prompt id): "
                         "query ids hold no '/'")
      out[text_id] = text
  return out


def video_prompts(triplets: Sequence[Triplet], text_ids=None) -> dict[str, tuple[str, str]]:
  """{video id: (text id, prompt)} of every video of `triplets` whose prompt is known: each main clip's query and,
  where the metadata gives them, each negative's generation prompt (`prompt_texts`' ids); with `text_ids` only
  the prompts whose id it holds. In order of appearance (main, temporal, semantic per query)."""
  out = {}
  for t in triplets:
    ids = [t.query_id] + [f"{t.query_id}/{k}" for k in PROMPT_KEYS[:len(t.negative_prompts)]]
    for video, text_id, prompt in zip(t.videos, ids, (t.query, *t.negative_prompts)):
      if text_ids is None or text_id in text_ids:
        out[video] = (text_id, prompt)
  return out
