#!/usr/bin/env python3
"""StudentFork.BuildsAndGradesWithoutAnswers: exercises/make_student_fork.sh makes the students'
copy from git HEAD; the copy holds no reference solution, no teacher's material and no answer
key, and its docs name nothing missing from it but what it lists as left out; its own default
configuration (exercises from the learner's files) builds one exercise,
ch01_round_bf16 (its library is five files: seconds with ccache), with build_one.sh; and its
own grader grades that exercise: 0 for the blank, full marks once a student's file holds the
answer (copied here from the teacher's copy, as a student who solved it would have it).

  python3 exercises/make_student_fork_test.py BUILD_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXERCISE, STEM = "ch01_round_bf16", "round_bf16"


def check(cond, what):
    if not cond:
        print(f"FAIL {what}")
        sys.exit(1)
    print(f"ok   {what}")


def sh(command, cwd, timeout=400, env=None):
    r = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, env=env)
    sys.stdout.write(r.stdout[-3000:] + r.stderr[-3000:])
    return r


def main():
    tmp = tempfile.mkdtemp(prefix="student_fork_test_")
    try:
        fork = os.path.join(tmp, "fork")
        r = sh(["bash", os.path.join(HERE, "make_student_fork.sh"), fork], tmp)
        check(r.returncode == 0, f"make_student_fork.sh exits 0 (got {r.returncode})")
        found = []
        for dirpath, dirnames, filenames in os.walk(fork):
            found += [os.path.join(dirpath, d) for d in dirnames if d in ("solution", "teacher")]
            for f in filenames:
                if f.endswith((".md", ".cpp", ".h")):
                    with open(os.path.join(dirpath, f), encoding="utf-8", errors="replace") as h:
                        if "Open after trying them" in h.read():
                            found.append(os.path.join(dirpath, f))
        check(not found, f"no solution/, no teacher/, no answer key in the copy (found: {found[:5]})")
        check(os.path.isfile(os.path.join(fork, "exercises", EXERCISE, f"{STEM}.cpp")) and
              os.path.isfile(os.path.join(fork, "exercises", EXERCISE, f"{STEM}_test.cpp")),
              "the blank and its tests are there")
        check(r.returncode == 0 and not os.path.exists(
            os.path.join(fork, "exercises", "make_student_fork.sh")), "the fork script is not")
        # Its docs may name the teacher's files it left out (STUDENT_COPY_REMOVED.txt), and
        # nothing else that is missing.
        r = sh([sys.executable, os.path.join(os.path.dirname(HERE), "tests", "doc_references_test.py"),
                "--repo", fork, "--bin-dir", os.path.join(os.path.abspath(sys.argv[1]), "bin")], tmp)
        check(r.returncode == 0, "the copy's docs name nothing that is missing from it")
        # The fork's own build: configured as a student would (its CMakePresets default),
        # through ccache with paths made relative so that runs share the cache.
        env = dict(os.environ, CCACHE_BASEDIR=fork, CMAKE_CXX_COMPILER_LAUNCHER="ccache",
                   CMAKE_C_COMPILER_LAUNCHER="ccache")
        if shutil.which("ccache") is None:
            for k in ("CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_C_COMPILER_LAUNCHER"):
                env.pop(k)
        r = sh(["cmake", "--preset", "default", "-DMIXPAR_WITH_CUDA=OFF"], fork, env=env)
        check(r.returncode == 0, "the copy configures with its default preset")
        with open(os.path.join(fork, "build", "CMakeCache.txt")) as f:
            check("MIXPAR_EXERCISES_FROM:STRING=student" in f.read(),
                  "without solutions it builds the exercises from the learner's files")
        r = sh(["bash", "exercises/build_one.sh", EXERCISE], fork, env=env)
        check(r.returncode == 1 and "built in" in r.stdout,
              f"build_one.sh builds {EXERCISE} and its tests fail on the blank "
              f"(exit {r.returncode})")
        rubric = os.path.join(tmp, "rubric.tsv")
        with open(os.path.join(fork, "exercises", "rubric.tsv")) as f:
            lines, keep = [], False
            for line in f.read().splitlines():
                if not line.startswith("\t"):
                    keep = line.startswith(EXERCISE + "\t")
                if keep:
                    lines.append(line)
        with open(rubric, "w") as f:
            f.write("\n".join(lines) + "\n")
        grade = ["bash", "exercises/grade.sh", "--rubric", rubric, "--jobs", "1"]
        r = sh(grade + ["exercises", "--out", os.path.join(tmp, "blank")], fork, env=env)
        check(r.returncode == 0 and "total" in r.stdout and " 0 / 10" in r.stdout,
              "the copy's grader gives its blank 0 / 10")
        solved = os.path.join(tmp, "solved", EXERCISE)
        os.makedirs(solved)
        shutil.copy(os.path.join(HERE, EXERCISE, "solution", f"{STEM}.cpp"), solved)
        r = sh(grade + [os.path.dirname(solved), "--out", os.path.join(tmp, "solved_out")], fork,
               env=env)
        check(r.returncode == 0 and " 10 / 10" in r.stdout,
              "and a solved file 10 / 10, graded by the copy alone")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
