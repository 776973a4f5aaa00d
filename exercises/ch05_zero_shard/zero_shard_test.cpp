// zero_shard against chapter 5's ZeroBucket (what ZeroStage1 reduce-scatters and steps), and
// the partition's invariants: every real element owned exactly once, in rank order.
#include "ch05_zero_shard/zero_shard.h"

#include <gtest/gtest.h>

#include "ch05_zero/zero_partition.h"

namespace mixpar::exercises {
namespace {

TEST(ZeroShard, PadsToAMultipleOfDpTimesAlign) {
  EXPECT_EQ(zero_shard(0, 10, 4, 1, 0).padded, 12);
  EXPECT_EQ(zero_shard(0, 10, 4, 1, 0).shard, 3);
  EXPECT_EQ(zero_shard(0, 10, 4, 4, 0).padded, 16);
  EXPECT_EQ(zero_shard(0, 12, 4, 1, 0).padded, 12);
}

TEST(ZeroShard, TheLastRankOwnsTheRemainder) {
  const ZeroShard z = zero_shard(100, 10, 4, 1, 3);
  EXPECT_EQ(z.owned_begin, 109);
  EXPECT_EQ(z.owned_count, 1);
}

TEST(ZeroShard, ARankMayOwnPaddingOnly) {
  const ZeroShard z = zero_shard(0, 3, 8, 1, 5);
  EXPECT_EQ(z.owned_count, 0);
  EXPECT_EQ(z.owned_begin, 3);
}

TEST(ZeroShard, EqualsChapterFivesBucketAndCoversEveryElementOnce) {
  for (int dp : {1, 2, 3, 4, 8}) {
    for (std::int64_t align : {1, 4}) {
      for (std::int64_t count : {1, 3, 7, 64, 1000}) {
        std::int64_t next = 40;
        for (int r = 0; r < dp; ++r) {
          const ZeroShard z = zero_shard(40, count, dp, align, r);
          const ch05::ZeroBucket ref{.begin = 40, .count = count, .padded = z.padded,
                                     .shard = z.padded / dp};
          SCOPED_TRACE(testing::Message() << "dp " << dp << ", align " << align << ", count "
                                          << count << ", rank " << r);
          EXPECT_EQ(z.shard, ref.shard);
          EXPECT_EQ(z.owned_begin, ref.owned_begin(r));
          EXPECT_EQ(z.owned_count, ref.owned_count(r));
          EXPECT_EQ(z.owned_begin, next);
          next += z.owned_count;
        }
        EXPECT_EQ(next, 40 + count);
        // One wrong case is enough to read: stop there instead of printing all 50.
        if (HasFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace mixpar::exercises
