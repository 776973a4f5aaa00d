#!/usr/bin/env python3
"""Draws each chapter's slide figure from the data its demo computes.

    python3 scripts/figures.py --out DIR [--bin-dir build/bin] [--only ch02,ch04]
                               [--ch08-jsonl FILE]

Every figure is drawn from numbers a program of this repository computes, never typed in:
the chapter demos' `--json FILE` (chapters 1-4), chapter 5's per-rank memory by ZeRO stage
(rank 0's ledger after the `ch05_zero` demo's run, parsed from its table, beside `mixpar-mem
--json` for the same parameter count, and the calculator at 7B),
`ch03_master_weights --fp8 --json` (delayed scaling's amax history and scale around an
activation spike, ch03_fp8_amax), `ch06_tensor_parallel --json` (the sharding map of one block;
and, for ch06_cp_balance, the ring's measured work per rank under each split and each
algorithm's bytes per layer), `ch07_pipeline --schedule S
--json` (the timelines), a train_gpt JSONL log (chapter 8; a short run is made when
--ch08-jsonl is not given) and `ch09_expert_parallel --json` (the tokens each expert chose,
step by step, with and without balancing; the dropped tokens by capacity factor; the ep
bytes of each dispatch beside their formulas). Each figure is written as DIR/chNN_<name>.svg
and .png.
Matplotlib comes from Debian's python3-matplotlib (scripts/install_deps.sh installs it).

Exit codes: 0 every figure written, 1 a program failed or wrote no data, 2 bad arguments
(a missing binary directory or program, an unknown chapter).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

CHAPTERS = ["ch01", "ch02", "ch03", "ch04", "ch05", "ch06", "ch07", "ch08", "ch09"]

# What each chapter's figure is called (the file names the READMEs embed).
NAMES = {
    "ch01": "ch01_number_lines",
    "ch02": "ch02_loss_scale",
    "ch03": "ch03_memory_bill",
    "ch04": "ch04_ring_and_overlap",
    "ch05": "ch05_zero_memory",
    "ch06": "ch06_sharding_map",
    "ch07": "ch07_schedules",
    "ch08": "ch08_training_run",
    "ch09": "ch09_load_balance",
}


class Failure(Exception):
    """A program the figure needs failed: exit code 1."""


def run(cmd, timeout=600):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise Failure("%s exited with %d: %s" % (" ".join(cmd), p.returncode, " | ".join(tail)))
    return p.stdout


def demo_json(bin_dir, tmp, program, args=()):
    # A fresh file each call: the demos refuse to replace an existing one without --overwrite.
    path = os.path.join(tmp, "%s-%d.json" % (program, len(os.listdir(tmp))))
    run([os.path.join(bin_dir, program), *args, "--json", path])
    with open(path) as f:
        return json.load(f)


def save(fig, out, chapter, name=None):
    base = os.path.join(out, name or NAMES[chapter])
    # A fixed date and creator keep the committed SVGs byte-stable between regenerations.
    fig.savefig(base + ".svg", metadata={"Date": None, "Creator": None})
    fig.savefig(base + ".png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return [base + ".svg", base + ".png"]


# ---- Chapter 1: each format's representable values on a log number line.

def fig_ch01(data):
    formats = data["formats"]
    fig, (top, low) = plt.subplots(2, 1, figsize=(10, 6.2), gridspec_kw={"height_ratios": [1, 1.15]})
    colours = {"fp32": "#4c72b0", "fp16": "#dd8452", "bf16": "#55a868", "e4m3": "#c44e52",
               "e5m2": "#8172b3"}
    for y, f in enumerate(reversed(formats)):
        c = colours.get(f["name"], "k")
        lo, mn, mx = math.log2(f["min_subnormal"]), math.log2(f["min_normal"]), math.log2(f["max"])
        top.plot([lo, mn], [y, y], color=c, lw=3, alpha=0.45, solid_capstyle="butt")
        top.plot([mn, mx], [y, y], color=c, lw=8, solid_capstyle="butt")
        top.text(mx + 2, y, "max %.5g" % f["max"], va="center", fontsize=8)
        top.text(lo - 2, y, "%s  2^%d" % (f["name"], round(lo)), va="center", ha="right",
                 fontsize=9)
    top.set_yticks([])
    top.set_xlim(-190, 175)
    top.set_xlabel("log2 |x|   (thin: subnormals, thick: normals; beyond max: overflow, "
                   "below the left end: zero)")
    top.set_title("Chapter 1: the range of each format (computed by format_info)")
    # Zoom: the 16- and 8-bit formats, FP8's values one tick each.
    shown = [f for f in formats if f["name"] in ("fp16", "bf16", "e4m3", "e5m2")]
    for y, f in enumerate(reversed(shown)):
        c = colours.get(f["name"], "k")
        if "values" in f:
            xs = [math.log2(v) for v in f["values"]]
            low.vlines(xs, y - 0.3, y + 0.3, color=c, lw=0.7)
        else:
            lo, mn = math.log2(f["min_subnormal"]), math.log2(f["min_normal"])
            low.plot([lo, mn], [y, y], color=c, lw=3, alpha=0.45, solid_capstyle="butt")
            low.plot([mn, min(math.log2(f["max"]), 20)], [y, y], color=c, lw=8,
                     solid_capstyle="butt")
        low.text(-26.5, y, f["name"], va="center", ha="right", fontsize=9)
        if f["name"] in ("fp16", "e4m3", "e5m2"):
            low.annotate("max %g" % f["max"], (math.log2(f["max"]), y + 0.32), fontsize=7,
                         ha="center", va="bottom")
    low.axvline(-24, color="grey", ls=":", lw=1)
    low.text(-24, len(shown) - 0.45, "2^-24: FP16's smallest subnormal", fontsize=7,
             color="grey", ha="left")
    low.set_xlim(-27, 20)
    low.set_yticks([])
    low.set_xlabel("log2 |x|   (one tick per FP8 value: 3 or 2 mantissa bits leave 8 or 4 "
                   "values per binade)")
    fig.tight_layout()
    return fig


# ---- Chapter 2: the dynamic loss scale, step by step, with the skipped steps.

def fig_ch02(data):
    rows = {(r["format"], r["scheme"]): r for r in data["rows"]}
    fig, ax = plt.subplots(figsize=(10, 4.6))
    styles = [(("f16", "dynamic"), "#dd8452", "FP16 dynamic (growth every %d clean steps)"
               % data["growth_interval"]),
              (("f16", "static 1024"), "#4c72b0", "FP16 static 1024"),
              (("f16", "static 2^40"), "#c44e52", "FP16 static 2^40 (every step overflows)")]
    for key, colour, label in styles:
        r = rows.get(key)
        if r is None:
            continue
        steps = list(range(len(r["scale"])))
        ys = [math.log2(s) for s in r["scale"]]
        ax.step(steps, ys, where="post", color=colour, label=label, lw=1.6)
        skipped = [i for i, s in enumerate(r["skipped"]) if s]
        if skipped and key[1] == "dynamic":
            ax.plot(skipped, [ys[i] for i in skipped], "x", color="k", ms=6,
                    label="skipped step (inf/NaN found, scale halved)")
    ax.set_xlabel("step")
    ax.set_ylabel("log2 of the loss scale S")
    ax.set_title("Chapter 2: the loss scale climbs to the overflow edge, backs off, climbs again")
    ax.legend(loc="center right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# ---- Chapter 3: the memory bill, measured by the ledger beside the formula.

def fig_ch03(data):
    cats = [("parameters", "16-bit (or FP32) parameters", "#4c72b0"),
            ("gradients", "gradients", "#dd8452"),
            ("fp32_grad_buffer", "FP32 gradient buffer (unscale)", "#f0b27a"),
            ("master_params", "FP32 master weights", "#55a868"),
            ("optimizer_state", "optimizer state (m, v)", "#8172b3")]
    rows = data["memory"]
    fig, (ax, act) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [3, 1.3]})
    xs, labels = [], []
    for i, r in enumerate(rows):
        for j, which in enumerate(("measured", "predicted")):
            x = i * 2.6 + j
            bottom = 0.0
            for key, name, colour in cats:
                v = r[which][key] / r["params"]
                ax.bar(x, v, bottom=bottom, color=colour, width=0.9,
                       label=name if (i == 0 and j == 0) else None,
                       hatch="//" if which == "predicted" else None, edgecolor="white")
                bottom += v
            ax.text(x, bottom + 0.2, "%g" % bottom, ha="center", fontsize=7)
        xs.append(i * 2.6 + 0.5)
        labels.append("%s\nledger | formula" % r["run"])
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("bytes per parameter")
    ax.set_title("Chapter 3: model states, measured (plain) vs mem::model_states (hatched)",
                 fontsize=10)
    ax.legend(fontsize=7, loc="upper right")
    names = [r["run"] for r in rows]
    m = [r["measured"]["activations"] / 1024 for r in rows]
    p = [r["predicted"]["activations"] / 1024 for r in rows]
    idx = list(range(len(rows)))
    act.barh([i + 0.2 for i in idx], m, height=0.4, color="#64b5cd", label="ledger")
    act.barh([i - 0.2 for i in idx], p, height=0.4, color="#64b5cd", hatch="//",
             edgecolor="white", label="B x (in + 2 hidden + out) x bytes")
    act.set_yticks(idx)
    act.set_yticklabels(names, fontsize=7)
    act.set_xlabel("activations, KiB (batch 64)")
    act.legend(fontsize=6.5, loc="lower right")
    fig.tight_layout()
    return fig


# ---- Chapter 3, last part: delayed scaling's amax history against the scale it chooses.

def fig_ch03_fp8(data):
    sp = data["fp8"]["stale_amax"]
    steps = sp["steps"]
    xs = list(range(len(steps)))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.2), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1.4]})
    top.semilogy(xs, [s["amax"] for s in steps], "o", ms=3, color="#4c72b0",
                 label="the tensor's own amax")
    # Step 0 has no history yet (Transformer Engine's initial scale 1): nothing to draw.
    top.semilogy(xs, [s["history_max"] or float("nan") for s in steps], "-", color="#dd8452",
                 label="max of the amax history (%d steps)" % sp["history"])
    top.set_ylabel("amax")
    right = top.twinx()
    right.semilogy(xs, [s["delayed_scale"] for s in steps], "--", color="#c44e52",
                   label="delayed scale = 448 / history max")
    right.semilogy(xs, [s["tensorwise_scale"] for s in steps], ":", color="#55a868",
                   label="tensorwise scale = 448 / own amax")
    right.set_ylabel("scale")
    lines = top.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    top.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="center right")
    top.set_title("Chapter 3, FP8: a 100x activation spike at step %d under delayed scaling"
                  % sp["spike_step"], fontsize=10)
    bottom.bar(xs, [s["delayed_saturated"] for s in steps], color="#c44e52",
               label="delayed: values saturated")
    bottom.bar(xs, [s["delayed_underflow"] for s in steps], bottom=[s["delayed_saturated"] for s in steps],
               color="#8172b3", label="delayed: values subnormal or flushed")
    bottom.set_xlabel("step")
    bottom.set_ylabel("values")
    bottom.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


# ---- Chapter 4: the ring's steps, and the DDP overlap timeline.

def fig_ch04(data):
    ring = data["ring"]
    n = ring["ranks"]
    fig, (ax, tl) = plt.subplots(2, 1, figsize=(11, 7.2), gridspec_kw={"height_ratios": [1, 1.2]})
    cols = []
    for e in ring["events"]:
        key = (0 if e["phase"] == "reduce-scatter" else 1, e["step"])
        if key not in cols:
            cols.append(key)
    cols.sort()
    cmap = plt.get_cmap("tab10")
    for e in ring["events"]:
        x = cols.index((0 if e["phase"] == "reduce-scatter" else 1, e["step"]))
        y = n - 1 - e["rank"]
        c = e["sent_chunk"]
        ax.add_patch(plt.Rectangle((x + 0.05, y - 0.4), 0.9, 0.8, color=cmap(c % 10), alpha=0.35))
        ax.text(x + 0.5, y + 0.1, "sends c%d -> rank %d" % (c, e["to"]), ha="center", fontsize=8)
        ax.text(x + 0.5, y - 0.22, "gets c%d from %d" % (e["got_chunk"], e["from"]), ha="center",
                fontsize=7, color="#444")
    ax.set_xlim(0, len(cols))
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xticks([i + 0.5 for i in range(len(cols))])
    ax.set_xticklabels(["%s\nstep %d" % ("reduce-scatter" if p == 0 else "all-gather", s)
                        for p, s in cols], fontsize=8)
    ax.set_yticks(range(n))
    ax.set_yticklabels(["rank %d" % (n - 1 - i) for i in range(n)])
    ax.set_title("Chapter 4: the ring all-reduce on %d ranks, chunk by chunk (colour = chunk)" % n)
    spans = data["timeline"]["spans"]
    t0 = min(s["start_us"] for s in spans)
    ranks = sorted({s["rank"] for s in spans})
    colours = {"compute": "#4c72b0", "comm": "#dd8452", "exposed": "#c44e52"}
    seen = set()
    for s in spans:
        row = s["rank"] * 2 + s["thread"]
        label = s["cat"] if s["cat"] not in seen else None
        seen.add(s["cat"])
        tl.broken_barh([((s["start_us"] - t0) / 1e3, s["dur_us"] / 1e3)], (row - 0.4, 0.8),
                       color=colours.get(s["cat"], "grey"), label=label)
    tl.set_yticks([r * 2 + t for r in ranks for t in (0, 1)])
    tl.set_yticklabels(["rank %d %s" % (r, "compute" if t == 0 else "comm thread")
                        for r in ranks for t in (0, 1)], fontsize=8)
    tl.invert_yaxis()
    tl.set_xlabel("ms (this machine's timings: the shape, not the numbers, is the lesson)")
    tl.set_title("DDP with 128 KiB buckets: all-reduces run on the communication thread "
                 "while backward goes on", fontsize=10)
    tl.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


# ---- Chapter 5: per-rank memory by ZeRO stage: a measured run's ledger beside the formula.

UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}


def ch05_ledger_rows(text):
    """Rank 0's rows of the ch05_zero demo's table '== 2.' (each rank's ledger after a real
    run): {(run name, N): {"P", "parameters", "gradients", "master_params", "optimizer_state",
    "total"}} in bytes. Every stage the demo bills appears (ZeRO-3 once the demo runs it)."""
    rows, inside = {}, False
    for line in text.split("\n"):
        if line.startswith("== "):
            inside = line.startswith("== 2.")
            continue
        cells = [c for c in line.strip().split("  ") if c.strip()]
        cells = [c.strip() for c in cells]
        if not inside or len(cells) != 9 or " N=" not in cells[0] or cells[1] != "0":
            continue
        name, n = cells[0].split(" N=")

        def nbytes(cell):
            value, unit = cell.split()
            return float(value) * UNITS[unit]
        rows[(name, int(n))] = {
            "P": int(cells[2]), "parameters": nbytes(cells[4]), "gradients": nbytes(cells[5]),
            "master_params": nbytes(cells[6]), "optimizer_state": nbytes(cells[7]),
            "total": nbytes(cells[8])}
    if not rows:
        raise Failure("ch05_zero printed no ledger table ('== 2.' with rank 0's rows)")
    return rows


def fig_ch05(bin_dir):
    cats = [("parameters", "parameters", "#4c72b0"), ("gradients", "gradients", "#dd8452"),
            ("master_params", "FP32 masters", "#55a868"),
            ("optimizer_state", "Adam m, v", "#8172b3")]
    stages = {"DDP": 0, "ZeRO-1": 1, "ZeRO-2": 2, "ZeRO-3": 3}
    mem = os.path.join(bin_dir, "mixpar-mem")

    def formula(params, stage, dp):
        return json.loads(run([mem, "--params", str(params), "--precision", "bf16",
                               "--zero-stage", str(stage), "--dp", str(dp), "--json"]))

    fig, (calc, led) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1, 1.3]})
    dp = 8
    for stage in range(4):
        bill = formula("7e9", stage, dp)
        bottom = 0.0
        for key, name, colour in cats:
            v = float(bill[key + "_bytes"]) / 1e9
            calc.bar(stage, v, bottom=bottom, color=colour, label=name if stage == 0 else None)
            bottom += v
        calc.text(stage, bottom + 1, "%.1f GB" % bottom, ha="center", fontsize=8)
    calc.set_xticks(range(4))
    calc.set_xticklabels(["0 (DDP)", "1\n(optimizer\nstate)", "2\n(+ gradients)",
                          "3\n(+ parameters)"], fontsize=8)
    calc.set_xlabel("ZeRO stage")
    calc.set_ylabel("GB per rank")
    calc.set_title("7B parameters, dp = %d: the formula (mixpar-mem)" % dp, fontsize=9)
    calc.legend(fontsize=7)

    # The measured side: rank 0's ledger after the demo's run of a small GPT on N ranks, each
    # stage beside mixpar-mem's bill of the same P. The ledger's gradients include the FP32
    # copy unscaling needs (4 bytes per owned element), which the ZeRO paper's formula omits.
    rows = ch05_ledger_rows(run([os.path.join(bin_dir, "ch05_zero"), "--bug", "none"]))
    n = max(k[1] for k in rows)
    runs = sorted((k for k in rows if k[1] == n and k[0] in stages), key=lambda k: stages[k[0]])
    xs, labels = [], []
    for i, key in enumerate(runs):
        row, stage = rows[key], stages[key[0]]
        bill = formula(row["P"], stage, n)
        for j, which in enumerate(("ledger", "formula")):
            x = i * 2.6 + j
            bottom = 0.0
            for cat, name, colour in cats:
                v = (row[cat] if which == "ledger" else float(bill[cat + "_bytes"])) / row["P"]
                led.bar(x, v, bottom=bottom, color=colour, width=0.9, edgecolor="white",
                        hatch="//" if which == "formula" else None)
                bottom += v
            led.text(x, bottom + 0.2, "%.2f" % bottom, ha="center", fontsize=7)
        xs.append(i * 2.6 + 0.5)
        labels.append("%s\nledger | formula" % key[0])
    missing = [name for name in stages if (name, n) not in rows]
    led.set_xticks(xs)
    led.set_xticklabels(labels, fontsize=8)
    led.set_ylabel("bytes per parameter, rank 0")
    led.set_title("measured: a %d-parameter GPT on %d ranks (ch05_zero),\nrank 0's ledger "
                  "(plain) beside the formula (hatched)%s" % (rows[runs[0]]["P"], n,
                  "; not run by the demo yet: %s" % ", ".join(missing) if missing else ""),
                  fontsize=9)
    fig.suptitle("Chapter 5: model states per rank by ZeRO stage, BF16 + FP32 AdamW "
                 "(the ledger's gradients add the FP32 copy: 4 B per owned element)",
                 fontsize=10)
    fig.tight_layout()
    return fig


def find_key(obj, key):
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            r = find_key(v, key)
            if r is not None:
                return r
    elif isinstance(obj, list):
        for v in obj:
            r = find_key(v, key)
            if r is not None:
                return r
    return None


# ---- Chapter 6: which tp rank holds which slice of one block's parameters.

def fig_ch06(data):
    params = data["parameters"]
    tp = data["tp"]
    fig, ax = plt.subplots(figsize=(10, 0.42 * len(params) + 1.4))
    cmap = plt.get_cmap("tab10")
    for y, p in enumerate(reversed(params)):
        split, groups = p["split"], max(1, p.get("column_groups", 1))
        if split == "replicated":
            for r in range(tp):  # every rank holds all of it: one band per rank
                ax.add_patch(plt.Rectangle((0, y - 0.35 + 0.7 * r / tp), 1, 0.7 / tp,
                                           color=cmap(r), alpha=0.3))
        else:
            for g in range(groups):  # c_attn: q | k | v, each split by heads
                for r in range(tp):
                    x0 = (g + r / tp) / groups
                    ax.add_patch(plt.Rectangle((x0, y - 0.35), 1 / (groups * tp), 0.7,
                                               color=cmap(r), alpha=0.65, ec="white"))
        ax.text(-0.02, y, "%s %s" % (p["name"], "x".join(str(d) for d in p["shape"])),
                ha="right", va="center", fontsize=8)
        held = "x".join(str(d) for d in p.get("held_shape", p["shape"]))
        ax.text(1.02, y, "%s (rank holds %s)" % (split, held), ha="left", va="center", fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.6, len(params) - 0.4)
    ax.set_yticks([])
    ax.set_xticks([])
    handles = [plt.Rectangle((0, 0), 1, 1, color=cmap(r), alpha=0.65) for r in range(tp)]
    ax.legend(handles, ["tp rank %d" % r for r in range(tp)], fontsize=8, loc="upper center",
              bbox_to_anchor=(0.5, -0.02), ncol=tp)
    ax.set_title("Chapter 6: make_gpt2_registry's split of the embedding, block 0 and ln_f over "
                 "tp = %d\n(columns: output columns, by heads for c_attn's q | k | v; rows: input "
                 "rows; vocab: embedding rows; bands: replicated)" % tp, fontsize=9)
    fig.subplots_adjust(left=0.32, right=0.78, top=0.9, bottom=0.08)
    return fig


# ---- Chapter 6, part 2: the causal work per cp rank, contiguous against zigzag, and the
# bytes each algorithm sends per layer.

def fig_ch06_cp(data):
    cp_data = data["context_parallel"]
    cp, T = cp_data["cp"], cp_data["seq_len"]
    cmap = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), gridspec_kw={"width_ratios": [1, 1, 1.1]})
    # Left, middle: which rank computes which (query chunk, key chunk) pair of the causal
    # T x T scores, each split's chunks drawn at their positions.
    for ax, split in zip(axes[:2], ["contiguous", "zigzag"]):
        held = cp_data["chunks"][split]
        owner = {}
        for r, chunks in enumerate(held):
            for begin, count in chunks:
                owner[(begin, count)] = r
        spans = sorted(owner)
        for qb, qc in spans:
            for kb, kc in spans:
                if kb > qb + qc - 1:
                    continue  # skipped: every key after every query
                diagonal = kb + kc - 1 > qb
                ax.add_patch(plt.Rectangle((kb, qb), kc, qc, color=cmap(owner[(qb, qc)]),
                                           alpha=0.35 if diagonal else 0.75, ec="white",
                                           hatch="//" if diagonal else None))
        scores = cp_data["scores_per_rank"][split]
        mean = sum(scores) / len(scores)
        ax.set_xlim(0, T)
        ax.set_ylim(T, 0)
        ax.set_aspect("equal")
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        ax.set_title("%s: max / mean work %.2f" % (split, max(scores) / mean), fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=cmap(r), alpha=0.75) for r in range(cp)]
    axes[1].legend(handles, ["cp rank %d" % r for r in range(cp)], fontsize=7, loc="upper right")
    # Right: bytes per rank and layer, forward + backward, by algorithm and cp.
    ax = axes[2]
    rows = cp_data["traffic_per_layer"]
    labels = ["%s\ncp %d" % (t["algorithm"], t["cp"]) for t in rows]
    fwd = [t["forward_bytes"] / 1024 for t in rows]
    bwd = [t["backward_bytes"] / 1024 for t in rows]
    x = range(len(rows))
    ax.bar(x, fwd, color=cmap(0), label="forward")
    ax.bar(x, bwd, bottom=fwd, color=cmap(1), label="backward")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("KiB each rank sends per layer (B 2, T %d, C 32, f32)" % T, fontsize=8)
    ax.legend(fontsize=8)
    ax.set_title("ring: (cp-1) 2BTC/cp forward; all-to-all: (cp-1)/cp 4BTC/cp", fontsize=9)
    fig.suptitle("Chapter 6, part 2: causal attention split over cp = %d ranks (measured by the "
                 "ring; hatched: diagonal blocks, masked)" % cp, fontsize=10)
    fig.tight_layout()
    return fig


# ---- Chapter 7: each schedule's Gantt chart with its bubble.

SCHEDULES = ["afab", "1f1b", "interleaved", "zb-h1"]


def ch07_timelines(bin_dir):
    timelines = []
    for s in SCHEDULES:
        args = ["--schedule", s, "--json"]
        if s == "interleaved":
            args += ["--virtual-stages", "2"]
        timelines.append((s, json.loads(run([os.path.join(bin_dir, "ch07_pipeline"), *args]))))
    return timelines


def fig_ch07(bin_dir):
    """One panel per schedule, all on one time axis: the time of one full stage's forward.
    The simulator counts an interleaved timeline in a chunk's forward, T_F / v (each rank's
    stage is cut into v chunks: schedule_simulator.h), so its times are divided by v here;
    drawn in its own unit, the schedule with the smallest bubble would look the longest."""
    timelines = ch07_timelines(bin_dir)
    fig, axes = plt.subplots(len(timelines), 1, figsize=(11, 2.1 * len(timelines)),
                             sharex=True)
    colours = {"F": "#4c72b0", "B": "#dd8452", "W": "#55a868"}
    longest = max(t["makespan"] / t["virtual_stages"] for _, t in timelines)
    for ax, (name, t) in zip(axes, timelines):
        unit = 1.0 / t["virtual_stages"]  # this timeline's time unit, in full-stage forwards
        for rank, actions in enumerate(t["ranks"]):
            for a in actions:
                words = a["action"].split()
                kind = "W" if words[0] == "W" else words[0][0]
                start, end = a["start"] * unit, a["end"] * unit
                chunk = words[2] if len(words) > 2 else ""
                ax.broken_barh([(start, end - start)], (rank - 0.4, 0.8),
                               color=colours.get(kind, "grey"), edgecolor="white",
                               alpha=0.6 if chunk == "c1" else 1.0)
                ax.text((start + end) / 2, rank, words[1][2:], ha="center", va="center",
                        fontsize=6 if t["virtual_stages"] == 1 else 5, color="white")
        ax.set_xlim(0, longest)
        ax.set_title("%s: step %g T_F, bubble %.1f%% (formula %s = %.1f%%), white = idle"
                     % (name, t["makespan"] * unit, 100 * t["bubble_fraction"], t["formula"],
                        100 * t["formula_value"]), fontsize=9, loc="left")
        ax.set_yticks(range(t["pp"]))
        ax.set_yticklabels(["rank %d" % r for r in range(t["pp"])], fontsize=7)
        ax.invert_yaxis()
    for ax in axes:
        ax.tick_params(labelbottom=True)  # every panel shows the shared time scale
    axes[-1].set_xlabel("time in T_F, one forward of a whole stage (blue F, orange B, green W;"
                        " numbers: micro-batch)\npale: an interleaved rank's second model "
                        "chunk; each chunk's forward takes T_F / 2")
    fig.suptitle("Chapter 7: pipeline schedules, p = 4 stages, m = 8 micro-batches, one time "
                 "axis (ch07_pipeline --schedule S --json)")
    fig.tight_layout()
    problems = time_axis_problems(fig)
    if problems:
        raise Failure("the schedules are not drawn on one time axis: " + "; ".join(problems))
    return fig


def time_axis_problems(fig):
    """What keeps a figure's panels from sharing one time axis, read from what was drawn: every
    panel must have the same x limits, and the first rank's bars the same total length (every
    schedule does the same work, m forwards and m backwards of one stage: a panel counted in
    another unit draws it longer or shorter). Empty when the panels agree."""
    panels = []
    for ax in fig.axes:
        busy = 0.0
        for coll in ax.collections:
            for path in coll.get_paths():
                xs = [v[0] for v in path.vertices]
                ys = [v[1] for v in path.vertices]
                if min(ys) < 0 < max(ys):  # the bars of rank 0, drawn on (-0.4, 0.4)
                    busy += max(xs) - min(xs)
        panels.append((ax.get_title(loc="left").split(":")[0], tuple(ax.get_xlim()), busy))
    problems = []
    for name, xlim, busy in panels[1:]:
        if max(abs(x - y) for x, y in zip(xlim, panels[0][1])) > 1e-9:
            problems.append("%s's x limits %s differ from %s's %s"
                            % (name, xlim, panels[0][0], panels[0][1]))
        if abs(busy - panels[0][2]) > 1e-6 * max(1.0, panels[0][2]):
            problems.append("%s's rank 0 is busy for %g, %s's for %g: another time unit"
                            % (name, busy, panels[0][0], panels[0][2]))
    return problems


# ---- Chapter 8: loss, gradient norm, loss scale and throughput of a training run.

def ch08_records(bin_dir, tmp, jsonl):
    if jsonl is None:
        jsonl = os.path.join(tmp, "train.jsonl")
        run([os.path.join(bin_dir, "train_gpt"), "--steps", "40", "--dtype", "fp16",
             "--threads", "1", "--eval-every", "0", "--log-jsonl", jsonl], timeout=900)
    recs = []
    with open(jsonl) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                if "step" in r and "loss" in r:
                    recs.append(r)
    if not recs:
        raise Failure("%s holds no step records" % jsonl)
    return recs


def fig_ch08(recs):
    steps = [r["step"] for r in recs]
    fig, axes = plt.subplots(2, 2, figsize=(11, 6))
    panels = [("loss", "training loss", False), ("grad_norm", "gradient norm", True),
              ("loss_scale", "loss scale", True), ("tokens_per_s", "tokens / s (this machine)",
                                                  False)]
    for ax, (key, title, log) in zip(axes.flat, panels):
        ys = [r.get(key) for r in recs]
        ax.plot(steps, [y if y is not None else float("nan") for y in ys], lw=1.3)
        skipped = [r["step"] for r in recs if r.get("skipped")]
        if skipped and key == "loss_scale":
            ax.plot(skipped, [r["loss_scale"] for r in recs if r.get("skipped")], "x", color="k",
                    label="skipped step")
            ax.legend(fontsize=8)
        if log:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("step")
    fig.suptitle("Chapter 8: a train_gpt run")
    fig.tight_layout()
    return fig


# ---- Chapter 9: router collapse against balancing, capacity drops, the ep bytes.

def fig_ch09(data):
    """The tokens each expert chose at every training step, one panel per balancing."""
    lb = data["load_balancing"]
    runs = lb["runs"]
    E = lb["experts"]
    titles = {"none": "no balancing",
              "aux loss": "Switch aux loss, alpha %g",
              "expert bias": "DeepSeek-V3 expert bias, gamma %g"}
    fig, axes = plt.subplots(1, len(runs), figsize=(12, 3.9), sharey=True)
    cmap = plt.get_cmap("tab10")
    for ax, r in zip(axes, runs):
        counts = r["tokens_per_expert"]
        if not counts:
            raise Failure("no steps in the load-balancing run '%s'" % r["balancing"])
        tokens = sum(counts[0])
        steps = list(range(1, len(counts) + 1))
        for e in range(E):
            ax.plot(steps, [c[e] for c in counts], color=cmap(e), lw=1.4, label="expert %d" % e)
        ax.axhline(tokens / E, color="grey", ls=":", lw=1)
        largest = max(counts[-1]) / tokens
        name = titles.get(r["balancing"], r["balancing"])
        if "%g" in name:
            name = name % r["coefficient"]
        ax.set_title("%s\nlargest share after %d steps: %.1f%%" % (name, len(counts),
                                                                    100 * largest), fontsize=9)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("tokens routed to the expert (of %d)" % tokens)
    axes[0].text(len(counts), tokens / E, "balanced: %g " % (tokens / E), fontsize=7,
                 color="grey", ha="right", va="bottom")
    axes[-1].legend(fontsize=7, loc="upper right")
    fig.suptitle("Chapter 9: top-1 routing over E = %d experts collapses onto one without "
                 "balancing (ch09_expert_parallel --json)" % E, fontsize=10)
    fig.tight_layout()
    return fig


def fig_ch09_capacity(data):
    """The fraction of assignments dropped, and the output's error, by capacity factor."""
    cap = data["capacity"]
    sweep = cap["sweep"]
    policies = []
    for p in sweep:
        if p["policy"] not in policies:
            policies.append(p["policy"])
    fig, (drop, err) = plt.subplots(1, 2, figsize=(11, 4))
    styles = {"probability": ("o-", "#4c72b0"), "position": ("s--", "#dd8452")}
    for policy in policies:
        rows = [p for p in sweep if p["policy"] == policy]
        xs = [p["capacity_factor"] for p in rows]
        marker, colour = styles.get(policy, ("^-", "k"))
        drop.plot(xs, [p["dropped"] / p["assignments"] for p in rows], marker, color=colour,
                  ms=4, label="drops the lowest %s" % policy if policy == "probability"
                  else "drops the latest tokens (%s)" % policy)
        err.plot(xs, [p["output_error"] for p in rows], marker, color=colour, ms=4,
                 label=policy)
    loads = cap["loads_without_limit"]
    fair = cap["tokens"] * cap["top_k"] / cap["experts"]
    # Without a limit the busiest expert gets max(loads): from that factor on, nothing drops.
    for ax in (drop, err):
        ax.axvline(max(loads) / fair, color="grey", ls=":", lw=1)
        ax.set_xlabel("capacity factor (capacity = factor x T k / E, T %d, E %d, k %d)"
                      % (cap["tokens"], cap["experts"], cap["top_k"]), fontsize=8)
        ax.grid(alpha=0.3)
    drop.text(max(loads) / fair, 0.5, " busiest expert's load\n %d = %.2f x the fair share"
              % (max(loads), max(loads) / fair), fontsize=7, color="grey")
    drop.set_ylabel("dropped assignments / all (top-1: tokens)")
    drop.set_title("loads without a limit: %s" % ", ".join(str(n) for n in loads), fontsize=9)
    drop.legend(fontsize=7)
    err.set_ylabel("||y - y without drops|| / ||y without drops||")
    err.set_title("what dropping costs the layer's output, by drop policy", fontsize=9)
    err.legend(fontsize=7)
    fig.suptitle("Chapter 9: tokens over an expert's capacity are dropped and pass through on "
                 "the residual (ch09_expert_parallel --json)", fontsize=10)
    fig.tight_layout()
    return fig


