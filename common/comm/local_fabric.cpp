// The local world's shared state and its failure checks. Public members take the one mutex;
// private helpers expect it held. Waits sleep on the rank's own condition variable with a
// wait_until deadline (the watchdog), and every rank about to sleep first asks whether any
// rank could still wake it (the deadlock check), so a broken world fails instead of hanging.

#include "comm/local_fabric.h"

#include "comm/asymmetric_fence.h"
#include "comm/local_kernels.h"
#include "comm/local_oneshot.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <utility>

namespace mixpar::local {
namespace {

std::string count_str(std::int64_t count, DType dtype) {
  return std::to_string(count) + " x " + std::string(dtype_name(dtype));
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string exception_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

}  // namespace

bool CallDesc::agrees_with(const CallDesc& o) const {
  if (op != o.op) return false;
  switch (op) {
    case CollOp::kBarrier:
    case CollOp::kSplit: return true;
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

namespace {

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

}  // namespace

Fabric::Fabric(int world_size, double watchdog_seconds, bool synchronous_sends,
               std::size_t eager_limit_bytes, double spin_microseconds,
               std::size_t oneshot_max_bytes)
    : cv_(static_cast<std::size_t>(std::max(world_size, 0))),
      wakes_(std::make_unique<std::atomic<std::uint64_t>[]>(
          static_cast<std::size_t>(std::max(world_size, 0)))),
      oneshot_max_bytes_(oneshot_max_bytes),
      status_(static_cast<std::size_t>(std::max(world_size, 0))),
      network_(std::make_unique<MemoryLedger>(-1)),
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
  for (int r = 0; r < world_size; ++r) ledgers_.push_back(std::make_unique<MemoryLedger>(r));
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
  lock.lock();
  return count.load(std::memory_order_relaxed) != seen;
}

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
        abort("watchdog: rank " + std::to_string(me) + " waited " + limit +
              " s in the communicator; " + report());
      }
    }
  }
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

// ---- The fast channels (comm/local_channel.h)

ChannelSlot* Fabric::claim(int src, int dst) {
  std::atomic<Channel*>& entry = channels_[pair(src, dst)];
  Channel* ch = entry.load(std::memory_order_relaxed);  // only this thread stores it
  if (!ch) {
    ch = new Channel();
    entry.store(ch, std::memory_order_release);
  }
  const std::uint64_t w = ch->written.load(std::memory_order_relaxed);
  const auto bit = static_cast<std::uint8_t>(1u << (w % Channel::kSlots));
  if ((ch->known_free & bit) == 0) {
    // Acquire: the receiver's last reads of a slot it freed come before our writes to it.
    for (int k = 0; k < Channel::kSlots; ++k) {
      if (ch->slots[k].state.load(std::memory_order_acquire) == kSlotFree) {
        ch->known_free = static_cast<std::uint8_t>(ch->known_free | (1u << k));
      }
    }
    if ((ch->known_free & bit) == 0) return nullptr;
  }
  ch->known_free = static_cast<std::uint8_t>(ch->known_free & ~bit);
  return &ch->at(w);
}

void Fabric::publish(int src, int dst, ChannelSlot& slot) {
  slot.order = next_order(src, dst)++;
  slot.state.store(kSlotFull, std::memory_order_relaxed);
  Channel& ch = *channels_[pair(src, dst)].load(std::memory_order_relaxed);
  const std::uint64_t n = ch.written.load(std::memory_order_relaxed) + 1;
  // Release: the header and bytes are visible with the flag, and with the count, which is
  // what a receiver about to sleep reads (drain()): notify() reads its `asleep_` after it.
  slot.published.store(n, std::memory_order_release);
  publish_flag(ch.written, n, asymmetric_);
  notify(dst);
}

void Fabric::notify(int rank) {
  if (sleepers_after_publish(asleep_[static_cast<std::size_t>(rank)], asymmetric_) == 0) return;
  std::lock_guard lock(mu_);
  wake(rank);
}

bool Fabric::post_inline(int group, int src, int dst, int tag, const Tensor& message) {
  ChannelSlot* s = claim(src, dst);
  if (!s) return false;
  const std::size_t bytes = message.nbytes();
  if (bytes > ChannelSlot::kInlineBytes && s->capacity < bytes) {
    // Grows to the largest message: a ring's hops reuse it.
    std::size_t capacity = 64;
    while (capacity < bytes) capacity *= 2;
    if (s->capacity) network_->on_free(MemCategory::kCommBuffers, Device::kCPU, s->capacity);
    s->buffer.reset();
    s->capacity = 0;
    s->buffer = std::make_unique_for_overwrite<std::byte[]>(capacity);
    network_->on_alloc(MemCategory::kCommBuffers, Device::kCPU, capacity);
    s->capacity = capacity;
  }
  copy_bytes(bytes <= ChannelSlot::kInlineBytes ? s->inline_bytes : s->buffer.get(),
             static_cast<const std::byte*>(message.data()), bytes);
  s->group = group;
  s->tag = tag;
  s->count = message.numel();
  s->dtype = message.dtype();
  s->lent = nullptr;
  publish(src, dst, *s);
  return true;
}

