// The local backend's fast channel for point-to-point messages (internal to the local
// backend): one single-producer single-consumer ring of message slots per ordered pair of
// world ranks. Through the fabric's mailbox (comm/local_fabric.h) a message costs a lock of
// the world's one mutex on each side, a map node, a freshly allocated copy and a condition
// variable hand-off; for small messages that was the whole cost (a 2-rank sendrecv of 8 B took
// 1.5 us against OpenMPI's 0.22). Here the sender writes the slot's header and bytes (or, for
// a lent message, a pointer to its own buffer) and then stores the message's number in the
// slot's first cache line with release order; the receiver polls that number in the slot it
// expects next, with acquire order, so it sees the header and the bytes: a flag beside the
// data, as in NCCL's LL protocol and Open MPI's shared-memory "fastboxes". A message of up to
// kInlineBytes travels in the slot's own lines, the first 24 bytes in the flag's line: what
// the receiver waits for arrives in one trip between cores, not three (a count, a header, a
// buffer, each its own line, as this channel first had it). No lock on either side while the
// ranks are on time; the fabric's mutex is taken only to wake a rank that went to sleep.
//
// A slot's state says who owns it: free (the producer may fill it), full (published, waiting
// for the receiver), taken (a lent buffer being read by the receiver; the sender waits for
// free again), withdrawn (a lent buffer its sender took back while leaving on an exception:
// the receiver frees it unread). The producer fills slots strictly in ring order and falls back
// to the mailbox when the next slot is not free, so it never waits for room; messages of a
// pair carry an order number across both routes, and the fabric delivers the lowest first.
//
// Measured (bench_collectives --impl local --ops sendrecv, 2 ranks, 2-core AMD EPYC, median
// us; ch04_ddp/PERFORMANCE.md, "Trips between cores", says how the runs were chosen): 8 B took
// 1.5-2.9 through the mailbox alone, 0.26 with this channel's first form (a write count, a
// header and a buffer in three lines) and 0.12 in this one, against Open MPI 4.1's 0.20;
// 128 B 0.17 (Open MPI 0.23), 2 KiB 0.47 (0.55).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "comm/cache_lines.h"
#include "numerics/dtype.h"

namespace mixpar::local {

enum SlotState : int { kSlotFree = 0, kSlotFull = 1, kSlotTaken = 2, kSlotWithdrawn = 3 };

struct alignas(64) ChannelSlot {
  // The first cache line: what the receiver reads of every message, and the first bytes.
  // The channel's message number + 1 of the message published here (0: none yet), stored
  // last with release order: the receiver's flag.
  std::atomic<std::uint64_t> published{0};
  std::atomic<int> state{kSlotFree};
  // The header, written by the producer while the slot is free, read once it is published.
  int group = 0;
  int tag = 0;
  DType dtype = DType::kF32;
  std::int64_t count = 0;
  const std::byte* lent = nullptr;  // the sender's own buffer; nullptr: the bytes are copied
  // A copied message larger than kInlineBytes: `buffer`'s data, named here, in the line the
  // receiver polls. Read from `buffer` itself, in the producer's line, the pointer was one
  // more trip between the cores before the first byte (a 2-rank sendrecv of 512 B took
  // 0.26-0.27 us, now 0.20-0.22; ch04_ddp/PERFORMANCE.md, "Trips between cores").
  const std::byte* copied = nullptr;
  // A copied message of at most kInlineBytes: here, from the first line on; a larger one in
  // `buffer`.
  static constexpr std::size_t kInlineBytes = 208;
  std::byte inline_bytes[kInlineBytes];
  // The producer's own fields, in a line the receiver's polls do not touch.
  alignas(64) std::uint64_t order = 0;  // the pair's message number (mailbox messages share it)
  // Copied bytes beyond kInlineBytes: grown by the producer to the largest message it copied
  // here, charged to the network ledger, freed when the run ends. Line-aligned, so a message
  // spans no more lines than its bytes need.
  LineBytes buffer;
  std::size_t capacity = 0;
  std::size_t bytes() const { return static_cast<std::size_t>(count) * dtype_size(dtype); }
  const std::byte* data() const {
    if (lent) return lent;
    return bytes() <= kInlineBytes ? inline_bytes : copied;
  }
};
// 48 bytes of flag and header, then the inline bytes to the end of line 4 (16 of them in the
// flag's line), then the producer's line.
static_assert(sizeof(ChannelSlot) == 5 * 64, "flag, header and inline bytes in 4 lines");

struct Channel {
  // Messages a sender may have in flight to one receiver before it falls back to the mailbox:
  // enough for a pipeline's warm-up sends and a ring's hops, small enough to scan.
  static constexpr int kSlots = 8;
  ChannelSlot& at(std::uint64_t i) { return slots[i % kSlots]; }
  const ChannelSlot& at(std::uint64_t i) const { return slots[i % kSlots]; }
  ChannelSlot slots[kSlots];
  // Published, the producer's: how drain() and the deadlock check find every message in
  // flight. The receiver's fast path polls the slot's own `published` instead.
  alignas(64) std::atomic<std::uint64_t> written{0};
  // The producer's own record of slots it saw free (bit k: slot k) and has not filled since:
  // such a slot is still free, since only the producer fills one. Reading a slot's state is a
  // trip to the receiver's core whenever the receiver freed it since, so the producer reads
  // the states only when its next slot is not known free, all 8 at once: in a steady exchange
  // one read in 8 messages instead of one per message.
  std::uint8_t known_free = 0xff;
  alignas(64) std::atomic<std::uint64_t> read{0};  // taken or moved, the consumer's
};

}  // namespace mixpar::local
