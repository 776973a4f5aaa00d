// The trainer's step: loss falls on a fixed batch (fp32), weight decay touches only 2-D weights,
// the sequential order trains on exactly the loader's windows, and --init-from starts from a
// saved model's weights (into the FP32 masters of a 16-bit run, without rounding them).
#include "trainer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ch08_test_util.h"
#include "io/token_loader.h"
#include "model/gpt_hf.h"

namespace mixpar::ch08 {
namespace {

using test::bytes_of;
using test::random_data;
using test::tiny_config;

TEST(Trainer, Fp32LossFallsOnAFixedBatch) {
  TrainerConfig c = tiny_config();
  c.steps = 30;
  c.schedule = LrSchedule{LrScheduleKind::kConstant, 1e-2, 1e-2, 0, 30};
  // Exactly B*T + 1 tokens: one window, so every step sees the same batch.
  Trainer t(c, random_data(static_cast<std::size_t>(c.batch * c.seq + 1)));
  const double first = t.train_step().loss;
  double last = first;
  for (int i = 1; i < 30; ++i) last = t.train_step().loss;
  EXPECT_NEAR(first, std::log(256.0), 0.2);  // GPT-2 init: close to uniform over 256 bytes
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
}

TEST(Trainer, WeightDecayTouchesOnly2DWeights) {
  TrainerConfig c = tiny_config();
  c.weight_decay = 0.5;
  Trainer t(c, random_data(1000));
  std::vector<std::vector<unsigned char>> before;
  std::vector<std::vector<float>> values;
  for (const NamedTensor& p : t.master_weights()) {
    before.push_back(bytes_of(p.tensor));
    values.push_back(p.tensor.to_floats());
  }
  t.model().zero_grad();  // zero gradients: Adam's own update is exactly 0
  const double lr = 0.1;
  ASSERT_TRUE(t.optimizer_step(lr).taken);
  const float decay = static_cast<float>(1.0 - lr * c.weight_decay);
  const auto entries = t.model().registry().entries();
  const std::vector<NamedTensor> after = t.master_weights();
  for (std::size_t i = 0; i < after.size(); ++i) {
    const bool two_d = after[i].tensor.ndim() == 2;
    EXPECT_EQ(entries[i].weight_decay, two_d) << after[i].name;
    if (!two_d) {
      EXPECT_EQ(bytes_of(after[i].tensor), before[i]) << after[i].name << " changed";
      continue;
    }
    const std::vector<float> now = after[i].tensor.to_floats();
    for (std::size_t j = 0; j < now.size(); ++j) {
      ASSERT_EQ(now[j], values[i][j] * decay) << after[i].name << "[" << j << "]";
    }
  }
}

TEST(Trainer, SequentialOrderTrainsOnTheLoaderWindows) {
  TrainerConfig c = tiny_config();
  c.data_order = DataOrder::kSequential;
  c.steps = 7;
  const TrainingData data = random_data(100);  // 6 windows of 16 tokens (+1): wraps at step 6
  Trainer t(c, data);
  const TokenLoader ref(data.tokens, c.batch, c.seq, DataOrder::kSequential, c.seed);
  // The first step's loss is the fresh model's loss on window 0.
  GptOptions o;
  o.seed = c.seed;
  GptModel fresh(c.model, o);
  const TokenBatch b0 = ref.batch_at(0);
  const double want = fresh.forward(b0.inputs, b0.targets, c.batch, c.seq);
  const StepStats s0 = t.train_step();
  EXPECT_EQ(s0.loss, want);
  EXPECT_EQ(s0.data_position, 0);
  for (std::int64_t k = 1; k < 7; ++k) {
    const StepStats s = t.train_step();
    EXPECT_EQ(s.data_position, ref.batch_at(k).position) << "step " << k;
    EXPECT_EQ(s.data_position, (k % 6) * c.batch * c.seq) << "step " << k;
    EXPECT_EQ(s.epoch, k / 6);
  }
}

TEST(Trainer, RecomputeAndGradientAccumulationTrainTheSameWay) {
  const TrainingData data = random_data(1000);
  TrainerConfig c = tiny_config();
  Trainer plain(c, data);
  c.recompute = true;  // re-running a block's forward gives bit-identical activations
  Trainer again(c, data);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(plain.train_step().loss, again.train_step().loss);
  test::expect_same_tensors(plain.master_weights(), again.master_weights());

  c.recompute = false;
  c.grad_accum = 2;  // two micro-batches per step: twice the tokens, the loss their mean
  Trainer accum(c, data);
  const StepStats s = accum.train_step();
  EXPECT_EQ(s.tokens, 2 * c.batch * c.seq);
  EXPECT_EQ(accum.loader().state().step, 2);
  EXPECT_TRUE(std::isfinite(s.loss) && std::isfinite(s.grad_norm));
}

TEST(Trainer, InitFromKeepsFp32WeightsInTheMastersOfA16BitRun) {
  test::TempDir dir;
  TrainerConfig c = tiny_config();
  Trainer source(c, random_data(1000));
  source.train_step();
  source.save_hf(dir.str());
  c.dtype = DType::kBF16;
  c.init_from = dir.str();
  Trainer t(c, random_data(1000));
  test::expect_same_tensors(source.master_weights(), t.master_weights());
  // The working copy is the masters rounded to bf16.
  const Tensor& w = t.model().param("h.0.mlp.c_fc.weight");
  EXPECT_EQ(bytes_of(w), bytes_of(source.model().param("h.0.mlp.c_fc.weight").to(DType::kBF16)));
}

}  // namespace
}  // namespace mixpar::ch08
