// ZeRO's flat partition (Rajbhandari et al. 2020; docs/REFERENCE.md, ZeRO). The gradients are
// reduced in chapter 4's buckets (reverse registration order, about bucket_cap bytes each, one
// contiguous range of the registry's flat buffer). Each bucket is padded to a multiple of
// dp x align elements and split evenly: rank r owns elements [r s, (r+1) s) of the padded
// bucket, s = padded / dp. A parameter may straddle two owners (and two buckets never share
// one). This is the bucket-wise form of the flat partition (PyTorch FSDP's FlatParameter
// shards the same way, one unit at a time): one reduce-scatter per bucket then hands every
// rank exactly its shard, while the backward of the next bucket still runs.
//
// A rank whose shard of a bucket is padding only (more ranks than elements) still joins the
// bucket's reduce-scatter and all-gather, and contributes zeros.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/gpt_params.h"

namespace mixpar::ch05 {

struct ZeroBucket {
  std::int64_t begin = 0, count = 0;  // real elements [begin, begin + count) of the flat buffer
  std::int64_t padded = 0;            // count rounded up to a multiple of dp x align
  std::int64_t shard = 0;             // padded / dp: every rank's share, padding included
  // The real elements rank r owns: [begin + r shard, ...) clipped to the bucket's end.
  std::int64_t owned_begin(int r) const;
  std::int64_t owned_count(int r) const;
};

// A run of one parameter's elements inside this rank's shards: what the optimizer steps.
struct ShardPiece {
  std::size_t entry = 0;          // registry entry
  std::int64_t entry_offset = 0;  // first element within the parameter
  std::int64_t flat = 0;          // first element in the registry's flat buffer
  std::int64_t count = 0;
};

// A run of the flat buffer owned by one rank, in flat order: the norm's canonical walk.
struct OwnedRun {
  int owner = 0;
  std::int64_t begin = 0, count = 0;
};

class ZeroPartition {
 public:
  // entries: laid out back to back in `dtype` (a registry's: each entry's held elements,
  // held_shape). InputError when dp < 1 or align < 1.
  // close_after: extra bucket boundaries (ch04::make_buckets; ZeRO-3's one bucket per block).
  ZeroPartition(std::span<const ParamEntry> entries, DType dtype, std::size_t bucket_cap_bytes,
                int dp, int rank, std::int64_t align = 1,
                const std::function<bool(std::size_t)>& close_after = {});

  int dp() const { return dp_; }
  int rank() const { return rank_; }
  const std::vector<ZeroBucket>& buckets() const { return buckets_; }
  // This rank's pieces, in flat order.
  const std::vector<ShardPiece>& pieces() const { return pieces_; }
  // Every rank's owned real elements, in ascending flat order (runs of one owner merged).
  const std::vector<OwnedRun>& runs() const { return runs_; }
  std::int64_t real_elements() const { return real_; }      // P: the parameters
  std::int64_t padded_elements() const { return padded_; }  // sum of the buckets' padded sizes
  std::int64_t owned_elements(int r) const;                 // real elements rank r owns

 private:
  int dp_, rank_;
  std::vector<ZeroBucket> buckets_;
  std::vector<ShardPiece> pieces_;
  std::vector<OwnedRun> runs_;
  std::int64_t real_ = 0, padded_ = 0;
};

}  // namespace mixpar::ch05
