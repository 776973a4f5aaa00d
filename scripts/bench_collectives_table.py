#!/usr/bin/env python3
"""The markdown block of scripts/bench_collectives.sh, from bench_collectives' CSV lines.

  bench_collectives_table.py --dir DIR --cpu .. --cores .. --load .. --mpi-version .. --command ..
      prints chapter 4's README block: our busbw over Open MPI's (at its best) per op, rank
      count and implementation at a few sizes and at the lowest, Open MPI's configurations,
      the alpha-beta model fitted to every size, and the targets' verdicts.
  ... --part full
      prints ch04_ddp/PERFORMANCE.md's block: per op, every size x {OpenMPI, ring, local}
      busbw and latency on 2 and 4 ranks with the ratios, and the switch points.
  bench_collectives_table.py --splice FILE BLOCK.md
      replaces what lies between FILE's markers of the block's kind with the block.

The alpha-beta model T(n) = alpha + n * beta (Hockney's: a fixed cost per call plus a cost per
byte, docs/REFERENCE.md) is fitted by least squares on the relative error,
sum(((alpha + beta n_i) - T_i) / T_i)^2, so the microsecond calls weigh as much as the
millisecond ones: an absolute least squares would fit the largest sizes only and leave alpha to
their noise.
"""
import argparse
import csv
import glob
import math
import os
import re
import sys

BEGIN = "<!-- bench_collectives:begin -->"
END = "<!-- bench_collectives:end -->"
FULL_BEGIN = "<!-- bench_collectives_full:begin -->"
FULL_END = "<!-- bench_collectives_full:end -->"
# The sizes the README's summary shows (the lowest ratio over every size beside them).
SUMMARY_SIZES = [8, 4 << 10, 64 << 10, 1 << 20, 64 << 20, 256 << 20]
OPS = ["all-reduce", "reduce-scatter", "all-gather", "all-to-all", "sendrecv"]
IMPLS = [("mpi", "OpenMPI"), ("ring", "ring"), ("local", "local")]


