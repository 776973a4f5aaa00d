// The sums and exponentials of the layers give the same bits wherever their tensors start in
// memory (ops/row_math.h): a parameter or activation at an offset that is a multiple of 4, 32
// or 64 bytes, on an SSE2, AVX2 or AVX-512 build. Before these were fixed-order, Eigen peeled
// scalar elements until each row was aligned to a whole vector, so on an AVX-512 build an
// interleaved pipeline's chunk layout (other parameter offsets than 1F1B's) changed the last
// bits of ln_f.bias, wpe and wte after three steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "model/layers.h"
#include <Eigen/Core>

#include "ops/eigen_gemm.h"
#include "ops/linear.h"
#include "ops/matmul.h"
#include "ops/row_math.h"
#include "ops_test_util.h"

namespace mixpar {
namespace {

using testing::random_tensor;

// lane_sum's order written out element by element: lane i mod 8, then the fixed tree.
float lane_sum_by_hand(const std::vector<float>& v) {
  float lane[8] = {};
  for (std::size_t i = 0; i < v.size(); ++i) lane[i % 8] += v[i];
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

TEST(RowMath, LaneSumIsTheOrderItDocumentsForEveryLength) {
  for (std::int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000}) {
    const Tensor t = random_tensor({std::max<std::int64_t>(n, 1)}, DType::kF32, 11 + n);
    std::vector<float> v(t.data_as<float>(), t.data_as<float>() + n);
    const float got = ops::lane_sum(v.data(), n);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(lane_sum_by_hand(v)))
        << "n " << n;
  }
}

TEST(RowMath, ExpInPlaceDependsOnTheIndexInTheRowNotOnTheAddress) {
  const Tensor src = random_tensor({77}, DType::kF32, 5, -20.0f, 5.0f);
  std::vector<float> ref(src.data_as<float>(), src.data_as<float>() + 77);
  ops::exp_in_place(ref.data(), 77);
  for (int off = 1; off < 16; ++off) {
    std::vector<float> buf(77 + 16);
    std::memcpy(buf.data() + off, src.data_as<float>(), 77 * sizeof(float));
    ops::exp_in_place(buf.data() + off, 77);
    EXPECT_EQ(std::memcmp(buf.data() + off, ref.data(), 77 * sizeof(float)), 0) << "offset " << off;
  }
  // And each value is an exponential (within a few ulp of the double one).
  for (int i = 0; i < 77; ++i) {
    const double want = std::exp(static_cast<double>(src.data_as<float>()[i]));
    EXPECT_NEAR(ref[static_cast<std::size_t>(i)], want, 4e-7 * want) << i;
  }
}

// Tensors of the given shapes placed `offset` floats into one buffer each, filled from `init`.
struct Placed {
  std::vector<Tensor> owners, t;
};
Placed place(const std::vector<Tensor>& init, std::int64_t offset) {
  Placed p;
  for (const Tensor& x : init) {
    Tensor owner = Tensor::zeros({x.numel() + 16}, x.dtype());
    Tensor v = owner.flat_slice(offset, x.numel()).view(x.shape());
    std::memcpy(v.data(), x.data(), x.nbytes());
    p.owners.push_back(owner);
    p.t.push_back(v);
  }
  return p;
}

std::vector<std::vector<std::uint8_t>> bytes_of(const std::vector<Tensor>& ts) {
  std::vector<std::vector<std::uint8_t>> out;
  for (const Tensor& t : ts) {
    const auto* b = static_cast<const std::uint8_t*>(t.data());
    out.emplace_back(b, b + t.nbytes());
  }
  return out;
}

// Runs op on the tensors placed at offsets 0..15 floats (every alignment modulo 64 bytes) and
// expects every output (all of them: ops write in place) bit-identical to offset 0's.
void expect_alignment_independent(const std::string& what, const std::vector<Tensor>& init,
                                  const std::function<void(std::vector<Tensor>&)>& op) {
  Placed base = place(init, 0);
  op(base.t);
  const auto want = bytes_of(base.t);
  for (std::int64_t off = 1; off < 16; ++off) {
    Placed p = place(init, off);
    op(p.t);
    const auto got = bytes_of(p.t);
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(got[i] == want[i]) << what << ": tensor " << i << " differs at offset "
                                     << off << " floats (" << 4 * off << " bytes)";
    }
  }
}

TEST(RowMath, LayerNormGivesTheSameBitsAtEveryAlignment) {
  const std::int64_t n = 6, c = 40;  // 40: five AVX2 vectors, two and a half AVX-512 ones
  expect_alignment_independent(
      "layernorm",
      {random_tensor({n, c}, DType::kF32, 1), random_tensor({c}, DType::kF32, 2),
       random_tensor({c}, DType::kF32, 3), Tensor::zeros({n, c}, DType::kF32),
       Tensor::zeros({n}, DType::kF32), Tensor::zeros({n}, DType::kF32),
       random_tensor({n, c}, DType::kF32, 4), Tensor::zeros({n, c}, DType::kF32),
       Tensor::zeros({c}, DType::kF32), Tensor::zeros({c}, DType::kF32)},
      [](std::vector<Tensor>& t) {
        layers::layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5]);
        layers::layernorm_backward(t[6], t[0], t[1], t[4], t[5], t[7], t[8], t[9]);
      });
}

