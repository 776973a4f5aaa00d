#!/usr/bin/env python3
"""Every file, flag and test the documentation names exists.

    python3 tests/doc_references_test.py --repo ROOT --bin-dir BIN [DOC.md...]
    python3 tests/doc_references_test.py --self-test

The docs (every *.md of docs/, the top README.md, each chapter's README.md, PERFORMANCE.md,
RUNS.md and CHECKPOINTS.md, exercises/README.md; or the DOCs given) are read for three kinds of reference:

  files  a link's target (and its #anchor: a heading of the target), a repository path in
         code (`ch05_zero/zero_stage3.h`, `scripts/test.sh`, `trainer_config.{h,cpp}`; a bare
         file name is looked for beside the doc, then anywhere in the repository), a program
         under build/bin/, and a section cited by its title after a doc's name
         (ch08_full_3d/README.md, "Checkpoints that reshard")
  flags  a --flag inside code (a `code span` or a code block) belongs to the tool named before
         it on that line (train_gpt, mixpar-mem, a demo, scripts/plot_run.py...) and must be in
         that tool's --help (a built program) or its source (a script); a flag no tool is named
         for must be some tool's
  tests  a `Suite.Name` or `Suite.*` in a code span must be a TEST/TEST_F/TEST_P of tests/ or
         exercises/ (a parameterized suite's `Prefix/Suite.Name` included) or a test CMake adds

Tools from outside the repository (mpirun, cmake, ctest, ...) are not checked, and ALLOWED
lists the few names that are legitimately absent, each with its reason. Exit code 0: every
reference resolves; 1: some do not (each printed as DOC:LINE: what is missing); 2: bad
arguments or a bin directory without train_gpt (build first). --self-test runs the checker on a
small made-up repository and expects it to pass a good doc and fail each kind of bad one.
"""

import argparse
import fnmatch
import glob
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

# Tools that are not this repository's: their flags are their own business.
EXTERNAL_TOOLS = {
    "mpirun", "mpiexec", "cmake", "ctest", "git", "pip", "pip3", "apt-get", "apt", "sudo",
    "perf", "torchrun", "nvidia-smi", "ninja", "make", "gdb", "valgrind", "nsys", "ncu",
    "compute-sanitizer", "docker", "curl", "wget", "ls", "cat", "grep", "time", "env", "cd",
    "export", "source", "tar", "du", "head", "tail", "diff", "cmp", "kill", "rm", "mkdir", "cp",
    "python", "g++", "gcc", "clang++", "nproc", "lscpu", "taskset", "numactl", "flock", "wc",
}

# References that are legitimately not in the repository, each with its reason.
ALLOWED = {
    # mpirun's own flags, written alone in prose ("Open MPI wants `--allow-run-as-root`"):
    # docs/COURSE.md, ch08_full_3d/README.md.
    "flag --allow-run-as-root": "Open MPI's mpirun flag",
    "flag --oversubscribe": "Open MPI's mpirun flag",
    # Megatron-LM's loss-scaling and precision flags, cited beside mixpar's own
    # (docs/REFERENCE.md, ch02_loss_scaling/README.md).
    "flag --initial-loss-scale": "Megatron-LM's flag (docs/REFERENCE.md, loss scaling)",
    "flag --min-loss-scale": "Megatron-LM's flag",
    "flag --loss-scale-window": "Megatron-LM's flag",
    "flag --hysteresis": "Megatron-LM's flag",
    "flag --bf16": "Megatron-LM's flag",
    # The CUDA toolkit's headers, whose conversions mixpar's CPU code matches bit for bit
    # (docs/REFERENCE.md).
    "file cuda_fp16.h": "CUDA toolkit header",
    "file cuda_bf16.h": "CUDA toolkit header",
    "file cuda_fp8.h": "CUDA toolkit header",
}

TOP_DIRS = ("ch01_fp_formats", "ch02_loss_scaling", "ch03_master_weights", "ch04_ddp",
            "ch05_zero", "ch06_tensor_parallel", "ch07_pipeline", "ch08_full_3d",
            "ch09_expert_parallel", "common",
            "docs", "tests", "scripts", "bench", "cmake", "exercises", "fuzz", ".github")
DOC_NAMES = ("README", "PERFORMANCE", "RUNS", "CHECKPOINTS", "ARCHITECTURE", "COURSE", "GLOSSARY", "REFERENCE",
             "SOURCES", "LICENSE")
