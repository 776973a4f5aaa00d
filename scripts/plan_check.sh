#!/usr/bin/env bash
# mixpar-plan against train_gpt on this machine (scripts/plan_check.py): every 8-rank layout of
# a small model, predicted and measured; a few minutes. Not in ctest (the quick version is:
# tests/ch08/plan). Usage: scripts/plan_check.sh [BUILD_DIR] [OUT_DIR] [more plan_check.py flags]
set -euo pipefail
build="${1:-build}"
out="${2:-/tmp/mixpar-plan-check}"
shift $(( $# > 2 ? 2 : $# ))
exec python3 "$(dirname "$0")/plan_check.py" --bin-dir "$build/bin" --out "$out" "$@"
