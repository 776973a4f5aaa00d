// The shared state of a local world (internal to the local backend): mailboxes for messages,
// one rendezvous slot per collective call, what each rank is doing, and the checks that turn
// an inconsistent or stuck world into a CommError on every rank: mismatch, deadlock,
// watchdog, failure of a rank. One mutex guards it all; each rank sleeps on its own condvar.
// Data is never copied under the mutex: a receiver copies after take() returns. Beside the
// mailboxes, each ordered pair of ranks has a lock-free fast channel (comm/local_channel.h)
// that carries messages while both ranks are on time; a receiver that has to wait moves what
// its channel holds into the mailbox, so every check above sees every message.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "comm/local_channel.h"
#include "comm/polled_lock.h"

namespace mixpar::local {

enum class CollOp : std::uint8_t {
  kBarrier, kBroadcast, kAllReduce, kReduceScatter, kAllGather, kSplit,
  kDup,  // Communicator::dup: the group again, on a lane of its own (Fabric's lane constructor)
  kAllReduceOr, kBroadcastBytes, kAllGatherBytes,  // the control collectives: bytes, no dtype
  kAllToAll  // counts per rank: Arrival::send_counts
};

// What one rank asked a collective for. The ranks of a group must agree on all of it except
// the split arguments, which are per rank by design.
struct CallDesc {
  CollOp op = CollOp::kBarrier;
  DType dtype = DType::kF32;
  std::int64_t count = 0;  // elements of the buffer (all_reduce, broadcast) or of one block;
                           // bytes for the control collectives
  int root = -1;           // broadcast: the root's world rank
  ReduceOp reduce = ReduceOp::kSum;
  int color = 0;  // split
  int key = 0;    // split
  bool agrees_with(const CallDesc& o) const;
  std::string str() const;  // "all_reduce(1024 x f32, sum)"
};

// One rank's buffers in a collective. Between arrival and departure the other ranks of the
// group read and write them; their owner is blocked in the communicator all that time.
struct Arrival {
  CallDesc desc;
  const Tensor* in = nullptr;
  Tensor* out = nullptr;
  const std::byte* in_bytes = nullptr;  // the control collectives' buffers
  std::byte* out_bytes = nullptr;
  const std::int64_t* send_counts = nullptr;  // all_to_all: one count per rank of the group
  // all_to_all: the call number of the one-shot vote this rank published just before (0:
  // none). A peer that took the rendezvous for that number is a collective mismatch; arrive()
  // checks it under the lock it takes anyway (a lock of its own for the check cost a 2-rank
  // all-to-all of 64 KiB about 2 us on the Xeon: both ranks asked for it at once).
  std::int64_t after_vote = 0;
};

class Fabric;

struct SplitResult {
  int group = -1;  // -1: negative color, no group
  int rank = -1;
};

// The rendezvous of one collective call (one call number) of one group.
struct Slot {
  std::vector<std::optional<Arrival>> arrivals;  // by group rank
  int arrived = 0;
  int done = 0;      // ranks whose share of the data movement is finished
  int departed = 0;
  std::vector<SplitResult> split;  // by group rank, filled when the last rank arrives
  Fabric* lane = nullptr;          // dup: the group's lane, made when the last rank arrives
};

// A collective whose whole group has arrived, as one rank holds it until it departs.
struct Ticket {
  int group = 0;
  int group_rank = 0;
  std::int64_t seq = 0;
  std::shared_ptr<Slot> slot;
};

class OneShotGroup;  // comm/local_oneshot.h

// A message taken out of the mailbox or a fast channel, its bytes readable for as long as this
// lives. An eager message owns a copy of the sender's data or sits in a channel slot, which
// stays the receiver's until this is destroyed; a lent one is the sender's own buffer, and the
// sender waits in Fabric::await_copied until the receiver has destroyed this Delivery (that
// wait is what makes reading another rank's memory safe: MPI's rendezvous protocol).
class Delivery {
 public:
  Delivery() = default;
  Delivery(Delivery&& o) noexcept;
  Delivery& operator=(Delivery&&) = delete;
  ~Delivery();  // a lent message: tells the sender its buffer is free again
  const std::byte* data() const { return data_; }