SOURCE_EXT = (".h", ".cpp", ".cu", ".cuh", ".py", ".sh", ".md", ".cmake", ".supp")
PROSE_PATH = re.compile(r"(?<![\w./-])(?:\.\./)*(?:%s)/[\w./{},*-]*[\w}*]" % "|".join(
    re.escape(d) for d in TOP_DIRS))
FLAG = re.compile(r"(?<![\w-])--([A-Za-z][\w-]*)")
TEST_NAME = re.compile(r"^(?:(\w+)/)?([A-Z]\w*)\.(\*|[A-Z]\w*)(?:/[\w*]+)?$")
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
SPAN = re.compile(r"(`+)(.+?)\1")
SECTION_CITE = re.compile(r"""^[`)\]]*\)?,\s*(?:section\s+)?"([^"]+)\"""")
SECTION_NUMBER = re.compile(r"""^[`)\]]*\)?,?\s+sections?\s+(\d+[a-z]?)\b""")
OWN_SECTION = re.compile(r"""\bsection "([^"]+)\"""")


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    h = heading.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def heading_text(line):
    return re.sub(r"`", "", line.lstrip("#").strip())


class Repo:
    def __init__(self, root, bin_dir):
        self.root = os.path.abspath(root)
        self.bin_dir = bin_dir
        self.files = set()  # repository-relative paths of every file and directory
        self.basenames = set()
        skip = re.compile(r"^(build[^/]*|\.git|node_modules)$")
        for d, dirs, files in os.walk(self.root):
            dirs[:] = [x for x in dirs if not (d == self.root and skip.match(x))
                       and x != ".git"]
            rel = os.path.relpath(d, self.root)
            if rel != ".":
                self.files.add(rel)
            for f in files:
                p = f if rel == "." else rel + "/" + f
                self.files.add(p)
                self.basenames.add(f)
        self.tools = {}  # name -> set of flags, None when its flags cannot be read
        self.tool_paths = {}
        self._read_programs()
        self._read_scripts()
        self.all_flags = set(getattr(self, "source_flags", set()))
        for flags in self.tools.values():
            self.all_flags |= flags or set()
        self.tests, self.suites, self.prefixes = self._read_tests()
        # The students' copy (exercises/make_student_fork.sh) lists what it left out, the
        # teacher's material and the answers: the docs may name those, as the teacher's copy's.
        self.removed = []
        removed = os.path.join(self.root, "STUDENT_COPY_REMOVED.txt")
        if os.path.isfile(removed):
            with open(removed, encoding="utf-8") as f:
                self.removed = [l.strip().rstrip("/") for l in f
                                if l.strip() and not l.startswith("#")]
        self._headings = {}

    def _program_names(self):
        """Every program the build can make: add_executable's literal names, the benchmarks
        (bench/bench_*.cpp) and the test executables (tests/<label>/)."""
        names = set()
        for d, dirs, files in os.walk(self.root):
            if d == self.root:
                dirs[:] = [x for x in dirs if not x.startswith("build") and x != ".git"]
            if "CMakeLists.txt" in files:
                text = open(os.path.join(d, "CMakeLists.txt"), encoding="utf-8").read()
                names |= set(re.findall(r"add_executable\(\s*([\w-]+)[\s)]", text))
        for src in glob.glob(os.path.join(self.root, "bench", "bench_*.cpp")):
            names.add(os.path.basename(src)[:-4])
        for d in glob.glob(os.path.join(self.root, "tests", "*", "CMakeLists.txt")):
            names.add("test_" + os.path.basename(os.path.dirname(d)))
        return names

    def _read_programs(self):
        built = {n for n in os.listdir(self.bin_dir)
                 if os.path.isfile(os.path.join(self.bin_dir, n))
                 and os.access(os.path.join(self.bin_dir, n), os.X_OK)}
        self.not_built = set()
        for name in sorted(self._program_names() | built):
            path = os.path.join(self.bin_dir, name)
            self.tool_paths[name] = path
            # Google Benchmark's --help lists its own flags, not the program's (bench_gpt_step
            # --profile, bench_allreduce --mpi): those are read from the program's source.
            source = os.path.join(self.root, "bench", name + ".cpp")
            own = set()
            if os.path.isfile(source):
                text = open(source, encoding="utf-8", errors="replace").read()
                own = set(re.findall(r"\"--([A-Za-z][\w-]*)", text))
            if name.startswith(("test_", "exercise_")):
                # The test executables take GoogleTest's flags, and test_ch04_mpi would start
                # MPI: they are not run here.
                self.tools[name] = None
                continue
            if name not in built:
                # A program this build did not make (no Google Benchmark, no MPI): its flags
                # are not checked, but its own flags still count as some tool's.
                self.tools[name] = None
                self.source_flags = getattr(self, "source_flags", set()) | own
                self.not_built.add(name)
                continue
            try:
                p = subprocess.run([path, "--help"], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, timeout=30,
                                   stdin=subprocess.DEVNULL, errors="replace")
                self.tools[name] = set(FLAG.findall(p.stdout)) | own
            except (OSError, subprocess.TimeoutExpired):
                self.tools[name] = None

    def _read_scripts(self):
        # scripts/ (and the folders in it: scripts/text/), and the course's scripts in
        # exercises/ (build_one.sh, grade.sh, leaderboard.sh and the Python they run).
        for path in glob.glob(os.path.join(self.root, "scripts", "*")) + \
                glob.glob(os.path.join(self.root, "scripts", "*", "*")) + \
                glob.glob(os.path.join(self.root, "exercises", "*.sh")) + \
                glob.glob(os.path.join(self.root, "exercises", "*.py")):
            if not os.path.isfile(path):
                continue
            name = os.path.basename(path)
            text = open(path, encoding="utf-8", errors="replace").read()
            if name.endswith(".py"):
                # argparse: every quoted "--name" of the file (add_argument's, and flags it
                # hands on to the programs it runs).
                flags = set(re.findall(r"""["'](?:--)([A-Za-z][\w-]*)""", text))
            else:
                flags = set(FLAG.findall(text))
            self.tools[name] = flags
            self.tool_paths[name] = path

    def _read_tests(self):
        tests, suites, prefixes = set(), set(), {}
        macro = re.compile(r"\b(?:TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\(\s*(\w+)\s*,\s*(\w+)\s*\)")
        inst = re.compile(r"\bINSTANTIATE_(?:TEST_SUITE|TYPED_TEST_SUITE)_P\(\s*(\w+)\s*,\s*(\w+)")
        for top in ("tests", "exercises"):
            for d, _, files in os.walk(os.path.join(self.root, top)):
                for f in files:
                    if not f.endswith((".cpp", ".h", ".cu")):
                        continue
                    text = open(os.path.join(d, f), encoding="utf-8", errors="replace").read()
                    for s, n in macro.findall(text):
                        tests.add((s, n))
                        suites.add(s)
                    for prefix, s in inst.findall(text):
                        prefixes.setdefault(s, set()).add(prefix)
        # Tests CMake adds itself: add_test(NAME Suite.Name ...), and the README tests that
        # mixpar_readme_test(<label> ...) names <Label>Readme.ExpectedOutputReproducesOnAnyThreadCount.
        for d, dirs, files in os.walk(self.root):
            if d == self.root:
                dirs[:] = [x for x in dirs if not x.startswith("build") and x != ".git"]
            for f in files:
                if f != "CMakeLists.txt":
                    continue
                text = open(os.path.join(d, f), encoding="utf-8", errors="replace").read()
                for name in re.findall(r"add_test\(\s*NAME\s+([\w.]+)", text):
                    if "." in name:
                        s, n = name.split(".", 1)
                        tests.add((s, n))
                        suites.add(s)
                # Helpers that register a ctest named by their second argument, e.g.
                # mixpar_bug_lesson_test(ch03 Ch03Demo.BugFp16WeightsFreezesTheWorkingCopy ...).
                for name in re.findall(r"^\s*mixpar_\w+_test\(\s*\w+\s+([A-Z]\w*\.\w+)", text, re.M):
                    s, n = name.split(".", 1)
                    tests.add((s, n))
                    suites.add(s)
                for label in re.findall(r"^\s*mixpar_readme_test\((\w+)", text, re.M):
                    s = label[0].upper() + label[1:] + "Readme"
                    tests.add((s, "ExpectedOutputReproducesOnAnyThreadCount"))
                    suites.add(s)
        return tests, suites, prefixes

    def headings(self, rel):
        if rel not in self._headings:
            slugs, titles, seen = set(), [], {}
            in_code = False
            text = open(os.path.join(self.root, rel), encoding="utf-8").read()
            for line in text.split("\n"):
                if line.startswith("```"):
                    in_code = not in_code
                    continue
                if not in_code and re.match(r"^#{1,6} ", line):
                    t = heading_text(line)
                    s = slug(t)
                    n = seen.get(s, 0)
                    seen[s] = n + 1
                    slugs.add(s if n == 0 else "%s-%d" % (s, n))
                    titles.append(t)
            slugs |= set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
            self._headings[rel] = (slugs, titles)
        return self._headings[rel]


