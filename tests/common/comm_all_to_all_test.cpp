// all_to_all with variable counts on the local backend (and all_gather's in-place path): every block lands where its
// definition says (zero counts included, as expert parallelism's empty experts make them),
// the traffic is the other ranks' blocks, and counts that disagree with the sender's or do
// not add up are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

#include "comm/local_backend.h"
#include "comm/local_oneshot.h"
#include "comm_local_test_util.h"

namespace mixpar {
namespace {

using namespace comm_testing;

// Elements rank p sends rank q: 0 for some pairs (an expert with no tokens), up to 3.
std::int64_t count_of(int p, int q) { return (p * 3 + q * 5 + 1) % 4; }
float value_of(int p, int q, std::int64_t i) { return value_at(p, q * 1000 + i, 40); }

struct Exchange {
  std::vector<std::int64_t> send_counts, recv_counts;
  Tensor in, want;
};
// count(p, q): the elements rank p sends rank q.
template <class Count = std::int64_t (*)(int, int)>
Exchange exchange_of(int r, int n, Count count = count_of) {
  Exchange e;
  std::vector<float> in, want;
  for (int q = 0; q < n; ++q) {
    e.send_counts.push_back(count(r, q));
    e.recv_counts.push_back(count(q, r));
    for (std::int64_t i = 0; i < count(r, q); ++i) in.push_back(value_of(r, q, i));
    for (std::int64_t i = 0; i < count(q, r); ++i) want.push_back(value_of(q, r, i));
  }
  e.in = Tensor::from_floats(in, {std::int64_t(in.size())});
  e.want = Tensor::from_floats(want, {std::int64_t(want.size())});
  return e;
}

TEST(CommAllToAll, EveryBlockLandsInRankOrderWithZeroCountsAndItsTraffic) {
  for (int n : {1, 2, 3, 4}) {
    run_local(n, [n](Communicator& c) {
      const Exchange e = exchange_of(c.rank(), n);
      Tensor out = Tensor::empty(e.want.shape(), DType::kF32);
      c.all_to_all(e.in, e.send_counts, out, e.recv_counts);
      EXPECT_TRUE(same_bits(out, e.want)) << "rank " << c.rank() << " of " << n;
      std::int64_t sent = 0, received = 0;
      for (int q = 0; q < n; ++q) {
        if (q == c.rank()) continue;
        sent += count_of(c.rank(), q);
        received += count_of(q, c.rank());
      }
      const TrafficTotals t = c.traffic().totals("all_to_all");
      EXPECT_EQ(t.calls, 1);
      EXPECT_EQ(t.bytes_sent, std::size_t(sent) * 4);
      EXPECT_EQ(t.bytes_received, std::size_t(received) * 4);
    });
  }
}

TEST(CommAllToAll, ACountThatDisagreesWithTheSendersIsACommError) {
  EXPECT_THROW(run_local(2, [](Communicator& c) {
                 const Exchange e = exchange_of(c.rank(), 2);
                 std::vector<std::int64_t> wrong = e.recv_counts;
                 if (c.rank() == 1) wrong[0] += 1;
                 Tensor out = Tensor::empty({wrong[0] + wrong[1]}, DType::kF32);
                 c.all_to_all(e.in, e.send_counts, out, wrong);
               }),
               CommError);
}

TEST(CommAllToAll, CountsThatDoNotMatchTheTensorsAreRefusedBeforeAnyExchange) {
  run_local(2, [](Communicator& c) {
    const Tensor in = Tensor::zeros({3}, DType::kF32);
    Tensor out = Tensor::zeros({3}, DType::kF32);
    const std::vector<std::int64_t> two = {1, 1}, one = {3};
    EXPECT_THROW(c.all_to_all(in, two, out, two), std::invalid_argument);  // sums 2, not 3
    EXPECT_THROW(c.all_to_all(in, one, out, one), std::invalid_argument);  // one count, 2 ranks
  });
}

// The one-shot path (every rank's counts and input staged, each rank copying its blocks
// out) and the rendezvous give the same bytes; so does a call in which one rank's input is
// too large to stage while the others' are small (the ranks vote, then all take the
// rendezvous). Back to back, the sizes alternating, so the two staging buffers are reused
// and the vote goes both ways; the values change with the call, so a stale input shows.
TEST(CommAllToAll, OneShotAndRendezvousGiveTheSameBlocksBackToBackAtMixedSizes) {
  const auto large = std::int64_t(local::kOneShotMaxBytes / 4);  // elements: over the limit
  for (int n : {1, 2, 3, 4}) {
    for (const bool rendezvous : {false, true}) {
      LocalOptions opts;
      if (rendezvous) opts.oneshot_max_bytes = 0;
      run_local(
          n,
          [&](Communicator& c) {
            for (int k = 0; k < 60; ++k) {
              // k % 3 == 1: rank (k % n) sends `large` elements to the next rank, the rest a
              // few; k % 3 == 2: rank (k % n) receives that much.
              const auto count = [&](int p, int q) -> std::int64_t {
                if (k % 3 == 1 && p == k % n && q == (p + 1) % n) return large;
                if (k % 3 == 2 && q == k % n && p == (q + 1) % n) return large;
                return count_of(p, q) + k % 5;
              };
              const Exchange e = exchange_of(c.rank(), n, count);
              Tensor out = Tensor::empty(e.want.shape(), DType::kF32);
              c.all_to_all(e.in, e.send_counts, out, e.recv_counts);
              ASSERT_TRUE(same_bits(out, e.want))
                  << "rank " << c.rank() << " of " << n << ", call " << k
                  << (rendezvous ? ", rendezvous only" : "");
            }
            EXPECT_EQ(c.traffic().totals("all_to_all").calls, 60);
          },
          opts);
    }
  }
}

// On 2 and 3 ranks the one-shot path's counts also travel in the flag's cache line, and a
// rank whose own input spans more than that line reads them there. Inputs on either side of
// that line, differing by rank and from call to call (both parities of the flag), uneven
// counts and zeros: every block lands where the sender's counts say, on 2, 3 and 4 ranks
// (4 ranks' counts do not fit the line).
TEST(CommAllToAll, CountsInTheFlagsLineGiveEveryBlockWhateverEachRanksSize) {
  for (int n : {2, 3, 4}) {
    run_local(n, [n](Communicator& c) {
      for (int k = 0; k < 40; ++k) {
        const auto count = [k, n](int p, int q) -> std::int64_t {
          const std::int64_t base = (p * 7 + q * 3 + k) % 11;
          return p == k % n ? base * 9 : base;  // one rank's input spans several lines
        };
        const Exchange e = exchange_of(c.rank(), n, count);
        Tensor out = Tensor::empty(e.want.shape(), DType::kF32);
        c.all_to_all(e.in, e.send_counts, out, e.recv_counts);
        ASSERT_TRUE(same_bits(out, e.want)) << "rank " << c.rank() << " of " << n << ", call "
                                            << k;
      }
    });
  }
}

TEST(LocalOneShotGroup, BytesPublishedInTheFlagsLineArriveWithItAndNoMoreThanItHolds) {
  local::OneShotGroup g(2, 64);
  const std::int64_t counts[2] = {123456789, -5};
  for (std::int64_t seq = 1; seq <= 2; ++seq) {
    local::CallDesc d;
    d.count = seq;
    g.publish(0, seq, d, false, std::as_bytes(std::span(counts)));
    ASSERT_TRUE(g.published(0, seq));
    std::int64_t got[2];
    std::memcpy(got, g.in_line(0, seq), sizeof got);
    EXPECT_EQ(got[0], counts[0]) << "call " << seq;
    EXPECT_EQ(got[1], counts[1]) << "call " << seq;
  }
  const std::vector<std::byte> too_long(local::OneShotGroup::kInLineBytes + 1);
  EXPECT_THROW(g.publish(1, 1, local::CallDesc{}, false, too_long), std::logic_error);
}

// Every rank's staging buffer starts on a cache line, in both parities, whatever the
// capacity: a small input staged across a line boundary costs its reader a second trip
// between the cores. The staged bytes stay each parity's own.
TEST(LocalOneShotGroup, StagingBuffersStartOnACacheLineInBothParities) {
  for (std::size_t capacity : {std::size_t{1}, std::size_t{100}, std::size_t{32768}}) {
    local::OneShotGroup g(3, capacity);
    for (int r = 0; r < 3; ++r) {
      for (std::int64_t seq = 1; seq <= 2; ++seq) {
        std::byte* stage = g.stage(r, seq);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(stage) % 64, 0u)
            << "capacity " << capacity << ", rank " << r << ", parity " << seq % 2;
        std::memset(stage, static_cast<int>(10 * r + seq), capacity);
        EXPECT_EQ(g.data(r, seq), stage);
      }
      for (std::int64_t seq = 1; seq <= 2; ++seq) {
        EXPECT_EQ(g.data(r, seq)[capacity - 1], std::byte(10 * r + seq)) << "capacity " << capacity;
      }
    }
  }
}

TEST(CommAllToAll, OneShotAgainstAnotherCollectiveIsAMismatchNamingBoth) {
  const CommFailure f = run_expecting_comm_error(2, [](Communicator& c) {
    if (c.rank() == 0) {
      const Exchange e = exchange_of(c.rank(), 2);
      Tensor out = Tensor::empty(e.want.shape(), DType::kF32);
      c.all_to_all(e.in, e.send_counts, out, e.recv_counts);
    } else {
      Tensor t = Tensor::zeros({4}, DType::kF32);
      c.all_reduce(t);
    }
  });
  ASSERT_FALSE(f.thrown.empty());
  EXPECT_CONTAINS(f.thrown, "collective mismatch at call #1 of world");
  EXPECT_CONTAINS(f.thrown, "rank 0 all_to_all(f32)");
  EXPECT_CONTAINS(f.thrown, "rank 1 all_reduce(4 x f32, sum)");
}

// A rank whose input is too large to stage publishes it in place and waits for the others'
// flags; where even its counts and address fit nowhere (4 ranks, 32 bytes of staging), it
// votes against the one-shot path and does not wait. Either way, a peer that took the
// rendezvous for that call number instead (a large all-reduce) is a mismatch, whichever of
// the two comes first.
TEST(CommAllToAll, AVoteAgainstTheOneShotPathAgainstARendezvousIsAMismatch) {
  struct Case {
    int n;
    std::size_t oneshot_max;
  };
  for (const Case k : {Case{2, local::kOneShotMaxBytes}, Case{4, 32}}) {
  const auto large = std::int64_t(k.oneshot_max / 4) + 1;
  LocalOptions opts;
  opts.oneshot_max_bytes = k.oneshot_max;
  for (int first : {0, 1}) {
    const CommFailure f = run_expecting_comm_error(k.n, [&](Communicator& c) {
      // A message (which takes no call number) makes `first`'s call tend to come first.
      Tensor token = Tensor::zeros({1}, DType::kF32);
      if (c.rank() == first) c.send(token, 1 - first);
      else if (c.rank() == 1 - first) c.recv(token, first);
      const int me = c.rank();
      if (me == 0) {
        const Exchange e = exchange_of(me, k.n, [&](int, int) { return large; });
        Tensor out = Tensor::empty(e.want.shape(), DType::kF32);
        c.all_to_all(e.in, e.send_counts, out, e.recv_counts);
      } else {
        Tensor t = Tensor::zeros({large}, DType::kF32);
        c.all_reduce(t);
      }
    }, opts);
    ASSERT_FALSE(f.thrown.empty()) << k.n << " ranks, " << first;
    EXPECT_CONTAINS(f.thrown, "collective mismatch at call #1 of world");
    EXPECT_CONTAINS(f.thrown, "rank 0 all_to_all(f32)");
    EXPECT_CONTAINS(f.thrown, "all_reduce(" + std::to_string(large) + " x f32, sum)");
  }
  }
}

// Above the staging buffer's size the blocks are copied straight out of the senders' inputs
// (OneShotGroup::publish_done): the address travels in the flag's line on 2 ranks and in the
// staging buffer on 3 and 4. Calls where one rank's input is large and the others' small mix
// staged and in-place inputs in one call. Every block lands where the counts say, and each
// call with an in-place input counts once per rank.
TEST(CommAllToAll, InputsTooLargeToStageAreReadWhereTheyLie) {
  const auto large = std::int64_t(local::kOneShotMaxBytes / 4);  // with its counts: too large
  for (int n : {2, 3, 4}) {
    const std::uint64_t before = local::in_place_calls();
    run_local(n, [&](Communicator& c) {
      for (int k = 0; k < 30; ++k) {
        // k % 3 == 0: every rank sends `large` to each; 1: only rank k % n; 2: small.
        const auto count = [&](int p, int q) -> std::int64_t {
          if (k % 3 == 0 || (k % 3 == 1 && p == k % n)) return large + q + k;
          return count_of(p, q) + k % 5;
        };
        const Exchange e = exchange_of(c.rank(), n, count);
        Tensor out = Tensor::empty(e.want.shape(), DType::kF32);
        c.all_to_all(e.in, e.send_counts, out, e.recv_counts);
        ASSERT_TRUE(same_bits(out, e.want)) << "rank " << c.rank() << " of " << n << ", call "
                                            << k;
      }
    });
    EXPECT_EQ(local::in_place_calls() - before, std::uint64_t(20 * n)) << n << " ranks";
  }
}

// A rank that published its input in place leaves the call only once no peer will read it:
// here each rank overwrites its input the moment the call returns, and on 4 ranks sharing
// the cores a peer is often still copying then. Every block must still be the one sent.
TEST(CommAllToAll, AnInPlaceInputIsNotLeftWhileAPeerMayStillReadIt) {
  const int n = 4;
  const auto large = std::int64_t(local::kOneShotMaxBytes);  // elements: 4x the staging
  run_local(n, [&](Communicator& c) {
    for (int k = 0; k < 40; ++k) {
      const auto count = [&](int p, int q) -> std::int64_t { return large + p + q + k; };
      Exchange e = exchange_of(c.rank(), n, count);
      Tensor out = Tensor::empty(e.want.shape(), DType::kF32);
      c.all_to_all(e.in, e.send_counts, out, e.recv_counts);
      e.in.fill(-1.0f);  // what a peer still reading would copy
      ASSERT_TRUE(same_bits(out, e.want)) << "rank " << c.rank() << ", call " << k;
    }
  });
}

// An all-gather above the one-shot limit is read in place too (its address in the flag's
// line): each rank overwrites its input the moment the call returns, on 2, 3 and 4 ranks,
// and every block must still be the one sent, each call counted once per rank.
TEST(CommAllGather, AnInPlaceInputIsNotLeftWhileAPeerMayStillReadIt) {
  const auto count = std::int64_t(local::kOneShotMaxBytes / 4);  // past the limit on 2 ranks
  for (int n : {2, 3, 4}) {
    const std::uint64_t before = local::in_place_calls();
    run_local(n, [&](Communicator& c) {
      for (int k = 0; k < 30; ++k) {
        std::vector<float> mine(static_cast<std::size_t>(count));
        for (std::int64_t i = 0; i < count; ++i) mine[std::size_t(i)] = value_of(c.rank(), k, i);
        Tensor in = Tensor::from_floats(mine, {count});
        Tensor out = Tensor::empty({count * n}, DType::kF32);
        c.all_gather(in, out);
        in.fill(-1.0f);  // what a peer still reading would copy
        const std::vector<float> got = out.to_floats();
        for (int p = 0; p < n; ++p) {
          for (std::int64_t i = 0; i < count; i += 97) {
            ASSERT_EQ(got[std::size_t(p * count + i)], value_of(p, k, i))
                << "rank " << c.rank() << " of " << n << ", call " << k << ", block " << p;
          }
        }
      }
    });
    EXPECT_EQ(local::in_place_calls() - before, std::uint64_t(30 * n)) << n << " ranks";
  }
}

// An in-place all-gather against a staged call for the same call number (an all-reduce, or
// an all-gather of another size) is a mismatch naming both; the in-place rank, which waits for
// its readers on the way out, does not wait for the peer, which reads only staging buffers
// and raises no done flag.
TEST(CommAllGather, InPlaceAgainstAStagedCallIsAMismatchNotAWaitForItsReaders) {
  const auto count = std::int64_t(local::kOneShotMaxBytes / 4);  // in place on 2 ranks
  for (const bool other_is_all_gather : {false, true}) {
    const CommFailure f = run_expecting_comm_error(2, [&](Communicator& c) {
      if (c.rank() == 0) {
        Tensor in = Tensor::zeros({count}, DType::kF32);
        Tensor out = Tensor::zeros({2 * count}, DType::kF32);
        c.all_gather(in, out);
      } else if (other_is_all_gather) {
        Tensor in = Tensor::zeros({4}, DType::kF32);
        Tensor out = Tensor::zeros({8}, DType::kF32);
        c.all_gather(in, out);
      } else {
        Tensor t = Tensor::zeros({4}, DType::kF32);
        c.all_reduce(t);
      }
    });
    ASSERT_FALSE(f.thrown.empty()) << other_is_all_gather;
    EXPECT_CONTAINS(f.thrown, "collective mismatch at call #1 of world");
    EXPECT_CONTAINS(f.thrown, "rank 0 all_gather(" + std::to_string(count) + " x f32 per rank)");
    EXPECT_CONTAINS(f.thrown, other_is_all_gather ? "rank 1 all_gather(4 x f32 per rank)"
                                                  : "rank 1 all_reduce(4 x f32, sum)");
  }
}

// A rank that fails inside an in-place call (its expected count disagrees with the sender's)
// raises its done flag on the way out, so the rank whose input it read, and which waits for
// its readers, leaves too: the failure is reported, nothing waits for ever. The same when a
// rank never calls: the others, waiting for its flag, end in the deadlock report.
TEST(CommAllToAll, AFailureInAnInPlaceCallLeavesNoRankWaitingForItsReaders) {
  const auto large = std::int64_t(local::kOneShotMaxBytes / 4) + 8;
  for (int n : {2, 3}) {
    EXPECT_THROW(run_local(n, [&](Communicator& c) {
                   const Exchange e = exchange_of(c.rank(), n, [&](int, int) { return large; });
                   std::vector<std::int64_t> wrong = e.recv_counts;
                   if (c.rank() == 1) wrong[0] -= 1;
                   std::int64_t total = 0;
                   for (std::int64_t w : wrong) total += w;
                   Tensor out = Tensor::empty({total}, DType::kF32);
                   c.all_to_all(e.in, e.send_counts, out, wrong);
                 }),
                 CommError) << n << " ranks";
  }
  const CommFailure f = run_expecting_comm_error(3, [&](Communicator& c) {
    if (c.rank() == 2) return;
    const Exchange e = exchange_of(c.rank(), 3, [&](int, int) { return large; });
    Tensor out = Tensor::empty(e.want.shape(), DType::kF32);
    c.all_to_all(e.in, e.send_counts, out, e.recv_counts);
  });
  EXPECT_CONTAINS(f.thrown, "deadlock");
  EXPECT_CONTAINS(f.thrown, "waits in all_to_all(f32) (call #1 of world) for rank 2");
}

TEST(CommAllToAll, WaitingForARankThatNeverCallsIsADeadlockNamingIt) {
  const CommFailure f = run_expecting_comm_error(3, [](Communicator& c) {
    if (c.rank() == 2) return;
    const Exchange e = exchange_of(c.rank(), 3);
    Tensor out = Tensor::empty(e.want.shape(), DType::kF32);
    c.all_to_all(e.in, e.send_counts, out, e.recv_counts);
  });
  ASSERT_FALSE(f.thrown.empty());
  EXPECT_CONTAINS(f.thrown, "deadlock");
  EXPECT_CONTAINS(f.thrown, "waits in all_to_all(f32) (call #1 of world) for rank 2");
}

}  // namespace
}  // namespace mixpar
