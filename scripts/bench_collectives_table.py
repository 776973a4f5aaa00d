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
import bisect
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


# A figure in a regime needs at least this many of the cell's repetitions in it.
MIN_REPS = 3


def load(directory):
    """Every CSV line of the directory: (impl, config, op, ranks, bytes, actual_bytes, reps),
    reps a list of (latency us, probe before, probe after) per repetition, in run order."""
    lines = []
    for path in sorted(glob.glob(os.path.join(directory, "*.csv"))):
        base = os.path.basename(path)[:-4]
        config = base.split("_", 1)[1].rsplit("-", 1)[0] if base.startswith("mpi_") else ""
        with open(path) as f:
            for k, r in enumerate(csv.DictReader(f), start=2):
                try:
                    reps = [float(x) for x in (r.get("rep_us") or "").split()]
                    probes = [float(x) for x in (r.get("probe_us") or "").split()]
                    if not reps:  # a line without its repetitions: its median stands for them
                        reps = [float(r["lat_us_median"])]
                    if len(probes) != len(reps) + 1:
                        probes = [-1.0] * (len(reps) + 1)
                    lines.append((r["impl"], config, r["op"], int(r["ranks"]), int(r["bytes"]),
                                  int(r["actual_bytes"]),
                                  [(t, probes[i], probes[i + 1]) for i, t in enumerate(reps)]))
                except (KeyError, TypeError, ValueError) as e:
                    refuse("%s line %d is not a bench_collectives line (%s: %s)" % (
                        path, k, type(e).__name__, e))
    return lines


def refuse(why):
    """One line on stderr naming the problem, and exit code 2."""
    sys.stderr.write("bench_collectives_table.py: %s\n" % why)
    sys.exit(2)


# A regime needs at least this many probe readings (two runs of one cell: 6 readings a run).
MIN_READINGS = 12


def otsu(xs):
    """The index i parting sorted xs into xs[:i] and xs[i:] with the most variance between the
    two classes (Otsu's threshold, N. Otsu 1979), or None."""
    n, total, low = len(xs), sum(xs), 0.0
    best, at = -1.0, None
    for i in range(1, n):
        low += xs[i - 1]
        if xs[i] == xs[i - 1]:
            continue
        m0, m1 = low / i, (total - low) / (n - i)
        between = i * (n - i) * (m1 - m0) ** 2
        if between > best:
            best, at = between, i
    return at


def split_points(readings):
    """The round trips that part the host's regimes (sorted; none where there is one).

    Otsu's threshold on the logarithms of every reading, applied again within each class it
    makes: on the 2-core Xeon the readings gather around 0.02-0.05 us (the two virtual CPUs on
    cores that share a cache), around 0.3-0.6 us (cores that do not), and, for processes the
    kernel placed on one CPU, around 50 us (a yield per trip). A cut is kept only where the two
    classes' geometric means are 3x apart or more (closer, they are one regime's spread) and
    each holds MIN_READINGS readings; where Otsu's is not, the widest gap between neighbouring
    readings is tried (widest_gap)."""
    def parts(xs, i):
        if i is None or min(i, len(xs) - i) < MIN_READINGS:
            return False
        lo, hi = xs[:i], xs[i:]
        return sum(hi) / len(hi) - sum(lo) / len(lo) >= math.log(3)

    def widest_gap(xs):
        """Where a rare regime's crowd sits apart from a common one: Otsu's cut, which weighs
        classes by their size, falls inside the common crowd when the other holds a few
        readings in a thousand (41 of 15,540 at 0.026-0.046 us on 4 ranks, the rest from
        0.20 us up). The widest ratio between neighbouring readings, if 3x or more."""
        ends = range(MIN_READINGS, len(xs) - MIN_READINGS + 1)
        i = max(ends, key=lambda k: xs[k] - xs[k - 1], default=None)
        return i if i is not None and xs[i] - xs[i - 1] >= math.log(3) else None

    def split(xs):
        i = otsu(xs)
        if not parts(xs, i):
            i = widest_gap(xs)
            if not parts(xs, i):
                return []
        return split(xs[:i]) + [math.exp(0.5 * (xs[i - 1] + xs[i]))] + split(xs[i:])
    return split(sorted(math.log(x) for x in readings if x > 0))