TEST(RowMath, AttentionGivesTheSameBitsAtEveryAlignment) {
  // Rows of 1..37 scores: longer than a vector of 16 floats, so a row start's alignment
  // decides which elements a vectorised loop peels off as scalars.
  const std::int64_t b = 2, t = 37, ch = 24, heads = 2;
  expect_alignment_independent(
      "attention",
      {random_tensor({b, t, 3 * ch}, DType::kF32, 5, -2.0f, 2.0f),
       Tensor::zeros({b, t, ch}, DType::kF32), Tensor::zeros({b, heads, t, t}, DType::kF32),
       random_tensor({b, t, ch}, DType::kF32, 6), Tensor::zeros({b, t, 3 * ch}, DType::kF32),
       Tensor::zeros({b, heads, t, t}, DType::kF32)},
      [&](std::vector<Tensor>& x) {
        layers::attention_forward(x[0], heads, x[1], x[2]);
        layers::attention_backward(x[3], x[0], x[2], heads, x[4], x[5]);
      });
}

TEST(RowMath, CrossEntropyGivesTheSameBitsAtEveryAlignment) {
  const std::int64_t n = 5, v = 37;
  const std::vector<std::int32_t> targets{0, 36, 5, 17, 22};
  expect_alignment_independent(
      "cross-entropy",
      {random_tensor({n, v}, DType::kF32, 7, -4.0f, 4.0f), Tensor::zeros({n}, DType::kF32),
       Tensor::zeros({n, v}, DType::kF32)},
      [&](std::vector<Tensor>& x) {
        const double loss = layers::crossentropy_forward(x[0], targets, x[1]);
        ASSERT_GT(loss, 0.0);
        layers::crossentropy_backward(x[0], targets, 0, x[1], 1024.0f, x[2]);
      });
}

TEST(RowMath, BiasGradientGivesTheSameBitsAtEveryAlignment) {
  for (bool accumulate : {false, true}) {
    expect_alignment_independent(
        accumulate ? "bias grad (accumulating)" : "bias grad",
        {random_tensor({33, 45}, DType::kF32, 8), random_tensor({45}, DType::kF32, 9)},
        [&](std::vector<Tensor>& x) { ops::bias_grad(x[0], x[1], accumulate); });
  }
}

// The bias gradient is each column summed down the rows in order, row 0 first.
TEST(RowMath, BiasGradientSumsEachColumnInRowOrder) {
  const Tensor dy = random_tensor({19, 11}, DType::kF32, 10);
  Tensor db = Tensor::zeros({11}, DType::kF32);
  ops::bias_grad(dy, db, false);
  for (int j = 0; j < 11; ++j) {
    float s = 0;
    for (int r = 0; r < 19; ++r) s += dy.data_as<float>()[r * 11 + j];
    EXPECT_EQ(db.data_as<float>()[j], s) << j;
  }
}

// A bf16 dy is widened a row at a time as it is summed (no widened copy): the sums are those
// of the widened FP32 dy, bit for bit, with and without accumulation.
TEST(RowMath, Bf16BiasGradientEqualsTheWidenedFp32One) {
  const Tensor dy16 = random_tensor({37, 19}, DType::kF32, 14).to(DType::kBF16);
  const Tensor dy32 = dy16.to(DType::kF32);
  for (const bool accumulate : {false, true}) {
    Tensor db16 = random_tensor({19}, DType::kF32, 15), db32 = db16.to(DType::kF32);
    ops::bias_grad(dy16, db16, accumulate);
    ops::bias_grad(dy32, db32, accumulate);
    for (int j = 0; j < 19; ++j) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(db16.data_as<float>()[j]),
                std::bit_cast<std::uint32_t>(db32.data_as<float>()[j]))
          << j << (accumulate ? " accumulating" : "");
    }
  }
}

// Where Eigen still multiplies (FP64 references, attention's per-head products), it plans its
// GEMM panels with fixed cache sizes, not the ones this CPU reports, so a K = 1024 product sums
// in the same groups on a 32 KiB-L1 and a 48 KiB-L1 CPU. (FP32 matmuls take fma_gemm.h, whose
// order has no panels to plan: ops_fma_gemm_test.cpp.)
TEST(RowMath, EigenPlansGemmsWithFixedCacheSizesNotThisCpus) {
  const Tensor a = random_tensor({4, 1024}, DType::kF64, 12), b = random_tensor({1024, 4}, DType::kF64, 13);
  Tensor c = Tensor::zeros({4, 4}, DType::kF64);
  ops::matmul(a, b, c);
  EXPECT_EQ(Eigen::l1CacheSize(), ops::detail::kEigenCacheSizes[0]);
  EXPECT_EQ(Eigen::l2CacheSize(), ops::detail::kEigenCacheSizes[1]);
  EXPECT_EQ(Eigen::l3CacheSize(), ops::detail::kEigenCacheSizes[2]);
}

}  // namespace
}  // namespace mixpar
