// The peak that MFU (model FLOPs utilisation, Chowdhery et al. 2022, PaLM appendix B;
// docs/REFERENCE.md, "FLOPs per token and MFU") is measured against. A GPU has a datasheet peak
// (bench/bench_gpu_gpt.cpp states it); a CPU's is measured, for the cores the process computes
// on, before any rank starts, in two figures:
//   - the unit's peak: the multiply-add throughput of the unit that runs the run's GEMMs, by a
//     kernel that keeps it busy (unit_throughput.h), on that many cores at once. An FP32 run,
//     and a 16-bit run whose GEMMs widen their operands, count the widest FP32 FMA the CPU has
//     (AVX-512 where present, even when the build's Eigen uses AVX2: the hardware's peak, as
//     MFU wants); a bf16 run whose GEMMs oneDNN runs counts the unit oneDNN's kernel names
//     (AMX-BF16 tiles, or AVX512-BF16 dot products);
//   - the measured GEMM, as a roofline tool measures it: the best of a few square n x n x n
//     GEMMs (n = 1024) through ops::matmul, the kernel every layer runs, in the run's dtype,
//     warmed up, on as many threads.
// MFU divides by the unit's peak. The GEMM checks it: a peak below what a GEMM on that unit
// achieved is no peak, and one more than kFarAbove times the GEMM means a measurement went
// wrong (a kernel preempted throughout, a unit misnamed); either is refused, said in the MFU
// line, and the measured GEMM stands in for the peak.
#pragma once

#include <string>

#include "numerics/dtype.h"
#include "unit_throughput.h"

namespace mixpar::ch08 {

struct IsaPeak {
  double flops_per_s = 0;  // `cores` cores of `unit` together, measured
  int cores = 0;
  ComputeUnit unit = ComputeUnit::kSse;
  std::string gemm_path;  // what runs the GEMMs: "FMA-chain kernel avx512f 12x32", "oneDNN brg:avx512_core_amx"
};

// The unit a run of `dtype` multiplies on here, and what runs its GEMMs (*gemm_path).
ComputeUnit gemm_unit(DType dtype, std::string* gemm_path = nullptr);

// The peak of `cores` cores (at most the machine's) of the unit a `dtype` run's GEMMs use.
// A few milliseconds.
IsaPeak isa_peak(int cores, DType dtype = DType::kF32);

// A peak more than this many times the measured GEMM is refused as a measurement error.
inline constexpr double kFarAbove = 100.0;
// A GEMM may beat a peak measured at another moment by this much before the peak is refused
// (turbo, a kernel run that lost a time slice).
inline constexpr double kGemmAbovePeakSlack = 1.10;

// Why a unit peak of `peak` FLOP/s cannot be what MFU divides by, given a GEMM measured at
// `gemm` FLOP/s on the same unit and cores; empty when it can.
std::string refuse_peak(double peak, double gemm);

struct GemmPeak {
  double flops_per_s = 0;  // what MFU divides by: isa.flops_per_s, or the GEMM when refused
  double measured_flops_per_s = 0;  // 2 n^3 / the best GEMM's wall time
  int threads = 0;  // the team the GEMM ran on: the cores the run computes with
  int n = 0;
  DType dtype = DType::kF32;
  IsaPeak isa;
  std::string refused;  // refuse_peak's reason, when the unit's peak was refused
  // "peak 387.1 GFLOP/s: 2 cores of AVX-512 FMA (16 FP32 lanes), measured; the run's GEMMs:
  // Eigen, x86-64-v3 build (AVX2 FMA), a 1024^3 f32 GEMM 98.2 GFLOP/s on 2 threads (25% of
  // the peak); MFU against the peak"
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
