// The local backend: N ranks are N threads of one process and data moves through shared
// memory. Results are deterministic (fixed reduction order), each rank charges its own
// memory ledger, and a world whose ranks disagree, deadlock or stall fails with a report of
// where every rank is, on every rank, instead of hanging.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace mixpar {

struct LocalOptions {
  // A rank blocked in one call for longer than this aborts the world with a report of where
  // every rank is; <= 0 turns the watchdog off. Deadlocks (every unfinished rank waiting for
  // something no one will send) are reported at once either way.
  double watchdog_seconds = 60.0;
  // By default send() copies the message into a queue and returns (unbounded buffering, like
  // an eager MPI send). Synchronous sends return only once the receiver has copied the message
  // straight out of the sender's buffer, as NCCL's do: two ranks that both send to each other
  // first then deadlock (and are reported), which shows a pipeline schedule that only works
  // thanks to buffering. sendrecv() is safe in both modes.
  bool synchronous_sends = false;
  // sendrecv's two protocols, as MPI's: a message of at most this many bytes is copied into a
  // slot of the pair's fast channel (comm/local_channel.h), or into the mailbox when the
  // slots are all in flight, and the sender does not wait for its receiver (eager: for a small
  // message a copy costs less than a hand-off between threads); a larger one is lent, the
  // receiver copying (or adding) straight out of the sender's buffer while the sender waits
  // (rendezvous: one copy per byte instead of two). 0 lends every message; synchronous sends
  // lend every message. A buffered send() copies any size, into a slot up to this limit.
  // Measured with bench_collectives --ops sendrecv --eager-limit (2-core AMD EPYC, load 3-5,
  // median us of 5 repetitions, ranges over 2-3 runs): copied / lent, 2 ranks 16 KiB 3.4-3.7
  // / 1.6-4.9, 64 KiB 7.7-75 / 3.7-7.3; 4 ranks 16 KiB 4.8-5.7 / 8.4-14, 64 KiB 14-97 /
  // 12-24. A copied message is copied twice in a row on the critical path, which a preempted
  // thread stretches; a lent one waits for its receiver but is copied once.
  std::size_t eager_limit_bytes = std::size_t{16} << 10;
  // A rank about to wait first spins this long watching for a wake-up, as MPI's shared-memory
  // transports and NCCL's proxies poll: waking a sleeping thread costs tens of microseconds on
  // a VM, and a ring pays one hand-off per slice per hop. With more ranks than cores the spin
  // yields the core between polls (a plain spin would take it from the rank being waited for);
  // either way the wait ends in a sleep, so ranks cannot livelock. 0: never spin.
  double spin_microseconds = 50.0;
  // Collectives whose per-rank input, times the group's size (what each rank then reads), is
  // at most this many bytes take the one-shot path (comm/local_oneshot.h: each rank publishes
  // its input with a flag and reduces all of them itself, in rank order: the same bits as the
  // larger path); a rank's first one-shot call in a group allocates its two staging buffers
  // of this size there (the fabric's own memory, as its queues are, not charged to a ledger).
  // 0: always the rendezvous path.
  std::size_t oneshot_max_bytes = std::size_t{32} << 10;  // local::kOneShotMaxBytes
};

namespace local {
class Fabric;
class OneShotGroup;
struct Arrival;
struct CallDesc;
struct Slot;
}  // namespace local

// One rank's view of one group. It belongs to that rank: only the rank's thread calls it.
class LocalCommunicator final : public Communicator {
 public:
  // Rank `rank` of the group `group` of `fabric`, whose members are these world ranks.
  LocalCommunicator(local::Fabric& fabric, int group, std::vector<int> members, int rank);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string backend() const override { return "local"; }

  void send(const Tensor& t, int dst, int tag = 0) override;
  void recv(Tensor& t, int src, int tag = 0) override;
  bool sends_wait_for_receiver() const override;  // LocalOptions::synchronous_sends
  void sendrecv(const Tensor& send_t, int dst, Tensor& recv_t, int src, int tag = 0) override;
  // Adds straight out of src's message (its own buffer above the eager limit): one pass,
  // recv_t untouched.
  void sendrecv_reduce(const Tensor& send_t, int dst, Tensor& recv_t, int src, const Tensor& own,
                       Tensor& out, ReduceOp op, int tag = 0) override;