 private:
  friend class Fabric;
  Fabric* owner_ = nullptr;          // set while a slot or a lent buffer is being read
  int src_ = -1;                     // the sender (world rank)
  std::uint64_t id_ = 0;             // a lent mailbox message
  ChannelSlot* slot_ = nullptr;      // a channel's slot, freed when this is destroyed
  Tensor copy_;                      // an eager message's data
  const std::byte* data_ = nullptr;  // copy_'s bytes or the sender's buffer
};

class Fabric {
 public:
  Fabric(int world_size, double watchdog_seconds, bool synchronous_sends,
         std::size_t eager_limit_bytes, double spin_microseconds, std::size_t oneshot_max_bytes);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;
  // A lane: the fabric of one group's dup (Communicator::dup), whose rank i is the root
  // fabric's world rank world_ranks[i]. The fabric keeps one status per rank for its checks
  // (what the rank waits in, read by the deadlock check and the reports), so one thread of a
  // rank talks to it at a time; a rank's second thread (a gradient sync's buckets) talks on a
  // lane, with statuses, wake-ups and fast channels of its own, while its compute thread
  // talks to the root's groups. A lane shares the root's mutex, its ledgers, its runs and its
  // failures: an abort on either fails both, so no thread of any rank waits on. Its deadlock
  // check reads its own ranks alone, a call on a lane waiting only for calls on that lane;
  // a wait across the two (a compute thread waiting for a bucket its lane has not reduced
  // yet, its peer's lane waiting for that rank's next bucket) is the watchdog's. Made by
  // arrive() under the mutex, owned by the root.
  Fabric(Fabric& root, std::vector<int> world_ranks);
  int world_size() const { return static_cast<int>(status_.size()); }
  MemoryLedger& ledger(int rank) {
    if (root_) return root_->ledger(world_ranks_.at(static_cast<std::size_t>(rank)));
    return *ledgers_.at(static_cast<std::size_t>(rank));
  }
  MemoryLedger& network_ledger() { return root_ ? root_->network_ledger() : *network_; }
  // Waits that ended at the watchdog's deadline with their condition met: whoever met it did
  // not wake the rank (a lost wake-up, which the deadline rescues after watchdog_seconds).
  // Every lane's with the root's. Under mu_ or between runs.
  std::int64_t lost_wakeups() const;
  std::vector<int> members(int group);  // world ranks, by group rank

  // Point to point between world ranks; messages of one (group, src, dst, tag) are taken in
  // the order they were sent. post_inline() copies an eager message into the pair's fast
  // channel (comm/local_channel.h) and returns false when its next slot is busy; post() queues
  // one that owns its data in the mailbox. Either returns at once. lend() hands the receiver
  // the sender's own CPU buffer instead (through the channel when a slot is free), and the
  // sender must then call await_copied() (or withdraw() when unwinding) before touching or
  // freeing it: the receiver copies straight out of it, so each byte is copied once, not twice.
  // take() blocks until a message is there and checks its count and dtype against what the
  // receiver expects (a mismatch is a CommError naming both ranks).
  struct Loan {
    std::uint64_t id = 0;          // a mailbox message
    ChannelSlot* slot = nullptr;   // or a channel's slot
  };
  bool synchronous_sends() const { return synchronous_sends_; }
  std::size_t eager_limit_bytes() const { return eager_limit_bytes_; }
  bool post_inline(int group, int src, int dst, int tag, const Tensor& message);
  void post(int group, int src, int dst, int tag, Tensor copy);
  Loan lend(int group, int src, int dst, int tag, const Tensor& buffer);
  Delivery take(int group, int src, int dst, int tag, std::int64_t count, DType dtype);
  // Blocks until the receiver has copied the lent message out of the sender's buffer. If the
  // world fails before the receiver took it, the message is withdrawn and this throws.
  void await_copied(int group, int src, int dst, int tag, const Loan& loan);
  // For a sender leaving on an exception: after this no receiver can read the lent buffer
  // (withdrawn if still queued; if being copied, waits for the copy, which never blocks).
  void withdraw(int group, int src, int dst, int tag, const Loan& loan) noexcept;

