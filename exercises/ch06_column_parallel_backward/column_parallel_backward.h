// Exercise (chapter 6): the backward of a column-parallel linear layer on tp rank r.
// Forward: y_r [B, out/t] = x [B, in] . w_r [in, out/t] (w split by output columns). Backward,
// given dy_r [B, out/t]:  dw_r = x^T . dy_r  (this rank's columns of the full dW, no
// communication) and dx_r = dy_r . w_r^T, a partial sum: the full dx is the sum of dx_r over
// the ranks, which Megatron's f operator all-reduces. Matrices are row-major float vectors.
// The tests compare it with chapter 6's ColumnParallelLinear (column_parallel_linear.h).
// See ch06_tensor_parallel/README.md and docs/REFERENCE.md (Tensor parallelism).
#pragma once

#include <cstdint>
#include <vector>

namespace mixpar::exercises {

struct ColumnParallelGrads {
  std::vector<float> dx_partial;  // [B, in]
  std::vector<float> dw_shard;    // [in, out/t]
};

ColumnParallelGrads column_parallel_backward(const std::vector<float>& x,
                                             const std::vector<float>& w_shard,
                                             const std::vector<float>& dy_shard, std::int64_t batch,
                                             std::int64_t in, std::int64_t out_shard);

}  // namespace mixpar::exercises
