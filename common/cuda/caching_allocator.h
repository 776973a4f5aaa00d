// A caching allocator for device memory. Blocks come from a backend (cudaMalloc on the GPU, a
// fake in the tests), are rounded up to size classes, and return to a free list of their class
// when released instead of to the backend: a training step that asks for the same shapes every
// step calls cudaMalloc in its first step only. Plain C++, so its logic is tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensor/ledger.h"

namespace mixpar::cuda {

// Requests up to 1 MiB round up to a multiple of 512 B (the alignment cuBLAS and 16-byte
// vector loads want, with room to spare); larger ones to a multiple of 1/8 of the largest
// power of two not above them, so a class wastes less than 12.5 % and there are only 8
// classes per doubling: a 4.1 MiB and a 4.4 MiB buffer share the 4.5 MiB class. 0 stays 0.
inline constexpr std::size_t kMinBlockBytes = 512;
inline constexpr std::size_t kSmallLimitBytes = std::size_t{1} << 20;
std::size_t size_class(std::size_t bytes);

// A stream as the allocator sees it: an opaque handle (cudaStream_t in the CUDA backend).
// nullptr is the legacy default stream, which every blocking stream synchronises with.
using StreamHandle = void*;
// An event a backend recorded on a stream (cudaEvent_t in the CUDA backend).
using EventHandle = void*;

// Where blocks come from. allocate returns nullptr when the device is out of memory; the
// allocator then returns its cached blocks to the backend and tries once more.
//
// The event calls order reuse across streams: record_event marks the point of `stream`
// after the freed block's last use, wait_event makes `stream` wait for it (on the device, the
// host does not block), release_event hands the event back once the wait is enqueued. A
// backend without streams keeps the defaults (no events, nothing to wait for).
class MemoryBackend {
 public:
  virtual ~MemoryBackend() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* p, std::size_t bytes) = 0;
  virtual EventHandle record_event(StreamHandle /*stream*/) { return nullptr; }
  virtual void wait_event(StreamHandle /*stream*/, EventHandle /*event*/) {}
  virtual void release_event(EventHandle /*event*/) {}
};

struct AllocatorStats {
  std::size_t reserved = 0;       // bytes held from the backend: in use + cached (nvidia-smi)
  std::size_t peak_reserved = 0;  // high-water mark of reserved
  std::size_t in_use = 0;         // class bytes of live blocks
  std::size_t requested = 0;      // bytes asked for by live blocks (what the ledger shows)
  std::size_t cached = 0;         // class bytes waiting on free lists
  std::int64_t backend_allocations = 0;
  std::int64_t backend_releases = 0;
  std::int64_t cache_hits = 0;  // allocations served from a free list
  std::int64_t stream_waits = 0;  // reuses that waited for the block's last stream (an event)
  std::int64_t ledger_errors = 0;  // frees the ledger refused (reported on stderr, not thrown)
};

// Thread-safe. The ledger is charged with the bytes *requested*, under the caller's category,
// on the device column, and credited when the block is released: tensors on the GPU show in
// the memory bill exactly as CPU tensors do. Rounding waste and cached blocks are the
// allocator's own business and show in stats() instead.
//
// Stream semantics (PyTorch's caching allocator does the same with record_stream): a block
// remembers the stream it was last used on (the allocating stream, or mark_used_on's). Freeing
// it records an event there; reusing it on another stream first makes that stream wait for
// the event, so the new owner's work never overtakes the old owner's kernels. Reuse on the
// same non-default stream needs no wait (stream order), and a request prefers such a block.
// The legacy default stream (nullptr) always waits: blocking streams are ordered with it, not
// with each other, and work tagged nullptr may have run on any of them.
//
// Ledgers: a live block keeps a pointer to the ledger it is charged to, so a ledger must
// outlive its device blocks, or be detached first with forget_ledger (ScopedDeviceLedger in
// device_tensor.h does it at the end of its scope).
class CachingAllocator {
 public:
  explicit CachingAllocator(std::unique_ptr<MemoryBackend> backend);
  ~CachingAllocator();  // returns the cached blocks; blocks still live are left to the backend
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (nullptr for 0 bytes, charging nothing). Throws
  // std::runtime_error naming the sizes when the backend fails even with an empty cache.
  void* allocate(std::size_t bytes, MemCategory category, MemoryLedger& ledger,
                 StreamHandle stream = nullptr);
  // p from allocate (nullptr is ignored); credits the ledger it was charged to and records an
  // event on the block's last stream. Throws std::logic_error for a pointer not from here; a
  // ledger that refuses the credit is counted (stats().ledger_errors) and reported on stderr.
  void deallocate(void* p);
  // p's work runs on `stream` from now on (a buffer handed to another stream's consumer, once
  // that stream is ordered after the producer): its free records the event there.
  void mark_used_on(void* p, StreamHandle stream);
  // Live blocks charged to `ledger` are charged to no ledger from now on (their frees credit
  // nothing); returns how many there were. For a ledger about to die before its blocks.
  std::size_t forget_ledger(const MemoryLedger& ledger);
  // Returns every cached block to the backend (torch.cuda.empty_cache()).
  void empty_cache();

  AllocatorStats stats() const;
  void reset_peak();

 private:
  struct Live {
    std::size_t class_bytes;
    std::size_t requested;
    MemCategory category;
    MemoryLedger* ledger;  // null once forgotten
    StreamHandle stream;
  };
  struct Cached {
    void* p;
    StreamHandle stream;  // where it was last used
    EventHandle event;    // recorded there at the free (null: the backend has no events)
  };
  void* take_from_backend(std::size_t class_bytes);  // with mu_ held
  void empty_cache_locked();

  mutable std::mutex mu_;
  std::unique_ptr<MemoryBackend> backend_;
  std::unordered_map<void*, Live> live_;
  std::map<std::size_t, std::vector<Cached>> free_;  // class bytes -> cached blocks
  AllocatorStats stats_;
};

// The allocator of the current CUDA device, on cudaMalloc/cudaFree (CUDA builds only; the
// engine uses one device per process). It lives until the process exits: freeing device
// memory during static destruction races the CUDA runtime's own teardown.
CachingAllocator& device_allocator();

}  // namespace mixpar::cuda
