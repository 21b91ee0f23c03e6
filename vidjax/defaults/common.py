"""What every config shares (jax-free): the one variant parser, the config-value checks, and `config_module`,
which loads a method's shared config file (`configs/<method>/common.py`) by path.

A config file's `get_config(arg)` builds the paper's defaults and then applies the comma-separated variants of
`arg` (big_vision style: `configs/vedje_msrvtt.py:world,fast`) in the order the config declares them, so their
order in `arg` does not matter:

    return common.apply_variants(c, arg, {"world": world, "smoke": smoke}, "configs/vedje_<dataset>.py")

An experiment's `validate(config)` uses the `check_*` helpers: each raises one `ValueError` that names the key,
the value and what was expected, before any work. `check_ranges` and `check_heads` apply to every config (every
run calls them first, `vidjax.experiments.common.start_run`): rates, probabilities and fractions in their ranges
wherever they sit, and attention heads that divide their width.

`precision_section()` is the one matmul-precision policy every config carries (`config.precision`); the experiments
apply it through `vidjax.experiments.common.precision` / `precision_policy`.
"""
from __future__ import annotations

import contextlib

import hashlib
import importlib.util
from pathlib import Path
import sys
from typing import Any, Callable, Iterable, Mapping, Sequence

import ml_collections
import numpy as np

from vidjax.ops import is_positive_int

Variant = Callable[[ml_collections.ConfigDict], Any]


def config_module(path: str | Path):
  """A method's shared config file (`configs/<method>/common.py`: the paper's settings and the variants) as a
  module, loaded by its path, so that a per-dataset config works from any working directory (`configs/` is not a
  package):

      common = config_module(Path(__file__).parent / "cast" / "common.py")

  Loaded once per resolved path (later calls return the same module). A missing file is one clear error."""
  path = Path(path).resolve()
  if not path.is_file():
    raise FileNotFoundError(f"config file not found: {path}")
  name = "vidjax_config_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
  if name not in sys.modules:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
      spec.loader.exec_module(module)
    except BaseException:
      del sys.modules[name]
      raise
  return sys.modules[name]


def parse_variants(arg: str | None, known: Iterable[str], where: str) -> list[str]:
  """The variant names of `arg` ("a,b"; None or "" = none), each one of `known`; else one clear error."""
  names = [a.strip() for a in (arg or "").split(",") if a.strip()]
  known = sorted(known)
  for name in names:
    if name not in known:
      raise ValueError(f"{where}: unknown variant {name!r} (known: {', '.join(known) or 'none'})")
  return names


def apply_variants(config: ml_collections.ConfigDict, arg: str | None, variants: Mapping[str, Variant],
                   where: str, exclusive: Iterable[Iterable[str]] = ()) -> ml_collections.ConfigDict:
  """Applies the variants named in `arg` to `config` (each a function that edits the config); returns it.

  They are applied in the order `variants` declares them, whatever their order in `arg`: a config declares first
  what says where the data and the model's size come from (`world`, `rendered`, `clip`), then what shrinks it
  (`smoke`, `tiny`), then what picks the tables (`fast`, `all`, `sweep`, `seeds3`). So `smoke,world` and
  `world,smoke` are the same config (`smoke`), and the same names always give the same config. Two variants that
  contradict each other (each group of `exclusive`, e.g. `fast` and `all`) are one clear error, in any order.

  `config.variants` records the names applied, in that order (results.json's `variants`: what a run was started
  with); a workdir may change it between runs (`experiments.common.RESUMABLE_KEYS`: the values it set are compared).
  """
  chosen = set(parse_variants(arg, variants, where))
  for group in exclusive:
    clash = [name for name in group if name in chosen]
    if len(clash) > 1:
      raise ValueError(f"{where}: variants {' and '.join(map(repr, clash))} exclude each other; use one of them")
  for name, variant in variants.items():
    if name in chosen:
      variant(config)
  config.variants = tuple(name for name in variants if name in chosen)
  if "compilation_cache" not in config:  # every config has it (docs/scaling.md "Compiled programs")
    config.compilation_cache = COMPILATION_CACHE
  return config


