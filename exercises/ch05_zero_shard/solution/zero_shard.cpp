#include "ch05_zero_shard/zero_shard.h"

#include <algorithm>

namespace mixpar::exercises {

ZeroShard zero_shard(std::int64_t begin, std::int64_t count, int dp, std::int64_t align, int rank) {
  const std::int64_t unit = dp * align;
  ZeroShard z;
  z.padded = (count + unit - 1) / unit * unit;
  z.shard = z.padded / dp;
  const std::int64_t lo = std::min(count, rank * z.shard);
  const std::int64_t hi = std::min(count, (rank + 1) * z.shard);
  z.owned_begin = begin + lo;
  z.owned_count = hi - lo;
  return z;
}

}  // namespace mixpar::exercises