ChannelSlot* Fabric::take_fast(int group, int src, int dst, int tag, std::int64_t count,
                               DType dtype) {
  std::atomic<std::int64_t>& parked = parked_[pair(src, dst)];
  Channel* ch = nullptr;
  std::uint64_t r = 0;  // the head's number: only this thread moves `read`
  // The head is published when its slot's flag holds its number + 1 (the slot's line: the
  // header and a small message's bytes arrive with it).
  const auto arrived = [&] {
    if (parked.load(std::memory_order_relaxed) != 0) return true;
    if (!ch) {
      ch = channel(src, dst);
      if (!ch) return false;
      r = ch->read.load(std::memory_order_relaxed);
    }
    return ch->at(r).published.load(std::memory_order_acquire) == r + 1;
  };
  if (!poll(arrived) || !ch) return nullptr;
  ChannelSlot& s = ch->at(r);
  if (s.published.load(std::memory_order_acquire) != r + 1) return nullptr;
  // Read after the head's flag (acquire): a mailbox message older than the head was queued,
  // and counted, before the head was published, so a zero means the head is the oldest.
  if (parked.load(std::memory_order_relaxed) != 0) return nullptr;
  if (s.group != group || s.tag != tag || s.count != count || s.dtype != dtype) return nullptr;
  if (s.lent) {
    int full = kSlotFull;
    if (!s.state.compare_exchange_strong(full, kSlotTaken, std::memory_order_acquire)) {
      return nullptr;  // withdrawn: drain() frees it
    }
  }
  ch->read.store(r + 1, std::memory_order_relaxed);
  return &s;
}

void Fabric::drain(int src, int dst) {
  Channel* ch = channel(src, dst);
  if (!ch) return;
  const std::uint64_t w = ch->written.load(std::memory_order_acquire);
  for (std::uint64_t r = ch->read.load(std::memory_order_relaxed); r < w; ++r) {
    ChannelSlot& s = ch->at(r);
    ch->read.store(r + 1, std::memory_order_relaxed);
    const MailKey key{s.group, src, dst, s.tag};
    if (s.lent) {
      // Still full: its sender withdraws only under mu_, and finds it in the mailbox then.
      if (s.state.load(std::memory_order_acquire) == kSlotWithdrawn) {
        release_locked(src, s);
      } else {
        queue(key, {0, s.order, s.count, s.dtype, s.lent, Tensor(), true, &s});
      }
      continue;
    }
    Tensor copy = Tensor::empty({s.count}, s.dtype, MemCategory::kCommBuffers, Device::kCPU,
                                network_.get());
    copy_bytes(static_cast<std::byte*>(copy.data()), s.data(), copy.nbytes());
    const auto* data = static_cast<const std::byte*>(copy.data());
    queue(key, {0, s.order, s.count, s.dtype, data, std::move(copy), false});
    release_locked(src, s);
  }
}

bool Fabric::in_channel(const MailKey& key) const {
  const auto& [group, src, dst, tag] = key;
  const Channel* ch = channel(src, dst);
  if (!ch) return false;
  const std::uint64_t w = ch->written.load(std::memory_order_acquire);
  for (std::uint64_t r = ch->read.load(std::memory_order_relaxed); r < w; ++r) {
    const ChannelSlot& s = ch->at(r);
    if (s.group == group && s.tag == tag &&
        s.state.load(std::memory_order_acquire) == kSlotFull) {
      return true;
    }
  }
  return false;
}

void Fabric::release(int src, ChannelSlot& slot) noexcept {
  publish_flag(slot.state, int{kSlotFree}, asymmetric_);
  if (sleepers_after_publish(asleep_[static_cast<std::size_t>(src)], asymmetric_) == 0) return;
  std::lock_guard lock(mu_);
  wake(src);
}

void Fabric::release_locked(int src, ChannelSlot& slot) {
  slot.state.store(kSlotFree, std::memory_order_seq_cst);
  if (asleep_[static_cast<std::size_t>(src)].load(std::memory_order_seq_cst) != 0) wake(src);
}