# `config.compilation_cache`: jax's persistent compilation cache for the run (`vidjax.train.use_compilation_cache`):
# "auto" = on for an accelerator run (`$VIDJAX_CACHE_DIR` or ~/.cache/vidjax, then /xla), left to the user on a CPU
# (jax's JAX_COMPILATION_CACHE_DIR); "" = off; a folder = that folder on any platform.
COMPILATION_CACHE = "auto"


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


def with_values(config, values: Mapping[str, Any]):
  """A locked copy of `config` with each dotted key of `values` set (`{"train.batch_size": 115}`)."""
  out = config.copy_and_resolve_references()
  with out.unlocked():
    for key, value in values.items():
      *parents, leaf = key.split(".")
      section = get_key(out, ".".join(parents)) if parents else out
      section[leaf] = value
  out.lock()
  return out


# The largest seed: JAX's x32 keys and NumPy's legacy generator take 32 bits (`jax.random.PRNGKey(2**32)` is
# `PRNGKey(0)`: a larger seed would silently repeat a smaller one's run).
MAX_SEED = 2**32 - 1


def check_seed(config, key: str = "seed") -> None:
  """`config.<key>` is an integer in [0, MAX_SEED]; else the one clear error naming the key."""
  value = get_key(config, key)
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= MAX_SEED:
    bad_value(key, value, f"an integer in [0, 2**32 - 1] (it seeds every random choice of the run; a larger one "
              "would repeat a smaller one's run)")


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


def _leaves(config, prefix: str = ""):
  """(dotted key, value) of every leaf of `config`, sections included (a world's, the stack's method sections)."""
  for name, value in config.items():
    if isinstance(value, (ml_collections.ConfigDict, Mapping)):
      yield from _leaves(value, f"{prefix}{name}.")
    else:
      yield f"{prefix}{name}", value


def _sections(config, prefix: str = ""):
  """(dotted key, section) of `config` and every section under it."""
  yield prefix.rstrip("."), config
  for name, value in config.items():
    if isinstance(value, (ml_collections.ConfigDict, Mapping)):
      yield from _sections(value, f"{prefix}{name}.")


