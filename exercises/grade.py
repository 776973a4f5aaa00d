#!/usr/bin/env python3
"""Grades a student's exercise files: each exercise's tests (and the teacher's hidden tests)
compiled against the student's NAME.cpp and the libraries of an existing build, points from a
rubric, JUnit XML per exercise. Run it as exercises/grade.sh (see --help and docs/COURSE.md).

How one exercise is built: the build's own commands for the target exercise_NAME (`ninja -t
commands`: the compiler flags, include paths and link line the default build uses), with the
committed NAME.cpp replaced by the student's file, the hidden tests compiled like the
exercise's own tests, and GoogleTest's main replaced by the grader's (grade_main.cpp). Nothing
in the build folder is modified: objects and executables go to the output folder.

What is trusted (the threat model: docs/COURSE.md, "What the grader protects against"): the
student's file is refused by name before it is compiled when it defines main, tests, code run
before main or includes anything but the exercise's, the project's and the standard headers
(grade_refuse.py), and refused before it is linked when its object would run code before main
or defines symbols outside namespace mixpar::exercises. The tests that count are the ones the
rubric names (and the teacher's hidden tests): each is run alone, in a process of its own, by
the grader's main, which reports its verdict with a nonce the grader hands it on a pipe; a
test counts as passed only when that verdict line came back and the process exited 0. A named
test that did not run, crashed or ran past --test-timeout failed. Compiles run with stdin
closed and under --compile-timeout. Exit codes: 0 graded (whatever the marks), 1 the teacher's
build could not be used, 2 bad input (one line naming it).
"""
import argparse
import concurrent.futures
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import grade_refuse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WEIGHTINGS = ("per-test", "all-or-nothing")
GRADE_MAIN = os.path.join(HERE, "grade_main.cpp")
TEST_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_/]*\.[A-Za-z_][A-Za-z0-9_/]*")


class BadInput(Exception):
    """Exit code 2, its message on one line."""


@dataclass
class RubricLine:
    exercise: str
    points: float
    weighting: str
    tests: list = field(default_factory=list)  # Suite.Name, the tests that count


@dataclass
class Result:
    exercise: str
    status: str = "graded"  # graded | missing | refused | compile-error | timeout
    passed: int = 0
    total: int = 0
    hidden: int = 0
    points: float = 0.0
    max_points: float = 0.0
    failures: list = field(default_factory=list)
    reasons: list = field(default_factory=list)  # why a file was refused
    junit: object = None  # the exercise's JUnit tree, kept in memory until the report: the
    # students' processes, which can write the output folder, are all gone by then


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
            if line.startswith("\t"):
                # A test of the exercise above: TAB Suite.Name.
                name = line.strip()
                if not lines:
                    raise BadInput(f"{where}: a test line before any exercise line")
                if not TEST_NAME.fullmatch(name):
                    raise BadInput(f"{where}: '{name}' is not a test name (Suite.Name)")
                if name in lines[-1].tests:
                    raise BadInput(f"{where}: test '{name}' is listed twice")
                lines[-1].tests.append(name)
                continue
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
    for r in lines:
        if not r.tests:
            raise BadInput(f"rubric {path}: exercise {r.exercise} names no test (a line "
                           "TAB Suite.Name under it per test that counts)")
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

    def compile_grade_main(self, obj):
        return self._retarget(self.compile_test, self.test_src, GRADE_MAIN, obj)

    def link_with(self, student_obj, extra_objs, exe):
        """The build's link with the student's object and extra_objs (the grader's main, the
        hidden tests) in place of the committed file, and without GoogleTest's main."""
        command = self.link.replace(f" {self.answer_obj} ", f" {shlex.quote(student_obj)} " +
                                    "".join(shlex.quote(o) + " " for o in extra_objs), 1)
        command = re.sub(r" \S*libgtest_main\.(?:a|so)\b| -lgtest_main\b", "", command)
        return command.replace(f" -o {self.exe} ", f" -o {shlex.quote(exe)} ", 1)

    def inputs_missing(self):
        """Objects and libraries the link reads that the build has not made yet."""
        words = shlex.split(self.link.replace(": &&", "").replace("&& :", ""))
        paths = [w for w in words if w.endswith((".o", ".a")) and w != self.answer_obj]
        return [p for p in paths if not os.path.exists(os.path.join(self.build, p))]


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def run(command, cwd, log, timeout):
    """A shell command with stdin closed, in a process group of its own, stopped (the whole
    group) after `timeout` s. True when it exited 0; None when it ran past the limit."""
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {command}\n")
        f.flush()
        proc = subprocess.Popen(command, shell=True, cwd=cwd, stdin=subprocess.DEVNULL, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=timeout) == 0
        except subprocess.TimeoutExpired:
            kill_group(proc)
            proc.wait()
            f.write(f"\ngrade: stopped after {timeout:g} s (--compile-timeout)\n")
            return None