  // arrive() registers this rank's call and blocks until the whole group has arrived;
  // finish() marks this rank's share of the data movement done and waits for the others'.
  Ticket arrive(int group, int group_rank, const Arrival& a);
  void finish(const Ticket& t);

  // Run lifecycle, called by the runner around the rank threads.
  void begin_run();
  void rank_finished(int rank);
  void rank_failed(int rank, std::exception_ptr error);
  std::exception_ptr end_run();  // the first failure, nullptr for a clean run

  // Gives up the ledgers that tensors still point to, so they outlive this fabric.
  void park_busy_ledgers();

  // The one-shot path for small collectives (comm/local_oneshot.h). Its calls take their
  // numbers from the same counter as arrive()'s (call_counter: stable, used by that rank's
  // thread only), so a mismatch between a one-shot call and a rendezvous is reported as one.
  std::size_t oneshot_max_bytes() const { return oneshot_max_bytes_; }
  // Whether the wake-up checks' store-load fence is split (comm/asymmetric_fence.h).
  bool asymmetric_fence() const { return asymmetric_; }
  OneShotGroup& oneshot(int group);
  std::int64_t* call_counter(int group, int group_rank);
  // Spins for at most the spin time until ready() (true) or not (false): with a pause
  // instruction while every rank has a core, yielding the core between polls otherwise.
  template <class Ready> bool poll(Ready ready) const {
    if (ready()) return true;
    if (spin_ == Clock::duration::zero()) return false;
    // The clock is read once every kPollsPerClockRead polls: on a VM a read costs as much as
    // a few polls, and it only bounds the spin, which may overrun by those few polls. The
    // first of them come before any read: most waits end there.
    int polls = 0;
    const auto done = [&] {
      pause_polls_ = pause_polls_after(polls, pause_polls_);
      return true;
    };
    for (int i = 0; i < kPollsPerClockRead; ++i) {
      relax(polls++);
      if (ready()) return done();
    }
    const Clock::time_point until = Clock::now() + spin_;
    do {
      for (int i = 0; i < kPollsPerClockRead; ++i) {
        relax(polls++);
        if (ready()) return done();
      }
    } while (Clock::now() < until);
    pause_polls_ = kPausePollsBusy;
    return false;
  }
  // A rank published a one-shot call: wakes the group's ranks asleep in oneshot_wait, if any.
  void oneshot_posted(int group, OneShotGroup& os);
  // Sleeps until every rank of the group published call `seq`, with the deadlock check, the
  // watchdog and the failure of other ranks, as arrive() does; a peer that took the
  // rendezvous for this call number instead is a collective mismatch.
  void oneshot_wait(int group, int group_rank, std::int64_t seq, const CallDesc& d);
  // Sleeps until no peer will read this rank's in-place all-to-all input of call `seq` any
  // more (OneShotGroup::readers_done). No deadline and no failure: each peer that may read
  // it is copying or about to raise its done flag, on every way out of the call.
  void oneshot_wait_readers(int group, int group_rank, std::int64_t seq) noexcept;
  // Every rank published call `seq` but not the same call: fails the world naming each.
  [[noreturn]] void oneshot_mismatch(int group, std::int64_t seq);

