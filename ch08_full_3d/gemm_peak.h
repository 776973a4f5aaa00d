// The peak that MFU (model FLOPs utilisation, Chowdhery et al. 2022, PaLM appendix B;
// docs/REFERENCE.md, "FLOPs per token and MFU") is measured against. A GPU has a datasheet peak
// (bench/bench_gpu_gpt.cpp states it); a CPU's follows from its cores, vector ISA and clock, so
// train_gpt takes two figures for the cores the process computes on, before any rank starts:
//   - the ISA peak: cores x clock x FP32 lanes per FMA x 2 FMA units x 2 FLOPs (a multiply and
//     an add), the clock the larger of what the kernel reports (cpufreq's maximum, else
//     /proc/cpuinfo, which in a virtual machine is the nominal clock) and the clock measured by
//     timing a chain of dependent adds (one per cycle: the boost clock the core really runs);
//   - the measured peak, as a roofline tool measures it: the best of a few square n x n x n
//     GEMMs (n = 1024: large enough that packing and the threads' barrier are noise) through
//     ops::matmul, the kernel every layer runs, in the run's dtype, warmed up, on as many
//     threads as the run computes with.
// MFU divides by the larger of the two, so that the peak is a peak: a machine whose cores are
// busy with other work measures a GEMM far below what its cores can do (2.4 GFLOP/s under load
// 18), and a core that boosts above the clock the kernel reports runs a GEMM above the ISA
// figure. Two FMA units is what every x86 core since Haswell and Zen 2 has; a core with one
// gets a peak twice too high, which keeps MFU below 100%, never above.
#pragma once

#include <string>

#include "numerics/dtype.h"

namespace mixpar::ch08 {

struct IsaPeak {
  double flops_per_s = 0;  // cores x clock x lanes x fma_units x 2
  int cores = 0;
  double clock_ghz = 0;  // max(reported, measured)
  double reported_clock_ghz = 0;  // cpufreq's maximum, else /proc/cpuinfo's "cpu MHz"
  double measured_clock_ghz = 0;  // dependent adds per second (0 off x86-64)
  int fp32_lanes = 0;  // 16 with AVX-512, 8 with AVX2, 4 with SSE
  int fma_units = 2;
  std::string isa;  // "AVX-512", "AVX2+FMA", "SSE"
};

// The peak of `cores` cores of this machine (at most the machine's), every core at the clock
// measured on the calling one (an all-core boost is lower: the peak errs high, MFU low).
// About 5 ms. flops_per_s is 0 when no clock is known.
IsaPeak isa_peak(int cores);

struct GemmPeak {
  double flops_per_s = 0;  // what MFU divides by: max(measured, isa.flops_per_s)
  double measured_flops_per_s = 0;  // 2 n^3 / the best GEMM's wall time
  int threads = 0;  // the team the GEMM ran on: the cores the run computes with
  int n = 0;
  DType dtype = DType::kF32;
  IsaPeak isa;
  // "ISA peak 224.0 GFLOP/s (2 cores x 3.50 GHz [timed adds 3.50, kernel 2.45] x AVX2+FMA: 8
  // FP32 lanes x 2 FMA units x 2); measured 1024^3 f32 GEMM 150.3 GFLOP/s on 2 threads; MFU
  // against 224.0 GFLOP/s, the larger"
  std::string describe() const;
};

// The threads the process computes with: `ranks_here` ranks (threads of this process, or 1
// under MPI) of `threads_per_rank` OpenMP threads each (0: what ops::share_cores gives them,
// or, for one rank, the OpenMP default), at most every core of the machine.
int process_compute_threads(int ranks_here, int threads_per_rank);

// About 0.1-0.3 s on one or two idle cores at n = 1024; runs on a thread of its own, so the
// caller's thread setting (ops::set_compute_threads) is left as it is.
GemmPeak measure_gemm_peak(int threads, DType dtype = DType::kF32, int n = 1024, int repeats = 3);

}  // namespace mixpar::ch08
