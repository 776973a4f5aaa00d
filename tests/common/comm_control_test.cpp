// The typed control messages of comm/control.h on the local backend (the MPI backend runs the
// same cases in tests/ch04/mpi): 64-bit values compared and gathered in all their bits,
// yes/no votes, and texts from one rank or from every rank.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "comm/control.h"
#include "comm/local_backend.h"

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
