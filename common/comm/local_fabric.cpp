// The local world's shared state and its failure checks. Public members take the one mutex;
// private helpers expect it held. Waits sleep on the rank's own condition variable with a
// wait_until deadline (the watchdog), and every rank about to sleep first asks whether any
// rank could still wake it (the deadlock check), so a broken world fails instead of hanging.
// The pairs' fast channels live in local_channel.cpp, the failure reports in
// local_fabric_reports.cpp, the waits they share in local_fabric_waits.h.

#include "comm/local_fabric.h"

#include "comm/asymmetric_fence.h"
#include "comm/local_fabric_waits.h"
#include "comm/local_kernels.h"
#include "comm/local_oneshot.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <utility>

namespace mixpar::local {

using detail::Asleep;
using detail::count_str;
using detail::exception_text;
using detail::rank_list;

bool CallDesc::agrees_with(const CallDesc& o) const {
  if (op != o.op) return false;
  switch (op) {
    case CollOp::kBarrier:
    case CollOp::kSplit:
    case CollOp::kDup: return true;
    case CollOp::kBroadcast: return dtype == o.dtype && count == o.count && root == o.root;
    case CollOp::kAllGather: return dtype == o.dtype && count == o.count;
    case CollOp::kAllToAll: return dtype == o.dtype;  // counts differ by rank, checked in the call
    case CollOp::kAllReduce:
    case CollOp::kReduceScatter: return dtype == o.dtype && count == o.count && reduce == o.reduce;
    case CollOp::kAllReduceOr:
    case CollOp::kAllGatherBytes: return count == o.count;
    case CollOp::kBroadcastBytes: return count == o.count && root == o.root;
  }
  return false;
}

std::string CallDesc::str() const {
  const std::string n = count_str(count, dtype);
  const std::string red(reduce_op_name(reduce));
  switch (op) {
    case CollOp::kBarrier: return "barrier()";
    case CollOp::kBroadcast: return "broadcast(" + n + ", root " + std::to_string(root) + ")";
    case CollOp::kAllReduce: return "all_reduce(" + n + ", " + red + ")";
    case CollOp::kReduceScatter: return "reduce_scatter(" + n + " per rank, " + red + ")";
    case CollOp::kAllGather: return "all_gather(" + n + " per rank)";
    case CollOp::kSplit:
      return "split(color " + std::to_string(color) + ", key " + std::to_string(key) + ")";
    case CollOp::kDup: return "dup()";
    case CollOp::kAllReduceOr: return "all_reduce_or(1 flag)";
    case CollOp::kBroadcastBytes:
      return "broadcast_bytes(" + std::to_string(count) + " bytes, root " +
             std::to_string(root) + ")";
    case CollOp::kAllGatherBytes:
      return "all_gather_bytes(" + std::to_string(count) + " bytes per rank)";
    case CollOp::kAllToAll: return "all_to_all(" + std::string(dtype_name(dtype)) + ")";
  }
  return "?";
}

struct Fabric::PhaseGuard {
  RankStatus& status;
  Phase on_exit = Phase::kComputing;
  ~PhaseGuard() { status.phase = on_exit; }
};

Fabric::Fabric(int world_size, double watchdog_seconds, bool synchronous_sends,
               std::size_t eager_limit_bytes, double spin_microseconds,
               std::size_t oneshot_max_bytes)
    : Fabric(nullptr, {}, world_size, watchdog_seconds, synchronous_sends, eager_limit_bytes,
             spin_microseconds, oneshot_max_bytes) {}

Fabric::Fabric(Fabric& root, std::vector<int> world_ranks)
    : Fabric(&root, world_ranks, static_cast<int>(world_ranks.size()), root.watchdog_seconds_,
             root.synchronous_sends_, root.eager_limit_bytes_,
             std::chrono::duration<double, std::micro>(root.spin_).count(),
             root.oneshot_max_bytes_) {}

Fabric::Fabric(Fabric* root, std::vector<int> world_ranks, int world_size,
               double watchdog_seconds, bool synchronous_sends, std::size_t eager_limit_bytes,
               double spin_microseconds, std::size_t oneshot_max_bytes)
    : mu_(root ? root->mu_ : own_mu_),
      root_(root),
      world_ranks_(std::move(world_ranks)),
      cv_(static_cast<std::size_t>(std::max(world_size, 0))),
      wakes_(std::make_unique<std::atomic<std::uint64_t>[]>(
          static_cast<std::size_t>(std::max(world_size, 0)))),
      oneshot_max_bytes_(oneshot_max_bytes),
      status_(static_cast<std::size_t>(std::max(world_size, 0))),
      network_(root ? nullptr : std::make_unique<MemoryLedger>(-1)),
      watchdog_seconds_(watchdog_seconds),
      synchronous_sends_(synchronous_sends),
      eager_limit_bytes_(eager_limit_bytes) {
  if (world_size < 1) {
    throw std::invalid_argument("local world of " + std::to_string(world_size) + " ranks");
  }
  const auto pairs = static_cast<std::size_t>(world_size) * static_cast<std::size_t>(world_size);
  channels_ = std::make_unique<std::atomic<Channel*>[]>(pairs);
  parked_ = std::make_unique<std::atomic<std::int64_t>[]>(pairs);
  asleep_ = std::make_unique<std::atomic<int>[]>(static_cast<std::size_t>(world_size));
  order_lines_per_rank_ = (static_cast<std::size_t>(world_size) + 7) / 8;
  next_order_ = std::make_unique<OrderLine[]>(static_cast<std::size_t>(world_size) *
                                               order_lines_per_rank_);
  if (!root) {  // a lane's ranks keep their root's ledgers
    for (int r = 0; r < world_size; ++r) ledgers_.push_back(std::make_unique<MemoryLedger>(r));
  }
  Group world;
  world.members.resize(static_cast<std::size_t>(world_size));
  std::iota(world.members.begin(), world.members.end(), 0);
  world.calls.resize(world.members.size());
  world.oneshot = std::make_shared<OneShotGroup>(world_size, oneshot_max_bytes);
  groups_.push_back(std::move(world));
  // Range-checked as on every backend, so the conversion to clock ticks cannot overflow.
  check_watchdog_seconds("local communicator", watchdog_seconds);
  const double seconds = watchdog_seconds;
  watchdog_ = seconds > 0 ? std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(seconds))
                          : Clock::duration::zero();
  // With more ranks than cores a spinning rank may hold the core the rank it waits for needs:
  // it still polls for the spin time, but yields the core between polls (without that, 4
  // ranks on 2 cores slept at every hand-off and a 4 KiB all-reduce took 10x longer).
  const unsigned cores = std::thread::hardware_concurrency();
  spin_yields_ = cores != 0 && static_cast<unsigned>(world_size) > cores;
  spin_ = spin_microseconds > 0
              ? std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double, std::micro>(std::min(spin_microseconds, 1e6)))
              : Clock::duration::zero();
  // The heavy half runs once per sleep: worth it where ranks spin on cores of their own and
  // rarely sleep, not where they sleep at once (no spin) or often (more ranks than cores).
  asymmetric_ = !spin_yields_ && spin_ != Clock::duration::zero() && asymmetric_fence_available();
  if (root) {  // the threads that share the cores are the root's ranks and their lanes
    spin_yields_ = root->spin_yields_;
    asymmetric_ = root->asymmetric_;
  }
}

