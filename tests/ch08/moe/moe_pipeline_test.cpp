// train_gpt's MoE blocks beside a pipeline (chapter 7): each MoE layer keeps every micro-batch's
// forward state until that micro-batch's backward, so every schedule (AFAB, 1F1B, ZB-H1, the
// interleaved loop and the V's) trains like one device accumulating the same micro-batches;
// dp x ep x tp x pp trains like one device with the whole batch, and its statistics report
// every stage's blocks once; a checkpoint written at pp 2 x ep 2 resumes at pp 1 x ep 1 and
// the other way round, the weights bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "../ch08_test_util.h"
#include "preflight.h"
#include "tensor/ledger.h"

namespace mixpar::ch08 {
namespace {

using test::expect_close_step;
using test::expect_one_device_step;
using test::random_data;

// 4 blocks, every one an MoE block of 4 experts, top-2, no capacity limit (a rank's drops
// would depend on its share of the tokens), the aux loss and z-loss on.
TrainerConfig moe_pipeline_config(int pp, const std::string& schedule, std::int64_t m) {
  TrainerConfig c = test::tiny_config();
  c.model = GptConfig{4, 2, 16, 8, 256};
  c.data_order = DataOrder::kSequential;
  c.steps = 4;
  c.grad_accum = m;
  c.threads = 1;
  c.ranks = c.pp = pp;
  c.dp = 1;
  c.pipeline_schedule = schedule;
  c.moe.n_experts = 4;
  c.moe.top_k = 2;
  c.moe.aux_loss_coef = 1e-2;
  c.moe.z_loss_coef = 1e-3;
  return c;
}

struct PipelineRun {
  std::vector<StepStats> steps;
  std::vector<float> weights;  // rank 0's gathered copy: the registry's, then every expert
};

std::vector<float> gathered_weights(Trainer& t) {
  t.prepare_eval_model();  // collective: every stage and every expert onto rank 0's copy
  std::vector<float> out;
  if (t.rank() != 0) return out;
  for (const NamedTensor& w : t.eval_model().parameters()) {
    const std::vector<float> v = w.tensor.to_floats();
    out.insert(out.end(), v.begin(), v.end());
  }
  MoeBlocks* moe = t.eval_moe() != nullptr ? t.eval_moe() : t.moe();
  for (const Tensor& p : moe->whole_params()) {
    const std::vector<float> v = p.to_floats();
    out.insert(out.end(), v.begin(), v.end());
  }
  for (std::size_t b = 0; b < moe->blocks(); ++b) {
    const std::vector<float>& bias = moe->layer(b).expert_bias();
    out.insert(out.end(), bias.begin(), bias.end());
  }
  return out;
}

// Every rank's run (its steps; rank 0 also the gathered weights).
std::vector<PipelineRun> run(const TrainerConfig& c, const TrainingData& data) {
  return test::train_on_each_rank(c, data, [&](Trainer& t, int) {
    PipelineRun r;
    while (t.step() < c.steps) r.steps.push_back(t.train_step());
    r.weights = gathered_weights(t);
    return r;
  });
}

double worst(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double w = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    w = std::max(w, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  }
  return w;
}

TEST(MoePipeline, EveryScheduleTrainsLikeOneDeviceAccumulatingTheSameMicroBatches) {
  const TrainingData data = random_data(4096);
  const std::int64_t m = 4;
  TrainerConfig one = moe_pipeline_config(1, "1f1b", m);
  const PipelineRun ref = run(one, data)[0];
  struct Case {
    const char* schedule;
    int virtual_stages;
  };
  for (const Case k : {Case{"afab", 1}, Case{"1f1b", 1}, Case{"zb-h1", 1},
                       Case{"interleaved", 2}, Case{"zb-v", 2}, Case{"dualpipev", 2}}) {
    TrainerConfig c = moe_pipeline_config(2, k.schedule, m);
    c.virtual_stages = k.virtual_stages;
    const std::vector<PipelineRun> got = run(c, data);
    for (std::size_t r = 0; r < got.size(); ++r) {
      ASSERT_EQ(got[r].steps.size(), ref.steps.size());
      for (std::size_t i = 0; i < ref.steps.size(); ++i) {
        const std::string at = std::string(k.schedule) + " rank " + std::to_string(r) +
                               " step " + std::to_string(i + 1);
        expect_one_device_step(got[r].steps[i], ref.steps[i], i, at);
        // Every stage's blocks reported once, on every rank: one device's counts.
        const Json& blocks = got[r].steps[i].moe.at("blocks");
        ASSERT_EQ(blocks.size(), 4u) << at;
        for (std::size_t b = 0; b < 4; ++b) {
          EXPECT_EQ(blocks.at(b).at("block").as_int(), std::int64_t(b)) << at;
          EXPECT_EQ(blocks.at(b).at("expert_tokens").dump(),
                    ref.steps[i].moe.at("blocks").at(b).at("expert_tokens").dump())
              << at;
        }
      }
    }
    EXPECT_LE(worst(got[0].weights, ref.weights), 1e-5) << k.schedule;
  }
}

// dp 2 x ep 2 x tp 2 x pp 2: the ep groups live inside a stage (its dp ranks of one tp rank);
// the balance statistics, seeds and gradient sums are each stage's, every expert counted once
// in the norm over the stages. Against one device with the whole batch: the dp mean of the
// loss and the experts' sums over edp add in another order, so every step to 1e-6 / 1e-5.
// ZeRO-1 beside it too.
TEST(MoePipeline, DpEpTpPpTrainsLikeOneDeviceWithTheWholeBatch) {
  const TrainingData data = random_data(4096);
  TrainerConfig one = moe_pipeline_config(1, "1f1b", 2);
  one.batch = 4;
  const PipelineRun ref = run(one, data)[0];
  TrainerConfig c = moe_pipeline_config(2, "1f1b", 2);
  c.ranks = 8;
  c.dp = c.ep = c.tp = 2;
  const std::vector<PipelineRun> got = run(c, data);
  for (std::size_t r = 0; r < got.size(); ++r) {
    for (std::size_t i = 0; i < ref.steps.size(); ++i) {
      const std::string at = "rank " + std::to_string(r) + " step " + std::to_string(i + 1);
      expect_close_step(got[r].steps[i], ref.steps[i], at);
      const Json& moe = got[r].steps[i].moe;
      ASSERT_EQ(moe.at("blocks").size(), 4u) << at;
      for (std::size_t b = 0; b < 4; ++b) {
        EXPECT_EQ(moe.at("blocks").at(b).at("expert_tokens").dump(),
                  ref.steps[i].moe.at("blocks").at(b).at("expert_tokens").dump())
            << at;
      }
      // The pipeline's all-to-all bytes (both stages'), measured and by the formula.
      EXPECT_GT(moe.at("a2a_bytes").as_double(), 0) << at;
      EXPECT_EQ(moe.at("a2a_bytes").as_double(), moe.at("a2a_bytes_formula").as_double()) << at;
    }
  }
  EXPECT_LE(worst(got[0].weights, ref.weights), 1e-5);
  // ZeRO-1 beside it (each stage's dp group shards the dense states, its edp group the
  // experts'): DDP's run bit for bit, as without MoE blocks (the tied wte's copies meet before
  // the dp reduction under both: ch08's strategy_factory.cpp).
  c.zero_stage = 1;
  const std::vector<PipelineRun> zero = run(c, data);
  for (std::size_t r = 0; r < zero.size(); ++r) {
    for (std::size_t i = 0; i < ref.steps.size(); ++i) {
      const std::string at = "ZeRO-1 rank " + std::to_string(r) + " step " + std::to_string(i + 1);
      EXPECT_EQ(zero[r].steps[i].loss, got[r].steps[i].loss) << at;
      EXPECT_EQ(zero[r].steps[i].grad_norm, got[r].steps[i].grad_norm) << at;
    }
  }
  EXPECT_EQ(zero[0].weights, got[0].weights);
}

// A checkpoint holds each stage's MoE blocks by global block and expert index: written at
// pp 2 x ep 2 it resumes at pp 1 x ep 1 (and the other way round) with the writer's weights
// bit for bit, and the run continues like the writer's to 1e-6 / 1e-5.
TEST(MoePipeline, ACheckpointReshardsAcrossPipelineAndExpertSizes) {
  const TrainingData data = random_data(4096);
  TrainerConfig two = moe_pipeline_config(2, "1f1b", 2);
  two.ranks = 4;
  two.dp = two.ep = 2;
  two.moe.bias_update_rate = 1e-2;
  TrainerConfig one = two;
  one.ranks = 2;
  one.pp = one.ep = 1;
  for (const bool down : {true, false}) {
    SCOPED_TRACE(down ? "pp 2 ep 2 -> pp 1 ep 1" : "pp 1 ep 1 -> pp 2 ep 2");
    test::TempDir dir;
    TrainerConfig writer = down ? two : one, reader = down ? one : two;
    writer.checkpoint_dir = reader.checkpoint_dir = dir.file("ckpt");
    reader.resume = true;
    const std::vector<PipelineRun> straight = run(writer, data);
    const std::vector<float> saved = test::train_on_each_rank(writer, data, [](Trainer& t, int) {
      for (int i = 0; i < 2; ++i) t.train_step();
      t.save_checkpoint();
      return gathered_weights(t);
    })[0];
    const PipelineRun resumed = test::train_on_each_rank(reader, data, [&](Trainer& t, int) {
      t.resume();
      EXPECT_EQ(t.step(), 2);
      PipelineRun r;
      r.weights = gathered_weights(t);
      while (t.step() < reader.steps) r.steps.push_back(t.train_step());
      return r;
    })[0];
    EXPECT_EQ(resumed.weights, saved);
    ASSERT_EQ(resumed.steps.size(), 2u);
    for (std::size_t i = 0; i < 2; ++i) {
      expect_close_step(resumed.steps[i], straight[0].steps[i + 2],
                        "step " + std::to_string(i + 3));
    }
  }
}

// The pre-flight bills each pp rank's own MoE blocks (the interleaved loop's chunks too): its
// parameters, gradients and AdamW moments as each rank's ledger counts them after a step.
TEST(MoePipeline, ThePreflightBillsEachStagesOwnMoeBlocks) {
  const TrainingData data = random_data(4096);
  struct Case {
    const char* schedule;
    int virtual_stages, moe_every;
  };
  for (const Case k : {Case{"1f1b", 1, 3}, Case{"1f1b", 1, 1}, Case{"interleaved", 2, 2}}) {
    SCOPED_TRACE(k.schedule);
    TrainerConfig c = moe_pipeline_config(2, k.schedule, 2);
    c.virtual_stages = k.virtual_stages;
    c.moe_every = k.moe_every;
    c.ranks = 4;
    c.dp = c.ep = 2;
    const std::vector<RankBill> bills = estimate_rank_bills(c);
    const std::vector<std::array<std::int64_t, 4>> live =
        test::train_on_each_rank(c, data, [](Trainer& t, int) {
          t.train_step();
          const MemoryLedger& l = current_ledger();
          const auto at = [&](MemCategory m) { return static_cast<std::int64_t>(l.live(m)); };
          return std::array<std::int64_t, 4>{t.coord().pp, at(MemCategory::kParameters),
                                             at(MemCategory::kGradients),
                                             at(MemCategory::kOptimizerState)};
        });
    std::int64_t moe_total = 0;
    for (const RankBill& b : bills) moe_total += b.moe_parameters;
    EXPECT_GT(moe_total, 0);
    for (const auto& rank : live) {
      const RankBill& b = bills.at(std::size_t(rank[0]));
      EXPECT_EQ(rank[1], b.param_bytes) << "pp rank " << rank[0];
      EXPECT_EQ(rank[2], b.grad_bytes) << "pp rank " << rank[0];
      EXPECT_EQ(rank[3], b.optimizer_bytes) << "pp rank " << rank[0];
    }
  }
}

}  // namespace
}  // namespace mixpar::ch08
