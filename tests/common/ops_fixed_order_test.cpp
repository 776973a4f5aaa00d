// ops::FixedOrderScope: inside it every GEMM is the k-ordered FP32 sum, rounded once, whatever
// the transposes, the output dtype and the thread count; outside it nothing changes.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "numerics/formats.h"
#include "ops/compute_threads.h"
#include "ops/fixed_order.h"
#include "ops/linear.h"
#include "ops/matmul.h"
#include "random/philox.h"
#include "tensor/tensor.h"

namespace mixpar {
namespace {

Tensor random_tensor(const Shape& shape, std::uint64_t seed, DType dtype = DType::kF32) {
  Tensor t = Tensor::empty(shape, dtype, MemCategory::kOther);
  Philox gen(seed);
  fill_normal(t, gen);
  return t;
}

// op(a)[i][k] of a [rows, cols] tensor's values.
float at(const std::vector<float>& v, std::int64_t cols, std::int64_t r, std::int64_t c) {
  return v[static_cast<std::size_t>(r * cols + c)];
}

// The definition: sum over k = 0, 1, ... of a_ik b_kj in FP32, no fused multiply-add.
std::vector<float> reference(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const std::vector<float> va = a.to_floats(), vb = b.to_floats();
  const std::int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  const std::int64_t n = tb ? b.dim(0) : b.dim(1);
  std::vector<float> out(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      volatile float acc = 0.0f;  // volatile: one rounding per product and per addition
      for (std::int64_t p = 0; p < k; ++p) {
        const float x = ta ? at(va, a.dim(1), p, i) : at(va, a.dim(1), i, p);
        const float y = tb ? at(vb, b.dim(1), j, p) : at(vb, b.dim(1), p, j);
        const volatile float prod = x * y;
        acc = acc + prod;
      }
      out[static_cast<std::size_t>(i * n + j)] = acc;
    }
  }
  return out;
}

TEST(FixedOrder, GemmIsTheKOrderedFp32SumForEveryTranspose) {
  const ops::FixedOrderScope fixed;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a = random_tensor(ta ? Shape{37, 13} : Shape{13, 37}, 1);
      const Tensor b = random_tensor(tb ? Shape{11, 37} : Shape{37, 11}, 2);
      Tensor out = Tensor::empty({13, 11}, DType::kF32, MemCategory::kOther);
      ops::matmul(a, b, out, ta, tb);
      EXPECT_EQ(out.to_floats(), reference(a, b, ta, tb)) << "ta " << ta << " tb " << tb;
    }
  }
}

TEST(FixedOrder, ResultsDoNotDependOnTheThreadCount) {
  const ops::FixedOrderScope fixed;
  const Tensor a = random_tensor({96, 80}, 3), b = random_tensor({80, 72}, 4);
  Tensor one = Tensor::empty({96, 72}, DType::kF32, MemCategory::kOther);
  Tensor two = Tensor::empty({96, 72}, DType::kF32, MemCategory::kOther);
  ops::set_compute_threads(1);
  ops::matmul(a, b, one);
  ops::set_compute_threads(2);
  ops::matmul(a, b, two);
  EXPECT_EQ(one.to_floats(), two.to_floats());
  EXPECT_EQ(one.to_floats(), reference(a, b, false, false));
}

TEST(FixedOrder, LinearForwardAddsTheBiasBeforeTheOneRounding) {
  const ops::FixedOrderScope fixed;
  const Tensor x = random_tensor({5, 9}, 5), w = random_tensor({9, 7}, 6);
  const Tensor bias = random_tensor({7}, 7);
  Tensor y = Tensor::empty({5, 7}, DType::kF16, MemCategory::kOther);
  ops::linear_forward(x, w, &bias, y);
  const std::vector<float> sums = reference(x, w, false, false), b = bias.to_floats();
  const std::vector<float> got = y.to_floats();
  for (std::size_t i = 0; i < sums.size(); ++i) {
    EXPECT_EQ(got[i], Half(sums[i] + b[i % 7]).to_float()) << i;
  }
}

TEST(FixedOrder, TheScopeEndsWithItsLifetime) {
  EXPECT_FALSE(ops::fixed_order_active());
  {
    const ops::FixedOrderScope outer;
    {
      const ops::FixedOrderScope inner;
      EXPECT_TRUE(ops::fixed_order_active());
    }
    EXPECT_TRUE(ops::fixed_order_active());
  }
  EXPECT_FALSE(ops::fixed_order_active());
}

}  // namespace
}  // namespace mixpar
