#include "ch06_column_parallel_backward/column_parallel_backward.h"

#include <cstddef>

namespace mixpar::exercises {

ColumnParallelGrads column_parallel_backward(const std::vector<float>& x,
                                             const std::vector<float>& w_shard,
                                             const std::vector<float>& dy_shard, std::int64_t batch,
                                             std::int64_t in, std::int64_t out_shard) {
  const auto at = [](std::int64_t i) { return static_cast<std::size_t>(i); };
  ColumnParallelGrads g;
  g.dx_partial.assign(at(batch * in), 0.0f);
  g.dw_shard.assign(at(in * out_shard), 0.0f);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t i = 0; i < in; ++i) {
      float dx = 0.0f;
      for (std::int64_t o = 0; o < out_shard; ++o) {
        const float dy = dy_shard[at(b * out_shard + o)];
        dx += dy * w_shard[at(i * out_shard + o)];
        g.dw_shard[at(i * out_shard + o)] += x[at(b * in + i)] * dy;
      }
      g.dx_partial[at(b * in + i)] = dx;
    }
  }
  return g;
}

}  // namespace mixpar::exercises
