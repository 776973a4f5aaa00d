#!/usr/bin/env bash
# PlotRun.DrawsLossGradNormLossScaleMemoryAndThroughputFromAJsonl: a short fp16 run on 2 rank
# threads logs its JSONL; scripts/plot_run.py turns it into five PNGs, each a real image file
# (and a short --dtype fp8 run into a sixth, its casts); --compare with a one-device run names
# every line of the loss plot (each run's loss and held-out accuracy) after its run; a
# malformed log is one line and exit code 2; a run with --val-data draws its validation loss. Skipped (exit 77) where matplotlib is missing.
# Usage: plot_run_test.sh TRAIN_GPT PLOT_RUN_PY SCRATCH_DIR
set -euo pipefail
train_gpt="$1" script="$2" dir="$3"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if ! "$py" -c "import matplotlib" 2>/dev/null; then
  echo "skipped: no matplotlib (bash scripts/install_deps.sh installs python3-matplotlib)"
  exit 77
fi
rm -rf "$dir" && mkdir -p "$dir"
"$train_gpt" --n-layer 2 --n-head 2 --n-embd 16 --seq 8 --batch 2 --steps 6 --warmup 2 \
  --eval-every 3 --threads 1 --ranks 2 --dtype fp16 --log-jsonl "$dir/run.jsonl" > "$dir/train.txt"
"$py" "$script" "$dir/run.jsonl" --out "$dir/plots" > "$dir/plots.txt"
for kind in loss grad_norm loss_scale memory throughput; do
  f="$dir/plots/run_$kind.png"
  grep -qx "$f" "$dir/plots.txt" || { echo "FAIL: $f not listed"; cat "$dir/plots.txt"; exit 1; }
  head -c 8 "$f" | od -An -tx1 | grep -q "89 50 4e 47" || { echo "FAIL: $f is not a PNG"; exit 1; }
done
# --compare: a second run (one device) beside the first, and every line of the loss plot named
# after its run in the legend: the two losses and the two held-out accuracy lines.
"$train_gpt" --n-layer 2 --n-head 2 --n-embd 16 --seq 8 --batch 4 --steps 6 --warmup 2 \
  --eval-every 3 --threads 1 --dtype fp16 --log-jsonl "$dir/one.jsonl" > "$dir/one.txt"
"$py" "$script" "$dir/run.jsonl" --compare "$dir/one.jsonl" --label "2 ranks" \
  --other-label "one device" --out "$dir/compare" > "$dir/compare.txt"
grep -q "^compared over 6 steps: largest loss difference" "$dir/compare.txt" ||
  { echo "FAIL: no comparison line"; cat "$dir/compare.txt"; exit 1; }
grep -qx "$dir/compare/run_loss.png" "$dir/compare.txt" ||
  { echo "FAIL: no compared loss plot"; cat "$dir/compare.txt"; exit 1; }
"$py" - "$(dirname "$script")" "$dir/run.jsonl" "$dir/one.jsonl" <<'PY' ||
import sys
sys.path.insert(0, sys.argv[1])
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import plot_run
fig = plot_run.loss_figure(plt, plot_run.read_log(sys.argv[2]), "2 ranks",
                           plot_run.read_log(sys.argv[3]), "one device")
legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()]
legend = sorted(t.get_text() for lg in legends for t in lg.get_texts())
lines = sorted(line.get_label() for ax in fig.axes for line in ax.get_lines())
want = sorted(["loss, 2 ranks", "loss, one device",
               "held-out accuracy, 2 ranks", "held-out accuracy, one device"])
if lines != want or legend != want:
    print("FAIL: the loss plot's lines %s and legend %s should both be %s" % (lines, legend, want))
    sys.exit(1)
PY
  exit 1
# A run on text with --val-data draws its validation loss on the loss plot.
text="$(dirname "$script")/../tests/data/text"
"$train_gpt" --n-layer 1 --n-head 2 --n-embd 16 --seq 16 --batch 2 --steps 4 --threads 1 \
  --data "$text/hamlet_train.txt" --val-data "$text/hamlet_val.txt" --eval-every 2 \
  --log-jsonl "$dir/text.jsonl" > "$dir/text.txt"
"$py" - "$(dirname "$script")" "$dir/text.jsonl" <<'PY' ||
import sys
sys.path.insert(0, sys.argv[1])
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import plot_run
fig = plot_run.loss_figure(plt, plot_run.read_log(sys.argv[2]), "text")
lines = {line.get_label(): line for ax in fig.axes for line in ax.get_lines()}
val = lines.get("validation loss, text")
if val is None or list(val.get_xdata()) != [2, 4]:
    print("FAIL: the loss plot should draw the validation loss at steps 2 and 4: %s" % sorted(lines))
    sys.exit(1)
PY
  exit 1
# A --dtype fp8 run adds the plot of its casts.
"$train_gpt" --n-layer 1 --n-head 2 --n-embd 16 --seq 8 --batch 2 --steps 4 --threads 1 \
  --dtype fp8 --fp8-recipe delayed --fp8-amax-history 2 --log-jsonl "$dir/fp8.jsonl" > "$dir/fp8.txt"
"$py" "$script" "$dir/fp8.jsonl" --out "$dir/plots" > "$dir/fp8-plots.txt"
f="$dir/plots/fp8_fp8.png"
grep -qx "$f" "$dir/fp8-plots.txt" || { echo "FAIL: $f not listed"; cat "$dir/fp8-plots.txt"; exit 1; }
head -c 8 "$f" | od -An -tx1 | grep -q "89 50 4e 47" || { echo "FAIL: $f is not a PNG"; exit 1; }
grep -q "_fp8.png" "$dir/plots.txt" && { echo "FAIL: an fp16 run drew an fp8 plot"; exit 1; }
echo '{"step": 1' > "$dir/bad.jsonl"
set +e
"$py" "$script" "$dir/bad.jsonl" --out "$dir/bad" 2> "$dir/bad.err"
code=$?
set -e
[ "$code" -eq 2 ] || { echo "FAIL: malformed log exit code $code"; exit 1; }
[ "$(wc -l < "$dir/bad.err")" -eq 1 ] || { echo "FAIL: want one line"; cat "$dir/bad.err"; exit 1; }
# Under an interpreter that cannot see the system's matplotlib (a virtualenv first in PATH), the
# script re-executes under /usr/bin/python3 and draws the same plots (it used to exit 2 there).
if python3 -m venv --without-pip "$dir/venv" > /dev/null 2>&1 &&
   ! "$dir/venv/bin/python3" -c "import matplotlib" 2> /dev/null; then
  "$dir/venv/bin/python3" "$script" "$dir/run.jsonl" --out "$dir/plots-venv" > "$dir/venv.txt" ||
    { echo "FAIL: plot_run.py under a virtualenv without matplotlib"; exit 1; }
  grep -qx "$dir/plots-venv/run_loss.png" "$dir/venv.txt" ||
    { echo "FAIL: no plot under the virtualenv"; cat "$dir/venv.txt"; exit 1; }
  venv_note="; again from a virtualenv without matplotlib"
else
  venv_note=" (no virtualenv here: its re-exec not checked)"
fi
echo "ok: 5 plots from $dir/run.jsonl, a comparison with every line named after its run$venv_note"
