// The caching allocator: size classes and free-list reuse against a fake backend (no GPU
// needed: these run everywhere), then the real cudaMalloc allocator and DeviceTensor on a GPU
// (skipped, saying why, where none is visible).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "cuda/caching_allocator.h"
#include "gpu.h"
#include "tensor/ledger.h"
#if MIXPAR_HAVE_CUDA
#include "cuda/device_tensor.h"
#include "cuda_test_util.h"
#endif

namespace mixpar::cuda {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Hands out distinct fake addresses (never dereferenced) up to a capacity, counting calls.
class FakeBackend final : public MemoryBackend {
 public:
  explicit FakeBackend(std::size_t capacity = SIZE_MAX) : capacity_(capacity) {}
  void* allocate(std::size_t bytes) override {
    if (held_ + bytes > capacity_) return nullptr;
    held_ += bytes;
    ++allocations;
    next_ += bytes + 4096;
    return reinterpret_cast<void*>(next_);
  }
  void release(void* /*p*/, std::size_t bytes) override {
    held_ -= bytes;
    ++releases;
  }
  // Events: distinct fake handles; every record and wait is logged, live ones counted.
  EventHandle record_event(StreamHandle stream) override {
    recorded.push_back(stream);
    ++live_events;
    return reinterpret_cast<EventHandle>(static_cast<std::uintptr_t>(recorded.size()));
  }
  void wait_event(StreamHandle stream, EventHandle event) override {
    waits.push_back({stream, event});
  }
  void release_event(EventHandle /*event*/) override { --live_events; }
  std::size_t held() const { return held_; }
  int allocations = 0, releases = 0;
  std::vector<StreamHandle> recorded;                      // stream of each recorded event
  std::vector<std::pair<StreamHandle, EventHandle>> waits;  // (waiting stream, event)
  int live_events = 0;

 private:
  std::size_t capacity_, held_ = 0;
  std::uintptr_t next_ = 1 << 20;
};

struct Fixture {
  explicit Fixture(std::size_t capacity = SIZE_MAX) {
    auto b = std::make_unique<FakeBackend>(capacity);
    backend = b.get();
    allocator = std::make_unique<CachingAllocator>(std::move(b));
  }
  FakeBackend* backend;
  std::unique_ptr<CachingAllocator> allocator;
  MemoryLedger ledger;
};

TEST(CudaAllocatorLogic, SmallRequestsRoundUpTo512Bytes) {
  EXPECT_EQ(size_class(0), 0u);
  EXPECT_EQ(size_class(1), 512u);
  EXPECT_EQ(size_class(512), 512u);
  EXPECT_EQ(size_class(513), 1024u);
  EXPECT_EQ(size_class(kMiB), kMiB);
}

TEST(CudaAllocatorLogic, LargeRequestsUseEightClassesPerDoubling) {
  EXPECT_EQ(size_class(kMiB + 1), kMiB + kMiB / 8);
  EXPECT_EQ(size_class(4 * kMiB), 4 * kMiB);
  EXPECT_EQ(size_class(4 * kMiB + 1), 4 * kMiB + kMiB / 2);
  EXPECT_EQ(size_class(static_cast<std::size_t>(4.1 * kMiB)), 4 * kMiB + kMiB / 2);
  EXPECT_EQ(size_class(static_cast<std::size_t>(4.4 * kMiB)), 4 * kMiB + kMiB / 2);
}

TEST(CudaAllocatorLogic, ClassesAreMonotoneIdempotentAndWasteUnderAnEighth) {
  std::size_t previous = 0;
  for (std::size_t bytes = 1; bytes < (std::size_t{1} << 34); bytes = bytes * 5 / 4 + 7) {
    const std::size_t c = size_class(bytes);
    ASSERT_GE(c, bytes);
    ASSERT_GE(c, previous) << bytes;
    ASSERT_EQ(size_class(c), c) << bytes;
    if (bytes > kSmallLimitBytes) {
      ASSERT_LT(c - bytes, bytes / 8) << bytes;
    }
    ASSERT_EQ(c % kMinBlockBytes, 0u) << bytes;
    previous = c;
  }
}

TEST(CudaAllocatorLogic, ReleasedBlocksAreReusedWithinTheirClass) {
  Fixture f;
  void* a = f.allocator->allocate(1000, MemCategory::kActivations, f.ledger);
  f.allocator->deallocate(a);
  void* b = f.allocator->allocate(900, MemCategory::kGradients, f.ledger);  // same 1024 B class
  EXPECT_EQ(a, b);
  EXPECT_EQ(f.backend->allocations, 1);
  void* c = f.allocator->allocate(2000, MemCategory::kGradients, f.ledger);  // another class
  EXPECT_NE(c, b);
  EXPECT_EQ(f.backend->allocations, 2);
  const AllocatorStats s = f.allocator->stats();
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.in_use, 1024u + 2048u);
  EXPECT_EQ(s.requested, 900u + 2000u);
  EXPECT_EQ(s.reserved, 1024u + 2048u);
  EXPECT_EQ(s.cached, 0u);
  f.allocator->deallocate(b);
  f.allocator->deallocate(c);
}

