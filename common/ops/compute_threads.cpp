// The calling thread's OpenMP team size: omp_set_num_threads sets it for this thread only.
#include "ops/compute_threads.h"

#include <algorithm>
#include <string>
#include <thread>

#include "util/cli.h"
#include "util/errors.h"

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

ArgParser& add_threads_option(ArgParser& a) {
  return a.option("threads", "0",
                  "compute threads (OpenMP team); 0: OMP_NUM_THREADS or every core");
}

void apply_threads_option(const ArgParser& a) {
  const std::int64_t n = a.get_int("threads");
  if (n < 0 || n > 4096) {
    throw InputError("--threads must be between 0 and 4096, got " + std::to_string(n));
  }
  set_compute_threads(static_cast<int>(n));
}

}  // namespace mixpar::ops
