#include "gemm_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "ops/compute_threads.h"
#include "ops/matmul.h"
#include "tensor/tensor.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace mixpar::ch08 {
namespace {

int machine_cores() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

// The highest clock the kernel reports, in GHz: cpufreq's maximum (the boost clock, on bare
// metal) over every core, else the largest "cpu MHz" of /proc/cpuinfo (a virtual machine's
// nominal clock); 0 when neither is there.
double max_clock_ghz() {
  double khz = 0;
  for (int cpu = 0; cpu < machine_cores(); ++cpu) {
    std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                    "/cpufreq/cpuinfo_max_freq");
    double v = 0;
    if (f >> v) khz = std::max(khz, v);
  }
  if (khz > 0) return khz / 1e6;
  std::ifstream info("/proc/cpuinfo");
  double mhz = 0;
  for (std::string line; std::getline(info, line);) {
    if (!line.starts_with("cpu MHz")) continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    try {
      mhz = std::max(mhz, std::stod(line.substr(colon + 1)));
    } catch (const std::exception&) {
      // an unreadable line: the others still count
    }
  }
  return mhz / 1e3;
}

// The clock this core runs at now, boost included, which a virtual machine's /proc/cpuinfo does
// not show (it gives the nominal clock): a chain of dependent integer adds retires one add per
// cycle on every x86 core since the Pentium Pro, so adds / seconds is the clock. The best of
// many short chains (0.3 ms each at 3 GHz): a chain that another process preempted is slower,
// never faster. 0 where there is no such chain to time (not x86-64).
double measured_clock_ghz() {
#if defined(__x86_64__)
  constexpr int kIterations = 1 << 16, kAddsPerIteration = 16;
  double best = 1e30;
  for (int rep = 0; rep < 20; ++rep) {
    std::uint64_t x = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kIterations; ++i) {
      // 16 adds, each waiting for the one before (the loop's own counter and branch run beside
      // them on other ports).
      asm volatile(
          "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
          "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
          "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
          "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
          : "+r"(x));
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return static_cast<double>(kIterations) * kAddsPerIteration / best / 1e9;
#else
  return 0.0;
#endif
}

}  // namespace

IsaPeak isa_peak(int cores) {
  IsaPeak p;
  p.cores = std::clamp(cores, 1, machine_cores());
  p.reported_clock_ghz = max_clock_ghz();
  p.measured_clock_ghz = measured_clock_ghz();
  // The larger: a core may run above the clock the kernel reports (boost), and a loaded core's
  // chain can only come out slower than its clock.
  p.clock_ghz = std::max(p.reported_clock_ghz, p.measured_clock_ghz);
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_supports("avx512f")) {
    p.fp32_lanes = 16;
    p.isa = "AVX-512";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    p.fp32_lanes = 8;
    p.isa = "AVX2+FMA";
  } else {
    // No FMA: a multiply and an add unit of 4 lanes each give the same 2 x 4 FLOPs per cycle
    // that one FMA unit of 4 lanes would (the formula's fma_units x 2 then counts both).
    p.fp32_lanes = 4;
    p.fma_units = 1;
    p.isa = "SSE";
  }
#else
  p.fp32_lanes = 4;
  p.isa = "unknown ISA, 4 lanes assumed";
#endif
  p.flops_per_s =
      static_cast<double>(p.cores) * p.clock_ghz * 1e9 * p.fp32_lanes * p.fma_units * 2.0;
  return p;
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
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "ISA peak %.1f GFLOP/s (%d cores x %.2f GHz [timed adds %.2f, kernel %.2f] x %s: "
                "%d FP32 lanes x %d FMA units x 2); measured %d^3 %s GEMM %.1f GFLOP/s on %d "
                "threads; MFU against %.1f GFLOP/s, the larger",
                isa.flops_per_s / 1e9, isa.cores, isa.clock_ghz, isa.measured_clock_ghz,
                isa.reported_clock_ghz, isa.isa.c_str(), isa.fp32_lanes,
                isa.fma_units, n, std::string(dtype_name(dtype)).c_str(),
                measured_flops_per_s / 1e9, threads, flops_per_s / 1e9);
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
  peak.isa = isa_peak(peak.threads);
  peak.flops_per_s = std::max(peak.measured_flops_per_s, peak.isa.flops_per_s);
  return peak;
}

}  // namespace mixpar::ch08
