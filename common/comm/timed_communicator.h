// Where a rank's communication time goes, group by group: a decorator that forwards every call
// of a Communicator unchanged (same backend, same bits, same traffic record) and adds the
// call's wall time to a clock shared by all the groups of one rank, keyed by the group's name
// and the operation's name (the TrafficRecorder's names: "all_reduce", "send", ...).
//
// The clock splits each group's seconds by thread: calls made on the thread that built the
// clock (a rank's compute thread: ParallelGrid is built there) and calls made on any other
// thread (a gradient sync's communication thread, chapter 4's buckets). A call on the owner
// thread is time the compute thread spent in communication, i.e. exposed; a call on another
// thread overlaps compute unless the compute thread waits for it, which the caller measures
// (ch08's trainer: the wait in the gradient sync's finish()).
//
// Owner-thread calls of one rank never nest (no group's call makes another group's), so
// their seconds are disjoint intervals of the owner thread: summed over groups they are at
// most its wall time. ParallelGrid wraps its world and every group it splits.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "comm/communicator.h"

namespace mixpar {

struct CommTime {
  std::int64_t calls = 0;  // on any thread
  double owner_s = 0;      // seconds inside calls on the clock's owner thread
  double other_s = 0;      // seconds inside calls on every other thread, summed
};

// A snapshot of a CommClock: by group, then by operation.
struct CommTimes {
  std::map<std::string, std::map<std::string, CommTime>> by_group;
  // One group summed over its operations (zeros for a group never timed).
  CommTime group(const std::string& name) const;
  // One operation of one group (zeros if it never ran).
  CommTime op(const std::string& group_name, const std::string& op_name) const;
  double owner_total() const;  // every group's owner_s
  // This minus `before` (an earlier snapshot of the same clock), entry by entry.
  CommTimes since(const CommTimes& before) const;
};

class CommClock {
 public:
  CommClock() : owner_(std::this_thread::get_id()) {}
  void add(const std::string& group, const char* op, double seconds);
  CommTimes snapshot() const;

 private:
  std::thread::id owner_;
  mutable std::mutex mu_;
  CommTimes times_;
};

class TimedCommunicator final : public Communicator {
 public:
  // Owns `inner`; its calls are timed into `clock` (which must outlive it) as `group`.
  TimedCommunicator(std::unique_ptr<Communicator> inner, CommClock& clock, std::string group);
  // Does not own `inner` (a world the caller keeps).
  TimedCommunicator(Communicator& inner, CommClock& clock, std::string group);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }
  void send(const Tensor& t, int dst, int tag) override;
  void recv(Tensor& t, int src, int tag) override;
  bool sends_wait_for_receiver() const override { return inner_->sends_wait_for_receiver(); }
  void sendrecv(const Tensor& send_t, int dst, Tensor& recv_t, int src, int tag) override;
  void sendrecv_reduce(const Tensor& send_t, int dst, Tensor& recv_t, int src, const Tensor& own,
                       Tensor& out, ReduceOp op, int tag) override;
  void barrier() override;
  void broadcast(Tensor& t, int root) override;
  void all_reduce(Tensor& t, ReduceOp op) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void all_to_all(const Tensor& in, std::span<const std::int64_t> send_counts, Tensor& out,
                  std::span<const std::int64_t> recv_counts) override;
  bool all_reduce_or(bool flag) override;
  void broadcast_bytes(std::span<std::byte> bytes, int root) override;
  void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) override;
  // The inner communicator's split, timed into the same clock as "<group>.split".
  std::unique_ptr<Communicator> split(int color, int key) override;
  // The inner dup, timed into the same clock under the same group name: the same group,
  // whichever thread calls it (the clock splits its seconds by thread).
  std::unique_ptr<Communicator> dup() override;

  // The bytes are the inner communicator's record: the decorator moves none of its own.
  TrafficRecorder& traffic() override { return inner_->traffic(); }
  const TrafficRecorder& traffic() const override { return inner_->traffic(); }

 private:
  // Runs f, adding its wall time to the clock as `op` (nothing if f throws: the run is over).
  template <class F>
  decltype(auto) timed(const char* op, F&& f);

  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
  CommClock* clock_;
  std::string group_;
};

}  // namespace mixpar
