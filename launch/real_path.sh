#!/usr/bin/env bash
# The real path end to end, offline: the rendered release-format corpus (vidjax.worlds.release) -> one prepared
# store per dataset (configs/prepare.py) -> every method's real-data config -> results.json per run, then
# evaluate_all over the runs, a typed query against the stack's index and OUT/summary.{json,md} (python -m
# vidjax.real_path: each method's main comparison and its line, the backbone's own R@1, the minutes of each step).
#
#   bash launch/real_path.sh [OUT] [SIZE] [SEED] [SCOPE]
#     OUT    defaults to /tmp/vidjax_real_path
#     SIZE   smoke (default) | full
#     SEED   0 by default: seeds the corpus, the backbone and every method
#     SCOPE  main (SIZE=full's default): each method on the dataset of its paper's main comparison (CAST on all
#            three; VEDJE, GRDR, retrieval on MSR-VTT; VideoComp on ActivityNet; GenState; the stack on YouCook2 with
#            either reranker): about 50 minutes on 2 CPU cores, run alone (seed 2), GRDR 17 of them, 10 its GR
#            baselines' (BENCHMARKS.md, "The whole real path on the v2 corpus").
#            all (SIZE=smoke's default): also VEDJE on DiDeMo / ActivityNet / MSVD and VideoComp on YouCook2.
#
# With SIZE=smoke (a few dozen clips) the backbone is the tiny random VideoPrism of `configs/prepare.py:smoke` and the
# methods run their `smoke` / `tiny` settings: it checks the plumbing, the numbers sit at chance. With SIZE=full
# (960 procedure videos) a small VideoPrism-shaped backbone is first trained on the corpus's YouCook2 training
# subset (`configs/backbone_rendered.py`: an official-format checkpoint and OUT/backbone/corpus_summary.json, its own
# retrieval on the held-out subset), the stores are extracted with it (`configs/prepare.py:rendered`) and the methods
# run their dataset configs (VEDJE, GRDR and VideoComp with `:rendered`, their worlds' sizes and schedules). On your
# own data, drop the variants, point `data.videos` / `data.annotations` at the release files and give the VideoPrism
# checkpoint (README, "Real data"). Every results.json here says "synthetic": true (rendered pixels), "path": "real".
#
# Resumable: a run whose workdir holds results.json is skipped (delete the folder to redo it); an interrupted
# training resumes from its last checkpoint. OUT/times.tsv records each step's seconds.
set -euo pipefail
OUT=${1:-/tmp/vidjax_real_path}
SIZE=${2:-smoke}
SEED=${3:-0}
SCOPE=${4:-$([ "$SIZE" = smoke ] && echo all || echo main)}
case "$SIZE" in smoke|full) ;; *) echo "real_path.sh: SIZE must be smoke or full, not '$SIZE'" >&2; exit 2;; esac
case "$SCOPE" in main|all) ;; *) echo "real_path.sh: SCOPE must be main or all, not '$SCOPE'" >&2; exit 2;; esac
C=$OUT/corpus
S=$OUT/stores
R=$OUT/runs
mkdir -p "$OUT"
step() {  # step NAME WORKDIR COMMAND...: runs COMMAND unless WORKDIR/results.json exists; times it into times.tsv
  local name=$1 workdir=$2; shift 2
  if [ -n "$workdir" ] && [ -f "$workdir/results.json" ]; then echo "= $name: done ($workdir)" >&2; return; fi
  echo "+ [$(date +%T)] $name: $*" >&2; local t=$SECONDS
  "$@"
  printf '%s\t%s\t%s\t%s\n' "$name" "$((SECONDS - t))" "$SIZE" "$SEED" >> "$OUT/times.tsv"
  echo "  $name: $((SECONDS - t)) s" >&2
}
run() {  # run NAME WORKDIR --config ...: one `python -m vidjax.main` step
  local name=$1 workdir=$2; shift 2
  step "$name" "$workdir" python -m vidjax.main "$@" --workdir "$workdir" --config.seed="$SEED"
}

