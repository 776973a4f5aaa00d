// A replica's ownership (every parameter of its registry, whole), one replica's sync, and the
// backward's seed.
#include "parallel/grad_sync.h"

#include "parallel/count_once.h"

namespace mixpar {

float backward_seed(const StepSync& sync, float loss_scale, int micro_batches) {
  return sync.averages() ? loss_scale : loss_scale / static_cast<float>(micro_batches);
}

std::vector<OwnedPiece> ReplicatedGradSync::owned_pieces(const ParamRegistry& params) const {
  std::vector<OwnedPiece> out;
  const auto entries = params.entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    out.push_back({i, 0, entries[i].param.numel()});
  }
  return out;
}

std::vector<Tensor> ReplicatedGradSync::owned_params(ParamRegistry& params) const {
  return tensors_of(params.parameters());
}

std::vector<Tensor> ReplicatedGradSync::owned_grads(ParamRegistry& params) const {
  return tensors_of(params.gradients());
}

std::vector<bool> ReplicatedGradSync::owned_weight_decay(const ParamRegistry& params) const {
  std::vector<bool> out;
  for (const ParamEntry& e : params.entries()) out.push_back(e.weight_decay);
  return out;
}

std::vector<bool> ReplicatedGradSync::norm_counted(const ParamRegistry& params,
                                                   const GridCoord& at) const {
  return mixpar::norm_counted(params.entries(), at);
}

double ReplicatedGradSync::counted_sum_of_squares(std::span<const Tensor> grads32,
                                                  const std::vector<bool>& counted) const {
  return mixpar::counted_sum_of_squares(grads32, counted);
}

std::vector<Tensor> ReplicatedGradSync::whole_params(const ParamRegistry& /*params*/,
                                                     std::span<const Tensor> owned) const {
  return {owned.begin(), owned.end()};
}

std::string LocalGradients::describe() const {
  const std::string one = "one replica: nothing to synchronise";
  return why_.empty() ? one : why_ + " (" + one + ")";
}

}  // namespace mixpar
