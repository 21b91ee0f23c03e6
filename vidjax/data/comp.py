"""VideoComp compositional benchmarks (../shared/papers/videocomp.txt §3.1, §3.4): release reader and builder.

**Release format** (google-deepmind/video_comp README), a JSON list of entries::

    {"key": str, "video_id": str, "type": str,
     "original_video/start_time": s, "original_video/end_time": s,
     "query_video/start_time": s, "query_video/end_time": s,      # also spelled "query_videl/end_time"
     "positive_text": str, "negative_text": str,
     "positive_start_time": s, "positive_end_time": s, "negative_start_time": s, "negative_end_time": s,
     "question": str, "answer": str}

`read_release(path)` validates every entry (one `ValueError` naming the file and the key: missing field,
end before start, empty text, unknown type, a negative equal to its positive, a span outside the original
video) and returns `CompTriplet`s. The input video of a triplet is
the original video, except for segment mismatch, where it is the original trimmed to the query times.
Types are `temp_reorder`, `action_replace`, `seg_mismatch` (evaluation) and `multi` (training only);
spellings with hyphens or spaces, and `temporal_reorder` / `segment_mismatch`, are accepted.

**Builder** (`build_comp`): ActivityNet-Comp / YouCook2-Comp style triplets from dense captions, with the
paper's rules (§3.1):

* positives: event captions sorted by start time. ActivityNet: a caption whose span contains more than
  two other events is a global description and is dropped; of two captions with temporal IoU above
  `iou_threshold` the longer is kept. The sentences are joined with forward temporal connectives.
* temp-reorder: the sentences shuffled (never the identity order, nor an order that reads the same),
  connectives re-applied (forward only).
* action-replace: one action word of the positive (a word of the shipped lexicon,
  `resources/comp_actions.json`) replaced by another word of its group.
* seg-mismatch: two contiguous sub-intervals of the event sequence whose caption sets differ by at
  least two captions, each holding a caption the other lacks (neither contains the other); the video
  is cropped to the first, the text is the second's paragraph.
* multi (training splits): the video's temp-reorder shuffle applied to its action-replace sentences, so
  it contains both single disruptions (the top level of the CompLoss hierarchy).

The paper rewrites with an LLM (Gemini-1.5-Pro); vidjax builds the same edits deterministically through
the `Rewriter` interface (`TemplateRewriter`: connective words and the lexicon), so an LLM rewriter can be
plugged in. Every rewritten paragraph goes through the paper's word-level validation (§3.1.3: precision
and recall of `set(P.split())` against `set(O.split())`, O the source sentences joined as sentences
(`plain_paragraph`), both >= `min_overlap` = 0.8) or is dropped and counted. All randomness comes from `numpy.random.default_rng([seed, crc32(video_id), type])`,
so the same inputs and seed give byte-identical files (`write_release`).
"""
from __future__ import annotations

import dataclasses
import os
import re
import zlib
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from vidjax import io
from vidjax.data.annotations.types import RetrievalData, Video

EVAL_TYPES = ("temp_reorder", "action_replace", "seg_mismatch")
TRAIN_TYPES = (*EVAL_TYPES, "multi")
_ALIASES = {"temporal_reorder": "temp_reorder", "segment_mismatch": "seg_mismatch", "action_replacement": "action_replace",
            "multi_disruption": "multi"}
LEXICON = Path(__file__).parent / "resources" / "comp_actions.json"
CONNECTIVES = ("Then", "Next", "After that", "Afterwards", "Later", "Subsequently")
FINAL_CONNECTIVE = "Finally"
_TIME_FIELDS = ("original_video/start_time", "original_video/end_time", "query_video/start_time",
                "query_video/end_time", "positive_start_time", "positive_end_time", "negative_start_time",
                "negative_end_time")
_TEXT_FIELDS = ("key", "video_id", "type", "positive_text", "negative_text")


