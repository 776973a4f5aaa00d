#!/usr/bin/env python3
"""Tests of exercises/grade.sh on a small rubric, one scenario per ctest (GradeScript.*):

  solutions   the reference solutions, as an exercises folder: full marks, JUnit without failures
  blanks      the committed blank files (read from git's HEAD, not the working tree, so a
              learner's edits do not turn it red), every exercise of the default rubric, as a
              copy of the repository: zero, every named test failed
  named       only the tests the rubric names count: a rubric naming 2 of an exercise's 5
              tests grades 2; a named test that does not exist counts as failed
  hostile     every file of the hostile corpus (exercises/teacher/hostile/*.cpp, each a way to
              forge marks or hang the grader), graded as students in parallel (--jobs 2) with a
              reference solution beside them: each scores 0, the solution full marks, the refused
              ones are refused before compiling or linking, nothing hangs
  hidden      a hidden-test folder: its tests are compiled in, counted and weigh in the points
  compile     a student file that does not compile: zero for that exercise, reported, the rest
              graded
  bad-input   a malformed rubric, a missing student tree, an unknown hidden folder, a bad flag:
              exit code 2 and one line on stderr
  rubric      the default rubric (exercises/rubric.tsv) lists every exercise folder once and
              names every test of each (its *_test.cpp, and the test binary's list), so a new
              exercise or test cannot go ungraded

  python3 exercises/grade_test.py SCENARIO BUILD_DIR
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GRADE = os.path.join(HERE, "grade.sh")
HOSTILE = os.path.join(HERE, "teacher", "hostile")
STEMS = {"ch02_dynamic_scale": "dynamic_scale", "ch05_zero_memory": "zero_memory"}


def test_names(exercise):
    """Suite.Name of every TEST in the exercise's own test file."""
    path = glob.glob(os.path.join(HERE, exercise, "*_test.cpp"))[0]
    with open(path) as f:
        return [f"{a}.{b}" for a, b in
                re.findall(r"^\s*TEST\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)", f.read(), re.M)]


def rubric_text(lines):
    """A rubric of (exercise, points, weighting[, tests]) naming each exercise's tests."""
    out = []
    for ex, points, weighting, *tests in lines:
        out.append(f"{ex}\t{points}\t{weighting}")
        out += [f"\t{t}" for t in (tests[0] if tests else test_names(ex))]
    return "\n".join(out) + "\n"


RUBRIC = rubric_text([("ch02_dynamic_scale", 10, "per-test"),
                      ("ch05_zero_memory", 4, "all-or-nothing")])