def run_one_test(exe, test, work, log, timeout):
    """Runs `test` alone through the grader's main: 'pass', 'fail' or 'timeout'. The verdict
    is the line the grader's main writes with the nonce, and the exit code 0; nothing the
    process writes elsewhere (stdout, files) counts."""
    nonce = secrets.token_hex(32)
    nonce_read, nonce_write = os.pipe()
    os.write(nonce_write, (nonce + "\n").encode())
    os.close(nonce_write)
    result_dir = tempfile.mkdtemp(prefix="verdict_")
    result_path = os.path.join(result_dir, secrets.token_hex(8))
    result_fd = os.open(result_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
    verdict = "fail"
    try:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"$ {os.path.basename(exe)} {test}\n")
            f.flush()
            env = {"PATH": "/usr/bin:/bin", "HOME": work, "LANG": "C.UTF-8"}
            proc = subprocess.Popen([exe, test, str(nonce_read), str(result_fd)], cwd=work,
                                    stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                    pass_fds=(nonce_read, result_fd), env=env,
                                    start_new_session=True)
            os.close(nonce_read)
            nonce_read = -1
            os.close(result_fd)
            result_fd = -1
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                proc.wait()
                f.write(f"\ngrade: {test} ran past {timeout:g} s and was stopped "
                        "(--test-timeout)\n")
                return "timeout"
            kill_group(proc)  # anything it left running
            with open(result_path, encoding="utf-8", errors="replace") as r:
                report = r.read()
            if code == 0 and report == f"{nonce} pass {test}\n":
                verdict = "pass"
            elif report == f"{nonce} fail {test}\n":
                f.write(f"grade: {test} failed\n")
            elif not report:
                f.write(f"\ngrade: {test} exited {code} without a verdict\n")
            else:
                f.write(f"\ngrade: {test} exited {code}; its verdict file holds something else "
                        "than the grader's one verdict line\n")
    finally:
        for fd in (nonce_read, result_fd):
            if fd >= 0:
                os.close(fd)
        if os.path.exists(result_path):
            os.remove(result_path)
        os.rmdir(result_dir)
    return verdict


def junit_single(exercise, case, message, detail):
    suites = ET.Element("testsuites", tests="1", failures="1", errors="0", name=exercise)
    suite = ET.SubElement(suites, "testsuite", name=exercise, tests="1", failures="1", errors="0")
    tc = ET.SubElement(suite, "testcase", name=case, classname=exercise)
    failure = ET.SubElement(tc, "failure", message=message)
    failure.text = detail
    return suites


def junit_verdicts(exercise, verdicts, log):
    """The grader's own JUnit file: one test case per named test, from its verdict."""
    failures = sum(1 for v in verdicts.values() if v != "pass")
    suites = ET.Element("testsuites", tests=str(len(verdicts)), failures=str(failures),
                        errors="0", name=exercise)
    by_suite = {}
    for test, verdict in verdicts.items():
        suite_name, case_name = test.split(".", 1)
        by_suite.setdefault(suite_name, []).append((case_name, verdict))
    for suite_name, cases in by_suite.items():
        suite = ET.SubElement(suites, "testsuite", name=suite_name, tests=str(len(cases)),
                              failures=str(sum(1 for _, v in cases if v != "pass")), errors="0")
        for case_name, verdict in cases:
            tc = ET.SubElement(suite, "testcase", name=case_name, classname=suite_name)
            if verdict != "pass":
                failure = ET.SubElement(tc, "failure", message=f"{verdict} (grader's verdict)")
                failure.text = f"see {log}"
    return suites


def tail(path, lines=30):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


