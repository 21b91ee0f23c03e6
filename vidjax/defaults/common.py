"""What every config shares (jax-free): the one variant parser and the config-value checks.

A config file's `get_config(arg)` builds the paper's defaults and then applies the comma-separated variants of
`arg` in order (big_vision style: `configs/vedje_msrvtt.py:world,fast`):

    return common.apply_variants(c, arg, {"world": world, "smoke": smoke}, "configs/vedje_<dataset>.py")

An experiment's `validate(config)` uses the `check_*` helpers: each raises one `ValueError` that names the key,
the value and what was expected, before any work.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

import ml_collections
import numpy as np

from vidjax.ops import is_positive_int

Variant = Callable[[ml_collections.ConfigDict], Any]


def parse_variants(arg: str | None, known: Iterable[str], where: str) -> list[str]:
  """The variant names of `arg` ("a,b"; None or "" = none), each one of `known`; else one clear error."""
  names = [a.strip() for a in (arg or "").split(",") if a.strip()]
  known = sorted(known)
  for name in names:
    if name not in known:
      raise ValueError(f"{where}: unknown variant {name!r} (known: {', '.join(known) or 'none'})")
  return names


def apply_variants(config: ml_collections.ConfigDict, arg: str | None, variants: Mapping[str, Variant],
                   where: str) -> ml_collections.ConfigDict:
  """Applies each variant of `arg` to `config` in order (each a function that edits the config); returns it."""
  for name in parse_variants(arg, variants, where):
    variants[name](config)
  return config


# The parameters of every `DenseIndex` backend ("approx": recall_target; "faiss": factory .. train_size; "scann":
# num_leaves .. training_sample_size); None = the backend's default. Only the chosen backend's are passed on.
INDEX_BACKENDS = ("jax", "approx", "faiss", "scann")
INDEX_PARAMS = {"approx": ("recall_target",),
                "faiss": ("factory", "nprobe", "efSearch", "blas_threshold", "train_size"),
                "scann": ("num_leaves", "num_leaves_to_search", "dims_per_block", "aq_threshold", "reorder",
                          "training_sample_size")}


def index_section() -> ml_collections.ConfigDict:
  """`config.index`: the dense index a recall stage searches (`DenseIndex.from_config`).

  backend: "jax" (exact top-k, the default; shardable over a mesh), "approx" (`jax.lax.approx_max_k`: TPU only
  saves anything), "faiss" or "scann" (optional extras: `pip install -e .[faiss]` / `.[scann]`); dtype: the JAX
  backends' storage ("float32" | "bfloat16"); params: the backend's, e.g.
  `--config.index.backend=faiss --config.index.params.factory=IVF1024,PQ32 --config.index.params.nprobe=16`.
  """
  params = {name: None for names in INDEX_PARAMS.values() for name in names}
  return ml_collections.ConfigDict(dict(backend="jax", dtype="float32", params=params))


# ----------------------------------------------------------------------------------------------
# Config checks: one clear error per bad value.


def bad_value(key: str, value: Any, expected: str) -> None:
  """Raises the one clear error for a bad config value."""
  raise ValueError(f"config.{key}={value!r} is invalid: expected {expected}")


def get_key(config, key: str) -> Any:
  """`config['a.b.c']` for a dotted key."""
  node = config
  for part in key.split("."):
    node = node[part]
  return node


def check_choice(config, key: str, choices: Sequence[Any]) -> None:
  if get_key(config, key) not in choices:
    bad_value(key, get_key(config, key), f"one of {tuple(choices)}")


def check_positive_int(config, keys: Iterable[str]) -> None:
  for key in keys:
    value = get_key(config, key)
    if not is_positive_int(value):
      bad_value(key, value, "a positive integer")


def check_positive(config, keys: Iterable[str]) -> None:
  for key in keys:
    value = get_key(config, key)
    if isinstance(value, bool) or not (isinstance(value, (int, float, np.number)) and value > 0):
      bad_value(key, value, "a positive number")


def check_index(config, key: str = "index") -> None:
  """An `index_section`: a known backend and dtype, and only the chosen backend's params set."""
  check_choice(config, f"{key}.backend", INDEX_BACKENDS)
  check_choice(config, f"{key}.dtype", ("float32", "bfloat16"))
  backend = get_key(config, f"{key}.backend")
  given = {k for k, v in dict(get_key(config, f"{key}.params")).items() if v is not None}
  if given - set(INDEX_PARAMS.get(backend, ())):
    bad_value(f"{key}.params", {k: get_key(config, f"{key}.params.{k}") for k in sorted(given)},
              f"only params of backend {backend!r}: {INDEX_PARAMS.get(backend, ())}")


def check_fraction(config, key: str) -> None:
  value = get_key(config, key)
  if isinstance(value, bool) or not (isinstance(value, (int, float)) and 0.0 < value < 1.0):
    bad_value(key, value, "a fraction in (0, 1)")
