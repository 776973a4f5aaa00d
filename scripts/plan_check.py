#!/usr/bin/env python3
"""mixpar-plan's predictions against train_gpt's measured step times on this machine.

Calibrates this machine (mixpar-plan --calibrate), asks mixpar-plan for every layout of
--ranks rank threads of a small model on the built-in addition data, runs train_gpt with each
for --steps steps, takes the median step_ms of the steps after --warmup from its JSONL, and
prints per layout the predicted and measured step time and the error, then the Spearman rank
correlation and whether the predicted best is within 10% of the measured best. Timing on a
shared machine varies with its load: /proc/loadavg is printed before and after.
--layouts N keeps N layouts spread over the ranking (the ctest's quick run); the check then
asserts only that the pipeline runs and its numbers are finite, never a timing target.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def ranks_of(values):
    """Average ranks (1-based), ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a, b):
    """Pearson correlation of the ranks (Spearman's rho with ties)."""
    ra, rb = ranks_of(a), ranks_of(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return num / den if den > 0 else float("nan")


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"plan_check: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default="build/bin")
    ap.add_argument("--out", required=True, help="directory for the calibration, plan and logs")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--n-head", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4, help="micro-batch size b")
    ap.add_argument("--global-batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--layouts", type=int, default=0, help="keep N layouts (0: all)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    plan = os.path.join(args.bin_dir, "mixpar-plan")
    train = os.path.join(args.bin_dir, "train_gpt")
    print(f"load before: {loadavg()}")
    cal = os.path.join(args.out, "this-machine.json")
    print(run([plan, "--calibrate", "--devices", str(args.ranks), "--calibration", cal,
               "--overwrite"]), end="")
    plan_json = os.path.join(args.out, "plan.json")
    print(run([plan, "--cluster", "this-machine", "--calibration", cal,
               "--n-layer", str(args.n_layer), "--n-embd", str(args.n_embd),
               "--n-head", str(args.n_head), "--vocab-size", "256", "--seq", str(args.seq),
               "--global-batch", str(args.global_batch), "--dtypes", "fp32", "--zero-stages", "0",
               "--recompute", "none", "--micro-batch-sizes", str(args.batch), "--schedules",
               "1f1b", "--top", "3", "--json", plan_json, "--overwrite"]), end="")
    with open(plan_json) as f:
        layouts = json.load(f)["layouts"]
    if args.layouts and len(layouts) > args.layouts:
        step = (len(layouts) - 1) / (args.layouts - 1) if args.layouts > 1 else 0
        layouts = [layouts[round(i * step)] for i in range(args.layouts)]
    rows = []
    for i, l in enumerate(layouts):
        name = f"dp{l['dp']}_tp{l['tp']}_pp{l['pp']}_cp{l['cp']}"
        if l.get("sequence_parallel"):
            name += "_sp"
        log = os.path.join(args.out, name + ".jsonl")
        cmd = [train, "--n-layer", str(args.n_layer), "--n-embd", str(args.n_embd),
               "--n-head", str(args.n_head), "--n-positions", str(args.seq), "--seq",
               str(args.seq), "--batch", str(l["micro_batch"]), "--grad-accum",
               str(l["micro_batches"]), "--ranks", str(args.ranks), "--dp", str(l["dp"]),
               "--tp", str(l["tp"]), "--pp", str(l["pp"]), "--cp", str(l["cp"]), "--steps",
               str(args.steps), "--log-jsonl", log, "--overwrite", "--print-every",
               str(args.steps)]
        if l.get("sequence_parallel"):
            cmd.append("--sequence-parallel")
        run(cmd)
        with open(log) as f:
            steps = [json.loads(line) for line in f if line.strip()]
        times = [s["step_ms"] / 1e3 for s in steps if "step_ms" in s and s["step"] > args.warmup]
        if not times:
            sys.exit(f"plan_check: {name}: no step after the warm-up in {log}")
        rows.append((name, l["step_s"], statistics.median(times)))
        print(f"  ran {name}: {len(times)} steps timed", flush=True)
    print(f"load after: {loadavg()}")
    print(f"{'layout':<22} {'predicted s':>12} {'measured s':>12} {'error':>8}")
    for name, p, m in rows:
        print(f"{name:<22} {p:12.4f} {m:12.4f} {100 * (p - m) / m:+7.1f}%")
    for name, p, m in rows:
        if not (math.isfinite(p) and p > 0 and math.isfinite(m) and m > 0):
            sys.exit(f"plan_check: {name}: a step time that is not a positive number")
    pred = [p for _, p, _ in rows]
    meas = [m for _, _, m in rows]
    rho = spearman(pred, meas) if len(rows) > 1 else float("nan")
    best_pred = min(range(len(rows)), key=lambda i: pred[i])
    best_meas = min(meas)
    within = meas[best_pred] <= 1.10 * best_meas
    print(f"Spearman rank correlation {rho:.3f} over {len(rows)} layouts (target >= 0.9)")
    print(f"predicted best {rows[best_pred][0]}: measured {meas[best_pred]:.4f} s, measured best "
          f"{best_meas:.4f} s: {'within' if within else 'NOT within'} 10%")
    mean_abs = statistics.fmean(abs(p - m) / m for _, p, m in rows)
    print(f"mean absolute error {100 * mean_abs:.1f}%")


if __name__ == "__main__":
    main()
