// mixpar-plan --calibrate: this machine as a cluster (cluster.h) of `ranks` devices that are
// rank threads sharing its cores, measured with the book's own benchmarks:
//   GEMM   `cores` threads each timing square f32 GEMMs through ops::matmul (gemm_peak.h's
//          measure_gemm_peak on one thread) at a few sizes n, at once (as train_gpt's rank
//          threads run theirs), their rates summed. Fitted by least squares as
//          1 / rate = (1 + h / n) / R: the machine's rate R (peak_flops, eff_max 1) and the
//          half-efficiency size h of the cluster's curve.
//   links  all-reduces of a few sizes S on the local backend over `ranks` threads (the
//          communicator train_gpt's ranks talk through), the median call timed, fitted by
//          least squares as t = 2 (n - 1) alpha + (2 (n - 1) / n) S / beta: the ring's steps
//          and its bytes per rank (docs/REFERENCE.md). One machine: the same link inside and
//          "across" nodes.
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
};

// Least squares y = a + b x over the points; {a, b}.
std::pair<double, double> fit_line(const std::vector<std::pair<double, double>>& xy);

// A few seconds on 2 idle cores.
Calibration calibrate_this_machine(int ranks, int cores, const std::vector<int>& gemm_sizes,
                                   const std::vector<double>& allreduce_bytes);

}  // namespace mixpar::plan