Fabric::~Fabric() {
  for (std::size_t p = 0; p < pairs(); ++p) delete channels_[p].load();
}

std::vector<int> Fabric::members(int group) {
  std::lock_guard lock(mu_);
  return groups_.at(static_cast<std::size_t>(group)).members;
}

// ---- Waiting

void Fabric::wake(int rank) {
  wakes_[static_cast<std::size_t>(rank)].fetch_add(1, std::memory_order_release);
  cv_[static_cast<std::size_t>(rank)].notify_all();
}

// Lets go of the mutex and polls the rank's wake count for up to spin_; true if it changed,
// so the caller re-checks what it waits for instead of sleeping. The count only changes
// under mu_, so the check after re-locking is exact: a wake-up it misses comes later, while
// the caller holds the mutex or sleeps on its condition variable, and is not lost.
bool Fabric::spin_until_woken(std::unique_lock<std::mutex>& lock, int me) {
  if (spin_ == Clock::duration::zero()) return false;
  const std::atomic<std::uint64_t>& count = wakes_[static_cast<std::size_t>(me)];
  const std::uint64_t seen = count.load(std::memory_order_relaxed);
  lock.unlock();
  const Clock::time_point until = Clock::now() + spin_;
  int polls = 0;
  while (count.load(std::memory_order_acquire) == seen && Clock::now() < until) relax(polls++);
  lock = lock_polling(mu_, lock_polls());
  return count.load(std::memory_order_relaxed) != seen;
}

