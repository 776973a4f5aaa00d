// Where a training step's time goes: wall time per operation (GEMMs, attention, LayerNorm,
// GELU, the loss, AdamW, ...), summed over calls while a profile is on. Each op opens an
// OpTimer named after it; only the outermost timer on a thread counts (linear_forward's
// matmul is part of "linear forward", not counted twice), and timers opened inside an OpenMP
// parallel region count nothing (the region's caller is already being timed), so the rows add
// up to at most the wall time profiled. Off by default: then a timer costs one relaxed atomic
// load. Used by bench_gpt_step --profile; the numbers are measurements, never test claims.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace mixpar::ops {

struct OpTime {
  std::string name;
  std::int64_t calls = 0;
  double seconds = 0;
};

class OpProfile {
 public:
  static void enable(bool on);  // on: timers start counting (rows kept until reset())
  static bool enabled() { return on_.load(std::memory_order_relaxed); }
  static void reset();
  // Every op timed since the last reset, most time first.
  static std::vector<OpTime> snapshot();
  static void add(const char* name, double seconds);

 private:
  static std::atomic<bool> on_;
};

// Times its scope as `name` (a string literal: rows are keyed by its text).
class OpTimer {
 public:
  explicit OpTimer(const char* name);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  bool counted_ = false;         // this timer entered the thread's depth count
  const char* name_ = nullptr;  // null: an inner (or unprofiled) timer, which counts nothing
  std::chrono::steady_clock::time_point start_;
};

}  // namespace mixpar::ops
