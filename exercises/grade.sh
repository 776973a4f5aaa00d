#!/bin/bash
# The grading kit for teachers: builds each exercise of a rubric from a student's files against
# an existing default build (seconds per exercise), runs its tests and the teacher's hidden
# tests, prints points per exercise and writes JUnit XML.
#
#   bash exercises/grade.sh STUDENT_DIR [--build BUILD_DIR] [--rubric FILE]
#                           [--hidden-tests DIR] [--out DIR]
#
# STUDENT_DIR: a copy of the student's repository (STUDENT_DIR/exercises/NAME/STEM.cpp) or just
# the exercises folder (STUDENT_DIR/NAME/STEM.cpp). Only the students' STEM.cpp files are read:
# headers, tests and libraries are the teacher's. docs/COURSE.md ("Grading a class") shows a
# whole class. Exit codes: 0 graded, 1 the build could not be used, 2 bad input.
exec python3 "$(dirname "$0")/grade.py" "$@"
