#include "parallel/count_once.h"

#include <stdexcept>
#include <vector>

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
  // Each counted tensor's sum of squares (on the threads), added in the tensors' order.
  std::vector<Tensor> kept;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (counted[i]) kept.push_back(grads[i]);
  }
  double sum_sq = 0.0;
  for (const double s : ops::sums_of_squares(kept)) sum_sq += s;
  return sum_sq;
}

}  // namespace mixpar
