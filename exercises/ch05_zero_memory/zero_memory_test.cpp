// zero_model_states against chapter 3's memory calculator (mem::model_states, what mixpar-mem
// --zero-stage prints and chapter 5's demo sets beside its measured ledger), and the ZeRO
// paper's worked example.
#include "ch05_zero_memory/zero_memory.h"

#include <gtest/gtest.h>

#include "ch03_master_weights/memory_calculator.h"

namespace mixpar::exercises {
namespace {

void expect_calculator(std::int64_t n, int stage, std::int64_t dp) {
  const ZeroBytes got = zero_model_states(n, stage, dp);
  const mem::ModelStates want = mem::model_states(n, mem::Precision::kBf16, mem::Optimizer::kAdamW,
                                                  stage, dp);
  SCOPED_TRACE(testing::Message() << n << " parameters, stage " << stage << ", dp " << dp);
  EXPECT_EQ(got.parameters, want.parameters);
  EXPECT_EQ(got.gradients, want.gradients);
  EXPECT_EQ(got.master_params, want.master_params);
  EXPECT_EQ(got.optimizer_state, want.optimizer_state);
}

TEST(ZeroMemory, StageZeroIsSixteenBytesPerParameter) {
  EXPECT_EQ(zero_model_states(1000, 0, 8).total(), 16000);
  expect_calculator(1000, 0, 8);
}

TEST(ZeroMemory, ThePapersSevenAndAHalfBillionOnSixtyFourRanks) {
  // Rajbhandari et al. 2020, Figure 1: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per device.
  const std::int64_t psi = 7'500'000'000;
  EXPECT_EQ(zero_model_states(psi, 0, 64).total(), 120'000'000'000);
  EXPECT_NEAR(static_cast<double>(zero_model_states(psi, 1, 64).total()), 31.4e9, 0.1e9);
  EXPECT_NEAR(static_cast<double>(zero_model_states(psi, 2, 64).total()), 16.6e9, 0.1e9);
  EXPECT_NEAR(static_cast<double>(zero_model_states(psi, 3, 64).total()), 1.9e9, 0.1e9);
}

TEST(ZeroMemory, AShardRoundsUp) {
  EXPECT_EQ(zero_model_states(10, 3, 4).parameters, 2 * 3);
  expect_calculator(10, 3, 4);
}

TEST(ZeroMemory, EqualsTheCalculatorForEveryStage) {
  for (std::int64_t n : {1, 7, 1000, 124439808}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (std::int64_t dp : {1, 2, 3, 8, 64}) expect_calculator(n, stage, dp);
    }
  }
}

}  // namespace
}  // namespace mixpar::exercises
