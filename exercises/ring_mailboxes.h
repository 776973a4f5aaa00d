// The chapter 4 exercises' ring: n threads joined by mailboxes, so that a rank's exchange() is
// "send to my right, receive from my left" without the communicator the exercise is about.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace mixpar::exercises {

// One slot per rank: rank r posts into slot r + 1 and takes from slot r. A rank that waits
// longer than 10 s (an exchange too many, or too few on a peer) throws, which ends the test
// program: a wrong answer fails, it never hangs.
class Mailboxes {
 public:
  explicit Mailboxes(int n) : slots_(static_cast<std::size_t>(n)) {}
  void post(int to, std::vector<float> v) {
    std::unique_lock lock(m_);
    auto& slot = slots_[static_cast<std::size_t>(to)];
    wait(lock, [&] { return !slot.has_value(); });
    slot = std::move(v);
    cv_.notify_all();
  }
  std::vector<float> take(int me) {
    std::unique_lock lock(m_);
    auto& slot = slots_[static_cast<std::size_t>(me)];
    wait(lock, [&] { return slot.has_value(); });
    std::vector<float> v = std::move(*slot);
    slot.reset();
    cv_.notify_all();
    return v;
  }

 private:
  template <class P> void wait(std::unique_lock<std::mutex>& lock, P ready) {
    if (!cv_.wait_for(lock, std::chrono::seconds(10), ready)) {
      throw std::runtime_error("ring exchange: no partner within 10 s (calls do not match)");
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::optional<std::vector<float>>> slots_;
};

}  // namespace mixpar::exercises
