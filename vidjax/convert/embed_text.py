"""X-Pool's query embeddings into a feature store: each caption through the CLIP text tower of a converted X-Pool
checkpoint (`python -m vidjax.convert --from xpool`, part `TEXT_TOWER`), so the rerank scores queries in the space
the checkpoint's pooling was trained in.

    python -m vidjax.convert.embed_text --checkpoint CONVERTED_DIR --tokenizer tokenizer.json --store STORE \
        --dataset msrvtt --annotations msrvtt_ret_test.json [--annotations ...] [--kind xpool_text]

Tokenization: the user's CLIP `tokenizer.json` (that of `openai/clip-vit-base-patch32`, which X-Pool's
`CLIPTokenizer.from_pretrained` loads), read by Hugging Face's `tokenizers`: its normaliser, BPE and post-processor
give `<|startoftext|> ... <|endoftext|>`, truncated to the tower's context (77) as X-Pool's `tokenizer(...,
padding=True, truncation=True)` truncates (to the tokenizer's model_max_length, 77). Rows are padded with
`<|endoftext|>` (CLIPTokenizer's pad token) to a bucket length; padding after the end-of-text token does not change
the tower's output (causal attention, pooled at the first end-of-text: `vidjax.models.clip_text`), so X-Pool's
padding to the batch's longest row and this one give the same embeddings. The tower pools at the largest id, so the
tokenizer's `<|endoftext|>` must be its last id (CLIP's 49407 of 49408): checked.

What is embedded, keyed as the methods look queries up: every caption under its caption id, and for DiDeMo and
ActivityNet (tested paragraph-to-video) every video's paragraph, its captions joined, under the video id (as
`configs/prepare.py` and GRDR's X-Pool datasets join them). Each embedding is the tower's output unit-normalised: GRDR's
X-Pool reranker normalises the query embedding before it pools the frames with it and before the cosine
(`reranker/xpool/trainer/evaluator.py`, `evaluate_query`), and its frame features are stored normalised too. The
kind (default `xpool_text`, [projection] float32) is new in the store; ids it already holds are skipped (a rerun
resumes), and the store's manifest records under `kind_sources/<kind>` which conversion and tokenizer wrote it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidjax import convert, io
from vidjax.ops import l2_normalize
from vidjax.convert import ConversionError
from vidjax.convert import xpool as convert_xpool
from vidjax.data.annotations.types import paragraphs
from vidjax.data.features import FeatureStore
from vidjax.data.grdr_release import PARAGRAPHS
from vidjax.data.retrieval import read_dataset
from vidjax.models.clip_text import CLIPTextConfig, CLIPTextTower

KIND = "xpool_text"
START, END = "<|startoftext|>", "<|endoftext|>"
BUCKET = 8  # rows are padded to a multiple of this (few compiled shapes, little padding)


def load_tower(directory: str | Path) -> tuple[CLIPTextConfig, dict, dict]:
  """(config, params, conversion record) of the text tower of a converted X-Pool checkpoint."""
  _, record = convert.load(directory)
  tower = ((record.get("info") or {}).get("text_tower") or {}).get("config")
  if record.get("from") != "xpool" or tower is None:
    raise ConversionError(f"{directory}: not an X-Pool conversion with a text tower (converted from "
                          f"{record.get('from')!r}); convert the checkpoint with python -m vidjax.convert --from xpool")
  config = CLIPTextConfig(**tower)
  shapes = jax.eval_shape(lambda: CLIPTextTower(config).init(jax.random.PRNGKey(0),
                                                             jnp.zeros((1, config.context), jnp.int32))["params"])
  init = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
  params, record = convert.into(init, directory, ("xpool",), subtree=convert_xpool.TEXT_TOWER)
  return config, params, record


def load_tokenizer(path: str | Path, config: CLIPTextConfig):
  """The `tokenizers.Tokenizer` of a CLIP tokenizer.json, truncating to the tower's context; the end-of-text id."""
  import tokenizers  # pylint: disable=g-import-not-at-top

  path = Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"tokenizer file not found: {path} (CLIP's tokenizer.json, e.g. that of "
                            "openai/clip-vit-base-patch32)")
  try:
    tok = tokenizers.Tokenizer.from_file(str(path))
  except Exception as e:  # the Rust side raises a plain Exception for a malformed file
    raise ValueError(f"{path}: not a tokenizers tokenizer.json ({e})") from None
  start, end, size = tok.token_to_id(START), tok.token_to_id(END), tok.get_vocab_size(with_added_tokens=True)
  if start is None or end is None:
    raise ValueError(f"{path}: no {START} / {END} tokens: not a CLIP tokenizer")
  if end != size - 1 or size > config.vocab:
    raise ValueError(f"{path}: {END} is id {end} of a vocabulary of {size}; the text tower (vocabulary "
                     f"{config.vocab}) pools at the largest id, so {END} must be the last id of its vocabulary")
  tok.no_padding()
  tok.enable_truncation(max_length=config.context)
  probe = tok.encode("a").ids
  if probe[:1] != [start] or probe[-1:] != [end]:
    raise ValueError(f"{path}: encoding 'a' gives {probe}, not {START} ... {END}: the file's post-processor does not "
                     "add CLIP's start and end tokens")
  return tok, end