def expand(token):
    """`trainer_config.{h,cpp}` and `pipeline_schedule.h/.cpp` -> each file they name."""
    m = re.match(r"^(.*)\{([^}]*)\}(.*)$", token)
    if m:
        return [m.group(1) + alt + m.group(3) for alt in m.group(2).split(",")]
    m = re.match(r"^(.*)\.(\w+)/\.(\w+)$", token)
    if m:
        return [m.group(1) + "." + m.group(2), m.group(1) + "." + m.group(3)]
    return [token]


class Checker:
    def __init__(self, repo):
        self.repo = repo
        self.problems = []
        self.counts = {"files": 0, "flags": 0, "tests": 0}

    def problem(self, doc, line, what, key=None):
        if key is not None and key in ALLOWED:
            return
        self.problems.append("%s:%d: %s" % (doc, line, what))

    def removed_for_students(self, doc, path):
        """True when `path` (as `doc` names it) is under what the students' copy left out."""
        path = path.rstrip("/")
        for p in (os.path.normpath(os.path.join(os.path.dirname(doc), path)),
                  os.path.normpath(path)):
            parts = p.split("/")
            for pattern in self.repo.removed:
                want = pattern.split("/")
                if len(parts) >= len(want) and all(
                        fnmatch.fnmatchcase(a, b) for a, b in zip(parts, want)):
                    return True
        return False

    # ---- files -------------------------------------------------------------------------
    def resolve(self, doc, path):
        """The repository-relative path `path` names from `doc`, or None."""
        doc_dir = os.path.dirname(doc)
        path = path.rstrip("/")
        for base in (doc_dir, ""):
            p = os.path.normpath(os.path.join(base, path)) if base else os.path.normpath(path)
            if p in self.repo.files or p == ".":
                return p
        return None

    def check_link(self, doc, line, target):
        if re.match(r"^[a-z][\w+.-]*:", target):  # http:, https:, mailto:
            return
        path, _, anchor = target.partition("#")
        if path:
            rel = self.resolve(doc, path)
            if rel is None:
                if not self.removed_for_students(doc, path):
                    self.problem(doc, line, "link to %s: no such file" % path)
                return
        else:
            rel = doc
        if anchor and rel.endswith(".md"):
            slugs, _ = self.repo.headings(rel)
            if anchor not in slugs:
                self.problem(doc, line, "link to %s#%s: %s has no such heading"
                             % (path or rel, anchor, rel))

    def check_section(self, doc, line, path, title, numbered=False):
        rel = self.resolve(doc, path)
        if rel is None or not rel.endswith(".md"):
            return
        want = " ".join(title.replace("`", "").split()).lower()
        _, titles = self.repo.headings(rel)
        for t in titles:
            t = " ".join(t.split()).lower()
            if not numbered:
                t = re.sub(r"^\d+[a-z]?\.\s+", "", t)
            if t.startswith(want + (" " if numbered else "")) or (not numbered and t.startswith(want)):
                return
        self.problem(doc, line, '%s, "%s": no such section in %s' % (path, title, rel))

    def check_path(self, doc, line, token):
        token = token.lstrip("\"'(").rstrip("\"'(),;:.")
        token = re.sub(r":\d+$", "", token)  # file.cpp:123
        if not token or "<" in token or "$" in token or "..." in token:
            return
        if token.startswith("./"):
            token = token[2:]
        first = token.split("/")[0]
        if re.match(r"^build[\w-]*$", first):
            # A program of the build: build/bin/NAME must be one the build makes.
            parts = token.split("/")
            if len(parts) == 3 and parts[1] == "bin" and first == "build" and parts[2]:
                if parts[2] not in self.repo.tool_paths:
                    self.problem(doc, line, "%s: no such program in the build" % token,
                                 "file " + token)
            return
        is_repo_path = first in TOP_DIRS or first == ".." and "/" in token
        is_source = "/" not in token and (token.endswith(SOURCE_EXT) or token == "CMakeLists.txt"
                                          or re.search(r"\.\{\w", token) is not None)
        if not (is_repo_path or is_source or (token.endswith(SOURCE_EXT) and "/" in token)):
            return
        names = expand(token)
        if "{" in token and not all(n.endswith(SOURCE_EXT) for n in names):
            return  # h.{i}.ln_1.weight: a tensor's name, not files
        for name in names:
            if self.placeholder(name):
                continue
            if any(c in name for c in "*?["):
                base = os.path.join(self.repo.root, os.path.dirname(doc))
                if glob.glob(os.path.join(self.repo.root, name)) or glob.glob(os.path.join(base, name)):
                    continue
                if not self.removed_for_students(doc, name):
                    self.problem(doc, line, "%s: matches no file" % name, "file " + name)
                continue
            self.counts["files"] += 1
            if self.resolve(doc, name) is not None:
                continue
            if "/" not in name and name in self.repo.basenames:
                continue
            if self.removed_for_students(doc, name):
                continue
            self.problem(doc, line, "%s: no such file" % name, "file " + name)

    def placeholder(self, name):
        """NAME.cpp, solution/NAME.cpp, D/step-K: a pattern the text explains, not a file."""
        if self.resolve_any(name):
            return False
        for part in name.split("/"):
            stem = part.split(".")[0]
            if re.search(r"(^|_)[A-Z]{2,}(_|$)", stem) and stem not in DOC_NAMES:
                return True
        return False

    def resolve_any(self, name):
        return name in self.repo.files

    # ---- flags -------------------------------------------------------------------------
    def tool_of(self, token):
        """The tool a command token names: a program of the build or a script, or an
        external tool's name; None for anything else."""
        base = token.rstrip(";").split("/")[-1]
        if base in self.repo.tools:
            return base
        if base in EXTERNAL_TOOLS or base.startswith("python3"):
            return "external:" + base
        return None

    def check_command_text(self, doc, line, text):
        """Flags of one line of code: each belongs to the tool named before it, if any."""
        tool = None
        for tok in text.split():
            if tok in ("|", ";", "&&", "||") or tok.endswith(";"):
                tool = None
                continue
            if tok.startswith("#"):  # a shell comment: prose from here on
                tool = None
                continue
            if tok == "--":  # the flags after it are handed on (leaderboard.sh to train_gpt)
                tool = None
                continue
            t = self.tool_of(tok.strip("`(\"'"))
            if t is not None:
                if not (t.startswith("external:python3") and tool is not None
                        and not tool.startswith("external:")):
                    tool = t
                continue
            for flag in FLAG.findall(tok):
                self.check_flag(doc, line, tool, flag)

    def check_flag(self, doc, line, tool, flag):
        if tool is not None and tool.startswith("external:"):
            return  # mpirun's, cmake's, python3's own flags
        self.counts["flags"] += 1
        if tool is not None:
            flags = self.repo.tools.get(tool)
            if flags is None or flag in flags:
                return
            self.problem(doc, line, "%s --%s: not in %s's %s" % (
                tool, flag, tool, "source" if tool in self.script_tools() else "--help"),
                "flag --" + flag)
            return
        if flag in self.repo.all_flags:
            return
        self.problem(doc, line, "--%s: no tool of the repository has it" % flag, "flag --" + flag)

    def script_tools(self):
        return {n for n, p in self.repo.tool_paths.items() if p.startswith(
            os.path.join(self.repo.root, "scripts"))}

    # ---- tests -------------------------------------------------------------------------
    def check_test(self, doc, line, span):
        m = TEST_NAME.match(span)
        if not m:
            return
        prefix, suite, name = m.groups()
        self.counts["tests"] += 1
        if suite not in self.repo.suites:
            # Not a suite of ours: only a name written like one of our tests is a test.
            if name == "*" or re.search(r"[a-z][A-Z]", name):
                self.problem(doc, line, "test %s: no such test suite" % span, "test " + span)
            return
        if prefix and prefix not in self.repo.prefixes.get(suite, set()):
            self.problem(doc, line, "test %s: %s is not instantiated as %s/" % (span, suite, prefix),
                         "test " + span)
        if name != "*" and re.fullmatch(r"[A-Z][A-Z_]*", name):
            return  # ExerciseBlank.NAME: a pattern
        if name != "*" and (suite, name) not in self.repo.tests:
            self.problem(doc, line, "test %s: no such test" % span, "test " + span)

    # ---- a doc -------------------------------------------------------------------------
    def check_doc(self, doc):
        text = open(os.path.join(self.repo.root, doc), encoding="utf-8").read()
        lines = text.split("\n")
        fence = None
        prev_blank = True
        indented = False
        for i, raw in enumerate(lines, 1):
            stripped = raw.strip()
            if fence is None and stripped.startswith("```"):
                fence = stripped[:3]
                continue
            if fence is not None:
                if stripped.startswith(fence):
                    fence = None
                    continue
                self.check_code_line(doc, i, raw)
                continue
            if raw.startswith("    ") and (prev_blank or indented) and not re.match(r"^\s*([-*]|\d+\.)\s", raw):
                indented = True
                self.check_code_line(doc, i, raw)
                prev_blank = False
                continue
            indented = indented and stripped == ""
            prev_blank = stripped == ""
            if raw.startswith("<!--"):
                continue
            for m in LINK.finditer(raw):
                self.check_link(doc, i, m.group(2))
            for m in SPAN.finditer(raw):
                span = m.group(2).strip()
                self.check_test(doc, i, span)
                self.check_code_line(doc, i, span)
            # A repository path written in plain text: tests/ch01/fpx_test.cpp.
            prose = LINK.sub(lambda m: m.group(1), SPAN.sub(" ", raw))
            for m in PROSE_PATH.finditer(prose):
                self.check_path(doc, i, m.group(0))
        # Sections cited by title after a doc's name, across line breaks.
        flat = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
        for m in re.finditer(r"([\w./-]+\.md)(?:#[\w-]+)?", flat):
            after = flat[m.end():m.end() + 200].replace("\n", " ")
            line = flat.count("\n", 0, m.start()) + 1
            c = SECTION_CITE.match(after)
            if c:
                self.check_section(doc, line, m.group(1), c.group(1))
            c = SECTION_NUMBER.match(after)
            # "[Article A](../docs/SOURCES.md) section 7.2": the article's section, not the doc's.
            if c and not flat[max(0, m.start() - 2):m.start()] == "](":
                self.check_section(doc, line, m.group(1), c.group(1) + ".", numbered=True)
        # A section of this doc cited by its title: (section "Data parallel" below).
        for m in OWN_SECTION.finditer(flat.replace("\n", " ")):
            before = flat.replace("\n", " ")[max(0, m.start() - 40):m.start()]
            if re.search(r"\.md\)?,?\s*$", before):
                continue  # another doc's, checked above
            self.check_section(doc, flat.count("\n", 0, m.start()) + 1, os.path.basename(doc),
                               m.group(1))

    def check_code_line(self, doc, line, text):
        for tok in re.split(r"[\s=]+", text):
            if "/" in tok or tok.endswith(SOURCE_EXT) or tok.endswith("CMakeLists.txt") or \
                    re.search(r"\.\{\w", tok):
                self.check_path(doc, line, tok.strip("`"))
        self.check_command_text(doc, line, text)


