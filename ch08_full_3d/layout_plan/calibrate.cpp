#include "calibrate.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "comm/local_backend.h"
#include "gemm_peak.h"
#include "ops/compute_threads.h"
#include "optim/adamw.h"
#include "ops/matmul.h"
#include "tensor/tensor.h"
#include "util/errors.h"

namespace mixpar::plan {

std::pair<double, double> fit_line(const std::vector<std::pair<double, double>>& xy,
                                   bool relative) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : xy) {
    const double w = relative && y != 0 ? 1.0 / (y * y) : 1.0;
    n += w;
    sx += w * x;
    sy += w * y;
    sxx += w * x * x;
    sxy += w * x * y;
  }
  const double den = n * sxx - sx * sx;
  if (xy.size() < 2 || den == 0) return {n > 0 ? sy / n : 0.0, 0.0};
  const double b = (n * sxy - sx * sy) / den;
  return {(sy - b * sx) / n, b};
}

namespace {

double memory_bandwidth(int cores) {
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<std::vector<char>> src(static_cast<std::size_t>(cores), std::vector<char>(kBytes, 1));
    std::vector<std::vector<char>> dst(static_cast<std::size_t>(cores), std::vector<char>(kBytes, 0));
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int i = 0; i < cores; ++i) {
      threads.emplace_back([&, i] {
        std::memcpy(dst[static_cast<std::size_t>(i)].data(), src[static_cast<std::size_t>(i)].data(), kBytes);
      });
    }
    for (std::thread& t : threads) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(kBytes) * cores / s);
  }
  return best;
}

// The wall-clock span of phases that every rank thread runs between two barriers: from the
// first rank's start to the last rank's end. Rank 0's own clock is not enough: on shared cores
// it may leave the opening barrier after the others have done much of the work (8 rank threads
// on 2 cores timed by rank 0 put the GEMM rate at 3x the cores' FMA peak). Each rank writes
// its own entries; they are read after LocalWorld::run has joined the threads.
class PhaseSpans {
 public:
  PhaseSpans(int ranks, int phases)
      : ranks_(ranks), start_(std::size_t(ranks) * phases), end_(std::size_t(ranks) * phases) {}
  void start(int rank, int phase = 0) { start_[at(rank, phase)] = Clock::now(); }
  void end(int rank, int phase = 0) { end_[at(rank, phase)] = Clock::now(); }
  double seconds(int phase = 0) const {
    Clock::time_point first = start_[at(0, phase)], last = end_[at(0, phase)];
    for (int r = 1; r < ranks_; ++r) {
      first = std::min(first, start_[at(r, phase)]);
      last = std::max(last, end_[at(r, phase)]);
    }
    return std::chrono::duration<double>(last - first).count();
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::size_t at(int rank, int phase) const { return std::size_t(phase) * ranks_ + rank; }
  int ranks_;
  std::vector<Clock::time_point> start_, end_;
};

// Seconds per (GEMM [+ all-reduce]) round on every rank, the GEMM n x n x n on one thread.
double rounds_seconds(LocalWorld& world, int n, bool with_allreduce, int reps) {
  PhaseSpans span(world.size(), 1);
  world.run([&](Communicator& c) {
    Tensor a = Tensor::zeros({n, n}, DType::kF32);
    Tensor b = Tensor::zeros({n, n}, DType::kF32);
    Tensor out = Tensor::zeros({n, n}, DType::kF32);
    Tensor small = Tensor::zeros({1024}, DType::kF32, MemCategory::kCommBuffers);
    ops::share_cores(world.size());  // as train_gpt's rank threads
    ops::matmul(a, b, out);          // warm
    c.barrier();
    span.start(c.rank());
    for (int i = 0; i < reps; ++i) {
      ops::matmul(a, b, out);
      if (with_allreduce) c.all_reduce(small);
    }
    span.end(c.rank());
    c.barrier();
  });
  return span.seconds() / reps;
}

// AdamW's step over `n` FP32 parameters on every rank thread at once (common/optim, the
// update train_gpt's FP32 runs make): parameters per second of the whole machine, best of 3.
double optimizer_params_per_s(LocalWorld& world, std::int64_t n) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    PhaseSpans span(world.size(), 1);
    world.run([&](Communicator& c) {
      Tensor p = Tensor::zeros({n}, DType::kF32, MemCategory::kParameters);
      Tensor g = Tensor::zeros({n}, DType::kF32, MemCategory::kGradients);
      AdamW opt({p});
      const std::vector<Tensor> grads = {g};
      opt.step(grads);  // warm: pages
      c.barrier();
      span.start(c.rank());
      opt.step(grads);
      span.end(c.rank());
      c.barrier();
    });
    best = std::max(best, static_cast<double>(n) * world.size() / span.seconds());
  }
  return best;
}

