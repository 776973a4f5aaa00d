#!/usr/bin/env bash
# The GPU check's own test, on any machine: scripts/gpu_check.sh --dry-run --no-build on a
# stand-in build whose "test binary" passes, fails, crashes, hangs, skips or selects nothing
# depending on the suite asked for, with a budget too small for the last suite. The summary
# must say each of those, in order, the hung suite must end at its own timeout, what did not
# fit must be "not reached", and the exit code must be non-zero. About 15 s.
# Usage: bash scripts/gpu_check_selftest.sh   (ctest: gpu_check_selftest, label common)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/build/bin" "$work/out"

cat > "$work/build/bin/test_common" <<'EOF'
#!/usr/bin/env bash
filter=""
for a in "$@"; do case "$a" in --gtest_filter=*) filter="${a#--gtest_filter=}" ;; esac; done
case "$filter" in
  Pass.*) echo "[ RUN      ] Pass.A"; echo "[       OK ] Pass.A (1 ms)"; exit 0 ;;
  Fail.*) echo "[ RUN      ] Fail.A"; echo "[       OK ] Fail.A (1 ms)"
          echo "[ RUN      ] Fail.B"; echo "[  FAILED  ] Fail.B (2 ms)"; exit 1 ;;
  Crash.*) echo "[ RUN      ] Crash.IllegalAddress"; kill -SEGV $$ ;;
  Hang.*) echo "[ RUN      ] Hang.Forever"; exec sleep 60 ;;
  Skip.*) echo "[ RUN      ] Skip.A"; echo "[  SKIPPED ] Skip.A (0 ms)"; exit 0 ;;
  *) exit 0 ;;  # the filter selected nothing
esac
EOF
cat > "$work/build/bin/bench_gpu_gpt" <<'EOF'
#!/usr/bin/env bash
echo "device: stand-in"; echo "  1.00 ms/step"
EOF
chmod +x "$work/build/bin/test_common" "$work/build/bin/bench_gpu_gpt"
cp "$work/build/bin/test_common" "$work/build/bin/test_ch04"

start=$(date +%s)
OUT="$work/out" BUDGET_S=24 \
GPU_CHECK_SUITES="Pass test_common Pass.* 30;Fail test_common Fail.* 30;Crash test_common Crash.* 30;Skip test_ch04 Skip.* 30;None test_common None.* 30;Hang test_common Hang.* 10;Late test_common Pass.* 30" \
  bash "$here/gpu_check.sh" --dry-run --no-build --build-dir "$work/build" > "$work/stdout" 2>&1
rc=$?
secs=$(( $(date +%s) - start ))
cat "$work/stdout"

fail=0
expect() {  # expect STEP RESULT [DETAIL-SUBSTRING]
  local line
  line=$(awk -F'\t' -v s="$1" '$1 == s' "$work/out/results.tsv")
  if [[ "$line" != "$1"$'\t'"$2"$'\t'* ]] || [[ "$line" != *"${3:-}"* ]]; then
    echo "selftest: expected $1 -> $2 ${3:+($3)}, got '${line:-nothing}'"
    fail=1
  fi
}
expect Pass passed "1 passed, 0 failed"
expect Fail FAILED "1 passed, 1 failed"
expect Crash CRASHED "signal 11 in Crash.IllegalAddress"
expect Skip skipped "1 skipped"
expect None FAILED "selected no test"
expect Hang "TIMED OUT" "in Hang.Forever"
expect Late "not reached"
expect bench "not reached"
grep -q "^not reached: Late bench" "$work/out/summary.txt" || { echo "selftest: no 'not reached' line"; fail=1; }
[ "$rc" != 0 ] || { echo "selftest: gpu_check.sh exited 0 despite failures"; fail=1; }
[ "$secs" -lt 24 ] || { echo "selftest: took $secs s, over its 24 s budget"; fail=1; }
[ -s "$work/out/Fail.log" ] || { echo "selftest: no per-suite log"; fail=1; }
# Without --dry-run a GPU machine is assumed: a skipped GPU test there is a failure.
mkdir -p "$work/out2"
OUT="$work/out2" BUDGET_S=60 GPU_CHECK_SUITES="Skip test_common Skip.* 30" \
  bash "$here/gpu_check.sh" --no-build --build-dir "$work/build" > "$work/stdout2" 2>&1
rc2=$?
grep -qP '^Skip\tFAILED\t.*on a GPU machine' "$work/out2/results.tsv" && [ "$rc2" != 0 ] ||
  { echo "selftest: a skip on a GPU machine was not a failure"; cat "$work/stdout2"; fail=1; }
# A flag missing its value: exit 2 and one line, the next flag not taken as the directory.
err=$(bash "$here/gpu_check.sh" --build-dir --dry-run 2>&1 >/dev/null); rc3=$?
[ "$rc3" = 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] &&
  [[ "$err" == *"--build-dir needs a directory, but is followed by the flag '--dry-run'"* ]] ||
  { echo "selftest: --build-dir --dry-run gave $rc3: $err"; fail=1; }
[ "$fail" = 0 ] && echo "selftest: ok ($secs s)"
exit $fail
