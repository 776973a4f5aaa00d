// Latency and bus bandwidth of the collectives, measured the same way for every
// implementation so that their columns can be set side by side (scripts/bench_collectives.sh
// builds the table of ch04_ddp/README.md from this program's lines):
//   bench_collectives --impl local --ranks N   the local backend between N rank threads
//   bench_collectives --impl ring  --ranks N   chapter 4's hand-written ring on those threads
//   mpirun -np N bench_collectives --impl mpi  Open MPI's own collectives between N processes
// Ops: all-reduce, reduce-scatter, all-gather, all-to-all, and sendrecv (each rank sends to
// rank+1 and receives from rank-1: one ring hop, what pipeline and context parallelism do).
// Sizes follow nccl-tests: the all-reduce's buffer, the reduce-scatter's input, the
// all-gather's output, each rank's all-to-all send buffer, the bytes one rank sends; f32.
// busbw = algbw x 2(n-1)/n (all-reduce), x (n-1)/n (reduce-scatter, all-gather, all-to-all),
// x 1 (sendrecv): the bytes one rank's link carries, comparable whatever n is
// (ch04_ddp/PERFORMANCE.md, docs/GLOSSARY.md#algbw).
//
// Timing (the same code for threads and processes): one warm-up call; then the number of calls
// per repetition is calibrated so one repetition lasts at least --min-ms; then --repetitions
// timed repetitions, each started by a barrier and timed on every rank without a closing
// barrier, its time the slowest rank's. A line reports the median, the fastest and the slowest
// repetition's time per call: their spread says how far the machine's load moved the figure.
#include <algorithm>
#include <atomic>
#include <chrono>
#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ch04_ddp/ring_allreduce.h"
#include "comm/local_backend.h"
#include "comm/local_kernels.h"
#ifdef MIXPAR_HAVE_MPI
#include "comm/mpi_backend.h"
#endif

namespace {

using namespace mixpar;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string impl;  // local | ring | mpi
  std::string label;  // the impl column of the output (--label; default: impl)
  int ranks = 2;
  bool full = false;
  double min_seconds = 0.01;
  int repetitions = 5;
  // The switch points, to measure them (-1: the defaults): LocalOptions::oneshot_max_bytes
  // and RingOptions::oneshot_max_bytes, RingOptions::exchange_max_bytes (with
  // reduce_scatter_exchange_max_bytes and all_gather_exchange_max_bytes); 0 turns a path off.
  std::int64_t oneshot_max = -1, ring_oneshot_max = -1, ring_exchange_max = -1, ring_slice = -1;
  double spin_us = -1;
  bool bind = false;
  std::int64_t eager_limit = -1;  // LocalOptions::eager_limit_bytes: sendrecv's copy or loan
  std::int64_t stream_copy_min = -1;  // local::set_streaming_copy_min_bytes (0: never stream)
  std::vector<std::int64_t> sizes;  // --sizes: these instead of the sweep
  std::int64_t max_bytes = -1;  // --max-bytes: the sweep's (or --sizes') sizes up to this only
  std::vector<std::string> ops = {"all-reduce", "reduce-scatter", "all-gather", "all-to-all",
                                  "sendrecv"};
};