[ -f "$C/manifest.json" ] || step corpus "" python -m vidjax.worlds.release --root "$C" --size "$SIZE" --seed "$SEED"

# 0. The backbone: with SIZE=full trained on the corpus's own training clips; with SIZE=smoke the random tiny one.
PREP=configs/prepare.py:smoke
if [ "$SIZE" != smoke ]; then
  run backbone "$OUT/backbone" --config configs/backbone_rendered.py \
      --config.data.videos="$C/youcook2/videos" --config.data.annotations="$C/youcook2/youcookii_annotations_trainval.json"
  PREP="configs/prepare.py:rendered --config.model.checkpoint=$OUT/backbone/backbone.npz"
fi

# 1. One preparation per dataset: every kind the methods read, in one run each.
prepare() { run "prepare $1" "$S/$1" --config $PREP --config.dataset="$1" --config.data.videos="$C/$1/videos" \
                --config.data.annotations="$2"; }
prepare youcook2    "$C/youcook2/youcookii_annotations_trainval.json"
prepare coin        "$C/coin/coin_train_70.json,$C/coin/coin_test_30.json"
prepare crosstask   "$C/crosstask"
prepare msrvtt      "$C/msrvtt/MSRVTT_data.json,$C/msrvtt/MSRVTT_JSFUSION_test.csv,$C/msrvtt/MSRVTT_facets_test.csv,\
$C/msrvtt/MSRVTT_order_test.csv"
prepare activitynet "$C/activitynet/train.json,$C/activitynet/val_1.json"
prepare genstate    "$C/genstate/train.json,$C/genstate/test.json"
if [ "$SCOPE" = all ]; then
  prepare didemo    "$C/didemo/train_data.json,$C/didemo/test_data.json"
  prepare msvd      "$C/msvd/youtube_mapping.txt,$C/msvd/AllVideoDescriptions.txt"
fi

# 2. Each method on its paper's datasets.
# SIZE=full: VEDJE, GRDR and VideoComp at their `rendered` settings (the worlds' model sizes and schedules: the papers'
# would take CPU hours); CAST, GenState and the stack at their dataset configs. GRDR: `model.query_dim` is the store's
# text width (query intents, dense rerank; 64 for the rendered backbone, 768 for LvT base); its T5 query encoder reads
# the captions with the store's SentencePiece model.
V=""; T=":rendered"; SV=":rendered"; GRDR_FLAGS="--config.model.query_dim=64"
[ "$SIZE" = smoke ] && V=":smoke" && T=":tiny" && SV=":smoke" && GRDR_FLAGS="--config.model.query_dim=32 \
  --config.model.latent_dim=32 --config.train.view_batch_size=16 --config.train.batch_size=32"
for d in youcook2 coin crosstask; do
  ann="$C/$d/youcookii_annotations_trainval.json"
  [ $d = coin ] && ann="$C/coin/coin_train_70.json,$C/coin/coin_test_30.json"
  [ $d = crosstask ] && ann="$C/crosstask"
  run "cast $d" "$R/cast_$d" --config configs/cast_$d.py$V --config.data.features="$S/$d/features" \
      --config.data.annotations="$ann"
done
run "retrieval msrvtt" "$R/retrieval_msrvtt" --config configs/retrieval_msrvtt.py \
    --config.data.features="$S/msrvtt/features" --config.data.annotations="$C/msrvtt/MSRVTT_JSFUSION_test.csv"
# VEDJE on the ordered-event queries (MSRVTT_order_test.csv: each clip's hard negative is its twin, the same events in
# another order), trained on the ordered-event training clips (train_list_order.txt)
run "vedje msrvtt order" "$R/vedje_msrvtt_order" --config configs/vedje_msrvtt.py$T \
    --config.data.features="$S/msrvtt/features" --config.data.annotations="$C/msrvtt/MSRVTT_order_test.csv" \
    --config.data.train_annotations="$C/msrvtt/MSRVTT_data.json" \
    --config.data.train_video_list="$C/msrvtt/train_list_order.txt"
