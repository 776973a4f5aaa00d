// MemoryLedger bookkeeping: one mutex-guarded set of live/peak counters per device, and the
// thread-local "current ledger" that LedgerScope installs for a simulated rank's thread.
#include "tensor/ledger.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace mixpar {

std::string_view category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kParameters: return "parameters";
    case MemCategory::kGradients: return "gradients";
    case MemCategory::kMasterParams: return "master_params";
    case MemCategory::kOptimizerState: return "optimizer_state";
    case MemCategory::kActivations: return "activations";
    case MemCategory::kCommBuffers: return "comm_buffers";
    case MemCategory::kOther: return "other";
  }
  return "?";
}

MemoryLedger::Counters& MemoryLedger::counters(Device d, MemPlace place) {
  return place == MemPlace::kHost ? host_ : dev_[static_cast<int>(d)];
}

void MemoryLedger::on_alloc(MemCategory c, Device d, std::size_t bytes, MemPlace place) {
  std::lock_guard lock(mu_);
  Counters& k = counters(d, place);
  const int i = static_cast<int>(c);
  k.live[i] += bytes;
  k.peak[i] = std::max(k.peak[i], k.live[i]);
  k.live_total += bytes;
  k.peak_total = std::max(k.peak_total, k.live_total);
  ++k.allocations;
}

void MemoryLedger::on_free(MemCategory c, Device d, std::size_t bytes, MemPlace place) {
  std::lock_guard lock(mu_);
  Counters& k = counters(d, place);
  const int i = static_cast<int>(c);
  if (k.live[i] < bytes) throw std::logic_error("MemoryLedger: freeing more bytes than live");
  k.live[i] -= bytes;
  k.live_total -= bytes;
}

std::size_t MemoryLedger::live(MemCategory c, Device d) const {
  std::lock_guard lock(mu_);
  return dev_[static_cast<int>(d)].live[static_cast<int>(c)];
}
std::size_t MemoryLedger::peak(MemCategory c, Device d) const {
  std::lock_guard lock(mu_);
  return dev_[static_cast<int>(d)].peak[static_cast<int>(c)];
}
std::size_t MemoryLedger::live_total(Device d) const {
  std::lock_guard lock(mu_);
  return dev_[static_cast<int>(d)].live_total;
}
std::size_t MemoryLedger::peak_total(Device d) const {
  std::lock_guard lock(mu_);
  return dev_[static_cast<int>(d)].peak_total;
}
std::int64_t MemoryLedger::allocations(Device d) const {
  std::lock_guard lock(mu_);
  return dev_[static_cast<int>(d)].allocations;
}

std::size_t MemoryLedger::host_live(MemCategory c) const {
  std::lock_guard lock(mu_);
  return host_.live[static_cast<int>(c)];
}
std::size_t MemoryLedger::host_peak(MemCategory c) const {
  std::lock_guard lock(mu_);
  return host_.peak[static_cast<int>(c)];
}
std::size_t MemoryLedger::host_live_total() const {
  std::lock_guard lock(mu_);
  return host_.live_total;
}
std::size_t MemoryLedger::host_peak_total() const {
  std::lock_guard lock(mu_);
  return host_.peak_total;
}
std::int64_t MemoryLedger::host_allocations() const {
  std::lock_guard lock(mu_);
  return host_.allocations;
}

void MemoryLedger::reset_peaks() {
  std::lock_guard lock(mu_);
  for (Counters& k : dev_) {
    k.peak = k.live;
    k.peak_total = k.live_total;
  }
  host_.peak = host_.live;
  host_.peak_total = host_.live_total;
}

std::string format_bytes(std::size_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%zu B", bytes);
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return buf;
}

std::string MemoryLedger::table(Device d) const {
  Counters k;
  {
    // One snapshot, so the rows and the total agree even while other threads allocate.
    std::lock_guard lock(mu_);
    k = dev_[static_cast<int>(d)];
  }
  std::string out;
  char line[128];
  std::snprintf(line, sizeof line, "memory ledger, rank %d, %s\n%-16s %14s %14s\n", rank_,
                std::string(device_name(d)).c_str(), "category", "live", "peak");
  out += line;
  for (MemCategory c : kAllMemCategories) {
    std::snprintf(line, sizeof line, "%-16s %14s %14s\n", std::string(category_name(c)).c_str(),
                  format_bytes(k.live[static_cast<int>(c)]).c_str(),
                  format_bytes(k.peak[static_cast<int>(c)]).c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "%-16s %14s %14s\n", "total", format_bytes(k.live_total).c_str(),
                format_bytes(k.peak_total).c_str());
  out += line;
  return out;
}

namespace {
thread_local MemoryLedger* t_current = nullptr;
thread_local MemPlace t_place = MemPlace::kDevice;
thread_local bool t_pinned = false;
}  // namespace

HostMemoryScope::HostMemoryScope(bool pinned) : previous_place_(t_place), previous_pinned_(t_pinned) {
  t_place = MemPlace::kHost;
  t_pinned = pinned;
}
HostMemoryScope::~HostMemoryScope() {
  t_place = previous_place_;
  t_pinned = previous_pinned_;
}
MemPlace current_mem_place() { return t_place; }
bool current_host_pinned() { return t_pinned; }

MemoryLedger& default_ledger() {
  static MemoryLedger ledger(0);
  return ledger;
}

MemoryLedger& current_ledger() { return t_current ? *t_current : default_ledger(); }

LedgerScope::LedgerScope(MemoryLedger& ledger) : previous_(t_current) { t_current = &ledger; }
LedgerScope::~LedgerScope() { t_current = previous_; }

}  // namespace mixpar
