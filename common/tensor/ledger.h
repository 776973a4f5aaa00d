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

// Where billed bytes live. kDevice: the memory the model computes from, the GPU's (Device::kCUDA)
// or, on the CPU engine, the simulated device's (Device::kCPU). kHost: host memory beside it,
// where optimizer offload (ZeRO-Offload, Ren et al. 2021; docs/REFERENCE.md, ZeRO memory and
// traffic) keeps the FP32 masters and Adam moments and runs the step. A device's budget
// (--device-memory) is compared with the device side only; the host side has its own counters.
enum class MemPlace : std::uint8_t { kDevice, kHost };
constexpr std::string_view place_name(MemPlace p) { return p == MemPlace::kHost ? "host" : "device"; }

// Thread-safe: ranks' threads may free into each other's ledgers. A ledger must outlive every
// tensor charged to it (each Storage keeps a pointer to it to credit the free).
class MemoryLedger {
 public:
  explicit MemoryLedger(int rank = 0) : rank_(rank) {}
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  // place kHost: charged to the host side (d is then the CPU), not to device d's counters.
  void on_alloc(MemCategory c, Device d, std::size_t bytes, MemPlace place = MemPlace::kDevice);
  // Throws std::logic_error (and changes nothing) when more than the live bytes are freed.
  void on_free(MemCategory c, Device d, std::size_t bytes, MemPlace place = MemPlace::kDevice);

  std::size_t live(MemCategory c, Device d = Device::kCPU) const;
  std::size_t peak(MemCategory c, Device d = Device::kCPU) const;
  std::size_t live_total(Device d = Device::kCPU) const;
  // Peak of the sum over categories (not the sum of per-category peaks).
  std::size_t peak_total(Device d = Device::kCPU) const;
  std::int64_t allocations(Device d = Device::kCPU) const;  // number of on_alloc calls
  // The host side (MemPlace::kHost): the same counters for offloaded bytes.
  std::size_t host_live(MemCategory c) const;
  std::size_t host_peak(MemCategory c) const;
  std::size_t host_live_total() const;
  std::size_t host_peak_total() const;
  std::int64_t host_allocations() const;
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
  Counters& counters(Device d, MemPlace place);
  int rank_;
  mutable std::mutex mu_;
  std::array<Counters, kNumDevices> dev_{};
  Counters host_{};
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

// Allocations made on this thread while a HostMemoryScope lives are billed to the host side
// (MemPlace::kHost): what an offloaded optimizer allocates inside one is host memory, whatever
// engine runs the model. pinned: page-locked as well (cudaHostAlloc), for buffers the GPU
// copies to and from asynchronously; only a CUDA build with a device can pin (the allocation
// throws std::runtime_error saying why otherwise). Scopes nest; the outer one is restored.
class HostMemoryScope {
 public:
  explicit HostMemoryScope(bool pinned = false);
  ~HostMemoryScope();
  HostMemoryScope(const HostMemoryScope&) = delete;
  HostMemoryScope& operator=(const HostMemoryScope&) = delete;

 private:
  MemPlace previous_place_;
  bool previous_pinned_;
};
MemPlace current_mem_place();  // kHost inside a HostMemoryScope on this thread
bool current_host_pinned();    // inside a pinned HostMemoryScope

// "1.50 MiB", "12 B": bytes in binary units for tables.
std::string format_bytes(std::size_t bytes);

}  // namespace mixpar