def queries(dataset: str, annotations: Sequence[str]) -> dict[str, str]:
  """{query id: text} of the annotation files (the module docstring); an id given two texts is an error."""
  out: dict[str, str] = {}
  for value in annotations:
    records = read_dataset(dataset, value)
    rows = records.captions + (paragraphs(records).captions if dataset in PARAGRAPHS else ())
    for c in rows:
      if out.setdefault(c.caption_id, c.text) != c.text:
        raise ValueError(f"{value}: query id {c.caption_id!r} has the text {c.text!r}, another file gave it "
                         f"{out[c.caption_id]!r}")
  return out


def embed(config: CLIPTextConfig, params: dict, tok, end: int, texts: Sequence[str], batch: int = 256) -> np.ndarray:
  """Unit-normalised text embeddings [N, projection] float32 of `texts`."""
  tower = CLIPTextTower(config)
  apply = jax.jit(lambda p, ids: tower.apply({"params": p}, ids))
  encoded = [e.ids for e in tok.encode_batch(list(texts))]
  order = np.argsort([len(ids) for ids in encoded], kind="stable")  # similar lengths share a batch
  out = np.zeros((len(texts), config.projection), np.float32)
  size = min(batch, len(texts))
  for lo in range(0, len(order), size):
    rows = order[lo:lo + size]
    length = min(config.context, -(-max(len(encoded[r]) for r in rows) // BUCKET) * BUCKET)
    ids = np.full((size, length), end, np.int32)  # a short last batch is padded with rows of end tokens
    for i, r in enumerate(rows):
      ids[i, :len(encoded[r])] = encoded[r]
    out[rows] = np.asarray(apply(params, ids))[:len(rows)]
  return l2_normalize(out)


def embed_into_store(checkpoint: str | Path, tokenizer: str | Path, store_root: str | Path, dataset: str,
                     annotations: Sequence[str], kind: str = KIND, batch: int = 256) -> dict:
  """Writes the queries' embeddings (module docstring) as `kind`; returns counts."""
  if not (isinstance(batch, int) and batch >= 1):
    raise ValueError(f"batch={batch!r} must be a positive integer")
  config, params, record = load_tower(checkpoint)
  tok, end = load_tokenizer(tokenizer, config)
  wanted = queries(dataset, annotations)
  store = FeatureStore.create(store_root)
  todo = [q for q in wanted if not store.has(kind, q)]
  if todo:
    vectors = embed(config, params, tok, end, [wanted[q] for q in todo], batch)
    with store.writer(kind, shard_prefix="xpool-text", flush_every=max(1, len(todo))) as w:
      for q, v in zip(todo, vectors):
        w.add(q, v)
  digest, _ = io.sha256_file(tokenizer)
  sources = dict(store.metadata.get("kind_sources") or {})
  sources[kind] = {"conversion": convert.describe(record), "tokenizer": str(Path(tokenizer).resolve()),
                      "tokenizer_sha256": digest, "text_tower": record["info"]["text_tower"],
                      "normalised": True}
  store.update_metadata({"kind_sources": sources})
  return {"kind": kind, "queries": len(wanted), "embedded": len(todo), "width": config.projection}


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m vidjax.convert.embed_text", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--checkpoint", required=True, help="a converted X-Pool checkpoint (python -m vidjax.convert)")
  parser.add_argument("--tokenizer", required=True, help="CLIP's tokenizer.json (openai/clip-vit-base-patch32)")
  parser.add_argument("--store", required=True, help="the feature store to write into (created when missing)")
  parser.add_argument("--dataset", required=True, help="the dataset the annotation files are of (e.g. msrvtt)")
  parser.add_argument("--annotations", required=True, action="append",
                      help="an annotation file as config.data.annotations names it; repeat for more")
  parser.add_argument("--kind", default=KIND, help=f"the store kind to write (default {KIND})")
  parser.add_argument("--batch", type=int, default=256, help="queries per forward pass")
  args = parser.parse_args(argv)
  try:
    counts = embed_into_store(args.checkpoint, args.tokenizer, args.store, args.dataset, args.annotations,
                              args.kind, args.batch)
  except (ConversionError, ValueError, FileNotFoundError) as e:
    print(f"vidjax.convert.embed_text: error: {e}", file=sys.stderr)
    return 2
  print(f"vidjax.convert.embed_text: {counts['queries']} queries, {counts['embedded']} embedded into "
        f"{args.store} as {counts['kind']!r} ([{counts['width']}] each)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