TEST(CudaAllocatorLogic, TheLedgerSeesRequestedBytesPerCategoryOnTheDevice) {
  Fixture f;
  void* p = f.allocator->allocate(1000, MemCategory::kParameters, f.ledger);
  void* g = f.allocator->allocate(3000, MemCategory::kGradients, f.ledger);
  EXPECT_EQ(f.ledger.live(MemCategory::kParameters, Device::kCUDA), 1000u);
  EXPECT_EQ(f.ledger.live(MemCategory::kGradients, Device::kCUDA), 3000u);
  EXPECT_EQ(f.ledger.live_total(Device::kCPU), 0u);
  f.allocator->deallocate(p);
  f.allocator->deallocate(g);
  EXPECT_EQ(f.ledger.live_total(Device::kCUDA), 0u);
  EXPECT_EQ(f.ledger.peak_total(Device::kCUDA), 4000u);
  // The blocks are cached, not returned: the allocator still holds them.
  EXPECT_EQ(f.allocator->stats().cached, 1024u + 3072u);
  EXPECT_EQ(f.backend->held(), 1024u + 3072u);
}

TEST(CudaAllocatorLogic, EmptyCacheReturnsIdleBlocksOnly) {
  Fixture f;
  void* live = f.allocator->allocate(kMiB, MemCategory::kOther, f.ledger);
  void* idle = f.allocator->allocate(3 * kMiB, MemCategory::kOther, f.ledger);
  f.allocator->deallocate(idle);
  f.allocator->empty_cache();
  EXPECT_EQ(f.backend->releases, 1);
  EXPECT_EQ(f.backend->held(), kMiB);
  const AllocatorStats s = f.allocator->stats();
  EXPECT_EQ(s.reserved, kMiB);
  EXPECT_EQ(s.cached, 0u);
  EXPECT_EQ(s.peak_reserved, 4 * kMiB);
  f.allocator->deallocate(live);
}

