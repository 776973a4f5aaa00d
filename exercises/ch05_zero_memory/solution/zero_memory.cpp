#include "ch05_zero_memory/zero_memory.h"

namespace mixpar::exercises {

ZeroBytes zero_model_states(std::int64_t n, int stage, std::int64_t dp) {
  const std::int64_t shard = (n + dp - 1) / dp;
  ZeroBytes b;
  b.master_params = 4 * (stage >= 1 ? shard : n);
  b.optimizer_state = 8 * (stage >= 1 ? shard : n);
  b.gradients = 2 * (stage >= 2 ? shard : n);
  b.parameters = 2 * (stage >= 3 ? shard : n);
  return b;
}

}  // namespace mixpar::exercises
