#!/bin/sh
# Runs a program that must refuse its command line as bad input: exit code 2, nothing on
# stdout, and exactly one line on stderr, which holds TEXT. The chapters' demos and tools are
# checked with it (tests/ch0*/CMakeLists.txt).
# Usage: sh tests/expect_input_error.sh TEXT PROGRAM [ARGS...]
text="$1"
shift
out="$("$@" 2>/tmp/expect_input_error.$$)"
code=$?
err="$(cat /tmp/expect_input_error.$$)"
rm -f /tmp/expect_input_error.$$
lines="$(printf '%s\n' "$err" | wc -l)"
fail=0
[ "$code" -eq 2 ] || { echo "exit code $code, want 2"; fail=1; }
[ -z "$out" ] || { echo "stdout not empty: $out"; fail=1; }
[ "$lines" -eq 1 ] || { echo "stderr has $lines lines, want 1"; fail=1; }
case "$err" in
  *"$text"*) ;;
  *) echo "stderr lacks '$text'"; fail=1 ;;
esac
[ "$fail" -eq 0 ] || { echo "stderr: $err"; exit 1; }
echo "ok: $err"
