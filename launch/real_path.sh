#!/usr/bin/env bash
# The real path end to end, offline: the rendered release-format corpus (vidjax.worlds.release) -> one prepared
# store per dataset (configs/prepare.py) -> every method's real-data config -> results.json per run, then
# evaluate_all over the runs and a typed query against the stack's index. Resumable: re-running skips what is done.
#
#   bash launch/real_path.sh [OUT] [SIZE] [SEED]   # OUT defaults to /tmp/vidjax_real_path; SIZE smoke (default) | full
#
# With SIZE=smoke (a few dozen clips) the backbone is the tiny random VideoPrism of `configs/prepare.py:smoke` and the
# methods run their `smoke` / `tiny` settings: it checks the plumbing, the numbers sit at chance. With SIZE=full
# (1,800 procedure videos) a small VideoPrism-shaped backbone is first trained on the corpus's YouCook2 training
# subset (`configs/backbone_rendered.py`: an official-format checkpoint and OUT/backbone/corpus_summary.json, its own
# retrieval on the held-out subset), the stores are extracted with it (`configs/prepare.py:rendered`) and the methods
# run their dataset configs (VEDJE, GRDR and VideoComp with `:rendered`, their worlds' sizes and schedules). SEED (default 0) seeds the corpus, the backbone and every method. On your own data,
# drop the variants, point `data.videos` / `data.annotations` at the release files and give the VideoPrism
# checkpoint (README, "Real data"). Every results.json here says "synthetic": true (rendered pixels), "path": "real".
set -euo pipefail
OUT=${1:-/tmp/vidjax_real_path}
SIZE=${2:-smoke}
SEED=${3:-0}
C=$OUT/corpus
S=$OUT/stores
R=$OUT/runs
run() { echo "+ python -m vidjax.main $*" >&2; local t=$SECONDS; python -m vidjax.main "$@" --config.seed="$SEED"
        echo "  ($((SECONDS - t)) s)" >&2; }

python -m vidjax.worlds.release --root "$C" --size "$SIZE" --seed "$SEED"

# 0. The backbone: with SIZE=full trained on the corpus's own training clips; with SIZE=smoke the random tiny one.
PREP=configs/prepare.py:smoke
if [ "$SIZE" != smoke ]; then
  run --config configs/backbone_rendered.py --workdir "$OUT/backbone" --config.data.videos="$C/youcook2/videos" \
      --config.data.annotations="$C/youcook2/youcookii_annotations_trainval.json"
  PREP="configs/prepare.py:rendered --config.model.checkpoint=$OUT/backbone/backbone.npz"
fi

# 1. One preparation per dataset: every kind the methods read, in one run each.
prepare() { run --config $PREP --workdir "$S/$1" --config.dataset="$1" --config.data.videos="$C/$1/videos" \
                --config.data.annotations="$2"; }
prepare youcook2    "$C/youcook2/youcookii_annotations_trainval.json"
prepare coin        "$C/coin/coin_train_70.json,$C/coin/coin_test_30.json"
prepare crosstask   "$C/crosstask"
prepare msrvtt      "$C/msrvtt/MSRVTT_data.json,$C/msrvtt/MSRVTT_JSFUSION_test.csv"
prepare didemo      "$C/didemo/train_data.json,$C/didemo/test_data.json"
prepare activitynet "$C/activitynet/train.json,$C/activitynet/val_1.json"
prepare msvd        "$C/msvd/youtube_mapping.txt,$C/msvd/AllVideoDescriptions.txt"
prepare genstate    "$C/genstate/train.json,$C/genstate/test.json"

# 2. Each method on each of its paper's datasets.
# GRDR: the store's text width (query intents, dense rerank); its T5 query encoder reads the captions with the store's
# SentencePiece model
# SIZE=full: VEDJE, GRDR and VideoComp at their `rendered` settings (the worlds' model sizes and schedules: the papers'
# would take CPU hours); CAST, GenState and the stack at their dataset configs.
V=""; T=":rendered"; SV=":rendered"; GRDR_FLAGS="--config.model.query_dim=64"   # the rendered backbone's text width (768 for LvT base)
[ "$SIZE" = smoke ] && V=":smoke" && T=":tiny" && SV=":smoke" && GRDR_FLAGS="--config.model.query_dim=32 --config.model.latent_dim=32 \
  --config.train.view_batch_size=16 --config.train.batch_size=32"
