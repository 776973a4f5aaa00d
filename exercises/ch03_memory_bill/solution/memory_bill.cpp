#include "ch03_memory_bill/memory_bill.h"

namespace mixpar::exercises {

std::int64_t gpt2_parameters(std::int64_t n_layer, std::int64_t n_embd, std::int64_t vocab,
                             std::int64_t n_positions) {
  const std::int64_t C = n_embd;
  const std::int64_t layer_norm = 2 * C;                   // weight and bias
  const std::int64_t attention = (C * 3 * C + 3 * C) + (C * C + C);
  const std::int64_t mlp = (C * 4 * C + 4 * C) + (4 * C * C + C);
  const std::int64_t block = 2 * layer_norm + attention + mlp;  // 12 C^2 + 13 C
  return vocab * C + n_positions * C + n_layer * block + layer_norm;
}

std::int64_t model_state_bytes(std::int64_t parameters, bool mixed, bool adamw) {
  const std::int64_t working = mixed ? 2 : 4;  // weights, and again their gradients
  const std::int64_t masters = mixed ? 4 : 0;
  const std::int64_t optimizer = adamw ? 8 : 4;  // m and v, or one momentum buffer
  return parameters * (2 * working + masters + optimizer);
}

}  // namespace mixpar::exercises
