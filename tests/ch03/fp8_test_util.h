// What chapter 3's FP8 tests share: seeded normal values to cast and multiply.
#pragma once

#include <cstddef>
#include <random>
#include <vector>

namespace mixpar::fp8::test_util {

// n values from N(0, sigma^2), the same for the same seed on every platform's mt19937.
inline std::vector<float> normal(std::size_t n, unsigned seed, float sigma = 1) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0, sigma);
  std::vector<float> x(n);
  for (float& v : x) v = d(g);
  return x;
}

}  // namespace mixpar::fp8::test_util
