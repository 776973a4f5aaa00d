#!/bin/bash
# The student preset end to end, as a learner runs it, in a scratch copy of the committed tree:
#   1. cmake --preset student && cmake --build --preset student   (the blank files)
#   2. ctest --preset student: every exercise's tests must fail on the blanks
#   3. each solution/NAME.cpp copied over NAME.cpp, as a learner who solved them all
#   4. cmake --build --preset student && ctest --preset student: every test must pass
#
#   bash exercises/check_student_preset.sh [SCRATCH_DIR]      (default: a new mktemp -d)
#
# It builds the libraries the exercises' tests compare with (common/ and chapters 2-8), so it
# takes minutes, not seconds: docs/COURSE.md records a measured run. Exit code 0: the
# blanks fail and the solutions pass; 1: they do not; 2: not run from a git checkout.
set -u
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null) || {
  echo "check_student_preset: not inside a git checkout" >&2; exit 2; }
scratch=${1:-$(mktemp -d)}
mkdir -p "$scratch" || exit 2
src="$scratch/mixpar"
rm -rf "$src" && mkdir -p "$src"
# The committed tree (what a learner clones), not the working tree's uncommitted edits.
git -C "$root" archive HEAD | tar -x -C "$src" || exit 2
cd "$src" || exit 2
log="$scratch/logs"
mkdir -p "$log"

start=$(date +%s)
if ! cmake --preset student >"$log/configure.log" 2>&1 ||
   ! cmake --build --preset student -j2 >"$log/build-blank.log" 2>&1; then
  echo "FAIL the student preset does not configure or build with the blank files ($log)"
  exit 1
fi
echo "ok   configure + build of the blanks: $(( $(date +%s) - start )) s"

ctest --preset student >"$log/ctest-blank.log" 2>&1
summary=$(grep -E "tests passed|tests failed" "$log/ctest-blank.log" | tail -1)
passed_on_blank=$(grep -cE "Test +#[0-9]+: .* Passed" "$log/ctest-blank.log")
echo "     blanks: $summary"
status=0
if [ "$passed_on_blank" -ne 0 ]; then
  echo "FAIL $passed_on_blank test(s) pass on the blank files:"
  grep -E "Test +#[0-9]+: .* Passed" "$log/ctest-blank.log" | sed 's/^/       /'
  status=1
else
  echo "ok   every test fails on the blank files"
fi

for dir in exercises/ch0*/; do
  for f in "$dir"solution/*.cpp; do cp "$f" "$dir$(basename "$f")"; done
done
start=$(date +%s)
if ! cmake --build --preset student -j2 >"$log/build-solved.log" 2>&1; then
  echo "FAIL the student preset does not build with the solutions copied in ($log)"
  exit 1
fi
echo "ok   rebuild with the solutions: $(( $(date +%s) - start )) s"
if ctest --preset student >"$log/ctest-solved.log" 2>&1; then
  echo "ok   solutions: $(grep -E "tests passed" "$log/ctest-solved.log" | tail -1)"
else
  echo "FAIL solutions: $(grep -E "tests failed" "$log/ctest-solved.log" | tail -1) ($log)"
  status=1
fi
exit $status