for d in youcook2 coin crosstask; do
  ann="$C/$d/youcookii_annotations_trainval.json"
  [ $d = coin ] && ann="$C/coin/coin_train_70.json,$C/coin/coin_test_30.json"
  [ $d = crosstask ] && ann="$C/crosstask"
  run --config configs/cast_$d.py$V --workdir "$R/cast_$d" --config.data.features="$S/$d/features" \
      --config.data.annotations="$ann"
done
run --config configs/retrieval_msrvtt.py --workdir "$R/retrieval_msrvtt" --config.data.features="$S/msrvtt/features" \
    --config.data.annotations="$C/msrvtt/MSRVTT_JSFUSION_test.csv"
run --config configs/vedje_msrvtt.py$T --workdir "$R/vedje_msrvtt" --config.data.features="$S/msrvtt/features" \
    --config.data.annotations="$C/msrvtt/MSRVTT_JSFUSION_test.csv" \
    --config.data.train_annotations="$C/msrvtt/MSRVTT_data.json" \
    --config.data.train_video_list="$C/msrvtt/train_list_jsfusion.txt"
run --config configs/vedje_didemo.py$T --workdir "$R/vedje_didemo" --config.data.features="$S/didemo/features" \
    --config.data.annotations="$C/didemo/test_data.json" --config.data.train_annotations="$C/didemo/train_data.json"
run --config configs/vedje_activitynet.py$T --workdir "$R/vedje_activitynet" \
    --config.data.features="$S/activitynet/features" --config.data.annotations="$C/activitynet/val_1.json" \
    --config.data.train_annotations="$C/activitynet/train.json"
run --config configs/vedje_msvd.py$T --workdir "$R/vedje_msvd" --config.data.features="$S/msvd/features" \
    --config.data.annotations="$C/msvd/youtube_mapping.txt,$C/msvd/AllVideoDescriptions.txt" \
    --config.data.train_annotations="$C/msvd/youtube_mapping.txt,$C/msvd/AllVideoDescriptions.txt"
run --config configs/grdr_msrvtt.py$T --workdir "$R/grdr_msrvtt" --config.data.features="$S/msrvtt/features" \
    --config.data.annotations="$C/msrvtt/MSRVTT_JSFUSION_test.csv" \
    --config.data.train_annotations="$C/msrvtt/MSRVTT_data.json" \
    --config.data.train_video_list="$C/msrvtt/train_list_jsfusion.txt" $GRDR_FLAGS
run --config configs/comp_activitynet.py$T --workdir "$R/comp_activitynet" \
    --config.data.features="$S/activitynet/features" --config.data.annotations="$C/activitynet/val_1.json" \
    --config.data.train_annotations="$C/activitynet/train.json" \
    --config.data.release_eval="$C/videocomp/activitynet_comp_test.json" \
    --config.data.release_train="$C/videocomp/activitynet_comp_train.json"
run --config configs/comp_youcook2.py$T --workdir "$R/comp_youcook2" --config.data.features="$S/youcook2/features" \
    --config.data.annotations="$C/youcook2/youcookii_annotations_trainval.json" \
    --config.benchmark.lexicon="$C/videocomp/lexicon.json"   # the corpus's verbs for action_replace
run --config configs/genstate_rendered.py$V --workdir "$R/genstate" --config.data.features="$S/genstate/features" \
    --config.data.metadata="$C/genstate/test.json" --config.data.train_metadata="$C/genstate/train.json"
run --config configs/stack_youcook2.py$SV --workdir "$R/stack_youcook2" --config.data.features="$S/youcook2/features" \
    --config.data.annotations="$C/youcook2/youcookii_annotations_trainval.json" --config.stack.reranker=vedje

# 3. Every model on every benchmark of these runs, and a typed query.
run --config configs/evaluate_all.py --workdir "$R/evaluate_all" \
    --config.workdirs="('$R/cast_youcook2', '$R/genstate', '$R/comp_activitynet')"
python -m vidjax.search --index "$R/stack_youcook2/index" "the red square moves onto the blue circle" --k 5
