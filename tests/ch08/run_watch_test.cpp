// The silent killers watched at run time (run_watch.h): a repeated data position within an
// epoch, a loss spike against the running median, the accumulation warning's numbers, and a
// non-finite loss without a scaler, which halts before the optimizer steps naming the first
// layer whose output is not finite.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "ch08_test_util.h"
#include "run_watch.h"
#include "trainer.h"

namespace mixpar::ch08 {
namespace {

StepStats step(std::int64_t n, double loss, std::int64_t position, std::int64_t epoch = 0) {
  StepStats s;
  s.step = n;
  s.loss = loss;
  s.data_position = position;
  s.epoch = epoch;
  return s;
}

TEST(RunWatch, ARepeatedDataPositionWithinAnEpochIsNamedWithBothSteps) {
  RunWatch w;
  EXPECT_TRUE(w.observe(step(1, 2.0, 0)).empty());
  EXPECT_TRUE(w.observe(step(2, 2.0, 512)).empty());
  EXPECT_TRUE(w.observe(step(3, 2.0, 0, /*epoch=*/1)).empty());  // a new epoch may reread it
  const auto warn = w.observe(step(4, 2.0, 512));
  ASSERT_EQ(warn.size(), 1u);
  EXPECT_NE(warn[0].find("step 4 reads data position 512 again within epoch 0 (first read at "
                         "step 2)"),
            std::string::npos)
      << warn[0];
}

TEST(RunWatch, ALossAboveKTimesTheRunningMedianIsASpikeWithItsDataPosition) {
  WatchConfig cfg;
  cfg.spike_factor = 2.0;
  cfg.min_history = 5;
  RunWatch w(cfg);
  for (int i = 1; i <= 5; ++i) EXPECT_TRUE(w.observe(step(i, 1.0 + 0.01 * i, 100 * i)).empty());
  EXPECT_TRUE(w.observe(step(6, 2.0, 600)).empty());  // 2.0 < 2 x median 1.03
  const auto warn = w.observe(step(7, 2.5, 700));
  ASSERT_EQ(warn.size(), 1u);
  EXPECT_NE(warn[0].find("loss spike at step 7"), std::string::npos) << warn[0];
  EXPECT_NE(warn[0].find("data position 700, epoch 0"), std::string::npos) << warn[0];
  EXPECT_EQ(w.spikes(), 1);
}

TEST(RunWatch, AccumulationWarningGivesTheBatchesAndTheScaledRates) {
  TrainerConfig c = test::tiny_config();
  EXPECT_EQ(effective_batch_warning(c), "");
  c.grad_accum = 4;
  c.dp = 2;
  c.schedule.lr = 1e-3;
  const std::string w = effective_batch_warning(c);
  EXPECT_NE(w.find("global batch 16 sequences, 4 x the 4 of --batch x dp, at --lr 0.001"),
            std::string::npos)
      << w;
  EXPECT_NE(w.find("0.002 (square-root rule) or 0.004 (linear rule)"), std::string::npos) << w;
}

TEST(RunWatch, ANonFiniteLossWithoutAScalerHaltsNamingTheFirstNonFiniteLayer) {
  TrainerConfig c = test::tiny_config();  // fp32, 2 blocks: no scaler to skip the step
  c.threads = 1;
  Trainer t(c, test::random_data(4096));
  t.train_step();
  Tensor w = t.model().registry().at("h.1.mlp.c_fc.weight").param;
  w.data_as<float>()[0] = std::numeric_limits<float>::infinity();
  const float first = t.model().param("wte.weight").data_as<float>()[0];
  try {
    t.train_step();
    FAIL() << "a NaN loss in fp32 must halt";
  } catch (const RunHalted& e) {  // exit code 3 in train_gpt: a halt, not an internal error
    const std::string msg = e.what();
    EXPECT_NE(msg.find("step 2: the loss is"), std::string::npos) << msg;
    EXPECT_NE(msg.find("first output that is not finite is block 1 (h.1)'s"), std::string::npos)
        << msg;
  }
  // Halted before the optimizer: the weights are those of step 1.
  EXPECT_EQ(t.model().param("wte.weight").data_as<float>()[0], first);
  EXPECT_EQ(t.step(), 1);
}

}  // namespace
}  // namespace mixpar::ch08
