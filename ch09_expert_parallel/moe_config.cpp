#include "ch09_expert_parallel/moe_config.h"

#include <cmath>

#include "util/errors.h"

namespace mixpar::ch09 {

std::string drop_policy_name(DropPolicy p) {
  return p == DropPolicy::kProbability ? "probability" : "position";
}

void validate(const MoeConfig& c, int ep) {
  const auto refuse = [](const std::string& why) { throw InputError("moe: " + why); };
  if (c.d_model < 1 || c.d_hidden < 1) refuse("d_model and d_hidden must be >= 1");
  if (c.n_experts < 1) refuse("n_experts " + std::to_string(c.n_experts) + " must be >= 1");
  if (c.top_k < 1 || c.top_k > c.n_experts) {
    refuse("top_k " + std::to_string(c.top_k) + " must be in [1, n_experts = " +
           std::to_string(c.n_experts) + "]");
  }
  if (ep < 1 || c.n_experts % ep != 0) {
    refuse("ep " + std::to_string(ep) + " must divide n_experts = " + std::to_string(c.n_experts));
  }
  for (const auto& [name, v] : {std::pair<const char*, double>{"capacity_factor", c.capacity_factor},
                                {"aux_loss_coef", c.aux_loss_coef},
                                {"z_loss_coef", c.z_loss_coef},
                                {"bias_update_rate", c.bias_update_rate}}) {
    if (!std::isfinite(v) || v < 0) refuse(std::string(name) + " must be finite and >= 0");
  }
  if (c.dtype != DType::kF32 && c.dtype != DType::kBF16 && c.dtype != DType::kF16) {
    refuse("the experts' dtype " + std::string(dtype_name(c.dtype)) + " is not f32, bf16 or f16");
  }
}

std::int64_t expert_capacity(const MoeConfig& c, std::int64_t tokens) {
  if (c.capacity_factor == 0) return -1;
  // Refused when the fair share itself is under one token: the rounding up would hide a
  // factor that makes no sense for this many tokens.
  const double share = c.capacity_factor * double(tokens) * c.top_k / c.n_experts;
  const double cap = std::ceil(share);
  if (share < 1) {
    throw InputError("moe: capacity factor " + std::to_string(c.capacity_factor) + " gives " +
                     "experts a capacity below one token for " + std::to_string(tokens) +
                     " tokens");
  }
  return static_cast<std::int64_t>(cap);
}

}  // namespace mixpar::ch09