@dataclasses.dataclass(frozen=True)
class CompTriplet:
  """One (video, positive text, negative text) triplet.

  Attributes:
    key, video_id, type: as in the release; `type` normalised (EVAL_TYPES / "multi").
    original: (start, end) seconds of the original video; query: the query span (seg-mismatch crop).
    positive, negative: the two paragraphs; positive_span, negative_span: the (start, end) they describe.
    question, answer: the release's LMM prompt fields ("" when absent).
  """
  key: str
  video_id: str
  type: str
  original: tuple[float, float]
  query: tuple[float, float]
  positive: str
  negative: str
  positive_span: tuple[float, float]
  negative_span: tuple[float, float]
  question: str = ""
  answer: str = ""

  @property
  def video_span(self) -> tuple[float, float]:
    """The input video: the original, or for segment mismatch the original trimmed to the query times."""
    return self.query if self.type == "seg_mismatch" else self.original

  def to_release(self) -> dict:
    return {"key": self.key, "video_id": self.video_id, "type": self.type,
            "original_video/start_time": self.original[0], "original_video/end_time": self.original[1],
            "query_video/start_time": self.query[0], "query_video/end_time": self.query[1],
            "positive_text": self.positive, "negative_text": self.negative,
            "positive_start_time": self.positive_span[0], "positive_end_time": self.positive_span[1],
            "negative_start_time": self.negative_span[0], "negative_end_time": self.negative_span[1],
            "question": self.question, "answer": self.answer}


def normalise_type(name: str) -> str | None:
  t = re.sub(r"[\s\-]+", "_", str(name).strip().lower())
  t = _ALIASES.get(t, t)
  return t if t in TRAIN_TYPES else None


def parse_release(entries, source: str = "<release>") -> list[CompTriplet]:
  """Validates release entries (module docstring); one clear error per malformed entry."""
  if not isinstance(entries, list):
    raise ValueError(f"{source}: expected a JSON list of triplet entries, got {type(entries).__name__}")
  out, seen = [], set()
  for i, e in enumerate(entries):
    where = f"{source}: entry {i}" + (f" (key {e.get('key')!r})" if isinstance(e, dict) and "key" in e else "")
    if not isinstance(e, dict):
      raise ValueError(f"{where}: expected a JSON object, got {type(e).__name__}")
    e = dict(e)
    if "query_video/end_time" not in e and "query_videl/end_time" in e:  # the README's spelling
      e["query_video/end_time"] = e["query_videl/end_time"]
    for f in (*_TEXT_FIELDS, *_TIME_FIELDS):
      if f not in e:
        raise ValueError(f"{where}: missing field {f!r}")
    for f in _TEXT_FIELDS:
      if not isinstance(e[f], str) or not e[f].strip():
        raise ValueError(f"{where}: {f!r} must be a non-empty string, got {e[f]!r}")
    for f in _TIME_FIELDS:
      if isinstance(e[f], bool) or not isinstance(e[f], (int, float)) or not np.isfinite(e[f]) or e[f] < 0:
        raise ValueError(f"{where}: {f!r} must be a non-negative number of seconds, got {e[f]!r}")
    for a, b in zip(_TIME_FIELDS[::2], _TIME_FIELDS[1::2]):
      if e[b] < e[a]:
        raise ValueError(f"{where}: {b!r} ({e[b]}) is before {a!r} ({e[a]})")
    kind = normalise_type(e["type"])
    if kind is None:
      raise ValueError(f"{where}: unknown type {e['type']!r} (expected one of {TRAIN_TYPES})")
    if e["negative_text"].strip() == e["positive_text"].strip():
      raise ValueError(f"{where}: the negative text equals the positive: the pair cannot be told apart")
    lo, hi = e["original_video/start_time"], e["original_video/end_time"]
    for a, b in (("query_video/start_time", "query_video/end_time"), ("positive_start_time", "positive_end_time"),
                 ("negative_start_time", "negative_end_time")):
      if e[a] < lo - 1e-6 or e[b] > hi + 1e-6:
        raise ValueError(f"{where}: [{a}, {b}] = [{e[a]}, {e[b]}] lies outside the original video [{lo}, {hi}]")
    if e["key"] in seen:
      raise ValueError(f"{where}: duplicate key")
    seen.add(e["key"])
    out.append(CompTriplet(e["key"], e["video_id"], kind,
                           (float(e["original_video/start_time"]), float(e["original_video/end_time"])),
                           (float(e["query_video/start_time"]), float(e["query_video/end_time"])),
                           e["positive_text"].strip(), e["negative_text"].strip(),
                           (float(e["positive_start_time"]), float(e["positive_end_time"])),
                           (float(e["negative_start_time"]), float(e["negative_end_time"])),
                           str(e.get("question", "")), str(e.get("answer", ""))))
  return out


