// The local backend's fast channels (comm/local_channel.h): a message goes through the pair's
// slots when one is free and through the mailbox otherwise (all slots in flight, larger than
// the eager limit), and whatever the route the guarantees of the mailbox hold: one queue per
// (sender, receiver, tag) taken in the order sent, a message of another tag at the channel's
// head never blocking the one asked for, a lent buffer read in place wherever it waits, no
// deadlock reported while the awaited message sits in a channel, and a real one reported at
// once with where every rank is.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/local_backend.h"
#include "comm/local_fabric.h"
#include "comm_local_test_util.h"

namespace mixpar {
namespace {

using namespace comm_testing;

Tensor filled(std::int64_t n, float v) {
  Tensor t = Tensor::empty({n}, DType::kF32);
  t.fill(v);
  return t;
}

// Rank 0 sends 40 messages on two tags, far more than a channel's slots, with sizes on both
// sides of the eager limit (inline, mailbox copies) and, on tag 7, a lent sendrecv last; rank
// 1 receives tag 8 first, then tag 7: each tag's messages arrive in the order sent.
// A wait's pause budget: a wait that ended within its pauses, or a few yields after them (its
// peer was running, perhaps yielding once itself), leaves the next wait the full 40 pauses;
// only a long one (the peer not running) cuts it to 8. With "within its pauses" alone, two
// ranks that yielded once stayed at 8 pauses, each outlasted by the other's yields, and
// small calls ran 3-4x slower for seconds at a time.
TEST(LocalWaits, AWaitThatYieldedAFewTimesStillPausesInFullNextTime) {
  using local::Fabric;
  EXPECT_EQ(Fabric::pause_polls_after(5, 40), 40);   // answered while pausing
  EXPECT_EQ(Fabric::pause_polls_after(9, 8), 40);    // one yield after 8 pauses: the trap
  EXPECT_EQ(Fabric::pause_polls_after(16, 8), 40);   // 8 yields
  EXPECT_EQ(Fabric::pause_polls_after(17, 8), 8);    // more: the peer was not running
  EXPECT_EQ(Fabric::pause_polls_after(200, 40), 8);
  EXPECT_EQ(Fabric::pause_polls_after(48, 40), 40);
}

TEST(LocalChannel, MessagesOverflowingTheSlotsKeepTheirOrderAcrossRoutes) {
  constexpr LocalOptions kSmallEager{.eager_limit_bytes = 256};  // 64 f32 inline at most
  constexpr int kEach = 20;
  const auto size_of = [](int i) { return std::int64_t{i % 3 == 0 ? 100 : 1 + i}; };
  LocalWorld world(2, kSmallEager);
  world.run([&](Communicator& c) {
    if (c.rank() == 0) {
      for (int i = 0; i < kEach; ++i) {
        c.send(filled(size_of(i), static_cast<float>(i)), 1, 7);
        c.send(filled(size_of(i), static_cast<float>(100 + i)), 1, 8);
      }
      Tensor back = Tensor::empty({500}, DType::kF32);
      c.sendrecv(filled(500, 1000.0f), 1, back, 1, 7);  // lent: 2000 bytes
      EXPECT_EQ(back.to_floats().front(), -1.0f);
      return;
    }
    for (const int tag : {8, 7}) {
      for (int i = 0; i < kEach; ++i) {
        Tensor got = Tensor::empty({size_of(i)}, DType::kF32);
        c.recv(got, 0, tag);
        const float want = static_cast<float>((tag == 8 ? 100 : 0) + i);
        ASSERT_EQ(got.to_floats(), std::vector<float>(static_cast<std::size_t>(size_of(i)), want))
            << "tag " << tag << ", message " << i;
      }
    }
    Tensor got = Tensor::empty({500}, DType::kF32);
    c.sendrecv(filled(500, -1.0f), 0, got, 0, 7);
    EXPECT_EQ(got.to_floats(), std::vector<float>(500, 1000.0f));
  });
  EXPECT_GE(world.network_ledger().peak(MemCategory::kCommBuffers), 400u);  // the 100-f32 copies
  EXPECT_EQ(world.network_ledger().live_total(), 0u);  // slots are returned when the run ends
}

// A buffered send is a copy whatever its route (a slot, the mailbox above the eager limit or
// with every slot in flight): the sender overwrites its buffer as soon as send() returns, and
// the receiver, which only starts receiving after that, still gets what was sent.
TEST(LocalChannel, ABufferedSendIsACopyOnEveryRoute) {
  constexpr int kMessages = 12;  // more than a channel's slots
  for (const std::int64_t n : {std::int64_t{4}, std::int64_t{5000}}) {  // 16 B, 20 KB
    run_local(
        2,
        [&](Communicator& c) {
          Tensor buf = Tensor::empty({n}, DType::kF32);
          if (c.rank() == 0) {
            for (int i = 0; i < kMessages; ++i) {
              buf.fill(static_cast<float>(i));
              c.send(buf, 1, 2);
            }
            buf.fill(-1.0f);
            c.send(buf, 1, 3);  // "all sent"
            return;
          }
          c.recv(buf, 0, 3);
          for (int i = 0; i < kMessages; ++i) {
            c.recv(buf, 0, 2);
            ASSERT_EQ(buf.to_floats(), std::vector<float>(static_cast<std::size_t>(n), float(i)))
                << n << " elements, message " << i;
          }
        },
        {.eager_limit_bytes = 1024});
  }
}

// Rank 0's small message on tag 1 sits at the channel's head when rank 1 asks for the lent
// buffer behind it on tag 2: the lent one is still read in place (nothing staged for it), and
// the small one is received afterwards.
TEST(LocalChannel, ALentBufferBehindAMessageOfAnotherTagIsReadInPlace) {
  for (const double spin : {0.0, 50.0}) {
    LocalWorld world(2, {.eager_limit_bytes = 64, .spin_microseconds = spin});
    world.run([](Communicator& c) {
      const int peer = 1 - c.rank();
      Tensor got = Tensor::empty({1000}, DType::kF32);
      if (c.rank() == 0) c.send(filled(3, 5.0f), 1, 1);
      c.sendrecv(rank_data(c.rank(), 1000, DType::kF32), peer, got, peer, 2);
      EXPECT_TRUE(same_bits(got, rank_data(peer, 1000, DType::kF32)));
      if (c.rank() == 1) {
        Tensor small = Tensor::empty({3}, DType::kF32);
        c.recv(small, 0, 1);
        EXPECT_EQ(small.to_floats(), std::vector<float>(3, 5.0f));
      }
    });
    // The 12-byte message: copied into a slot (64 bytes), then out of it into the mailbox
    // when rank 1 looked past it (16 more); never the 4000-byte lent buffers.
    EXPECT_LT(world.network_ledger().peak(MemCategory::kCommBuffers), 4000u) << spin;
  }
}

// A message of another tag waiting in the channel does not count as the one a rank waits for:
// rank 1 waits for tag 2 while only tag 1 was sent, and rank 0 waits for rank 1. A deadlock,
// reported at once and naming both.
TEST(LocalChannel, AMessageOfAnotherTagInTheChannelDoesNotHideADeadlock) {
  const CommFailure f = run_expecting_comm_error(2, [](Communicator& c) {
    Tensor t = Tensor::empty({4}, DType::kF32);
    if (c.rank() == 0) {
      c.send(filled(4, 1.0f), 1, 1);
      c.recv(t, 1, 5);
    } else {
      c.recv(t, 0, 2);
    }
  });
  ASSERT_FALSE(f.thrown.empty());
  EXPECT_CONTAINS(f.thrown, "deadlock");
  EXPECT_CONTAINS(f.thrown, "rank 0 waits in recv(from 1, tag 5, 4 x f32)");
  EXPECT_CONTAINS(f.thrown, "rank 1 waits in recv(from 0, tag 2, 4 x f32)");
}

// A token passed around a ring with no spinning: the receiver is usually asleep in the fabric
// when its message lands in the channel, and the sender then blocks too and checks for a
// deadlock. A message in a channel releases its receiver, so the check must find none, round
// after round, for inline and for lent (synchronous) messages, on 2 and 3 ranks.
TEST(LocalChannel, NoDeadlockIsReportedWhileTheAwaitedMessageSitsInAChannel) {
  for (const std::size_t eager : {std::size_t{64} << 10, std::size_t{0}}) {
    for (const int n : {2, 3}) {
      run_local(
          n,
          [&](Communicator& c) {
            const int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
            Tensor got = Tensor::empty({16}, DType::kF32);
            for (int round = 0; round < 200; ++round) {  // a token around the ring
              if (c.rank() == round % n) c.send(filled(16, static_cast<float>(round)), next, 3);
              if (c.rank() == (round + 1) % n) {
                c.recv(got, prev, 3);
                ASSERT_EQ(got.to_floats().back(), static_cast<float>(round));
              }
            }
          },
          {.synchronous_sends = eager == 0, .eager_limit_bytes = eager, .spin_microseconds = 0});
    }
  }
}

// A copied message of up to local::ChannelSlot::kInlineBytes (208: 52 f32) travels in the slot's own
// lines, a larger one in the slot's buffer. Sizes on both sides of that line, through the same
// 8 slots again and again (a slot that held a large message then holds a small one and back),
// each arrive whole: the receiver reads the bytes where the sender put them.
TEST(LocalChannel, MessagesEitherSideOfTheInlineLimitArriveWhole) {
  static_assert(local::ChannelSlot::kInlineBytes == 52 * 4);
  const std::vector<std::int64_t> sizes = {1, 6, 51, 52, 53, 200, 52, 2, 53, 1000, 6};
  run_local(2, [&](Communicator& c) {
    const int peer = 1 - c.rank();
    for (int round = 0; round < 40; ++round) {
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        const float v = static_cast<float>(1000 * c.rank() + 10 * round + static_cast<int>(k));
        const float want = static_cast<float>(1000 * peer + 10 * round + static_cast<int>(k));
        Tensor got = Tensor::empty({sizes[k]}, DType::kF32);
        c.sendrecv(filled(sizes[k], v), peer, got, peer, 5);
        ASSERT_EQ(got.to_floats(), std::vector<float>(static_cast<std::size_t>(sizes[k]), want))
            << "round " << round << ", " << sizes[k] << " f32";
      }
    }
  });
}

// A rank that stops spinning and sleeps must be woken by a publish that does not take the
// mutex (a channel's flag, a slot freed, a one-shot flag): the publisher reads the sleeper's
// count after its store and the sleeper reads the flags after counting itself, with the
// store-load fence split between them (comm/asymmetric_fence.h). With a spin of a fraction of
// a microsecond the ranks sleep at most hand-offs, the two ranks' timing skewed by busy work on
// one side. A lost wake-up leaves a rank asleep until the watchdog's deadline (1 s here),
// which then finds its wait over and counts it.
TEST(LocalChannel, ASleepingRankIsWokenByEveryPublishWithoutTheMutex) {
  LocalWorld world(2, {.watchdog_seconds = 1, .eager_limit_bytes = 64, .spin_microseconds = 0.2});
  world.run(
      [&](Communicator& c) {
        const int peer = 1 - c.rank();
        Tensor small = filled(4, 1.0f), large = filled(64, 2.0f);
        Tensor got_small = Tensor::empty({4}, DType::kF32), got_large = Tensor::empty({64}, DType::kF32);
        Tensor sum = Tensor::empty({4}, DType::kF32);
        volatile std::uint64_t busy = 0;
        for (int i = 0; i < 2000; ++i) {
          // Skews the ranks: one is late by up to about 100 us, every third round the other.
          if ((i % 3 == 0) == (c.rank() == 0)) {
            for (int k = 0; k < 30000 * (i % 5); ++k) busy = busy + static_cast<std::uint64_t>(k);
          }
          c.sendrecv(small, peer, got_small, peer, 1);  // copied into a slot: its flag
          c.sendrecv(large, peer, got_large, peer, 2);  // lent: the slot freed after the read
          sum.fill(static_cast<float>(c.rank() + i));
          c.all_reduce(sum);  // one-shot: the group's flags
          ASSERT_EQ(sum.to_floats().front(), static_cast<float>(1 + 2 * i)) << "round " << i;
        }
        EXPECT_EQ(got_large.to_floats().back(), 2.0f);
      });
  EXPECT_EQ(world.lost_wakeups(), 0);
}

}  // namespace
}  // namespace mixpar
