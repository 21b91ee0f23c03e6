"""`python -m vidjax.convert --from KIND --checkpoint FILE --out DIR [--option KEY=VALUE ...]` (see the package)."""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from vidjax import io
from vidjax.convert import CONVERTERS, ConversionError, StateDict, save


def _option(text: str) -> tuple[str, object]:
  key, sep, value = text.partition("=")
  if not sep or not key:
    raise argparse.ArgumentTypeError(f"--option takes KEY=VALUE, got {text!r}")
  try:
    return key, json.loads(value)
  except json.JSONDecodeError:
    return key, value


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m vidjax.convert", description=__doc__)
  parser.add_argument("--from", dest="kind", required=True, choices=sorted(CONVERTERS),
                      help="which official code wrote the checkpoint")
  parser.add_argument("--checkpoint", required=True, help="the released checkpoint (.pth/.pt/.bin, .safetensors, .npz)")
  parser.add_argument("--out", required=True, help="directory for params.npz and conversion.json")
  parser.add_argument("--option", action="append", default=[], type=_option,
                      help="a converter option KEY=VALUE (JSON values), e.g. pooling=seqtransf")
  args = parser.parse_args(argv)
  try:
    sd = StateDict.load(args.checkpoint)
    converter = importlib.import_module(CONVERTERS[args.kind])
    params, info = converter.convert(sd, **dict(args.option))
    sd.finish()
    digest, size = io.sha256_file(args.checkpoint)
    record = {"from": args.kind, "checkpoint": os.path.abspath(args.checkpoint), "sha256": digest, "bytes": size,
              "options": dict(args.option), "skipped": sd.skipped, "info": info}
    out = save(args.out, params, record)
  except (ConversionError, TypeError) as e:
    print(f"vidjax.convert: error: {e}", file=sys.stderr)
    return 2
  print(f"vidjax.convert: {args.kind} checkpoint {args.checkpoint} -> {out} ({len(sd.keys())} keys, "
        f"{len(sd.skipped)} prefixes skipped: {', '.join(sd.skipped) or 'none'})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
