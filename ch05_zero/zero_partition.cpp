#include "ch05_zero/zero_partition.h"

#include <algorithm>
#include <string>

#include "ch04_ddp/bucket_reducer.h"
#include "util/errors.h"

namespace mixpar::ch05 {

std::int64_t ZeroBucket::owned_begin(int r) const {
  return begin + std::min<std::int64_t>(count, r * shard);
}

std::int64_t ZeroBucket::owned_count(int r) const {
  const std::int64_t lo = std::min<std::int64_t>(count, r * shard);
  const std::int64_t hi = std::min<std::int64_t>(count, (r + 1) * shard);
  return hi - lo;
}

ZeroPartition::ZeroPartition(std::span<const ParamEntry> entries, DType dtype,
                             std::size_t bucket_cap_bytes, int dp, int rank, std::int64_t align,
                             const std::function<bool(std::size_t)>& close_after)
    : dp_(dp), rank_(rank) {
  if (dp < 1 || rank < 0 || rank >= dp) {
    throw InputError("ZeRO partition: rank " + std::to_string(rank) + " of " +
                     std::to_string(dp) + " data-parallel ranks");
  }
  if (align < 1) throw InputError("ZeRO partition: alignment must be at least 1 element");
  const std::int64_t unit = static_cast<std::int64_t>(dp) * align;
  for (const ch04::Bucket& b : ch04::make_buckets(entries, dtype, bucket_cap_bytes, close_after)) {
    ZeroBucket z;
    z.begin = b.begin;
    z.count = b.count;
    z.padded = (b.count + unit - 1) / unit * unit;
    z.shard = z.padded / dp;
    buckets_.push_back(z);
    real_ += z.count;
    padded_ += z.padded;
  }
  // Owned runs in flat order: buckets come in reverse flat order, ranks ascending within one.
  for (auto b = buckets_.rbegin(); b != buckets_.rend(); ++b) {
    for (int r = 0; r < dp; ++r) {
      const std::int64_t n = b->owned_count(r);
      if (n == 0) continue;
      if (!runs_.empty() && runs_.back().owner == r &&
          runs_.back().begin + runs_.back().count == b->owned_begin(r)) {
        runs_.back().count += n;
      } else {
        runs_.push_back({r, b->owned_begin(r), n});
      }
    }
  }
  // This rank's runs cut at parameter boundaries.
  for (const OwnedRun& run : runs_) {
    if (run.owner != rank) continue;
    for (std::size_t e = 0; e < entries.size(); ++e) {
      const std::int64_t lo = std::max(run.begin, entries[e].offset);
      const std::int64_t held = shape_numel(held_shape(entries[e].shape, entries[e].holding));
      const std::int64_t hi = std::min(run.begin + run.count, entries[e].offset + held);
      if (lo < hi) pieces_.push_back({e, lo - entries[e].offset, lo, hi - lo});
    }
  }
}

std::int64_t ZeroPartition::owned_elements(int r) const {
  std::int64_t n = 0;
  for (const ZeroBucket& b : buckets_) n += b.owned_count(r);
  return n;
}

}  // namespace mixpar::ch05