def _in(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Callable[[float], bool]:
  return lambda v: (v > low if low_open else v >= low) and (v < high if high_open else v <= high)


# What a config value's name says about its range, wherever it sits (model, train, a world section, the stack's
# nested method sections): (does the leaf name match, is the value in range, what was expected). A dropout rate of
# 2.0, a probability of -0.1 or a fraction of 1.5 would otherwise train and report numbers.
RANGES: tuple[tuple[Callable[[str], bool], Callable[[float], bool], str], ...] = (
    (lambda n: n == "dropout_rate" or n.endswith("_dropout_rate") or n.endswith("_dropout"),
     _in(0.0, 1.0, high_open=True), "a dropout rate in [0, 1)"),
    (lambda n: n == "prob" or n.endswith("_prob"), _in(0.0, 1.0), "a probability in [0, 1]"),
    (lambda n: n.endswith("_fraction"), _in(0.0, 1.0, True, True), "a fraction in (0, 1)"),
    (lambda n: n in ("iou_threshold", "min_overlap"), _in(0.0, 1.0), "a fraction in [0, 1]"),
    (lambda n: n in ("recall_target", "epoch_decay"), _in(0.0, 1.0, low_open=True), "a number in (0, 1]"),
    (lambda n: n == "lr" or n.endswith("_lr") or n == "tau" or n.startswith("tau_") or n.endswith("_temperature"),
     _in(0.0, np.inf, True, True), "a positive finite number"),
    (lambda n: n == "weight_decay" or n.endswith("_weight") or n == "lam" or n.startswith("lambda_") or n == "beta",
     _in(0.0, np.inf, high_open=True), "a non-negative finite number"),
)


# Integer leaves by their name, wherever they sit, checked likewise: a seed past 32 bits repeats a smaller one's run
# (`MAX_SEED`), a chunk or batch of 0 fails only when the evaluation after training reaches it, and a negative frame
# count reads as "the last frames" (0, where a config allows it, means its documented default).
INTEGER_RANGES: tuple[tuple[Callable[[str], bool], Callable[[int], bool], str], ...] = (
    (lambda n: n == "seed" or n.endswith("_seed"), lambda v: 0 <= v <= MAX_SEED,
     "an integer in [0, 2**32 - 1] (a larger seed would repeat a smaller one's run)"),
    (lambda n: n in ("chunk", "batch_size") or n.endswith(("_chunk", "_batch_size")), lambda v: v >= 1,
     "a positive integer"),
    (lambda n: n in ("frames", "num_frames"), lambda v: v >= 0, "an integer >= 0"),
)


def check_ranges(config) -> None:
  """Every leaf whose name `RANGES` knows holds a number in its range, and every leaf whose name `INTEGER_RANGES`
  knows an integer in its range; else one clear error naming the key. None (a backend parameter left at the
  library's default) is not checked."""
  for key, value in _leaves(config):
    name = key.rpartition(".")[2]
    if value is None:
      continue
    for matches, ok, expected in RANGES:
      if not matches(name):
        continue
      number = isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_))
      if not number or not np.isfinite(value) or not ok(float(value)):
        bad_value(key, value, expected)
    for matches, ok, expected in INTEGER_RANGES:
      if matches(name) and (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer))
                            or not ok(int(value))):
        bad_value(key, value, expected)


# Attention layers split a width into heads: (heads key, width key) of one section (VEDJE's joint encoder,
# compressor and F_omega; VidCLIP's pooler and text tower; a VideoPrism `model.overrides`).
HEAD_WIDTHS = (("num_heads", "hidden_size"), ("compressor_heads", "hidden_size"), ("predictor_heads", "hidden_size"),
               ("pool_heads", "width"), ("text_heads", "text_hidden"), ("num_heads", "model_dim"))


def check_heads(config) -> None:
  """In every section holding both keys of a `HEAD_WIDTHS` pair, the heads are a positive integer dividing the
  width: one clear error naming the key before any work (a width that does not split fails inside JAX tracing,
  after the run has written its files, or silently drops dimensions)."""
  for where, section in _sections(config):
    for heads, width in HEAD_WIDTHS:
      if heads in section and width in section:
        key = f"{where}.{heads}" if where else heads
        h, w = section[heads], section[width]
        if not is_positive_int(h) or (is_positive_int(w) and w % h):
          bad_value(key, h, f"a positive integer dividing {where + '.' if where else ''}{width}={w} (each head "
                    "takes an equal share of the width)")


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


class DataFits(Exception):
  """Raised in a check run (`checking()`) where the training would start: the data are read, every size fits them
  (or is clipped) and every check before training passed; `plan` is {"clipped": ..., "config": the values that
  would run}. `vidjax.main --check` stops there."""

  def __init__(self, plan: dict):
    super().__init__("the data are read and every size fits them")
    self.plan = plan


_CHECKING: list[dict] = []  # the plan of each enclosing check run: what `clip_to_data` fitted


@contextlib.contextmanager
def checking():
  """A check run: within it `clip_to_data` records what it fits (and clips) in the yielded plan ({"clipped",
  "config"}) as well as returning it; `vidjax.experiments.common.check_run` raises `DataFits` with the plan where
  the first training would start (`vidjax.train.before_training`), so every check up to there runs."""
  plan: dict = {"clipped": {}, "config": None}
  _CHECKING.append(plan)
  try:
    yield plan
  finally:
    _CHECKING.pop()


