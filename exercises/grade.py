#!/usr/bin/env python3
"""Grades a student's exercise files: each exercise's tests (and the teacher's hidden tests)
compiled against the student's NAME.cpp and the libraries of an existing build, points from a
rubric, JUnit XML per exercise. Run it as exercises/grade.sh (see --help and docs/COURSE.md).

How one exercise is built: the build's own commands for the target exercise_NAME (`ninja -t
commands`: the compiler flags, include paths and link line the default build uses), with the
committed NAME.cpp replaced by the student's file and the hidden tests compiled like the
exercise's own tests. Nothing in the build folder is modified: objects and executables go to
the output folder. Exit codes: 0 graded (whatever the marks), 1 the teacher's build could not be
used, 2 bad input (one line naming it).
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WEIGHTINGS = ("per-test", "all-or-nothing")
TEST_TIMEOUT_S = 120


class BadInput(Exception):
    """Exit code 2, its message on one line."""


@dataclass
class RubricLine:
    exercise: str
    points: float
    weighting: str


@dataclass
class Result:
    exercise: str
    status: str = "graded"  # graded | missing | compile-error | crashed
    passed: int = 0
    total: int = 0
    hidden: int = 0
    points: float = 0.0
    max_points: float = 0.0
    failures: list = field(default_factory=list)


def exercise_stem(exercise):
    """The file stem of an exercise: its folder holds exactly one STEM.h."""
    folder = os.path.join(HERE, exercise)
    headers = [f[:-2] for f in os.listdir(folder) if f.endswith(".h")]
    if len(headers) != 1:
        raise BadInput(f"exercise {exercise}: expected one header in {folder}, found {len(headers)}")
    return headers[0]


def read_rubric(path):
    if not os.path.isfile(path):
        raise BadInput(f"rubric {path}: no such file")
    lines = []
    seen = set()
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.rstrip("\n").rstrip("\r")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            where = f"rubric {path} line {number}"
            fields = line.split("\t")
            if len(fields) != 3:
                raise BadInput(f"{where}: expected 3 tab-separated fields (exercise, points, "
                               f"weighting), got {len(fields)}")
            exercise, points_text, weighting = (x.strip() for x in fields)
            if not re.fullmatch(r"ch\d\d_[a-z0-9_]+", exercise) or \
                    not os.path.isdir(os.path.join(HERE, exercise)):
                raise BadInput(f"{where}: '{exercise}' is not an exercise of exercises/")
            if exercise in seen:
                raise BadInput(f"{where}: '{exercise}' is listed twice")
            seen.add(exercise)
            try:
                points = float(points_text)
            except ValueError:
                points = float("nan")
            if not points > 0 or points == float("inf"):
                raise BadInput(f"{where}: points must be a positive number, got '{points_text}'")
            if weighting not in WEIGHTINGS:
                raise BadInput(f"{where}: weighting must be one of {'|'.join(WEIGHTINGS)}, "
                               f"got '{weighting}'")
            lines.append(RubricLine(exercise, points, weighting))
    if not lines:
        raise BadInput(f"rubric {path}: no exercise listed")
    return lines


def student_exercises_dir(student):
    """A copy of the repository (STUDENT/exercises/NAME/STEM.cpp) or its exercises folder."""
    if not os.path.isdir(student):
        raise BadInput(f"student tree {student}: no such directory")
    nested = os.path.join(student, "exercises")
    if os.path.isdir(nested):
        return nested
    if any(re.fullmatch(r"ch\d\d_.+", d) and os.path.isdir(os.path.join(student, d))
           for d in os.listdir(student)):
        return student
    raise BadInput(f"student tree {student}: neither a copy of the repository (exercises/chNN_*) "
                   "nor an exercises folder (chNN_*)")


def hidden_tests(hidden_dir, rubric):
    """{exercise: [test files]} from HIDDEN/NAME/*.cpp."""
    if hidden_dir is None:
        return {}
    if not os.path.isdir(hidden_dir):
        raise BadInput(f"hidden tests {hidden_dir}: no such directory")
    names = {r.exercise for r in rubric}
    out = {}
    for entry in sorted(os.listdir(hidden_dir)):
        path = os.path.join(hidden_dir, entry)
        if not os.path.isdir(path):
            continue
        if entry not in names:
            raise BadInput(f"hidden tests {hidden_dir}: folder '{entry}' is not an exercise of "
                           "the rubric")
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".cpp"))
        if files:
            out[entry] = [os.path.abspath(f) for f in files]
    if not out:
        raise BadInput(f"hidden tests {hidden_dir}: no NAME/*.cpp test file for any exercise")
    return out


class BuildCommands:
    """The default build's commands for exercise_NAME, retargeted at other sources."""

    def __init__(self, build, exercise, stem):
        self.build = build
        target = f"exercise_{exercise}"
        source = self._source_dir(build)
        if source is not None and os.path.realpath(source) != os.path.realpath(ROOT):
            raise BadInput(f"build {build} was configured from {source}, not from this "
                           f"checkout ({ROOT}): grade with that checkout's exercises/grade.sh")
        text = self._commands(target)
        if text is None:
            raise BadInput(f"build {build}: no target {target} (configure it again: "
                           f"cmake -S {ROOT} -B {build})")
        lines = text.splitlines()
        answer = os.path.join(HERE, exercise, f"{stem}.cpp")
        test = os.path.join(HERE, exercise, f"{stem}_test.cpp")
        self.compile_answer = next((l for l in lines if l.endswith(" -c " + answer)), None)
        self.compile_test = next((l for l in lines if l.endswith(" -c " + test)), None)
        self.link = lines[-1] if lines else None
        self.answer_src, self.test_src = answer, test
        self.exe = f"exercises/{target}"
        if not (self.compile_answer and self.compile_test and self.link and
                f" -o {self.exe} " in self.link):
            raise RuntimeError(f"grade: the build's commands for {target} are not in the form "
                               "expected (a compile of the answer, of the tests, a link)")
        self.answer_obj = self._output(self.compile_answer)

    @staticmethod
    def _source_dir(build):
        try:
            with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as f:
                for line in f:
                    if line.startswith("CMAKE_HOME_DIRECTORY:"):
                        return line.split("=", 1)[1].strip()
        except OSError:
            pass
        return None

    def _commands(self, target):
        r = subprocess.run(["ninja", "-C", self.build, "-t", "commands", target],
                           capture_output=True, text=True)
        return r.stdout if r.returncode == 0 else None

    @staticmethod
    def _output(command):
        m = re.search(r" -o (\S+) ", command)
        return m.group(1)

    @staticmethod
    def _retarget(command, src, new_src, obj):
        # Drop the depfile flags (they would write into the build), compile new_src into obj.
        command = re.sub(r" -MD -MT \S+ -MF \S+", "", command)
        command = re.sub(r" -o \S+ ", f" -o {shlex.quote(obj)} ", command, count=1)
        return command[: -len(src)] + shlex.quote(new_src)

    def compile_student(self, student_src, obj):
        return self._retarget(self.compile_answer, self.answer_src, student_src, obj)

    def compile_hidden(self, hidden_src, obj):
        return self._retarget(self.compile_test, self.test_src, hidden_src, obj)

    def link_with(self, student_obj, extra_objs, exe):
        command = self.link.replace(f" {self.answer_obj} ", f" {shlex.quote(student_obj)} " +
                                    "".join(shlex.quote(o) + " " for o in extra_objs), 1)
        return command.replace(f" -o {self.exe} ", f" -o {shlex.quote(exe)} ", 1)

    def inputs_missing(self):
        """Objects and libraries the link reads that the build has not made yet."""
        words = shlex.split(self.link.replace(": &&", "").replace("&& :", ""))
        paths = [w for w in words if w.endswith((".o", ".a")) and w != self.answer_obj]
        return [p for p in paths if not os.path.exists(os.path.join(self.build, p))]


def run(command, cwd, log):
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {command}\n")
        f.flush()
        r = subprocess.run(command, shell=True, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
    return r.returncode == 0


def junit_single(path, exercise, case, message, detail):
    suites = ET.Element("testsuites", tests="1", failures="1", errors="0", name=exercise)
    suite = ET.SubElement(suites, "testsuite", name=exercise, tests="1", failures="1", errors="0")
    tc = ET.SubElement(suite, "testcase", name=case, classname=exercise)
    failure = ET.SubElement(tc, "failure", message=message)
    failure.text = detail
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def tail(path, lines=30):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def grade_one(line, args, student_dir, hidden, out):
    ex = line.exercise
    res = Result(ex, max_points=line.points)
    stem = exercise_stem(ex)
    work = os.path.join(out, "work", ex)
    os.makedirs(work, exist_ok=True)
    log = os.path.join(out, "logs", f"{ex}.log")
    junit = os.path.join(out, "junit", f"{ex}.xml")
    for stale in (log, junit):
        if os.path.exists(stale):
            os.remove(stale)
    src = os.path.join(student_dir, ex, f"{stem}.cpp")
    if not os.path.isfile(src):
        res.status = "missing"
        junit_single(junit, ex, "Submission", f"no file {ex}/{stem}.cpp", src)
        return res
    cmds = BuildCommands(args.build, ex, stem)
    if cmds.inputs_missing():
        # The exercise's tests and libraries are not built yet: build them once (the teacher's
        # target, from the committed files), then compile the student's file against them.
        if not run(f"cmake --build {shlex.quote(args.build)} --target exercise_{ex}", ROOT, log):
            raise RuntimeError(f"grade: the build cannot make exercise_{ex} ({log})")
    obj = os.path.join(work, f"{stem}.o")
    exe = os.path.join(work, f"exercise_{ex}")
    hidden_objs = []
    ok = run(cmds.compile_student(os.path.abspath(src), obj), args.build, log)
    for i, h in enumerate(hidden.get(ex, [])):
        hobj = os.path.join(work, f"hidden_{i}.o")
        if not run(cmds.compile_hidden(h, hobj), args.build, log):
            raise BadInput(f"hidden test {h} does not compile against the reference headers ({log})")
        hidden_objs.append(hobj)
    if ok:
        ok = run(cmds.link_with(obj, hidden_objs, exe), args.build, log)
    if not ok:
        res.status = "compile-error"
        junit_single(junit, ex, "Compile", f"{ex}/{stem}.cpp does not compile or link", tail(log))
        return res
    with open(log, "a", encoding="utf-8") as f:
        try:
            subprocess.run([exe, f"--gtest_output=xml:{junit}"], stdout=f, stderr=subprocess.STDOUT,
                           timeout=TEST_TIMEOUT_S, cwd=work)
        except subprocess.TimeoutExpired:
            f.write(f"\ngrade: the tests ran past {TEST_TIMEOUT_S} s and were stopped\n")
    if not os.path.isfile(junit):
        res.status = "crashed"
        junit_single(junit, ex, "Run", "the tests crashed, hung or exited before reporting",
                     tail(log))
        return res
    root = ET.parse(junit).getroot()
    hidden_names = set()
    for h in hidden.get(ex, []):
        with open(h, encoding="utf-8", errors="replace") as f:
            hidden_names |= set(re.findall(r"\bTEST(?:_F)?\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)", f.read()))
    for case in root.iter("testcase"):
        if case.get("result", "completed") != "completed" or case.get("status") == "notrun":
            continue
        res.total += 1
        if (case.get("classname"), case.get("name")) in hidden_names:
            res.hidden += 1
        failed = case.find("failure") is not None or case.find("error") is not None
        if failed:
            res.failures.append(f"{case.get('classname')}.{case.get('name')}")
        else:
            res.passed += 1
    if res.total == 0:
        res.status = "crashed"
        return res
    if line.weighting == "per-test":
        res.points = line.points * res.passed / res.total
    else:
        res.points = line.points if res.passed == res.total else 0.0
    return res


def merge_junit(out, results):
    merged = ET.Element("testsuites", name="mixpar exercises")
    tests = failures = 0
    for r in results:
        path = os.path.join(out, "junit", f"{r.exercise}.xml")
        for suite in ET.parse(path).getroot().iter("testsuite"):
            suite.set("name", f"{r.exercise}.{suite.get('name')}")
            merged.append(suite)
            tests += int(suite.get("tests", "0"))
            failures += int(suite.get("failures", "0"))
    merged.set("tests", str(tests))
    merged.set("failures", str(failures))
    ET.ElementTree(merged).write(os.path.join(out, "junit.xml"), encoding="utf-8",
                                 xml_declaration=True)


def fmt(x):
    return f"{x:.2f}".rstrip("0").rstrip(".")


def main(argv):
    p = argparse.ArgumentParser(
        prog="exercises/grade.sh",
        description="Grade a student's exercise files against an existing build's libraries.")
    p.add_argument("student", help="the student's tree: a copy of the repository "
                   "(STUDENT/exercises/NAME/STEM.cpp) or just its exercises folder "
                   "(STUDENT/NAME/STEM.cpp)")
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="a configured default build of this checkout (default: build/)")
    p.add_argument("--rubric", default=os.path.join(HERE, "rubric.tsv"),
                   help="exercise, points, weighting per line (default: exercises/rubric.tsv)")
    p.add_argument("--hidden-tests", metavar="DIR",
                   help="the teacher's own tests: DIR/NAME/*.cpp, compiled with the exercise's "
                   "tests against the same student file")
    p.add_argument("--out", default="grades",
                   help="where the report goes: grades.tsv, junit.xml, junit/NAME.xml, logs/ "
                   "(default: ./grades)")

    def error(message):
        raise BadInput(message)

    p.error = error  # one line, exit code 2
    try:
        args = p.parse_args(argv)
        args.build = os.path.abspath(args.build)
        if not os.path.isfile(os.path.join(args.build, "CMakeCache.txt")) or \
                not os.path.isfile(os.path.join(args.build, "build.ninja")):
            raise BadInput(f"build {args.build}: not a configured Ninja build (cmake --preset default)")
        rubric = read_rubric(args.rubric)
        student_dir = student_exercises_dir(args.student)
        hidden = hidden_tests(args.hidden_tests, rubric)
        out = os.path.abspath(args.out)
        for sub in ("junit", "logs", "work"):
            os.makedirs(os.path.join(out, sub), exist_ok=True)
        start = time.time()
        results = [grade_one(line, args, student_dir, hidden, out) for line in rubric]
    except BadInput as e:
        print(f"grade: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(str(e), file=sys.stderr)
        return 1
    merge_junit(out, results)
    total = sum(r.points for r in results)
    maximum = sum(r.max_points for r in results)
    with open(os.path.join(out, "grades.tsv"), "w", encoding="utf-8") as f:
        f.write("exercise\tstatus\tpassed\ttests\thidden\tpoints\tmax\n")
        for r in results:
            f.write(f"{r.exercise}\t{r.status}\t{r.passed}\t{r.total}\t{r.hidden}\t"
                    f"{fmt(r.points)}\t{fmt(r.max_points)}\n")
        f.write(f"total\t\t\t\t\t{fmt(total)}\t{fmt(maximum)}\n")
    print(f"{'exercise':32} {'tests':>16} {'points':>14}  status")
    for r in results:
        tests = f"{r.passed}/{r.total}" + (f" ({r.hidden} hidden)" if r.hidden else "")
        print(f"{r.exercise:32} {tests:>16} {fmt(r.points):>6} / {fmt(r.max_points):<5}  {r.status}")
        for name in r.failures[:5]:
            print(f"    failed: {name}")
        if len(r.failures) > 5:
            print(f"    ... and {len(r.failures) - 5} more (junit/{r.exercise}.xml)")
    print(f"{'total':32} {'':>16} {fmt(total):>6} / {fmt(maximum)}")
    print(f"graded {len(results)} exercise(s) of {args.student} in {time.time() - start:.1f} s; "
          f"report in {out} (grades.tsv, junit.xml)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
