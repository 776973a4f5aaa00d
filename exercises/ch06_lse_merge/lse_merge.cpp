#include "ch06_lse_merge/lse_merge.h"

namespace mixpar::exercises {

MergedAttention merge_attention(const std::vector<float>& o_a, const std::vector<float>& lse_a,
                                const std::vector<float>& o_b, const std::vector<float>& lse_b,
                                std::int64_t rows, std::int64_t d) {
  // Write this: the merge rule of the header, row by row.
  (void)o_a;
  (void)lse_a;
  (void)o_b;
  (void)lse_b;
  (void)rows;
  (void)d;
  return {};
}

}  // namespace mixpar::exercises