# GRDR on the facet queries (one step of its video each: queries that name different facets of one video)
run "grdr msrvtt facets" "$R/grdr_msrvtt_facets" --config configs/grdr_msrvtt.py$T \
    --config.data.features="$S/msrvtt/features" --config.data.annotations="$C/msrvtt/MSRVTT_facets_test.csv" \
    --config.data.train_annotations="$C/msrvtt/MSRVTT_data.json" \
    --config.data.train_video_list="$C/msrvtt/train_list_jsfusion.txt" $GRDR_FLAGS
run "dense msrvtt" "$R/dense_msrvtt" --config configs/dense_msrvtt.py$T --config.data.features="$S/msrvtt/features" \
    --config.data.annotations="$C/msrvtt/MSRVTT_JSFUSION_test.csv" \
    --config.data.train_annotations="$C/msrvtt/MSRVTT_data.json" \
    --config.data.train_video_list="$C/msrvtt/train_list_jsfusion.txt"
run "dense msrvtt facets" "$R/dense_msrvtt_facets" --config configs/dense_msrvtt.py$T \
    --config.data.features="$S/msrvtt/features" --config.data.annotations="$C/msrvtt/MSRVTT_facets_test.csv" \
    --config.data.train_annotations="$C/msrvtt/MSRVTT_data.json" \
    --config.data.train_video_list="$C/msrvtt/train_list_jsfusion.txt"
run "comp activitynet" "$R/comp_activitynet" --config configs/comp_activitynet.py$T \
    --config.data.features="$S/activitynet/features" --config.data.annotations="$C/activitynet/val_1.json" \
    --config.data.train_annotations="$C/activitynet/train.json" \
    --config.data.release_eval="$C/videocomp/activitynet_comp_test.json" \
    --config.data.release_train="$C/videocomp/activitynet_comp_train.json"
run genstate "$R/genstate" --config configs/genstate_rendered.py$V --config.data.features="$S/genstate/features" \
    --config.data.metadata="$C/genstate/test.json" --config.data.train_metadata="$C/genstate/train.json"
for rr in pair vedje; do  # the stack's line: VEDJE as the rerank stage against the pair reranker
  run "stack youcook2 $rr" "$R/stack_youcook2_$rr" --config configs/stack_youcook2.py$SV \
      --config.data.features="$S/youcook2/features" \
      --config.data.annotations="$C/youcook2/youcookii_annotations_trainval.json" --config.stack.reranker=$rr
done
if [ "$SCOPE" = all ]; then
  run "vedje didemo" "$R/vedje_didemo" --config configs/vedje_didemo.py$T --config.data.features="$S/didemo/features" \
      --config.data.annotations="$C/didemo/test_data.json" --config.data.train_annotations="$C/didemo/train_data.json"
  run "vedje activitynet" "$R/vedje_activitynet" --config configs/vedje_activitynet.py$T \
      --config.data.features="$S/activitynet/features" --config.data.annotations="$C/activitynet/val_1.json" \
      --config.data.train_annotations="$C/activitynet/train.json"
  run "vedje msvd" "$R/vedje_msvd" --config configs/vedje_msvd.py$T --config.data.features="$S/msvd/features" \
      --config.data.annotations="$C/msvd/youtube_mapping.txt,$C/msvd/AllVideoDescriptions.txt" \
      --config.data.train_annotations="$C/msvd/youtube_mapping.txt,$C/msvd/AllVideoDescriptions.txt"
  run "comp youcook2" "$R/comp_youcook2" --config configs/comp_youcook2.py$T \
      --config.data.features="$S/youcook2/features" \
      --config.data.annotations="$C/youcook2/youcookii_annotations_trainval.json" \
      --config.data.lexicon="$C/videocomp/lexicon.json"   # the corpus's verbs for action_replace
fi

# 3. Every model on every benchmark of these runs, a typed query, and the summary.
run evaluate_all "$R/evaluate_all" --config configs/evaluate_all.py \
    --config.workdirs="('$R/cast_youcook2', '$R/genstate', '$R/comp_activitynet')"
python -m vidjax.search --index "$R/stack_youcook2_vedje/index" "the red square moves onto the blue circle" --k 5
python -m vidjax.real_path "$OUT"
