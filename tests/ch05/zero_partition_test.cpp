// The flat partition: every real element has exactly one owner, each bucket is padded to a
// multiple of dp and split evenly, a parameter may straddle two owners, and a rank whose share
// of a bucket is padding only owns nothing there.
#include <gtest/gtest.h>

#include <vector>

#include "ch05_zero/zero_partition.h"
#include "model/gpt_params.h"

namespace mixpar::ch05 {
namespace {

ParamRegistry gpt_registry() {
  ParamRegistry r = make_gpt2_registry(GptConfig{2, 2, 16, 8, 256});
  r.allocate(DType::kF32);
  return r;
}

TEST(ZeroPartition, EveryElementHasExactlyOneOwner) {
  const ParamRegistry reg = gpt_registry();
  for (int dp : {1, 2, 3, 4, 7}) {
    std::vector<int> owners(static_cast<std::size_t>(reg.numel()), 0);
    std::int64_t owned = 0;
    for (int r = 0; r < dp; ++r) {
      const ZeroPartition p(reg.entries(), DType::kF32, 4096, dp, r);
      for (const ShardPiece& piece : p.pieces()) {
        for (std::int64_t i = 0; i < piece.count; ++i) ++owners[std::size_t(piece.flat + i)];
      }
      owned += p.owned_elements(r);
      EXPECT_EQ(p.real_elements(), reg.numel());
      for (const ZeroBucket& b : p.buckets()) {
        EXPECT_EQ(b.padded % dp, 0);
        EXPECT_LT(b.padded - b.count, dp);  // padding below one element per rank
        EXPECT_EQ(b.shard * dp, b.padded);
      }
    }
    EXPECT_EQ(owned, reg.numel());
    for (int o : owners) ASSERT_EQ(o, 1) << "dp " << dp;
  }
}

TEST(ZeroPartition, AParameterMayStraddleTwoOwners) {
  const ParamRegistry reg = gpt_registry();
  const ZeroPartition p0(reg.entries(), DType::kF32, std::size_t{1} << 30, 2, 0);
  const ZeroPartition p1(reg.entries(), DType::kF32, std::size_t{1} << 30, 2, 1);
  ASSERT_EQ(p0.buckets().size(), 1u);
  // The entry holding the shard boundary appears in both ranks' pieces.
  const ShardPiece& last0 = p0.pieces().back();
  const ShardPiece& first1 = p1.pieces().front();
  EXPECT_EQ(last0.entry, first1.entry);
  EXPECT_EQ(last0.entry_offset + last0.count, first1.entry_offset);
  EXPECT_EQ(p0.runs().size(), 2u);
}

TEST(ZeroPartition, ARankWithMoreRanksThanElementsOwnsOnlyPadding) {
  ParamRegistry reg;
  reg.add("tiny", {3}, false, ParamInit::kZeros);
  reg.allocate(DType::kF32);
  const int dp = 8;
  std::int64_t owned = 0;
  for (int r = 0; r < dp; ++r) {
    const ZeroPartition p(reg.entries(), DType::kF32, 4096, dp, r);
    ASSERT_EQ(p.buckets().size(), 1u);
    EXPECT_EQ(p.buckets()[0].padded, 8);
    EXPECT_EQ(p.owned_elements(r), r < 3 ? 1 : 0);
    EXPECT_EQ(p.pieces().empty(), r >= 3);
    owned += p.owned_elements(r);
  }
  EXPECT_EQ(owned, 3);
}

}  // namespace
}  // namespace mixpar::ch05
