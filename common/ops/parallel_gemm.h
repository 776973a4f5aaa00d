// Threads for one GEMM: the output is cut into one block of rows (or columns, when it is wider
// than tall) per OpenMP thread, and each thread runs a single-threaded GEMM on its block (the
// FP32 kernels of fma_gemm.h, or Eigen's for FP64). Each output element is then computed by one
// thread, whole, so the thread count never changes a bit. Eigen's own OpenMP GEMM shares packed
// panels between threads and synchronises them with spin loops; on a machine shared with other processes a descheduled thread then stalls its peer for
// a whole time slice (a [1024,256]x[256,768] GEMM on 2 busy cores: Eigen's threads 14 GFLOP/s,
// independent blocks 21). Independent blocks meet only at the loop's end. Inside an enclosing
// parallel region (attention's heads) the GEMM runs whole on the calling thread.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace mixpar::ops {

// Below this many multiply-adds (m n k) a GEMM stays on one thread. A parallel GEMM ends at a
// barrier; on an idle machine that costs microseconds, but on a loaded one the last thread to
// arrive may have been descheduled for a whole time slice (milliseconds), so small GEMMs split
// in two ran a chapter 2 demo 20x slower with one other process busy. 2^23 multiply-adds are
// about 0.3 ms of one core: enough work that a split pays even under load (PyTorch keeps
// elementwise work under 32K elements on one thread for the same reason). Results do not
// depend on it: the blocks start at multiples of 8 and each is its own GEMM.
inline constexpr double kGemmParallelMinWork = 8388608.0;

// Calls block(r0, nr, c0, nc) for output blocks [r0, r0 + nr) x [c0, c0 + nc) covering the
// m x n output, one per thread (or once, whole). Blocks start at multiples of 8 rows/columns.
template <class F> void for_gemm_blocks(std::int64_t m, std::int64_t n, std::int64_t k, F&& block) {
#if defined(_OPENMP)
  const std::int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool by_rows = m >= n;
  const std::int64_t len = by_rows ? m : n;
  const std::int64_t parts = std::min(threads, len / 8);
  if (parts > 1 && double(m) * double(n) * double(k) >= kGemmParallelMinWork) {
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(parts))
    for (std::int64_t p = 0; p < parts; ++p) {
      const std::int64_t begin = (len * p / parts) / 8 * 8;
      const std::int64_t end = p + 1 == parts ? len : (len * (p + 1) / parts) / 8 * 8;
      if (by_rows) block(begin, end - begin, std::int64_t{0}, n);
      else block(std::int64_t{0}, m, begin, end - begin);
    }
    return;
  }
#endif
  (void)k;
  block(std::int64_t{0}, m, std::int64_t{0}, n);
}

}  // namespace mixpar::ops