def read_release(path: str | os.PathLike) -> list[CompTriplet]:
  """Reads a VideoComp release file (or a file `write_release` wrote)."""
  return parse_release(io.read_json(path, "VideoComp release file"), str(path))


# ---------------------------------------------------------------------------------------------- building


@dataclasses.dataclass(frozen=True)
class EventVideo:
  """A densely captioned video: its duration and its events (start, end, sentence) in file order."""
  video_id: str
  duration: float
  events: tuple[tuple[float, float, str], ...]


def events_from_activitynet(data: RetrievalData) -> list[EventVideo]:
  by_video = data.captions_by_video()
  return [EventVideo(v.video_id, float(v.duration or max((c.end or 0.0) for c in by_video[v.video_id])),
                     tuple((c.start, c.end, c.text) for c in by_video[v.video_id]))
          for v in data.videos if by_video[v.video_id]]


def events_from_youcook2(videos: Sequence[Video]) -> list[EventVideo]:
  return [EventVideo(v.video_id, float(v.duration or v.clips[-1].end), tuple((c.start, c.end, c.text) for c in v.clips))
          for v in videos if v.clips]


def plain_paragraph(sentences: Sequence[str]) -> str:
  """The original paragraph O of §3.1.3: the sentences, each ending with one period, joined by spaces."""
  return " ".join(s.strip().rstrip(".") + "." for s in sentences)


def word_overlap(paragraph: str, original: str) -> tuple[float, float]:
  """§3.1.3: (precision, recall) of the word sets `set(P.split())` against `set(O.split())`."""
  p, o = set(paragraph.split()), set(original.split())
  common = len(p & o)
  return (common / len(p) if p else 0.0, common / len(o) if o else 0.0)


def _iou(a, b) -> float:
  inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
  union = max(a[1], b[1]) - min(a[0], b[0])
  return inter / union if union > 0 else float(a == b)


def positive_events(video: EventVideo, *, drop_global: bool, iou_threshold: float) -> list[tuple[float, float, str]]:
  """The positive's events (§3.1.1): chronological; global captions and IoU duplicates removed."""
  events = [(max(0.0, s), min(video.duration, e), t.strip()) for s, e, t in video.events if t.strip()]
  if drop_global:
    covers = [sum(1 for j, o in enumerate(events) if j != i and ev[0] <= o[0] and o[1] <= ev[1])
              for i, ev in enumerate(events)]
    events = [ev for ev, c in zip(events, covers) if c <= 2]
  kept = []
  for ev in sorted(events, key=lambda ev: (-(ev[1] - ev[0]), ev[0], ev[2])):  # longer first
    if all(_iou(ev, k) <= iou_threshold for k in kept):
      kept.append(ev)
  return sorted(kept, key=lambda ev: (ev[0], ev[1]))


