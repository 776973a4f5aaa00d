// step_model_flops against chapter 8's grid_flops_per_step (the numerator of the MFU train_gpt
// prints) on layouts of every kind, and the MFU of a worked example.
#include "ch08_model_flops/model_flops.h"

#include <gtest/gtest.h>

#include "ch08_full_3d/model_flops.h"
#include "ch08_full_3d/trainer_config.h"

namespace mixpar::exercises {
namespace {

double reference(const FlopsLayout& l) {
  ch08::TrainerConfig c;
  c.model.n_layer = l.n_layer;
  c.model.n_embd = l.n_embd;
  c.model.n_head = 1;
  c.model.vocab_size = l.vocab;
  c.seq = l.seq;
  c.batch = l.batch;
  c.grad_accum = l.grad_accum;
  c.dp = l.dp;
  c.tp = l.tp;
  return ch08::grid_flops_per_step(c);
}

TEST(ModelFlops, Gpt2SmallIsAbout6NPerToken) {
  // GPT-2 124M, one sequence of 1024 tokens: 6 x (85M block weights + 38.6M head) + 6 L C T.
  const FlopsLayout l{.n_layer = 12, .n_embd = 768, .vocab = 50257, .seq = 1024, .batch = 1};
  const double per_token = 6.0 * (12.0 * 12 * 768 * 768 + 50257.0 * 768) + 6.0 * 12 * 768 * 1024;
  EXPECT_DOUBLE_EQ(step_model_flops(l), per_token * 1024);
}

TEST(ModelFlops, TensorParallelismPadsTheVocabulary) {
  FlopsLayout l{.n_layer = 2, .n_embd = 64, .vocab = 61, .seq = 16, .batch = 4, .tp = 4};
  EXPECT_DOUBLE_EQ(step_model_flops(l), reference(l));
  l.tp = 1;
  EXPECT_LT(step_model_flops(l), reference({.n_layer = 2, .n_embd = 64, .vocab = 61, .seq = 16,
                                            .batch = 4, .tp = 4}));
}

TEST(ModelFlops, EqualsChapterEightsCountOnEveryLayout) {
  for (int dp : {1, 2, 3}) {
    for (int tp : {1, 2, 4}) {
      for (std::int64_t accum : {1, 4}) {
        for (std::int64_t vocab : {256, 257, 50257}) {
          const FlopsLayout l{.n_layer = 3, .n_embd = 128, .vocab = vocab, .seq = 64,
                              .batch = 8, .grad_accum = accum, .dp = dp, .tp = tp};
          EXPECT_DOUBLE_EQ(step_model_flops(l), reference(l))
              << "dp " << dp << " tp " << tp << " accum " << accum << " vocab " << vocab;
        }
      }
    }
  }
}

TEST(ModelFlops, MfuIsTheShareOfThePeak) {
  EXPECT_DOUBLE_EQ(mfu(6e12, 2.0, 1e13), 0.3);
  const FlopsLayout l{.n_layer = 2, .n_embd = 128, .vocab = 256, .seq = 64, .batch = 32};
  const double flops = step_model_flops(l);
  EXPECT_DOUBLE_EQ(mfu(flops, 0.5, 1e12), flops / 0.5 / 1e12);
}

}  // namespace
}  // namespace mixpar::exercises
