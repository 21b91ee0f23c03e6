#!/usr/bin/env bash
# launch/gpu_check.sh: the check any session lent one GPU runs, deciding the issue's goals in one call of the device
# tool (ARCHITECTURE.md "Accelerators").
#
#   bash launch/gpu_check.sh prepare          # on the development machine, once: the wheels the device image lacks
#                                             # -> .whl/, ../shared -> ./shared (both kept out of git)
#   bash launch/gpu_check.sh plan             # each step's budget and how it was derived (GPU_CHECK_SCALE=small: the
#                                             # dry run's); nothing runs
#   bash launch/gpu_check.sh run [OUT_DIR]    # on the GPU machine (the device tool: carry [".whl", "shared"])
#
# `run` installs the carried wheels into a private folder (nothing system-wide), puts the checkout on PYTHONPATH and
# hands over to launch/gpu_check.py, which runs the steps in the order of what they answer, each under a budget
# derived from a measured small run, the whole under a deadline of 8 minutes from this script's start (the wheel
# install included), rewriting gpu_check.md after every step:
#   corpus    the 10M x 256 clustered corpus drawn on the device (bench/ann.py --memmap reads it)
#   ann       bench/ann.py at 10M x 256, vidjax f32 and bf16 against the torch peer, batches 256 and 1
#   main      configs/cast_coin.py end to end (wall seconds, stage seconds, programs compiled)
#   cast      bench/cast_train.py: the jitted step beside its PyTorch peer on the same GPU, then the training loop
#   extract   bench/videoprism_extract.py --paper: LvT base, 288 px, 16 frames, bf16; model-only and end to end
#   tests     the model-level test files on the GPU at the documented precision (tests marked `minilm` deselected)
#   vedje     bench/vedje_rerank.py (no goal: only when time is left)
#   precision bench/precision.py (no goal: only when time is left)
# into $OUT_DIR (default $OUT, else ./gpu_check/): gpu_check.md (one row per step: status, seconds, budget, and each
# step's output tail), gpu_check.log (every step's whole output, streamed) and the benches' JSON.
#
# Environment: PYTHON (default python3: the steps' interpreter), GPU_CHECK_STEPS (default: all, in the order above),
# GPU_CHECK_SCALE=small (every step at CPU sizes: the dry run, `GPU_CHECK_SCALE=small bash launch/gpu_check.sh run
# OUT_DIR`, about 6 minutes on 2 cores), GPU_CHECK_DEADLINE (seconds; default 480, 1500 for the dry run).
set -uo pipefail
CALLER=$PWD
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
if [[ $CMD == plan ]]; then
  exec "${PLAN_PYTHON:-python3}" launch/gpu_check.py plan --scale "${GPU_CHECK_SCALE:-full}" \
    ${GPU_CHECK_STEPS:+--steps "$GPU_CHECK_STEPS"}
fi
if [[ $CMD != run ]]; then
  echo "usage: bash launch/gpu_check.sh [prepare | plan | run [OUT_DIR]]" >&2
  exit 2
fi

STARTED=$(date +%s.%N)
OUT_DIR=${2:-${OUT:-$ROOT/gpu_check}}
[[ $OUT_DIR == /* ]] || OUT_DIR=$CALLER/$OUT_DIR
mkdir -p "$OUT_DIR"
WORK=$(mktemp -d /tmp/vidjax-gpu-check.XXXXXX)
export GPU_CHECK_WORK=$WORK
INSTALL="none:0"
if [[ -d .whl ]] && ls .whl/*.whl > /dev/null 2>&1; then
  t0=$SECONDS
  if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
      .whl/*.whl > "$WORK/install.log" 2>&1; then
    INSTALL="ok:$((SECONDS - t0))"
  else
    INSTALL="FAILED (see gpu_check.log):$((SECONDS - t0))"
  fi
fi
export PYTHONPATH=$ROOT:$WORK/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # the torch peers share the GPU with JAX
# The tests read ../shared (beside the checkout); on the device it travels inside it.
if [[ ! -e ../shared && -d shared ]]; then
  ln -s "$ROOT/shared" ../shared 2>/dev/null || true
fi
{
  echo "# vidjax on one accelerator: launch/gpu_check.sh ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo '```'
  nvidia-smi -L 2>/dev/null || echo "nvidia-smi: none"
  "$PY" -c "import jax; print('jax', jax.__version__, jax.devices())" 2>&1 | tail -1
  "$PY" -c "import torch; print('torch', torch.__version__, torch.cuda.is_available())" 2>&1 | tail -1
  echo '```'
} > "$WORK/header.md"
: > "$OUT_DIR/gpu_check.log"
[[ -f "$WORK/install.log" ]] && cat "$WORK/install.log" >> "$OUT_DIR/gpu_check.log"
SMALL=${GPU_CHECK_SCALE:-full}
"${PLAN_PYTHON:-python3}" launch/gpu_check.py run "$OUT_DIR" --scale "$SMALL" --started "$STARTED" --python "$PY" \
  --header "$WORK/header.md" --install "$INSTALL" ${GPU_CHECK_STEPS:+--steps "$GPU_CHECK_STEPS"} \
  ${GPU_CHECK_DEADLINE:+--deadline "$GPU_CHECK_DEADLINE"}
rc=$?
rm -rf "$WORK"
exit $rc