 private:
  enum class Phase : std::uint8_t {
    kComputing, kSend, kRecv, kCollective, kCompleting, kFinished, kFailed
  };
  struct RankStatus {
    Phase phase = Phase::kComputing;
    int group = 0;
    int peer = -1;  // send: destination, recv: source (world ranks)
    int tag = 0;
    std::int64_t count = 0;     // send, recv
    DType dtype = DType::kF32;  // send, recv
    std::uint64_t message = 0;  // send: the id of the lent message not yet copied
    const ChannelSlot* slot = nullptr;  // send: or the channel slot lent
    std::int64_t seq = 0;       // collective call number
    CallDesc desc;              // collective
    bool oneshot = false;       // collective: waits for one-shot flags, not a rendezvous slot
  };
  struct Group {
    std::vector<int> members;         // world ranks, by group rank
    // Collectives started, by group rank. Each rank's counter has a cache line of its own:
    // every call bumps it, and a neighbour's bump would otherwise pull the line away from
    // under the next call (false sharing: a trip between cores per collective).
    struct alignas(64) CallCount {
      std::int64_t n = 0;
    };
    std::vector<CallCount> calls;
    std::map<std::int64_t, std::shared_ptr<Slot>> slots;  // by call number (from 1)
    std::shared_ptr<OneShotGroup> oneshot;
  };
  using MailKey = std::tuple<int, int, int, int>;  // group, src, dst, tag
  struct Message {
    std::uint64_t id;     // the fabric's, for a lent message's sender to find it
    std::uint64_t order;  // the pair's message number: a queue is kept sorted by it
    std::int64_t count;
    DType dtype;
    const std::byte* data;  // copy's bytes (eager) or the sender's buffer (lent)
    Tensor copy;            // eager only
    bool lent;
    ChannelSlot* slot = nullptr;  // a lent message moved here from a channel
  };
  using Clock = std::chrono::steady_clock;
  friend class Delivery;
  struct PhaseGuard;  // restores a rank's phase when a blocking call returns or throws

  // Both public constructors: a lane has a root, the root none (and the ledgers).
  Fabric(Fabric* root, std::vector<int> world_ranks, int world_size, double watchdog_seconds,
         bool synchronous_sends, std::size_t eager_limit_bytes, double spin_microseconds,
         std::size_t oneshot_max_bytes);
  template <class Ready>
  void block(std::unique_lock<std::mutex>& lock, int me, Ready ready);
  template <class Ready>
  void wait_without_deadline(std::unique_lock<std::mutex>& lock, int me, Ready ready);
  bool spin_until_woken(std::unique_lock<std::mutex>& lock, int me);
  // How long a rank polls mu_ before it sleeps on it (comm/polled_lock.h), where it takes the
  // mutex on every collective: arrive(), finish() and after a spin. Not with more ranks than
  // cores, where the holder may be waiting for this rank's core.
  int lock_polls() const { return spin_yields_ ? 0 : kLockPolls; }
  // A peer that is running answers within about a microsecond (a 2-rank one-shot all-reduce
  // of 4 KiB took 1.0 us here): the first polls only pause. Later ones, or all of them when
  // ranks outnumber cores, yield the core: the rank waited for is then most likely not
  // running, on a machine whose cores other processes share too. How many pauses depends on
  // how this thread's last wait ended. On an idle machine 40 (a pause takes 25 ns on the
  // 2-core EPYC, a yield 0.5 us): with 8, a 2-rank all-reduce of 2 KiB took 0.65 us and an
  // all-gather of 4 KiB 0.58 us, yielding while the peer was still copying; with 40, 0.61 and
  // 0.50. But where the last wait had to yield (the peer was not running), 8, because there
  // a wrong guess costs far more: with 2 ranks on the 2-core EPYC while compilers kept both
  // cores busy (load average 3.7), a 2-rank all-reduce of 8 B / 4 KiB took 1.8 / 2.4 us with
  // 8 pauses before the first yield, 3.4 / 3.9 with 64, 9 / 9.4 with 256 and 105 us with no
  // yield at all.
  // A wait that ended within a few yields after its pauses counts as one whose peer was
  // running, though: otherwise the rule traps two ranks that are on time. Once one of them
  // yields (0.5 us), the other's 8 pauses (0.2 us) run out before its answer, so it yields
  // too, and so on: on the 2-core EPYC whole sweeps of small calls ran at 0.5-0.6 us instead
  // of 0.13-0.19, about one yield a call (ch04_ddp/PERFORMANCE.md, "Trips between cores").
  // Up to kYieldsStillRunning yields, the next wait pauses kPausePollsIdle times again, which
  // outlasts a peer's yield; measured (bench_collectives --impl local --ranks 2 --ops
  // reduce-scatter,all-reduce,sendrecv --sizes 8,2048 --bind, alternating, four runs each):
  // 8 B reduce-scatter 0.48-0.49 us with 0.87-0.96 million yields a run -> 0.12-0.17 us with
  // 6,500-12,000.
  static constexpr int kPausePollsIdle = 40;
  static constexpr int kPausePollsBusy = 8;
  static constexpr int kYieldsStillRunning = 8;
  static inline thread_local int pause_polls_ = kPausePollsIdle;  // this thread's, as above