// ---- Point to point

Delivery::Delivery(Delivery&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)),
      src_(o.src_),
      id_(o.id_),
      slot_(o.slot_),
      copy_(std::move(o.copy_)),
      data_(o.data_) {}

Delivery::~Delivery() {
  if (!owner_) return;
  if (slot_) owner_->release(src_, *slot_);
  else owner_->copied(src_, id_);
}

// A queue is sorted by the pair's order numbers: messages moved out of a channel are older
// than the ones the sender queued here after them, and are inserted before those.
std::uint64_t Fabric::queue(const MailKey& key, Message m) {
  const std::uint64_t id = m.id = next_message_++;
  std::deque<Message>& q = mail_[key];
  const auto at = std::upper_bound(q.begin(), q.end(), m.order, [](std::uint64_t o, const Message& x) {
    return o < x.order;
  });
  q.insert(at, std::move(m));
  parked_[pair(std::get<1>(key), std::get<2>(key))].fetch_add(1, std::memory_order_relaxed);
  wake(std::get<2>(key));
  return id;
}

void Fabric::post(int group, int src, int dst, int tag, Tensor copy) {
  std::lock_guard lock(mu_);
  throw_if_aborted();
  const auto* data = static_cast<const std::byte*>(copy.data());
  const std::int64_t count = copy.numel();
  const DType dtype = copy.dtype();
  const std::uint64_t order = next_order(src, dst)++;
  queue({group, src, dst, tag}, {0, order, count, dtype, data, std::move(copy), false});
}

Fabric::Loan Fabric::lend(int group, int src, int dst, int tag, const Tensor& buffer) {
  const auto* data = static_cast<const std::byte*>(buffer.data());
  if (ChannelSlot* s = claim(src, dst)) {
    s->group = group;
    s->tag = tag;
    s->count = buffer.numel();
    s->dtype = buffer.dtype();
    s->lent = data;
    publish(src, dst, *s);
    return {0, s};
  }
  std::lock_guard lock(mu_);
  throw_if_aborted();
  const std::uint64_t order = next_order(src, dst)++;
  return {queue({group, src, dst, tag},
                {0, order, buffer.numel(), buffer.dtype(), data, Tensor(), true}),
          nullptr};
}

bool Fabric::taken(const MailKey& key, std::uint64_t id) const {
  const auto it = mail_.find(key);
  return it == mail_.end() ||
         std::none_of(it->second.begin(), it->second.end(),
                      [&](const Message& m) { return !m.slot && m.id == id; });
}

void Fabric::remove_if_queued(const MailKey& key, std::uint64_t id) {
  const auto it = mail_.find(key);
  if (it == mail_.end()) return;
  std::deque<Message>& q = it->second;
  const auto end = std::remove_if(q.begin(), q.end(),
                                  [&](const Message& m) { return !m.slot && m.id == id; });
  parked_[pair(std::get<1>(key), std::get<2>(key))].fetch_sub(q.end() - end,
                                                               std::memory_order_relaxed);
  q.erase(end, q.end());
  if (q.empty()) mail_.erase(it);
}

void Fabric::copied(int src, std::uint64_t id) {
  std::lock_guard lock(mu_);
  being_copied_.erase(id);
  wake(src);
}

