"""What the grader refuses in a student's file, by name, before compiling it (source_refusals)
and, for what only the compiler can see, before linking or running it (object_refusals).

A student's STEM.cpp defines the exercise's function(s) in namespace mixpar. It may include
the exercise's own headers, the project's headers (common/, the chapters) and the C++ standard
library, and nothing else; it may not define main, tests, code that runs before main, or
symbols outside namespace mixpar. The threat model is in docs/COURSE.md ("What the grader
protects against").
"""
import os
import re
import subprocess

# Standard C++ headers (C++20 and C++23), the C library's <cNAME> forms and the commonest of
# their NAME.h forms; no POSIX header (<unistd.h>: file descriptors are not an exercise's).
STANDARD_HEADERS = set("""
algorithm any array atomic barrier bit bitset cassert cctype cerrno cfenv cfloat charconv chrono
cinttypes climits clocale cmath compare complex concepts condition_variable coroutine csetjmp
csignal cstdarg cstddef cstdint cstdio cstdlib cstring ctime cuchar cwchar cwctype deque
exception execution expected filesystem flat_map flat_set format forward_list fstream functional
future generator initializer_list iomanip ios iosfwd iostream istream iterator latch limits list
locale map mdspan memory memory_resource mutex new numbers numeric optional ostream print queue
random ranges ratio regex scoped_allocator semaphore set shared_mutex source_location span
spanstream sstream stack stacktrace stdexcept stdfloat stop_token streambuf string string_view
syncstream system_error thread tuple type_traits typeindex typeinfo unordered_map unordered_set
utility valarray variant vector version assert.h float.h limits.h math.h stddef.h stdint.h
stdio.h stdlib.h string.h
""".split())

# Identifiers a solution has no use for and a forgery needs: a main, tests and GoogleTest,
# code run before main or placed in other sections, inline assembly, C linkage (interposing
# the C library), pragmas made by operator.
REFUSED_IDENTIFIERS = {
    "main": "defines or names main (the grader's main runs the tests)",
    "TEST": "defines a test (only the teacher's tests are graded)",
    "TEST_F": "defines a test (only the teacher's tests are graded)",
    "TEST_P": "defines a test (only the teacher's tests are graded)",
    "TYPED_TEST": "defines a test (only the teacher's tests are graded)",
    "TYPED_TEST_P": "defines a test (only the teacher's tests are graded)",
    "INSTANTIATE_TEST_SUITE_P": "defines a test (only the teacher's tests are graded)",
    "RUN_ALL_TESTS": "runs tests itself",
    "testing": "names GoogleTest's namespace",
    "constructor": "asks for code that runs before main",
    "destructor": "asks for code that runs after main",
    "init_priority": "asks for code that runs before main",
    "gnu": "uses a GNU attribute ([[gnu::...]]: constructors, sections, aliases)",
    "__attribute__": "uses a compiler attribute (__attribute__)",
    "__attribute": "uses a compiler attribute (__attribute)",
    "__declspec": "uses a compiler attribute (__declspec)",
    "asm": "uses inline assembly",
    "__asm__": "uses inline assembly",
    "__asm": "uses inline assembly",
    "extern": "declares external (C) linkage",
    "inline": "defines an inline entity (it could replace the project's own inline code)",
    "_Pragma": "uses a pragma",
    "__has_include": "probes for headers",
    "__has_include_next": "probes for headers",
}


def _join_lines(text):
    """Translation phase 2: a backslash at the end of a line joins it to the next."""
    return re.sub(r"\\\r?\n", "", text)


_TOKEN = re.compile(
    r'(?P<comment>//[^\n]*|/\*.*?\*/)'
    r'|(?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^()\\\s"]{0,16})\((?:.|\n)*?\)(?P=delim)")'
    r'|(?P<string>(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*")'
    r"|(?P<char>(?<![0-9A-Za-z_.])(?:u8|u|U|L)?'(?:\\.|[^'\\\n])+')"
    r'|(?P<other>.)', re.S)


def _strip(text):
    """The file with comments removed and literals emptied (their contents are not code), and
    the include directives' targets kept aside: (code, [(line, target)])."""
    out = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "comment":
            out.append(" " if m.group().startswith("/*") and "\n" not in m.group()
                       else "\n" * m.group().count("\n") or " ")
        elif kind in ("raw", "string"):
            out.append('""' + "\n" * m.group().count("\n"))
        elif kind == "char":
            out.append("' '")
        else:
            out.append(m.group())
    return "".join(out)


