// A store-load fence split in two unequal halves, for the local backend's lock-free paths.
//
// A rank that publishes a message (a flag beside the data) must then read whether its peer
// went to sleep, and the peer, before it sleeps, counts itself asleep and reads the flag once
// more. Each side stores, then loads a location the other stores: Dekker's pattern, which needs
// a store-load fence on both sides, or one of them can read the old value of the other's
// location and the peer sleeps through its wake-up. On x86 a sequentially consistent store is
// an XCHG, which drains the store buffer: the publisher stalls for the cache line's whole trip
// to the peer and back before it can even start polling for the reply, on the path every small
// message takes, while the sleeper's side runs once per sleep, after tens of microseconds of
// spinning.
//
// So the fence moves to the sleeper. The publisher stores with release order and its fence
// only stops the compiler from reordering; the sleeper's heavy_fence() is the membarrier(2)
// system call with MEMBARRIER_CMD_PRIVATE_EXPEDITED, which makes every other running thread of
// the process execute a full memory barrier before it returns (a thread that is not running
// passes one when it is switched out). Whichever point of the publisher's program that barrier
// lands on, the publisher either still loads the sleeper's count after it (and sees it) or had
// stored the flag before it (and the sleeper's load after the call sees the flag). This is the
// "asymmetric Dekker" of Linux RCU and folly's asymmetricLightBarrier/asymmetricHeavyBarrier
// (docs/REFERENCE.md).
//
// Where membarrier is missing (before Linux 4.14, a seccomp filter that refuses it, not
// Linux) or `MIXPAR_ASYMMETRIC_FENCE=0` is set, the store and the load are sequentially
// consistent, as the sleeper's count is (the pattern's textbook form): correct, and as slow as
// before. No std::atomic_thread_fence: ThreadSanitizer does not model fences.
#pragma once

#include <atomic>

namespace mixpar::local {

// Whether the expedited membarrier is registered for this process (decided once, on the
// first call, thread-safe).
bool asymmetric_fence_available();

// The publisher's store of its flag.
template <class T>
void publish_flag(std::atomic<T>& flag, T value, bool asymmetric) {
  flag.store(value, asymmetric ? std::memory_order_release : std::memory_order_seq_cst);
}

// The publisher's read of a sleeper count, after publish_flag().
inline int sleepers_after_publish(const std::atomic<int>& sleepers, bool asymmetric) {
  if (!asymmetric) return sleepers.load(std::memory_order_seq_cst);
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the compiler keeps the store first
  return sleepers.load(std::memory_order_relaxed);
}

// The sleeper's half, after it counted itself (a sequentially consistent read-modify-write)
// and before it reads the flags: a system call (a few microseconds, an interrupt to each other
// core that runs one of our threads) where asymmetric, nothing more otherwise.
void heavy_fence(bool asymmetric);

}  // namespace mixpar::local