def default_docs(root):
    docs = ["README.md"]
    docs += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    for d in sorted(glob.glob(os.path.join(root, "ch0*"))):
        for name in ("README.md", "PERFORMANCE.md", "RUNS.md", "CHECKPOINTS.md"):
            if os.path.isfile(os.path.join(d, name)):
                docs.append(os.path.relpath(os.path.join(d, name), root))
    docs.append("exercises/README.md")
    return docs


def run(root, bin_dir, docs):
    if not os.path.isfile(os.path.join(bin_dir, "train_gpt")):
        print("doc_references: %s has no train_gpt (build first)" % bin_dir, file=sys.stderr)
        return 2
    repo = Repo(root, bin_dir)
    checker = Checker(repo)
    for doc in docs or default_docs(repo.root):
        doc = os.path.relpath(os.path.abspath(os.path.join(repo.root, doc)), repo.root) \
            if not os.path.isabs(doc) else os.path.relpath(doc, repo.root)
        checker.check_doc(doc)
    for p in checker.problems:
        print(p)
    n = len(docs or default_docs(repo.root))
    if checker.problems:
        print("%d reference(s) in the docs name nothing that exists" % len(checker.problems))
        return 1
    print("every file, flag and test named in %d docs exists (%d file, %d flag and %d test "
          "names checked)" % (n, checker.counts["files"], checker.counts["flags"],
                              checker.counts["tests"]))
    if repo.not_built:
        print("not built here, so their --help was not read: %s" % ", ".join(sorted(repo.not_built)))
    return 0


