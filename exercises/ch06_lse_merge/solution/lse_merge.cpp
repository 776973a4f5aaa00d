#include "ch06_lse_merge/lse_merge.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mixpar::exercises {

MergedAttention merge_attention(const std::vector<float>& o_a, const std::vector<float>& lse_a,
                                const std::vector<float>& o_b, const std::vector<float>& lse_b,
                                std::int64_t rows, std::int64_t d) {
  MergedAttention m;
  m.out.assign(static_cast<std::size_t>(rows * d), 0.0f);
  m.lse.assign(static_cast<std::size_t>(rows), -std::numeric_limits<float>::infinity());
  for (std::int64_t i = 0; i < rows; ++i) {
    const auto r = static_cast<std::size_t>(i);
    const float mx = std::max(lse_a[r], lse_b[r]);
    if (mx == -std::numeric_limits<float>::infinity()) continue;  // no key on either side
    // log(e^a + e^b) = mx + log(e^(a - mx) + e^(b - mx)): no exponent above 0.
    const float lse = mx + std::log(std::exp(lse_a[r] - mx) + std::exp(lse_b[r] - mx));
    const float wa = std::exp(lse_a[r] - lse), wb = std::exp(lse_b[r] - lse);
    for (std::int64_t c = 0; c < d; ++c) {
      const auto k = static_cast<std::size_t>(i * d + c);
      m.out[k] = wa * o_a[k] + wb * o_b[k];
    }
    m.lse[r] = lse;
  }
  return m;
}

}  // namespace mixpar::exercises
