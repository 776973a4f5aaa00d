// The trainer as one of N data-parallel replicas (chapter 4's DDP on the local backend): N ranks
// with B rows each train exactly like one rank with N*B rows (FP32, 10 steps), every rank logs
// the same global loss and gradient norm, one rank's overflow skips every rank's step, and a
// data-parallel run resumes from its checkpoint bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <mutex>
#include <vector>

#include "ch04_ddp/ddp_tolerances.h"
#include "ch08_test_util.h"
#include "comm/local_backend.h"
#include "train_loop.h"
#include "trainer.h"

namespace mixpar::ch08 {
namespace {

using test::random_data;
using test::TempDir;
using test::tiny_config;

// A sequential-order config: step k's global batch is the same window whatever the ranks.
TrainerConfig dp_config(int ranks, std::int64_t batch) {
  TrainerConfig c = tiny_config();
  c.data_order = DataOrder::kSequential;
  c.steps = 10;
  c.schedule = LrSchedule{LrScheduleKind::kCosine, 1e-2, 1e-3, 2, 10};
  c.batch = batch;
  c.ranks = c.dp = ranks;
  c.threads = 1;
  return c;
}

struct RankLog {
  std::vector<StepStats> steps;
  std::vector<float> weights;  // the FP32 masters after the last step, flat
};

std::vector<float> flat_masters(const Trainer& t) {
  std::vector<float> out;
  for (const NamedTensor& w : t.master_weights()) {
    const std::vector<float> v = w.tensor.to_floats();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

RankLog train(Trainer& t) {
  RankLog log;
  while (t.step() < t.config().steps) log.steps.push_back(t.train_step());
  log.weights = flat_masters(t);
  return log;
}

// Every rank's log, by rank (a single device when c.ranks == 1).
std::vector<RankLog> run(const TrainerConfig& c, const TrainingData& data) {
  return test::train_on_each_rank(c, data, [](Trainer& t, int) { return train(t); });
}

double rel(double a, double b) { return std::abs(a - b) / std::max(1.0, std::abs(b)); }

void expect_equivalent(const RankLog& many, const RankLog& one) {
  ASSERT_EQ(many.steps.size(), one.steps.size());
  for (std::size_t i = 0; i < one.steps.size(); ++i) {
    EXPECT_LE(rel(many.steps[i].loss, one.steps[i].loss), ch04::kLossTolerance) << "step " << i;
    EXPECT_LE(rel(many.steps[i].grad_norm, one.steps[i].grad_norm), ch04::kLossTolerance)
        << "step " << i;
    EXPECT_EQ(many.steps[i].data_position, one.steps[i].data_position) << "step " << i;
    EXPECT_EQ(many.steps[i].tokens, one.steps[i].tokens);
  }
  double worst = 0;
  ASSERT_EQ(many.weights.size(), one.weights.size());
  for (std::size_t i = 0; i < one.weights.size(); ++i) {
    worst = std::max(worst, rel(many.weights[i], one.weights[i]));
  }
  EXPECT_LE(worst, ch04::kWeightsTolerance);
}

TEST(DataParallelTrainer, NRanksWithBatchBEqualOneRankWithBatchNB) {
  const TrainingData data = random_data(4000);
  for (int n : {2, 4}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    const std::vector<RankLog> many = run(dp_config(n, 2), data);
    const std::vector<RankLog> one = run(dp_config(1, 2 * n), data);
    expect_equivalent(many[0], one[0]);
  }
}

TEST(DataParallelTrainer, GradientAccumulationOverRanksEqualsOneRankWithTheWholeBatch) {
  const TrainingData data = random_data(4000);
  TrainerConfig two = dp_config(2, 2);
  two.grad_accum = 3;
  TrainerConfig one = dp_config(1, 4);
  one.grad_accum = 3;
  expect_equivalent(run(two, data)[0], run(one, data)[0]);
}

TEST(DataParallelTrainer, EveryRankLogsTheSameGlobalLossNormAndWeights) {
  TrainerConfig c = dp_config(3, 2);
  c.dtype = DType::kBF16;
  const std::vector<RankLog> logs = run(c, random_data(4000));
  for (std::size_t r = 1; r < logs.size(); ++r) {
    for (std::size_t i = 0; i < logs[0].steps.size(); ++i) {
      EXPECT_EQ(logs[r].steps[i].loss, logs[0].steps[i].loss) << "rank " << r << " step " << i;
      EXPECT_EQ(logs[r].steps[i].grad_norm, logs[0].steps[i].grad_norm) << "rank " << r;
    }
    EXPECT_EQ(logs[r].weights, logs[0].weights) << "rank " << r;
  }
  // Each rank's time split is its own, and present.
  EXPECT_EQ(logs[1].steps[0].ranks, 3);
  EXPECT_GT(logs[1].steps[0].times.compute_s, 0.0);
}

TEST(DataParallelTrainer, OneRanksOverflowSkipsEveryRanksStep) {
  // fp16 with the scaler: rank 1 alone holds an inf gradient when the optimizer steps. The
  // vote makes rank 0, whose gradients are clean, skip too, and the scales stay equal.
  TrainerConfig c = dp_config(2, 2);
  c.dtype = DType::kF16;
  const TrainingData data = random_data(4000);
  std::vector<ch03::StepReport> reports(2);
  std::vector<float> scales(2);
  test::train_on_each_rank(c, data, [&](Trainer& t, int rank) {
    t.model().zero_grad();
    if (rank == 1) {
      Tensor g = t.model().gradients().front().tensor;
      const float inf[] = {std::numeric_limits<float>::infinity()};
      g.flat_slice(0, 1).copy_from(Tensor::from_floats(inf, {1}));
    }
    const std::size_t r = static_cast<std::size_t>(rank);
    reports[r] = t.optimizer_step(1e-3);
    scales[r] = t.optimizer().loss_scale();
  });
  EXPECT_FALSE(reports[0].taken);
  EXPECT_FALSE(reports[1].taken);
  EXPECT_EQ(scales[0], scales[1]);
  EXPECT_EQ(scales[0], static_cast<float>(c.loss_scale * 0.5));
}

TEST(DataParallelTrainer, ResumedRunContinuesBitForBit) {
  TempDir dir;
  TrainerConfig c = dp_config(2, 2);
  c.dtype = DType::kF16;
  c.steps = 6;
  c.schedule.total_steps = 6;
  c.checkpoint_dir = dir.file("ckpt");
  const TrainingData data = random_data(4000);
  const std::vector<RankLog> straight = run(c, data);
  // Stop after 3 steps with a checkpoint (every rank takes part), then resume to 6.
  test::train_on_each_rank(c, data, [&](Trainer& t, int) {
    for (int i = 0; i < 3; ++i) t.train_step();
    t.save_checkpoint();
  });
  TrainerConfig again = c;
  again.resume = true;
  std::vector<RankLog> resumed(2);
  test::train_on_each_rank(again, data, [&](Trainer& t, int rank) {
    t.resume();
    EXPECT_EQ(t.step(), 3);
    resumed[static_cast<std::size_t>(rank)] = train(t);
  });
  for (std::size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(resumed[r].steps.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(resumed[r].steps[i].loss, straight[r].steps[i + 3].loss) << "step " << i + 4;
    }
    EXPECT_EQ(resumed[r].weights, straight[r].weights) << "rank " << r;
  }
}

TEST(DataParallelTrainer, RunTrainingWritesEveryRanksSpansToTheTrace) {
  TempDir dir;
  TrainerConfig c = dp_config(2, 2);
  c.steps = 2;
  c.check_replicas_every = 1;  // the collective hash check after every step, on every rank
  c.trace = dir.file("trace.json");
  c.data = "";  // the built-in dataset: run_training loads its own data
  c.model.n_positions = c.seq;
  std::FILE* out = std::tmpfile();
  ASSERT_EQ(run_training(c, out), 0);
  std::fclose(out);
  const std::string trace = test::read_bytes(c.trace);
  for (const char* part : {"\"pid\":0", "\"pid\":1", "\"name\":\"backward\"", "all_reduce bucket",
                           "\"cat\":\"comm\"", "\"name\":\"rank 1\""}) {
    EXPECT_NE(trace.find(part), std::string::npos) << part;
  }
}

TEST(AgreeOnSetup, OneRanksBadInputStopsEveryRankAndIsPrintedOnce) {
  // Rank 2 of 3 could not read its data; the others could. All of them learn it, and the one
  // line on stderr is rank 2's, printed before any rank could leave.
  std::vector<int> agreed(3, -1);
  testing::internal::CaptureStderr();
  run_local(3, [&](Communicator& comm) {
    const std::string error = comm.rank() == 2 ? "/data/shard.bin: cannot open" : "";
    agreed[static_cast<std::size_t>(comm.rank())] = agree_on_setup(comm, error) ? 1 : 0;
  });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(agreed, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(err, "train_gpt: error: rank 2: /data/shard.bin: cannot open\n");
  // Every rank fine: everyone goes on, nothing printed.
  testing::internal::CaptureStderr();
  run_local(3, [&](Communicator& comm) {
    agreed[static_cast<std::size_t>(comm.rank())] = agree_on_setup(comm, "") ? 1 : 0;
  });
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(agreed, (std::vector<int>{1, 1, 1}));
}

}  // namespace
}  // namespace mixpar::ch08
