// Helpers of the MoE trainer tests (tests/ch08/moe): a small MoE configuration, a run of it
// on every rank with the weights it ends with, and the relative difference the tolerance
// checks read.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../ch08_test_util.h"

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

}  // namespace mixpar::ch08::moe_test
