// The measurements chapter 9's lesson sections share: bitwise and relative comparisons, the
// lesson's seeded tensors and SGD step, and the expert-parallel run compared with ep 1.
#pragma once

#include <cstdint>
#include <vector>

#include "ch09_expert_parallel/moe_lesson.h"
#include "tensor/tensor.h"

namespace mixpar::ch09 {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b);
bool same_bits(const Tensor& a, const Tensor& b);
// max |a - b| / max |b|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b);
// N(0, std^2) from Philox(seed, 7), FP32.
Tensor normal(Shape shape, std::uint64_t seed, float std = 1.0f);
// p -= lr g, element by element.
void sgd(Tensor& p, const Tensor& g, float lr);

// The layer of the expert-parallel sections: the lesson's, with every balancing term on.
MoeConfig ep_config();
struct EpComparison {
  bool y = true, dx = true, router = true, bias = true;
  double expert_rel = 0;
  bool experts_bitwise = true;
};
// Which of a run's outputs have ep 1's bits (`ref`), and how far its expert gradients are.
EpComparison compare(const EpRun& a, const EpRun& ref);
// The expert gradients' bound: the same products summed in another order.
constexpr double kExpertGradBound = 1e-5;

}  // namespace mixpar::ch09
