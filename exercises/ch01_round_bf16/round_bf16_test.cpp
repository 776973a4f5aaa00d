// round_to_bf16 against the numerics library's conversion (bit-identical to the CUDA
// toolkit's __float2bfloat16_rn): every case class the README names, then a million values.
#include "ch01_round_bf16/round_bf16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <random>

#include "numerics/formats.h"

namespace mixpar::exercises {
namespace {

float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }

TEST(RoundToBf16, KeepsExactValuesAndSigns) {
  for (float v : {0.0f, -0.0f, 1.0f, -2.0f, 0.5f, 3.140625f, 65536.0f}) {
    EXPECT_EQ(round_to_bf16(v), float_to_bf16_bits(v)) << v;
  }
}

TEST(RoundToBf16, RoundsToNearest) {
  // 1 + 2^-8 + 2^-10 lies above the midpoint between 1 and 1 + 2^-7: rounds up.
  EXPECT_EQ(round_to_bf16(from_bits(0x3f808001u)), 0x3f81u);
  EXPECT_EQ(round_to_bf16(from_bits(0x3f807fffu)), 0x3f80u);
  EXPECT_EQ(round_to_bf16(3.14159f), float_to_bf16_bits(3.14159f));
}

TEST(RoundToBf16, BreaksTiesToEven) {
  EXPECT_EQ(round_to_bf16(from_bits(0x3f808000u)), 0x3f80u);  // tie, last kept bit 0: down
  EXPECT_EQ(round_to_bf16(from_bits(0x3f818000u)), 0x3f82u);  // tie, last kept bit 1: up
  EXPECT_EQ(round_to_bf16(from_bits(0xbf818000u)), 0xbf82u);  // the same for negatives
}

TEST(RoundToBf16, OverflowsToInfinityAndKeepsInfinities) {
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80u);
  EXPECT_EQ(round_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80u);
}

TEST(RoundToBf16, KeepsNaNANaN) {
  // A NaN whose set mantissa bits are all in the low 16: cutting them would give inf.
  for (std::uint32_t b : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    const std::uint16_t r = round_to_bf16(from_bits(b));
    EXPECT_EQ(r & 0x7f80u, 0x7f80u) << std::hex << b;
    EXPECT_NE(r & 0x007fu, 0u) << std::hex << b;
    EXPECT_EQ(r >> 15, b >> 31) << std::hex << b;
  }
}

TEST(RoundToBf16, RoundsSubnormalsLikeNormals) {
  for (std::uint32_t b : {0x00000001u, 0x00008000u, 0x00018000u, 0x007fffffu, 0x80012345u}) {
    EXPECT_EQ(round_to_bf16(from_bits(b)), float_to_bf16_bits(from_bits(b))) << std::hex << b;
  }
}

TEST(RoundToBf16, EqualsTheLibraryOnAMillionRandomPatterns) {
  std::mt19937 gen(17);
  for (int i = 0; i < 1000000; ++i) {
    const float v = from_bits(gen());
    if (v != v) continue;  // NaNs are checked above (their payload may differ)
    ASSERT_EQ(round_to_bf16(v), float_to_bf16_bits(v)) << std::hex << std::bit_cast<std::uint32_t>(v);
  }
}

}  // namespace
}  // namespace mixpar::exercises
