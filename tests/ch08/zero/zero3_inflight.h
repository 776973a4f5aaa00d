// ZeRO-3's expected gathered bytes in flight, computed from the partition's units (not read
// from the run): what the trainer's ZeRO-3 tests compare the ledger's peak with.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ch05_zero/zero_stage3.h"

namespace mixpar::ch08::test {

// The gathered bytes ZeRO-3 holds while unit `order[k]` computes with prefetch p: the
// buffers of units order[k .. k + p] (the earlier ones released, a bucket shared by two
// units counted once), the most over both passes.
inline std::size_t zero3_inflight_max(const ch05::ZeroStage3& z, std::int64_t n_layer, int p,
                                      DType dtype) {
  std::vector<std::int64_t> fwd{-1}, bwd;
  for (std::int64_t l = 0; l <= n_layer; ++l) fwd.push_back(l);
  for (std::int64_t l = n_layer; l >= 0; --l) bwd.push_back(l);
  std::size_t most = 0;
  for (const auto* order : {&fwd, &bwd}) {
    for (std::size_t k = 0; k < order->size(); ++k) {
      std::vector<std::size_t> held;
      for (std::size_t j = k; j < order->size() && j <= k + std::size_t(p); ++j) {
        for (std::size_t b : z.unit_buckets((*order)[j])) {
          if (std::find(held.begin(), held.end(), b) == held.end()) held.push_back(b);
        }
      }
      std::size_t bytes = 0;
      for (std::size_t b : held) {
        bytes += static_cast<std::size_t>(z.partition().buckets()[b].padded) * dtype_size(dtype);
      }
      most = std::max(most, bytes);
    }
  }
  return most;
}

}  // namespace mixpar::ch08::test