 public:
  // The pauses before the first yield of a thread's next wait, after a wait that ended at poll
  // `polls` with `budget` pauses before its first yield (the rule above).
  static constexpr int pause_polls_after(int polls, int budget) {
    return polls <= budget + kYieldsStillRunning ? kPausePollsIdle : kPausePollsBusy;
  }

 private:
  static constexpr int kPollsPerClockRead = 8;
  void relax(int polls) const {
    if (spin_yields_ || polls >= pause_polls_) {
      std::this_thread::yield();
    } else {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();  // a spin loop: saves power, frees the core's sibling
#endif
    }
  }
  std::string mismatch_report(int group, std::int64_t seq) const;  // rendezvous + one-shot
  // The root's world rank of this fabric's rank r, for the reports (r itself on the root).
  int named(int r) const { return root_ ? world_ranks_[static_cast<std::size_t>(r)] : r; }
  Fabric* add_lane(const std::vector<int>& group_members);  // under mu_, on any fabric
  void abort_here(const std::string& reason, bool watchdog);  // abort() of one fabric
  void end_run_here();  // under mu_: messages never received, then the channels freed
  void wake(int rank);  // under mu_: bumps the rank's wake count and notifies its cv
  void throw_if_aborted() const;
  [[noreturn]] void throw_aborted() const;  // CommError, or CommWatchdogTimeout
  [[noreturn]] void fail(std::string reason);
  void abort(std::string reason);
  void check_deadlock();
  bool stuck(int rank) const;
  std::uint64_t queue(const MailKey& key, Message m);
  bool taken(const MailKey& key, std::uint64_t id) const;
  void remove_if_queued(const MailKey& key, std::uint64_t id);
  void copied(int src, std::uint64_t id);  // Delivery's destructor: the lent buffer is free