def regime(before, after, cuts):
    """A repetition's regime: "A" (the fastest round trips), "B", ... as the probe read it
    before and after; None where the two readings fall in different regimes (it changed
    during the repetition) or were not read."""
    if before < 0 or after < 0:
        return None
    a, b = bisect.bisect(cuts, before), bisect.bisect(cuts, after)
    return "ABCDEFGH"[a] if a == b else None


def median(xs):
    xs = sorted(xs)
    m = len(xs)
    return xs[m // 2] if m % 2 else 0.5 * (xs[m // 2 - 1] + xs[m // 2])


class Cells(dict):
    """{(impl, op, ranks, bytes): cell}; a cell: {"config", "actual_bytes", "lat": {regime: the
    median latency of its repetitions in that regime, every round's together}, "reps": {regime:
    how many}, "all": the median over every repetition}. Attributes: cuts {ranks: the round
    trips parting its regimes}, ranges {ranks: {regime: (fastest, slowest reading)}}, primary
    {ranks: the regime with the most repetitions}."""


def read(directory):
    """The cells of every CSV file in the directory, Open MPI's in its best configuration.

    Each repetition is filed under the regime the probe read before and after it (split_point:
    the cuts per rank count from every reading of the run, ours and Open MPI's alike), and a
    cell's figure in a regime is the median of its repetitions there over every round: a
    fastest-round rule hands a cell to whichever side drew the fast regime once (PERFORMANCE.md,
    "A second full run on the Xeon: the regime lottery"). Open MPI's configuration is chosen per
    op and rank count, the fastest over the op's sweep (the geometric mean of its cells' medians
    over all their repetitions): a configuration is a setting of a whole run, and most of them
    run the same code for a given op (sm-coll changes only collectives, vader-copy-in-out only
    large copies), so a choice cell by cell would be a minimum over more samples of the same
    noise. Where the chosen one has no figure in a regime, the fastest configuration that has
    one stands in (only ever a faster Open MPI)."""
    lines = load(directory)
    readings = {}
    for _, _, _, n, _, _, reps in lines:
        readings.setdefault(n, []).extend(x for _, b, a in reps for x in (b, a))
    cuts = {n: split_points(xs) for n, xs in readings.items()}
    ranges = {}
    for n, xs in readings.items():
        for x in xs:
            if x > 0:
                g = "ABCDEFGH"[bisect.bisect(cuts[n], x)]
                lo, hi = ranges.setdefault(n, {}).get(g, (x, x))
                ranges[n][g] = (min(lo, x), max(hi, x))
    pooled = {}  # (impl, config, op, n, b) -> {"actual_bytes", "reps": {regime: [lat]}, "all"}
    counts = {}  # n -> {regime: repetitions}
    for impl, config, op, n, b, actual, reps in lines:
        c = pooled.setdefault((impl, config, op, n, b),
                              {"actual_bytes": actual, "reps": {}, "all": []})
        for t, before, after in reps:
            c["all"].append(t)
            g = regime(before, after, cuts[n])
            if g:
                c["reps"].setdefault(g, []).append(t)
                counts.setdefault(n, {}).setdefault(g, 0)
                counts[n][g] += 1

    def cell(config, c):
        lat = {g: median(ts) for g, ts in c["reps"].items() if len(ts) >= MIN_REPS}
        return {"config": config, "actual_bytes": c["actual_bytes"], "lat": lat,
                "reps": {g: len(ts) for g, ts in c["reps"].items()}, "all": median(c["all"])}

    rows = Cells()
    rows.cuts = cuts
    rows.ranges = ranges
    rows.counts = counts
    rows.primary = {n: max(sorted(g), key=lambda k: g[k]) for n, g in counts.items()}
    for n in cuts:
        rows.primary.setdefault(n, "A")
    mpi = {}  # (op, n) -> {config: {b: cell}}
    for (impl, config, op, n, b), c in pooled.items():
        if impl == "mpi":
            mpi.setdefault((op, n), {}).setdefault(config, {})[b] = cell(config, c)
        else:
            rows[(impl, op, n, b)] = cell("", c)
    for (op, n), configs in mpi.items():
        # Scored in the rank count's commonest regime, by the configurations with figures
        # there; over all repetitions where none has.
        g = rows.primary[n]
        have = {c: {b for b, x in cs.items() if g in x["lat"]} for c, cs in configs.items()}
        have = {c: bs for c, bs in have.items() if bs}
        if not have:
            g, have = "all", {c: set(cs) for c, cs in configs.items()}
        sizes = set.intersection(*have.values())

        def score(config):
            cs = [configs[config][b] for b in sizes]
            return sum(math.log(x["all"] if g == "all" else x["lat"][g])
                       for x in cs) / max(1, len(cs))
        chosen = min(sorted(have), key=score)
        for b, x in configs[chosen].items():
            x = dict(x, lat=dict(x["lat"]), stand_in={})
            for config in sorted(configs):
                for g, t in configs[config].get(b, {"lat": {}})["lat"].items():
                    if g not in x["lat"] or (g in x["stand_in"] and t < x["lat"][g]):
                        x["lat"][g] = t
                        x["stand_in"][g] = config
            rows[("mpi", op, n, b)] = x
    return rows


def figure(rows, key):
    """(latency us, regime) of a cell for the tables: its rank count's primary regime, else
    another it has, else the median over all its repetitions ("all")."""
    r = rows.get(key)
    if not r:
        return None
    primary = rows.primary.get(key[2], "A")
    for g in [primary] + sorted(r["lat"]):
        if g in r["lat"]:
            return r["lat"][g], g
    return r["all"], "all"


def read_runs(directory):
    """{(label, op, ranks, bytes): row} of the switch points' runs: each its fastest
    repetition (one run per path, an A/B comparison that load only ever slows)."""
    rows = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.csv"))):
        with open(path) as f:
            for r in csv.DictReader(f):
                rows[(r["impl"], r["op"], int(r["ranks"]), int(r["bytes"]))] = {
                    "lat_us_min": float(r["lat_us_min"])}
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


def named(rows, n, g):
    """" A", " B", ...: a regime's name where rank count n has more than one, else ""."""
    return " " + g if rows.cuts.get(n) and g != "all" else ""


def regimes_text(rows):
    """How the repetitions were filed: each rank count's regimes, their readings and sizes."""
    parts = []
    for n in sorted(rows.cuts):
        reps = rows.counts.get(n, {})
        ranges = rows.ranges.get(n, {})
        if not rows.cuts[n]:
            lo, hi = ranges.get("A", (0, 0))
            parts.append("%d ranks: one regime, %s-%s us" % (n, num(lo), num(hi)))
            continue
        parts.append("%d ranks: %s" % (n, ", ".join(
            "%s %s-%s us (%d repetitions)" % (g, num(ranges[g][0]), num(ranges[g][1]),
                                              reps.get(g, 0)) for g in sorted(ranges))))
    both = one = blind = 0
    for k in rows:
        if k[0] == "mpi":
            continue
        gs = compared(rows, k)
        if gs is None:
            continue
        if gs == ["all"]:
            blind += 1
        elif len(gs) > 1:
            both += 1
        else:
            one += 1
    return ("; ".join(parts) + ". Of our cells, %d were compared in more than one regime, %d "
            "in one, %d in none (too few repetitions of one side in every regime: compared "
            "over all their repetitions, marked *)" % (both, one, blind))


def read_other_load(directory):
    """other_load.txt of bench_collectives.sh: {run name: [each try's other load, %]}, tries in
    order; {} where the file is absent (runs made before the script recorded it)."""
    path = os.path.join(directory, "other_load.txt")
    runs = {}
    if not os.path.exists(path):
        return runs
    with open(path) as f:
        for k, line in enumerate(f, start=1):
            parts = line.split()
            try:
                if len(parts) != 3 or int(parts[1]) != len(runs.get(parts[0], [])) + 1:
                    raise ValueError("not 'run try share', tries counted from 1")
                runs.setdefault(parts[0], []).append(float(parts[2]))
            except ValueError as e:
                refuse("%s line %d is not an other-load line (%s)" % (path, k, e))
    return runs


def other_load_text(runs, limit):
    """What other load the runs met, and which were run again for it."""
    if not runs:
        return ""
    kept = {name: min(tries) for name, tries in runs.items()}
    again = sorted(name for name, tries in runs.items() if len(tries) > 1)
    over = sorted(name for name, share in kept.items() if share > limit)
    text = (" Other load, the CPU time of anything but the run while it ran (other processes, "
            "and the host's steal on a VM) as a share of all the CPUs over the run, was at "
            "most %.2f%% in the %d runs kept (median %.2f%%); a run above %g%% was run again, "
            "twice at most, and the try with the least kept. Run again: " % (
                max(kept.values()), len(kept), median(list(kept.values())), limit))
    text += "; ".join("%s (%s)" % (name, ", ".join("%.2f%%" % x for x in runs[name]))
                      for name in again) or "none"
    if over:
        text += "; of these, %s stayed above the limit" % ", ".join(over)
    return text + "."


def header(a, rows):
    """What was measured, where and how: the first paragraph of both blocks."""
    text = ("Measured by `%s` (bench/bench_collectives.cpp), f32, on %s, %s cores; "
            "load average (1, 5, 15 min) %s during the run; %s. Each run times 5 "
            "repetitions of at least 10 ms each per cell, %s rounds of runs one after "
            "another (ours and OpenMPI's alike)." % (
                a.command, a.cpu, a.cores, a.load, a.mpi_version, a.rounds))
    if a.small_rounds and a.small_rounds != "0":
        text += (" Sizes up to %s, which take milliseconds where the host's regime (below) "
                 "changes every few seconds, ran %s rounds more, every implementation and "
                 "configuration alike." % (size_name(int(a.small_max)), a.small_rounds))
    text += (" Beside every repetition, ranks 0 and 1 (our rank threads, OpenMPI's processes "
             "over a shared segment) time a cache line's round trip between their cores, "
             "before it and after: the host moves this machine's virtual CPUs between cores "
             "that share a cache and cores that do not, and small messages move with it "
             "(ch04_ddp/PERFORMANCE.md, \"The regime of each repetition\"). The readings of "
             "each rank count fall into regimes, A the fastest (cut where Otsu's threshold on "
             "their logarithms parts crowds 3x apart or more); a repetition is filed under the "
             "regime both its readings fall in, or dropped; a "
             "cell's figure in a regime is the median of its repetitions there, every round's "
             "together (%d at least), and ours is compared with OpenMPI's within each regime "
             "both have, its ratio the lowest of those. %s." % (MIN_REPS, regimes_text(rows)))
    if a.probe:
        text += (" Each run also started when `bench_collectives --probe` read within 3x of "
                 "the fastest of the 30 readings before it (the fastest of the whole run: %s "
                 "us; the runs started at %s us), so that both regimes come up for every run." %
                 (a.probe, a.probes or "?"))
    text += other_load_text(read_other_load(a.dir), a.max_other_load)
    text += (" OpenMPI: of the configurations the script runs, the fastest over each op's sweep."
             " Ratios: our busbw / OpenMPI's (above 1: faster). Our rank threads are bound to "
             "the cores round-robin (`--bind`: rank r on core r mod cores), as mpirun binds its "
             "2 processes by default and, in the bind-cyclic configuration, its 4 on 2 cores "
             "too (which by default it leaves unbound).")
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
                (q, g), b = min(qs)
                out.append("| " + " | ".join(
                    [op, str(n), name] + [ratio_text(*at[s]) if s in at else "-"
                                          for s in shown] +
                    ["%s (%s%s)" % (ratio_text(q, g), size_name(b),
                                    named(rows, n, g).replace(" ", ", "))]) + " |")
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
                for i, _ in impls:
                    f = figure(rows, (i, op, n, b))
                    if not f:
                        cells.append("-")
                        continue
                    lat, g = f
                    r = rows[(i, op, n, b)]
                    cells.append("%s (%s us%s)" % (
                        num(busbw(op, n, r["actual_bytes"], lat)), num(lat),
                        "" if g == rows.primary.get(n) else
                        named(rows, n, g).replace(" ", ", ") or ", all"))
                for i, _ in impls:
                    if i == "mpi":
                        continue
                    gs = compared(rows, (i, op, n, b))
                    cells.append(" / ".join(
                        ratio_text(regime_ratio(rows, i, op, n, b, g), g) + named(rows, n, g)
                        for g in gs) if gs else "-")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return out


def fit_table(rows):
    ranks = sorted({k[2] for k in rows})
    out = ["The alpha-beta model T(n) = alpha + n beta fitted to the medians at every size "
           "(each rank count's commonest regime; least squares on the relative error): alpha is "
           "the fixed cost of a call, 1/beta the algorithm bandwidth it tends to, "
           "n_1/2 = alpha/beta the size at which half the time is the fixed cost.", "",
           "| op | ranks | impl | alpha (us) | 1/beta (GB/s) | n_1/2 |",
           "|---|---|---|---|---|---|"]
    for op in OPS:
        for n in ranks:
            for i, name in IMPLS:
                pts = [(r["actual_bytes"], figure(rows, k)[0] * 1e-6)
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
    out = [BEGIN, "", header(a, rows), ""]
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
    out = [FULL_BEGIN, "", header(a, rows) + " Each cell: busbw in GB/s (nccl-tests' "
           "convention) and the latency per call in microseconds, in the rank count's commonest "
           "regime (%s) unless named; a ratio per regime compared, named where the rank count "
           "has more than one." % ", ".join("%d ranks %s" % (n, g) for n, g in
                                            sorted(rows.primary.items())),
           ""]
    out += op_tables(rows)
    out += configurations(rows)
    switch = read_runs(os.path.join(a.dir, "switch")) if os.path.isdir(os.path.join(a.dir, "switch")) else {}
    if switch:
        out += switch_block(switch)
    out.append(FULL_END)
    return "\n".join(out) + "\n"


# The targets this table is measured against (ch04_ddp/README.md): ring and local busbw >=
# OpenMPI's at every size and op on every rank count; the 2-rank 4 KiB all-reduce within 2x of
# OpenMPI's latency; all-reduce at LARGE bytes and above >= 2x OpenMPI's busbw (the large
# sizes where the project led 3-5x before the small-message work: 64 MiB and up).
LARGE = 64 << 20


def busbw(op, n, actual_bytes, lat_us):
    factor = 2.0 * (n - 1) / n if op == "all-reduce" else 1.0 if op == "sendrecv" else (n - 1) / n
    return actual_bytes / (lat_us * 1e-6) / 1e9 * factor


def compared(rows, key):
    """The regimes in which a cell of ours and Open MPI's are compared: each that both have a
    figure in; ["all"] (every repetition, whatever its regime) where they share none; None
    where either cell is missing."""
    r, mpi = rows.get(key), rows.get(("mpi",) + tuple(key[1:]))
    if not r or not mpi:
        return None
    gs = [g for g in sorted(r["lat"]) if g in mpi["lat"]]
    return gs or ["all"]


def regime_ratio(rows, impl, op, n, b, g):
    r, mpi = rows[(impl, op, n, b)], rows[("mpi", op, n, b)]
    return mpi["all"] / r["all"] if g == "all" else mpi["lat"][g] / r["lat"][g]


def ratio_text(q, g):
    return "%.2f%s" % (q, "*" if g == "all" else "")


def ratio(rows, impl, op, n, b):
    """(OpenMPI's latency over ours = our busbw over OpenMPI's, the regime) in the regime where
    it is lowest; None where either is missing."""
    gs = compared(rows, (impl, op, n, b))
    if gs is None:
        return None
    return min((regime_ratio(rows, impl, op, n, b, g), g) for g in gs)


def targets_block(rows):
    """Each target with its verdict, computed from the cells above."""
    ranks = sorted({k[2] for k in rows})
    sizes = sorted({k[3] for k in rows})
    out = ["Targets, from every cell measured, in each regime both sides were measured in:", ""]
    short = []
    for op in OPS:
        for impl, name in IMPLS[1:]:
            for n in ranks:
                for b in sizes:
                    for g in compared(rows, (impl, op, n, b)) or []:
                        q = regime_ratio(rows, impl, op, n, b, g)
                        if q < 1:
                            short.append("%s %s %d ranks %s (%s%s)" % (
                                op, name, n, size_name(b), ratio_text(q, g),
                                named(rows, n, g).replace(" ", ", ")))
    blind = sum(1 for k in rows if k[0] != "mpi" and compared(rows, k) == ["all"])
    out.append("- busbw >= OpenMPI's at every size, op and rank count: " +
               ("met" if not short else "not met in %d cell%s: %s"
                % (len(short), "" if len(short) == 1 else "s", "; ".join(short)))
               + ("; %d cells, marked *, compared over every repetition (no regime in which "
                  "both sides had %d)." % (blind, MIN_REPS) if blind else "."))
    lat = []
    for impl, name in IMPLS[1:]:
        for g in compared(rows, (impl, "all-reduce", 2, 4096)) or []:
            r, mpi = rows[(impl, "all-reduce", 2, 4096)], rows[("mpi", "all-reduce", 2, 4096)]
            ours, theirs = (r["all"], mpi["all"]) if g == "all" else (r["lat"][g], mpi["lat"][g])
            q = ours / theirs
            lat.append("%s%s %s us against %s us, %.2fx: %s" % (
                name, named(rows, 2, g), num(ours), num(theirs), q,
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
                (q, g), b = min(qs)
                large.append("%s %d ranks at least %sx (%s%s)%s" % (
                    name, n, ratio_text(q, g), size_name(b),
                    named(rows, n, g).replace(" ", ", "), "" if q >= 2 else ": not met"))
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
    pairs = [("local-staged", "local-inplace", "local backend: staged / in place"),
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
    try:
        text = open(readme).read()
        new = open(block_path).read().strip("\n")
    except OSError as e:
        refuse("--splice: %s" % e)
    begin, end = (FULL_BEGIN, FULL_END) if new.startswith(FULL_BEGIN) else (BEGIN, END)
    if not new.startswith(begin) or not new.endswith(end):
        refuse("%s is not a block (%s ... %s)" % (block_path, begin, end))
    pat = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pat.search(text):
        refuse("%s has no %s ... %s block" % (readme, begin, end))
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
    p.add_argument("--max-other-load", type=float, default=1.5,
                   help="the other load, %% of the CPUs, above which a run was run again")
    p.add_argument("--part", choices=["readme", "full"], default="readme",
                   help="readme: ratios, fit and targets; full: every cell and the switch points")
    p.add_argument("--splice", nargs=2, metavar=("FILE", "BLOCK"))
    a = p.parse_args()
    if a.splice:
        splice(*a.splice)
        return
    if not a.dir or not os.path.isdir(a.dir):
        refuse("--dir takes the directory of bench_collectives' CSV files, not %r" % a.dir)
    rows = read(a.dir)
    if not rows:
        refuse("no measurements in %s" % a.dir)
    sys.stdout.write(full_block(rows, a) if a.part == "full" else block(rows, a))


if __name__ == "__main__":
    main()
