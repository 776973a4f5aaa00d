#!/usr/bin/env python3
"""Tests of exercises/leaderboard.sh, one scenario per ctest (Leaderboard.*):

  reach      a tiny configuration of the real train_gpt and the tiniest target, 0 (its first
             evaluation): reached at step 5 of 1000 with --eval-every 5, the run stopped there,
             the board file records it (learning even 1 of the 200 held-out problems takes
             minutes on 2 cores: the baseline in docs/COURSE.md)
  stop       a stand-in train_gpt that logs 10 ms steps and an accuracy of step/100: the run is
             stopped at the first evaluation reaching the target (step 30 for 0.3 with
             --eval-every 10), scored 0.30 s, and terminated before its end
  short      the real train_gpt, 10 steps: the run ends short of the target, exit code 1,
             the best accuracy and its step named
  bad-input  the leaderboard's own bad flags, a flag it owns, and a configuration train_gpt
             refuses: exit code 2, one line
  one-target a board made for target 0.3 (the stand-in) refuses an entry for target 0 before
             it runs: exit code 2, one line naming both targets; the board is unchanged
  ranking    a board holding earlier entries (one name twice, a slower and a faster run, one
             name slower than the new entry): printed ranked by time, one row per name (its
             best), with the machine, the threads and the ranks

  python3 exercises/leaderboard_test.py SCENARIO TRAIN_GPT
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BOARD = os.path.join(HERE, "leaderboard.sh")
TINY = ["--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--batch", "8", "--seq", "32",
        "--threads", "1"]

# A stand-in for train_gpt with its flags' shape: --dry-run, --eval-every, --log-jsonl, --steps.
STAND_IN = r'''#!/usr/bin/env python3
import json, sys, time
a = sys.argv[1:]
if "--dry-run" in a:
    sys.exit(0)
log = a[a.index("--log-jsonl") + 1]
every = int(a[a.index("--eval-every") + 1])
with open(log, "w") as f:
    for step in range(1, 101):
        j = {"step": step, "loss": 1.0, "step_ms": 10.0}
        if step % every == 0:
            j["heldout_accuracy"] = step / 100
        f.write(json.dumps(j) + "\n")
        f.flush()
        time.sleep(0.02)
with open(log + ".finished", "w") as f:
    f.write("ran to the end\n")
'''


def stand_in(tmp):
    fake = os.path.join(tmp, "train_gpt")
    with open(fake, "w") as f:
        f.write(STAND_IN)
    os.chmod(fake, 0o755)
    return fake


def leaderboard(*args, timeout=300):
    r = subprocess.run(["bash", BOARD, *args], capture_output=True, text=True, timeout=timeout)
    sys.stdout.write(r.stdout + r.stderr)
    return r


def check(cond, what):
    if not cond:
        print(f"FAIL {what}")
        sys.exit(1)
    print(f"ok   {what}")


def main():
    scenario, train_gpt = sys.argv[1], os.path.abspath(sys.argv[2])
    with tempfile.TemporaryDirectory(prefix="leaderboard_test_") as tmp:
        board = os.path.join(tmp, "board.tsv")
        if scenario == "reach":
            r = leaderboard("--train-gpt", train_gpt, "--target", "0", "--eval-every", "5",
                            "--board", board, "--name", "tiny", "--", *TINY, "--steps", "1000")
            check(r.returncode == 0, f"exit code 0: the target is reached (got {r.returncode})")
            check(" at step 5: " in r.stdout, "at step 5, the first evaluation")
            with open(board) as f:
                rows = [l.split("\t") for l in f if not l.startswith("#")]
            check(len(rows) == 1 and rows[0][0] == "tiny" and rows[0][3] == "5" and
                  float(rows[0][1]) > 0, "the board holds the entry: step 5, a positive time")
        elif scenario == "stop":
            fake = stand_in(tmp)
            r = leaderboard("--train-gpt", fake, "--target", "0.3", "--eval-every", "10",
                            "--board", board, "--")
            check(r.returncode == 0, f"exit code 0 (got {r.returncode})")
            check("at step 30: 0.30 s of training" in r.stdout,
                  "stopped at step 30, the first evaluation at 0.3, scored 30 x 10 ms")
            check(not any(n.endswith(".finished") for n in os.listdir(tmp)) and
                  "0.30" in open(board).read(), "the run was stopped before its end; the board has 0.30")
        elif scenario == "short":
            r = leaderboard("--train-gpt", train_gpt, "--target", "0.9", "--", *TINY, "--steps", "10")
            check(r.returncode == 1, f"exit code 1: not reached (got {r.returncode})")
            check("the run ended before reaching 90.0% (best 0.0% at step 10)" in r.stdout,
                  "names the end of the run and the best evaluation (the final one, step 10)")
        elif scenario == "one-target":
            fake = stand_in(tmp)
            r = leaderboard("--train-gpt", fake, "--target", "0.3", "--eval-every", "10",
                            "--board", board, "--name", "first", "--")
            check(r.returncode == 0, f"the board's first entry, target 0.3 (got {r.returncode})")
            before = open(board).read()
            check(before.startswith("# mixpar leaderboard, held-out accuracy target 0.3 "),
                  "the board's first line names its target")
            r = leaderboard("--train-gpt", fake, "--target", "0", "--eval-every", "10",
                            "--board", board, "--name", "smoke", "--")
            lines = r.stderr.strip().splitlines()
            check(r.returncode == 2 and len(lines) == 1 and "is for the target 0.3" in lines[0]
                  and "this entry's is 0" in lines[0],
                  f"an entry for target 0 is refused, naming both (got {r.returncode}: {r.stderr!r})")
            check(open(board).read() == before, "the board is unchanged")
        elif scenario == "ranking":
            fake = stand_in(tmp)
            with open(board, "w") as f:
                f.write("# mixpar leaderboard, held-out accuracy target 0.3 (exercises/leaderboard.sh)\n")
                for name, seconds in (("carol", 0.9), ("alice", 0.5), ("carol", 0.2), ("dave", 0.1)):
                    f.write(f"{name}\t{seconds}\t0.3\t30\t0.3\t2026-12-01\t--lr 0.004\t"
                            f"Some CPU\t2\t1\t1\t0.50\n")
            r = leaderboard("--train-gpt", fake, "--target", "0.3", "--eval-every", "10",
                            "--board", board, "--name", "bob", "--", "--threads", "2",
                            "--ranks", "2")
            check(r.returncode == 0, f"exit code 0 (got {r.returncode})")
            table = r.stdout[r.stdout.index("\nboard ") + 1:].splitlines()[2:]
            names = [line.split()[1] for line in table]
            check(names == ["dave", "carol", "bob", "alice"],
                  f"ranked by time, one row per name (got {names})")
            carol = table[1].split()
            check(carol[2] == "0.20", f"carol's row is her best, 0.20 s (got {carol[2]})")
            bob = table[2].split()
            check(bob[2] == "0.30" and bob[5] == "2" and bob[6] == "2" and "CPUs)" in table[2],
                  f"bob's row: 0.30 s, 2 threads, 2 ranks, the machine (got {table[2]!r})")
        elif scenario == "bad-input":
            cases = [
                ("a target above 1", ["--target", "1.5", "--"], "--target must be in [0, 1]"),
                ("a zero --eval-every", ["--eval-every", "0", "--"], "--eval-every must be at least 1"),
                ("a flag the leaderboard owns", ["--", "--data", "x.bin"], "--data is not an entry's flag"),
                ("train_gpt's flags without --", ["--steps", "10"], "unrecognized arguments"),
                ("a flag missing its value", ["--board", "--name", "x", "--"],
                 "--board: expected one argument"),
                ("a configuration train_gpt refuses", ["--", "--n-embd", "32", "--n-head", "3"],
                 "train_gpt refuses the flags"),
                ("a value train_gpt refuses", ["--", "--dtype", "fp64"], "train_gpt refuses the flags"),
            ]
            for what, args, message in cases:
                r = leaderboard("--train-gpt", train_gpt, *args)
                lines = r.stderr.strip().splitlines()
                check(r.returncode == 2 and len(lines) == 1 and message in lines[0],
                      f"{what}: exit code 2, one line (got {r.returncode}: {r.stderr.strip()!r})")
        else:
            print(f"leaderboard_test: unknown scenario {scenario}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