class Kit:
    """What every submission shares: each exercise's build commands and the grader's main,
    compiled once per run."""

    def __init__(self, args, rubric, hidden, work):
        self.args, self.hidden = args, hidden
        self.commands, self.hidden_objs, self.hidden_names = {}, {}, {}
        self.grade_main = {}
        os.makedirs(work, exist_ok=True)
        log = os.path.join(work, "kit.log")
        for line in rubric:
            ex = line.exercise
            stem = exercise_stem(ex)
            cmds = BuildCommands(args.build, ex, stem)
            missing = cmds.inputs_missing()
            if missing:
                # The exercise's tests and libraries are not built yet: build those files
                # (never the target itself, which compiles the NAME.cpp of the working tree).
                paths = " ".join(shlex.quote(m) for m in missing)
                if not run(f"ninja -C {shlex.quote(args.build)} {paths}", ROOT, log, None):
                    raise RuntimeError(f"grade: the build cannot make exercise_{ex}'s tests and "
                                       f"libraries ({log})")
            self.commands[ex] = cmds
            main_obj = os.path.join(work, f"grade_main_{ex}.o")
            if not run(cmds.compile_grade_main(main_obj), args.build, log, None):
                raise RuntimeError(f"grade: the grader's main does not compile ({log})")
            self.grade_main[ex] = main_obj
            objs, names = [], []
            for i, h in enumerate(hidden.get(ex, [])):
                hobj = os.path.join(work, f"hidden_{ex}_{i}.o")
                if not run(cmds.compile_hidden(h, hobj), args.build, log, None):
                    raise BadInput(f"hidden test {h} does not compile against the reference "
                                   f"headers ({log})")
                objs.append(hobj)
                with open(h, encoding="utf-8", errors="replace") as f:
                    names += [f"{a}.{b}" for a, b in re.findall(
                        r"\bTEST(?:_F)?\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)", f.read())]
            self.hidden_objs[ex], self.hidden_names[ex] = objs, names


def grade_one(line, kit, student_dir, out):
    ex = line.exercise
    args = kit.args
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
    if not os.path.isfile(src) or os.path.islink(src) or os.path.islink(os.path.dirname(src)):
        # A link (to the teacher's solution, say) is not the student's file.
        res.status = "missing"
        res.junit = junit_single(ex, "Submission", f"no file {ex}/{stem}.cpp (a link is not "
                                 "a file)", src)
        return res
    res.reasons = grade_refuse.source_refusals(src, ex, ROOT)
    if res.reasons:
        res.status = "refused"
        with open(log, "a", encoding="utf-8") as f:
            f.write("grade: refused before compiling:\n" +
                    "".join(f"  {r}\n" for r in res.reasons))
        res.junit = junit_single(ex, "Submission", f"{ex}/{stem}.cpp refused",
                                 "\n".join(res.reasons))
        return res
    cmds = kit.commands[ex]
    obj = os.path.join(work, f"{stem}.o")
    exe = os.path.join(work, f"exercise_{ex}")
    for stale in (obj, exe):
        if os.path.exists(stale):
            os.remove(stale)
    ok = run(cmds.compile_student(os.path.abspath(src), obj), args.build, log,
             args.compile_timeout)
    if ok:
        res.reasons = grade_refuse.object_refusals(obj)
        if res.reasons:
            res.status = "refused"
            with open(log, "a", encoding="utf-8") as f:
                f.write("grade: refused before linking:\n" +
                        "".join(f"  {r}\n" for r in res.reasons))
            res.junit = junit_single(ex, "Submission", f"{ex}/{stem}.cpp refused",
                         "\n".join(res.reasons))
            return res
        ok = run(cmds.link_with(obj, [kit.grade_main[ex], *kit.hidden_objs[ex]], exe),
                 args.build, log, args.compile_timeout)
    if not ok:
        res.status = "compile-error" if ok is False else "timeout"
        res.junit = junit_single(ex, "Compile", f"{ex}/{stem}.cpp does not compile or link"
                     if ok is False else f"the compile ran past {args.compile_timeout:g} s",
                     tail(log))
        return res
    tests = line.tests + [t for t in kit.hidden_names[ex] if t not in line.tests]
    verdicts = {t: run_one_test(exe, t, work, log, args.test_timeout) for t in tests}
    res.junit = junit_verdicts(ex, verdicts, f"logs/{ex}.log")
    res.total = len(tests)
    res.hidden = sum(1 for t in tests if t in kit.hidden_names[ex] and t not in line.tests)
    res.passed = sum(1 for v in verdicts.values() if v == "pass")
    res.failures = [t + (" (timeout)" if v == "timeout" else "")
                    for t, v in verdicts.items() if v != "pass"]
    if line.weighting == "per-test":
        res.points = line.points * res.passed / res.total
    else:
        res.points = line.points if res.passed == res.total else 0.0
    return res


def merge_junit(out, results):
    """junit/NAME.xml and junit.xml, written from the grader's own verdicts after every
    student's process has ended (whatever a test wrote to the output folder is overwritten)."""
    merged = ET.Element("testsuites", name="mixpar exercises")
    tests = failures = 0
    for r in results:
        ET.ElementTree(r.junit).write(os.path.join(out, "junit", f"{r.exercise}.xml"),
                                      encoding="utf-8", xml_declaration=True)
        for suite in r.junit.iter("testsuite"):
            copy = ET.fromstring(ET.tostring(suite))
            copy.set("name", f"{r.exercise}.{suite.get('name')}")
            merged.append(copy)
            tests += int(suite.get("tests", "0"))
            failures += int(suite.get("failures", "0"))
    merged.set("tests", str(tests))
    merged.set("failures", str(failures))
    ET.ElementTree(merged).write(os.path.join(out, "junit.xml"), encoding="utf-8",
                                 xml_declaration=True)


