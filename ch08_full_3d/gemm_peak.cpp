#include "gemm_peak.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "ops/compute_threads.h"
#include "ops/matmul.h"
#include "tensor/tensor.h"

namespace mixpar::ch08 {

GemmPeak measure_gemm_peak(int n, int repeats) {
  GemmPeak peak;
  peak.n = n;
  peak.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::thread worker([&] {
    ops::set_compute_threads(peak.threads);
    const std::int64_t N = n;
    Tensor a = Tensor::zeros({N, N}, DType::kF32), b = Tensor::zeros({N, N}, DType::kF32);
    Tensor c = Tensor::zeros({N, N}, DType::kF32);
    for (std::int64_t i = 0; i < N * N; ++i) {
      a.data_as<float>()[i] = static_cast<float>(i % 7) * 0.125f;
      b.data_as<float>()[i] = static_cast<float>(i % 5) * 0.25f;
    }
    ops::matmul(a, b, c);  // warm-up: caches, the OpenMP team
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      ops::matmul(a, b, c);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    peak.flops_per_s = 2.0 * static_cast<double>(N * N * N) / best;
  });
  worker.join();
  return peak;
}

}  // namespace mixpar::ch08