def ch09_bytes_problems(ep_data):
    """Where a run's measured bytes differ from its formula (the figure draws both as one)."""
    problems = []
    for r in ep_data["runs"]:
        for rank, (m, f) in enumerate(zip(r["bytes_sent"], r["formula_bytes"])):
            if m != f:
                problems.append("ep %d %s rank %d sent %d bytes, the formula says %d"
                                % (r["ep"], r["dispatch"], rank, m, f))
    return problems


def fig_ch09_dispatch(data):
    """Bytes each rank sends over the ep group in one forward and backward, by ep size."""
    ep_data = data["expert_parallel_bytes"]
    problems = ch09_bytes_problems(ep_data)
    if problems:
        raise Failure("; ".join(problems))
    runs = ep_data["runs"]
    eps = sorted({r["ep"] for r in runs})
    dispatches = ["all-to-all", "all-gather"]
    colours = {"all-to-all": "#4c72b0", "all-gather": "#dd8452"}
    fig, ax = plt.subplots(figsize=(9, 4.4))
    group = 0.4  # each dispatch's share of an ep's slot; one thin bar per rank inside it
    labelled = set()
    for j, d in enumerate(dispatches):
        for i, ep in enumerate(eps):
            r = next((r for r in runs if r["ep"] == ep and r["dispatch"] == d), None)
            if r is None:
                continue
            n = len(r["bytes_sent"])
            xs = [i + (j - 1) * group + (rank + 0.5) * group / n for rank in range(n)]
            ax.bar(xs, [b / 1024 for b in r["bytes_sent"]], width=group / n * 0.9,
                   color=colours[d], label=None if d in labelled else
                   "%s, measured (one bar per rank)" % d)
            ax.plot(xs, [b / 1024 for b in r["formula_bytes"]], "_", color="k", ms=9, mew=1.5,
                    label=None if "formula" in labelled else "its formula")
            labelled.update((d, "formula"))
            if all(b == 0 for b in r["bytes_sent"]):
                ax.text(sum(xs) / n, 0.5, "every expert local:\nnothing sent", ha="center",
                        fontsize=7)
    T, C, k = ep_data["tokens_per_rank"], ep_data["d_model"], ep_data["top_k"]
    ax.set_xticks(range(len(eps)))
    ax.set_xticklabels(["ep %d" % ep for ep in eps])
    ax.set_ylabel("KiB each rank sends over the ep group\n(one forward and backward)")
    ax.set_title("all-to-all: E/ep counts, then each row that crosses ranks 4 times (x, y, dy, dx);"
                 "\nall-gather: 16 (ep - 1) T (C + k) bytes whatever the routing "
                 "(T %d, C %d, k %d, E %d, dp %d)" % (T, C, k, ep_data["experts"], ep_data["dp"]),
                 fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3, axis="y")
    fig.suptitle("Chapter 9: the bytes of expert-parallel dispatch, measured by the communicator "
                 "(ch09_expert_parallel --json)", fontsize=10)
    fig.tight_layout()
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder the SVG and PNG files go into")
    # The repository's build/bin by default, wherever the script is run from.
    repo_bin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin")
    ap.add_argument("--bin-dir", default=os.path.normpath(repo_bin),
                    help="where the demos are (default: build/bin of this repository)")
    ap.add_argument("--only", default="", help="comma-separated chapters, e.g. ch02,ch04")
    ap.add_argument("--ch08-jsonl", default=None, help="a train_gpt --log-jsonl file to plot")
    a = ap.parse_args()
    chapters = [c for c in a.only.split(",") if c] or CHAPTERS
    for c in chapters:
        if c not in CHAPTERS:
            print("figures.py: unknown chapter '%s' (one of %s)" % (c, ", ".join(CHAPTERS)),
                  file=sys.stderr)
            return 2
    if not os.path.isdir(a.bin_dir):
        print("figures.py: --bin-dir '%s' is not a directory (build first)" % a.bin_dir,
              file=sys.stderr)
        return 2
    if a.ch08_jsonl is not None and not os.path.isfile(a.ch08_jsonl):
        print("figures.py: --ch08-jsonl '%s' does not exist" % a.ch08_jsonl, file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    global plt
    from system_matplotlib import import_matplotlib  # scripts/, beside this file
    matplotlib = import_matplotlib(__file__, sys.argv[1:], "figures.py")
    matplotlib.rcParams["svg.hashsalt"] = "mixpar"  # stable ids in the SVG files
    matplotlib.rcParams["svg.fonttype"] = "none"    # text stays text: small, searchable SVGs
    import matplotlib.pyplot as plt  # noqa: F401 (module-level name used by the figures)

    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for c in chapters:
            try:
                if c == "ch01":
                    fig = fig_ch01(demo_json(a.bin_dir, tmp, "ch01_fp_formats"))
                elif c == "ch02":
                    fig = fig_ch02(demo_json(a.bin_dir, tmp, "ch02_loss_scaling"))
                elif c == "ch03":
                    fig = fig_ch03(demo_json(a.bin_dir, tmp, "ch03_master_weights"))
                    fp8 = fig_ch03_fp8(demo_json(a.bin_dir, tmp, "ch03_master_weights",
                                                 ["--fp8"]))
                    for path in save(fp8, a.out, c, "ch03_fp8_amax"):
                        print("wrote", path)
                elif c == "ch04":
                    fig = fig_ch04(demo_json(a.bin_dir, tmp, "ch04_ddp", ["--bug", "none"]))
                elif c == "ch05":
                    fig = fig_ch05(a.bin_dir)
                elif c == "ch06":
                    data = demo_json(a.bin_dir, tmp, "ch06_tensor_parallel", ["--bug", "none"])
                    fig = fig_ch06(data)
                    # Part 2's figure beside the sharding map.
                    for path in save(fig_ch06_cp(data), a.out, c, "ch06_cp_balance"):
                        print("wrote", path)
                elif c == "ch07":
                    fig = fig_ch07(a.bin_dir)
                elif c == "ch09":
                    data = demo_json(a.bin_dir, tmp, "ch09_expert_parallel", ["--bug", "none"])
                    fig = fig_ch09(data)
                    for extra, name in ((fig_ch09_capacity, "ch09_capacity_drops"),
                                        (fig_ch09_dispatch, "ch09_dispatch_bytes")):
                        for path in save(extra(data), a.out, c, name):
                            print("wrote", path)
                else:
                    fig = fig_ch08(ch08_records(a.bin_dir, tmp, a.ch08_jsonl))
                for path in save(fig, a.out, c):
                    print("wrote", path)
            except (Failure, OSError, KeyError, ValueError, subprocess.TimeoutExpired) as e:
                print("figures.py: %s: %s" % (c, e), file=sys.stderr)
                failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
