// The peak that MFU (model FLOPs utilisation, Chowdhery et al. 2022, PaLM appendix B) is
// measured against. A GPU has a datasheet peak (bench/bench_gpu_gpt.cpp states it); a CPU's
// depends on its cores, ISA and clocks, so train_gpt measures it once at start-up: the best of
// a few FP32 GEMMs (ops::matmul, the kernel every layer runs) on every core of the machine.
// MFU = the step's model FLOPs (6N + 6LCT per token, GptConfig::flops_per_token) / its wall
// time / this peak: how much of the machine the whole grid's useful arithmetic used.
#pragma once

namespace mixpar::ch08 {

struct GemmPeak {
  double flops_per_s = 0;  // FP32 FLOP/s of an n x n x n GEMM, best of the repeats
  int threads = 0;         // the team that ran it: every core of the machine
  int n = 0;
};

// About 0.1-0.3 s on two cores; runs on a thread of its own, so the caller's thread setting
// (ops::set_compute_threads) is left as it is.
GemmPeak measure_gemm_peak(int n = 384, int repeats = 5);

}  // namespace mixpar::ch08
