#!/usr/bin/env python3
"""Measures each FP8 recipe's loss against the bf16 run of the same model, data and seed.

    python3 scripts/fp8_loss_gap.py [--bin-dir build/bin] [--steps 300] [--data FILE]
                                    [--json OUT] [-- more train_gpt flags]

Runs train_gpt --dtype fp32 and bf16, then --dtype fp8 --fp8-recipe delayed|tensorwise|blockwise,
each with --log-jsonl, and prints one table row per run: the mean training loss over the last
tenth of the steps and its gap to bf16's (relative; fp32's gap is the noise floor: how far any
change of rounding moves this run), and per role (input, weight, output gradient) the fraction
of values that saturated and that flushed to zero, the mean over the steps and the largest.
--json writes the same numbers and every step's losses (scripts/figures.py can plot them).
Every number is read from the runs' logs. Exit codes: 0 measured, 1 a run failed, 2 bad
arguments.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

RECIPES = ["delayed", "tensorwise", "blockwise"]
ROLES = ["input", "weight", "grad"]


def train(bin_dir, log, dtype_flags, args):
    cmd = [os.path.join(bin_dir, "train_gpt"), *dtype_flags, "--log-jsonl", log, *args]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-2:]
        raise RuntimeError("%s exited with %d: %s" % (" ".join(cmd), p.returncode, " | ".join(tail)))
    with open(log) as f:
        return [json.loads(line) for line in f if line.strip()]


def summary(name, recs, base_tail=None):
    losses = [r["loss"] for r in recs]
    n = max(1, len(losses) // 10)
    tail = sum(losses[-n:]) / n
    row = {"run": name, "steps": len(losses), "tail_steps": n, "tail_loss": tail,
           "losses": losses}
    if base_tail is not None:
        row["gap"] = (tail - base_tail) / base_tail
    if recs and "fp8" in recs[0]:
        for role in ROLES:
            for what in ("saturated", "flushed"):
                v = [r["fp8"][role][what + "_frac"] for r in recs]
                row[role + "_" + what + "_mean"] = sum(v) / len(v)
                row[role + "_" + what + "_max"] = max(v)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    repo_bin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin")
    ap.add_argument("--bin-dir", default=os.path.normpath(repo_bin))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--data", default="", help="a text or .bin shard (default: built-in task)")
    ap.add_argument("--json", default="", help="also write the numbers to this file")
    ap.add_argument("rest", nargs="*", help="more train_gpt flags (after --)")
    a = ap.parse_args()
    if a.steps < 1:
        print("fp8_loss_gap.py: --steps must be >= 1", file=sys.stderr)
        return 2
    if not os.path.isfile(os.path.join(a.bin_dir, "train_gpt")):
        print("fp8_loss_gap.py: no train_gpt in '%s' (build first)" % a.bin_dir, file=sys.stderr)
        return 2
    if a.data and not os.path.isfile(a.data):
        print("fp8_loss_gap.py: --data '%s' does not exist" % a.data, file=sys.stderr)
        return 2
    args = ["--steps", str(a.steps), "--print-every", str(a.steps), *a.rest]
    if a.data:
        args += ["--data", a.data]
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            fp32 = train(a.bin_dir, os.path.join(tmp, "fp32.jsonl"), ["--dtype", "fp32"], args)
            base = summary("bf16", train(a.bin_dir, os.path.join(tmp, "bf16.jsonl"),
                                         ["--dtype", "bf16"], args))
            rows.append(summary("fp32", fp32, base["tail_loss"]))
            rows.append(base)
            for r in RECIPES:
                recs = train(a.bin_dir, os.path.join(tmp, r + ".jsonl"),
                             ["--dtype", "fp8", "--fp8-recipe", r], args)
                rows.append(summary("fp8 " + r, recs, base["tail_loss"]))
    except RuntimeError as e:
        print("fp8_loss_gap.py: %s" % e, file=sys.stderr)
        return 1
    print("data: %s, %d steps, flags: %s" % (a.data or "built-in addition", a.steps,
                                              " ".join(a.rest) or "(defaults)"))
    print("| run | loss, last %d steps | gap to bf16 | saturated: mean (max) per step, "
          "input / weight / grad | flushed to zero: mean (max) |" % base["tail_steps"])
    print("|---|---|---|---|---|")

    def cell(r, what):
        return " / ".join("%.2g%% (%.2g%%)" % (100 * r[x + "_" + what + "_mean"],
                                             100 * r[x + "_" + what + "_max"]) for x in ROLES)

    for r in rows:
        gap = "%+.2f%%" % (100 * r["gap"]) if "gap" in r else "-"
        if r["run"].startswith("fp8"):
            print("| %s | %.4f | %s | %s | %s |" % (r["run"], r["tail_loss"], gap,
                                                  cell(r, "saturated"), cell(r, "flushed")))
        else:
            print("| %s | %.4f | %s | - | - |" % (r["run"], r["tail_loss"], gap))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"data": a.data or "built-in addition", "steps": a.steps, "flags": a.rest,
                       "runs": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
