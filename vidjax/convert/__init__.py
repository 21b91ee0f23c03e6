"""Released PyTorch checkpoints -> vidjax parameters (`python -m vidjax.convert`), without importing torch.

    python -m vidjax.convert --from {grdr,xpool,clip4clip} --checkpoint FILE --out DIR

reads the checkpoint (`state_dict.load_state_dict`: torch's zip format through a restricted unpickler, safetensors,
or .npz), maps each official key onto the vidjax module that computes the same thing (`vidjax.convert.<kind>`;
the mapping is held against the official modules by the goldens in `tests/golden/`), and writes

    DIR/params.npz        the vidjax params, one array per '/'-joined parameter path
    DIR/conversion.json   {"from", "checkpoint", "sha256", "info": what the converter recorded (e.g. the pooling,
                           the keys it skipped and why)}

A run starts from them with `--config.init_checkpoint=DIR`: `load(DIR)` reads them back and `into(init, DIR)` checks
that they have exactly the structure and shapes of the model the config builds (one error naming the first path that
differs), so a checkpoint never half-loads. A conversion that holds several models (X-Pool's: its retriever and its
CLIP text tower) lists them in `info["parts"]`, and each model loads its own with `into(init, DIR, subtree=PART)`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from vidjax import io
from vidjax.ops import flatten_dict, unflatten_dict
from vidjax.convert.state_dict import ConversionError, StateDict, load_state_dict  # noqa: F401  (re-exported)

PARAMS_FILE = "params.npz"
INFO_FILE = "conversion.json"
# --from -> the converter module (each has `convert(sd: StateDict, **options) -> (params, info)`).
CONVERTERS = {"grdr": "vidjax.convert.grdr", "xpool": "vidjax.convert.xpool", "clip4clip": "vidjax.convert.clip4clip"}


def flatten(tree: Mapping[str, Any]) -> dict[str, np.ndarray]:
  """{'a/b/c': array} of a nested params dict (`ops.flatten_dict`, leaves as NumPy arrays)."""
  return {k: np.asarray(v) for k, v in flatten_dict(tree).items()}


def save(out: str | Path, params: Mapping[str, Any], record: Mapping[str, Any]) -> Path:
  """Writes a conversion (the module docstring), each file atomically."""
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  flat = flatten(params)
  import io as _io  # pylint: disable=g-import-not-at-top
  buffer = _io.BytesIO()
  np.savez(buffer, **flat)
  io.atomic_write_bytes(out / PARAMS_FILE, buffer.getvalue())
  io.atomic_write_json(out / INFO_FILE, dict(record))
  return out


def load(directory: str | Path) -> tuple[dict, dict]:
  """(params, conversion record) of a directory `save` wrote."""
  directory = Path(directory)
  if not (directory / PARAMS_FILE).is_file() or not (directory / INFO_FILE).is_file():
    raise ConversionError(f"{directory}: not a converted checkpoint (needs {PARAMS_FILE} and {INFO_FILE}; "
                          "write it with python -m vidjax.convert)")
  record = io.read_json(directory / INFO_FILE, "conversion record")
  with np.load(directory / PARAMS_FILE, allow_pickle=False) as z:
    params = unflatten_dict({k: z[k] for k in z.files})
  return params, record


def into(init: Mapping[str, Any], directory: str | Path, expect_from: tuple[str, ...] = (),
         subtree: str | None = None) -> tuple[dict, dict]:
  """The converted params at `directory` in place of `init` (a model's freshly initialised params), after checking
  that both have the same paths and shapes; (params, record). `expect_from`: the kinds this model takes; `subtree`:
  the part this model takes of a conversion that holds several (`info["parts"]`), None for one that holds one."""
  params, record = load(directory)
  if expect_from and record.get("from") not in expect_from:
    raise ConversionError(f"{directory}: converted from {record.get('from')!r}, but this model takes "
                          f"{' or '.join(expect_from)}")
  parts = (record.get("info") or {}).get("parts")
  if parts and subtree not in parts:
    raise ConversionError(f"{directory}: the conversion holds the parts {parts}; name the one this model takes "
                          f"(subtree=...), not {subtree!r}")
  if subtree is not None and not parts:
    raise ConversionError(f"{directory}: the conversion holds one model, not parts (asked for {subtree!r})")
  if subtree is not None:
    params = params[subtree]
  want, have = flatten(init), flatten(params)
  for path in sorted(set(want) | set(have)):
    if path not in have:
      raise ConversionError(f"{directory}: parameter {path!r} of the model is missing from the conversion")
    if path not in want:
      raise ConversionError(f"{directory}: parameter {path!r} is not in the model the config builds")
    if want[path].shape != have[path].shape:
      raise ConversionError(f"{directory}: parameter {path!r} has shape {have[path].shape}, the model's is "
                            f"{want[path].shape}")
  return unflatten_dict({p: have[p].astype(want[p].dtype) for p in want}), record


def describe(record: Mapping[str, Any]) -> str:
  return json.dumps({k: record[k] for k in ("from", "checkpoint", "sha256") if k in record})
