#!/usr/bin/env python3
"""scripts/bench_collectives_table.py's verdicts on the targets, from made-up measurements.

Each case writes bench_collectives CSV lines (OpenMPI's in two configurations, the local
backend's and the ring's) into a temporary directory, runs the script and checks the
"Targets" lines it prints: every target met when ours are faster everywhere; each shortfall
named with its ratio otherwise (one slow cell, a slow 4 KiB latency, a large all-reduce under
2x); OpenMPI taken in its fastest configuration over an op's sweep, not cell by cell. The
host's regimes (the probe's round trip beside each repetition): a side's lucky draw of the near
regime decides nothing the other side was not measured in; a shortfall within the near regime
is named as such; a repetition whose regime changed midway is dropped; processes placed on one
CPU are a regime of their own; a rare regime is parted from a common one; a cell the two sides
share no regime in is compared over every repetition and marked; the header reports the other
load the runs met and which were run again for it; a corrupt line, of a CSV file or of the
other-load record, is refused with one line naming it and exit code 2. Then the
two blocks: the README's summary names each row's lowest ratio and its size, the full block
(PERFORMANCE.md) has every cell and no verdicts, and --splice replaces only the markers of the
block's own kind. Exit 0 when every case holds.
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "bench_collectives_table.py")
HEADER = "impl,op,ranks,bytes,actual_bytes,calls,lat_us_median,lat_us_min,lat_us_max," \
         "algbw_GBps,busbw_GBps,rep_us,probe_us\n"
FAR, NEAR = 0.3, 0.03  # the probe's round trip in the two regimes, us
OPS = ["all-reduce", "sendrecv"]
SIZES = [8, 4096, 16 << 20, 64 << 20]


def write(directory, name, impl, lat, max_bytes=None, probes=(FAR,) * 6):
    """name "<impl or mpi_config>-<ranks>[.<round>]"; lat(op, ranks, bytes) -> the latency in us
    of each of 5 repetitions; max_bytes: only the sizes up to it (a small round's run); probes:
    the round trips read before each repetition and after the last."""
    n = int(name.split(".")[0].rsplit("-", 1)[1])
    with open(os.path.join(directory, name + ".csv"), "w") as f:
        f.write(HEADER)
        for op in OPS:
            if impl == "ring" and op == "sendrecv":
                continue
            for b in SIZES:
                if max_bytes is not None and b > max_bytes:
                    continue
                t = lat(op, n, b)
                bw = b / (t * 1e-6) / 1e9
                f.write("%s,%s,%d,%d,%d,100,%g,%g,%g,%g,%g,%s,%s\n" % (
                    impl, op, n, b, b, t, t, t, bw, bw, " ".join(["%g" % t] * 5),
                    " ".join("%g" % p for p in probes)))


def output(case, *flags):
    """What the script prints for the measurements `case` writes."""
    with tempfile.TemporaryDirectory() as d:
        case(d)
        return subprocess.run([sys.executable, SCRIPT, "--dir", d, *flags], check=True,
                              capture_output=True, text=True).stdout


def targets(case):
    """The script's Targets lines for the measurements `case` writes."""
    lines = output(case).split("Targets, from every cell measured, in each regime both sides "
                               "were measured in:")[1].strip().split("\n\n")[0]
    return lines.splitlines()


def mpi(op, n, b):
    return 1.0 + b / 1e3  # 1 us + 1 GB/s


def faster(factor):
    return lambda op, n, b: mpi(op, n, b) / factor


def main():
    failures = []

    def expect(name, lines, *parts):
        text = "\n".join(lines)
        for p in parts:
            if p not in text:
                failures.append("%s: %r not in\n%s" % (name, p, text))

    def all_faster(d):
        write(d, "mpi_default-2", "mpi", mpi)
        write(d, "mpi_default-4", "mpi", mpi)
        write(d, "local-2", "local", faster(3))
        write(d, "local-4", "local", faster(3))
        write(d, "ring-2", "ring", faster(2.5))
        write(d, "ring-4", "ring", faster(2.5))
    expect("all faster", targets(all_faster),
           "every size, op and rank count: met.",
           "ring 2.04 us against 5.10 us, 0.40x: met", "ring 2 ranks at least 2.50x (64 MiB);")

    def one_slow_cell(d):
        all_faster(d)
        write(d, "local-4", "local",
              lambda op, n, b: 2 * mpi(op, n, b) if (op, b) == ("sendrecv", 8) else
              mpi(op, n, b) / 3)
    expect("one slow cell", targets(one_slow_cell),
           "not met in 1 cell: sendrecv local 4 ranks 8 B (0.50).")

    def slow_latency_and_large(d):
        all_faster(d)
        write(d, "ring-2", "ring",
              lambda op, n, b: 3 * mpi(op, n, b) if b == 4096 else mpi(op, n, b) / 1.5)
    expect("slow latency, large under 2x", targets(slow_latency_and_large),
           "all-reduce ring 2 ranks 4 KiB (0.33)", "3.00x: not met",
           "ring 2 ranks at least 1.50x (64 MiB): not met")

    def mpi_at_its_best(d):
        # A second OpenMPI configuration twice as fast: ours at 1.5x the first is 0.75x it.
        all_faster(d)
        write(d, "mpi_other-2", "mpi", faster(2))
        write(d, "mpi_other-4", "mpi", faster(2))
        write(d, "local-2", "local", faster(1.5))
    expect("OpenMPI at its best", targets(mpi_at_its_best),
           "all-reduce local 2 ranks 8 B (0.75)")

    def one_lucky_cell(d):
        # A configuration slower over the whole sweep but 10x faster in one cell is not that
        # cell's OpenMPI: the configuration is chosen per op and rank count, not per cell.
        all_faster(d)
        write(d, "mpi_other-4", "mpi",
              lambda op, n, b: mpi(op, n, b) / 10 if (op, b) == ("sendrecv", 8) else
              10 * mpi(op, n, b))
    expect("one lucky cell", targets(one_lucky_cell),
           "every size, op and rank count: met.")

    def the_regime_lottery(d):
        # One small round of OpenMPI's drew the near regime, 10x faster; none of ours did. The
        # near regime is then not compared (ours have no figure there); the far one is, and
        # ours lead there.
        all_faster(d)
        for r in range(1, 4):
            write(d, "mpi_default-2.s%d" % r, "mpi", faster(10), max_bytes=4096,
                  probes=(NEAR,) * 6)
    expect("the regime lottery", targets(the_regime_lottery),
           "every size, op and rank count: met.", "ring B 2.04 us against 5.10 us")
    expect("the regime lottery's header", [output(the_regime_lottery)],
           "2 ranks: A 0.03-0.03 us (60 repetitions), B 0.3-0.3 us (100 repetitions)",
           "4 ranks: one regime, 0.3-0.3 us", "0 were compared in more than one regime, 24 in one")

    def slower_near(d):
        # Both sides drew the near regime; ours lead far but trail near: short, named.
        the_regime_lottery(d)
        for r in range(1, 4):
            write(d, "local-2.s%d" % r, "local", lambda op, n, b: mpi(op, n, b) / 8,
                  max_bytes=4096, probes=(NEAR,) * 6)
    expect("slower near", targets(slower_near),
           "all-reduce local 2 ranks 8 B (0.80, A)", "sendrecv local 2 ranks 4 KiB (0.80, A)",
           "local A 0.64 us against 0.51 us, 1.25x: met")
    expect("both regimes in the full block", [output(slower_near, "--part", "full")],
           "| 8 B | 0.079 (0.1 us) | 0.02 (0.4 us, B) | 0.063 (0.13 us) | 2.50 B | "
           "0.80 A / 3.00 B |")

    def regime_changed_midway(d):
        # Repetitions whose probe read near before and far after (or the reverse) belong to
        # neither regime: dropped, however fast.
        slower_near(d)
        for r in range(1, 4):
            write(d, "local-2.m%d" % r, "local", lambda op, n, b: mpi(op, n, b) / 100,
                  max_bytes=4096, probes=(NEAR, FAR) * 3)
    expect("a regime changed midway", targets(regime_changed_midway),
           "all-reduce local 2 ranks 8 B (0.80, A)")

    def a_placement_of_its_own(d):
        # An OpenMPI configuration whose unbound processes 0 and 1 shared one CPU (the probe
        # then yields every trip: ~50 us) is a regime of its own, compared with none of ours.
        all_faster(d)
        write(d, "mpi_unbound-4", "mpi", faster(10), probes=(50,) * 6)
    expect("a placement of its own", targets(a_placement_of_its_own),
           "every size, op and rank count: met.")
    expect("a placement of its own, header", [output(a_placement_of_its_own)],
           "4 ranks: A 0.3-0.3 us (100 repetitions), B 50.0-50.0 us (40 repetitions)",
           "all-reduce 4 ranks default;")

    def a_rare_regime(d):
        # Three runs' readings in the near regime among some 50 times as many far ones, with
        # their usual spread: Otsu's cut falls inside the far crowd (its classes under 3x
        # apart); the gap between the crowds parts them.
        spread = [0.2 + 0.4 * i / 40 for i in range(41)]
        for r in range(1, 4):
            for impl, lat in (("mpi_default", mpi), ("local", faster(3)), ("ring", faster(2.5))):
                for k in range(8):
                    p = [spread[(r * 13 + k * 7 + j * 5) % 41] for j in range(6)]
                    write(d, "%s-2.r%d%d" % (impl, r, k), impl.split("_")[0], lat, probes=p)
            write(d, "mpi_default-4.r%d" % r, "mpi", mpi)
            write(d, "local-4.r%d" % r, "local", faster(3))
            write(d, "ring-4.r%d" % r, "ring", faster(2.5))
        write(d, "mpi_default-2.s1", "mpi", faster(10), max_bytes=4096,
              probes=(0.026, 0.03, 0.028, 0.04, 0.046, 0.035))
    expect("a rare regime", [output(a_rare_regime)], "2 ranks: A 0.026-0.046 us (20 repetitions)",
           "B 0.2-0.6 us")
    expect("a rare regime, verdict", targets(a_rare_regime), "every size, op and rank count: met.")

    def no_common_regime(d):
        # OpenMPI only near, ours only far at 2 ranks: compared over all repetitions, marked.
        write(d, "mpi_default-2", "mpi", mpi, probes=(NEAR,) * 6)
        write(d, "mpi_default-4", "mpi", mpi)
        write(d, "local-2", "local", faster(3))
        write(d, "local-4", "local", faster(3))
    expect("no common regime", [output(no_common_regime)],
           "| all-reduce | 2 | local | 3.00* |", "8 in none",
           "met; 8 cells, marked *, compared over every repetition")
    expect("the small rounds' header",
           [output(all_faster, "--rounds", "3", "--small-rounds", "6", "--small-max", "65536")],
           "3 rounds of runs one after another",
           "Sizes up to 64 KiB, which take milliseconds", "ran 6 rounds more")

    def a_run_run_again(d):
        # bench_collectives.sh's record of each try's other load (other processes, the host's
        # steal): the header reports the kept runs' highest and which were run again, and why.
        all_faster(d)
        with open(os.path.join(d, "other_load.txt"), "w") as f:
            f.write("local-2.r1 1 13.21\nlocal-2.r1 2 0.03\nring-2.r1 1 0.65\n"
                    "mpi_default-2.r1 1 2.50\nmpi_default-2.r1 2 4.00\nmpi_default-2.r1 3 1.90\n")
    expect("a run run again", [output(a_run_run_again, "--max-other-load", "1.5")],
           "was at most 1.90% in the 3 runs kept (median 0.65%); a run above 1.5% was run again",
           "Run again: local-2.r1 (13.21%, 0.03%); mpi_default-2.r1 (2.50%, 4.00%, 1.90%); "
           "of these, mpi_default-2.r1 stayed above the limit.")
    if "Other load" in output(all_faster):
        failures.append("no other_load.txt: the header still reports other load")

    summary = output(one_slow_cell)
    expect("summary's lowest", [summary], "| sendrecv | 4 | local | 0.50 | 3.00 | 3.00 | 0.50 (8 B) |",
           "lowest over all 4 sizes measured (8 B to 64 MiB)", "| all-reduce | 2 | ring | 2.50 | 2.50 |")
    if "| 16 MiB |" in summary:
        failures.append("summary: a row per size, as in the full block:\n" + summary)

    full = output(one_slow_cell, "--part", "full")
    expect("full block", [full], "<!-- bench_collectives_full:begin -->",
           "| all-reduce | OpenMPI 2 | ring 2 | local 2 | ring/OpenMPI 2 | local/OpenMPI 2 |",
           "| 8 B | 0.0079 (1.01 us) | 0.02 (0.4 us) | 0.024 (0.34 us) | 2.50 | 3.00 |",
           "<!-- bench_collectives_full:end -->")
    if "Targets" in full:
        failures.append("full block: has the verdicts, which are the README's:\n" + full)

    with tempfile.TemporaryDirectory() as d:
        page = os.path.join(d, "page.md")
        blocks = {"readme": summary, "full": full}
        for name, text in blocks.items():
            with open(os.path.join(d, name + ".md"), "w") as f:
                f.write(text)
        with open(page, "w") as f:
            f.write("before\n<!-- bench_collectives:begin -->\nold\n<!-- bench_collectives:end -->\n"
                    "middle\n<!-- bench_collectives_full:begin -->\nold\n"
                    "<!-- bench_collectives_full:end -->\nafter\n")
        for name in blocks:
            subprocess.run([sys.executable, SCRIPT, "--splice", page, os.path.join(d, name + ".md")],
                           check=True, capture_output=True)
        spliced = open(page).read()
        if spliced != "before\n" + summary + "middle\n" + full + "after\n":
            failures.append("splice: both blocks in place, the rest kept; got\n" + spliced)
        with open(os.path.join(d, "junk.md"), "w") as f:
            f.write("no markers\n")
        r = subprocess.run([sys.executable, SCRIPT, "--splice", page, os.path.join(d, "junk.md")],
                           capture_output=True, text=True)
        if r.returncode == 0 or open(page).read() != spliced:
            failures.append("splice of a block without markers: exit %d, page %s" %
                            (r.returncode, "changed" if open(page).read() != spliced else "kept"))

    with tempfile.TemporaryDirectory() as d:
        all_faster(d)
        with open(os.path.join(d, "local-2.r9.csv"), "w") as f:
            f.write(HEADER + "local,all-reduce,2,8,8,100,1,1,1,1,1,0.5 x,0.3 0.3 0.3\n")
        r = subprocess.run([sys.executable, SCRIPT, "--dir", d], capture_output=True, text=True)
        err = r.stderr.strip()
        if r.returncode != 2 or len(err.splitlines()) != 1 or "local-2.r9.csv line 2" not in err:
            failures.append("a corrupt line: exit %d, stderr %r" % (r.returncode, err))
    with tempfile.TemporaryDirectory() as d:
        all_faster(d)
        with open(os.path.join(d, "other_load.txt"), "w") as f:
            f.write("local-2.r1 1 0.2\nlocal-2.r1 3 0.1\n")  # a try left out
        r = subprocess.run([sys.executable, SCRIPT, "--dir", d], capture_output=True, text=True)
        err = r.stderr.strip()
        if r.returncode != 2 or len(err.splitlines()) != 1 or "other_load.txt line 2" not in err:
            failures.append("a corrupt other-load line: exit %d, stderr %r" % (r.returncode, err))

    if failures:
        print("\n".join(failures))
        return 1
    print("bench_collectives_table.py: 11 verdict cases (6 of the regimes), the runs run again "
          "for other load, a corrupt line of each file refused, the header's rounds, the two "
          "blocks and their splices as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
