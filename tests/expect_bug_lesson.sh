#!/bin/sh
# Runs a chapter demo with --bug NAME, which must teach its lesson: exit code 0, a
# "FAIL (expected)" line naming CLAIM (the correctness claim the bug breaks), the closing line
# "--bug NAME breaks ..., as expected", and no other FAIL. If the bug stops breaking its claim,
# or breaks another one, this test fails (report/claim_table.h: the --bug convention).
# Usage: sh tests/expect_bug_lesson.sh CLAIM PROGRAM --bug NAME [ARGS...]
claim="$1"
shift
out="$("$@" 2>&1)"
code=$?
fail=0
[ "$code" -eq 0 ] || { echo "exit code $code, want 0"; fail=1; }
printf '%s\n' "$out" | grep -F "FAIL (expected)" | grep -qF "$claim" ||
  { echo "no 'FAIL (expected)' line names '$claim'"; fail=1; }
printf '%s\n' "$out" | grep -q -- "^--bug .* as expected" ||
  { echo "no closing line '--bug NAME breaks ..., as expected'"; fail=1; }
# A claim table row starts with its check: "FAIL" alone is a failure nobody expected.
if printf '%s\n' "$out" | grep -E '^ *FAIL ' | grep -vqF "FAIL (expected)"; then
  echo "a claim FAILED that the bug is not expected to break"
  fail=1
fi
[ "$fail" -eq 0 ] || { printf '%s\n' "$out"; exit 1; }
printf '%s\n' "$out" | grep -F "FAIL (expected)"
