#!/usr/bin/env bash
# launch/gpu_check.sh: the few-minute check a session lent one GPU runs (ARCHITECTURE.md "Accelerators").
#
#   bash launch/gpu_check.sh prepare    # on the development machine, once: the wheels the device image lacks
#                                       # -> .whl/, ../shared -> ./shared (both kept out of git)
#   bash launch/gpu_check.sh run        # on the GPU machine (the device tool: carry [".whl", "shared"]);
#                                       # about 8 minutes, every step under its own time limit
#
# `run` installs the carried wheels into a private folder (nothing system-wide), puts the checkout on PYTHONPATH and
# then runs, continuing past a step that fails or runs out of time:
#   main      configs/cast_coin.py end to end: wall seconds and results.json's stage_seconds (the main job's goal:
#             3x the 2-core CPU's wall time)
#   ann       bench/ann.py at 10M x 256, batch 256 and batch 1, with its torch.matmul + torch.topk peer and the floor
#   tests     the model-level test files on the GPU at the documented precision (tests marked `minilm` are
#             deselected: the all-MiniLM-L6-v2 wheel is 83 MB, more than the device's 64 MiB carry; counted below)
# The limits add up to about 9 minutes (under the device tool's 10 per command); each step's table is written as
# soon as it ends, so a run stopped early keeps what it did.
#   cast      bench/cast_train.py: the jitted step beside its PyTorch eager peer, then the training loop (host vs
#             device gather, steps per call; device-busy %)
#   extract   bench/videoprism_extract.py --paper: LvT base, 288 px, 16 frames, bf16; model-only and end to end
#   vedje     bench/vedje_rerank.py: Table 2's cost with parameters and caches already on the device
#   precision bench/precision.py: what each matmul precision costs and changes on this device
# and writes into $OUT (or ./gpu_check/ where OUT is unset): gpu_check.md (one row per step: status, seconds, and each
# step's table), gpu_check.log (every step's whole output) and the benches' JSON.
#
# Environment: PYTHON (default python3), GPU_CHECK_STEPS (default "main ann tests cast extract vedje precision"),
# GPU_CHECK_SCALE=small runs every bench at CPU sizes (what tests/test_launch.py runs, on CPU).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
CMD=${1:-run}

wheels() {  # the packages vidjax needs that the device image (jax, flax, optax, orbax, chex, torch, ...) lacks
  echo grain array-record ml-collections tensorboardX av portpicker
}

if [[ $CMD == prepare ]]; then
  mkdir -p .whl
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  grep -qx '/shared/' .git/info/exclude 2>/dev/null || echo '/shared/' >> .git/info/exclude
  # shellcheck disable=SC2046
  "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d .whl $(wheels) || exit 1
  if [[ ! -d shared && -d ../shared ]]; then
    cp -r ../shared shared
  fi
  du -sh .whl shared
  echo "carry: [\".whl\", \"shared\"] (the tree, wheels and shared/ must stay under 64 MiB together)"
  exit 0
fi
if [[ $CMD != run ]]; then
  echo "usage: bash launch/gpu_check.sh [prepare|run]" >&2
  exit 2
fi