// The default sweep: the sizes chapter 4's earlier measurements used (4 KiB, 64 KiB, 1 MiB,
// 64 MiB) and the small ones tensor parallelism and control votes send. --full: those and
// 8 B x 4^k up to 128 MiB, and 256 MiB, in order.
std::vector<std::int64_t> sweep(bool full) {
  std::vector<std::int64_t> s = {8, 128, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  if (!full) return s;
  for (std::int64_t b = 32; b <= (std::int64_t{128} << 20); b *= 4) s.push_back(b);
  s.push_back(std::int64_t{256} << 20);
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

// The host's regime, read beside every repetition. On a VM the round trip of a cache line
// between two virtual CPUs moves with where the host puts them: on the 2-core Xeon 0.02-0.03 us
// when they share a core's cache, 0.25-0.35 us when they do not, and it flips within seconds
// (ch04_ddp/PERFORMANCE.md, "Trips between cores" and "The regime of each repetition"). Small
// messages move with it, ours and Open MPI's alike, so a figure means something only beside
// the regime it was measured in. The probe is the same code for rank threads and for Open MPI's
// processes: ranks 0 and 1 bounce one cache line over memory both map (a plain allocation for
// threads, an MPI_Win_allocate_shared segment for processes), and the other ranks yield until
// they are done, so that they take as little of the two cores as they can in either world.
// Ranks 0 and 1 start only once every other rank has checked in to that loop: Open MPI's
// shared-memory barrier (sm-coll) leaves its processes spinning for a while after it returns,
// and on 4 processes over 2 cores 60% of the readings were then 40-50 us, the barrier's spin
// and not the host's regime.
struct alignas(64) ProbeLine {
  std::int64_t v = 0;
};
struct ProbeLines {
  ProbeLine ping, pong, done, arrived;
};

// A poll's pause, and a yield once the peer is clearly not running (one CPU for both threads:
// without it every trip would wait for the scheduler's tick and the probe would take minutes).
void relax(int spins) {
  if (spins >= 1000) {
    std::this_thread::yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class TripProbe {
 public:
  // `lines`: zeroed memory every rank maps; null: no probe (readings of -1). `trips`: per
  // burst; 64 beside a repetition (at most 0.2 ms in the far regime), 50,000 for --probe.
  TripProbe(ProbeLines* lines, int rank, int ranks, std::int64_t trips = 64)
      : lines_(lines), rank_(rank), ranks_(ranks), burst_trips_(trips) {}

  // Every rank calls it at the same point; rank 0 gets the round trip in us (the median of
  // kBursts bursts of burst_trips_ trips, so one preemption does not move it), the others 0.
  double read() {
    if (!lines_) return -1;
    constexpr int kBursts = 5;
    const auto at = [](ProbeLine& l) { return std::atomic_ref<std::int64_t>(l.v); };
    at(lines_->arrived).fetch_add(1, std::memory_order_acq_rel);
    if (rank_ <= 1) {
      const std::int64_t all = (reads_ + 1) * ranks_;
      for (int s = 0; at(lines_->arrived).load(std::memory_order_acquire) < all; ++s) relax(s);
    }
    std::vector<double> us;
    for (int burst = 0; burst < kBursts; ++burst) {
      const std::int64_t base = trips_;
      trips_ += burst_trips_;
      if (rank_ == 0) {
        const auto t0 = Clock::now();
        for (std::int64_t i = base + 1; i <= trips_; ++i) {
          at(lines_->ping).store(i, std::memory_order_release);
          for (int s = 0; at(lines_->pong).load(std::memory_order_acquire) < i; ++s) relax(s);
        }
        us.push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e6 /
                     double(burst_trips_));
      } else if (rank_ == 1) {
        for (std::int64_t i = base + 1; i <= trips_; ++i) {
          for (int s = 0; at(lines_->ping).load(std::memory_order_acquire) < i; ++s) relax(s);
          at(lines_->pong).store(i, std::memory_order_release);
        }
      }
    }
    ++reads_;
    if (rank_ == 0) at(lines_->done).store(reads_, std::memory_order_release);
    if (rank_ >= 2) {
      while (at(lines_->done).load(std::memory_order_acquire) < reads_) std::this_thread::yield();
    }
    if (rank_ != 0) return 0;
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  }

 private:
  ProbeLines* lines_;
  int rank_, ranks_;
  const std::int64_t burst_trips_;
  std::int64_t trips_ = 0, reads_ = 0;
};

// What the harness needs from a group of ranks: a barrier, the maximum of one number, and the
// regime's probe.
struct Sync {
  std::function<void()> barrier;
  std::function<double(double)> max;
  TripProbe* probe = nullptr;
};

struct Timing {
  std::int64_t calls = 0;  // per repetition
  double median = 0, fastest = 0, slowest = 0;  // seconds per call
  std::vector<double> reps;  // each repetition's seconds per call, in the order they ran
  std::vector<double> probes;  // the probe before each repetition and after the last (us)
};

double elapsed(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Seconds per call of `calls` calls, the slowest rank's.
double timed_run(const Sync& sync, const std::function<void()>& op, std::int64_t calls) {
  sync.barrier();
  const auto t0 = Clock::now();
  for (std::int64_t i = 0; i < calls; ++i) op();
  return sync.max(elapsed(t0)) / double(calls);
}

Timing time_op(const Sync& sync, const std::function<void()>& op, const Config& cfg) {
  op();  // warm: pages, caches, the backend's first-call set-up
  // Calibrate: double the calls until a run lasts a quarter of the target, then scale up.
  std::int64_t calls = 1;
  double per_call = timed_run(sync, op, calls);
  while (per_call * double(calls) < cfg.min_seconds / 4 && calls < (std::int64_t{1} << 24)) {
    calls *= 2;
    per_call = timed_run(sync, op, calls);
  }
  calls = std::max<std::int64_t>(1, std::llround(cfg.min_seconds / per_call));
  Timing timing;
  timing.calls = calls;
  const auto probe = [&] {
    sync.barrier();
    timing.probes.push_back(sync.probe ? sync.probe->read() : -1);
  };
  for (int r = 0; r < cfg.repetitions; ++r) {
    probe();
    timing.reps.push_back(timed_run(sync, op, calls));
  }
  probe();
  std::vector<double> t = timing.reps;
  std::sort(t.begin(), t.end());
  const std::size_t m = t.size();
  timing.median = m % 2 ? t[m / 2] : 0.5 * (t[m / 2 - 1] + t[m / 2]);
  timing.fastest = t.front();
  timing.slowest = t.back();
  return timing;
}

double bus_factor(const std::string& op, int n) {
  if (op == "all-reduce") return 2.0 * (n - 1) / n;
  if (op == "sendrecv") return 1.0;
  return double(n - 1) / n;
}

// Elements per rank block: the size's f32 elements divided among the ranks, at least one.
std::int64_t block_elems(const std::string& op, std::int64_t bytes, int n) {
  const std::int64_t elems = std::max<std::int64_t>(1, bytes / 4);
  if (op == "all-reduce" || op == "sendrecv") return elems;
  return std::max<std::int64_t>(1, elems / n);
}

// The bytes the figure is computed from (nccl-tests' size after rounding to whole blocks).
std::int64_t actual_bytes(const std::string& op, std::int64_t bytes, int n) {
  const std::int64_t k = block_elems(op, bytes, n);
  return 4 * (op == "all-reduce" || op == "sendrecv" ? k : k * n);
}

// rep_us: each repetition's latency in the order they ran; probe_us: the probe's round trip
// before each repetition and after the last (one more reading than repetitions; -1: none),
// both space-separated, so that scripts/bench_collectives_table.py can compare each
// repetition with the other side's in the same regime.
void print_header() {
  std::printf("impl,op,ranks,bytes,actual_bytes,calls,lat_us_median,lat_us_min,lat_us_max,"
              "algbw_GBps,busbw_GBps,rep_us,probe_us\n");
}

std::string joined_us(const std::vector<double>& v, double scale) {
  std::string s;
  char buf[32];
  for (double x : v) {
    std::snprintf(buf, sizeof buf, "%s%.4g", s.empty() ? "" : " ", x < 0 ? -1.0 : x * scale);
    s += buf;
  }
  return s;
}

void print_row(const Config& cfg, const std::string& impl, const std::string& op,
               std::int64_t bytes, const Timing& t) {
  const std::int64_t b = actual_bytes(op, bytes, cfg.ranks);
  const double algbw = double(b) / t.median / 1e9;
  std::printf("%s,%s,%d,%lld,%lld,%lld,%.3f,%.3f,%.3f,%.6g,%.6g,%s,%s\n", impl.c_str(),
              op.c_str(), cfg.ranks, (long long)bytes, (long long)b, (long long)t.calls,
              t.median * 1e6, t.fastest * 1e6, t.slowest * 1e6, algbw,
              algbw * bus_factor(op, cfg.ranks), joined_us(t.reps, 1e6).c_str(),
              joined_us(t.probes, 1).c_str());
  std::fflush(stdout);
}

// The body of one rank: for every op and size, buffers, then the timed calls. `make` returns
// the op to time for (op, k elements per block, buffers), or nullptr where impl has no such op.
struct Buffers {
  Tensor a, b;  // in / out (all-reduce: a only)
};

using MakeOp = std::function<std::function<void()>(const std::string&, Buffers&, int n, int rank)>;

void run_rank(const Config& cfg, const Sync& sync, int rank, const MakeOp& make) {
  const int n = cfg.ranks;
  if (rank == 0) print_header();
  for (const std::string& op : cfg.ops) {
    for (std::int64_t bytes : cfg.sizes.empty() ? sweep(cfg.full) : cfg.sizes) {
      if (cfg.max_bytes >= 0 && bytes > cfg.max_bytes) continue;
      const std::int64_t k = block_elems(op, bytes, n);
      Buffers buf;
      const auto f32 = [](std::int64_t e) {
        Tensor t = Tensor::zeros({e}, DType::kF32, MemCategory::kCommBuffers);
        float* p = t.data_as<float>();
        for (std::int64_t i = 0; i < e; ++i) p[i] = float(i % 7) * 0.25f;  // exact in f32 sums
        return t;
      };
      if (op == "all-reduce") buf.a = f32(k);
      else if (op == "sendrecv") buf.a = f32(k), buf.b = f32(k);
      else if (op == "reduce-scatter") buf.a = f32(k * n), buf.b = f32(k);
      else if (op == "all-gather") buf.a = f32(k), buf.b = f32(k * n);
      else buf.a = f32(k * n), buf.b = f32(k * n);  // all-to-all
      const std::function<void()> fn = make(op, buf, n, rank);
      if (!fn) continue;
      const Timing t = time_op(sync, fn, cfg);
      if (rank == 0) print_row(cfg, cfg.label.empty() ? cfg.impl : cfg.label, op, bytes, t);
    }
  }
}

// --bind: rank r's thread runs only on CPU r mod C of the C CPUs this process may use, as
// mpirun binds each of its processes to a core of its own when there are enough (its default
// for 2 processes on the 2-core EPYC) and round-robin when asked to with more
// (`--map-by core:OVERSUBSCRIBE --bind-to core:overload-allowed`, a configuration of
// scripts/bench_collectives.sh). Unbound, the kernel now and then woke both rank threads on one
// CPU for a whole run: a 2-rank ring all-reduce of 8 MiB then took 2.1-3.5 ms instead of 0.35,
// with ten times the context switches (1 run in 22 at one time, every run for minutes at
// another). On 4 ranks the placement decides the small calls: a sendrecv round the ring of
// 8 B took 1.53-1.67 us with ranks 0 and 2 on one CPU, 1.79-1.82 with 0 and 1, and either,
// from run to run, unbound; Open MPI's processes bound round-robin took 1.49-1.57, unbound
// 2.07-2.20.
std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
#endif
  return cpus;
}

void bind_to(int cpu) {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
    std::fprintf(stderr, "bench_collectives: could not bind a rank thread to CPU %d\n", cpu);
  }
#else
  (void)cpu;
#endif
}

// Rank threads: the local backend's own collectives, or chapter 4's ring on its sendrecv.
int run_threads(const Config& cfg) {
  LocalOptions opts{.watchdog_seconds = 0};
  if (cfg.oneshot_max >= 0) opts.oneshot_max_bytes = static_cast<std::size_t>(cfg.oneshot_max);
  if (cfg.eager_limit >= 0) opts.eager_limit_bytes = static_cast<std::size_t>(cfg.eager_limit);
  if (cfg.spin_us >= 0) opts.spin_microseconds = cfg.spin_us;
  const std::vector<int> cpus = cfg.bind ? allowed_cpus() : std::vector<int>{};
  const bool binds = !cpus.empty();
  LocalWorld world(cfg.ranks, opts);
  const bool ring = cfg.impl == "ring";
  ch04::RingOptions ro;
  if (cfg.ring_oneshot_max >= 0) ro.oneshot_max_bytes = static_cast<std::size_t>(cfg.ring_oneshot_max);
  if (cfg.ring_slice >= 0) ro.slice_bytes = static_cast<std::size_t>(cfg.ring_slice);
  if (cfg.ring_exchange_max >= 0) {  // all three of the ring's exchange limits
    ro.exchange_max_bytes = ro.reduce_scatter_exchange_max_bytes =
        ro.all_gather_exchange_max_bytes = static_cast<std::size_t>(cfg.ring_exchange_max);
  }
  ProbeLines lines;  // the probe's cache lines, shared by the rank threads
  world.run([&](Communicator& c) {
    if (binds) bind_to(cpus[static_cast<std::size_t>(c.rank()) % cpus.size()]);
    Tensor scalar = Tensor::zeros({1}, DType::kF64, MemCategory::kCommBuffers);
    TripProbe probe(&lines, c.rank(), c.size());
    const Sync sync{[&] { c.barrier(); },
                    [&](double x) {
                      scalar.data_as<double>()[0] = x;
                      c.all_reduce(scalar, ReduceOp::kMax);
                      return scalar.data_as<double>()[0];
                    },
                    &probe};
    std::vector<std::int64_t> counts;
    const MakeOp make = [&](const std::string& op, Buffers& b, int n,
                            int rank) -> std::function<void()> {
      if (op == "all-reduce") {
        if (ring) return [&] { ch04::ring_all_reduce(c, b.a, ReduceOp::kSum, ro); };
        return [&] { c.all_reduce(b.a); };
      }
      if (op == "reduce-scatter") {
        if (ring) return [&] { ch04::ring_reduce_scatter(c, b.a, b.b, ReduceOp::kSum, ro); };
        return [&] { c.reduce_scatter(b.a, b.b); };
      }
      if (op == "all-gather") {
        if (ring) return [&] { ch04::ring_all_gather(c, b.a, b.b, ro); };
        return [&] { c.all_gather(b.a, b.b); };
      }
      if (ring) return nullptr;  // the ring has no all-to-all, and its hop is sendrecv itself
      if (op == "all-to-all") {
        counts.assign(static_cast<std::size_t>(n), b.a.numel() / n);
        return [&] { c.all_to_all(b.a, counts, b.b, counts); };
      }
      return [&, n, rank] { c.sendrecv(b.a, (rank + 1) % n, b.b, (rank + n - 1) % n); };
    };
    run_rank(cfg, sync, c.rank(), make);
  });
  return 0;
}

#ifdef MIXPAR_HAVE_MPI
int run_mpi(const Config& base, int* argc, char*** argv) {
  MpiSession session(argc, argv);
  Config cfg = base;
  int rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &cfg.ranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // The probe's cache lines in a segment every process maps, where they all share one node
  // (across nodes there is no cache line between ranks 0 and 1 to bounce: no probe, -1).
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Win win = MPI_WIN_NULL;
  ProbeLines* lines = nullptr;
  if (node_size == cfg.ranks) {
    void* seg = nullptr;
    MPI_Win_allocate_shared(rank == 0 ? MPI_Aint(sizeof(ProbeLines)) : 0, 64, MPI_INFO_NULL,
                            node, &seg, &win);
    MPI_Aint size = 0;
    int disp = 0;
    MPI_Win_shared_query(win, 0, &size, &disp, &seg);
    lines = static_cast<ProbeLines*>(seg);
    if (rank == 0) std::memset(static_cast<void*>(lines), 0, sizeof(ProbeLines));
    MPI_Barrier(MPI_COMM_WORLD);
  }
  TripProbe probe(lines, rank, cfg.ranks);
  const Sync sync{[] { MPI_Barrier(MPI_COMM_WORLD); },
                  [](double x) {
                    double m = 0;
                    MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                    return m;
                  },
                  &probe};
  const MakeOp make = [](const std::string& op, Buffers& b, int n,
                         int r) -> std::function<void()> {
    const auto f = [](const Tensor& t) { return static_cast<float*>(t.data()); };
    const int k = static_cast<int>(op == "all-reduce" || op == "sendrecv" || op == "all-gather"
                                       ? b.a.numel()
                                       : b.a.numel() / n);
    if (op == "all-reduce") {
      return [&b, f, k] {
        MPI_Allreduce(MPI_IN_PLACE, f(b.a), k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      };
    }
    if (op == "reduce-scatter") {
      return [&b, f, k] {
        MPI_Reduce_scatter_block(f(b.a), f(b.b), k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      };
    }
    if (op == "all-gather") {
      return [&b, f, k] {
        MPI_Allgather(f(b.a), k, MPI_FLOAT, f(b.b), k, MPI_FLOAT, MPI_COMM_WORLD);
      };
    }
    if (op == "all-to-all") {
      return [&b, f, k] {
        MPI_Alltoall(f(b.a), k, MPI_FLOAT, f(b.b), k, MPI_FLOAT, MPI_COMM_WORLD);
      };
    }
    return [&b, f, k, n, r] {
      MPI_Sendrecv(f(b.a), k, MPI_FLOAT, (r + 1) % n, 0, f(b.b), k, MPI_FLOAT, (r + n - 1) % n,
                   0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    };
  };
  run_rank(cfg, sync, rank, make);
  if (win != MPI_WIN_NULL) MPI_Win_free(&win);
  MPI_Comm_free(&node);
  return 0;
}
#endif

int usage(const char* why) {
  std::fprintf(stderr,
               "bench_collectives: %s\nusage: bench_collectives --impl local|ring [--ranks N] "
               "[--full] [--min-ms MS] [--repetitions R] [--ops a,b,...] [--sizes b,b,...]\n"
               "       [--oneshot-max BYTES] [--ring-oneshot-max BYTES] [--eager-limit BYTES]\n"
               "       [--ring-exchange-max BYTES] [--ring-slice BYTES] [--spin-us US] [--label NAME]\n"
               "       [--stream-copy-min BYTES]   copies from this size bypass the cache (0: none)\n"
               "       [--max-bytes BYTES]   only the sizes up to this\n"
               "       [--bind]   rank thread r on CPU r mod (the CPUs this process may use)\n"
               "       mpirun -np N bench_collectives --impl mpi [same flags]\n"
               "       bench_collectives --probe   two threads' cache-line round trip, us\n",
               why);
  return 2;
}

}  // namespace

// --probe: the round trip of one cache line between two threads, in us (TripProbe's, the
// median of 5 bursts of 50,000 trips): each thread stores its count, then polls for the
// other's, as a one-shot collective's flags do. On a VM it moves with where the host puts the
// two virtual CPUs (on the 2-core EPYC 0.05-0.07 us for a while, then 0.25-0.3):
// scripts/bench_collectives.sh starts each run when it reads near its best,
// ch04_ddp/PERFORMANCE.md "Trips between cores".
int probe() {
  ProbeLines lines;
  TripProbe mine(&lines, 0, 2, 50000), peer(&lines, 1, 2, 50000);
  std::thread t([&] { peer.read(); });
  const double us = mine.read();
  t.join();
  std::printf("%.3f\n", us);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--probe") return probe();
  Config cfg;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      // A byte count: a whole number >= 0, named with its flag when it is not one.
      const auto bytes = [&]() -> std::int64_t {
        const std::string v = value();
        std::size_t end = 0;
        long long b = -1;
        try {
          b = std::stoll(v, &end);
        } catch (const std::exception&) {
          end = 0;
        }
        if (end != v.size() || b < 0) {
          throw std::invalid_argument(a + " takes a byte count >= 0, not '" + v + "'");
        }
        return b;
      };
      if (a == "--impl") cfg.impl = value();
      else if (a == "--ranks") cfg.ranks = std::stoi(value());
      else if (a == "--label") cfg.label = value();
      else if (a == "--full") cfg.full = true;
      else if (a == "--min-ms") cfg.min_seconds = std::stod(value()) / 1e3;
      else if (a == "--repetitions") cfg.repetitions = std::stoi(value());
      else if (a == "--oneshot-max") cfg.oneshot_max = bytes();
      else if (a == "--ring-oneshot-max") cfg.ring_oneshot_max = bytes();
      else if (a == "--ring-exchange-max") cfg.ring_exchange_max = bytes();
      else if (a == "--ring-slice") cfg.ring_slice = bytes();
      else if (a == "--stream-copy-min") cfg.stream_copy_min = bytes();
      else if (a == "--max-bytes") cfg.max_bytes = bytes();
      else if (a == "--bind") cfg.bind = true;
      else if (a == "--spin-us") {
        const std::string v = value();
        std::size_t end = 0;
        double us = -1;
        try {
          us = std::stod(v, &end);
        } catch (const std::exception&) {
          end = 0;
        }
        if (end != v.size() || !(us >= 0) || us > 1e6) {
          throw std::invalid_argument("--spin-us takes microseconds in 0..1e6, not '" + v + "'");
        }
        cfg.spin_us = us;
      }
      else if (a == "--eager-limit") cfg.eager_limit = bytes();
      else if (a == "--sizes") {
        std::string v = value();
        for (std::size_t p = 0; p <= v.size();) {
          const std::size_t q = std::min(v.find(',', p), v.size());
          cfg.sizes.push_back(std::stoll(v.substr(p, q - p)));
          p = q + 1;
        }
      }
      else if (a == "--ops") {
        cfg.ops.clear();
        std::string s = value();
        for (std::size_t p = 0; p <= s.size();) {
          const std::size_t q = std::min(s.find(',', p), s.size());
          cfg.ops.push_back(s.substr(p, q - p));
          p = q + 1;
        }
      } else {
        throw std::invalid_argument("unknown flag " + a);
      }
    }
  } catch (const std::exception& e) {
    return usage(e.what());
  }
  const std::vector<std::string> known = {"all-reduce", "reduce-scatter", "all-gather",
                                          "all-to-all", "sendrecv"};
  for (const std::string& op : cfg.ops) {
    if (std::find(known.begin(), known.end(), op) == known.end()) {
      return usage(("unknown op " + op).c_str());
    }
  }
  if (cfg.ranks < 2 || cfg.ranks > 64) return usage("--ranks must be 2..64");
  if (cfg.repetitions < 1 || cfg.min_seconds <= 0) return usage("bad --repetitions or --min-ms");
  // Flags of ours that would do nothing: refused rather than silently ignored.
  if (cfg.impl == "mpi" && (cfg.bind || cfg.spin_us >= 0)) {
    return usage("--bind and --spin-us are for rank threads (--impl local|ring); mpirun binds "
                 "and polls its processes itself");
  }
  if (cfg.impl == "mpi" && cfg.stream_copy_min >= 0) {
    return usage("--stream-copy-min sets our copies (--impl local|ring); Open MPI copies with "
                 "its own");
  }
  if (cfg.stream_copy_min >= 0) {
    local::set_streaming_copy_min_bytes(static_cast<std::size_t>(cfg.stream_copy_min));
  }
  if (cfg.impl != "ring" && cfg.ring_slice >= 0) return usage("--ring-slice needs --impl ring");
  if (cfg.impl == "local" || cfg.impl == "ring") return run_threads(cfg);
  if (cfg.impl == "mpi") {
#ifdef MIXPAR_HAVE_MPI
    return run_mpi(cfg, &argc, &argv);
#else
    return usage("built without MPI");
#endif
  }
  return usage("--impl must be local, ring or mpi");
}
