#!/usr/bin/env python3
"""Tests of exercises/grade.sh on a small rubric, one scenario per ctest (GradeScript.*):

  solutions   the reference solutions, as an exercises folder: full marks, JUnit without failures
  blanks      the committed blank files, as a copy of the repository: zero, every test failed
  hidden      a hidden-test folder: its tests are compiled in, counted and weigh in the points
  compile     a student file that does not compile: zero for that exercise, reported, the rest
              graded
  bad-input   a malformed rubric, a missing student tree, an unknown hidden folder, a bad flag:
              exit code 2 and one line on stderr
  rubric      the default rubric (exercises/rubric.tsv) lists every exercise folder once, so a
              new exercise cannot go ungraded

  python3 exercises/grade_test.py SCENARIO BUILD_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
GRADE = os.path.join(HERE, "grade.sh")
RUBRIC = "ch02_dynamic_scale\t10\tper-test\nch05_zero_memory\t4\tall-or-nothing\n"
STEMS = {"ch02_dynamic_scale": "dynamic_scale", "ch05_zero_memory": "zero_memory"}


def grade(tmp, build, student, *extra):
    rubric = os.path.join(tmp, "rubric.tsv")
    if not os.path.exists(rubric):
        with open(rubric, "w") as f:
            f.write("# a course's selection\n" + RUBRIC)
    out = os.path.join(tmp, "out")
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run(["bash", GRADE, student, "--build", build, "--rubric", rubric,
                        "--out", out, *extra], capture_output=True, text=True, timeout=300)
    sys.stdout.write(r.stdout + r.stderr)
    rows = {}
    path = os.path.join(out, "grades.tsv")
    if os.path.exists(path):
        with open(path) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split("\t")
                rows[fields[0]] = fields
    return r, rows, out


def check(cond, what):
    if not cond:
        print(f"FAIL {what}")
        sys.exit(1)
    print(f"ok   {what}")


def exercises_copy(tmp, which):
    """An exercises folder holding `which` ('solution' or 'blank') as each STEM.cpp."""
    student = os.path.join(tmp, which)
    for ex, stem in STEMS.items():
        os.makedirs(os.path.join(student, ex))
        src = os.path.join(HERE, ex, "solution" if which == "solution" else "", f"{stem}.cpp")
        shutil.copy(src, os.path.join(student, ex, f"{stem}.cpp"))
    return student


def junit_counts(out):
    root = ET.parse(os.path.join(out, "junit.xml")).getroot()
    cases = list(root.iter("testcase"))
    failed = [c for c in cases if c.find("failure") is not None]
    return cases, failed


def default_rubric_names():
    with open(os.path.join(HERE, "rubric.tsv")) as f:
        return [l.split("\t")[0] for l in f.read().splitlines() if l.strip() and not l.startswith("#")]


def exercise_folders():
    return sorted(d for d in os.listdir(HERE)
                  if os.path.isdir(os.path.join(HERE, d, "solution")))


def main():
    scenario, build = sys.argv[1], os.path.abspath(sys.argv[2])
    if scenario == "rubric":
        names = default_rubric_names()
        folders = exercise_folders()
        check(len(names) == len(set(names)), f"no exercise twice in the rubric ({names})")
        check(sorted(names) == folders,
              f"the rubric's exercises are the exercise folders (missing from the rubric: "
              f"{sorted(set(folders) - set(names))}; not exercises: {sorted(set(names) - set(folders))})")
        return 0
    tmp = tempfile.mkdtemp(prefix="grade_test_")
    try:
        if scenario == "solutions":
            r, rows, out = grade(tmp, build, exercises_copy(tmp, "solution"))
            check(r.returncode == 0, f"exit code 0 (got {r.returncode})")
            check(rows["ch02_dynamic_scale"][5] == "10" and rows["ch05_zero_memory"][5] == "4",
                  "each exercise gets its full points")
            check(rows["total"][5] == "14" and rows["total"][6] == "14", "total 14 / 14")
            cases, failed = junit_counts(out)
            check(len(cases) == 9 and not failed, f"junit.xml: 9 test cases, none failed "
                  f"(got {len(cases)}, {len(failed)} failed)")
        elif scenario == "blanks":
            # A copy of the repository's layout: STUDENT/exercises/NAME/STEM.cpp.
            repo = os.path.join(tmp, "repo")
            os.makedirs(repo)
            shutil.move(exercises_copy(tmp, "blank"), os.path.join(repo, "exercises"))
            r, rows, out = grade(tmp, build, repo)
            check(r.returncode == 0, f"exit code 0 (got {r.returncode})")
            check(rows["total"][5] == "0" and rows["total"][6] == "14", "total 0 / 14")
            cases, failed = junit_counts(out)
            check(len(cases) == 9 and len(failed) == 9, f"junit.xml: all 9 test cases failed "
                  f"(got {len(failed)} of {len(cases)})")
        elif scenario == "hidden":
            hidden = os.path.join(tmp, "hidden", "ch02_dynamic_scale")
            os.makedirs(hidden)
            with open(os.path.join(hidden, "extra_test.cpp"), "w") as f:
                f.write('#include "ch02_dynamic_scale/dynamic_scale.h"\n'
                        '#include <gtest/gtest.h>\n'
                        'namespace mixpar::exercises {\n'
                        'TEST(HiddenScale, TwoOverflowsQuarterTheScale) {\n'
                        '  DynamicScale s;\n'
                        '  update_scale(s, true, 10);\n'
                        '  update_scale(s, true, 10);\n'
                        '  EXPECT_EQ(s.scale, 16384.0f);\n'
                        '}\n'
                        '// A test the reference solution fails: it must cost points.\n'
                        'TEST(HiddenScale, StartsAtOne) { EXPECT_EQ(DynamicScale{}.scale, 1.0f); }\n'
                        '}\n')
            r, rows, out = grade(tmp, build, exercises_copy(tmp, "solution"),
                                 "--hidden-tests", os.path.dirname(hidden))
            check(r.returncode == 0, f"exit code 0 (got {r.returncode})")
            row = rows["ch02_dynamic_scale"]
            check(row[2:5] == ["6", "7", "2"], f"6 of 7 tests passed, 2 of them hidden (got {row[2:5]})")
            check(row[5] == "8.57", f"per-test points 10 x 6/7 = 8.57 (got {row[5]})")
            cases, failed = junit_counts(out)
            names = {c.get("classname") + "." + c.get("name") for c in cases}
            check("HiddenScale.TwoOverflowsQuarterTheScale" in names, "the hidden test is in junit.xml")
            check([c.get("name") for c in failed] == ["StartsAtOne"], "only the failing hidden test failed")
        elif scenario == "compile":
            student = exercises_copy(tmp, "solution")
            with open(os.path.join(student, "ch02_dynamic_scale", "dynamic_scale.cpp"), "a") as f:
                f.write("\nthis is not C++;\n")
            r, rows, out = grade(tmp, build, student)
            check(r.returncode == 0, f"exit code 0 (got {r.returncode})")
            check(rows["ch02_dynamic_scale"][1] == "compile-error" and
                  rows["ch02_dynamic_scale"][5] == "0", "the broken exercise: compile-error, 0 points")
            check(rows["ch05_zero_memory"][5] == "4", "the other exercise is still graded: 4 points")
            cases, failed = junit_counts(out)
            check(any(c.get("name") == "Compile" for c in failed), "junit.xml reports the compile failure")
        elif scenario == "bad-input":
            student = exercises_copy(tmp, "solution")
            cases = [
                ("a rubric line of two fields", "ch02_dynamic_scale\t10\n", [], "expected 3 tab-separated fields"),
                ("points that are not a number", "ch02_dynamic_scale\tten\tper-test\n", [], "points must be"),
                ("an unknown weighting", "ch02_dynamic_scale\t10\tsome\n", [], "weighting must be"),
                ("an unknown exercise", "ch02_nothing\t10\tper-test\n", [], "is not an exercise"),
                ("a missing student tree", RUBRIC, ["--missing-tree"], "no such directory"),
                ("an unknown hidden-test folder", RUBRIC, ["--hidden-typo"], "is not an exercise of the rubric"),
                ("an unknown flag", RUBRIC, ["--bogus"], "unrecognized arguments"),
                # The rule of every mixpar tool: a flag missing its value does not take the
                # next flag as its value.
                ("a flag missing its value", RUBRIC, ["--hidden-tests", "--bogus"],
                 "--hidden-tests: expected one argument"),
            ]
            for what, rubric, extra, message in cases:
                with open(os.path.join(tmp, "rubric.tsv"), "w") as f:
                    f.write(rubric)
                tree = student
                flags = []
                if extra == ["--missing-tree"]:
                    tree = os.path.join(tmp, "no-such-tree")
                elif extra == ["--hidden-typo"]:
                    typo = os.path.join(tmp, "hidden", "ch02_dynamic_scal")
                    os.makedirs(typo, exist_ok=True)
                    flags = ["--hidden-tests", os.path.dirname(typo)]
                else:
                    flags = extra
                r, rows, out = grade(tmp, build, tree, *flags)
                lines = r.stderr.strip().splitlines()
                check(r.returncode == 2 and len(lines) == 1 and message in lines[0] and not rows,
                      f"{what}: exit code 2, one line naming it, no report "
                      f"(got {r.returncode}: {r.stderr.strip()!r})")
        else:
            print(f"grade_test: unknown scenario {scenario}", file=sys.stderr)
            return 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
