// column_parallel_backward on t = 1, 2, 4 shards of one layer: the shards' dW are the full
// dW's columns, and the partial dx summed over the ranks (f's all-reduce) is the full dx.
// Small integer inputs keep every product and sum exact.
#include "ch06_column_parallel_backward/column_parallel_backward.h"

#include <gtest/gtest.h>

#include <cstddef>

namespace mixpar::exercises {
namespace {

constexpr std::int64_t kB = 3, kIn = 5, kOut = 8;

float xv(std::int64_t b, std::int64_t i) { return static_cast<float>((b + 2 * i) % 5 - 2); }
float wv(std::int64_t i, std::int64_t o) { return static_cast<float>((3 * i + o) % 7 - 3); }
float dyv(std::int64_t b, std::int64_t o) { return static_cast<float>((b * o + 1) % 4 - 1); }

void check(int t) {
  const std::int64_t os = kOut / t;
  std::vector<float> x;
  for (std::int64_t b = 0; b < kB; ++b) {
    for (std::int64_t i = 0; i < kIn; ++i) x.push_back(xv(b, i));
  }
  std::vector<float> dx_sum(static_cast<std::size_t>(kB * kIn), 0.0f);
  for (int r = 0; r < t; ++r) {
    std::vector<float> w, dy;
    for (std::int64_t i = 0; i < kIn; ++i) {
      for (std::int64_t o = 0; o < os; ++o) w.push_back(wv(i, r * os + o));
    }
    for (std::int64_t b = 0; b < kB; ++b) {
      for (std::int64_t o = 0; o < os; ++o) dy.push_back(dyv(b, r * os + o));
    }
    const ColumnParallelGrads g = column_parallel_backward(x, w, dy, kB, kIn, os);
    ASSERT_EQ(g.dw_shard.size(), static_cast<std::size_t>(kIn * os));
    ASSERT_EQ(g.dx_partial.size(), static_cast<std::size_t>(kB * kIn));
    for (std::int64_t i = 0; i < kIn; ++i) {
      for (std::int64_t o = 0; o < os; ++o) {
        float want = 0;
        for (std::int64_t b = 0; b < kB; ++b) want += xv(b, i) * dyv(b, r * os + o);
        EXPECT_EQ(g.dw_shard[static_cast<std::size_t>(i * os + o)], want)
            << "t " << t << " rank " << r << " dW[" << i << "][" << r * os + o << "]";
      }
    }
    for (std::size_t k = 0; k < dx_sum.size(); ++k) dx_sum[k] += g.dx_partial[k];
  }
  for (std::int64_t b = 0; b < kB; ++b) {
    for (std::int64_t i = 0; i < kIn; ++i) {
      float want = 0;
      for (std::int64_t o = 0; o < kOut; ++o) want += dyv(b, o) * wv(i, o);
      EXPECT_EQ(dx_sum[static_cast<std::size_t>(b * kIn + i)], want) << "t " << t;
    }
  }
}

TEST(ColumnParallelBackward, OneShardIsTheWholeLayer) { check(1); }
TEST(ColumnParallelBackward, ShardsHoldTheirColumnsOfDwAndSumToDx) {
  check(2);
  check(4);
}

}  // namespace
}  // namespace mixpar::exercises