  void barrier() override;
  void broadcast(Tensor& t, int root) override;
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::kSum) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::kSum) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  // Each rank copies its blocks out of the senders' inputs; a count that disagrees with the
  // sender's is a CommError naming both ranks.
  void all_to_all(const Tensor& in, std::span<const std::int64_t> send_counts, Tensor& out,
                  std::span<const std::int64_t> recv_counts) override;
  bool all_reduce_or(bool flag) override;
  void broadcast_bytes(std::span<std::byte> bytes, int root) override;
  void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  // The group again on a lane of its own (local::Fabric's lane constructor): its calls may
  // run on a second thread of each rank beside the first thread's calls of any other group.
  std::unique_ptr<Communicator> dup() override;

  int world_rank() const { return members_[static_cast<std::size_t>(rank_)]; }
  MemoryLedger& ledger();  // this rank's ledger (also current_ledger() on the rank's thread)

 private:
  int world_peer(int group_rank, const char* what) const;
  Tensor host_buffer_like(const Tensor& t) const;  // CPU, charged to the network ledger
  Tensor host_copy(const Tensor& t) const;         // host_buffer_like(t) holding t's values
  void receive_into(Tensor& t, int src, int tag);
  // An eager message on the host, copied into the pair's fast channel or, when it does not fit
  // there, queued in the mailbox: as it is if `staged` (already a copy of a device tensor),
  // else as a copy.
  void post(const Tensor& host, bool staged, int to, int tag);
  bool eager(const Tensor& message) const;  // sendrecv's protocol for this message
  template <class Use> void exchange(const Tensor& send_t, int dst, int src, int tag,
                                     std::int64_t count, DType dtype, Use&& use);
  template <class Work> void collective(const local::Arrival& mine, Work&& work);
  // Whether a call publishing `bytes` per rank takes the one-shot path (size() x bytes within
  // LocalOptions::oneshot_max_bytes); the decision depends
  // only on what the ranks agree on, so either all of them take it or a mismatch is reported.
  bool oneshot_fits(std::size_t bytes) const;
  // The one-shot path: write(stage) copies this rank's input into its staging buffer, then
  // the flag goes up, with `in_line` in its cache line (OneShotGroup::in_line); once every
  // flag is up and every rank called the same, read(seq).
  template <class Write, class Read>
  void oneshot(const local::CallDesc& d, Write&& write, Read&& read,
               std::span<const std::byte> in_line = {});

  class InPlaceExit;  // the way out of a one-shot call (local_backend.cpp)
  // Peer p's input address, published in place for call `seq` at `address` (by default the
  // start of its flag's line), once it is sure p still stands by it.
  const std::byte* read_in_place(int p, std::int64_t seq, const local::CallDesc& d,
                                 const std::byte* address = nullptr) const;
  // The in-place path of an all-gather or all-reduce past the one-shot limit: publishes this
  // rank's buffer's address, and once every flag is up and every rank called the same,
  // work(seq) reads (and an all-reduce writes) the peers' buffers; then waits until no peer
  // touches this rank's any more (OneShotGroup::publish_done).
  template <class Work>
  void in_place(const local::CallDesc& d, const std::byte* address, Work&& work);

  local::Fabric* fabric_;
  local::OneShotGroup* oneshot_;  // this group's flags and staging buffers
  std::int64_t* calls_;           // this rank's call counter in the group (the fabric's)
  int group_;
  std::vector<int> members_;  // world ranks, by rank in this group
  int rank_;
};

// A world of N ranks that outlives its runs, so ledgers and traffic can be read afterwards.
// Tensors a rank allocates are charged to ledger(rank); messages in flight and host copies of
// device tensors to network_ledger() (the interconnect's memory, no rank's). A tensor that
// outlives the world keeps its ledger alive (it is parked, never freed).
class LocalWorld {
 public:
  explicit LocalWorld(int world_size, LocalOptions opts = {});
  ~LocalWorld();
  LocalWorld(const LocalWorld&) = delete;
  LocalWorld& operator=(const LocalWorld&) = delete;

  // Runs fn on one thread per rank, with the rank's ledger installed, and joins them all.
  // Then rethrows the first failure: the original exception of the first rank that threw,
  // or a CommError (mismatch, deadlock, watchdog, messages sent but never received). Another
  // run may follow a clean one (collective call numbers continue); a failed world refuses.
  void run(const std::function<void(Communicator&)>& fn);

  int size() const { return static_cast<int>(comms_.size()); }
  MemoryLedger& ledger(int rank);
  MemoryLedger& network_ledger();
  // Waits that a publisher never woke, rescued by the watchdog's deadline (a protocol bug
  // the tests look for; 0 in a correct run).
  std::int64_t lost_wakeups() const;
  LocalCommunicator& comm(int rank);  // the world communicator (and traffic) of a rank

 private:
  std::unique_ptr<local::Fabric> fabric_;
  std::vector<std::unique_ptr<LocalCommunicator>> comms_;
};

// One LocalWorld, one run: the usual way to run a few ranks.
void run_local(int world_size, const std::function<void(Communicator&)>& fn,
               const LocalOptions& opts = {});

}  // namespace mixpar