void Fabric::await_copied(int group, int src, int dst, int tag, const Loan& loan) {
  const MailKey key{group, src, dst, tag};
  if (ChannelSlot* const slot = loan.slot) {
    const auto free = [slot] { return slot->state.load(std::memory_order_acquire) == kSlotFree; };
    if (poll(free)) return;
    std::unique_lock lock(mu_);
    const Asleep asleep(asleep_[static_cast<std::size_t>(src)], asymmetric_);
    if (slot->state.load(std::memory_order_seq_cst) == kSlotFull) {
      RankStatus& s = status_[static_cast<std::size_t>(src)];
      s.phase = Phase::kSend;
      s.group = group;
      s.peer = dst;
      s.tag = tag;
      s.slot = slot;
      s.count = slot->count;
      s.dtype = slot->dtype;
      PhaseGuard guard{s};
      try {
        block(lock, src, [&] { return slot->state.load(std::memory_order_acquire) != kSlotFull; });
      } catch (...) {
        withdraw_slot(lock, key, *slot);  // the world failed first
        throw;
      }
    }
    wait_without_deadline(lock, src, free);  // taken: being copied, which never blocks
    throw_if_aborted();
    return;
  }
  const std::uint64_t id = loan.id;
  std::unique_lock lock(mu_);
  RankStatus& s = status_[static_cast<std::size_t>(src)];
  if (!taken(key, id)) {
    const std::deque<Message>& q = mail_.at(key);
    const auto mine =
        std::find_if(q.begin(), q.end(), [&](const Message& m) { return m.id == id; });
    s.phase = Phase::kSend;
    s.group = group;
    s.peer = dst;
    s.tag = tag;
    s.message = id;
    s.slot = nullptr;
    s.count = mine->count;
    s.dtype = mine->dtype;
    PhaseGuard guard{s};
    try {
      block(lock, src, [&] { return taken(key, id); });
    } catch (...) {
      remove_if_queued(key, id);  // the world failed first: no one may read the buffer later
      throw;
    }
  }
  // Taken: the receiver is copying out of our buffer (or has). It never blocks while it does,
  // so wait without a deadline and whatever else happens; returning earlier would let the
  // caller free or overwrite memory that is being read.
  wait_without_deadline(lock, src, [&] { return being_copied_.count(id) == 0; });
  throw_if_aborted();  // e.g. the receiver found a mismatch: the sender hears of it too
}

void Fabric::withdraw(int group, int src, int dst, int tag, const Loan& loan) noexcept {
  std::unique_lock lock(mu_);
  if (loan.slot) {
    const Asleep asleep(asleep_[static_cast<std::size_t>(src)], asymmetric_);
    withdraw_slot(lock, {group, src, dst, tag}, *loan.slot);
    return;
  }
  remove_if_queued({group, src, dst, tag}, loan.id);
  wait_without_deadline(lock, src, [&] { return being_copied_.count(loan.id) == 0; });
}

// The message is taken from the channel without a lock when it is at the head and no older one
// of the pair waits in the mailbox; otherwise, or after the spin, under the mutex from the
// mailbox, into which the wait moves whatever the channel holds (so a message of another tag
// never blocks this one, and the deadlock check sees every message).
Delivery Fabric::take(int group, int src, int dst, int tag, std::int64_t count, DType dtype) {
  if (ChannelSlot* const slot = take_fast(group, src, dst, tag, count, dtype)) {
    Delivery d;
    d.owner_ = this;
    d.src_ = src;
    d.slot_ = slot;
    d.data_ = slot->data();
    return d;
  }
  std::unique_lock lock(mu_);
  throw_if_aborted();
  const Asleep asleep(asleep_[static_cast<std::size_t>(dst)], asymmetric_);
  RankStatus& s = status_[static_cast<std::size_t>(dst)];
  s.phase = Phase::kRecv;
  s.group = group;
  s.peer = src;
  s.tag = tag;
  s.count = count;
  s.dtype = dtype;
  PhaseGuard guard{s};
  const MailKey key{group, src, dst, tag};
  block(lock, dst, [&] {
    drain(src, dst);
    return mail_.count(key) != 0;
  });
  const auto it = mail_.find(key);
  Message m = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) mail_.erase(it);
  parked_[pair(src, dst)].fetch_sub(1, std::memory_order_relaxed);
  // A lent slot stays full: its sender, hearing of the failure, withdraws it.
  if (m.count != count || m.dtype != dtype) fail(recv_mismatch(s, dst, m));
  Delivery d;
  d.src_ = src;
  d.id_ = m.id;
  d.data_ = m.data;
  d.copy_ = std::move(m.copy);
  if (m.slot) {  // a lent buffer from a channel: its sender waits for the slot to be free
    m.slot->state.store(kSlotTaken, std::memory_order_relaxed);
    d.slot_ = m.slot;
    d.owner_ = this;
  } else if (m.lent) {  // the sender now waits for d's destruction
    being_copied_.insert(m.id);
    d.owner_ = this;
  }
  return d;
}

std::string Fabric::recv_mismatch(const RankStatus& s, int dst, const Message& m) const {
  const std::string tag = " (tag " + std::to_string(s.tag) + ")";
  const std::string in = s.group == 0 && !root_ ? "" : " in " + group_name(s.group);
  const std::string src = std::to_string(named(s.peer)), to = std::to_string(named(dst));
  return "send/recv mismatch" + in + ": rank " + src + " sent " + count_str(m.count, m.dtype) +
         " to rank " + to + tag + ", but rank " + to + " receives " + count_str(s.count, s.dtype) +
         " from rank " + src + tag;
}