def size_name(b):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale and b % scale == 0:
            return "%d %s" % (b // scale, unit)
    return "%d B" % b


def bytes_name(b):
    """An approximate size: 659 KiB, 1.5 MiB."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return "%s %s" % (num(b / scale), unit)
    return "%d B" % b


def num(x):
    if x >= 100:
        return "%.0f" % x
    if x >= 10:
        return "%.1f" % x
    if x >= 1:
        return "%.2f" % x
    return "%.2g" % x


def read(directory):
    """{(impl, op, ranks, bytes): row}: each implementation's fastest round per key, and for
    Open MPI the configuration that is fastest over the op's whole sweep on that rank count
    (the geometric mean of its latencies), in every cell of the op. A configuration is a
    setting of a whole run; taking the fastest configuration cell by cell would compare our
    best round against the best of three configurations' rounds, most of which run the same
    code for that op (sm-coll changes only collectives, vader-copy-in-out only large copies):
    a minimum over more samples of the same noise."""
    best = {}  # (impl, config, op, ranks, bytes) -> the fastest round's row
    for path in sorted(glob.glob(os.path.join(directory, "*.csv"))):
        base = os.path.basename(path)[:-4]
        config = base.split("_", 1)[1].rsplit("-", 1)[0] if base.startswith("mpi_") else ""
        with open(path) as f:
            for r in csv.DictReader(f):
                r["config"] = config
                for k in ("ranks", "bytes", "actual_bytes", "calls"):
                    r[k] = int(r[k])
                for k in ("lat_us_median", "lat_us_min", "lat_us_max", "algbw_GBps", "busbw_GBps"):
                    r[k] = float(r[k])
                key = (r["impl"], config, r["op"], r["ranks"], r["bytes"])
                if key not in best or r["lat_us_median"] < best[key]["lat_us_median"]:
                    best[key] = r
    rows = {}
    mpi = {}  # (op, ranks) -> {config: [rows]}
    for (impl, config, op, n, b), r in best.items():
        if impl == "mpi":
            mpi.setdefault((op, n), {}).setdefault(config, []).append(r)
        else:
            rows[(impl, op, n, b)] = r
    for (op, n), configs in mpi.items():
        sizes = set.intersection(*({r["bytes"] for r in rs} for rs in configs.values()))

        def score(config):
            rs = [r for r in configs[config] if r["bytes"] in sizes]
            return sum(math.log(r["lat_us_median"]) for r in rs) / max(1, len(rs))
        chosen = min(sorted(configs), key=score)
        for r in configs[chosen]:
            rows[("mpi", op, n, r["bytes"])] = r
    return rows


def fit(points):
    """alpha (s), beta (s/byte) minimising the relative squared error; points: (bytes, s)."""
    # Weighted normal equations with w = 1/T^2.
    s0 = s1 = s2 = t0 = t1 = 0.0
    for n, t in points:
        w = 1.0 / (t * t)
        s0 += w
        s1 += w * n
        s2 += w * n * n
        t0 += w * t
        t1 += w * n * t
    det = s0 * s2 - s1 * s1
    if det == 0:
        return None
    alpha = (t0 * s2 - s1 * t1) / det
    beta = (s0 * t1 - s1 * t0) / det
    return alpha, beta


def header(a):
    """What was measured, where and how: the first paragraph of both blocks."""
    text = ("Measured by `%s` (bench/bench_collectives.cpp), f32, on %s, %s cores; "
            "load average (1, 5, 15 min) %s during the run; %s. Each cell: the median "
            "of 5 repetitions of at least 10 ms each%s. OpenMPI: of the configurations the "
            "script runs, the fastest over each op's sweep. Ratios: our busbw / OpenMPI's "
            "(above 1: faster)." % (
                a.command, a.cpu, a.cores, a.load, a.mpi_version,
                ", the lowest such median of %s rounds run one after another (ours and "
                "OpenMPI's alike)" % a.rounds if a.rounds and a.rounds != "1" else ""))
    if a.small_rounds and a.small_rounds != "0":
        text += (" Sizes up to %s, which take milliseconds where the host's regime (below) "
                 "changes every few seconds, ran %s rounds more, every implementation and "
                 "configuration alike, and take the lowest of all their rounds." % (
                     size_name(int(a.small_max)), a.small_rounds))
    if a.probe:
        text += (" Each run, ours and OpenMPI's, started when two threads' cache-line round "
                 "trip (`bench_collectives --probe`) read within 3x of the fastest of the "
                 "30 readings before it (the fastest of the whole run: %s us; the host "
                 "moves this machine's virtual CPUs between cores that share a cache and "
                 "cores that do not: ch04_ddp/PERFORMANCE.md, \"Trips between cores\"); the "
                 "runs started at %s us." % (a.probe, a.probes or "?"))
    text += (" Our rank threads are bound to the cores round-robin (`--bind`: rank r on core "
             "r mod cores), as mpirun binds its 2 processes by default and, in the bind-cyclic "
             "configuration, its 4 on 2 cores too (which by default it leaves unbound).")
    return text


def summary_table(rows):
    """Per op, rank count and implementation: the ratio at SUMMARY_SIZES and the lowest."""
    ranks = sorted({k[2] for k in rows})
    sizes = sorted({k[3] for k in rows})
    shown = [b for b in SUMMARY_SIZES if b in sizes]
    head = ["op", "ranks", "impl"] + [size_name(b) for b in shown] + ["lowest (size)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for op in OPS:
        for n in ranks:
            for impl, name in IMPLS[1:]:
                qs = [(ratio(rows, impl, op, n, b), b) for b in sizes]
                qs = [(q, b) for q, b in qs if q is not None]
                if not qs:
                    continue
                at = dict((b, q) for q, b in qs)
                q, b = min(qs)
                out.append("| " + " | ".join(
                    [op, str(n), name] + ["%.2f" % at[s] if s in at else "-" for s in shown] +
                    ["%.2f (%s)" % (q, size_name(b))]) + " |")
    out.append("")
    return out


def op_tables(rows):
    """Per op: every size x {OpenMPI, ring, local} busbw (latency) on each rank count."""
    out = []
    ranks = sorted({k[2] for k in rows})
    sizes = sorted({k[3] for k in rows})
    for op in OPS:
        if not any(k[1] == op for k in rows):
            continue
        impls = [(i, name) for i, name in IMPLS if any(k[0] == i and k[1] == op for k in rows)]
        head = ["%s" % op]
        for n in ranks:
            head += ["%s %d" % (name, n) for _, name in impls]
            head += ["%s/OpenMPI %d" % (name, n) for i, name in impls if i != "mpi"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for b in sizes:
            cells = [size_name(b)]
            for n in ranks:
                mpi = rows.get(("mpi", op, n, b))
                for i, _ in impls:
                    r = rows.get((i, op, n, b))
                    cells.append("%s (%s us)" % (num(r["busbw_GBps"]), num(r["lat_us_median"]))
                                 if r else "-")
                for i, _ in impls:
                    if i == "mpi":
                        continue
                    r = rows.get((i, op, n, b))
                    cells.append("%.2f" % (mpi["lat_us_median"] / r["lat_us_median"])
                                 if r and mpi else "-")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return out


def fit_table(rows):
    ranks = sorted({k[2] for k in rows})
    out = ["The alpha-beta model T(n) = alpha + n beta fitted to the medians at every size "
           "(least squares on the relative error): alpha is the fixed cost of a call, 1/beta "
           "the algorithm bandwidth it tends to, n_1/2 = alpha/beta the size at which half the "
           "time is the fixed cost.", "",
           "| op | ranks | impl | alpha (us) | 1/beta (GB/s) | n_1/2 |",
           "|---|---|---|---|---|---|"]
    for op in OPS:
        for n in ranks:
            for i, name in IMPLS:
                pts = [(r["actual_bytes"], r["lat_us_median"] * 1e-6)
                       for k, r in sorted(rows.items()) if k[:3] == (i, op, n)]
                if len(pts) < 2:
                    continue
                f = fit(pts)
                if not f or f[1] <= 0:
                    continue
                alpha, beta = f
                out.append("| %s | %d | %s | %s | %s | %s |" % (
                    op, n, name, num(alpha * 1e6), num(1 / beta / 1e9),
                    bytes_name(alpha / beta) if alpha > 0 else "-"))
    out.append("")
    return out


def configurations(rows):
    chosen = {}
    for k, r in sorted(rows.items()):
        if k[0] == "mpi":
            chosen[(k[1], k[2])] = r["config"]
    if not chosen:
        return []
    return ["OpenMPI's configuration, the fastest over each op's sweep (geometric mean of "
            "its latencies) on each rank count: " +
            "; ".join("%s %d ranks %s" % (op, n, c) for (op, n), c in
                      sorted(chosen.items(), key=lambda x: (OPS.index(x[0][0]), x[0][1])))
            + ".", ""]


def block(rows, a):
    """Chapter 4's README block: the ratios, the fit and the targets."""
    out = [BEGIN, "", header(a), ""]
    sizes = sorted({k[3] for k in rows})
    out.append("Our busbw over OpenMPI's at some of the sizes, and the lowest over all %d sizes "
               "measured (%s to %s); every size with busbw and latency: "
               "[PERFORMANCE.md](PERFORMANCE.md#the-collectives-at-every-size)." % (
                   len(sizes), size_name(sizes[0]), size_name(sizes[-1])))
    out.append("")
    out += summary_table(rows)
    out += configurations(rows)
    out += fit_table(rows)
    out += targets_block(rows)
    out.append(END)
    return "\n".join(out) + "\n"


def full_block(rows, a):
    """PERFORMANCE.md's block: every cell, and the switch points."""
    out = [FULL_BEGIN, "", header(a) + " Each cell: busbw in GB/s (nccl-tests' convention) "
           "and the latency per call in microseconds.", ""]
    out += op_tables(rows)
    out += configurations(rows)
    switch = read(os.path.join(a.dir, "switch")) if os.path.isdir(os.path.join(a.dir, "switch")) else {}
    if switch:
        out += switch_block(switch)
    out.append(FULL_END)
    return "\n".join(out) + "\n"


# The targets this table is measured against (ch04_ddp/README.md): ring and local busbw >=
# OpenMPI's at every size and op on every rank count; the 2-rank 4 KiB all-reduce within 2x of
# OpenMPI's latency; all-reduce at LARGE bytes and above >= 2x OpenMPI's busbw (the large
# sizes where the project led 3-5x before the small-message work: 64 MiB and up).
LARGE = 64 << 20


def ratio(rows, impl, op, n, b):
    """OpenMPI's latency over ours (= our busbw / OpenMPI's), None where either is missing."""
    r, mpi = rows.get((impl, op, n, b)), rows.get(("mpi", op, n, b))
    return mpi["lat_us_median"] / r["lat_us_median"] if r and mpi else None


def targets_block(rows):
    """Each target with its verdict, computed from the cells above."""
    ranks = sorted({k[2] for k in rows})
    sizes = sorted({k[3] for k in rows})
    out = ["Targets, from every cell measured:", ""]
    short = []
    for op in OPS:
        for impl, name in IMPLS[1:]:
            for n in ranks:
                for b in sizes:
                    q = ratio(rows, impl, op, n, b)
                    if q is not None and q < 1:
                        short.append("%s %s %d ranks %s (%.2f)" % (op, name, n, size_name(b), q))
    out.append("- busbw >= OpenMPI's at every size, op and rank count: " +
               ("met." if not short else "not met in %d cells: %s." % (len(short), "; ".join(short))))
    lat = []
    for impl, name in IMPLS[1:]:
        r, mpi = rows.get((impl, "all-reduce", 2, 4096)), rows.get(("mpi", "all-reduce", 2, 4096))
        if r and mpi:
            q = r["lat_us_median"] / mpi["lat_us_median"]
            lat.append("%s %s us against %s us, %.2fx: %s" % (
                name, num(r["lat_us_median"]), num(mpi["lat_us_median"]), q,
                "met" if q <= 2 else "not met"))
    if lat:
        out.append("- 4 KiB all-reduce on 2 ranks within 2x of OpenMPI's latency: " +
                   "; ".join(lat) + ".")
    large = []
    for impl, name in IMPLS[1:]:
        for n in ranks:
            qs = [(ratio(rows, impl, "all-reduce", n, b), b) for b in sizes if b >= LARGE]
            qs = [(q, b) for q, b in qs if q is not None]
            if qs:
                q, b = min(qs)
                large.append("%s %d ranks at least %.2fx (%s)%s" % (
                    name, n, q, size_name(b), "" if q >= 2 else ": not met"))
    if large:
        out.append("- all-reduce from %s up >= 2x OpenMPI's busbw: " % size_name(LARGE) +
                   "; ".join(large) + ".")
    out.append("")
    return out


def switch_block(rows):
    """The one-shot paths against the large ones, all-reduce, each forced; the fastest
    repetition (other processes only ever slow a run down, and this is an A/B comparison)."""
    out = ["Switch points (all-reduce, each path forced with bench_collectives' --oneshot-max, "
           "--ring-oneshot-max and --ring-exchange-max; fastest of 5 repetitions, microseconds; "
           "the ring's exchange path is taken from 3 ranks):", ""]
    pairs = [("local-oneshot", "local-chunked", "local backend: one-shot / chunked"),
             ("ring-gather", "ring-hops", "ring: gather / hops"),
             ("ring-exchange", "ring-hops", "ring: exchange / hops")]
    ranks = sorted({k[2] for k in rows})
    sizes = sorted({k[3] for k in rows})
    head = ["size"] + ["%s, %d ranks" % (name, n) for n in ranks for _, _, name in pairs]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for b in sizes:
        cells = [size_name(b)]
        for n in ranks:
            for fast, slow, _ in pairs:
                f = rows.get((fast, "all-reduce", n, b))
                s = rows.get((slow, "all-reduce", n, b))
                cells.append("%s / %s" % (num(f["lat_us_min"]), num(s["lat_us_min"]))
                             if f and s else "-")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    found = []
    for fast, slow, name in pairs:
        for n in ranks:
            best = None
            for b in sizes:
                f = rows.get((fast, "all-reduce", n, b))
                s = rows.get((slow, "all-reduce", n, b))
                if not f or not s or f["lat_us_min"] > s["lat_us_min"]:
                    break
                best = b
            found.append("%s faster up to %s on %d ranks" % (
                name.split(":")[0] + "'s " + fast.split("-")[1], size_name(best) if best else
                "none of these sizes", n))
    out.append("Measured: " + "; ".join(found) + ".")
    out.append("")
    return out


def splice(readme, block_path):
    text = open(readme).read()
    new = open(block_path).read().strip("\n")
    begin, end = (FULL_BEGIN, FULL_END) if new.startswith(FULL_BEGIN) else (BEGIN, END)
    if not new.startswith(begin) or not new.endswith(end):
        sys.exit("bench_collectives_table.py: %s is not a block (%s ... %s)" %
                 (block_path, begin, end))
    pat = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pat.search(text):
        sys.exit("bench_collectives_table.py: %s has no %s ... %s block" % (readme, begin, end))
    tmp = readme + ".tmp"
    with open(tmp, "w") as f:
        f.write(pat.sub(lambda _: new, text, count=1))
    os.replace(tmp, readme)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir")
    p.add_argument("--cpu", default="?")
    p.add_argument("--cores", default="?")
    p.add_argument("--load", default="?")
    p.add_argument("--mpi-version", default="Open MPI")
    p.add_argument("--command", default="scripts/bench_collectives.sh")
    p.add_argument("--rounds", default="1")
    p.add_argument("--small-rounds", default="0", help="the extra rounds of the small sizes")
    p.add_argument("--small-max", default="65536", help="the small rounds' largest size, bytes")
    p.add_argument("--probe", default="", help="the fastest round trip the script saw, us")
    p.add_argument("--probes", default="", help="the runs' round trips, lowest-highest, us")
    p.add_argument("--part", choices=["readme", "full"], default="readme",
                   help="readme: ratios, fit and targets; full: every cell and the switch points")
    p.add_argument("--splice", nargs=2, metavar=("FILE", "BLOCK"))
    a = p.parse_args()
    if a.splice:
        splice(*a.splice)
        return
    rows = read(a.dir)
    if not rows:
        sys.exit("bench_collectives_table.py: no measurements in %s" % a.dir)
    sys.stdout.write(full_block(rows, a) if a.part == "full" else block(rows, a))


if __name__ == "__main__":
    main()