SELF_TEST_TOOL = """#!/bin/sh
echo "usage: train_gpt [--steps N] [--dp N] [--zero-stage K]"
"""
SELF_TEST_CASES = [
    ("a good doc", "See `ch08_full_3d/trainer.cpp`, [the docs](docs/NOTES.md#a-section), "
                   "`Suite.DoesItsThing`, `Param/Psuite.*` and\n\n```\n"
                   "./build/bin/train_gpt --steps 3 --dp 2\nmpirun -np 2 train_gpt --zero-stage 1\n"
                   "```\n(docs/NOTES.md, \"A section\").\n", 0),
    ("a missing file", "See `ch08_full_3d/no_such_file.cpp`.\n", 1),
    ("a missing file in braces", "See `trainer.{h,cu}`.\n", 1),
    ("a link to a missing file", "See [it](docs/GONE.md).\n", 1),
    ("a link to a missing heading", "See [it](docs/NOTES.md#gone).\n", 1),
    ("a section cited that is not there", "See docs/NOTES.md, \"Another section\".\n", 1),
    ("a flag the tool lacks", "```\ntrain_gpt --steps 3 --tp 2\n```\n", 1),
    ("a flag no tool has", "Run with `--no-such-flag`.\n", 1),
    ("a missing test", "`Suite.DoesAnotherThing` checks it.\n", 1),
    ("a missing suite", "`Nosuite.*` checks it.\n", 1),
    ("a parameterized prefix that is not", "`Other/Psuite.*` checks it.\n", 1),
    ("a program the build lacks", "Run `build/bin/mixpar-nothing`.\n", 1),
]