// ---- Collectives

Ticket Fabric::arrive(int group, int group_rank, const Arrival& a) {
  std::unique_lock lock = lock_polling(mu_, lock_polls());
  throw_if_aborted();
  Group& g = groups_.at(static_cast<std::size_t>(group));
  // A rank that published a one-shot vote and did not wait for the flags: a peer that took
  // the rendezvous for the vote's call number is a mismatch, as in oneshot_wait (a peer
  // arriving there later finds the vote's flag, the check below).
  if (a.after_vote != 0 && g.slots.count(a.after_vote) != 0) {
    fail(mismatch_report(group, a.after_vote));
  }
  const auto n = static_cast<int>(g.members.size());
  const int me = g.members[static_cast<std::size_t>(group_rank)];
  const std::int64_t seq = ++g.calls[static_cast<std::size_t>(group_rank)].n;
  std::shared_ptr<Slot>& entry = g.slots[seq];
  if (!entry) {
    entry = std::make_shared<Slot>();
    entry->arrivals.resize(static_cast<std::size_t>(n));
  }
  const std::shared_ptr<Slot> slot = entry;
  check_agreement(group, seq, *slot, group_rank, a.desc);
  slot->arrivals[static_cast<std::size_t>(group_rank)] = a;
  for (int k = 0; k < n; ++k) {  // a peer took the one-shot path for this call number
    if (k != group_rank && g.oneshot->posted_call(k, seq)) fail(mismatch_report(group, seq));
  }
  if (++slot->arrived == n) {
    if (a.desc.op == CollOp::kSplit) make_split(group, *slot);
    if (a.desc.op == CollOp::kDup) slot->lane = add_lane(g.members);
    for (int m : g.members) wake(m);
  }
  RankStatus& s = status_[static_cast<std::size_t>(me)];
  s.phase = Phase::kCollective;
  s.group = group;
  s.seq = seq;
  s.desc = a.desc;
  s.oneshot = false;
  PhaseGuard guard{s};
  // Once everyone has arrived the others may already be touching our buffers: from then on
  // this rank must stay until finish(), whatever happens elsewhere, so `ready` wins over abort.
  block(lock, me, [&] { return slot->arrived == n; });
  guard.on_exit = Phase::kCompleting;
  return Ticket{group, group_rank, seq, slot};
}

void Fabric::finish(const Ticket& t) {
  std::unique_lock lock = lock_polling(mu_, lock_polls());
  Group& g = groups_.at(static_cast<std::size_t>(t.group));
  const auto n = static_cast<int>(g.members.size());
  const int me = g.members[static_cast<std::size_t>(t.group_rank)];
  Slot& slot = *t.slot;
  if (++slot.done == n) {
    for (int m : g.members) wake(m);
  }
  // No deadline here: the others are copying, never blocked, and leaving early would free
  // buffers they are still writing into.
  wait_without_deadline(lock, me, [&] { return slot.done == n; });
  if (++slot.departed == n) g.slots.erase(t.seq);
  status_[static_cast<std::size_t>(me)].phase = Phase::kComputing;
}

void Fabric::check_agreement(int group, std::int64_t seq, const Slot& slot, int group_rank,
                             const CallDesc& d) {
  const bool agree = std::all_of(slot.arrivals.begin(), slot.arrivals.end(), [&](const auto& a) {
    return !a || a->desc.agrees_with(d);
  });
  if (agree) return;
  const std::vector<int>& members = groups_[static_cast<std::size_t>(group)].members;
  std::string msg = "collective mismatch at call #" + std::to_string(seq) + " of " +
                    group_name(group) + ":";
  std::vector<int> absent;
  for (std::size_t k = 0; k < members.size(); ++k) {
    const bool mine = static_cast<int>(k) == group_rank;
    const CallDesc* c = mine ? &d : slot.arrivals[k] ? &slot.arrivals[k]->desc : nullptr;
    if (!c) {
      absent.push_back(named(members[k]));
      continue;
    }
    msg += (msg.back() == ':' ? " rank " : ", rank ") + std::to_string(named(members[k])) + " " +
           c->str();
  }
  if (!absent.empty()) msg += "; " + rank_list(absent) + " not there yet";
  fail(msg);
}

