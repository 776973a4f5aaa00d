// Checks and state allocation shared by the optimizers.
#include "optim/param_list.h"

#include <stdexcept>
#include <string>

#include "ops/checks.h"

namespace mixpar {

void check_params(std::span<const Tensor> params, const char* who) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string name = "params[" + std::to_string(i) + "]";
    ops::check_operand(params[i], who, name.c_str());
    if (params[i].dtype() == DType::kF64) {
      throw std::invalid_argument(std::string(who) + ": '" + name +
                                  "' is f64; parameters are f32 (or f16/bf16 working copies)");
    }
  }
}

void check_grads(std::span<const Tensor> params, std::span<const Tensor> grads, const char* who) {
  if (grads.size() != params.size()) {
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(grads.size()) +
                                " gradients for " + std::to_string(params.size()) + " parameters");
  }
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const std::string name = "grads[" + std::to_string(i) + "]";
    ops::check_operand(grads[i], who, name.c_str());
    ops::check_same_numel(grads[i], params[i], who, name.c_str(), "its parameter");
  }
}

std::vector<Tensor> zeros_like_fp32(std::span<const Tensor> params, MemCategory category) {
  std::vector<Tensor> out;
  out.reserve(params.size());
  for (const Tensor& p : params) out.push_back(Tensor::zeros(p.shape(), DType::kF32, category));
  return out;
}

}  // namespace mixpar
