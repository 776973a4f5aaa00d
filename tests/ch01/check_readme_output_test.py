#!/usr/bin/env python3
"""scripts/check_readme_output.py on a stand-in demo: what it accepts and what it refuses.

    python3 tests/ch01/check_readme_output_test.py SCRIPT

The chapter README tests (ChNNReadme.ExpectedOutputReproducesOnAnyThreadCount) are only as
good as the comparison: this runs the script on small READMEs against a program that prints
a known text, and checks that a reproduced block passes (whole, as an excerpt, with its
machine-dependent numbers or varying parts changed), and that a changed digit, an excerpt whose
lines are not consecutive, changed words on a machine-dependent line or in a varying part and
an unknown marker field fail with the exit codes the script documents. Exit code 0 when every case behaves, 1 otherwise.
"""

import os
import stat
import subprocess
import sys
import tempfile

DEMO = """== 1. the table
  step  loss
  0     5.5362608
  1     5.3140671
step time 12.5 ms
== 2. the end
all claims hold
step 1 | loss 5.5417 | 36.4k tok/s | ETA 1m24s
"""


def readme(tmp, name, marker, lines):
    path = os.path.join(tmp, name + ".md")
    with open(path, "w") as f:
        f.write("# %s\n\ntext\n\n<!-- expected-output: %s -->\n```\n%s\n```\n"
                % (name, marker, "\n".join(lines)))
    return path


def main():
    script = sys.argv[1]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        demo = os.path.join(tmp, "demo")
        with open(demo, "w") as f:
            f.write("#!/bin/sh\ncat <<'EOF'\n%sEOF\n" % DEMO)
        os.chmod(demo, os.stat(demo).st_mode | stat.S_IEXEC)
        whole = DEMO.rstrip("\n").split("\n")
        cases = [
            ("the whole output", "demo", whole, 0),
            ("one digit changed", "demo", [l.replace("5.3140671", "5.3140672") for l in whole], 1),
            ("a line missing at the end", "demo", whole[:-1], 1),
            ("an excerpt", "demo | excerpt", whole[1:4], 0),
            ("an excerpt not consecutive", "demo | excerpt", [whole[1], whole[3]], 1),
            ("an excerpt with a changed digit", "demo | excerpt",
             [whole[1], whole[2].replace("5.536", "5.537")], 1),
            ("timings masked", "demo | machine-dependent: ms$",
             [l.replace("12.5", "230.01") for l in whole], 0),
            ("timings masked, words compared", "demo | machine-dependent: ms$",
             [l.replace("step time", "step took") for l in whole], 1),
            ("an excerpt with timings masked", "demo | excerpt | machine-dependent: ms$",
             ["step time 1 ms", whole[5]], 0),
            ("numbers outside the regular expression still compared",
             "demo | machine-dependent: ms$", [l.replace("5.5362608", "5.5362609") for l in whole],
             1),
            ("varying parts of a line masked", r"demo | varies: [\d.]+k tok/s|ETA \S+",
             [l.replace("36.4k", "9.1k").replace("1m24s", "12s") for l in whole], 0),
            ("a digit outside the varying parts", r"demo | varies: [\d.]+k tok/s|ETA \S+",
             [l.replace("5.5417", "5.5418") for l in whole], 1),
            ("varying parts, words compared", r"demo | varies: [\d.]+k tok/s|ETA \S+",
             [l.replace("tok/s", "tokens/s") for l in whole], 1),
            ("both regular expressions, each with ' | '",
             r"demo | excerpt | machine-dependent: ms$ | varies: [\d.]+k tok/s | ETA \S+",
             [l.replace("12.5", "3").replace("36.4k", "9.1k").replace("1m24s", "12s")
              for l in whole[4:]], 0),
            ("a regular expression field twice", "demo | varies: ms | varies: s", whole, 2),
            ("an unknown marker field", "demo | excerpts", whole, 2),
            ("a missing program", "no_such_demo", whole, 2),
        ]
        for k, (what, marker, lines, want) in enumerate(cases):
            path = readme(tmp, "case%d" % k, marker, lines)
            p = subprocess.run([sys.executable, script, "--bin-dir", tmp, "--threads", "1", path],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            ok = p.returncode == want
            print("%s  %-55s exit code %d (expected %d)" % ("ok  " if ok else "FAIL", what,
                                                           p.returncode, want))
            if not ok:
                print("    " + p.stdout.strip().replace("\n", "\n    "))
                failures += 1
    print("every case behaves" if not failures else "%d case(s) misbehave" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