void Fabric::make_split(int group, Slot& slot) {
  const std::vector<int> parent = groups_[static_cast<std::size_t>(group)].members;
  std::map<int, std::vector<std::pair<int, int>>> by_color;  // color -> (key, parent rank)
  for (std::size_t k = 0; k < parent.size(); ++k) {
    const CallDesc& d = slot.arrivals[k]->desc;
    if (d.color >= 0) by_color[d.color].emplace_back(d.key, static_cast<int>(k));
  }
  slot.split.assign(parent.size(), SplitResult{});
  for (auto& [color, ranks] : by_color) {
    std::sort(ranks.begin(), ranks.end());
    const auto id = static_cast<int>(groups_.size());
    Group child;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const auto k = static_cast<std::size_t>(ranks[i].second);
      child.members.push_back(parent[k]);
      slot.split[k] = {id, static_cast<int>(i)};
    }
    child.calls.resize(ranks.size());
    child.oneshot = std::make_shared<OneShotGroup>(static_cast<int>(ranks.size()),
                                                   oneshot_max_bytes_);
    groups_.push_back(std::move(child));
  }
}

// ---- The one-shot path

OneShotGroup& Fabric::oneshot(int group) {
  std::lock_guard lock(mu_);
  return *groups_.at(static_cast<std::size_t>(group)).oneshot;
}

std::int64_t* Fabric::call_counter(int group, int group_rank) {
  std::lock_guard lock(mu_);
  return &groups_.at(static_cast<std::size_t>(group)).calls.at(static_cast<std::size_t>(group_rank)).n;
}

void Fabric::oneshot_posted(int group, OneShotGroup& os) {
  if (sleepers_after_publish(os.sleepers, asymmetric_) == 0) return;
  std::lock_guard lock(mu_);
  for (int m : groups_[static_cast<std::size_t>(group)].members) wake(m);
}

void Fabric::oneshot_wait(int group, int group_rank, std::int64_t seq, const CallDesc& d) {
  std::unique_lock lock(mu_);
  throw_if_aborted();
  Group& g = groups_.at(static_cast<std::size_t>(group));
  if (g.slots.count(seq) != 0) fail(mismatch_report(group, seq));
  OneShotGroup& os = *g.oneshot;
  const int me = g.members[static_cast<std::size_t>(group_rank)];
  RankStatus& s = status_[static_cast<std::size_t>(me)];
  s.phase = Phase::kCollective;
  s.group = group;
  s.seq = seq;
  s.desc = d;
  s.oneshot = true;
  PhaseGuard guard{s};
  const Asleep asleep(os.sleepers, asymmetric_);  // counted before the last check of the flags
  block(lock, me, [&] { return os.all_published(seq); });
}

void Fabric::oneshot_wait_readers(int group, int group_rank, std::int64_t seq) noexcept {
  std::unique_lock lock(mu_);
  OneShotGroup& os = *groups_[static_cast<std::size_t>(group)].oneshot;
  const int me = groups_[static_cast<std::size_t>(group)].members[static_cast<std::size_t>(group_rank)];
  const Asleep asleep(os.sleepers, asymmetric_);  // counted before the last check of the flags
  wait_without_deadline(lock, me, [&] { return os.readers_done(group_rank, seq); });
}

void Fabric::oneshot_mismatch(int group, std::int64_t seq) {
  std::lock_guard lock(mu_);
  fail(mismatch_report(group, seq));
}

// Each rank's call `seq` as it registered it in the rendezvous slot or published it on the
// one-shot path, in group order, in check_agreement's words.
std::string Fabric::mismatch_report(int group, std::int64_t seq) const {
  const Group& g = groups_[static_cast<std::size_t>(group)];
  const auto it = g.slots.find(seq);
  std::string msg = "collective mismatch at call #" + std::to_string(seq) + " of " +
                    group_name(group) + ":";
  std::vector<int> absent;
  for (std::size_t k = 0; k < g.members.size(); ++k) {
    const CallDesc* c = nullptr;
    if (it != g.slots.end() && it->second->arrivals[k]) c = &it->second->arrivals[k]->desc;
    else if (g.oneshot->posted_call(static_cast<int>(k), seq)) c = &g.oneshot->desc(static_cast<int>(k), seq);
    if (!c) {
      absent.push_back(named(g.members[k]));
      continue;
    }
    msg += (msg.back() == ':' ? " rank " : ", rank ") + std::to_string(named(g.members[k])) + " " +
           c->str();
  }
  if (!absent.empty()) msg += "; " + rank_list(absent) + " not there yet";
  return msg;
}

