// The memory ledger: every byte a tensor owns is charged to one rank's ledger under one
// category, on the CPU or the GPU. Live and peak bytes per category are what the chapters
// compare with their formulas ("the memory bill"); buffers that bypass it would hide exactly
// the workspaces and communication buffers that make real runs go out of memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <string>
#include <string_view>

namespace mixpar {

enum class Device : std::uint8_t { kCPU, kCUDA };
inline constexpr int kNumDevices = 2;
constexpr std::string_view device_name(Device d) { return d == Device::kCPU ? "cpu" : "cuda"; }

enum class MemCategory : std::uint8_t {
  kParameters,      // the working copy the model computes with (fp32 or 16-bit)
  kGradients,       // gradients of the working copy
  kMasterParams,    // fp32 master weights kept by a mixed-precision optimizer
  kOptimizerState,  // Adam moments, momentum buffers
  kActivations,     // what forward keeps for backward
  kCommBuffers,     // buckets, staging and receive buffers of the communicator
  kOther,           // workspaces, data batches, everything else
};
inline constexpr int kNumMemCategories = 7;
inline constexpr MemCategory kAllMemCategories[] = {
    MemCategory::kParameters,  MemCategory::kGradients,   MemCategory::kMasterParams,
    MemCategory::kOptimizerState, MemCategory::kActivations, MemCategory::kCommBuffers,
    MemCategory::kOther};
static_assert(std::size(kAllMemCategories) == kNumMemCategories);
std::string_view category_name(MemCategory c);  // "parameters", "gradients", ...

// Thread-safe: ranks' threads may free into each other's ledgers. A ledger must outlive every
// tensor charged to it (each Storage keeps a pointer to it to credit the free).
class MemoryLedger {
 public:
  explicit MemoryLedger(int rank = 0) : rank_(rank) {}
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  void on_alloc(MemCategory c, Device d, std::size_t bytes);
  // Throws std::logic_error (and changes nothing) when more than the live bytes are freed.
  void on_free(MemCategory c, Device d, std::size_t bytes);

  std::size_t live(MemCategory c, Device d = Device::kCPU) const;
  std::size_t peak(MemCategory c, Device d = Device::kCPU) const;
  std::size_t live_total(Device d = Device::kCPU) const;
  // Peak of the sum over categories (not the sum of per-category peaks).
  std::size_t peak_total(Device d = Device::kCPU) const;
  std::int64_t allocations(Device d = Device::kCPU) const;  // number of on_alloc calls
  // Peaks restart from the current live bytes (to measure one phase, e.g. one step).
  void reset_peaks();
  int rank() const { return rank_; }

  // A printable table: one row per category with live and peak bytes (human units).
  std::string table(Device d = Device::kCPU) const;

 private:
  struct Counters {
    std::array<std::size_t, kNumMemCategories> live{};
    std::array<std::size_t, kNumMemCategories> peak{};
    std::size_t live_total = 0;
    std::size_t peak_total = 0;
    std::int64_t allocations = 0;
  };
  int rank_;
  mutable std::mutex mu_;
  std::array<Counters, kNumDevices> dev_{};
};

// The ledger that allocations made on this thread are charged to. Each simulated rank's
// thread installs its own with LedgerScope; otherwise it is the process-wide default ledger.
MemoryLedger& current_ledger();
MemoryLedger& default_ledger();

class LedgerScope {
 public:
  explicit LedgerScope(MemoryLedger& ledger);
  ~LedgerScope();
  LedgerScope(const LedgerScope&) = delete;
  LedgerScope& operator=(const LedgerScope&) = delete;

 private:
  MemoryLedger* previous_;
};

// "1.50 MiB", "12 B": bytes in binary units for tables.
std::string format_bytes(std::size_t bytes);

}  // namespace mixpar