class Rewriter(Protocol):
  """What the builder asks of a rewriter (an LLM can implement it; vidjax ships `TemplateRewriter`)."""

  def connect(self, sentences: Sequence[str], rng: np.random.Generator) -> str:
    """The sentences, in this order, as one paragraph with forward temporal cues (no new content)."""

  def replace_action(self, paragraph: str, rng: np.random.Generator) -> str | None:
    """The paragraph with one key action replaced by a plausible alternative (None: no action found)."""


def load_lexicon(path: str | os.PathLike = LEXICON) -> dict[str, tuple[str, ...]]:
  """word -> its alternatives (the other words of its group); a word in two groups is an error."""
  groups = io.read_json(path, "VideoComp action lexicon")["groups"]
  out = {}
  for g in groups:
    for w in g:
      if w in out:
        raise ValueError(f"{path}: action word {w!r} is in two groups")
      out[w] = tuple(x for x in g if x != w)
  return out


class TemplateRewriter:
  """Deterministic rewriter: connective words between sentences, and one lexicon action word replaced."""

  def __init__(self, lexicon: dict[str, tuple[str, ...]] | None = None, connectives: bool = True):
    """`connectives=False` joins the sentences plainly (`plain_paragraph`): for template sentences of
    a few words (the embedded world's), three connective words alone would fail the §3.1.3 precision."""
    self.lexicon = load_lexicon() if lexicon is None else lexicon
    self.connectives = connectives

  def connect(self, sentences, rng):
    if not self.connectives:
      return plain_paragraph(sentences)
    out = []
    for i, s in enumerate(sentences):
      s = s.strip().rstrip(".") + "."
      if i > 0:
        cue = FINAL_CONNECTIVE if i == len(sentences) - 1 and i > 1 else CONNECTIVES[rng.integers(len(CONNECTIVES))]
        s = f"{cue}, {s[0].lower() + s[1:] if s[:2] != 'I ' else s}"
      out.append(s)
    return " ".join(out)

  def replace_action(self, paragraph, rng):
    # Whole words only: not a part of "stir-fry" or "don't".
    hits = [m for m in re.finditer(r"(?<![\w'-])[A-Za-z]+(?![\w'-])", paragraph) if m.group().lower() in self.lexicon]
    if not hits:
      return None
    m = hits[rng.integers(len(hits))]
    word = m.group()
    alt = self.lexicon[word.lower()][rng.integers(len(self.lexicon[word.lower()]))]
    alt = alt.capitalize() if word[0].isupper() else alt
    return paragraph[:m.start()] + alt + paragraph[m.end():]


def _rng(seed: int, video_id: str, kind: str | None, stream: int = 0) -> np.random.Generator:
  """The random stream of one video (and type; None: shared by every type)."""
  return np.random.default_rng([seed, zlib.crc32(video_id.encode()), 0 if kind is None else TRAIN_TYPES.index(kind) + 1,
                                stream])


def _permutation(sentences, rng) -> np.ndarray | None:
  """A shuffle of the sentences that is not the identity and does not read the same (None: none exists)."""
  n = len(sentences)
  for _ in range(20):
    perm = rng.permutation(n)
    if (perm != np.arange(n)).any() and [sentences[i] for i in perm] != list(sentences):
      return perm
  return None


def _reorder(sentences, rng):
  perm = _permutation(sentences, rng)
  return None if perm is None else [sentences[i] for i in perm]


def _replace_one(sentences, rewriter: Rewriter, rng) -> list[str] | None:
  """The sentences with one key action replaced (`rewriter.replace_action` on one sentence that has one,
  drawn uniformly); None when no sentence has an action word."""
  for i in rng.permutation(len(sentences)):
    new = rewriter.replace_action(sentences[i], rng)
    if new is not None and new != sentences[i]:
      return [*sentences[:i], new, *sentences[i + 1:]]
  return None


