// decode_e4m3 against the numerics library's E4M3 decoding (common/numerics/formats.h) on all
// 256 byte patterns, and the cases the format's design turns on: no infinity, one NaN pattern
// per sign, subnormals, 448.
#include "ch01_e4m3_decode/e4m3_decode.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "numerics/formats.h"

namespace mixpar::exercises {
namespace {

TEST(DecodeE4m3, DecodesNormalsAndTheLargestFinite) {
  EXPECT_EQ(decode_e4m3(0x38), 1.0f);     // exponent 7 = bias
  EXPECT_EQ(decode_e4m3(0x3c), 1.5f);
  EXPECT_EQ(decode_e4m3(0xc0), -2.0f);
  EXPECT_EQ(decode_e4m3(0x7e), 448.0f);   // S.1111.110: E4M3's largest
  EXPECT_EQ(decode_e4m3(0xfe), -448.0f);
}

TEST(DecodeE4m3, HasNoInfinityExponentFifteenIsABinade) {
  EXPECT_EQ(decode_e4m3(0x78), 256.0f);   // S.1111.000 would be inf in an IEEE-style format
  EXPECT_EQ(decode_e4m3(0x7d), 416.0f);
}

TEST(DecodeE4m3, OnlyAllOnesIsNaN) {
  EXPECT_TRUE(std::isnan(decode_e4m3(0x7f)));
  EXPECT_TRUE(std::isnan(decode_e4m3(0xff)));
  int nans = 0;
  for (int b = 0; b < 256; ++b) nans += std::isnan(decode_e4m3(static_cast<std::uint8_t>(b)));
  EXPECT_EQ(nans, 2);
}

TEST(DecodeE4m3, DecodesSubnormalsAndSignedZero) {
  EXPECT_EQ(decode_e4m3(0x01), 0x1p-9f);  // the smallest: 2^-6 x 1/8
  EXPECT_EQ(decode_e4m3(0x07), 0x1.cp-7f);
  EXPECT_EQ(decode_e4m3(0x08), 0x1p-6f);  // the smallest normal
  EXPECT_EQ(std::bit_cast<std::uint32_t>(decode_e4m3(0x80)), 0x80000000u);  // -0
  EXPECT_EQ(std::bit_cast<std::uint32_t>(decode_e4m3(0x00)), 0u);
}

TEST(DecodeE4m3, EqualsTheLibraryOnEveryByte) {
  for (int b = 0; b < 256; ++b) {
    const auto bits = static_cast<std::uint8_t>(b);
    const float want = e4m3_bits_to_float(bits), got = decode_e4m3(bits);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << b;
    } else {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want))
          << std::hex << "0x" << b << ": got " << got << ", want " << want;
    }
  }
}

}  // namespace
}  // namespace mixpar::exercises
