#!/usr/bin/env bash
# Fp8LossGap.MeasuresEachRecipeAgainstBf16FromTheLogs: scripts/fp8_loss_gap.py on a 3-step run of
# a tiny model prints a row for fp32, bf16 and each recipe, and its --json holds each run's
# losses as train_gpt logged them and the gap computed from them; bad arguments exit 2.
# Usage: fp8_loss_gap_test.sh SCRIPT BIN_DIR SCRATCH_DIR
set -euo pipefail
script="$1" bin="$2" dir="$3"
rm -rf "$dir" && mkdir -p "$dir"
tiny=(--n-layer 1 --n-head 2 --n-embd 16 --seq 8 --batch 2 --threads 1)
python3 "$script" --bin-dir "$bin" --steps 3 --json "$dir/gap.json" -- "${tiny[@]}" > "$dir/out.txt"
for run in "fp32" "bf16" "fp8 delayed" "fp8 tensorwise" "fp8 blockwise"; do
  grep -q "^| $run |" "$dir/out.txt" || { echo "FAIL: no row for $run"; cat "$dir/out.txt"; exit 1; }
done
python3 - "$dir/gap.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
runs = {r["run"]: r for r in d["runs"]}
assert len(runs) == 5 and all(len(r["losses"]) == 3 for r in runs.values()), runs.keys()
base = runs["bf16"]["tail_loss"]
for name in ("fp8 delayed", "fp8 tensorwise", "fp8 blockwise"):
    r = runs[name]
    assert abs(r["gap"] - (r["tail_loss"] - base) / base) < 1e-12, name
    assert r["tail_loss"] == r["losses"][-1], name  # 3 steps: the tail is the last step
    assert 0 <= r["grad_flushed_mean"] <= r["grad_flushed_max"] <= 1, name
PY
set +e
python3 "$script" --bin-dir "$bin" --steps 0 > /dev/null 2>&1; a=$?
python3 "$script" --bin-dir "$dir" > /dev/null 2>&1; b=$?
set -e
[ "$a" -eq 2 ] && [ "$b" -eq 2 ] || { echo "FAIL: bad arguments exit $a, $b (want 2)"; exit 1; }
echo "fp8_loss_gap.py: five runs measured from their logs; bad arguments exit 2"
