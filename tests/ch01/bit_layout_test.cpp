// bit_layout tests: the sign/exponent/mantissa fields rebuild every value of every 16- and
// 8-bit pattern (exhaustively), the special patterns are where the lesson says they are, and
// encoding rounds once, to nearest, ties to even.
#include "bit_layout.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>

#include "report/format.h"

namespace mixpar::ch01 {
namespace {

// The first pattern whose fields do not rebuild the decoded value, as "index: a vs b".
std::string first_field_mismatch(DType t, std::uint32_t begin, std::uint32_t end,
                                 std::uint32_t step = 1) {
  for (std::uint64_t b = begin; b < end; b += step) {
    const auto bits = static_cast<std::uint32_t>(b);
    const BitFields f = decompose(t, bits);
    const double from_fields = value_from_fields(f), decoded = decode(t, bits);
    const bool both_nan = std::isnan(from_fields) && std::isnan(decoded);
    const bool nan_class_agrees = (f.value_class == ValueClass::kNaN) == std::isnan(decoded);
    const bool same =
        both_nan || (from_fields == decoded && std::signbit(from_fields) == std::signbit(decoded));
    if (!same || !nan_class_agrees) {
      return hex_bits(t, bits) + ": fields give " + exact_num(from_fields) +
             ", decoder gives " + exact_num(decoded);
    }
  }
  return "";
}

TEST(Layout, FieldsRebuildEveryFp16Pattern) {
  EXPECT_EQ(first_field_mismatch(DType::kF16, 0, 1u << 16), "");
}

TEST(Layout, FieldsRebuildEveryBf16Pattern) {
  EXPECT_EQ(first_field_mismatch(DType::kBF16, 0, 1u << 16), "");
}

TEST(Layout, FieldsRebuildEveryFp8Pattern) {
  EXPECT_EQ(first_field_mismatch(DType::kE4M3, 0, 256), "");
  EXPECT_EQ(first_field_mismatch(DType::kE5M2, 0, 256), "");
}

TEST(Layout, FieldsRebuildSampledFp32Patterns) {
  // 2^32 patterns are too many for a unit test; a prime stride visits every exponent with
  // varied mantissas, and the special patterns are checked on their own below.
  EXPECT_EQ(first_field_mismatch(DType::kF32, 0, 0xFFFFFFFFu, 65521), "");
  for (std::uint32_t bits : {0x00000000u, 0x80000000u, 0x00000001u, 0x007FFFFFu, 0x00800000u,
                             0x7F7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00000u}) {
    EXPECT_EQ(first_field_mismatch(DType::kF32, bits, bits + 1), "");
  }
}

struct ClassCounts {
  int inf = 0, nan = 0, subnormal = 0;
};
ClassCounts count_classes(DType t, std::uint32_t patterns) {
  ClassCounts c;
  for (std::uint32_t b = 0; b < patterns; ++b) {
    const ValueClass k = decompose(t, b).value_class;
    c.inf += k == ValueClass::kInfinity;
    c.nan += k == ValueClass::kNaN;
    c.subnormal += k == ValueClass::kSubnormal;
  }
  return c;
}

TEST(Layout, E4m3HasNoInfinityAndOnlyTwoNaNs) {
  const ClassCounts c = count_classes(DType::kE4M3, 256);
  EXPECT_EQ(c.inf, 0);
  EXPECT_EQ(c.nan, 2);  // 0x7F and 0xFF
  EXPECT_EQ(decompose(DType::kE4M3, 0x7F).value_class, ValueClass::kNaN);
  EXPECT_EQ(decompose(DType::kE4M3, 0x7E).value_class, ValueClass::kNormal);  // 448
  EXPECT_EQ(decode(DType::kE4M3, 0x7E), 448.0);
}

TEST(Layout, IeeeLikeFormatsSpendTheTopExponentOnInfAndNaN) {
  const ClassCounts e5m2 = count_classes(DType::kE5M2, 256);
  EXPECT_EQ(e5m2.inf, 2);
  EXPECT_EQ(e5m2.nan, 6);        // 2 signs x 3 non-zero mantissas
  EXPECT_EQ(e5m2.subnormal, 6);  // 2 signs x 3 non-zero mantissas under exponent 0
  const ClassCounts f16 = count_classes(DType::kF16, 1u << 16);
  EXPECT_EQ(f16.inf, 2);
  EXPECT_EQ(f16.nan, 2 * 1023);
  const ClassCounts bf16 = count_classes(DType::kBF16, 1u << 16);
  EXPECT_EQ(bf16.nan, 2 * 127);
}

TEST(Layout, PiInFp16Is0x4248WithTheFieldsOfTheDiagram) {
  const Encoded e = encode(DType::kF16, 3.14159);
  EXPECT_EQ(hex_bits(DType::kF16, e.bits), "0x4248");
  const BitFields f = decompose(DType::kF16, e.bits);
  EXPECT_EQ(f.sign, 0u);
  EXPECT_EQ(bit_string(f.exponent, f.exponent_bits), "10000");  // 16 - 15 = 2^1
  EXPECT_EQ(f.unbiased_exponent, 1);
  EXPECT_EQ(bit_string(f.mantissa, f.mantissa_bits), "1001001000");
  EXPECT_EQ(significand(f), 1.5703125);
}

TEST(Layout, HexBitsUseTwoDigitsPerByte) {
  EXPECT_EQ(hex_bits(DType::kF32, 0x40490fd0u), "0x40490fd0");
  EXPECT_EQ(hex_bits(DType::kBF16, 0x49u), "0x0049");
  EXPECT_EQ(hex_bits(DType::kE4M3, 0x7u), "0x07");
}

TEST(Encode, TiesRoundToEven) {
  // Spacing is 2 in [2048, 4096) for FP16: 2049 and 2051 are ties, going to the even mantissa.
  EXPECT_EQ(encode(DType::kF16, 2049).stored, 2048);
  EXPECT_EQ(encode(DType::kF16, 2051).stored, 2052);
  EXPECT_EQ(encode(DType::kBF16, 257).stored, 256);  // spacing 2 in [256, 512)
  EXPECT_EQ(encode(DType::kBF16, 259).stored, 260);
  EXPECT_EQ(encode(DType::kE4M3, 17).stored, 16);  // spacing 2 in [16, 32)
  EXPECT_EQ(encode(DType::kE4M3, 19).stored, 20);
}

TEST(Encode, RoundsOnceFromDoubleNotTwiceThroughFloat) {
  // x sits just above the FP16 tie 1 + 2^-11. FP32 rounds it onto the tie, and FP16 would
  // then round the tie to even (1.0); one correct rounding gives 1 + 2^-10.
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(static_cast<double>(static_cast<float>(x)), 1.0 + std::ldexp(1.0, -11));
  EXPECT_EQ(encode(DType::kF16, x).stored, 1.0 + std::ldexp(1.0, -10));
}

TEST(Encode, NegativeZeroKeepsItsSign) {
  EXPECT_EQ(encode(DType::kF16, -0.0).bits, 0x8000u);
  EXPECT_EQ(encode(DType::kE4M3, -0.0).bits, 0x80u);
}

TEST(Encode, ErrorsAreMeasuredAgainstTheInput) {
  const Encoded e = encode(DType::kF16, 3.14159);
  EXPECT_EQ(e.error(), 3.140625 - 3.14159);
  EXPECT_DOUBLE_EQ(e.rel_error(), (3.14159 - 3.140625) / 3.14159);
  EXPECT_TRUE(std::isnan(encode(DType::kF16, 70000).error()));  // inf has no finite error
  EXPECT_EQ(encode(DType::kF16, 0.0).rel_error(), 0.0);
}

TEST(FormatNumber, PowersOfTwoAreNamed) {
  EXPECT_EQ(power_of_two(std::ldexp(1.0, -14)), "2^-14");
  EXPECT_EQ(power_of_two(448), "");
  EXPECT_EQ(power_of_two(0), "");
  EXPECT_EQ(bit_string(0b101, 5), "00101");
}

}  // namespace
}  // namespace mixpar::ch01