def _seg_intervals(events, rng, tries: int = 50):
  n = len(events)
  for _ in range(tries):
    a = sorted(rng.choice(n + 1, 2, replace=False))
    b = sorted(rng.choice(n + 1, 2, replace=False))
    sa, sb = set(range(*a)), set(range(*b))
    if sa - sb and sb - sa and len(sa ^ sb) >= 2 and _span(events, a) != _span(events, b):
      return tuple(a), tuple(b)  # each keeps information of its own (§3.1.2), and the crops differ
  return None


def _span(events, interval) -> tuple[float, float]:
  """The video span of events[i0:i1] (their first start to their last end)."""
  i0, i1 = interval
  return events[i0][0], max(e[1] for e in events[i0:i1])


def build_comp(videos: Sequence[EventVideo], *, split: str, types: Sequence[str] | None = None, seed: int = 0,
               drop_global: bool = True, iou_threshold: float = 0.5, min_overlap: float = 0.8,
               rewriter: Rewriter | None = None, name: str = "comp") -> tuple[list[CompTriplet], dict]:
  """Triplets of every video (at most one per type) and their counts (Table 1 shape).

  Args:
    videos: densely captioned videos (`events_from_activitynet` / `events_from_youcook2`).
    split: the split name written in the counts ("train" adds `multi` when `types` is None).
    types: disruption types to build; default EVAL_TYPES (+ "multi" for train).
    seed: drives every random choice (per video and type).
    drop_global: drop captions spanning more than two other events (ActivityNet; YouCook2 has none).
    iou_threshold: of two captions with a larger temporal IoU the longer is kept.
    min_overlap: the §3.1.3 word-level precision and recall threshold.
    rewriter: defaults to `TemplateRewriter()`.

  Returns:
    (triplets in video order, counts {"split", type: n, "total", "dropped_validation": {type: n},
    "skipped": {reason: n}, "videos"}).
  """
  types = tuple(types) if types is not None else (TRAIN_TYPES if split == "train" else EVAL_TYPES)
  unknown = [t for t in types if t not in TRAIN_TYPES]
  if unknown:
    raise ValueError(f"unknown VideoComp types {unknown}; expected a subset of {TRAIN_TYPES}")
  if not 0.0 <= iou_threshold <= 1.0 or not 0.0 <= min_overlap <= 1.0:
    raise ValueError(f"iou_threshold and min_overlap must lie in [0, 1], got {iou_threshold}, {min_overlap}")
  rewriter = rewriter or TemplateRewriter()
  out: list[CompTriplet] = []
  dropped = {t: 0 for t in types}
  skipped: dict[str, int] = {}

  def valid(text, source_sentences):
    p, r = word_overlap(text, plain_paragraph(source_sentences))
    return p >= min_overlap and r >= min_overlap

  for video in videos:
    events = positive_events(video, drop_global=drop_global, iou_threshold=iou_threshold)
    if len(events) < 2:
      skipped["fewer than 2 events"] = skipped.get("fewer than 2 events", 0) + 1
      continue
    sentences = [e[2] for e in events]
    span = (events[0][0], max(e[1] for e in events))
    full = (0.0, video.duration)
    # One shuffle and one action replacement per video, shared by the types that use them, so a multi
    # negative is exactly the temp-reorder shuffle of the action-replace sentences: each level of the
    # CompLoss hierarchy adds disruption to the one below it (eq. 2).
    perm = _permutation(sentences, _rng(seed, video.video_id, "temp_reorder", 1))
    replaced = _replace_one(sentences, rewriter, _rng(seed, video.video_id, "action_replace", 1))
    # Every paragraph of the video draws its connective words from the same state, so a negative differs
    # from its positive (and multi from temp-reorder) by the edit alone.
    connect = lambda s, vid=video.video_id: rewriter.connect(s, _rng(seed, vid, None))  # noqa: E731
    whole = connect(sentences)
    for kind in types:
      rng = _rng(seed, video.video_id, kind)
      positive = whole
      pos_span, neg_span, query, negative, sources = span, span, full, None, sentences
      if kind == "temp_reorder" and perm is not None:
        negative = connect([sentences[i] for i in perm])
      elif kind == "multi" and perm is not None and replaced is not None:
        negative = connect([replaced[i] for i in perm])
      elif kind == "action_replace" and replaced is not None:
        negative = connect(replaced)
        sources = [positive]
      elif kind == "seg_mismatch":
        pair = _seg_intervals(events, rng)
        if pair is not None:
          (a0, a1), (b0, b1) = pair
          pos_sent, neg_sent = sentences[a0:a1], sentences[b0:b1]
          pos_span, neg_span = _span(events, (a0, a1)), _span(events, (b0, b1))
          query = pos_span
          positive, negative = connect(pos_sent), connect(neg_sent)
          if not (valid(positive, pos_sent) and valid(negative, neg_sent)):
            dropped[kind] += 1
            continue
          sources = None
      if negative is None or negative == positive:
        reason = f"{kind}: no disruption possible"
        skipped[reason] = skipped.get(reason, 0) + 1
        continue
      if sources is not None and not (valid(positive, sentences) and valid(negative, sources)):
        dropped[kind] += 1
        continue
      first = int(rng.integers(2))
      options = (positive, negative) if first == 0 else (negative, positive)
      question = f"Which text describes the video? A: {options[0]} B: {options[1]}"
      out.append(CompTriplet(f"{name}/{split}/{video.video_id}/{kind}", video.video_id, kind, full, query, positive,
                             negative, pos_span, neg_span, question, "AB"[first]))
  counts = {"split": split, "videos": len(videos), **{t: sum(x.type == t for x in out) for t in types},
            "total": len(out), "dropped_validation": dropped, "skipped": dict(sorted(skipped.items()))}
  return out, counts


