// The local fabric's waits and report helpers, shared by its source files (local_fabric.cpp,
// local_channel.cpp, local_fabric_reports.cpp): internal to the local backend.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "comm/asymmetric_fence.h"
#include "comm/local_fabric.h"

namespace mixpar::local {
namespace detail {

inline std::string count_str(std::int64_t count, DType dtype) {
  return std::to_string(count) + " x " + std::string(dtype_name(dtype));
}

inline std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

inline std::string exception_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

// A rank in a wait of the fabric that a lock-free change (a message published in a channel, a
// slot freed) must wake. Set before the waiter's last check of the condition, then the heavy
// half of the asymmetric fence (comm/asymmetric_fence.h); the changer stores, takes the light
// half and reads it: either the waiter sees the change or the changer sees the count and
// wakes it under the mutex (the one-shot path's `sleepers`, likewise).
struct Asleep {
  std::atomic<int>& n;
  Asleep(std::atomic<int>& c, bool asymmetric) : n(c) {
    n.fetch_add(1, std::memory_order_seq_cst);
    heavy_fence(asymmetric);
  }
  ~Asleep() { n.fetch_sub(1, std::memory_order_seq_cst); }
  Asleep(const Asleep&) = delete;
  Asleep& operator=(const Asleep&) = delete;
};

}  // namespace detail

// For waits that cannot fail or stall (a peer copying, never blocked): no deadline.
template <class Ready>
void Fabric::wait_without_deadline(std::unique_lock<std::mutex>& lock, int me, Ready ready) {
  while (!ready()) {
    if (!spin_until_woken(lock, me)) cv_[static_cast<std::size_t>(me)].wait(lock, ready);
  }
}

template <class Ready>
void Fabric::block(std::unique_lock<std::mutex>& lock, int me, Ready ready) {
  if (ready()) return;
  check_deadlock();  // this rank is about to sleep: was it the last one able to move?
  const Clock::time_point deadline = Clock::now() + watchdog_;
  std::condition_variable& cv = cv_[static_cast<std::size_t>(me)];
  while (!ready()) {
    throw_if_aborted();
    // Past the deadline, no spinning: wait_until below times out at once, so wake-ups for
    // other messages cannot keep the watchdog from firing.
    const bool overdue = watchdog_ != Clock::duration::zero() && Clock::now() >= deadline;
    if (!overdue && spin_until_woken(lock, me)) continue;
    if (ready()) break;  // some changes wake no one: a lent message taken (its copy's end will)
    if (watchdog_ == Clock::duration::zero()) {
      cv.wait(lock);
    } else if (cv.wait_until(lock, deadline) == std::cv_status::timeout) {
      if (ready()) {
        ++lost_wakeups_;  // what it waited for came, and no one woke it: a protocol bug
      } else if (!aborted_) {
        char limit[32];
        std::snprintf(limit, sizeof limit, "%g", watchdog_seconds_);
        watchdog_fired_ = true;
        abort("watchdog: rank " + std::to_string(named(me)) + " waited " + limit +
              " s in the communicator; " + report());
      }
    }
  }
}

}  // namespace mixpar::local