def fmt(x):
    return f"{x:.2f}".rstrip("0").rstrip(".")


def positive(text):
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got '{text}'")
    return value


def jobs_count(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got '{text}'")
    return int(text)


def report(student, out, results, seconds):
    merge_junit(out, results)
    total = sum(r.points for r in results)
    maximum = sum(r.max_points for r in results)
    with open(os.path.join(out, "grades.tsv"), "w", encoding="utf-8") as f:
        f.write("exercise\tstatus\tpassed\ttests\thidden\tpoints\tmax\n")
        for r in results:
            f.write(f"{r.exercise}\t{r.status}\t{r.passed}\t{r.total}\t{r.hidden}\t"
                    f"{fmt(r.points)}\t{fmt(r.max_points)}\n")
        f.write(f"total\t\t\t\t\t{fmt(total)}\t{fmt(maximum)}\n")
    print(f"== {student}")
    print(f"{'exercise':32} {'tests':>16} {'points':>14}  status")
    for r in results:
        tests = f"{r.passed}/{r.total}" + (f" ({r.hidden} hidden)" if r.hidden else "")
        print(f"{r.exercise:32} {tests:>16} {fmt(r.points):>6} / {fmt(r.max_points):<5}  {r.status}")
        for reason in r.reasons[:5]:
            print(f"    refused: {reason}")
        for name in r.failures[:5]:
            print(f"    failed: {name}")
        if len(r.failures) > 5:
            print(f"    ... and {len(r.failures) - 5} more (junit/{r.exercise}.xml)")
    print(f"{'total':32} {'':>16} {fmt(total):>6} / {fmt(maximum)}")
    print(f"graded {len(results)} exercise(s) of {student} in {seconds:.1f} s; "
          f"report in {out} (grades.tsv, junit.xml)")


def main(argv):
    p = argparse.ArgumentParser(
        prog="exercises/grade.sh",
        description="Grade students' exercise files against an existing build's libraries.")
    p.add_argument("students", nargs="+", metavar="STUDENT",
                   help="a student's tree: a copy of the repository "
                   "(STUDENT/exercises/NAME/STEM.cpp) or just its exercises folder "
                   "(STUDENT/NAME/STEM.cpp); several are graded in parallel (--jobs)")
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="a configured default build of this checkout (default: build/)")
    p.add_argument("--rubric", default=os.path.join(HERE, "rubric.tsv"),
                   help="per exercise: points, weighting and the tests that count "
                   "(default: exercises/rubric.tsv)")
    p.add_argument("--hidden-tests", metavar="DIR",
                   help="the teacher's own tests: DIR/NAME/*.cpp, compiled with the exercise's "
                   "tests against the same student file; their TESTs count")
    p.add_argument("--out", default="grades",
                   help="where the report goes: grades.tsv, junit.xml, junit/NAME.xml, logs/ "
                   "(default: ./grades); with several students, OUT/BASENAME per student")
    p.add_argument("--jobs", type=jobs_count, default=max(1, (os.cpu_count() or 2) // 2),
                   help="exercises compiled and tested at once, across students "
                   "(default: half the CPUs)")
    p.add_argument("--compile-timeout", type=positive, default=120, metavar="S",
                   help="seconds a compile or link of a student's file may take (default 120)")
    p.add_argument("--test-timeout", type=positive, default=30, metavar="S",
                   help="seconds one test may take (default 30)")

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
        student_dirs = [student_exercises_dir(s) for s in args.students]
        names = [os.path.basename(os.path.normpath(s)) for s in args.students]
        if len(set(names)) != len(names):
            raise BadInput("two students' folders have the same name: their reports would mix")
        hidden = hidden_tests(args.hidden_tests, rubric)
        out = os.path.abspath(args.out)
        outs = [out] if len(args.students) == 1 else [os.path.join(out, n) for n in names]
        for o in outs:
            for sub in ("junit", "logs", "work"):
                os.makedirs(os.path.join(o, sub), exist_ok=True)
        start = time.time()
        kit = Kit(args, rubric, hidden, os.path.join(out, "kit"))
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [[pool.submit(grade_one, line, kit, d, o) for line in rubric]
                       for d, o in zip(student_dirs, outs)]
            results = [[f.result() for f in fs] for fs in futures]
    except BadInput as e:
        print(f"grade: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(str(e), file=sys.stderr)
        return 1
    for student, o, rs in zip(args.students, outs, results):
        report(student, o, rs, time.time() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