// Under mu_: after this no receiver reads the slot's lent buffer.
void Fabric::withdraw_slot(std::unique_lock<std::mutex>& lock, const MailKey& key,
                           ChannelSlot& slot) {
  const auto it = mail_.find(key);
  if (it != mail_.end()) {  // moved to the mailbox and not taken: the receiver is past it
    std::deque<Message>& q = it->second;
    const auto m = std::find_if(q.begin(), q.end(), [&](const Message& x) { return x.slot == &slot; });
    if (m != q.end()) {
      q.erase(m);
      if (q.empty()) mail_.erase(it);
      parked_[pair(std::get<1>(key), std::get<2>(key))].fetch_sub(1, std::memory_order_relaxed);
      slot.state.store(kSlotFree, std::memory_order_release);
      return;
    }
  }
  int full = kSlotFull;
  if (slot.state.compare_exchange_strong(full, kSlotWithdrawn, std::memory_order_acq_rel)) return;
  // Taken: being copied, which never blocks.
  const int src = std::get<1>(key);
  wait_without_deadline(lock, src, [&] {
    return slot.state.load(std::memory_order_acquire) == kSlotFree;
  });
}

void Fabric::free_channels() {
  for (std::size_t p = 0; p < pairs(); ++p) {
    Channel* ch = channels_[p].exchange(nullptr);
    if (!ch) continue;
    for (ChannelSlot& s : ch->slots) {
      if (s.capacity) network_->on_free(MemCategory::kCommBuffers, Device::kCPU, s.capacity);
    }
    delete ch;
  }
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
  const std::string in = s.group == 0 ? "" : " in " + group_name(s.group);
  return "send/recv mismatch" + in + ": rank " + std::to_string(s.peer) + " sent " +
         count_str(m.count, m.dtype) + " to rank " + std::to_string(dst) + tag + ", but rank " +
         std::to_string(dst) + " receives " + count_str(s.count, s.dtype) + " from rank " +
         std::to_string(s.peer) + tag;
}

// ---- Collectives

Ticket Fabric::arrive(int group, int group_rank, const Arrival& a) {
  std::unique_lock lock(mu_);
  throw_if_aborted();
  Group& g = groups_.at(static_cast<std::size_t>(group));
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
  std::unique_lock lock(mu_);
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
      absent.push_back(members[k]);
      continue;
    }
    msg += (msg.back() == ':' ? " rank " : ", rank ") + std::to_string(members[k]) + " " + c->str();
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

void Fabric::oneshot_check(int group, std::int64_t seq) {
  std::lock_guard lock(mu_);
  throw_if_aborted();
  if (groups_.at(static_cast<std::size_t>(group)).slots.count(seq) != 0) {
    fail(mismatch_report(group, seq));
  }
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
      absent.push_back(g.members[k]);
      continue;
    }
    msg += (msg.back() == ':' ? " rank " : ", rank ") + std::to_string(g.members[k]) + " " + c->str();
  }
  if (!absent.empty()) msg += "; " + rank_list(absent) + " not there yet";
  return msg;
}

// ---- Aborting, and the reports

void Fabric::throw_if_aborted() const {
  if (aborted_) throw_aborted();
}

void Fabric::throw_aborted() const {
  if (watchdog_fired_) throw CommWatchdogTimeout(reason_);
  throw CommError(reason_);
}

void Fabric::fail(std::string reason) {
  abort(std::move(reason));
  throw_aborted();  // the first reason, if the world had already failed
}

void Fabric::abort(std::string reason) {
  if (aborted_) return;
  aborted_ = true;
  reason_ = std::move(reason);
  for (int r = 0; r < world_size(); ++r) wake(r);
}

void Fabric::check_deadlock() {
  if (aborted_) return;
  bool any_live = false;
  for (int r = 0; r < world_size(); ++r) {
    const Phase p = status_[static_cast<std::size_t>(r)].phase;
    if (p == Phase::kFinished || p == Phase::kFailed) continue;
    if (!stuck(r)) return;
    any_live = true;
  }
  if (any_live) {
    abort("deadlock: every unfinished rank waits in the communicator and nothing in flight "
          "can release any of them; " + report());
  }
}

