#!/usr/bin/env bash
# The main demo: the GPT trainer learning the built-in addition task on 8 ranks (threads of one
# process) as a dp 2 x tp 2 x pp 2 grid, ZeRO-1 over dp, the 1F1B pipeline, bf16 with FP32
# master weights. It prints the pre-flight checklist, the progress, the held-out accuracy,
# then runs one device on the same global batch (dp 2 x B 8 x m 2 = 32 sequences, the same
# token windows) and compares the two loss curves from their JSONL logs, and draws the plots
# (scripts/plot_run.py). Sets up everything on a fresh Debian machine first: the packages
# (scripts/install_deps.sh), the configure, and the build of train_gpt alone.
# Usage: bash scripts/demo.sh [train_gpt flags, given to both runs]
#   MIXPAR_DEMO_STEPS (default 600): optimizer steps of each run
#   MIXPAR_DEMO_OUT   (default build/demo): where the logs and plots go
#   MIXPAR_TRAIN_GPT  (default: build it): a train_gpt already built; no set-up, no build
set -euo pipefail
cd "$(dirname "$0")/.."
train_gpt="${MIXPAR_TRAIN_GPT:-}"
if [ -z "$train_gpt" ]; then
  bash scripts/install_deps.sh
  export PATH="/usr/local/cuda/bin:$PATH"
  cmake --preset default >/dev/null
  cmake --build --preset default --target train_gpt -j "$(nproc)"
  train_gpt=./build/bin/train_gpt
fi

out="${MIXPAR_DEMO_OUT:-build/demo}"
steps="${MIXPAR_DEMO_STEPS:-600}"
mkdir -p "$out"
rm -f "$out"/grid.jsonl "$out"/one.jsonl
# Debian's matplotlib lives with the system interpreter (a pyenv python3 may lack it).
py=/usr/bin/python3
[ -x "$py" ] || py=python3
common=(--dtype bf16 --steps "$steps" --eval-every 200 --print-every 50)

echo "== 8 ranks: dp 2 x tp 2 x pp 2, ZeRO-1, 1F1B, bf16 (B 8 per replica, m 2 micro-batches) =="
t0=$(date +%s)
"$train_gpt" --ranks 8 --dp 2 --tp 2 --pp 2 --zero-stage 1 --schedule 1f1b \
  --batch 8 --grad-accum 2 "${common[@]}" --log-jsonl "$out/grid.jsonl" "$@"
t1=$(date +%s)
echo
echo "== one device, the same global batch (B 16, m 2) =="
# One thread: two OpenMP threads meet at a barrier in every layer, which costs more than it
# gains on a machine whose cores are shared (ch08 README, "The default run").
"$train_gpt" --threads 1 --batch 16 --grad-accum 2 "${common[@]}" --log-jsonl "$out/one.jsonl" "$@" |
  grep -E "^eval step|^step +${steps}/"
t2=$(date +%s)
echo
echo "== the two runs compared (from their JSONL logs) and plotted =="
"$py" scripts/plot_run.py "$out/grid.jsonl" --compare "$out/one.jsonl" \
  --label "dp 2 x tp 2 x pp 2, ZeRO-1, bf16" --other-label "one device, same global batch"
echo "wall time: 8-rank run $((t1 - t0)) s, single-device run $((t2 - t1)) s"
echo "loss plot: $out/grid_loss.png"
