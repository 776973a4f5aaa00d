#include "ch05_zero_memory/zero_memory.h"

namespace mixpar::exercises {

ZeroBytes zero_model_states(std::int64_t n, int stage, std::int64_t dp) {
  // Write this: which states the stage shards, and what a shard holds.
  (void)n;
  (void)stage;
  (void)dp;
  return {};
}

}  // namespace mixpar::exercises