def self_test():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        root, bin_dir = os.path.join(tmp, "repo"), os.path.join(tmp, "bin")
        for d in ("ch08_full_3d", "docs", "tests/ch08", "scripts", bin_dir):
            os.makedirs(os.path.join(root, d) if not os.path.isabs(d) else d, exist_ok=True)
        open(os.path.join(root, "ch08_full_3d", "trainer.h"), "w").close()
        open(os.path.join(root, "ch08_full_3d", "trainer.cpp"), "w").close()
        with open(os.path.join(root, "docs", "NOTES.md"), "w") as f:
            f.write("# Notes\n\n## A section\n\ntext\n")
        with open(os.path.join(root, "tests", "ch08", "a_test.cpp"), "w") as f:
            f.write("TEST(Suite, DoesItsThing) {}\nTEST_P(Psuite, Works) {}\n"
                    "INSTANTIATE_TEST_SUITE_P(Param, Psuite, x);\n")
        tool = os.path.join(bin_dir, "train_gpt")
        with open(tool, "w") as f:
            f.write(SELF_TEST_TOOL)
        os.chmod(tool, os.stat(tool).st_mode | stat.S_IEXEC)
        for what, body, want in SELF_TEST_CASES:
            doc = os.path.join(root, "ch08_full_3d", "README.md")
            with open(doc, "w") as f:
                f.write("# Case\n\n" + body)
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--repo", root,
                                "--bin-dir", bin_dir, "ch08_full_3d/README.md"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            ok = p.returncode == want
            print("%s  %-40s exit code %d (expected %d)" % ("ok  " if ok else "FAIL", what,
                                                           p.returncode, want))
            if not ok:
                print("    " + p.stdout.strip().replace("\n", "\n    "))
                failures += 1
    print("every case behaves" if not failures else "%d case(s) misbehave" % failures)
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", help="the repository's root")
    ap.add_argument("--bin-dir", help="the build's bin directory (train_gpt, mixpar-mem, ...)")
    ap.add_argument("--self-test", action="store_true",
                    help="check the checker on a made-up repository")
    ap.add_argument("docs", nargs="*", help="docs to read (default: every doc in scope)")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.repo or not a.bin_dir:
        ap.error("--repo and --bin-dir are required")
    return run(a.repo, a.bin_dir, a.docs)


if __name__ == "__main__":
    sys.exit(main())
