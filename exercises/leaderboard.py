#!/usr/bin/env python3
"""The course's CPU leaderboard (capstone): how fast does YOUR train_gpt configuration learn the
built-in addition task to a held-out accuracy target? Run it as exercises/leaderboard.sh.

    bash exercises/leaderboard.sh [--target 0.5] [--name NAME] [--board FILE] -- FLAGS...

FLAGS are train_gpt's own (model shape, batch, learning rate and schedule, dtype, ranks, dp /
tp / pp, ZeRO, recompute, ...). The leaderboard owns the flags that decide what is measured:
the data (the built-in task), the evaluation (--eval-every, held-out exact-match accuracy on
the task's 200 held-out problems) and the log. It checks FLAGS with train_gpt --dry-run first
(a flag train_gpt refuses exits 2 here too, with train_gpt's line), then trains while reading
the --log-jsonl log as it grows, and stops the run at the first evaluated step whose
heldout_accuracy reaches the target.

The figure: time to target = the sum of the log's step_ms up to and including that step (the
training steps' wall time, as train_gpt measures it; start-up and the evaluations themselves
are not in it, so --eval-every does not change the score, only how finely it is resolved).
The wall time from launch is printed beside it. Exit codes: 0 target reached, 1 not reached
(the run ended or --timeout passed), 2 bad input.

A board (--board FILE) is for one target: its first line names it, and an entry for another
target is refused before it runs (exit 2, naming both). It keeps every entry (the file is a
log) and ranks by time to that target, one row per name (its best), with the machine (CPU
model and count), the threads and ranks the entry used, and the load average beside it.
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Flags that decide what is measured, or that make the run something else than training.
OWNED = {
    "--data": "the leaderboard's task is the built-in addition dataset",
    "--init-from": "every entry trains from scratch",
    "--resume": "every entry trains from scratch",
    "--checkpoint-dir": "checkpoints are not part of the measured run",
    "--log-jsonl": "the leaderboard writes and reads the log itself",
    "--eval-every": "set it with the leaderboard's own --eval-every",
    "--dry-run": "the leaderboard runs the dry run itself",
    "--help": "see train_gpt --help",
    "--save": "the model is not saved",
    "--dump-logits": "nothing is dumped",
    "--trace": "tracing slows the run down",
    "--sample": "nothing is sampled",
    "--print-every": "the run's progress lines are not shown",
}


class BadInput(Exception):
    pass


def cpu_name():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def parse(argv):
    p = argparse.ArgumentParser(prog="exercises/leaderboard.sh",
                                description="Time a train_gpt configuration to a held-out "
                                "accuracy target on the built-in task.")
    p.add_argument("--target", type=float, default=0.5,
                   help="held-out exact-match accuracy to reach, in [0, 1] (default 0.5; 0: the "
                   "first evaluation, a smoke test of a configuration)")
    p.add_argument("--eval-every", type=int, default=25,
                   help="evaluate every K steps (default 25): the resolution of the score")
    p.add_argument("--timeout", type=float, default=1800,
                   help="seconds before the run is stopped as not reaching the target (default 1800)")
    p.add_argument("--name", default=os.environ.get("USER", "anonymous"),
                   help="the entry's name on the board (default: $USER)")
    p.add_argument("--board", help="a TSV file the result is appended to; the board is printed")
    p.add_argument("--train-gpt", default=os.path.join(ROOT, "build", "bin", "train_gpt"),
                   help="the train_gpt binary (default: build/bin/train_gpt)")
    p.add_argument("flags", nargs=argparse.REMAINDER,
                   help="-- then train_gpt's flags for your configuration")

    def error(message):
        raise BadInput(message)

    p.error = error
    args = p.parse_args(argv)
    flags = args.flags[1:] if args.flags[:1] == ["--"] else args.flags
    if args.flags and args.flags[0] != "--":
        raise BadInput(f"unknown argument '{args.flags[0]}' (train_gpt's flags go after --)")
    if not 0 <= args.target <= 1:
        raise BadInput(f"--target must be in [0, 1], got {args.target}")
    if args.eval_every < 1:
        raise BadInput(f"--eval-every must be at least 1, got {args.eval_every}")
    if not args.timeout > 0:
        raise BadInput(f"--timeout must be positive, got {args.timeout}")
    if "\t" in args.name or "\n" in args.name or not args.name:
        raise BadInput("--name must be a non-empty single line without tabs")
    if not (os.path.isfile(args.train_gpt) and os.access(args.train_gpt, os.X_OK)):
        raise BadInput(f"train_gpt not found at {args.train_gpt} (build it: ninja -C build "
                       "train_gpt, or pass --train-gpt)")
    for f in flags:
        name = f.split("=", 1)[0]
        if name in OWNED:
            raise BadInput(f"{name} is not an entry's flag: {OWNED[name]}")
    args.flags = flags
    return args


def check_flags(args):
    """train_gpt's own verdict on the flags: its dry run (no training)."""
    r = subprocess.run([args.train_gpt, *args.flags, "--dry-run"], capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        lines = [l for l in r.stderr.strip().splitlines() if l.strip()] or ["(no message)"]
        raise BadInput(f"train_gpt refuses the flags: {lines[-1]}")


def race(args, log):
    """Runs train_gpt, following its log; returns (result dict or None, reason)."""
    command = [args.train_gpt, *args.flags, "--eval-every", str(args.eval_every),
               "--log-jsonl", log, "--print-every", "1000000000"]
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    train_ms, best, offset, pending = 0.0, (-1.0, 0), 0, ""
    result, reason = None, ""
    try:
        while True:
            finished = proc.poll() is not None
            if os.path.exists(log):
                with open(log, encoding="utf-8") as f:
                    f.seek(offset)
                    chunk = f.read()
                    offset = f.tell()
                pending += chunk
                *lines, pending = pending.split("\n")
                for line in lines:
                    if not line.strip():
                        continue
                    j = json.loads(line)
                    train_ms += float(j["step_ms"])
                    acc = j.get("heldout_accuracy")
                    if acc is None:
                        continue
                    if acc > best[0]:
                        best = (acc, j["step"])
                    if acc >= args.target:
                        result = {"step": j["step"], "accuracy": acc, "train_s": train_ms / 1000,
                                  "wall_s": time.monotonic() - start}
                        return result, ""
            if finished:
                err = proc.stderr.read().strip().splitlines() if proc.stderr else []
                if proc.returncode != 0:
                    reason = f"train_gpt exited {proc.returncode}: {err[-1] if err else ''}"
                else:
                    reason = "the run ended"
                break
            if time.monotonic() - start > args.timeout:
                reason = f"--timeout {args.timeout:g} s passed"
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    best_text = f"best {100 * best[0]:.1f}% at step {best[1]}" if best[0] >= 0 else "no evaluation"
    return None, f"{reason} before reaching {100 * args.target:.1f}% ({best_text})"


BOARD_TITLE = "# mixpar leaderboard, held-out accuracy target "
BOARD_COLUMNS = ("name", "time_to_target_s", "target", "step", "accuracy", "date", "flags",
                 "cpu", "cpus", "threads", "ranks", "load")


def board_target(path):
    """The target a board is for: its title line's, else (a board without one) its entries'
    single target; None for a new board. A board holding two targets is bad input."""
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if lines and lines[0].startswith(BOARD_TITLE):
        try:
            return float(lines[0][len(BOARD_TITLE):].split()[0])
        except (ValueError, IndexError):
            raise BadInput(f"board {path}: its first line does not name a target")
    targets = {float(r.split("\t")[2]) for r in lines
               if r.strip() and not r.startswith("#") and len(r.split("\t")) >= 7}
    if len(targets) > 1:
        raise BadInput(f"board {path} mixes targets {sorted(targets)}: start one board per target")
    return targets.pop() if targets else None


def flag_value(flags, name, default):
    for i, f in enumerate(flags):
        if f == name and i + 1 < len(flags):
            return flags[i + 1]
        if f.startswith(name + "="):
            return f.split("=", 1)[1]
    return default


def print_board(path, target):
    """Ranked by time to the board's target, one row per name: its fastest entry."""
    with open(path, encoding="utf-8") as f:
        rows = [l.rstrip("\n").split("\t") for l in f if l.strip() and not l.startswith("#")]
    best = {}
    for r in rows:
        if len(r) < 7 or float(r[2]) != target:
            continue
        if r[0] not in best or float(r[1]) < float(best[r[0]][1]):
            best[r[0]] = r
    ranked = sorted(best.values(), key=lambda r: (float(r[1]), r[0]))
    print(f"\nboard {path}: time to {100 * target:.1f}% held-out accuracy, each name's best "
          f"({len(rows)} entries)")
    print(f"{'#':>3} {'name':16} {'time to target':>15} {'step':>6} {'threads':>8} {'ranks':>5}  "
          f"machine; flags")
    for i, r in enumerate(ranked, 1):
        r = r + [""] * (len(BOARD_COLUMNS) - len(r))
        machine = f"{r[7]} ({r[8]} CPUs)" if r[8] else r[7]
        print(f"{i:>3} {r[0][:16]:16} {float(r[1]):>13.2f} s {r[3]:>6} {r[9]:>8} {r[10]:>5}  "
              f"{machine}; {r[6]}")


def main(argv):
    try:
        args = parse(argv)
        if args.board:
            target = board_target(args.board)
            if target is not None and target != args.target:
                raise BadInput(f"board {args.board} is for the target {target:g}, this entry's "
                               f"is {args.target:g}: one board per target (pass --target "
                               f"{target:g}, or another --board)")
        check_flags(args)
    except BadInput as e:
        print(f"leaderboard: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="leaderboard_") as tmp:
        result, reason = race(args, os.path.join(tmp, "run.jsonl"))
    flags = " ".join(shlex.quote(f) for f in args.flags) or "(train_gpt's defaults)"
    if result is None:
        print(f"leaderboard: {args.name}: {reason}; flags: {flags}")
        return 1
    print(f"leaderboard: {args.name}: held-out accuracy {100 * result['accuracy']:.1f}% >= "
          f"{100 * args.target:.1f}% at step {result['step']}: {result['train_s']:.2f} s of "
          f"training (the log's step_ms summed), {result['wall_s']:.1f} s from launch; "
          f"flags: {flags}")
    load = os.getloadavg()[0]
    threads = flag_value(args.flags, "--threads", "0")
    if threads == "0":
        threads = f"{os.cpu_count()}*"  # the OpenMP default: every CPU
    ranks = flag_value(args.flags, "--ranks", "1")
    print(f"leaderboard: {cpu_name()}, {os.cpu_count()} CPUs, {threads} threads x {ranks} "
          f"rank(s), load average {load:.2f}")
    if args.board:
        new = not os.path.exists(args.board) or os.path.getsize(args.board) == 0
        with open(args.board, "a", encoding="utf-8") as f:
            if new:
                f.write(f"{BOARD_TITLE}{args.target:g} (exercises/leaderboard.sh)\n")
                f.write("# " + "\t".join(BOARD_COLUMNS) + "\n")
            f.write(f"{args.name}\t{result['train_s']:.6g}\t{args.target:g}\t{result['step']}\t"
                    f"{result['accuracy']:.4f}\t{datetime.date.today().isoformat()}\t{flags}\t"
                    f"{cpu_name()}\t{os.cpu_count()}\t{threads}\t{ranks}\t{load:.2f}\n")
        print_board(args.board, args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