// ---- Run lifecycle

void Fabric::begin_run() {
  std::lock_guard lock(mu_);
  if (dead_) throw std::logic_error("local world: a previous run failed (" + reason_ + ")");
  for (RankStatus& s : status_) s = RankStatus{};
  for (const std::unique_ptr<Fabric>& lane : lanes_) {
    for (RankStatus& s : lane->status_) s = RankStatus{};
  }
}

// A rank's thread has returned, after every thread it started (a lane's user among them): it
// has finished on the root and on every lane it is a rank of.
void Fabric::rank_finished(int rank) {
  std::lock_guard lock(mu_);
  status_[static_cast<std::size_t>(rank)].phase = Phase::kFinished;
  for (const std::unique_ptr<Fabric>& lane : lanes_) {
    for (int r = 0; r < lane->world_size(); ++r) {
      if (lane->named(r) == rank) lane->status_[static_cast<std::size_t>(r)].phase = Phase::kFinished;
    }
    lane->check_deadlock();
  }
  check_deadlock();  // ranks still waiting for this one can never be released
}

void Fabric::rank_failed(int rank, std::exception_ptr error) {
  std::lock_guard lock(mu_);
  status_[static_cast<std::size_t>(rank)].phase = Phase::kFailed;
  for (const std::unique_ptr<Fabric>& lane : lanes_) {
    for (int r = 0; r < lane->world_size(); ++r) {
      if (lane->named(r) == rank) lane->status_[static_cast<std::size_t>(r)].phase = Phase::kFailed;
    }
  }
  if (!first_error_) first_error_ = error;
  abort("rank " + std::to_string(rank) + " failed: " + exception_text(error));
}

void Fabric::end_run_here() {
  // Every rank has joined: what is left in a channel was never received.
  for (int src = 0; src < world_size(); ++src) {
    for (int dst = 0; dst < world_size(); ++dst) drain(src, dst);
  }
  if (!aborted_ && !mail_.empty()) abort(undelivered());
  if (mail_.empty()) free_channels();  // else lent messages there may still point into them
}

std::exception_ptr Fabric::end_run() {
  std::lock_guard lock(mu_);
  end_run_here();
  for (const std::unique_ptr<Fabric>& lane : lanes_) lane->end_run_here();
  if (!aborted_) return nullptr;
  dead_ = true;
  if (first_error_) return first_error_;
  return watchdog_fired_ ? std::make_exception_ptr(CommWatchdogTimeout(reason_))
                         : std::make_exception_ptr(CommError(reason_));
}

std::int64_t Fabric::lost_wakeups() const {
  std::int64_t n = lost_wakeups_;
  for (const std::unique_ptr<Fabric>& lane : lanes_) n += lane->lost_wakeups_;
  return n;
}

// A dup's lane, made by the last rank to arrive at the dup (under mu_): its ranks are the
// group's, in group order, as the root's world ranks.
Fabric* Fabric::add_lane(const std::vector<int>& group_members) {
  Fabric& root = root_ ? *root_ : *this;
  std::vector<int> world_ranks;
  world_ranks.reserve(group_members.size());
  for (int m : group_members) world_ranks.push_back(named(m));
  root.lanes_.push_back(std::make_unique<Fabric>(root, std::move(world_ranks)));
  return root.lanes_.back().get();
}

void Fabric::park_busy_ledgers() {
  // Never destroyed, so tensors that outlive their world (even past static destruction)
  // always find their ledger; reachable, so leak checkers stay quiet.
  static auto* const parked = new std::vector<std::unique_ptr<MemoryLedger>>();
  static auto* const parked_mu = new std::mutex();
  std::lock_guard lock(*parked_mu);
  const auto park = [&](std::unique_ptr<MemoryLedger>& l) {
    if (l && (l->live_total(Device::kCPU) || l->live_total(Device::kCUDA))) {
      parked->push_back(std::move(l));
    }
  };
  for (std::unique_ptr<MemoryLedger>& l : ledgers_) park(l);
  park(network_);
}

}  // namespace mixpar::local
