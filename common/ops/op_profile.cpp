// OpProfile's rows live in one table behind a mutex: ops are coarse (a GEMM, a LayerNorm over
// a batch), a few hundred per step, so the lock is taken rarely and only while profiling.
#include "ops/op_profile.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string_view>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace mixpar::ops {

std::atomic<bool> OpProfile::on_{false};

namespace {

struct Table {
  std::mutex mu;
  std::map<std::string, OpTime, std::less<>> rows;
};
Table& table() {
  static Table t;
  return t;
}

thread_local int t_depth = 0;  // open timers on this thread

bool in_parallel_region() {
#if defined(_OPENMP)
  return omp_in_parallel() != 0;
#else
  return false;
#endif
}

}  // namespace

void OpProfile::enable(bool on) { on_.store(on, std::memory_order_relaxed); }

void OpProfile::reset() {
  Table& t = table();
  const std::lock_guard lock(t.mu);
  t.rows.clear();
}

std::vector<OpTime> OpProfile::snapshot() {
  Table& t = table();
  std::vector<OpTime> out;
  {
    const std::lock_guard lock(t.mu);
    for (const auto& [name, row] : t.rows) out.push_back(row);
  }
  std::sort(out.begin(), out.end(),
            [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return out;
}

void OpProfile::add(const char* name, double seconds) {
  Table& t = table();
  const std::lock_guard lock(t.mu);
  auto it = t.rows.find(std::string_view(name));
  if (it == t.rows.end()) it = t.rows.emplace(name, OpTime{name, 0, 0.0}).first;
  it->second.calls += 1;
  it->second.seconds += seconds;
}

OpTimer::OpTimer(const char* name) {
  if (!OpProfile::enabled() || in_parallel_region()) return;
  counted_ = true;
  if (t_depth++ > 0) return;  // inside another timer: the outer one has this time
  name_ = name;
  start_ = std::chrono::steady_clock::now();
}

OpTimer::~OpTimer() {
  if (!counted_) return;
  --t_depth;
  if (name_ == nullptr) return;
  OpProfile::add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
                            .count());
}

}  // namespace mixpar::ops
