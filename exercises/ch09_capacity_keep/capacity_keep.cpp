#include "ch09_capacity_keep/capacity_keep.h"

namespace mixpar::exercises {

std::vector<char> keep_within_capacity(const std::vector<int>& expert,
                                       const std::vector<float>& prob, int n_experts,
                                       std::int64_t capacity, bool by_probability) {
  // Write this: rank each expert's choices by the policy, keep the first `capacity`.
  (void)expert;
  (void)prob;
  (void)n_experts;
  (void)capacity;
  (void)by_probability;
  return {};
}

}  // namespace mixpar::exercises
