#include "ch05_zero_shard/zero_shard.h"

namespace mixpar::exercises {

ZeroShard zero_shard(std::int64_t begin, std::int64_t count, int dp, std::int64_t align, int rank) {
  // Write this: pad, split, clip the rank's shard to the real elements.
  (void)begin;
  (void)count;
  (void)dp;
  (void)align;
  (void)rank;
  return {};
}

}  // namespace mixpar::exercises