bool Fabric::stuck(int rank) const {
  const RankStatus& s = status_[static_cast<std::size_t>(rank)];
  if (s.phase == Phase::kRecv) {
    const MailKey key{s.group, s.peer, rank, s.tag};
    return mail_.count(key) == 0 && !in_channel(key);
  }
  if (s.phase == Phase::kSend) {
    if (s.slot) return s.slot->state.load(std::memory_order_acquire) == kSlotFull;
    return !taken({s.group, rank, s.peer, s.tag}, s.message);
  }
  if (s.phase != Phase::kCollective) return false;
  const Group& g = groups_[static_cast<std::size_t>(s.group)];
  if (s.oneshot) return !g.oneshot->all_published(s.seq);
  const auto it = g.slots.find(s.seq);
  return it != g.slots.end() && it->second->arrived < static_cast<int>(g.members.size());
}

std::string Fabric::where(int rank) const {
  const RankStatus& s = status_[static_cast<std::size_t>(rank)];
  const std::string who = "rank " + std::to_string(rank);
  const std::string call = " (call #" + std::to_string(s.seq) + " of " + group_name(s.group) + ")";
  switch (s.phase) {
    case Phase::kComputing: return who + " is computing (not in the communicator)";
    case Phase::kFinished: return who + " has finished";
    case Phase::kFailed: return who + " has failed";
    case Phase::kCompleting: return who + " is completing " + s.desc.str() + call;
    case Phase::kSend:
    case Phase::kRecv:
      return who + " waits in " + (s.phase == Phase::kSend ? "send(to " : "recv(from ") +
             std::to_string(s.peer) + ", tag " + std::to_string(s.tag) + ", " +
             count_str(s.count, s.dtype) + ")" + (s.group == 0 ? "" : " in " + group_name(s.group));
    case Phase::kCollective: break;
  }
  const Group& g = groups_[static_cast<std::size_t>(s.group)];
  std::vector<int> absent;
  const auto it = g.slots.find(s.seq);
  for (std::size_t k = 0; k < g.members.size(); ++k) {
    const bool missing = s.oneshot ? !g.oneshot->published(static_cast<int>(k), s.seq)
                                   : it != g.slots.end() && !it->second->arrivals[k];
    if (missing) absent.push_back(g.members[k]);
  }
  return who + " waits in " + s.desc.str() + call +
         (absent.empty() ? "" : " for " + rank_list(absent));
}

std::string Fabric::report() const {
  std::string out;
  for (int r = 0; r < world_size(); ++r) out += (r ? "; " : "") + where(r);
  return out;
}

std::string Fabric::group_name(int group) const {
  if (group == 0) return "world";
  const std::vector<int>& m = groups_[static_cast<std::size_t>(group)].members;
  std::string s = "group {";
  for (std::size_t i = 0; i < m.size(); ++i) s += (i ? ", " : "") + std::to_string(m[i]);
  return s + "}";
}

std::string Fabric::undelivered() const {
  std::string msg = "messages sent but never received:";
  for (const auto& [key, queue] : mail_) {
    const auto& [group, src, dst, tag] = key;
    msg += (msg.back() == ':' ? " rank " : "; rank ") + std::to_string(src) + " sent " +
           std::to_string(queue.size()) + " message(s) to rank " + std::to_string(dst) +
           " (tag " + std::to_string(tag) + ")" + (group == 0 ? "" : " in " + group_name(group));
  }
  return msg;
}

// ---- Run lifecycle

void Fabric::begin_run() {
  std::lock_guard lock(mu_);
  if (dead_) throw std::logic_error("local world: a previous run failed (" + reason_ + ")");
  for (RankStatus& s : status_) s = RankStatus{};
}

void Fabric::rank_finished(int rank) {
  std::lock_guard lock(mu_);
  status_[static_cast<std::size_t>(rank)].phase = Phase::kFinished;
  check_deadlock();  // ranks still waiting for this one can never be released
}

void Fabric::rank_failed(int rank, std::exception_ptr error) {
  std::lock_guard lock(mu_);
  status_[static_cast<std::size_t>(rank)].phase = Phase::kFailed;
  if (!first_error_) first_error_ = error;
  abort("rank " + std::to_string(rank) + " failed: " + exception_text(error));
}

std::exception_ptr Fabric::end_run() {
  std::lock_guard lock(mu_);
  // Every rank has joined: what is left in a channel was never received.
  for (int src = 0; src < world_size(); ++src) {
    for (int dst = 0; dst < world_size(); ++dst) drain(src, dst);
  }
  if (!aborted_ && !mail_.empty()) abort(undelivered());
  if (mail_.empty()) free_channels();  // else lent messages there may still point into them
  if (!aborted_) return nullptr;
  dead_ = true;
  if (first_error_) return first_error_;
  return watchdog_fired_ ? std::make_exception_ptr(CommWatchdogTimeout(reason_))
                         : std::make_exception_ptr(CommError(reason_));
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
