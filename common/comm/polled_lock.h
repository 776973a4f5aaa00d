// Taking a mutex that another core holds for a moment (internal to the local backend). The
// fabric's mutex guards a collective's rendezvous: each rank takes it to arrive and to finish,
// for well under a microsecond each time, and on 2 ranks the two arrive together. std::mutex
// puts a rank that finds it taken to sleep in the kernel at once (a futex wait, and a futex
// wake from the holder): on the 2-core Xeon (KVM) a 2-rank rendezvous then cost 7 us, with
// about 5 futex calls per call (and 4 sched_yield, the waits' spins between them). Polling
// the mutex with try_lock for a while first, as glibc's adaptive mutexes do
// (PTHREAD_MUTEX_ADAPTIVE_NP), finds it free as soon as the holder leaves: 3.2-3.7 us, about
// 0.15 futex calls per call (ch04_ddp/PERFORMANCE.md, "The rendezvous's mutex").
#pragma once

#include <mutex>

namespace mixpar::local {

// Polls: 100 pause instructions (a pause takes 25-40 ns on the machines measured) outlast any
// of the fabric's critical sections. Measured on the Xeon, a 2-rank all-gather forced through
// the rendezvous, 8 B / 64 KiB, us: 0 polls 6.8-8.0 / 8.5-11.0; 30 polls 3.8-4.2 / 5.1;
// 100 polls 3.5-3.7 / 4.8-4.9; 300 polls 3.3-3.4 / 4.6-5.1.
inline constexpr int kLockPolls = 100;

// `mu`, locked. With `polls` > 0 it first tries that many times, with a pause between tries,
// before it blocks; with 0 it blocks at once (where ranks outnumber the cores, the holder may be
// waiting for this very core).
inline std::unique_lock<std::mutex> lock_polling(std::mutex& mu, int polls) {
  for (int i = 0; i < polls; ++i) {
    if (mu.try_lock()) return std::unique_lock<std::mutex>(mu, std::adopt_lock);
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  return std::unique_lock<std::mutex>(mu);
}

}  // namespace mixpar::local