OUT_DIR=${OUT:-$ROOT/gpu_check}
mkdir -p "$OUT_DIR"
WORK=$(mktemp -d /tmp/vidjax-gpu-check.XXXXXX)
LOG=$OUT_DIR/gpu_check.log
MD=$OUT_DIR/gpu_check.md
: > "$LOG"
if [[ -d .whl ]] && ls .whl/*.whl > /dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" .whl/*.whl \
    >> "$LOG" 2>&1 || echo "wheel install failed (see gpu_check.log)" >> "$LOG"
fi
export PYTHONPATH=$ROOT:$WORK/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
# The tests read ../shared (beside the checkout); on the device it travels inside it.
if [[ ! -e ../shared && -d shared ]]; then
  ln -s "$ROOT/shared" ../shared 2>/dev/null || true
fi
SMALL=${GPU_CHECK_SCALE:-}
STEPS=${GPU_CHECK_STEPS:-main ann tests cast extract vedje precision}
MODEL_TESTS=(tests/test_cast_model.py tests/test_cast_scorers.py tests/test_losses.py tests/test_metrics.py
             tests/test_bert.py tests/test_t5.py tests/test_videoprism.py tests/test_vidclip.py
             tests/test_vedje_model.py tests/test_vedje_fidelity.py tests/test_grdr_tokenizer.py
             tests/test_quantize.py tests/test_dense_index.py tests/test_train.py)

{
  echo "# vidjax on one accelerator: launch/gpu_check.sh ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo '```'
  nvidia-smi -L 2>/dev/null || echo "nvidia-smi: none"
  "$PY" -c "import jax; print('jax', jax.__version__, jax.devices())" 2>&1 | tail -1
  "$PY" -c "import torch; print('torch', torch.__version__, torch.cuda.is_available())" 2>&1 | tail -1
  echo '```'
  echo
  echo "| step | status | seconds | limit |"
  echo "|---|---|---|---|"
} > "$MD"
# Each step's table goes here as soon as it ends (a run stopped at the device's time limit keeps what it did).
SECTIONS=$OUT_DIR/gpu_check_sections.md
: > "$SECTIONS"

# step NAME LIMIT_S COMMAND...: runs COMMAND under its limit, appends a row to the table and its output's tail to
# the sections (the benches print their tables last).
step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS out=$WORK/$name.txt
  echo "=== $name (limit ${limit}s): $*" >> "$LOG"
  timeout --kill-after=10 "$limit" "$@" > "$out" 2>&1
  local rc=$?
  local status="ok"
  if [[ $rc == 124 || $rc == 137 ]]; then status="TIMED OUT"; elif [[ $rc != 0 ]]; then status="FAILED (exit $rc)"; fi
  cat "$out" >> "$LOG"
  echo "| $name | $status | $((SECONDS - start)) | $limit |" >> "$MD"
  { echo "## $name: $status"; echo; echo '```'; tail -n "${TAIL_LINES:-40}" "$out"; echo '```'; echo; } >> "$SECTIONS"
}

for s in $STEPS; do
  case $s in
    main)
      cfg=configs/cast_coin.py
      [[ -n $SMALL ]] && cfg=configs/cast_coin.py:smoke
      step main 120 bash -c "time $PY -m vidjax.main --config $cfg --workdir $WORK/cast_coin --config.train.progress=false \
        && $PY -c \"import json; r = json.load(open('$WORK/cast_coin/results.json')); \
print('seconds', r['seconds'], 'stage_seconds', r['stage_seconds'], 'acc', r['metrics']['cast']['acc'])\""
      ;;
    ann)
      if [[ -n $SMALL ]]; then
        step ann 120 "$PY" bench/ann.py --n 20000 --dim 64 --batch 16 --data clustered --backends jax,jax-bf16,torch
      else
        step ann 75 "$PY" bench/ann.py --n 10000000 --dim 256 --batch 256 --data clustered \
          --backends jax,jax-bf16,torch --json "$OUT_DIR/ann.json"
      fi
      ;;
    tests)
      tests=("${MODEL_TESTS[@]}")
      [[ -n $SMALL ]] && tests=(tests/test_cast_model.py tests/test_losses.py)
      TAIL_LINES=60 XLA_PYTHON_CLIENT_PREALLOCATE=false step tests 120 "$PY" -m pytest -q -n 4 --dist loadfile \
        -m "not minilm" -p no:cacheprovider "${tests[@]}"
      ;;
    cast)
      if [[ -n $SMALL ]]; then
        step cast 120 bash -c "$PY bench/cast_train.py --batch 64 --dim 32 --steps 3 && \
$PY bench/cast_train.py --loop --loop-steps 20 --spc 4"
      else
        step cast 75 bash -c "$PY bench/cast_train.py && $PY bench/cast_train.py --loop --loop-steps 800"
      fi
      ;;
    extract)
      if [[ -n $SMALL ]]; then
        step extract 120 "$PY" bench/videoprism_extract.py --iters 1 --videos 2
      else
        step extract 60 "$PY" bench/videoprism_extract.py --paper --iters 5 --segments 4 --videos 128 \
          --json "$OUT_DIR/videoprism_extract.json"
      fi
      ;;
    vedje)
      if [[ -n $SMALL ]]; then
        step vedje 120 "$PY" bench/vedje_rerank.py --caches 16 --reps 1 --dtypes float32
      else
        step vedje 40 "$PY" bench/vedje_rerank.py --caches 64 --reps 5 --json "$OUT_DIR/vedje_rerank.json"
      fi
      ;;
    precision)
      if [[ -n $SMALL ]]; then
        step precision 120 "$PY" bench/precision.py --batch 64 --dim 32 --steps 2 --resolution 36 --frames 2 \
          --video_batch 1 --iters 1
      else
        step precision 45 "$PY" bench/precision.py
      fi
      ;;
    *)
      echo "unknown step $s (known: main ann tests cast extract vedje precision)" >&2
      exit 2
      ;;
  esac
done
{
  echo
  echo "Deselected on the device: the tests marked \`minilm\` (they read the real all-MiniLM-L6-v2 weights, an 83 MB"
  echo "wheel the device's 64 MiB carry cannot hold); CI runs them on CPU."
  echo
  cat "$SECTIONS"
} >> "$MD"
rm -rf "$WORK" "$SECTIONS"
echo "wrote $MD and $LOG"
