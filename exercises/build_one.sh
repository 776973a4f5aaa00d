#!/bin/bash
# Builds one exercise from your file (exercises/NAME/STEM.cpp) against an existing build and runs
# its tests: seconds once that build's libraries are built, where the student preset builds
# every library the exercises compare with first (minutes).
#
#   bash exercises/build_one.sh NAME [BUILD_DIR] [-- GTEST_FLAGS...]
#       NAME       an exercise's folder, e.g. ch01_round_bf16 (`exercises/build_one.sh --list`)
#       BUILD_DIR  a configured build of this checkout (default: build, `cmake --preset default`)
#       GTEST_FLAGS GoogleTest's, handed to the tests: --gtest_filter='*Padding*', --gtest_brief=1
#
# It builds the target exercise_NAME (your STEM.cpp and the exercise's tests; the libraries only
# if they are not built yet) and runs build/exercises/exercise_NAME. Exit code: the tests'
# (0 all pass, 1 a test fails or your file does not compile); 2 bad input (unknown exercise,
# a folder that is not a configured build).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
usage="usage: exercises/build_one.sh NAME [BUILD_DIR] [-- GTEST_FLAGS...]"

exercises() {
  for d in "$here"/ch[0-9][0-9]_*/; do basename "$d"; done
}
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  echo "$usage"; echo "exercises:"; exercises | sed 's/^/  /'
  [ $# -ge 1 ] && exit 0 || exit 2
fi
if [ "$1" = "--list" ]; then exercises; exit 0; fi
name=${1%/}
name=${name#exercises/}
shift
build="$root/build"
if [ $# -ge 1 ] && [ "$1" != "--" ]; then build=$1; shift; fi
if [ $# -ge 1 ] && [ "$1" = "--" ]; then shift; fi

if [ ! -d "$here/$name" ] || [[ ! "$name" =~ ^ch[0-9][0-9]_ ]]; then
  echo "build_one: no exercise '$name' (exercises/build_one.sh --list names them)" >&2; exit 2
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "build_one: '$build' is not a configured build (run: cmake --preset default)" >&2; exit 2
fi

start=$(date +%s%N)
if ! cmake --build "$build" --target "exercise_$name"; then
  echo "build_one: exercise_$name did not build (the compiler's message is above)" >&2
  exit 1
fi
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "build_one: exercise_$name built in $((ms / 1000)).$((ms % 1000 / 100)) s"
exec "$build/exercises/exercise_$name" "$@"
