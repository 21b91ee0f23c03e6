"""What every config shares (jax-free): the one variant parser and the config-value checks.

A config file's `get_config(arg)` builds the paper's defaults and then applies the comma-separated variants of
`arg` in order (big_vision style: `configs/vedje_msrvtt.py:world,fast`):

    return common.apply_variants(c, arg, {"world": world, "smoke": smoke}, "configs/vedje_<dataset>.py")

An experiment's `validate(config)` uses the `check_*` helpers: each raises one `ValueError` that names the key,
the value and what was expected, before any work.

`precision_section()` is the one matmul-precision policy every config carries (`config.precision`); the experiments
apply it through `vidjax.experiments.common.precision` / `precision_policy`.
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


# ----------------------------------------------------------------------------------------------
# Precision: how float32 matmuls and convolutions are computed, per phase of a run.

# JAX's matmul precisions (`jax.default_matmul_precision`), fastest first. What each computes for float32 operands:
#   "default": CPU full float32 | GPU (Ampere and later) TF32, 10-bit mantissa inputs | TPU one bfloat16 pass
#   "high":    CPU full float32 | GPU TF32 (as "default")                             | TPU three bfloat16 passes
#   "highest": CPU full float32 | GPU full float32                                    | TPU six bfloat16 passes (~f32)
# bfloat16 operands (a model's `compute_dtype` / `fprop_dtype` = "bfloat16") run one bf16 pass at any setting.
PRECISIONS = ("default", "high", "highest")
# The phases of a run: training (every `vidjax.train` loop), extraction (a video backbone's forward passes into a
# feature store) and evaluation (everything else a run traces: scoring, ranking, search, ensemble selection).
PRECISION_DEFAULTS = {"train": "default", "extract": "highest", "eval": "highest"}


def precision_section() -> ml_collections.ConfigDict:
  """`config.precision`: the matmul precision of each phase of a run, one of `PRECISIONS` each.

  Defaults (README "Precision"):
    train="default": TF32 on a GPU, one bfloat16 pass on a TPU. A train step's rounding (relative error ~1e-3 per
      product) is far below SGD's own noise, and full float32 costs the step its tensor cores: an H100 does
      ~495 dense TFLOP/s in TF32 against ~67 in float32 (7x). Set "highest" to train bit-comparably with a CPU run.
    extract="highest": a feature store is written once and read by every method; at full float32 the features
      equal the official VideoPrism's (3e-7 on CPU) on any backend, so a store does not depend on the machine
      that made it. Fast extraction is `model.fprop_dtype="bfloat16"` (bf16 matmuls, where this setting is moot).
    eval="highest": scores decide ranks and ties; evaluation is a small share of a run's matmuls and should not
      move with the backend (TF32 reorders near-tied candidates).
  On a CPU every setting computes full float32 (XLA:CPU has no reduced-precision float32 matmul): bench/precision.py
  gives bit-identical CAST losses and VideoPrism embeddings at all three, and step times equal within noise, so
  CPU numbers do not depend on this section. Inside a run the config wins over JAX_DEFAULT_MATMUL_PRECISION.
  """
  return ml_collections.ConfigDict(dict(PRECISION_DEFAULTS))


def check_precision(config) -> None:
  """`config.precision` holds one of `PRECISIONS` per phase; else the one clear error naming the key."""
  if "precision" not in config or not isinstance(config.precision, ml_collections.ConfigDict):
    bad_value("precision", config.get("precision"), "a section {train, extract, eval} "
              "(vidjax.defaults.common.precision_section())")
  for phase in PRECISION_DEFAULTS:
    if phase not in config.precision:
      bad_value(f"precision.{phase}", None, f"one of {PRECISIONS}")
    check_choice(config, f"precision.{phase}", PRECISIONS)
