// Helpers of the MoE trainer tests (tests/ch08/moe): a small MoE configuration, a run of it
// on every rank with the weights it ends with, and the relative difference the tolerance
// checks read.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../ch08_test_util.h"
#include "ch04_ddp/ddp_tolerances.h"

namespace mixpar::ch08::moe_test {

using test::random_data;
using test::tiny_config;

inline TrainerConfig moe_config(int ranks, std::int64_t batch) {
  TrainerConfig c = tiny_config();
  c.data_order = DataOrder::kSequential;
  c.steps = 6;
  c.batch = batch;
  c.ranks = c.dp = ranks;
  c.threads = 1;
  c.moe.n_experts = 4;
  c.moe.top_k = 2;
  return c;
}

struct MoeRun {
  std::vector<StepStats> steps;
  std::vector<float> dense;    // the registry's FP32 weights after the last step, flat
  std::vector<float> experts;  // every expert of every MoE block by global index (rank 0)
};

inline std::vector<float> flat(const std::vector<Tensor>& ts) {
  std::vector<float> out;
  for (const Tensor& t : ts) {
    const std::vector<float> v = t.to_floats();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

inline MoeRun train(Trainer& t) {
  MoeRun r;
  while (t.step() < t.config().steps) r.steps.push_back(t.train_step());
  t.prepare_eval_model();  // collective: the experts gathered onto rank 0's copy
  if (t.rank() == 0) {
    std::vector<Tensor> dense;
    for (const NamedTensor& w : t.eval_model().parameters()) dense.push_back(w.tensor);
    r.dense = flat(dense);
    if (t.eval_moe() != nullptr) r.experts = flat(t.eval_moe()->params());
  }
  return r;
}

inline MoeRun run(const TrainerConfig& c, const TrainingData& data) {
  return test::train_on_each_rank(c, data, [](Trainer& t, int) { return train(t); })[0];
}

inline double rel(double a, double b) { return std::abs(a - b) / std::max(1.0, std::abs(b)); }
inline double worst(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double w = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) w = std::max(w, rel(a[i], b[i]));
  return w;
}

// `c` resumed from the checkpoint its run wrote after step 3, run to its end on every rank.
inline MoeRun resume_after_step_3(TrainerConfig c, const TrainingData& data) {
  c.resume = true;
  return test::train_on_each_rank(c, data, [](Trainer& t, int) {
    t.resume();
    EXPECT_EQ(t.step(), 3);
    return train(t);
  })[0];
}

// The same run bit for bit: every step's loss, the norm to 1e-12 (its sum of squares may take
// another order), the final dense weights and experts.
inline void expect_bit_for_bit(const MoeRun& got, const MoeRun& want) {
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (std::size_t s = 0; s < want.steps.size(); ++s) {
    EXPECT_EQ(got.steps[s].loss, want.steps[s].loss) << "step " << s;
    EXPECT_LE(rel(got.steps[s].grad_norm, want.steps[s].grad_norm), 1e-12) << "step " << s;
  }
  EXPECT_EQ(got.dense, want.dense);
  EXPECT_EQ(got.experts, want.experts);
}

// The same run within chapter 4's tolerances (only the order of FP32 sums differs): every
// step's loss and norm, the final dense weights and experts.
inline void expect_within_ddp_tolerances(const MoeRun& got, const MoeRun& want) {
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (std::size_t s = 0; s < want.steps.size(); ++s) {
    EXPECT_LE(rel(got.steps[s].loss, want.steps[s].loss), ch04::kLossTolerance) << "step " << s;
    EXPECT_LE(rel(got.steps[s].grad_norm, want.steps[s].grad_norm), ch04::kLossTolerance)
        << "step " << s;
  }
  EXPECT_LE(worst(got.dense, want.dense), ch04::kWeightsTolerance);
  EXPECT_LE(worst(got.experts, want.experts), ch04::kWeightsTolerance);
}

// Expert 0 of each of the first `blocks` MoE blocks of `moe` set to block i's own MLP weights
// in `dense` (the dense model of the same seed): one expert, top-1, is then that MLP.
inline void copy_dense_mlp_into_expert_zero(Trainer& dense, Trainer& moe, std::size_t blocks) {
  const std::int64_t C = moe.config().model.n_embd;
  for (std::size_t i = 0; i < blocks; ++i) {
    const std::string h = "h." + std::to_string(i) + ".mlp.";
    ch09::ExpertWeights& e = moe.moe()->layer(i).experts();
    e.fc_w.view({C, 4 * C}).copy_from(dense.model().param(h + "c_fc.weight"));
    e.fc_b.view({4 * C}).copy_from(dense.model().param(h + "c_fc.bias"));
    e.proj_w.view({4 * C, C}).copy_from(dense.model().param(h + "c_proj.weight"));
    e.proj_b.view({C}).copy_from(dense.model().param(h + "c_proj.bias"));
  }
}

}  // namespace mixpar::ch08::moe_test