def is_strict(config) -> bool:
  """`config.strict` (a top-level key; `STRICT` when absent): refuse sizes that do not fit the data."""
  return bool(config.get("strict", STRICT))


def steps_in_passes(config, section: str, n: int, what: str, why: str) -> dict[str, tuple[int, str]]:
  """A `clip_to_data` limit: `<section>.steps` at most `<section>.max_passes` passes over the run's `n` training
  `what` at its batch size (clipped to `n`); {} when `max_passes` is 0 (no limit) or nothing trains. `why`: where
  the budget in passes comes from."""
  s = get_key(config, section)
  passes = float(s.get("max_passes", 0.0))
  if passes <= 0 or n <= 0:
    return {}
  steps = max(1, int(np.ceil(passes * n / min(s.batch_size, n))))
  return {f"{section}.steps": (steps, f"{section}.max_passes={passes:g} passes over the {n} {what}: {why}")}


def check_passes(config, section: str) -> None:
  """`<section>.max_passes` is a number >= 0 (0: no limit), else the one clear error naming it."""
  passes = get_key(config, section).get("max_passes", 0.0)
  if isinstance(passes, bool) or not isinstance(passes, (int, float)) or passes < 0:
    bad_value(f"{section}.max_passes", passes, "passes over the training data >= 0 (0: no limit)")


def clip_to_data(config, limits: Mapping[str, tuple], say: bool = True, fitted: Mapping[str, list] | None = None,
                 exact: Sequence[str] = ()):
  """Sizes that do not fit the data, fitted to it once per run, right after the data are known.

  `limits`: {dotted config key: (the most that fits, why: what the data hold[, the least the run needs: 1])}. A
  key's value is an int (a batch size, a budget) or a sequence of ints (e.g. evaluation ks); a value larger than
  what fits is clipped to it (each element of a sequence, duplicates dropped), with one printed line naming the
  key, the asked and the used value and why. With `config.strict` (a top-level key, default False) such a value is
  refused instead: one `ValueError` naming the key, the value, what fits and `strict` (a run that must match a
  paper's numbers). Nothing fits (less than the least the run needs) is an error either way.

  `say=False`: the refusals only, nothing printed (a check before the data's files are written, when the run
  clips again, and says so, once its data are known). `fitted`: entries {key: [asked, used]} the caller already
  fitted (and said so), kept in the record with the rest. `exact`: keys whose fit changes no output (e.g. a text
  length at most the longest text, past which every token is padding): clipped and recorded, never refused.

  Returns (config, clipped): the config with the used values (an unlocked copy, locked again: downstream code
  reads it as before, and results.json's `config` shows what ran; `config` itself when nothing was clipped), and
  the record {key: [asked, used]} results.json keeps as `clipped` ({} when nothing was clipped)."""
  strict = is_strict(config)
  changed: dict[str, Any] = {}
  clipped: dict[str, list] = {}
  for key, (most, why, *least) in limits.items():
    most, least = int(most), int(least[0]) if least else 1
    value = get_key(config, key)
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
      continue  # a malformed value is its validate's error
    if max(values) <= most:
      continue
    if most < least:
      raise ValueError(f"config.{key}={value!r} does not fit the data: nothing fits ({why})")
    if strict and key not in exact:
      raise ValueError(f"config.{key}={value!r} does not fit the data: at most {most} fits ({why}); strict=True "
                       f"refuses instead of clipping it (--config.strict=False clips it to {most})")
    used = list(dict.fromkeys(min(v, most) for v in values))
    used_value = type(value)(used) if isinstance(value, (list, tuple)) else used[0]
    if say:
      note = "it changes no output" if key in exact else "--config.strict=True refuses instead"
      print(f"clipped config.{key}: asked {value!r}, used {used_value!r} ({why}; {note})", flush=True)
    changed[key] = used_value
    clipped[key] = [list(value) if isinstance(value, (list, tuple)) else value,
                    used if isinstance(value, (list, tuple)) else used_value]
  clipped.update(fitted or {})
  return _fitted(config, changed, clipped, say)


