#include "ch09_capacity_keep/capacity_keep.h"

#include <algorithm>

namespace mixpar::exercises {

std::vector<char> keep_within_capacity(const std::vector<int>& expert,
                                       const std::vector<float>& prob, int n_experts,
                                       std::int64_t capacity, bool by_probability) {
  std::vector<char> keep(expert.size(), 1);
  if (capacity < 0) return keep;
  std::vector<std::vector<std::size_t>> of(static_cast<std::size_t>(n_experts));
  for (std::size_t a = 0; a < expert.size(); ++a) of[static_cast<std::size_t>(expert[a])].push_back(a);
  for (std::vector<std::size_t>& list : of) {
    if (by_probability) {
      // Stable: equal probabilities keep their order, the lower a first.
      std::stable_sort(list.begin(), list.end(),
                       [&](std::size_t x, std::size_t y) { return prob[x] > prob[y]; });
    }
    for (std::size_t i = static_cast<std::size_t>(capacity); i < list.size(); ++i) keep[list[i]] = 0;
  }
  return keep;
}

}  // namespace mixpar::exercises
