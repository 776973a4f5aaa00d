#include "gemm_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include "ops/compute_threads.h"
#include "ops/fma_gemm.h"
#include "ops/matmul.h"
#include "ops/onednn_matmul.h"
#include "tensor/tensor.h"
#include "util/cpu_features.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace mixpar::ch08 {
namespace {

int machine_cores() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

// The FP32 GEMM kernel this CPU takes (common/ops/fma_gemm.h: chosen at run time, whatever the
// build's ISA).
std::string fp32_gemm_path() {
  return "FMA-chain kernel " + std::string(ops::gemm_kernel_name(ops::gemm_kernel()));
}

}  // namespace

ComputeUnit gemm_unit(DType dtype, std::string* gemm_path) {
  const bool onednn = (dtype == DType::kBF16 || dtype == DType::kF16) &&
                      ops::onednn_matmul_enabled() && ops::onednn_matmul_available(dtype);
  const std::string widened = dtype == DType::kF32 || dtype == DType::kF64
                                  ? ""
                                  : ", " + std::string(dtype_name(dtype)) + " operands widened to FP32";
  if (!onednn) {
    if (gemm_path != nullptr) *gemm_path = fp32_gemm_path() + widened;
    return widest_fp32_unit();
  }
  const std::string kernel = ops::onednn_matmul_kernel(dtype);
  if (gemm_path != nullptr) *gemm_path = "oneDNN " + kernel;
  // oneDNN names the ISA its kernel was generated for ("brg:avx512_core_amx", "..._bf16").
  if (dtype == DType::kBF16 && kernel.find("amx") != std::string::npos &&
      unit_usable(ComputeUnit::kAmxBf16)) {
    return ComputeUnit::kAmxBf16;
  }
  if (dtype == DType::kBF16 && (kernel.find("amx") != std::string::npos ||
                                kernel.find("bf16") != std::string::npos) &&
      unit_usable(ComputeUnit::kAvx512Bf16)) {
    return ComputeUnit::kAvx512Bf16;
  }
  // Anything else oneDNN runs (an f16 kernel, bf16 emulated on AVX-512) multiplies on the FP32
  // units.
  return widest_fp32_unit();
}

IsaPeak isa_peak(int cores, DType dtype) {
  IsaPeak p;
  p.cores = std::clamp(cores, 1, machine_cores());
  p.unit = gemm_unit(dtype, &p.gemm_path);
  p.flops_per_s = measure_flops_per_s(p.unit, p.cores);
  return p;
}

std::string refuse_peak(double peak, double gemm) {
  char buf[256];
  if (!(peak > 0)) return "no peak was measured";
  if (gemm > kGemmAbovePeakSlack * peak) {
    std::snprintf(buf, sizeof buf, "the unit's peak %.1f GFLOP/s is below the measured GEMM's %.1f",
                  peak / 1e9, gemm / 1e9);
    return buf;
  }
  if (gemm > 0 && peak > kFarAbove * gemm) {
    std::snprintf(buf, sizeof buf,
                  "the unit's peak %.1f GFLOP/s is more than %.0f times the measured GEMM's %.1f",
                  peak / 1e9, kFarAbove, gemm / 1e9);
    return buf;
  }
  return {};
}

int process_compute_threads(int ranks_here, int threads_per_rank) {
  const int cores = machine_cores();
  const int ranks = std::max(1, ranks_here);
  int per_rank = threads_per_rank;
  if (per_rank <= 0) {
    if (ranks > 1) {
      per_rank = std::max(1, cores / ranks);  // ops::share_cores
    } else {
#if defined(_OPENMP)
      per_rank = omp_get_max_threads();  // OMP_NUM_THREADS, or every core
#else
      per_rank = 1;
#endif
    }
  }
  return std::clamp(ranks * per_rank, 1, cores);
}

std::string GemmPeak::describe() const {
  char buf[1024];
  const double share = isa.flops_per_s > 0 ? 100.0 * measured_flops_per_s / isa.flops_per_s : 0;
  if (refused.empty()) {
    std::snprintf(buf, sizeof buf,
                  "peak %.1f GFLOP/s: %d cores of %s, measured; the run's GEMMs: %s, a %d^3 %s "
                  "GEMM %.1f GFLOP/s on %d threads (%.0f%% of the peak); MFU against the peak",
                  isa.flops_per_s / 1e9, isa.cores, unit_name(isa.unit).c_str(),
                  isa.gemm_path.c_str(), n, std::string(dtype_name(dtype)).c_str(),
                  measured_flops_per_s / 1e9, threads, share);
  } else {
    std::snprintf(buf, sizeof buf,
                  "peak refused as a measurement error (%s; %d cores of %s); the run's GEMMs: %s, "
                  "a %d^3 %s GEMM %.1f GFLOP/s on %d threads; MFU against that GEMM",
                  refused.c_str(), isa.cores, unit_name(isa.unit).c_str(), isa.gemm_path.c_str(),
                  n, std::string(dtype_name(dtype)).c_str(), measured_flops_per_s / 1e9, threads);
  }
  return buf;
}

GemmPeak measure_gemm_peak(int threads, DType dtype, int n, int repeats) {
  GemmPeak peak;
  peak.n = n;
  peak.dtype = dtype;
  peak.threads = std::clamp(threads, 1, machine_cores());
  std::thread worker([&] {
    ops::set_compute_threads(peak.threads);
    const std::int64_t N = n;
    Tensor a = Tensor::zeros({N, N}, DType::kF32), b = Tensor::zeros({N, N}, DType::kF32);
    for (std::int64_t i = 0; i < N * N; ++i) {
      a.data_as<float>()[i] = static_cast<float>(i % 7) * 0.125f;
      b.data_as<float>()[i] = static_cast<float>(i % 5) * 0.25f;
    }
    // The run's dtype: a 16-bit run's GEMMs widen their operands (or, with oneDNN, multiply
    // 16-bit numbers), and that is the path whose peak counts.
    if (dtype != DType::kF32) {
      a = a.to(dtype);
      b = b.to(dtype);
    }
    Tensor c = Tensor::zeros({N, N}, dtype);
    ops::matmul(a, b, c);  // warm-up: caches, pages, the OpenMP team
    double best = 1e30;
    for (int r = 0; r < std::max(1, repeats); ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      ops::matmul(a, b, c);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    peak.measured_flops_per_s = 2.0 * static_cast<double>(N * N * N) / best;
  });
  worker.join();
  peak.isa = isa_peak(peak.threads, dtype);
  peak.refused = refuse_peak(peak.isa.flops_per_s, peak.measured_flops_per_s);
  peak.flops_per_s = peak.refused.empty() ? peak.isa.flops_per_s : peak.measured_flops_per_s;
  return peak;
}

}  // namespace mixpar::ch08