# ---------------------------------------------------------------------------------------------- training data


@dataclasses.dataclass(frozen=True)
class CompGroup:
  """One training example of eq. 2: a video span, its positive paragraph and one negative per hierarchy
  level (None where that disruption does not exist for this span)."""
  video_id: str
  span: tuple[float, float]
  positive: str
  negatives: tuple[str | None, ...]


def training_groups(triplets: Sequence[CompTriplet], hierarchy: Sequence[str]) -> list[CompGroup]:
  """Groups triplets that share an input video (id and span) into eq. 2 examples, negatives in `hierarchy`
  order (less disrupted first). The group's positive is its first triplet's (the builder gives every type of a
  span the same positive; release files may differ in connective words). Types outside `hierarchy` are
  left out."""
  unknown = [t for t in hierarchy if t not in TRAIN_TYPES]
  if unknown or len(set(hierarchy)) != len(hierarchy):
    raise ValueError(f"hierarchy {tuple(hierarchy)} must list distinct types of {TRAIN_TYPES}")
  groups: dict[tuple, list] = {}
  for t in triplets:
    if t.type not in hierarchy:
      continue
    key = (t.video_id, t.video_span)
    if key not in groups:
      groups[key] = [t.positive, [None] * len(hierarchy)]
    groups[key][1][hierarchy.index(t.type)] = t.negative
  return [CompGroup(vid, span, pos, tuple(negs)) for (vid, span), (pos, negs) in groups.items()]


def stacked_example(clips: Sequence[tuple[str, tuple[float, float], str]], rng: np.random.Generator,
                    rewriter: Rewriter | None = None) -> tuple[str, str | None, str | None]:
  """CompPretrain (§3.3): k short (video id, span, caption) clips stacked into one pseudo long video.

  Returns:
    (positive paragraph of all k captions in order, reordered negative (the segments shuffled, never the
    identity order; None when every order reads the same), partial negative (one or more segments removed,
    the rest in order; None for k = 1)).
  """
  rewriter = rewriter or TemplateRewriter()
  captions = [c for _, _, c in clips]
  positive = rewriter.connect(captions, rng)
  order = _reorder(captions, rng) if len(captions) > 1 else None
  reordered = None if order is None else rewriter.connect(order, rng)
  partial = None
  if len(captions) > 1:
    keep = np.sort(rng.choice(len(captions), int(rng.integers(1, len(captions))), replace=False))
    partial = rewriter.connect([captions[i] for i in keep], rng)
  return positive, reordered, partial