TEST(CudaAllocatorLogic, OutOfMemoryEmptiesTheCacheAndRetriesOnce) {
  Fixture f(4 * kMiB);
  void* a = f.allocator->allocate(3 * kMiB, MemCategory::kOther, f.ledger);
  f.allocator->deallocate(a);  // cached: 3 MiB of the 4 held idle
  void* b = f.allocator->allocate(2 * kMiB, MemCategory::kOther, f.ledger);  // needs the room
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(f.backend->releases, 1);
  EXPECT_EQ(f.allocator->stats().reserved, 2 * kMiB);
  try {
    f.allocator->allocate(3 * kMiB, MemCategory::kOther, f.ledger);
    FAIL() << "expected an out-of-memory error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("out of device memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(f.ledger.live_total(Device::kCUDA), 2 * kMiB);  // the failure charged nothing
  f.allocator->deallocate(b);
}

TEST(CudaAllocatorLogic, ZeroBytesAndForeignPointers) {
  Fixture f;
  EXPECT_EQ(f.allocator->allocate(0, MemCategory::kOther, f.ledger), nullptr);
  EXPECT_EQ(f.backend->allocations, 0);
  f.allocator->deallocate(nullptr);  // ignored
  int x = 0;
  EXPECT_THROW(f.allocator->deallocate(&x), std::logic_error);
}

TEST(CudaAllocatorLogic, ConcurrentUseKeepsTheBooksBalanced) {
  Fixture f;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&f, t] {
      MemoryLedger& ledger = f.ledger;
      for (int i = 0; i < 500; ++i) {
        void* p = f.allocator->allocate(static_cast<std::size_t>(512 * (1 + (i + t) % 7)),
                                        MemCategory::kActivations, ledger);
        f.allocator->deallocate(p);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const AllocatorStats s = f.allocator->stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.requested, 0u);
  EXPECT_EQ(s.cached, s.reserved);
  EXPECT_EQ(f.ledger.live_total(Device::kCUDA), 0u);
  EXPECT_LE(f.backend->allocations, 4 * 7);  // at most one block per class per thread
}

StreamHandle fake_stream(int i) { return reinterpret_cast<StreamHandle>(std::uintptr_t(0x100 * i)); }
EventHandle event_no(std::size_t i) { return reinterpret_cast<EventHandle>(std::uintptr_t(i)); }

TEST(CudaAllocatorLogic, ReuseOnAnotherStreamWaitsForTheEventOfTheLastOne) {
  Fixture f;
  const StreamHandle a = fake_stream(1), b = fake_stream(2);
  void* p = f.allocator->allocate(4000, MemCategory::kActivations, f.ledger, a);
  f.allocator->deallocate(p);
  ASSERT_EQ(f.backend->recorded.size(), 1u);
  EXPECT_EQ(f.backend->recorded[0], a);  // the free records on the block's stream
  void* q = f.allocator->allocate(4000, MemCategory::kActivations, f.ledger, b);
  EXPECT_EQ(q, p);
  ASSERT_EQ(f.backend->waits.size(), 1u);
  EXPECT_EQ(f.backend->waits[0].first, b);  // b waits for the event recorded on a
  EXPECT_EQ(f.backend->waits[0].second, event_no(1));
  EXPECT_EQ(f.allocator->stats().stream_waits, 1);
  EXPECT_EQ(f.backend->live_events, 0);  // released once the wait is enqueued
  f.allocator->deallocate(q);
}

TEST(CudaAllocatorLogic, ReuseOnTheSameStreamNeedsNoWaitAndIsPreferred) {
  Fixture f;
  const StreamHandle a = fake_stream(1), b = fake_stream(2);
  void* pa = f.allocator->allocate(4000, MemCategory::kOther, f.ledger, a);
  void* pb = f.allocator->allocate(4000, MemCategory::kOther, f.ledger, b);
  f.allocator->deallocate(pa);
  f.allocator->deallocate(pb);  // newest: a plain LIFO would hand pb to stream a
  void* again = f.allocator->allocate(4000, MemCategory::kOther, f.ledger, a);
  EXPECT_EQ(again, pa);
  EXPECT_TRUE(f.backend->waits.empty());
  EXPECT_EQ(f.allocator->stats().stream_waits, 0);
  f.allocator->deallocate(again);
  f.allocator->empty_cache();
  EXPECT_EQ(f.backend->live_events, 0);  // cached blocks' events go back with them
}

TEST(CudaAllocatorLogic, TheDefaultStreamAlwaysWaitsAndMarkUsedOnMovesTheEvent) {
  Fixture f;
  const StreamHandle nccl = fake_stream(3);
  void* p = f.allocator->allocate(100, MemCategory::kCommBuffers, f.ledger);  // legacy stream
  f.allocator->deallocate(p);
  void* q = f.allocator->allocate(100, MemCategory::kCommBuffers, f.ledger);
  ASSERT_EQ(q, p);
  // Work tagged with the legacy stream may have run on any blocking stream: wait anyway.
  ASSERT_EQ(f.backend->waits.size(), 1u);
  EXPECT_EQ(f.backend->waits[0].first, nullptr);
  f.allocator->mark_used_on(q, nccl);  // handed to a non-blocking stream's consumer
  f.allocator->deallocate(q);
  EXPECT_EQ(f.backend->recorded.back(), nccl);
  EXPECT_THROW(f.allocator->mark_used_on(q, nccl), std::logic_error);  // freed
}

TEST(CudaAllocatorLogic, AForgottenLedgerIsNeverCreditedAndRefusalsAreCounted) {
  Fixture f;
  void* kept = nullptr;
  {
    MemoryLedger scoped;
    kept = f.allocator->allocate(1000, MemCategory::kParameters, scoped);
    void* freed = f.allocator->allocate(1000, MemCategory::kParameters, scoped);
    f.allocator->deallocate(freed);
    EXPECT_EQ(f.allocator->forget_ledger(scoped), 1u);  // only `kept` is still live
  }
  f.allocator->deallocate(kept);  // the scoped ledger is gone: nothing may touch it
  EXPECT_EQ(f.allocator->stats().ledger_errors, 0);
  EXPECT_EQ(f.allocator->stats().in_use, 0u);
  // A ledger that refuses the credit: the block still returns to the cache, the error is counted.
  MemoryLedger other;
  const std::size_t cached_before = f.allocator->stats().cached;
  void* p = f.allocator->allocate(512, MemCategory::kGradients, other);
  other.on_free(MemCategory::kGradients, Device::kCUDA, 512);  // someone else's bad bookkeeping
  f.allocator->deallocate(p);
  EXPECT_EQ(f.allocator->stats().ledger_errors, 1);
  EXPECT_EQ(f.allocator->stats().cached, cached_before + 512u);
}

#if MIXPAR_HAVE_CUDA

TEST(CudaAllocator, ReuseAcrossANonBlockingStreamWaitsForTheOldOwner) {
  SKIP_WITHOUT_GPU();
  cudaStream_t nb = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), cudaSuccess);
  device_allocator().empty_cache();  // no older block of this class to be handed out instead
  const std::int64_t waits_before = device_allocator().stats().stream_waits;
  void* first = nullptr;
  {
    DeviceTensor t = DeviceTensor::empty({1 << 20}, DType::kF32, MemCategory::kOther, nullptr,
                                         nullptr, nb);
    first = t.data();
    t.fill_bytes(0x11, nb);
  }
  DeviceTensor u = DeviceTensor::empty({1 << 20}, DType::kF32);  // the legacy stream
  EXPECT_EQ(u.data(), first);
  EXPECT_EQ(device_allocator().stats().stream_waits, waits_before + 1);
  u.fill_bytes(0x22);  // ordered after the 0x11 fill by the event: every byte ends 0x22
  const Tensor back = u.to_host();
  const auto* bytes = static_cast<const unsigned char*>(back.data());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < back.nbytes(); ++i) wrong += bytes[i] != 0x22;
  EXPECT_EQ(wrong, 0u);
  u = DeviceTensor();
  ASSERT_EQ(cudaStreamSynchronize(nb), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(nb), cudaSuccess);
}

