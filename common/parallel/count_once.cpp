#include "parallel/count_once.h"

#include <stdexcept>

#include "ops/reductions.h"

namespace mixpar {

std::vector<ElementRange> norm_elements(const ParamEntry& e, const GridCoord& at) {
  const bool owner = at.dp == 0 && at.cp == 0 && !e.holding.tied_copy &&
                     (e.holding.split != ParamSplit::kReplicated || at.tp == 0);
  if (!owner) return {};
  return held_elements(e.shape, e.holding);
}

std::vector<bool> norm_counted(std::span<const ParamEntry> entries, const GridCoord& at) {
  std::vector<bool> out;
  out.reserve(entries.size());
  for (const ParamEntry& e : entries) out.push_back(!norm_elements(e, at).empty());
  return out;
}

double counted_sum_of_squares(std::span<const Tensor> grads, const std::vector<bool>& counted) {
  if (counted.size() != grads.size()) {
    throw std::invalid_argument("counted_sum_of_squares: " + std::to_string(counted.size()) +
                                " flags for " + std::to_string(grads.size()) + " gradients");
  }
  double sum_sq = 0.0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (counted[i]) sum_sq += ops::sum_of_squares(grads[i]);
  }
  return sum_sq;
}

}  // namespace mixpar
