// The typed control messages of comm/control.h and the control collectives under them on the
// local backend (the MPI backend runs the same cases in tests/ch04/mpi): 64-bit values compared
// and gathered in all their bits, yes/no votes, flags and texts from one rank or from every
// rank, each carried as bytes and charged as bytes.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "comm/control.h"
#include "comm/local_backend.h"
#include "comm_local_test_util.h"

namespace mixpar {
namespace {

constexpr std::uint64_t kValues[] = {0, 1, 0xffff, 0x10000, 0x0123456789abcdefull,
                                     std::uint64_t{1} << 63,
                                     std::numeric_limits<std::uint64_t>::max()};

TEST(ControlMessages, Gather64BitValuesArriveWithEveryBit) {
  run_local(3, [](Communicator& comm) {
    std::vector<std::uint64_t> mine;
    for (std::uint64_t v : kValues) mine.push_back(v ^ static_cast<std::uint64_t>(comm.rank()));
    const std::vector<std::uint64_t> all = gather_u64(comm, mine);
    ASSERT_EQ(all.size(), 3 * mine.size());
    for (int r = 0; r < 3; ++r) {
      for (std::size_t k = 0; k < mine.size(); ++k) {
        EXPECT_EQ(all[r * mine.size() + k], kValues[k] ^ static_cast<std::uint64_t>(r));
      }
    }
  });
}

// The configuration check used to compare 48 of a hash's 64 bits: a difference in bit 48 or
// above went unseen. Every bit counts now, the lowest and the highest alike.
TEST(ControlMessages, AllAgreeSeesADifferenceInAnyOfThe64Bits) {
  for (int bit : {0, 23, 24, 47, 48, 50, 63}) {
    for (int odd_rank : {0, 2}) {
      run_local(3, [&](Communicator& comm) {
        std::uint64_t v = 0x0123456789abcdefull;
        if (comm.rank() == odd_rank) v ^= std::uint64_t{1} << bit;
        EXPECT_FALSE(all_agree(comm, v)) << "bit " << bit;
      });
    }
  }
  run_local(3, [](Communicator& comm) {
    for (std::uint64_t v : kValues) EXPECT_TRUE(all_agree(comm, v));
  });
}

TEST(ControlMessages, AllTrueIsFalseWhenAnyRankSaysNo) {
  for (int no : {-1, 0, 1, 3}) {
    run_local(4, [&](Communicator& comm) {
      EXPECT_EQ(all_true(comm, comm.rank() != no), no < 0) << "rank " << no << " says no";
    });
  }
}

// The vote is a boolean collective: one all_reduce_or, charged as the ring's all-reduce of one
// byte, and no float all_reduce at all.
TEST(ControlMessages, AnyTrueIsOneByteOrOnEveryRankWhicheverRankSaysYes) {
  for (int yes : {-1, 0, 2, 4}) {
    run_local(5, [&](Communicator& comm) {
      EXPECT_EQ(any_true(comm, comm.rank() == yes), yes >= 0) << "rank " << yes << " says yes";
      const TrafficTotals t = comm.traffic().totals("all_reduce_or");
      const TrafficTotals want = all_reduce_traffic(1, std::size_t{1}, 5, comm.rank());
      EXPECT_EQ(t.calls, 1);
      EXPECT_EQ(t.bytes_sent, want.bytes_sent);
      EXPECT_EQ(t.bytes_received, want.bytes_received);
      EXPECT_EQ(comm.traffic().totals("all_reduce").calls, 0);
    });
  }
}

TEST(ControlMessages, BroadcastFlagCarriesTheRootsFlagAsOneByte) {
  run_local(3, [](Communicator& comm) {
    EXPECT_TRUE(broadcast_flag(comm, 1, comm.rank() == 1));
    EXPECT_FALSE(broadcast_flag(comm, 2, comm.rank() != 2));
    const TrafficTotals t = comm.traffic().totals("broadcast_bytes");
    EXPECT_EQ(t.calls, 2);
    EXPECT_EQ(t.bytes_sent + t.bytes_received, 2u) << "one byte each call, sent or received";
  });
}

// Every byte value, NUL and 0xff included, arrives as it was sent, and a text costs its length
// in bytes (plus the 8-byte length), not four bytes a character.
TEST(ControlMessages, BytesAndTextsTravelAsTheirOwnBytes) {
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(static_cast<char>(b));
  run_local(3, [&](Communicator& comm) {
    EXPECT_EQ(broadcast_text(comm, 2, comm.rank() == 2 ? every_byte : "ignored"), every_byte);
    const TrafficTotals t = comm.traffic().totals("broadcast_bytes");
    EXPECT_EQ(t.bytes_sent, comm.rank() == 2 ? 8u + 256u : 0u);
    EXPECT_EQ(t.bytes_received, comm.rank() == 2 ? 0u : 8u + 256u);
    EXPECT_EQ(comm.traffic().totals("broadcast").calls, 0);
  });
}

TEST(ControlCollectives, AllGatherBytesPutsEachRanksBlockInRankOrder) {
  run_local(4, [](Communicator& comm) {
    const std::byte mine[3] = {std::byte(comm.rank()), std::byte{0xff}, std::byte{0}};
    std::vector<std::byte> all(12);
    comm.all_gather_bytes(mine, all);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(all[3 * std::size_t(r)], std::byte(r));
      EXPECT_EQ(all[3 * std::size_t(r) + 1], std::byte{0xff});
      EXPECT_EQ(all[3 * std::size_t(r) + 2], std::byte{0});
    }
    EXPECT_EQ(comm.traffic().totals("all_gather_bytes").bytes_sent, 9u);  // (N-1)/N of 12
    std::vector<std::byte> wrong(5);
    EXPECT_THROW(comm.all_gather_bytes(mine, wrong), std::invalid_argument);
  });
}

// The local backend checks the control collectives as it checks the others: a different byte
// count, or another collective, is a CommError naming both ranks' calls.
TEST(ControlCollectives, MismatchedByteCountsOrCallsNameBothRanks) {
  using comm_testing::run_expecting_comm_error;
  const comm_testing::CommFailure f = run_expecting_comm_error(2, [](Communicator& c) {
    std::vector<std::byte> b(c.rank() == 0 ? 3 : 4);
    c.broadcast_bytes(b, 0);
  });
  EXPECT_CONTAINS(f.thrown, "rank 0 broadcast_bytes(3 bytes, root 0)");
  EXPECT_CONTAINS(f.thrown, "rank 1 broadcast_bytes(4 bytes, root 0)");
  const comm_testing::CommFailure g = run_expecting_comm_error(2, [](Communicator& c) {
    if (c.rank() == 0) c.all_reduce_or(true);
    else c.barrier();
  });
  EXPECT_CONTAINS(g.thrown, "rank 0 all_reduce_or(1 flag)");
  EXPECT_CONTAINS(g.thrown, "rank 1 barrier()");
}

TEST(ControlMessages, TextsArriveWholeInRankOrderAndLongOnesAreCut) {
  run_local(3, [](Communicator& comm) {
    const std::string mine = comm.rank() == 1 ? "" : "rank " + std::to_string(comm.rank()) + ": \xe2\x9c\x93 ok";
    const std::vector<std::string> all = gather_text(comm, mine);
    EXPECT_EQ(all, (std::vector<std::string>{"rank 0: \xe2\x9c\x93 ok", "", "rank 2: \xe2\x9c\x93 ok"}));
    const std::string long_text(kMaxControlText + 10, 'x');
    const std::string got = broadcast_text(comm, 2, comm.rank() == 2 ? long_text : "");
    EXPECT_EQ(got.size(), kMaxControlText);
    EXPECT_TRUE(got.ends_with("...")) << got.substr(got.size() - 8);
  });
}

TEST(ControlMessages, LowestRankWhereNamesTheFirstRankOrNone) {
  run_local(4, [](Communicator& comm) {
    EXPECT_EQ(lowest_rank_where(comm, comm.rank() >= 2), 2);
    EXPECT_EQ(lowest_rank_where(comm, false), -1);
  });
}

}  // namespace
}  // namespace mixpar
