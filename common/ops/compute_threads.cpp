// The calling thread's OpenMP team size: omp_set_num_threads sets it for this thread only.
#include "ops/compute_threads.h"

#include <algorithm>
#include <thread>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace mixpar::ops {

void set_compute_threads(int threads) {
  if (threads <= 0) return;
#if defined(_OPENMP)
  omp_set_num_threads(threads);
#endif
}

void share_cores(int ranks_in_process) {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  set_compute_threads(std::max(1, cores / std::max(1, ranks_in_process)));
}

}  // namespace mixpar::ops