double allreduce_seconds(LocalWorld& world, double bytes, int reps) {
  const auto numel = std::max<std::int64_t>(1, static_cast<std::int64_t>(bytes / 4));
  PhaseSpans span(world.size(), reps);
  world.run([&](Communicator& c) {
    Tensor buf = Tensor::zeros({numel}, DType::kF32, MemCategory::kCommBuffers);
    c.all_reduce(buf);  // warm: pages, caches
    for (int i = 0; i < reps; ++i) {
      c.barrier();
      span.start(c.rank(), i);
      c.all_reduce(buf);
      span.end(c.rank(), i);
      c.barrier();
    }
  });
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) times.push_back(span.seconds(i));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

Calibration calibrate_this_machine(int ranks, int cores, const std::vector<int>& gemm_sizes,
                                   const std::vector<double>& allreduce_bytes) {
  if (ranks < 2) throw InputError("--calibrate needs --devices >= 2 (the all-reduce's ranks)");
  if (cores < 1) throw InputError("--calibrate needs at least one core");
  Calibration out;
  LocalWorld world(ranks, {.watchdog_seconds = 0});
  std::vector<std::pair<double, double>> inv;
  for (int n : gemm_sizes) {
    // Every rank thread multiplying at once, timed by the wall clock between two barriers:
    // the machine's rate as a step's compute phase sees it (best of 3).
    const double flops = 2.0 * n * n * n;
    const int reps = std::max(2, static_cast<int>(2e8 / flops));
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
      best = std::max(best, ranks * flops / rounds_seconds(world, n, false, reps));
    }
    out.gemm.emplace_back(n, best);
    inv.emplace_back(1.0 / n, 1.0 / best);
  }
  out.unit_peak = ch08::isa_peak(cores).flops_per_s;
  const auto [a, b] = fit_line(inv);
  Cluster& c = out.cluster;
  c.name = "this-machine";
  c.devices = ranks;
  c.devices_per_node = ranks;
  c.memory_bytes = 0;  // set by the caller (MemAvailable / ranks)
  c.peak_flops = a > 0 ? 1.0 / a : out.gemm.back().second;
  c.fp32_peak_ratio = 1.0;  // a CPU's 16-bit GEMMs widen to FP32 (gemm_peak.h)
  c.gemm_eff_max = 1.0;
  c.gemm_half_size = a > 0 && b > 0 ? b / a : 1.0;
  c.shared_cores = cores;

  std::vector<std::pair<double, double>> pts;
  for (double bytes : allreduce_bytes) {
    const double s = allreduce_seconds(world, bytes, 9);
    out.collective.emplace_back(bytes, s);
    pts.emplace_back(2.0 * (ranks - 1) / ranks * bytes, s);
  }
  const auto [t0, slope] = fit_line(pts, true);
  Link link{.bandwidth = slope > 0 ? 1.0 / slope : 1e12,
            .latency = std::max(0.0, t0) / (2.0 * (ranks - 1))};
  out.idle_latency = link.latency;
  // Alpha as a step sees it: the extra time of rounds with an all-reduce (medians of 3).
  std::vector<double> extra;
  for (int rep = 0; rep < 3; ++rep) {
    const double with = rounds_seconds(world, 64, true, 40);
    const double without = rounds_seconds(world, 64, false, 40);
    extra.push_back(with - without);
  }
  std::sort(extra.begin(), extra.end());
  link.latency = std::max(link.latency, extra[1] / (2.0 * (ranks - 1)));
  c.intra = link;
  c.inter = link;
  out.copy_bandwidth = memory_bandwidth(cores);
  // The optimizer's pass reads and writes 16 B per FP32 parameter (p, g, m, v): the bandwidth
  // it achieves is what the step-time model's memory term divides by.
  out.optimizer_params_per_s = optimizer_params_per_s(world, std::int64_t{1} << 20);
  c.memory_bandwidth = out.optimizer_params_per_s * 2.0 * 16.0;
  return out;
}

}  // namespace mixpar::plan