def grade(tmp, build, student, *extra):
    rubric = os.path.join(tmp, "rubric.tsv")
    if not os.path.exists(rubric):
        with open(rubric, "w") as f:
            f.write("# a course's selection\n" + RUBRIC)
    out = os.path.join(tmp, "out")
    shutil.rmtree(out, ignore_errors=True)
    students = student if isinstance(student, list) else [student]
    r = subprocess.run(["bash", GRADE, *students, "--build", build, "--rubric", rubric,
                        "--out", out, *extra], capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    sys.stdout.write(r.stdout + r.stderr)
    rows = read_grades(out)
    return r, rows, out


def read_grades(out):
    rows = {}
    path = os.path.join(out, "grades.tsv")
    if os.path.exists(path):
        with open(path) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split("\t")
                rows[fields[0]] = fields
    return rows


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
        return [l.split("\t")[0] for l in f.read().splitlines()
                if l.strip() and not l.startswith(("#", "\t"))]


def exercise_folders():
    return sorted(d for d in os.listdir(HERE)
                  if os.path.isdir(os.path.join(HERE, d, "solution")))


def committed_blanks(tmp):
    """A copy of the repository's layout holding every exercise's blank as committed (git's
    HEAD): what a learner has written in the working tree does not enter."""
    repo = os.path.join(tmp, "repo")
    for ex in exercise_folders():
        stem = [f[:-2] for f in os.listdir(os.path.join(HERE, ex)) if f.endswith(".h")][0]
        rel = f"exercises/{ex}/{stem}.cpp"
        r = subprocess.run(["git", "-C", ROOT, "show", f"HEAD:{rel}"], capture_output=True)
        if r.returncode != 0:
            check(False, f"git show HEAD:{rel} ({r.stderr.decode().strip()})")
        os.makedirs(os.path.join(repo, "exercises", ex))
        with open(os.path.join(repo, rel), "wb") as f:
            f.write(r.stdout)
    return repo


def main():
    scenario, build = sys.argv[1], os.path.abspath(sys.argv[2])
    if scenario == "rubric":
        names = default_rubric_names()
        folders = exercise_folders()
        check(len(names) == len(set(names)), f"no exercise twice in the rubric ({names})")
        check(sorted(names) == folders,
              f"the rubric's exercises are the exercise folders (missing from the rubric: "
              f"{sorted(set(folders) - set(names))}; not exercises: {sorted(set(names) - set(folders))})")
        with open(os.path.join(HERE, "rubric.tsv")) as f:
            named, current = {}, None
            for line in f.read().splitlines():
                if line.startswith("\t"):
                    named[current].append(line.strip())
                elif line.strip() and not line.startswith("#"):
                    current = line.split("\t")[0]
                    named[current] = []
        for ex in folders:
            check(sorted(named[ex]) == sorted(test_names(ex)),
                  f"{ex}: the rubric names each of its {len(test_names(ex))} tests")
        listed = subprocess.run([os.path.join(build, "bin", "test_exercises"),
                                 "--gtest_list_tests"], capture_output=True, text=True)
        suites, binary = None, set()
        for line in listed.stdout.splitlines():
            if not line.startswith(" "):
                suites = line.strip().rstrip(".")
            else:
                binary.add(f"{suites}.{line.split()[0]}")
        rubric_all = {t for ts in named.values() for t in ts}
        check(listed.returncode == 0 and binary == rubric_all,
              f"the rubric names exactly the {len(binary)} tests of test_exercises "
              f"(unnamed: {sorted(binary - rubric_all)}; not tests: {sorted(rubric_all - binary)})")
        return 0
    tmp = tempfile.mkdtemp(prefix="grade_test_")
    try:
        if scenario == "solutions":
            # With the teacher's example hidden test (exercises/teacher/hidden).
            r, rows, out = grade(tmp, build, exercises_copy(tmp, "solution"), "--hidden-tests",
                                 os.path.join(HERE, "teacher", "hidden"))
            check(r.returncode == 0, f"exit code 0 (got {r.returncode})")
            check(rows["ch02_dynamic_scale"][5] == "10" and rows["ch05_zero_memory"][5] == "4",
                  "each exercise gets its full points")
            check(rows["ch02_dynamic_scale"][2:5] == ["6", "6", "1"],
                  f"6 of 6 tests passed, the example hidden one among them (got {rows['ch02_dynamic_scale'][2:5]})")
            check(rows["total"][5] == "14" and rows["total"][6] == "14", "total 14 / 14")
            cases, failed = junit_counts(out)
            check(len(cases) == 10 and not failed, f"junit.xml: 10 test cases, none failed "
                  f"(got {len(cases)}, {len(failed)} failed)")
        elif scenario == "blanks":
            rubric = os.path.join(tmp, "rubric.tsv")
            shutil.copy(os.path.join(HERE, "rubric.tsv"), rubric)
            r, rows, out = grade(tmp, build, committed_blanks(tmp))
            check(r.returncode == 0, f"exit code 0 (got {r.returncode})")
            check(all(rows[ex][5] == "0" and rows[ex][1] == "graded" for ex in exercise_folders()),
                  "every committed blank compiles, is graded and scores 0")
            check(rows["total"][5] == "0" and float(rows["total"][6]) > 0,
                  f"total 0 / {rows['total'][6]}")
            cases, failed = junit_counts(out)
            check(len(cases) == len(failed) == sum(len(test_names(e)) for e in exercise_folders()),
                  f"junit.xml: every named test failed (got {len(failed)} of {len(cases)})")
        elif scenario == "named":
            two = test_names("ch02_dynamic_scale")[:2]
            with open(os.path.join(tmp, "rubric.tsv"), "w") as f:
                f.write(rubric_text([("ch02_dynamic_scale", 10, "per-test", two),
                                     ("ch05_zero_memory", 4, "per-test",
                                      test_names("ch05_zero_memory") + ["ZeroMemory.NotATest"])]))
            r, rows, out = grade(tmp, build, exercises_copy(tmp, "solution"))
            check(r.returncode == 0, f"exit code 0 (got {r.returncode})")
            check(rows["ch02_dynamic_scale"][2:4] == ["2", "2"],
                  f"only the 2 named tests of 5 ran and counted (got {rows['ch02_dynamic_scale'][2:4]})")
            check(rows["ch05_zero_memory"][2:4] == ["4", "5"] and rows["ch05_zero_memory"][5] == "3.2",
                  f"a named test that does not exist counts as failed: 4 of 5, 3.2 points "
                  f"(got {rows['ch05_zero_memory'][2:6]})")
        elif scenario == "hostile":
            files = sorted(glob.glob(os.path.join(HOSTILE, "*.cpp")))
            check(len(files) >= 15, f"the hostile corpus holds its cases ({len(files)} files)")
            students = []
            for path in files + ["CONTROL"]:
                name = os.path.basename(path)[:-4] if path != "CONTROL" else "control_solution"
                folder = os.path.join(tmp, "class", name, "ch02_dynamic_scale")
                os.makedirs(folder)
                src = path if path != "CONTROL" else os.path.join(
                    HERE, "ch02_dynamic_scale", "solution", "dynamic_scale.cpp")
                shutil.copy(src, os.path.join(folder, "dynamic_scale.cpp"))
                students.append(os.path.dirname(folder))
            # A student whose exercise folder is a link to the teacher's solution folder.
            linked = os.path.join(tmp, "class", "linked_solution_folder")
            os.makedirs(linked)
            os.symlink(os.path.join(HERE, "ch02_dynamic_scale", "solution"),
                       os.path.join(linked, "ch02_dynamic_scale"))
            students.append(linked)
            with open(os.path.join(tmp, "rubric.tsv"), "w") as f:
                f.write(rubric_text([("ch02_dynamic_scale", 10, "per-test")]))
            start = time.monotonic()
            r, _, out = grade(tmp, build, students, "--jobs", "2", "--compile-timeout", "20",
                              "--test-timeout", "2")
            took = time.monotonic() - start
            check(r.returncode == 0, f"exit code 0 (got {r.returncode})")
            for student in students:
                name = os.path.basename(student)
                row = read_grades(os.path.join(out, name))["ch02_dynamic_scale"]
                if name == "control_solution":
                    check(row[5] == "10", f"the reference solution beside them: 10 / 10 (got {row[5]})")
                    continue
                check(row[5] == "0", f"{name}: 0 / 10 ({row[1]}, {row[2]} of {row[3]} tests)")
                if name == "linked_solution_folder":
                    check(row[1] == "missing", f"{name}: missing, a link is not a file (got {row[1]})")
                    continue
                # Each corpus file says how it is stopped: "// grade: STATUS LOG-FRAGMENT".
                with open(os.path.join(HOSTILE, name + ".cpp")) as f:
                    m = re.search(r"^// grade: (\S+) (.+)$", f.read(), re.M)
                check(m is not None, f"{name}: the file says how it is stopped (// grade: ...)")
                with open(os.path.join(out, name, "logs", "ch02_dynamic_scale.log"),
                          errors="replace") as f:
                    log = f.read()
                check(row[1] == m.group(1) and m.group(2) in log,
                      f"{name}: {m.group(1)}, the log says '{m.group(2)}' (got {row[1]})")
            check(took < 150, f"nothing hangs: {len(students)} students graded in {took:.0f} s")
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
                ("a rubric line of two fields", "ch02_dynamic_scale\t10\n\tUpdateScale.SkipsAndHalvesOnOverflow\n", [], "expected 3 tab-separated fields"),
                ("points that are not a number", "ch02_dynamic_scale\tten\tper-test\n", [], "points must be"),
                ("an unknown weighting", "ch02_dynamic_scale\t10\tsome\n", [], "weighting must be"),
                ("an unknown exercise", "ch02_nothing\t10\tper-test\n", [], "is not an exercise"),
                ("a missing student tree", RUBRIC, ["--missing-tree"], "no such directory"),
                ("an unknown hidden-test folder", RUBRIC, ["--hidden-typo"], "is not an exercise of the rubric"),
                ("an unknown flag", RUBRIC, ["--bogus"], "unrecognized arguments"),
                ("an exercise that names no test", "ch02_dynamic_scale\t10\tper-test\n", [],
                 "names no test"),
                ("a test name that is a pattern", "ch02_dynamic_scale\t10\tper-test\n\tUpdateScale.*\n",
                 [], "is not a test name"),
                ("a zero --test-timeout", RUBRIC, ["--test-timeout", "0"], "--test-timeout"),
                ("a zero --jobs", RUBRIC, ["--jobs", "0"], "--jobs"),
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
