// The column-parallel then row-parallel pair (Megatron's MLP without the GELU) equals the
// unsplit pair of linear layers: outputs and every gradient, on 2 and 4 ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ch06_tensor_parallel/column_parallel_linear.h"
#include "ch06_tensor_parallel/row_parallel_linear.h"
#include "ch06_tensor_parallel/tp_collectives.h"
#include "comm/local_backend.h"
#include "ops/linear.h"
#include "random/philox.h"

namespace mixpar::ch06 {
namespace {

Tensor normal(Shape s, std::uint64_t seed) {
  Tensor t = Tensor::empty(std::move(s), DType::kF32);
  Philox gen(seed);
  fill_normal(t, gen, 0.0f, 1.0f);
  return t;
}

double max_diff(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_floats(), y = b.to_floats();
  double d = x.size() == y.size() ? 0 : INFINITY;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
    d = std::max(d, double(std::fabs(x[i] - y[i])));
  }
  return d;
}

TEST(ParallelLinear, ColumnThenRowEqualsTheUnsplitPairForwardAndBackward) {
  const std::int64_t N = 6, C = 8, H = 16;
  const Tensor x = normal({N, C}, 1), w1 = normal({C, H}, 2), b1 = normal({H}, 3);
  const Tensor w2 = normal({H, C}, 4), b2 = normal({C}, 5), dy = normal({N, C}, 6);
  // The unsplit pair: h = x w1 + b1, y = h w2 + b2, and its backward.
  Tensor h = Tensor::empty({N, H}, DType::kF32), y = Tensor::empty({N, C}, DType::kF32);
  ops::linear_forward(x, w1, &b1, h);
  ops::linear_forward(h, w2, &b2, y);
  Tensor dh = Tensor::empty({N, H}, DType::kF32), dx = Tensor::empty({N, C}, DType::kF32);
  Tensor dw1 = Tensor::empty({C, H}, DType::kF32), db1 = Tensor::empty({H}, DType::kF32);
  Tensor dw2 = Tensor::empty({H, C}, DType::kF32), db2 = Tensor::empty({C}, DType::kF32);
  ops::linear_backward(h, w2, dy, &dh, dw2, &db2);
  ops::linear_backward(x, w1, dh, &dx, dw1, &db1);
  for (int tp : {2, 4}) {
    run_local(tp, [&](Communicator& comm) {
      const int r = comm.rank();
      TpCollectives group(comm);  // f and g over comm, run by the layers bound to it
      ColumnParallelLinear col{group, column_block(w1, r, tp), column_block(b1, r, tp),
                               Tensor::empty({C, H / tp}, DType::kF32),
                               Tensor::empty({H / tp}, DType::kF32)};
      RowParallelLinear row{group, row_block(w2, r, tp), b2.clone(),
                            Tensor::empty({H / tp, C}, DType::kF32),
                            Tensor::empty({C}, DType::kF32)};
      Tensor h_r = Tensor::empty({N, H / tp}, DType::kF32);
      Tensor y_tp = Tensor::empty({N, C}, DType::kF32);
      col.forward(x, h_r);
      row.forward(h_r, y_tp);
      Tensor dh_r = Tensor::empty({N, H / tp}, DType::kF32);
      Tensor dx_tp = Tensor::empty({N, C}, DType::kF32);
      row.backward(h_r, dy, &dh_r);
      col.backward(x, dh_r, &dx_tp);
      // f32, sums over at most H = 16 products split into tp partial sums: a few ulps of
      // values of order sqrt(H) ~ 4.
      constexpr double kTol = 1e-5;
      EXPECT_LE(max_diff(y_tp, y), kTol) << "y, tp " << tp;
      EXPECT_LE(max_diff(dx_tp, dx), kTol) << "dx, tp " << tp;
      EXPECT_LE(max_diff(h_r, column_block(h, r, tp)), kTol) << "h: whole columns, no sum";
      EXPECT_LE(max_diff(col.dw, column_block(dw1, r, tp)), kTol);
      EXPECT_LE(max_diff(row.dw, row_block(dw2, r, tp)), kTol);
      EXPECT_EQ(max_diff(row.db, db2), 0.0) << "the row-parallel bias: whole, once";
      EXPECT_EQ(comm.traffic().totals("all_reduce").calls, 2) << "one f, one g";
    });
  }
}

}  // namespace
}  // namespace mixpar::ch06
