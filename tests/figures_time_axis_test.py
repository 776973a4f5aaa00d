#!/usr/bin/env python3
"""Chapter 7's figure draws every pipeline schedule on one time axis (scripts/figures.py):
the same x limits on every panel and the same unit, one forward of a whole stage, so the
schedule with the smallest bubble is drawn the shortest. figures.time_axis_problems reads that
from what was drawn; this test runs it on the real figure, then on made-up figures whose panels
disagree (x limits, or a panel counted in half-size units), each of which it must report.

    python3 tests/figures_time_axis_test.py --bin-dir build/bin
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))

import figures  # noqa: E402
from system_matplotlib import import_matplotlib  # noqa: E402


def made_up(panels):
    """A figure of panels (name, xlim, bar widths of rank 0) drawn as fig_ch07 draws them."""
    fig, axes = figures.plt.subplots(len(panels), 1)
    for ax, (name, xlim, widths) in zip(axes, panels):
        start = 0.0
        for w in widths:
            ax.broken_barh([(start, w)], (-0.4, 0.8))
            ax.broken_barh([(start, w)], (0.6, 0.8))  # rank 1: not counted
            start += w
        ax.set_xlim(*xlim)
        ax.set_title("%s: made up" % name, loc="left")
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", required=True)
    a = ap.parse_args()
    import_matplotlib(__file__, sys.argv[1:], "figures_time_axis_test.py")
    import matplotlib.pyplot as plt
    figures.plt = plt
    failures = 0

    try:
        fig = figures.fig_ch07(a.bin_dir)  # raises figures.Failure when its panels disagree
    except figures.Failure as e:
        print("FAIL: chapter 7's figure: %s" % e)
        return 1
    problems = figures.time_axis_problems(fig)
    ends = {}
    for ax in fig.axes:
        name = ax.get_title(loc="left").split(":")[0]
        ends[name] = max(max(v[0] for v in p.vertices)
                         for c in ax.collections for p in c.get_paths())
    print("chapter 7's figure: last bar ends at %s (x limits %s)"
          % (", ".join("%s %g" % kv for kv in ends.items()), fig.axes[0].get_xlim()))
    if problems:
        print("FAIL: chapter 7's figure: " + "; ".join(problems))
        failures += 1
    # The bubbles order the steps' lengths, all schedules doing the same work.
    if not ends["zb-h1"] < ends["interleaved"] < ends["1f1b"] == ends["afab"]:
        print("FAIL: the steps should end in the bubbles' order: zb-h1 < interleaved < 1f1b "
              "= afab, got %s" % ends)
        failures += 1

    cases = [
        ("panels that agree", [("a", (0, 33), [1, 2] * 8), ("b", (0, 33), [0.5, 1] * 16)], 0),
        ("other x limits", [("a", (0, 33), [1, 2] * 8), ("b", (0, 28.5), [0.5, 1] * 16)], 1),
        ("a panel in chunk units", [("a", (0, 33), [1, 2] * 8), ("b", (0, 33), [1, 2] * 16)], 1),
        ("both", [("a", (0, 33), [1, 2] * 8), ("b", (0, 57), [1, 2] * 16)], 2),
    ]
    for what, panels, want in cases:
        got = figures.time_axis_problems(made_up(panels))
        ok = len(got) == want
        print("%s  %s: %d problem(s) reported, %d expected%s"
              % ("ok  " if ok else "FAIL", what, len(got), want,
                 (": " + "; ".join(got)) if got else ""))
        failures += 0 if ok else 1
    print("every panel shares one time axis" if not failures else "%d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