  // The fast channels. channel() is null until the pair's first message; the producer (src's
  // thread) creates it. Order numbers come from next_order(), which only src's thread touches.
  std::size_t pair(int src, int dst) const {
    return static_cast<std::size_t>(src) * static_cast<std::size_t>(world_size()) +
           static_cast<std::size_t>(dst);
  }
  std::size_t pairs() const { return pair(world_size(), 0); }
  std::uint64_t& next_order(int src, int dst) {
    const auto d = static_cast<std::size_t>(dst);
    return next_order_[static_cast<std::size_t>(src) * order_lines_per_rank_ + d / 8].n[d % 8];
  }
  Channel* channel(int src, int dst) const {
    return channels_[pair(src, dst)].load(std::memory_order_acquire);
  }
  ChannelSlot* claim(int src, int dst);  // the producer's next slot if free, else nullptr
  void publish(int src, int dst, ChannelSlot& slot);
  // Lock-free: the message at the head of channel src -> dst if it is the one asked for and no
  // older message of the pair waits in the mailbox (nullptr otherwise, after polling).
  ChannelSlot* take_fast(int group, int src, int dst, int tag, std::int64_t count, DType dtype);
  // Under mu_, the consumer only: moves everything published in channel src -> dst into the
  // mailbox (inline bytes copied out, lent buffers as lent messages), in order.
  void drain(int src, int dst);
  bool in_channel(const MailKey& key) const;  // under mu_: a matching full slot is published
  void release(int src, ChannelSlot& slot) noexcept;  // the slot is free again: wakes src
  void release_locked(int src, ChannelSlot& slot);    // the same, under mu_
  void notify(int rank);  // after a lock-free change: wakes `rank` if it sleeps in the fabric
  void withdraw_slot(std::unique_lock<std::mutex>& lock, const MailKey& key, ChannelSlot& slot);
  void free_channels();  // between runs: every thread has joined
  std::string where(int rank) const;   // "rank 0 waits in recv(from 1, tag 0, 4 x f32)"
  std::string report() const;          // where() of every rank
  std::string group_name(int group) const;
  std::string recv_mismatch(const RankStatus& s, int dst, const Message& m) const;
  void check_agreement(int group, std::int64_t seq, const Slot& slot, int group_rank,
                       const CallDesc& d);
  void make_split(int group, Slot& slot);
  std::string undelivered() const;

  std::mutex own_mu_;  // the root's; a lane's mu_ is its root's
  std::mutex& mu_;
  Fabric* root_ = nullptr;                     // a lane's root; nullptr on the root
  std::vector<int> world_ranks_;               // a lane's ranks as the root's world ranks
  std::vector<std::unique_ptr<Fabric>> lanes_;  // the root's lanes, kept until it is destroyed
  std::vector<std::condition_variable> cv_;  // by world rank
  // Wake-ups per world rank, changed only under mu_ and read without it by a spinning rank.
  std::unique_ptr<std::atomic<std::uint64_t>[]> wakes_;
  Clock::duration spin_;  // zero: sleep at once
  bool spin_yields_ = false;  // more ranks than cores: polls yield the core
  bool asymmetric_ = false;   // the wake-up checks' fence is split (comm/asymmetric_fence.h)
  std::size_t oneshot_max_bytes_;
  std::vector<RankStatus> status_;           // by world rank
  std::vector<std::unique_ptr<MemoryLedger>> ledgers_;
  std::unique_ptr<MemoryLedger> network_;  // in-flight messages and device staging copies
  std::deque<Group> groups_;  // by id, 0 is the world; a deque keeps references stable
  std::map<MailKey, std::deque<Message>> mail_;
  std::unique_ptr<std::atomic<Channel*>[]> channels_;    // by pair (src, dst)
  std::unique_ptr<std::atomic<std::int64_t>[]> parked_;  // mailbox messages, by pair
  std::unique_ptr<std::atomic<int>[]> asleep_;  // by world rank: in a wait of the fabric
  // The pairs' next order numbers, src's row starting a cache line of its own: every message
  // bumps one, and rows sharing a line would pull it back and forth between the senders.
  struct alignas(64) OrderLine {
    std::uint64_t n[8] = {};
  };
  std::unique_ptr<OrderLine[]> next_order_;
  std::size_t order_lines_per_rank_ = 0;
  std::set<std::uint64_t> being_copied_;  // lent messages taken, whose copy is not done yet
  std::uint64_t next_message_ = 0;
  Clock::duration watchdog_;  // zero: no watchdog
  double watchdog_seconds_;
  bool synchronous_sends_;
  std::size_t eager_limit_bytes_;
  bool aborted_ = false;
  std::int64_t lost_wakeups_ = 0;
  bool watchdog_fired_ = false;  // the abort was the watchdog's: CommWatchdogTimeout
  bool dead_ = false;  // a failed run leaves the world unusable
  std::string reason_;
  std::exception_ptr first_error_;
};

}  // namespace mixpar::local
