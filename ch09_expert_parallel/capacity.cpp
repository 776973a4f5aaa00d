#include "ch09_expert_parallel/capacity.h"

#include <algorithm>

namespace mixpar::ch09 {

std::vector<char> apply_capacity(const Routing& r, int n_experts, std::int64_t capacity,
                                 DropPolicy policy) {
  std::vector<char> keep(r.expert.size(), 1);
  if (capacity < 0) return keep;
  // Each expert's assignments in token order (a = t k + j grows with t), then ranked.
  std::vector<std::vector<std::size_t>> by_expert(static_cast<std::size_t>(n_experts));
  for (std::size_t a = 0; a < r.expert.size(); ++a) by_expert[std::size_t(r.expert[a])].push_back(a);
  for (auto& list : by_expert) {
    if (static_cast<std::int64_t>(list.size()) <= capacity) continue;
    if (policy == DropPolicy::kProbability) {
      std::stable_sort(list.begin(), list.end(),
                       [&](std::size_t a, std::size_t b) { return r.prob[a] > r.prob[b]; });
    }
    for (std::size_t i = static_cast<std::size_t>(capacity); i < list.size(); ++i) keep[list[i]] = 0;
  }
  return keep;
}

}  // namespace mixpar::ch09
