#!/usr/bin/env bash
# Every README / docs/real_data.md section 2 command (the typed search after the stack's run), as written, on a
# ~30-video real-format corpus (15 SYNTHETIC placeholder videos a split of ../shared/data's release files, stores
# prepared with the tiny random VideoPrism), each in its own process: seconds, peak resident GB, what it clipped.
# OUT/small_corpora.tsv (BENCHMARKS.md, "Small corpora"). The tests (tests/test_small_corpora*.py) run one command per
# method and assert it finishes within 8 GB.
#   bash launch/small_corpora.sh OUT [LIMIT_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
python tests/small_corpora.py "${1:?usage: bash launch/small_corpora.sh OUT [LIMIT_SECONDS]}" "${2:-900}"
# the per-method small-corpus tests, the `heavy` ones (VEDJE, GRDR, VideoComp) included (the README's test command
# deselects them)
python -m pytest -q -m "heavy or not heavy" tests/test_small_corpora.py tests/test_small_corpora_grdr.py \
    tests/test_small_corpora_comp.py
