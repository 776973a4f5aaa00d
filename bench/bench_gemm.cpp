// The FP32 GEMM kernels of common/ops/fma_gemm.h side by side, one thread, on the GEMMs of a
// config-S training step (ch08_full_3d: B 8, T 128, width 256: 1024 rows): each kernel this CPU
// has, and Eigen's GEMM compiled for this build's ISA (what the CPU engine ran before). The
// kernels compute the same bits (FmaGemm.* tests); only their speed differs. GFLOP/s counts
// 2 m n k per call. Kernels the CPU lacks are skipped, saying why.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ops/eigen_gemm.h"
#include "ops/fma_gemm.h"

namespace {

using mixpar::ops::GemmKernel;

struct Shape {
  std::int64_t m, n, k;
  bool ta, tb;
};

// Forward x w (c_attn, attention's projection, the MLP's two), and the two backward products of
// the MLP's first layer: dx = dy w^T and dw = x^T dy.
constexpr Shape kShapes[] = {
    {1024, 768, 256, false, false}, {1024, 256, 256, false, false},
    {1024, 1024, 256, false, false}, {1024, 256, 1024, false, false},
    {1024, 256, 1024, false, true},  {256, 1024, 1024, true, false},
};

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// range(0): the shape; range(1): 0 Eigen, 1 portable, 2 AVX2, 3 AVX-512 (one thread each), 4
// the engine's entry point (the kernel this CPU takes, on the OpenMP threads: parallel_gemm.h;
// Eigen's row 0 runs on the same threads).
void BM_Gemm(benchmark::State& state) {
  const Shape s = kShapes[state.range(0)];
  const auto a = random_values(static_cast<std::size_t>(s.m * s.k), 1);
  const auto b = random_values(static_cast<std::size_t>(s.k * s.n), 2);
  std::vector<float> o(static_cast<std::size_t>(s.m * s.n));
  const int which = static_cast<int>(state.range(1));
  const GemmKernel kernels[] = {GemmKernel::kPortable, GemmKernel::kPortable, GemmKernel::kAvx2Fma,
                                GemmKernel::kAvx512, mixpar::ops::gemm_kernel()};
  std::string why;
  if (which > 0 && !mixpar::ops::detail::fma_gemm_with(kernels[which], a.data(), b.data(), nullptr,
                                                       o.data(), 1, 1, 0, false, false, 1.0f,
                                                       0.0f, &why)) {
    state.SkipWithError(why.c_str());
    return;
  }
  for (auto _ : state) {
    if (which == 0) {
      mixpar::ops::detail::eigen_gemm<float>(a.data(), b.data(), o.data(), s.m, s.n, s.k, s.ta,
                                             s.tb, 1.0f, 0.0f);
    } else if (which == 4) {
      mixpar::ops::detail::fma_gemm(a.data(), b.data(), nullptr, o.data(), s.m, s.n, s.k, s.ta,
                                    s.tb, 1.0f, 0.0f);
    } else {
      mixpar::ops::detail::fma_gemm_with(kernels[which], a.data(), b.data(), nullptr, o.data(),
                                         s.m, s.n, s.k, s.ta, s.tb, 1.0f, 0.0f);
    }
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * double(s.m) * double(s.n) * double(s.k) * double(state.iterations()),
      benchmark::Counter::kIsRate);
  const std::string engine =
      "engine (" + std::string(mixpar::ops::gemm_kernel_name(mixpar::ops::gemm_kernel())) + ")";
  const char* names[] = {"eigen", "portable", "avx2", "avx512", engine.c_str()};
  state.SetLabel(std::string(names[which]) + " " + std::to_string(s.m) + "x" +
                 std::to_string(s.n) + "x" + std::to_string(s.k) + (s.ta ? " ta" : "") +
                 (s.tb ? " tb" : ""));
}

void all_shapes(benchmark::internal::Benchmark* b) {
  for (int s = 0; s < static_cast<int>(std::size(kShapes)); ++s) {
    for (int k : {0, 2, 3, 4}) b->Args({s, k});
  }
  b->Args({0, 1});  // the portable loop once, for scale
}

BENCHMARK(BM_Gemm)->Apply(all_shapes)->Unit(benchmark::kMillisecond)->MinTime(0.3);

}  // namespace

BENCHMARK_MAIN();
