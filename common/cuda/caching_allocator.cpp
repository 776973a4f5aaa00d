// The size classes and the free lists of CachingAllocator. No CUDA here: the backend is the
// only thing that touches a device (device_memory.cpp provides the cudaMalloc one).
#include "cuda/caching_allocator.h"

#include <bit>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace mixpar::cuda {

namespace {
std::size_t round_up(std::size_t n, std::size_t step) { return (n + step - 1) / step * step; }
}  // namespace

std::size_t size_class(std::size_t bytes) {
  if (bytes == 0) return 0;
  if (bytes <= kSmallLimitBytes) return round_up(bytes, kMinBlockBytes);
  // Eight classes per doubling: the step is an eighth of the power of two at or below bytes.
  const std::size_t step = std::bit_floor(bytes) / 8;
  return round_up(bytes, step);
}

CachingAllocator::CachingAllocator(std::unique_ptr<MemoryBackend> backend)
    : backend_(std::move(backend)) {
  if (!backend_) throw std::invalid_argument("CachingAllocator: null backend");
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

void* CachingAllocator::take_from_backend(std::size_t class_bytes) {
  void* p = backend_->allocate(class_bytes);
  if (p == nullptr && stats_.cached > 0) {
    // Out of memory with blocks of other classes idle: give them back and try once more.
    empty_cache_locked();
    p = backend_->allocate(class_bytes);
  }
  if (p == nullptr) {
    throw std::runtime_error("CachingAllocator: out of device memory allocating " +
                             format_bytes(class_bytes) + " (" + format_bytes(stats_.reserved) +
                             " already reserved, " + format_bytes(stats_.in_use) + " in use)");
  }
  ++stats_.backend_allocations;
  stats_.reserved += class_bytes;
  if (stats_.reserved > stats_.peak_reserved) stats_.peak_reserved = stats_.reserved;
  return p;
}

void* CachingAllocator::allocate(std::size_t bytes, MemCategory category, MemoryLedger& ledger,
                                 StreamHandle stream) {
  if (bytes == 0) return nullptr;
  const std::size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) {
    std::vector<Cached>& list = it->second;
    // Newest first; a block last used on this very (non-default) stream needs no wait.
    std::size_t pick = list.size() - 1;
    if (stream != nullptr) {
      for (std::size_t i = list.size(); i-- > 0;) {
        if (list[i].stream == stream) {
          pick = i;
          break;
        }
      }
    }
    const Cached block = list[pick];
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(pick));
    if (block.event != nullptr) {
      if (block.stream != stream || stream == nullptr) {
        backend_->wait_event(stream, block.event);
        ++stats_.stream_waits;
      }
      backend_->release_event(block.event);
    }
    p = block.p;
    stats_.cached -= cls;
    ++stats_.cache_hits;
  } else {
    p = take_from_backend(cls);
  }
  live_.emplace(p, Live{cls, bytes, category, &ledger, stream});
  stats_.in_use += cls;
  stats_.requested += bytes;
  ledger.on_alloc(category, Device::kCUDA, bytes);
  return p;
}

void CachingAllocator::deallocate(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) {
    throw std::logic_error("CachingAllocator::deallocate: pointer was not allocated here");
  }
  const Live block = it->second;
  // The event first: if recording fails (a dead context), the block stays live and unreused.
  const EventHandle event = backend_->record_event(block.stream);
  live_.erase(it);
  stats_.in_use -= block.class_bytes;
  stats_.requested -= block.requested;
  stats_.cached += block.class_bytes;
  free_[block.class_bytes].push_back(Cached{p, block.stream, event});
  if (block.ledger == nullptr) return;
  try {
    block.ledger->on_free(block.category, Device::kCUDA, block.requested);
  } catch (const std::exception& e) {
    // The memory is back in the cache either way; a ledger that disagrees is a bookkeeping bug
    // somewhere else, reported loudly rather than thrown out of a destructor.
    ++stats_.ledger_errors;
    std::fprintf(stderr, "mixpar cuda: the ledger refused a device free of %zu bytes (%s): %s\n",
                 block.requested, std::string(category_name(block.category)).c_str(), e.what());
  }
}

void CachingAllocator::mark_used_on(void* p, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) {
    throw std::logic_error("CachingAllocator::mark_used_on: pointer was not allocated here");
  }
  it->second.stream = stream;
}

std::size_t CachingAllocator::forget_ledger(const MemoryLedger& ledger) {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t n = 0;
  for (auto& [p, block] : live_) {
    if (block.ledger == &ledger) {
      block.ledger = nullptr;
      ++n;
    }
  }
  return n;
}

void CachingAllocator::empty_cache_locked() {
  // cudaFree waits for the device, so the blocks' events need no waiting here.
  for (auto& [cls, blocks] : free_) {
    for (const Cached& b : blocks) {
      if (b.event != nullptr) backend_->release_event(b.event);
      backend_->release(b.p, cls);
      ++stats_.backend_releases;
      stats_.reserved -= cls;
      stats_.cached -= cls;
    }
  }
  free_.clear();
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_reserved = stats_.reserved;
}

}  // namespace mixpar::cuda