def span_frames(num_frames: int, duration: float, span: tuple[float, float], out_frames: int) -> np.ndarray:
  """int [out_frames]: rows of a video's `num_frames` stored frames (evenly covering [0, duration]) that
  sample `span` uniformly -- the frames whose centres lie in the span, resampled to `out_frames` (the
  nearest stored frame when the span holds none). How a seg-mismatch crop and a CompPretrain clip
  become model input."""
  if num_frames < 1 or duration <= 0:
    raise ValueError(f"span_frames: need num_frames >= 1 and duration > 0, got {num_frames}, {duration}")
  centres = (np.arange(num_frames) + 0.5) * duration / num_frames
  inside = np.flatnonzero((centres >= span[0]) & (centres <= span[1]))
  if inside.size == 0:
    inside = np.array([int(np.argmin(np.abs(centres - 0.5 * (span[0] + span[1]))))])
  return inside[np.minimum((np.arange(out_frames) * inside.size) // out_frames, inside.size - 1)]


def write_release(path: str | os.PathLike, triplets: Sequence[CompTriplet]) -> None:
  """Writes triplets in the release format (atomic; byte-identical for identical triplets)."""
  io.atomic_write_json(path, [t.to_release() for t in triplets])


def format_counts(counts: Sequence[dict]) -> str:
  """Table-1-shaped text table: one row per (dataset, split) with per-type counts and the total."""
  types = [t for t in TRAIN_TYPES if any(t in c for c in counts)]
  head = f"{'split':<26}" + "".join(f"{t:>16}" for t in types) + f"{'total':>8}{'dropped':>9}"
  rows = [head, "-" * len(head)]
  for c in counts:
    rows.append(f"{c['split']:<26}" + "".join(f"{c.get(t, ''):>16}" for t in types) +
                f"{c['total']:>8}{sum(c['dropped_validation'].values()):>9}")
  return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> None:
  """`python -m vidjax.data.comp --dataset activitynet|youcook2 --annotations PATH ... --out DIR`."""
  import argparse
  from vidjax.data.annotations import read_activitynet_captions, read_youcook2
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--dataset", choices=("activitynet", "youcook2"), required=True)
  parser.add_argument("--annotations", nargs="+", required=True,
                      help="activitynet: SPLIT=FILE (e.g. val=val_1.json train=train_modified.json); "
                           "youcook2: the trainval json (splits train and val)")
  parser.add_argument("--out", required=True)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--iou_threshold", type=float, default=0.5)
  args = parser.parse_args(argv)
  splits = {}
  if args.dataset == "activitynet":
    for item in args.annotations:
      split, _, path = item.partition("=")
      if not path:
        parser.error(f"activitynet annotations must be SPLIT=FILE, got {item!r}")
      splits[split] = events_from_activitynet(read_activitynet_captions(path))
  else:
    for split in ("train", "val"):
      splits[split] = events_from_youcook2(read_youcook2(args.annotations[0], split))
  all_counts = []
  for split, videos in splits.items():
    triplets, counts = build_comp(videos, split=split, seed=args.seed, drop_global=args.dataset == "activitynet",
                                  iou_threshold=args.iou_threshold, name=f"{args.dataset}-comp")
    write_release(Path(args.out) / f"{args.dataset}_comp_{split}.json", triplets)
    all_counts.append(counts)
  io.atomic_write_json(Path(args.out) / "counts.json", all_counts)
  print(f"{args.dataset}-Comp (vidjax deterministic rewriter; Table 1 shape)\n{format_counts(all_counts)}")


if __name__ == "__main__":
  main()
