// TrafficRecorder: per-operation call counts and byte volumes of one rank's communicator.
// Written by the rank's own thread, read by anyone (tests, reports) at any time: hence the lock.

#include "comm/communicator.h"

namespace mixpar {

void TrafficRecorder::record(const std::string& op, std::size_t bytes_sent,
                             std::size_t bytes_received) {
  std::lock_guard lock(mu_);
  TrafficTotals& t = by_op_[op];
  ++t.calls;
  t.bytes_sent += bytes_sent;
  t.bytes_received += bytes_received;
}

TrafficTotals TrafficRecorder::totals(const std::string& op) const {
  std::lock_guard lock(mu_);
  const auto it = by_op_.find(op);
  return it == by_op_.end() ? TrafficTotals{} : it->second;
}

TrafficTotals TrafficRecorder::total() const {
  std::lock_guard lock(mu_);
  TrafficTotals sum;
  for (const auto& [op, t] : by_op_) {
    sum.calls += t.calls;
    sum.bytes_sent += t.bytes_sent;
    sum.bytes_received += t.bytes_received;
  }
  return sum;
}

std::map<std::string, TrafficTotals> TrafficRecorder::by_op() const {
  std::lock_guard lock(mu_);
  return by_op_;
}

void TrafficRecorder::reset() {
  std::lock_guard lock(mu_);
  by_op_.clear();
}

}  // namespace mixpar
