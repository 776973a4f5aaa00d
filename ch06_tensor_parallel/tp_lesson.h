// The lesson's runs: a GPT trained for a few steps on tp local ranks (threads) with
// TpCollectives, beside the same model on one device; what each run measured (losses,
// gradient norms, final weights as full tensors, tp traffic by region, activation memory per
// rank, the drift between tp replicas of a replicated parameter).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ch06_tensor_parallel/tp_collectives.h"
#include "model/gpt.h"

namespace mixpar::ch06 {

// The lessons' batch of step `step` ([B, T] tokens and targets), the same on every rank: random
// tokens from Philox(seed + 1000, stream step), each target (token + 1) mod V, a rule the model
// learns. Chapter 6's tp and cp runs and the single device they are compared with read it.
void lesson_batch(std::uint64_t seed, int step, std::int64_t B, std::int64_t T,
                  std::int64_t vocab_size, std::vector<std::int32_t>& tok,
                  std::vector<std::int32_t>& tgt);

struct TpRunConfig {
  GptConfig model{2, 4, 32, 16, 64};  // 2 blocks, 4 heads, 32 wide, 16 positions, 64 tokens
  std::int64_t B = 2, T = 16;
  int steps = 10;
  int tp = 1;
  bool sequence_parallel = false;  // with tp > 1
  DType dtype = DType::kF32;
  std::uint64_t seed = 7;
  double lr = 1e-3;
  TpBugs bugs;
  // The bug "the gradient norm counts replicated parameters on every tp rank".
  bool norm_counts_replicas = false;
  double max_grad_norm = 0;  // > 0: clip to it (the norm the run computed)
};

struct TpRunResult {
  std::vector<double> loss, grad_norm;  // per step
  std::vector<double> naive_norm;       // every rank counting everything it holds
  std::vector<int> clipped;             // per step: 1 when clipping scaled the gradients
  std::map<std::string, std::vector<float>> weights;  // full, unpadded, after the last step
  std::map<std::string, TpRegionTraffic> traffic;    // rank 0's, over the first step
  std::size_t activation_peak = 0;  // rank 0's kActivations peak over one step, bytes
  double replica_drift = 0;         // max |difference| between tp replicas of replicated params
};

// Trains cfg.steps steps of AdamW on a fixed synthetic batch sequence; tp == 1 runs on this
// thread with no communicator.
TpRunResult train_tensor_parallel(const TpRunConfig& cfg);

// Largest |a - b| over every weight of two runs (same names).
double max_weight_difference(const TpRunResult& a, const TpRunResult& b);
double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace mixpar::ch06
