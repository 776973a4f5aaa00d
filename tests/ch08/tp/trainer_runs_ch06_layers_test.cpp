// train_gpt --tp runs chapter 6's split layers. The trainer train_gpt drives (ch08's Trainer,
// its tp ranks as threads here) gets its TpCollectives from the grid; with one fault switched
// on there, in ColumnParallelLinear's f (its backward sum skipped) or in RowParallelLinear's g
// (its forward sum skipped), and nowhere else (the embedding, the LM head and the loss
// intact), its tp 2 run leaves tp 1's; without a fault the two agree to the order of their
// sums. A model that computed its linear layers itself would run neither fault, and these
// tests would fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "ch06_tensor_parallel/tp_collectives.h"
#include "ch08_full_3d/trainer.h"
#include "comm/local_backend.h"
#include "random/philox.h"

namespace mixpar::ch06 {
namespace {

using ch08::Trainer;
using ch08::TrainerConfig;
using ch08::TrainingData;

constexpr int kSteps = 4;
// Order-of-summation noise over a few f32 steps (tensor_parallel_gpt_test.cpp derives it).
constexpr double kTol = 1e-4;

// 2 blocks, 4 heads, width 32, 16 positions, byte vocabulary; B 4 x T 16.
TrainerConfig config(int tp, bool sequence_parallel) {
  TrainerConfig c;
  c.model = GptConfig{2, 4, 32, 16, 256};
  c.batch = 4;
  c.seq = 16;
  c.steps = kSteps;
  c.schedule = ch08::LrSchedule{ch08::LrScheduleKind::kConstant, 3e-3, 3e-3, 0, kSteps};
  c.data = "test tokens";
  c.eval_every = 0;
  c.ranks = tp;
  c.tp = tp;
  c.dp = 1;
  c.sequence_parallel = sequence_parallel;
  return c;
}

TrainingData tokens() {
  Philox gen(11);
  std::vector<std::uint16_t> t(4096);
  for (auto& v : t) v = static_cast<std::uint16_t>(gen.next_u32() % 64);
  TrainingData d;
  d.description = "test tokens";
  d.fingerprint = 11;
  d.tokens = std::make_shared<const std::vector<std::uint16_t>>(std::move(t));
  return d;
}

struct Run {
  std::vector<double> loss, grad_norm;
};

// kSteps of the trainer on tp ranks (tp 1: one device), with bugs set on every rank's
// TpCollectives before the first step.
Run train(int tp, bool sequence_parallel = false, TpBugs bugs = {}) {
  const TrainerConfig c = config(tp, sequence_parallel);
  const TrainingData data = tokens();
  Run run;
  auto steps = [&](Trainer& t) {
    for (int s = 0; s < kSteps; ++s) {
      const ch08::StepStats st = t.train_step();
      if (t.rank() == 0) {
        run.loss.push_back(st.loss);
        run.grad_norm.push_back(st.grad_norm);
      }
    }
  };
  if (tp == 1) {
    Trainer t(c, data);
    steps(t);
    return run;
  }
  run_local(tp, [&](Communicator& comm) {
    Trainer t(c, data, &comm);
    auto* ops = dynamic_cast<TpCollectives*>(t.model().options().tp_ops);
    ASSERT_NE(ops, nullptr) << "the trainer's tp group is chapter 6's TpCollectives";
    ops->set_bugs(bugs);
    steps(t);
  });
  return run;
}

// The largest difference of loss or gradient norm over the steps.
double max_difference(const Run& a, const Run& b) {
  if (a.loss.size() != b.loss.size() || a.loss.empty()) return INFINITY;
  double d = 0;
  for (std::size_t i = 0; i < a.loss.size(); ++i) {
    d = std::max({d, std::fabs(a.loss[i] - b.loss[i]), std::fabs(a.grad_norm[i] - b.grad_norm[i])});
  }
  return d;
}

void expect_runs_chapter6s_layers(bool sequence_parallel) {
  const Run one = train(1);
  const double fine = max_difference(one, train(2, sequence_parallel));
  TpBugs column;
  column.skip_block_f_backward = true;
  const double broken_column = max_difference(one, train(2, sequence_parallel, column));
  TpBugs row;
  row.skip_g_forward = true;
  const double broken_row = max_difference(one, train(2, sequence_parallel, row));
  std::printf("tp 2%s against tp 1, largest loss or grad norm difference over %d steps: %.2e; "
              "ColumnParallelLinear's f without its backward sum %.2e; RowParallelLinear's g "
              "without its forward sum %.2e (tolerance %.0e)\n",
              sequence_parallel ? " + SP" : "", kSteps, fine, broken_column, broken_row, kTol);
  EXPECT_LE(fine, kTol) << "the correct layers train as one device";
  EXPECT_GT(broken_column, 10 * kTol) << "the trainer's c_attn and c_fc are ColumnParallelLinear";
  EXPECT_GT(broken_row, 10 * kTol) << "the trainer's projections are RowParallelLinear";
}

TEST(TrainGptTp, RunsChapter6sColumnAndRowParallelLinears) {
  expect_runs_chapter6s_layers(false);
}

TEST(TrainGptTp, WithSequenceParallelRunsChapter6sColumnAndRowParallelLinears) {
  expect_runs_chapter6s_layers(true);
}

}  // namespace
}  // namespace mixpar::ch06
