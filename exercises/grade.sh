#!/bin/bash
# The grading kit for teachers: builds each exercise of a rubric from students' files against
# an existing default build (seconds per exercise), runs each test the rubric names (and the
# teacher's hidden tests) alone under the grader's own main, prints points per exercise and
# writes JUnit XML.
#
#   bash exercises/grade.sh STUDENT... [--build BUILD_DIR] [--rubric FILE]
#                           [--hidden-tests DIR] [--out DIR] [--jobs N]
#                           [--compile-timeout S] [--test-timeout S]
#
# STUDENT: a copy of a student's repository (STUDENT/exercises/NAME/STEM.cpp) or just the
# exercises folder (STUDENT/NAME/STEM.cpp). Only the students' STEM.cpp files are read, and
# refused before compiling when they define main, tests or code run before main, or include
# anything but the exercise's, the project's and the standard headers: headers, tests,
# libraries and main are the teacher's. docs/COURSE.md ("Grading a class") shows a whole class
# and what the grader does not protect against. Exit codes: 0 graded, 1 the build could not be
# used, 2 bad input.
exec python3 "$(dirname "$0")/grade.py" "$@"
