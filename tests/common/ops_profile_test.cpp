// OpProfile: what bench_gpt_step --profile prints is each op's own time, counted once.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/matmul.h"
#include "ops/op_profile.h"
#include "tensor/tensor.h"

namespace mixpar::ops {
namespace {

// Profiling on for one scope, from an empty table; off again afterwards.
struct Profiling {
  Profiling() {
    OpProfile::reset();
    OpProfile::enable(true);
  }
  ~Profiling() {
    OpProfile::enable(false);
    OpProfile::reset();
  }
};

const OpTime* row(const std::vector<OpTime>& rows, const std::string& name) {
  for (const OpTime& r : rows) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

TEST(OpProfile, OffCountsNothing) {
  OpProfile::reset();
  { const OpTimer t("outer"); }
  EXPECT_TRUE(OpProfile::snapshot().empty());
}

TEST(OpProfile, CountsOnlyTheOutermostTimerOfAThread) {
  const Profiling on;
  {
    const OpTimer outer("outer");
    for (int i = 0; i < 3; ++i) const OpTimer inner("inner");
  }
  { const OpTimer outer("outer"); }
  const auto rows = OpProfile::snapshot();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].name, "outer");
  EXPECT_EQ(rows[0].calls, 2);
  EXPECT_GE(rows[0].seconds, 0.0);
  EXPECT_EQ(row(rows, "inner"), nullptr);
}

TEST(OpProfile, AnInnerTimerCountsAgainOnceItsOuterOneClosed) {
  const Profiling on;
  { const OpTimer outer("outer"); }
  { const OpTimer inner("inner"); }
  const auto rows = OpProfile::snapshot();
  ASSERT_NE(row(rows, "inner"), nullptr);
  EXPECT_EQ(row(rows, "inner")->calls, 1);
}

TEST(OpProfile, TheGemmIsTimedAsMatmul) {
  Tensor a = Tensor::empty({4, 8}, DType::kF32), b = Tensor::empty({8, 2}, DType::kF32);
  a.fill(1.0f);
  b.fill(1.0f);
  Tensor c = Tensor::zeros({4, 2}, DType::kF32);
  const Profiling on;
  matmul(a, b, c);
  const auto rows = OpProfile::snapshot();
  ASSERT_NE(row(rows, "matmul"), nullptr);
  EXPECT_EQ(row(rows, "matmul")->calls, 1);
  EXPECT_EQ(c.data_as<float>()[0], 8.0f);
}

TEST(OpProfile, ResetEmptiesTheTable) {
  const Profiling on;
  { const OpTimer t("outer"); }
  OpProfile::reset();
  EXPECT_TRUE(OpProfile::snapshot().empty());
}

}  // namespace
}  // namespace mixpar::ops
