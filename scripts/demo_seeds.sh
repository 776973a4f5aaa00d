#!/usr/bin/env bash
# The main demo (scripts/demo.sh) at several seeds, one after the other, and a table of what
# each run ended at: the held-out accuracy of both runs and the gap between their final losses,
# the claims the demo checks. This is how the chapter 8 README's range of the demo's outcomes
# was measured; run it on another machine, or another build, to see that range there.
# Usage: bash scripts/demo_seeds.sh [SEED ...]        (default: 1337 1 2 3 4)
#   MIXPAR_TRAIN_GPT  the train_gpt to run (default: build/bin/train_gpt, built if missing)
#   MIXPAR_DEMO_OUT   where each seed's logs go, as DIR/seed-N (default build/demo-seeds)
#   any other environment (MIXPAR_ONEDNN=0, OMP_NUM_THREADS, ...) reaches both runs
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=("$@")
[ ${#seeds[@]} -eq 0 ] && seeds=(1337 1 2 3 4)
for s in "${seeds[@]}"; do
  [[ "$s" =~ ^[0-9]+$ ]] || { echo "error: a seed is a whole number, got '$s'" >&2; exit 2; }
done
train_gpt="${MIXPAR_TRAIN_GPT:-build/bin/train_gpt}"
if [ ! -x "$train_gpt" ]; then
  bash scripts/install_deps.sh
  export PATH="/usr/local/cuda/bin:$PATH"
  cmake --preset default >/dev/null
  cmake --build --preset default --target train_gpt -j "$(nproc)"
fi
root="${MIXPAR_DEMO_OUT:-build/demo-seeds}"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
failed=0
for s in "${seeds[@]}"; do
  out="$root/seed-$s"
  if MIXPAR_TRAIN_GPT="$train_gpt" MIXPAR_DEMO_OUT="$out" bash scripts/demo.sh --seed "$s" \
       > "$root-seed-$s.log" 2>&1; then
    verdict=ok
  else
    verdict=FAILED
    failed=1
  fi
  "$py" - "$out/grid.jsonl" "$out/one.jsonl" "$s" "$verdict" <<'PY'
import json, sys
def read(p):
    with open(p, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]
try:
    grid, one = read(sys.argv[1]), read(sys.argv[2])
except (OSError, ValueError) as e:
    print(f"seed {sys.argv[3]:>5}: FAILED before both logs were complete ({e})")
    sys.exit(0)
def acc(rows):
    a = [r["heldout_accuracy"] for r in rows if "heldout_accuracy" in r]
    return 100 * a[-1] if a else float("nan")
def first90(rows):
    return next((r["step"] for r in rows if r.get("heldout_accuracy", 0) >= 0.9), None)
steps = max(r.get("step", 0) for r in grid)
def final(rows):
    sel = [r["loss"] for r in rows if "loss" in r and steps - 50 < r.get("step", 0) <= steps]
    return sum(sel) / len(sel)
a, b = final(grid), final(one)
print(f"seed {sys.argv[3]:>5}: 8 ranks {acc(grid):5.1f}% (90% from step {first90(grid)}), "
      f"one device {acc(one):5.1f}% (from step {first90(one)}), final losses {a:.4f} vs {b:.4f} "
      f"({100 * abs(a - b) / b:.1f}% apart): {sys.argv[4]}")
PY
done
exit "$failed"
