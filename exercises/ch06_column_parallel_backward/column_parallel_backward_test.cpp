// column_parallel_backward against chapter 6's ColumnParallelLinear on t = 1, 2, 4 ranks of a
// local tp group: each rank's dW is the layer's dW (its columns of the full dW), and the
// partial dx summed by chapter 6's f (its backward all-reduce) is the layer's dx, which is the
// unsplit layer's dx (ops::linear_backward). Small integer inputs keep every product and sum
// exact, so the comparisons are bit for bit whatever the order of the sums.
#include "ch06_column_parallel_backward/column_parallel_backward.h"

#include <gtest/gtest.h>

#include <cstddef>

#include "ch06_tensor_parallel/column_parallel_linear.h"
#include "ch06_tensor_parallel/tp_collectives.h"
#include "comm/local_backend.h"
#include "ops/linear.h"

namespace mixpar::exercises {
namespace {

constexpr std::int64_t kB = 3, kIn = 5, kOut = 8;

Tensor integers(Shape shape, int mul, int add, int mod) {
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>((static_cast<int>(i) * mul + add) % mod - mod / 2);
  }
  return Tensor::from_floats(v, std::move(shape));
}

void check(int t) {
  const Tensor x = integers({kB, kIn}, 3, 1, 5), w = integers({kIn, kOut}, 5, 2, 7);
  const Tensor b = integers({kOut}, 1, 0, 3), dy = integers({kB, kOut}, 7, 3, 4);
  // The unsplit layer's gradients.
  Tensor dx_full = Tensor::empty({kB, kIn}, DType::kF32);
  Tensor dw_full = Tensor::empty({kIn, kOut}, DType::kF32), db_full = Tensor::empty({kOut}, DType::kF32);
  ops::linear_backward(x, w, dy, &dx_full, dw_full, &db_full);
  const std::int64_t os = kOut / t;
  run_local(t, [&](Communicator& comm) {
    const int r = comm.rank();
    ch06::TpCollectives group(comm);
    ch06::ColumnParallelLinear layer{group, ch06::column_block(w, r, t),
                                     ch06::column_block(b, r, t),
                                     Tensor::empty({kIn, os}, DType::kF32),
                                     Tensor::empty({os}, DType::kF32)};
    const Tensor dy_r = ch06::column_block(dy, r, t);
    Tensor dx_layer = Tensor::empty({kB, kIn}, DType::kF32);
    layer.backward(x, dy_r, &dx_layer);

    const ColumnParallelGrads g = column_parallel_backward(
        x.to_floats(), layer.w.to_floats(), dy_r.to_floats(), kB, kIn, os);
    ASSERT_EQ(g.dw_shard.size(), static_cast<std::size_t>(kIn * os)) << "t " << t;
    ASSERT_EQ(g.dx_partial.size(), static_cast<std::size_t>(kB * kIn)) << "t " << t;
    EXPECT_EQ(g.dw_shard, layer.dw.to_floats()) << "t " << t << " rank " << r << ": dW";
    EXPECT_EQ(g.dw_shard, ch06::column_block(dw_full, r, t).to_floats())
        << "t " << t << " rank " << r << ": dW is this rank's columns of the full dW";
    // f's backward: the all-reduce SUM over the tp group of every rank's partial dx.
    Tensor dx = Tensor::from_floats(g.dx_partial, {kB, kIn});
    group.f_backward(dx);
    EXPECT_EQ(dx.to_floats(), dx_layer.to_floats()) << "t " << t << " rank " << r << ": dx";
    EXPECT_EQ(dx.to_floats(), dx_full.to_floats()) << "t " << t << " rank " << r << ": dx";
  });
}

TEST(ColumnParallelBackward, OneShardIsTheWholeLayer) { check(1); }
TEST(ColumnParallelBackward, ShardsHoldTheirColumnsOfDwAndSumToDx) {
  check(2);
  check(4);
}

}  // namespace
}  // namespace mixpar::exercises
