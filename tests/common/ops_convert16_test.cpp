// ops::convert16 (ops/convert16.h): every vector path this CPU has gives the bits of the
// software conversions of numerics/formats.h, the specification, on every BF16 and FP16 pattern
// and on FP32 patterns chosen to hit each rounding case (ties, the carry into the exponent,
// subnormal results, overflow to inf, NaN); a path the CPU lacks is skipped saying why.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "numerics/formats.h"
#include "ops/convert16.h"

namespace mixpar {
namespace {

using ops::ConvertPath;

constexpr ConvertPath kPaths[] = {ConvertPath::kPortable, ConvertPath::kAvx2F16c,
                                  ConvertPath::kAvx512};

// FP32 patterns: for every exponent and both signs, the mantissas around each rounding
// boundary of BF16 (16 bits dropped) and FP16 (13 bits dropped, more below its normal range),
// then 2^20 random patterns. Infinities and NaNs are among them (exponent 255).
std::vector<std::uint32_t> float_patterns() {
  std::vector<std::uint32_t> p;
  const std::uint32_t low[] = {0,       1,       0x0FFF,  0x1000,  0x1001,  0x1FFF,  0x2000,
                               0x3000,  0x7FFF,  0x8000,  0x8001,  0xFFFF,  0x10000, 0x18000,
                               0x17FFF, 0x7FFFFF, 0x7F8000, 0x7FEFFF, 0x7FF000, 0x400000};
  for (std::uint32_t sign = 0; sign < 2; ++sign) {
    for (std::uint32_t e = 0; e < 256; ++e) {
      for (const std::uint32_t m : low) {
        for (const std::uint32_t up : {0u, 0x10000u, 0x2000u, 0x4000u, 0x20000u}) {
          p.push_back((sign << 31) | (e << 23) | ((m | up) & 0x7FFFFF));
        }
      }
    }
  }
  std::mt19937 g(7);
  for (int i = 0; i < (1 << 20); ++i) p.push_back(static_cast<std::uint32_t>(g()));
  return p;
}

// Converts with `path` from offset 1 (unaligned, and a tail shorter than a vector).
template <class Src, class Dst>
bool convert_with(ConvertPath path, const std::vector<Src>& src, DType st, std::vector<Dst>& dst,
                  DType dt, std::string* why) {
  dst.assign(src.size(), Dst{});
  return ops::detail::convert16_with(path, src.data() + 1, st, dst.data() + 1, dt,
                                     src.size() - 1, why);
}

TEST(Convert16, EveryVectorPathGivesTheSoftwareConversionsBitsForEveryCase) {
  const std::vector<std::uint32_t> f32_bits = float_patterns();
  std::vector<float> floats(f32_bits.size());
  std::memcpy(floats.data(), f32_bits.data(), f32_bits.size() * 4);
  std::vector<std::uint16_t> halves(65536 + 7);
  for (std::size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<std::uint16_t>(i);
  std::string skipped;
  int compared = 0;
  for (const ConvertPath path : kPaths) {
    std::string why;
    std::vector<std::uint16_t> out16;
    std::vector<float> out32;
    if (!convert_with(path, floats, DType::kF32, out16, DType::kBF16, &why)) {
      skipped += std::string(ops::convert_path_name(path)) + ": " + why + "; ";
      continue;
    }
    ++compared;
    const std::string name(ops::convert_path_name(path));
    for (std::size_t i = 1; i < floats.size(); ++i) {
      ASSERT_EQ(out16[i], float_to_bf16_bits(floats[i])) << name << " f32 -> bf16 of 0x" << std::hex << f32_bits[i];
    }
    ASSERT_TRUE(convert_with(path, floats, DType::kF32, out16, DType::kF16, nullptr));
    for (std::size_t i = 1; i < floats.size(); ++i) {
      ASSERT_EQ(out16[i], float_to_half_bits(floats[i])) << name << " f32 -> f16 of 0x" << std::hex << f32_bits[i];
    }
    ASSERT_TRUE(convert_with(path, halves, DType::kBF16, out32, DType::kF32, nullptr));
    for (std::size_t i = 1; i < halves.size(); ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(out32[i]),
                std::bit_cast<std::uint32_t>(bf16_bits_to_float(halves[i])))
          << name << " bf16 0x" << std::hex << halves[i] << " -> f32";
    }
    ASSERT_TRUE(convert_with(path, halves, DType::kF16, out32, DType::kF32, nullptr));
    for (std::size_t i = 1; i < halves.size(); ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(out32[i]),
                std::bit_cast<std::uint32_t>(half_bits_to_float(halves[i])))
          << name << " f16 0x" << std::hex << halves[i] << " -> f32";
    }
  }
  if (!skipped.empty()) std::printf("not compared on this CPU: %s\n", skipped.c_str());
  EXPECT_GE(compared, 1);  // the portable path always runs
}

// The dispatching call (the widest path, split over threads when large) agrees with
// mixpar::convert for the four pairs, and leaves every other pair to it.
TEST(Convert16, TheDispatchedConversionMatchesConvertForEveryPairAndSize) {
  std::mt19937 g(11);
  for (const std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{1000}, std::size_t{300001}}) {
    std::vector<float> f(n);
    for (float& v : f) v = std::bit_cast<float>(static_cast<std::uint32_t>(g()));
    for (const DType t : {DType::kBF16, DType::kF16}) {
      std::vector<std::uint16_t> a(n), b(n);
      ops::convert16(f.data(), DType::kF32, a.data(), t, n);
      convert(f.data(), DType::kF32, b.data(), t, n);
      ASSERT_EQ(a, b) << dtype_name(t) << " n " << n;
      std::vector<std::uint32_t> x(n), y(n);
      ops::convert16(a.data(), t, x.data(), DType::kF32, n);
      convert(a.data(), t, y.data(), DType::kF32, n);
      ASSERT_EQ(x, y) << dtype_name(t) << " n " << n;
    }
    std::vector<double> d(n), e(n);
    ops::convert16(f.data(), DType::kF32, d.data(), DType::kF64, n);  // not a vector pair
    convert(f.data(), DType::kF32, e.data(), DType::kF64, n);
    ASSERT_EQ(std::memcmp(d.data(), e.data(), n * sizeof(double)), 0);
  }
  std::string why;
  double dummy = 0;
  EXPECT_FALSE(ops::detail::convert16_with(ConvertPath::kPortable, &dummy, DType::kF64, &dummy,
                                           DType::kF64, 1, &why));
  EXPECT_FALSE(why.empty());
  std::printf("convert16 path on this CPU: %s\n",
              std::string(ops::convert_path_name(ops::convert16_path())).c_str());
}

}  // namespace
}  // namespace mixpar
