#!/usr/bin/env python3
"""scripts/bench_collectives_table.py's verdicts on the targets, from made-up measurements.

Each case writes bench_collectives CSV lines (OpenMPI's in two configurations, the local
backend's and the ring's) into a temporary directory, runs the script and checks the
"Targets" lines it prints: every target met when ours are faster everywhere; each shortfall
named with its ratio otherwise (one slow cell, a slow 4 KiB latency, a large all-reduce under
2x); OpenMPI taken in its fastest configuration over an op's sweep, not cell by cell. Then the
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
         "algbw_GBps,busbw_GBps\n"
OPS = ["all-reduce", "sendrecv"]
SIZES = [8, 4096, 16 << 20, 64 << 20]


def write(directory, name, impl, lat, max_bytes=None):
    """name "<impl or mpi_config>-<ranks>[.<round>]"; lat(op, ranks, bytes) -> the median
    latency in us; max_bytes: only the sizes up to it (a small round's run)."""
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
                f.write("%s,%s,%d,%d,%d,100,%g,%g,%g,%g,%g\n" % (impl, op, n, b, b, t, t, t, bw,
                                                                 bw))


def output(case, *flags):
    """What the script prints for the measurements `case` writes."""
    with tempfile.TemporaryDirectory() as d:
        case(d)
        return subprocess.run([sys.executable, SCRIPT, "--dir", d, *flags], check=True,
                              capture_output=True, text=True).stdout


def targets(case):
    """The script's Targets lines for the measurements `case` writes."""
    lines = output(case).split("Targets, from every cell measured:")[1].strip().split("\n\n")[0]
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
           "not met in 1 cells: sendrecv local 4 ranks 8 B (0.50).")

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

    def slow_cell_and_a_small_round(d):
        # A small round's run (sizes up to 4 KiB) found the slow cell at its usual speed: each
        # cell takes the fastest of every run that measured it, whatever the round.
        one_slow_cell(d)
        write(d, "local-4.s1", "local", lambda op, n, b: 10 * mpi(op, n, b) if b > 8 else
              mpi(op, n, b) / 3, max_bytes=4096)
    expect("a small round", targets(slow_cell_and_a_small_round),
           "every size, op and rank count: met.")
    expect("the small rounds' header",
           [output(all_faster, "--rounds", "3", "--small-rounds", "6", "--small-max", "65536")],
           "the lowest such median of 3 rounds",
           "Sizes up to 64 KiB, which take milliseconds", "ran 6 rounds more")

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

    if failures:
        print("\n".join(failures))
        return 1
    print("bench_collectives_table.py: 6 verdict cases, the header's rounds, the two blocks and "
          "their splices as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