def _include_allowed(target, quoted, exercise, root):
    if not quoted:
        return target in STANDARD_HEADERS
    if target.startswith("/") or ".." in target.split("/") or "\\" in target:
        return False
    if not target.endswith(".h") or "solution" in target.split("/"):
        return False
    exercises = os.path.join(root, "exercises")
    own = os.path.realpath(os.path.join(exercises, exercise))
    for base in (exercises, root, os.path.join(root, "common")):  # the build's include paths
        path = os.path.realpath(os.path.join(base, target))
        if not os.path.isfile(path):
            continue
        if path.startswith(own + os.sep) and os.path.dirname(path) == own:
            return True  # the exercise's own header
        rel = os.path.relpath(path, os.path.realpath(root)).split(os.sep)
        if rel[0] == "common" or re.fullmatch(r"ch\d\d_[a-z0-9_]+", rel[0]):
            return True  # a header of the project's libraries
    return False


def source_refusals(path, exercise, root):
    """The reasons to refuse the student's file at `path`, by name; [] when none."""
    with open(path, encoding="utf-8", errors="replace") as f:
        raw = f.read()
    reasons = []
    if "\0" in raw:
        return ["holds NUL bytes"]
    joined = _join_lines(raw)
    # Include targets are read from the joined text (a directive's target is a literal).
    for number, line in enumerate(joined.split("\n"), 1):
        m = re.match(r'\s*(?:#|%:)\s*include\s*(?:"([^"\n]*)"|<([^>\n]*)>)', line)
        if m:
            quoted = m.group(1) is not None
            target = m.group(1) if quoted else m.group(2)
            if not _include_allowed(target.strip(), quoted, exercise, root):
                shown = f'"{target}"' if quoted else f"<{target}>"
                reasons.append(f"line {number}: includes {shown}, outside the exercise's "
                               "headers, the project's and the standard library's")
    code = _strip(joined)
    for number, line in enumerate(code.split("\n"), 1):
        m = re.match(r"\s*(#|%:)\s*(\w*)", line)
        if m and m.group(2) != "include":
            reasons.append(f"line {number}: a preprocessor directive other than #include "
                           f"({m.group(1)}{m.group(2)})")
        elif m is None and ("#" in line or "%:" in line):
            reasons.append(f"line {number}: '#' outside an #include (token pasting)")
        if "\\" in line:
            reasons.append(f"line {number}: a backslash outside a literal (a universal "
                           "character name)")
        for word in re.findall(r"[A-Za-z_]\w*", line):
            if word in REFUSED_IDENTIFIERS:
                reasons.append(f"line {number}: '{word}' {REFUSED_IDENTIFIERS[word]}")
            elif word.startswith(("GTEST_", "gtest", "__gtest")):
                reasons.append(f"line {number}: '{word}' names GoogleTest")
    for m in re.finditer(r"\bnamespace\b\s*([\w:\s]*?)\s*(\{|=|;)", code):
        name = re.sub(r"\s+", "", m.group(1))
        if m.group(2) == "{" and name not in ("", "mixpar::exercises"):
            number = code.count("\n", 0, m.start()) + 1
            reasons.append(f"line {number}: namespace '{name}' (a solution defines its "
                           "functions in namespace mixpar::exercises)")
    return reasons


def object_refusals(obj):
    """What only the compiled object shows: code that runs before or after main (dynamic
    initialisation of a global, by any name), and strong symbols outside namespace mixpar (a
    main, a replaced operator new, a C library function)."""
    reasons = []
    sections = subprocess.run(["readelf", "-SW", obj], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)
    if sections.returncode != 0:
        return [f"readelf cannot read the object ({sections.stderr.strip()})"]
    for name in (".init_array", ".preinit_array", ".ctors", ".fini_array", ".dtors"):
        if re.search(r"\s" + re.escape(name) + r"(\.\S*)?\s", sections.stdout):
            reasons.append(f"runs code before or after main (a {name} section: a global "
                           "initialised or destroyed by code)")
    symbols = subprocess.run(["nm", "-g", "--defined-only", obj], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)
    for line in symbols.stdout.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[1] in "VWvwu":
            continue  # inline functions and template instances: every object's alike
        name = fields[2]
        if not re.match(r"_Z(?:T[VIST]|GV|TH|TW)?Z?N(?:K|VK|V|R|O)*6mixpar9exercises", name):
            reasons.append(f"defines the symbol {name} outside namespace mixpar::exercises "
                           "(it would replace the project's own code or the C library's)")
    return reasons