TEST(CudaAllocator, AScopedDeviceLedgerDetachesTheTensorsThatOutliveIt) {
  SKIP_WITHOUT_GPU();
  const std::int64_t errors_before = device_allocator().stats().ledger_errors;
  DeviceTensor outliving;
  {
    ScopedDeviceLedger ledger;
    outliving = DeviceTensor::empty({256}, DType::kF32, MemCategory::kActivations);
    EXPECT_EQ(ledger->live(MemCategory::kActivations, Device::kCUDA), 1024u);
  }
  outliving = DeviceTensor();  // its ledger is gone: the free must not touch it
  EXPECT_EQ(device_allocator().stats().ledger_errors, errors_before);
}

TEST(CudaAllocator, DeviceTensorsComeFromTheCacheAndChargeTheLedger) {
  SKIP_WITHOUT_GPU();
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  void* first = nullptr;
  {
    DeviceTensor t = DeviceTensor::empty({1000, 3}, DType::kBF16, MemCategory::kActivations);
    first = t.data();
    EXPECT_EQ(ledger.live(MemCategory::kActivations, Device::kCUDA), 6000u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % 256, 0u);
  }
  EXPECT_EQ(ledger.live_total(Device::kCUDA), 0u);
  const std::int64_t backend_before = device_allocator().stats().backend_allocations;
  DeviceTensor again = DeviceTensor::empty({3000}, DType::kF16, MemCategory::kGradients);
  EXPECT_EQ(again.data(), first);  // same 6144-byte class: the cached block
  EXPECT_EQ(device_allocator().stats().backend_allocations, backend_before);
  again = DeviceTensor();
  device_allocator().empty_cache();
  EXPECT_EQ(device_allocator().stats().cached, 0u);
}

TEST(CudaAllocator, HostRoundTripKeepsEveryBitAndPoisonIsNaN) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const Tensor host = cuda_testing::random_host({17, 5}, dt, 3);
    DeviceTensor d = DeviceTensor::from_host(host);
    const Tensor back = d.to_host();
    EXPECT_EQ(std::memcmp(back.data(), host.data(), host.nbytes()), 0) << dtype_name(dt);
    d.rows(2, 3).poison();
    const std::vector<float> v = d.to_floats();
    for (std::size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(std::isnan(v[i]), i >= 10 && i < 25) << dtype_name(dt) << " " << i;
    }
  }
}

#endif  // MIXPAR_HAVE_CUDA

}  // namespace
}  // namespace mixpar::cuda
