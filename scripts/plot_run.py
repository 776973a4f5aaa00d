#!/usr/bin/env python3
"""Plots a train_gpt run from its JSONL log (--log-jsonl): loss, gradient norm, loss scale,
memory per rank by category, and throughput (tokens/s and MFU when logged), one PNG each; a
--dtype fp8 run adds its casts (each role's amax, delayed scaling's scale beside the max of
its amax history, and the fractions saturated and flushed to zero).

    python3 scripts/plot_run.py RUN.jsonl [--out DIR] [--compare OTHER.jsonl --label A --other-label B]

--compare draws a second run's loss (and held-out accuracy, when logged) beside the first (the
main demo's single-device reference), each line named after its run (--label, --other-label)
in the legend, and prints, computed from the two logs, the largest loss difference over the common steps.
Matplotlib from Debian's python3-matplotlib (scripts/install_deps.sh). Prints each file it
wrote, one per line, and exits 2 with one line on a missing or malformed log.
"""
import argparse
import json
import os
import sys


def fail(msg):
    print(f"plot_run.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_log(path):
    if not os.path.isfile(path):
        fail(f"{path}: no such file")
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                fail(f"{path}:{n}: not JSON ({e.msg})")
            if "step" not in row or "loss" not in row:
                fail(f"{path}:{n}: a record without step and loss")
            rows.append(row)
    if not rows:
        fail(f"{path}: no records")
    return rows


def series(rows, key):
    pts = [(r["step"], r[key]) for r in rows if key in r and r[key] is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def loss_figure(plt, rows, label, other=None, other_label=None):
    """The loss of each run (left axis), its validation loss when logged (--val-data: the same
    axis), and its held-out accuracy when logged (right axis, the same run's colour family),
    every line named after its run in one legend."""
    fig, ax = plt.subplots(figsize=(7, 4.6))
    runs = [(rows, label, "-")] + ([(other, other_label, "--")] if other else [])
    ax2 = None
    for run_rows, name, style in runs:
        ax.plot(*series(run_rows, "loss"), linestyle=style, label=f"loss, {name}")
        val = series(run_rows, "val_loss")  # --val-data: held-out text, every --eval-every
        if val[0]:
            ax.plot(*val, marker="o", linestyle=style, color="tab:red" if style == "-" else "tab:pink",
                    label=f"validation loss, {name}")
        acc = series(run_rows, "heldout_accuracy")
        if acc[0]:
            ax2 = ax2 or ax.twinx()
            ax2.plot(acc[0], [100 * a for a in acc[1]], marker="o", linestyle=style,
                     color="tab:green" if style == "-" else "tab:olive",
                     label=f"held-out accuracy, {name}")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    handles, labels = ax.get_legend_handles_labels()
    if ax2:
        ax2.set_ylabel("held-out accuracy (%)")
        ax2.set_ylim(-2, 102)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    # Below the plot, on the upper axes: no curve runs under it, none is drawn over it.
    (ax2 or ax).legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.15),
                       ncol=2, fontsize="small")
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--out", default=None, help="directory for the PNGs (default: beside the log)")
    ap.add_argument("--compare", default=None, help="a second JSONL whose loss is drawn too")
    ap.add_argument("--label", default="run", help="the first run's name in the legend")
    ap.add_argument("--other-label", default="reference",
                    help="the --compare run's name in the legend")
    args = ap.parse_args()

    rows = read_log(args.log)
    other = read_log(args.compare) if args.compare else None
    from system_matplotlib import import_matplotlib  # scripts/, beside this file
    import_matplotlib(__file__, sys.argv[1:], "plot_run.py")
    import matplotlib.pyplot as plt

    out = args.out or os.path.dirname(os.path.abspath(args.log))
    os.makedirs(out, exist_ok=True)
    stem = os.path.splitext(os.path.basename(args.log))[0]
    written = []

    def save(fig, name):
        path = os.path.join(out, f"{stem}_{name}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)

    save(loss_figure(plt, rows, args.label, other, args.other_label), "loss")

    fig, ax = plt.subplots(figsize=(7, 4))
    steps, norms = series(rows, "grad_norm")
    ax.plot(steps, [n if n == n else float("nan") for n in norms])
    skipped = [r["step"] for r in rows if r.get("skipped")]
    for s in skipped:
        ax.axvline(s, color="tab:red", alpha=0.3)
    ax.set_xlabel("step")
    ax.set_ylabel("gradient norm (before clipping)")
    ax.set_yscale("log")
    save(fig, "grad_norm")

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(*series(rows, "loss_scale"))
    ax.set_xlabel("step")
    ax.set_ylabel("loss scale")
    ax.set_yscale("log", base=2)
    ax.set_title(f"{len(skipped)} skipped steps")
    save(fig, "loss_scale")

    # Memory: the last record's live bytes by category, per rank when the run had ranks.
    last = rows[-1]
    by_rank = last.get("mem_bytes_by_rank") or [last.get("mem_bytes", {})]
    cats = sorted({c for r in by_rank for c in r})
    fig, ax = plt.subplots(figsize=(7, 4))
    bottom = [0.0] * len(by_rank)
    for c in cats:
        vals = [r.get(c, 0) / 2**20 for r in by_rank]
        ax.bar(range(len(by_rank)), vals, bottom=bottom, label=c)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("rank")
    ax.set_ylabel("live MiB at the last step")
    ax.set_xticks(range(len(by_rank)))
    ax.legend(fontsize="small")
    save(fig, "memory")

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(*series(rows, "tokens_per_s"), label="tokens/s")
    ax.set_xlabel("step")
    ax.set_ylabel("tokens/s")
    mfu = series(rows, "mfu")
    if mfu[0]:
        ax2 = ax.twinx()
        ax2.plot(mfu[0], [100 * m for m in mfu[1]], color="tab:orange", label="MFU")
        ax2.set_ylabel("MFU (%)")
    save(fig, "throughput")

    fp8 = [r for r in rows if isinstance(r.get("fp8"), dict)]
    if fp8:
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
        steps = [r["step"] for r in fp8]
        for role in ("input", "weight", "grad"):
            top.plot(steps, [r["fp8"][role]["amax"] or float("nan") for r in fp8],
                     label=f"amax, {role}")
        if "scale_l0_input" in fp8[0]["fp8"]:
            top.plot(steps, [r["fp8"]["amax_history_max_l0_input"] or float("nan") for r in fp8],
                     "--", label="layer 0 input: max of its amax history")
            right = top.twinx()
            right.plot(steps, [r["fp8"]["scale_l0_input"] for r in fp8], ":", color="tab:red",
                       label="layer 0 input: delayed scale")
            right.set_yscale("log")
            right.set_ylabel("scale")
            right.legend(loc="lower right", fontsize="small")
        top.set_yscale("log")
        top.set_ylabel("amax (largest over the tensors)")
        top.set_title("FP8 casts, recipe " + fp8[0]["fp8"]["recipe"])
        top.legend(loc="upper right", fontsize="small")
        for role in ("input", "weight", "grad"):
            bottom.plot(steps, [100 * r["fp8"][role]["saturated_frac"] for r in fp8],
                        label=f"saturated, {role}")
            bottom.plot(steps, [100 * r["fp8"][role]["flushed_frac"] for r in fp8], "--",
                        label=f"flushed to zero, {role}")
        bottom.set_xlabel("step")
        bottom.set_ylabel("% of the values cast")
        bottom.legend(fontsize="x-small", ncol=2)
        save(fig, "fp8")

    if other:
        a = {r["step"]: r["loss"] for r in rows}
        b = {r["step"]: r["loss"] for r in other}
        common = sorted(set(a) & set(b))
        if common:
            worst = max(common, key=lambda s: abs(a[s] - b[s]))
            print(f"compared over {len(common)} steps: largest loss difference "
                  f"{abs(a[worst] - b[worst]):.4g} at step {worst} ({a[worst]:.4f} vs {b[worst]:.4f}); "
                  f"final loss {a[common[-1]]:.4f} vs {b[common[-1]]:.4f}")
    for p in written:
        print(p)


if __name__ == "__main__":
    main()
