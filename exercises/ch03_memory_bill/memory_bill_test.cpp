// gpt2_parameters and model_state_bytes against chapter 3's memory calculator (what mixpar-mem
// prints) and the model's own count (GptConfig::num_parameters, the tensors train_gpt builds).
#include "ch03_memory_bill/memory_bill.h"

#include <gtest/gtest.h>

#include "ch03_master_weights/memory_calculator.h"
#include "model/gpt_params.h"

namespace mixpar::exercises {
namespace {

TEST(MemoryBill, Gpt2SmallHas124439808Parameters) {
  EXPECT_EQ(gpt2_parameters(12, 768, 50257, 1024), 124439808);
}

TEST(MemoryBill, ParametersEqualTheCalculatorAndTheModel) {
  for (std::int64_t L : {1, 2, 12, 48}) {
    for (std::int64_t C : {8, 64, 768, 1600}) {
      for (std::int64_t V : {256, 50257}) {
        const mem::GptShape shape{.n_layer = L, .n_embd = C, .n_head = 1, .vocab_size = V,
                                  .seq = 128, .micro_batch = 1, .n_positions = 1024};
        const GptConfig model{.n_layer = L, .n_head = 1, .n_embd = C, .n_positions = 1024,
                              .vocab_size = V};
        ASSERT_EQ(gpt2_parameters(L, C, V, 1024), mem::gpt2_param_count(shape))
            << "L " << L << " C " << C << " V " << V;
        ASSERT_EQ(gpt2_parameters(L, C, V, 1024), model.num_parameters());
      }
    }
  }
}

TEST(MemoryBill, SixteenBytesPerParameterForAdamEitherWay) {
  EXPECT_EQ(model_state_bytes(1000, /*mixed=*/true, /*adamw=*/true), 16000);
  EXPECT_EQ(model_state_bytes(1000, /*mixed=*/false, /*adamw=*/true), 16000);
}

TEST(MemoryBill, StateBytesEqualTheCalculator) {
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{124439808}, std::int64_t{7000000000}}) {
    for (mem::Precision p : {mem::Precision::kFp32, mem::Precision::kFp16, mem::Precision::kBf16}) {
      for (mem::Optimizer o : {mem::Optimizer::kAdamW, mem::Optimizer::kSgdMomentum}) {
        EXPECT_EQ(model_state_bytes(n, p != mem::Precision::kFp32, o == mem::Optimizer::kAdamW),
                  mem::model_states(n, p, o).total())
            << n << " parameters, " << mem::name(p) << ", " << mem::name(o);
      }
    }
  }
}

}  // namespace
}  // namespace mixpar::exercises