def _fitted(config, changed: Mapping[str, Any], clipped: dict, say: bool):
  """(config with `changed` set, clipped), recorded in the enclosing check run's plan (`checking`)."""
  config = with_values(config, changed) if changed else config
  if say and _CHECKING:  # a check run: the plan so far (`checking`)
    _CHECKING[-1]["clipped"].update(clipped)
    _CHECKING[-1]["config"] = config.to_dict()
  return config, clipped


# The tables a method's run adds beside its main result (ablations, baselines, diagnostics) compare rows a few R@1
# points apart (the papers' tables). On fewer test queries than this, one query moves R@1 by more than a point and
# R@1's standard error is above 5 points (sqrt(0.5 * 0.5 / 100) at R@1 = 50), so such a table is noise while it
# multiplies the run's training: a run on fewer trains and reports its main result only, says so in one printed line
# and records it in results.json's `clipped` (`fit_tables`; `strict` refuses instead). A config's top-level
# `table_min_queries` overrides it (0: every table on any data, as the smoke variants test them).
TABLE_MIN_QUERIES = 100


def fit_tables(config, num_queries: int, off: Mapping[str, Any], say: bool = True):
  """The optional tables of a run on too few test queries to read them (`TABLE_MIN_QUERIES`) switched off.

  `off`: {dotted config key: the value that runs none of that key's rows} (e.g. {"ablations": (), "diagnostics":
  False}); keys already at it are left alone. Returns (config, clipped) as `clip_to_data` does: {key: [asked,
  used]}, each printed in one line; with `config.strict` a key that would change is one `ValueError` instead."""
  least = int(config.get("table_min_queries", TABLE_MIN_QUERIES))
  if num_queries >= least:
    return config, {}
  changed, clipped = {}, {}
  for key, value in off.items():
    asked = get_key(config, key)
    if (tuple(asked) if isinstance(asked, (list, tuple)) else asked) == value:
      continue
    why = (f"the {num_queries} test queries cannot resolve its rows (at least table_min_queries={least}: R@1's "
           "standard error is above 5 points below 100 queries)")
    if is_strict(config):
      raise ValueError(f"config.{key}={asked!r} asks for a table {why}; strict=True refuses instead of leaving it "
                       f"out (--config.strict=False runs {key}={value!r}, or --config.table_min_queries=0 runs it)")
    if say:
      print(f"clipped config.{key}: asked {asked!r}, used {value!r} ({why}; --config.table_min_queries=0 runs it)",
            flush=True)
    changed[key] = value
    clipped[key] = [list(asked) if isinstance(asked, (list, tuple)) else asked,
                    list(value) if isinstance(value, (list, tuple)) else value]
  return _fitted(config, changed, clipped, say)


# `config.strict`, every method config's: False (the default) clips a batch size or budget that does not fit the
# data to what fits, says so in one printed line and records it in results.json's `clipped`; True refuses instead
# (a run that must match a paper's settings). `clip_to_data` applies it.
STRICT = False


def check_strict(config) -> None:
  """`config.strict`, where a config has it, is True or False; else the one clear error naming the key."""
  if "strict" in config and not isinstance(config.strict, bool):
    bad_value("strict", config.strict, "True (refuse a batch size or budget larger than the data) or False (clip it)")


def check_precision(config) -> None:
  """`config.precision` holds one of `PRECISIONS` per phase; else the one clear error naming the key."""
  if "precision" not in config or not isinstance(config.precision, ml_collections.ConfigDict):
    bad_value("precision", config.get("precision"), "a section {train, extract, eval} "
              "(vidjax.defaults.common.precision_section())")
  for phase in PRECISION_DEFAULTS:
    if phase not in config.precision:
      bad_value(f"precision.{phase}", None, f"one of {PRECISIONS}")
    check_choice(config, f"precision.{phase}", PRECISIONS)
