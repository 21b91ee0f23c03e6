#!/usr/bin/env bash
# Every README "Real data" command (docs/real_data.md, section 2) run whole as written, on ../shared/data's release
# files as published plus SYNTHETIC placeholder videos named by their ids (vidjax.worlds.placeholders), each store
# prepared with the tiny random VideoPrism. OUT/walk.tsv: one line per command (seconds, ran / failed with the
# error). The same commands, stopped before training (`--check`), are tests/test_readme_commands.py in CI.
#   bash launch/readme_walk.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."
python tests/test_readme_commands.py "${1:?usage: bash launch/readme_walk.sh OUT}"
