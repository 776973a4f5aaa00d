#!/usr/bin/env python3
"""Runs the demos a README shows the output of, and compares with what the README prints.

    python3 scripts/check_readme_output.py --bin-dir build/bin [--threads 1,2] README.md...

A README marks each block of expected output it promises to reproduce with an HTML comment
(invisible on the rendered page) on the line before the fenced block:

    <!-- expected-output: ch02_loss_scaling --growth-interval 5 -->
    <!-- expected-output: ch04_ddp --bug none | machine-dependent: ms|ran in -->
    <!-- expected-output: ch05_zero | excerpt -->
    <!-- expected-output: train_gpt --steps 20 | varies: [\d.]+k tok/s|ETA \S+ -->

The program (in --bin-dir) runs with those arguments, once per thread count of --threads
(OMP_NUM_THREADS; blocks of the same command share its runs), and its standard output must
equal the block line for line. An `excerpt` block is one section of a longer output: its
lines must appear in the output as consecutive lines, anywhere. Lines that match the optional
`machine-dependent` regular expression (timings, throughput; always the last field of the
marker) are compared with every number replaced by '#' and runs of spaces collapsed, so their
words and columns must still match but not their values. The parts of any line that match
the optional `varies` regular expression (a throughput or time inside a line whose other
figures reproduce) are not compared, beyond their matching it: the rest of the line is,
digit for digit. The two regular expressions may hold " | "; each runs to the next field or
the end of the marker. Exit code 0: every block
reproduced; 1: a block differs (the first differing lines are printed) or a program failed;
2: bad arguments or a README without any marked block.
"""

import argparse
import os
import re
import subprocess
import sys

MARK = re.compile(r"^<!-- expected-output: (.*?) -->\s*$")
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


REGEX_FIELDS = ("machine-dependent: ", "varies: ")


def marker_fields(path, line_no, body):
    """'ARGS [| excerpt] [| machine-dependent: RE] [| varies: RE]'
    -> (argv, excerpt, machine-dependent RE or None, varies RE or None)."""
    fields = body.split(" | ")
    argv, excerpt, res = fields[0].split(), False, {}
    k = 1
    while k < len(fields):
        f = fields[k]
        key = next((r for r in REGEX_FIELDS if f.startswith(r)), None)
        if f == "excerpt" and not res:
            excerpt = True
            k += 1
        elif key and key not in res:
            # A regular expression may hold " | " itself: it runs to the next field's keyword.
            j = k + 1
            while j < len(fields) and not fields[j].startswith(REGEX_FIELDS):
                j += 1
            res[key] = " | ".join(fields[k:j])[len(key):]
            try:
                re.compile(res[key])
            except re.error as e:
                raise ValueError("%s:%d: %s%s" % (path, line_no, key, e))
            k = j
        else:
            raise ValueError("%s:%d: unknown marker field '%s' (excerpt, machine-dependent: RE, "
                             "varies: RE)" % (path, line_no, f))
    if not argv:
        raise ValueError("%s:%d: the marker names no program" % (path, line_no))
    return argv, excerpt, res.get("machine-dependent: "), res.get("varies: ")


def blocks(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = MARK.match(lines[i])
        if m:
            if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
                raise ValueError("%s:%d: the marker is not followed by a ``` block" % (path, i + 1))
            j = i + 2
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if j >= len(lines):
                raise ValueError("%s:%d: the block is not closed" % (path, i + 2))
            argv, excerpt, vary, parts = marker_fields(path, i + 1, m.group(1))
            out.append((i + 1, argv, excerpt, vary, parts, lines[i + 2:j]))
            i = j
        i += 1
    return out


def masked(line):
    return " ".join(NUMBER.sub("#", line).split())


def masked_parts(line, parts):
    """The line with every part that matches `parts` replaced by '#'."""
    return parts.sub("#", line)


def same(e, g, pattern, parts=None):
    if e == g:
        return True
    if parts and masked_parts(e, parts) == masked_parts(g, parts):
        return True
    return bool(pattern and (pattern.search(e) or pattern.search(g)) and masked(e) == masked(g))


def compare(expected, got, vary, excerpt=False, varies=None):
    """None when the output reproduces the block, else (line of the block, README, output)."""
    pattern = re.compile(vary) if vary else None
    parts = re.compile(varies) if varies else None
    got = got.rstrip("\n").split("\n")
    if excerpt:
        # The block is a run of consecutive output lines: try every place its first line fits,
        # and report the place that matched longest.
        best = (0, expected[0] if expected else "<empty block>", "<no such line in the output>")
        best_len = -1
        for start in range(len(got)):
            if not expected or not same(expected[0], got[start], pattern, parts):
                continue
            k = 0
            while k < len(expected) and start + k < len(got) and \
                    same(expected[k], got[start + k], pattern, parts):
                k += 1
            if k == len(expected):
                return None
            if k > best_len:
                best_len = k
                best = (k, expected[k], got[start + k] if start + k < len(got) else "<no line>")
        return best
    for k in range(max(len(expected), len(got))):
        e = expected[k] if k < len(expected) else "<no line>"
        g = got[k] if k < len(got) else "<no line>"
        if not same(e, g, pattern, parts):
            return k, e, g
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--threads", default="1,2", help="OMP_NUM_THREADS values to run with")
    ap.add_argument("readmes", nargs="+")
    a = ap.parse_args()
    threads = [t for t in a.threads.split(",") if t]
    failures = 0
    runs = {}  # (argv, threads) -> the finished run: blocks of one command share it
    for readme in a.readmes:
        try:
            found = blocks(readme)
        except (OSError, ValueError) as e:
            print("check_readme_output: %s" % e, file=sys.stderr)
            return 2
        if not found:
            print("check_readme_output: %s has no <!-- expected-output: ... --> block" % readme,
                  file=sys.stderr)
            return 2
        for line_no, argv, excerpt, vary, varies, expected in found:
            program = os.path.join(a.bin_dir, argv[0])
            if not os.path.isfile(program):
                print("check_readme_output: %s does not exist (build it first)" % program,
                      file=sys.stderr)
                return 2
            for t in threads:
                key = (tuple(argv), t)
                if key not in runs:
                    env = dict(os.environ, OMP_NUM_THREADS=t)
                    runs[key] = subprocess.run([program, *argv[1:]], stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, text=True, env=env,
                                               timeout=600)
                p = runs[key]
                where = "%s:%d (%s, OMP_NUM_THREADS=%s)" % (readme, line_no, " ".join(argv), t)
                if p.returncode != 0:
                    print("FAIL %s: exit code %d\n%s" % (where, p.returncode, p.stderr.strip()))
                    failures += 1
                    continue
                diff = compare(expected, p.stdout, vary, excerpt, varies)
                if diff is None:
                    print("ok   %s: %d lines reproduced%s"
                          % (where, len(expected), " (an excerpt)" if excerpt else ""))
                else:
                    k, e, g = diff
                    print("FAIL %s: line %d of the block differs\n  README: %s\n  output: %s"
                          % (where, k + 1, e, g))
                    failures += 1
    print("all blocks reproduced" if not failures else "%d block run(s) differ" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
