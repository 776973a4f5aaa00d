#!/bin/bash
# Makes the students' copy of the course: the committed tree (git HEAD) without the answers.
#
#   bash exercises/make_student_fork.sh DEST
#
# Removed: every exercise's reference solution (exercises/*/solution/), the teacher's material
# (exercises/teacher/: the guide with times, difficulty and quizzes, the hidden tests, the
# grader's hostile corpus), the answers to each chapter's "break it yourself" questions (the
# README's collapsed "Open after trying them" block, replaced by a line saying where they are)
# and the scripts that need the solutions (check_student_preset.sh, grade_test.py, this
# script and its test). Kept: the blanks, headers and tests, the chapters, the grader (a
# student may grade their own files; the teacher's rubric and hidden tests decide the marks).
#
# Without solutions, exercises/CMakeLists.txt builds the default build's exercise tests from
# the learner's files (as the student preset does), so `cmake --preset default` and
# `bash exercises/build_one.sh NAME` work as in the teacher's copy, in seconds per exercise.
# DEST must not exist or be empty; initialise it as the students' repository (git init) after.
# Exit codes: 0 made, 2 bad input (one line naming it).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
if [ $# -ne 1 ] || [ "${1#-}" != "$1" ]; then
  echo "make_student_fork: usage: exercises/make_student_fork.sh DEST" >&2; exit 2
fi
dest=$1
if [ -e "$dest" ] && [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then
  echo "make_student_fork: $dest exists and is not empty" >&2; exit 2
fi
if ! git -C "$root" rev-parse --verify -q HEAD >/dev/null; then
  echo "make_student_fork: $root is not a git checkout with a commit (the fork is made from HEAD)" >&2
  exit 2
fi
mkdir -p "$dest"
git -C "$root" archive --format=tar HEAD | tar -x -C "$dest"

removed=("exercises/*/solution" exercises/teacher exercises/check_student_preset.sh
         exercises/grade_test.py exercises/make_student_fork.sh exercises/make_student_fork_test.py)
# shellcheck disable=SC2068  # the patterns expand here, in the copy
(cd "$dest" && rm -rf ${removed[@]})
# What the docs may still name (the teacher's copy's files): the doc checker
# (tests/doc_references_test.py) reads this list.
{
  echo "# Left out of this students' copy of the course (exercises/make_student_fork.sh in the"
  echo "# teacher's copy): the reference solutions, the teacher's material, the answer keys."
  printf '%s\n' "${removed[@]}"
} > "$dest/STUDENT_COPY_REMOVED.txt"

# The answer keys of the chapters: from the "Open after trying them" block to its </details>.
for readme in "$dest"/ch[0-9][0-9]_*/README.md; do
  python3 - "$readme" <<'EOF'
import re, sys
path = sys.argv[1]
with open(path, encoding="utf-8") as f:
    text = f.read()
text, n = re.subn(r"<details><summary>Open after trying them</summary>.*?</details>\n?",
                  "The answers are in your teacher's copy of the course.\n", text, flags=re.S)
with open(path, "w", encoding="utf-8") as f:
    f.write(text)
EOF
done
left=$(grep -rl "Open after trying them" "$dest" || true)
if [ -n "$left" ] || ls -d "$dest"/exercises/*/solution >/dev/null 2>&1; then
  echo "make_student_fork: answers left in the copy: $left" >&2; exit 1
fi
echo "make_student_fork: the students' copy is in $dest (from $(git -C "$root" rev-parse --short HEAD)): no solutions, no answer keys, no teacher's material"
