// mixpar-plan --calibrate: this machine as a cluster (cluster.h) of `ranks` devices that are
// rank threads sharing its cores, measured with the book's own benchmarks:
//   GEMM   `ranks` rank threads of the local backend each multiplying square f32 matrices
//          through ops::matmul (the kernel every layer runs; its team as share_cores gives
//          train_gpt's ranks) at a few sizes n, all at once on the shared cores, timed by the
//          wall clock between two barriers: ranks x 2 n^3 / seconds per round. (Summing each
//          thread's own best, as gemm_peak.h's measure_gemm_peak would per thread, counts
//          every thread at a moment it had a core to itself: several times the machine.) Fitted by least squares as
//          1 / rate = (1 + h / n) / R: the machine's rate R (peak_flops, eff_max 1) and the
//          half-efficiency size h of the cluster's curve.
//   links  all-reduces of a few sizes S on the local backend over `ranks` threads (the
//          communicator train_gpt's ranks talk through), the median call timed, fitted by
//          least squares (relative residuals) as t = 2 (n - 1) alpha + (2 (n - 1) / n) S / beta: the ring's steps
//          and its bytes per rank (docs/REFERENCE.md). One machine: the same link inside and
//          "across" nodes. Back-to-back all-reduces keep every rank thread awake; in a step a
//          collective comes between compute phases, where the ranks that wait must be woken
//          and scheduled again on the shared cores. So alpha is measured a second time as a
//          step sees it: each rank alternates a small GEMM and a 4 KB all-reduce, and the time
//          beyond the GEMMs alone, per all-reduce, over its 2 (n - 1) ring steps, is the alpha
//          the cluster file keeps (the back-to-back one is printed beside it).
//   memory AdamW's step (common/optim) over 1M FP32 parameters on every rank thread at once:
//          parameters per second, kept as the bandwidth the optimizer achieves (2 x 16 B per
//          parameter: p, g, m, v read and written). On this CPU the update's arithmetic, not
//          the memory, bounds it: a memcpy on the same cores (printed beside it) moves several
//          times more bytes, and a model of memcpy's rate put the optimizer of 8 replicas at a
//          tenth of what train_gpt's steps showed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cluster.h"

namespace mixpar::plan {

struct Calibration {
  Cluster cluster;
  std::vector<std::pair<int, double>> gemm;        // (n, FLOP/s of all cores together)
  std::vector<std::pair<double, double>> collective;  // (bytes, seconds per all-reduce)
  double idle_latency = 0;  // alpha of back-to-back all-reduces
  double unit_peak = 0;     // the cores' FMA peak (gemm_peak.h's isa_peak), for reference
  double copy_bandwidth = 0;          // memcpy on every core, bytes/s, for reference
  double optimizer_params_per_s = 0;  // AdamW over every rank thread at once
};

// Least squares y = a + b x over the points; {a, b}. relative: each point's residual counted
// relative to its y (weights 1 / y^2), so that sizes spanning three decades count alike.
std::pair<double, double> fit_line(const std::vector<std::pair<double, double>>& xy,
                                   bool relative = false);

// A few seconds on 2 idle cores.
Calibration calibrate_this_machine(int ranks, int cores, const std::vector<int>& gemm_sizes,
                                   const std::vector<double>& allreduce_bytes);

}  // namespace mixpar::plan
