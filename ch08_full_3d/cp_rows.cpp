#include "cp_rows.h"

namespace mixpar::ch08 {

TokenBatch cp_rows(const TokenBatch& b, const std::vector<std::int64_t>& positions) {
  TokenBatch out = b;
  out.T = static_cast<std::int64_t>(positions.size());
  out.inputs.clear();
  out.targets.clear();
  for (std::int64_t r = 0; r < b.B; ++r) {
    for (std::int64_t p : positions) {
      out.inputs.push_back(b.inputs[static_cast<std::size_t>(r * b.T + p)]);
      out.targets.push_back(b.targets[static_cast<std::size_t>(r * b.T + p)]);
    }
  }
  return out;
}

}  // namespace mixpar::ch08
