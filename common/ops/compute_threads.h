// How many threads the calling thread computes with: the OpenMP team that its GEMMs
// (ops/parallel_gemm.h), elementwise passes (ops/chunked.h) and the GPT layers' loops start,
// and that Eigen asks OpenMP for. The setting belongs to the calling thread, so ranks that are
// threads of one process each set their own. No-ops in a build without OpenMP (the tsan
// preset), where everything runs on the calling thread.
#pragma once

namespace mixpar {
class ArgParser;
}

namespace mixpar::ops {

// This thread's team size; threads <= 0 leaves it as it is (OMP_NUM_THREADS, or every core).
void set_compute_threads(int threads);

// Ranks that are threads of one process share its cores: set_compute_threads(cores /
// ranks_in_process), at least one. Without it N ranks each start a team as wide as the
// machine and mostly wait on each other.
void share_cores(int ranks_in_process);

// --threads N, alike on every demo and tool: add_threads_option declares it (default 0: the
// team OMP_NUM_THREADS or the core count gives), apply_threads_option sets this thread's team
// from it after parse(); a negative or non-integer count is an InputError naming --threads.
ArgParser& add_threads_option(ArgParser& a);
void apply_threads_option(const ArgParser& a);

}  // namespace mixpar::ops
