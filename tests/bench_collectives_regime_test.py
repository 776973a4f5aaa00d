#!/usr/bin/env python3
"""bench_collectives writes every repetition beside the host's regime read before and after it.

Runs the binary on a few small cells (the local backend and the ring between 2 and 4 rank
threads, and Open MPI between 2 processes where mpirun is on the PATH) and checks each line:
one latency per repetition, their median the line's median, and one more probe reading than
repetitions, each a round trip of a cache line between two cores (over 0 and under 0.1 s).
Then scripts/bench_collectives_table.py files those repetitions under regimes and gives every
cell a figure in at least one of them. Exit 0 when every check holds.

  bench_collectives_regime_test.py BENCH_COLLECTIVES
"""
import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench_collectives_table as table  # noqa: E402

REPS = 3
FLAGS = ["--ops", "all-reduce,sendrecv", "--sizes", "8,4096", "--min-ms", "2",
         "--repetitions", str(REPS)]


def main():
    binary = sys.argv[1]
    runs = {"local-2": [binary, "--impl", "local", "--ranks", "2", "--bind"] + FLAGS,
            "local-4": [binary, "--impl", "local", "--ranks", "4", "--bind"] + FLAGS,
            "ring-2": [binary, "--impl", "ring", "--ranks", "2", "--bind"] + FLAGS}
    env = dict(os.environ)
    if shutil.which("mpirun"):
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_btl="self,vader", OMPI_MCA_btl_vader_single_copy_mechanism="none",
                   OMPI_MCA_rmaps_base_oversubscribe="1")
        runs["mpi_default-2"] = ["mpirun", "-np", "2", binary, "--impl", "mpi"] + FLAGS
    else:
        print("no mpirun on the PATH: Open MPI's side not checked")
    failures = []
    with tempfile.TemporaryDirectory() as d:
        for name, cmd in runs.items():
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env,
                                 timeout=120).stdout
            with open(os.path.join(d, name + ".csv"), "w") as f:
                f.write(out)
            rows = list(csv.DictReader(io.StringIO(out)))
            if len(rows) != 4:  # (all-reduce, sendrecv) x (8 B, 4 KiB); the ring: all-reduce
                if not (name.startswith("ring") and len(rows) == 2):
                    failures.append("%s: %d lines" % (name, len(rows)))
            for r in rows:
                where = "%s %s %s B" % (name, r["op"], r["bytes"])
                reps = [float(x) for x in r["rep_us"].split()]
                probes = [float(x) for x in r["probe_us"].split()]
                if len(reps) != REPS or len(probes) != REPS + 1:
                    failures.append("%s: %d repetitions, %d probe readings" % (
                        where, len(reps), len(probes)))
                    continue
                m = table.median(reps)
                if abs(m - float(r["lat_us_median"])) > 2e-3 * m + 1e-3:
                    failures.append("%s: median of %s is not %s" % (where, reps,
                                                                     r["lat_us_median"]))
                if not all(0 < p < 1e5 for p in probes):
                    failures.append("%s: probe readings %s" % (where, probes))
        cells = table.read(d)
        for key, c in sorted(cells.items()):
            if not c["lat"] and max(c["reps"].values(), default=0) < table.MIN_REPS:
                # A cell whose regime changed between its repetitions has too few in any one;
                # its figure over all of them stands in (the table marks it).
                continue
            if not c["lat"]:
                failures.append("%s: no figure in any regime (%s)" % (key, c["reps"]))
        if len(cells) < 10:
            failures.append("the table read %d cells" % len(cells))
    if failures:
        print("\n".join(failures))
        return 1
    print("bench_collectives: %d runs, every repetition beside the regime read before and after "
          "it, and filed by the table" % len(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
