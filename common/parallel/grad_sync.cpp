// The GradSync defaults: a replica owns every parameter of its registry, whole.
#include "parallel/grad_sync.h"

#include "parallel/count_once.h"

namespace mixpar {

std::vector<OwnedPiece> GradSync::owned_pieces(const ParamRegistry& params) const {
  std::vector<OwnedPiece> out;
  const auto entries = params.entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    out.push_back({i, 0, entries[i].param.numel()});
  }
  return out;
}

std::vector<Tensor> GradSync::owned_params(ParamRegistry& params) const {
  return tensors_of(params.parameters());
}

std::vector<Tensor> GradSync::owned_grads(ParamRegistry& params) const {
  return tensors_of(params.gradients());
}

std::vector<bool> GradSync::owned_weight_decay(const ParamRegistry& params) const {
  std::vector<bool> out;
  for (const ParamEntry& e : params.entries()) out.push_back(e.weight_decay);
  return out;
}

std::vector<bool> GradSync::norm_counted(const ParamRegistry& params, const GridCoord& at) const {
  return mixpar::norm_counted(params.entries(), at);
}

double GradSync::counted_sum_of_squares(std::span<const Tensor> grads32,
                                        const std::vector<bool>& counted) const {
  return mixpar::counted_sum_of_squares(grads32, counted);
}

std::vector<Tensor> GradSync::whole_params(const ParamRegistry& /*params*/,
                                           std::span<const Tensor> owned) const {
  return {owned.begin(), owned.end()};
}

}  // namespace mixpar
