// The fabric's fast channels between pairs of ranks (comm/local_channel.h): claiming and
// publishing a slot, taking and releasing it, draining a channel. Lock-free while both ranks
// are on time; a rank that must wait does so under the fabric's mutex
// (comm/local_fabric_waits.h).
#include "comm/local_fabric.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "comm/local_fabric_waits.h"
#include "comm/local_kernels.h"

namespace mixpar::local {

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
    if (s->capacity) network_ledger().on_free(MemCategory::kCommBuffers, Device::kCPU, s->capacity);
    s->buffer.reset();
    s->capacity = 0;
    s->buffer = allocate_lines(capacity);
    network_ledger().on_alloc(MemCategory::kCommBuffers, Device::kCPU, capacity);
    s->capacity = capacity;
  }
  copy_bytes(bytes <= ChannelSlot::kInlineBytes ? s->inline_bytes : s->buffer.get(),
             static_cast<const std::byte*>(message.data()), bytes);
  s->group = group;
  s->tag = tag;
  s->count = message.numel();
  s->dtype = message.dtype();
  s->lent = nullptr;
  s->copied = bytes > ChannelSlot::kInlineBytes ? s->buffer.get() : nullptr;
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
                                &network_ledger());
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
      if (s.capacity) network_ledger().on_free(MemCategory::kCommBuffers, Device::kCPU, s.capacity);
    }
    delete ch;
  }
}

}  // namespace mixpar::local
