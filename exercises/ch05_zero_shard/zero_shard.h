// Exercise (chapter 5): the offsets of one rank's ZeRO shard of a bucket. A bucket holds the
// elements [begin, begin + count) of the flat gradient buffer. It is padded to a multiple of
// dp x align elements and split evenly: shard = padded / dp, rank r owns [r shard, (r+1) shard)
// of the padded bucket, of which only the part below count is real. A rank may own padding
// only (more ranks than elements). See ch05_zero/README.md and ch05_zero/zero_partition.h.
#pragma once

#include <cstdint>

namespace mixpar::exercises {

struct ZeroShard {
  std::int64_t padded = 0;       // count rounded up to a multiple of dp x align
  std::int64_t shard = 0;        // padded / dp
  std::int64_t owned_begin = 0;  // first real element this rank owns, in the flat buffer
  std::int64_t owned_count = 0;  // real elements owned (0 when the shard is padding only)
};

ZeroShard zero_shard(std::int64_t begin, std::int64_t count, int dp, std::int64_t align, int rank);

}  // namespace mixpar::exercises
