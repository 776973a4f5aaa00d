// Software FP16/BF16/FP8 on their own terms: every bit pattern round-trips and decodes in
// order, golden values from docs/REFERENCE.md "Number formats", format_info() read off the
// implementation, and the bulk/span/FP64 conversions agreeing with the scalar ones.
// Agreement with the CUDA toolkit and Eigen lives in numerics_reference_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "numerics/formats.h"
#include "numerics_test_util.h"

namespace mixpar {
namespace {

using testing::Codec;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// decode -> encode gives the same bits for every non-NaN pattern; NaN patterns decode to NaN
// and encode back to the canonical NaN.
void expect_every_pattern_round_trips(const Codec& c, Saturation sat) {
  std::size_t bad = 0;
  for (std::uint32_t b = 0; b < c.patterns(); ++b) {
    const float f = c.decode(b);
    const std::uint32_t back = c.encode(f, sat);
    const bool ok = std::isnan(f) ? back == c.nan_bits() : back == b;
    if (!ok && ++bad <= 8)
      ADD_FAILURE() << c.name << " pattern 0x" << std::hex << b << " -> " << f << " -> 0x" << back;
  }
  EXPECT_EQ(bad, 0u) << c.name;
}

// Positive patterns decode in strictly increasing order up to the first NaN, and a set sign
// bit negates exactly.
void expect_decode_monotone(const Codec& c) {
  float prev = -1.0f;
  std::uint32_t finite = 0;
  for (std::uint32_t b = 0; b < c.sign_bit(); ++b) {
    const float f = c.decode(b);
    if (std::isnan(f)) break;
    ASSERT_GT(f, prev) << c.name << " pattern 0x" << std::hex << b;
    prev = f;
    finite += std::isfinite(f) ? 1 : 0;
    const float neg = c.decode(b | c.sign_bit());
    ASSERT_EQ(testing::float_bits(neg), testing::float_bits(-f)) << c.name << " 0x" << b;
  }
  EXPECT_GT(finite, 0u);
}

TEST(Half, EveryPatternRoundTrips) {
  expect_every_pattern_round_trips(testing::kHalfCodec, Saturation::kNoSat);
}
TEST(BFloat16, EveryPatternRoundTrips) {
  expect_every_pattern_round_trips(testing::kBf16Codec, Saturation::kNoSat);
}
TEST(Float8E4M3, EveryPatternRoundTripsInBothModes) {
  expect_every_pattern_round_trips(testing::kE4M3Codec, Saturation::kSatFinite);
  expect_every_pattern_round_trips(testing::kE4M3Codec, Saturation::kNoSat);
}
TEST(Float8E5M2, EveryPatternRoundTripsInBothModes) {
  // +-inf patterns round-trip only without saturation; with it they become +-max.
  expect_every_pattern_round_trips(testing::kE5M2Codec, Saturation::kNoSat);
  EXPECT_EQ(float_to_e5m2_bits(e5m2_bits_to_float(0x7C), Saturation::kSatFinite), 0x7B);
}
TEST(Half, DecodeIsMonotoneOverPositivePatterns) { expect_decode_monotone(testing::kHalfCodec); }
TEST(BFloat16, DecodeIsMonotoneOverPositivePatterns) {
  expect_decode_monotone(testing::kBf16Codec);
}
TEST(Float8E4M3, DecodeIsMonotoneOverPositivePatterns) {
  expect_decode_monotone(testing::kE4M3Codec);
}
TEST(Float8E5M2, DecodeIsMonotoneOverPositivePatterns) {
  expect_decode_monotone(testing::kE5M2Codec);
}

TEST(Float8E4M3, HasNoInfinityAndOnlyTwoNaNs) {
  for (std::uint32_t b = 0; b < 256; ++b) {
    const float f = e4m3_bits_to_float(static_cast<std::uint8_t>(b));
    EXPECT_FALSE(std::isinf(f)) << b;
    EXPECT_EQ(std::isnan(f), b == 0x7F || b == 0xFF) << b;
  }
  EXPECT_EQ(e4m3_bits_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_bits_to_float(0x78), 256.0f);  // top exponent is an ordinary binade
}

TEST(Half, GoldenValues) {
  EXPECT_EQ(Half(3.14159f).to_float(), 3.140625f);
  EXPECT_EQ(Half(70000.0f).to_float(), kInf);
  EXPECT_EQ(Half(-70000.0f).to_float(), -kInf);
  EXPECT_EQ(Half(1e-8f).bits, 0x0000);
  EXPECT_EQ(Half(6e-8f).to_float(), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(Half(0.5f + 1e-7f).to_float(), 0.5f);
  EXPECT_EQ(Half(65519.99f).to_float(), 65504.0f);
  EXPECT_EQ(Half(65520.0f).to_float(), kInf);
  EXPECT_EQ(Half(1.0f + std::ldexp(1.0f, -11)).bits, 0x3C00);      // tie to even: down
  EXPECT_EQ(Half(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3C02);  // tie to even: up
  EXPECT_EQ(Half(-0.0f).bits, 0x8000);
  EXPECT_EQ(Half(kNaN).bits, 0x7FFF);  // __float2half_rn's canonical NaN
  EXPECT_EQ(Half(-kNaN).bits, 0x7FFF);
}

TEST(BFloat16, GoldenValues) {
  EXPECT_EQ(BFloat16(3.14159f).to_float(), 3.140625f);
  EXPECT_TRUE(std::isfinite(BFloat16(70000.0f).to_float()));
  EXPECT_EQ(BFloat16(70000.0f).to_float(), 70144.0f);
  EXPECT_EQ(BFloat16(0.5f + 1e-7f).to_float(), 0.5f);
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::max()).to_float(), kInf);  // rounds past max
  EXPECT_EQ(BFloat16(std::bit_cast<float>(0x3F808000u)).bits, 0x3F80);      // tie to even: down
  EXPECT_EQ(BFloat16(std::bit_cast<float>(0x3F818000u)).bits, 0x3F82);      // tie to even: up
  EXPECT_EQ(BFloat16(kNaN).bits, 0x7FFF);  // __float2bfloat16_rn's canonical NaN
}

TEST(Float8E4M3, GoldenValuesInBothModes) {
  using enum Saturation;
  EXPECT_EQ(float_to_e4m3_bits(448.0f, kNoSat), 0x7E);
  EXPECT_EQ(float_to_e4m3_bits(464.0f, kNoSat), 0x7E);  // max + ulp/2 ties to the even max
  EXPECT_EQ(float_to_e4m3_bits(464.1f, kNoSat), 0x7F);  // past it: NaN, no infinity exists
  EXPECT_EQ(float_to_e4m3_bits(-464.1f, kNoSat), 0xFF);
  EXPECT_EQ(float_to_e4m3_bits(1e6f, kSatFinite), 0x7E);
  EXPECT_EQ(float_to_e4m3_bits(-kInf, kSatFinite), 0xFE);
  EXPECT_EQ(float_to_e4m3_bits(kInf, kNoSat), 0x7F);
  EXPECT_EQ(float_to_e4m3_bits(-kNaN, kSatFinite), 0x7F);
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(1.0f, -10), kNoSat), 0x00);  // min sub/2 ties to 0
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(1.1f, -10), kNoSat), 0x01);
  EXPECT_EQ(Float8E4M3(3.14159f).to_float(), 3.25f);
}

TEST(Float8E5M2, GoldenValuesInBothModes) {
  using enum Saturation;
  EXPECT_EQ(float_to_e5m2_bits(57344.0f, kNoSat), 0x7B);
  EXPECT_EQ(float_to_e5m2_bits(61439.99f, kNoSat), 0x7B);
  EXPECT_EQ(float_to_e5m2_bits(61440.0f, kNoSat), 0x7C);  // ties to the odd max: up, to inf
  EXPECT_EQ(float_to_e5m2_bits(61440.0f, kSatFinite), 0x7B);
  EXPECT_EQ(float_to_e5m2_bits(-kInf, kSatFinite), 0xFB);  // CUDA SATFINITE clamps inf too
  EXPECT_EQ(float_to_e5m2_bits(-kInf, kNoSat), 0xFC);
  EXPECT_EQ(float_to_e5m2_bits(-kNaN, kNoSat), 0x7F);
  EXPECT_EQ(Float8E5M2(3.14159f).to_float(), 3.0f);
}

TEST(Format, InfoMatchesReferenceTable) {
  struct Row {
    DType t;
    double max, min_normal, min_sub, eps;
    int e, m, bias;
    bool inf;
  };
  const Row rows[] = {
      {DType::kF32, std::numeric_limits<float>::max(), 0x1p-126, 0x1p-149, 0x1p-23, 8, 23, 127,
       true},
      {DType::kF16, 65504, 0x1p-14, 0x1p-24, 0x1p-10, 5, 10, 15, true},
      {DType::kBF16, 0x1.FEp127, 0x1p-126, 0x1p-133, 0x1p-7, 8, 7, 127, true},
      {DType::kE4M3, 448, 0x1p-6, 0x1p-9, 0x1p-3, 4, 3, 7, false},
      {DType::kE5M2, 57344, 0x1p-14, 0x1p-16, 0x1p-2, 5, 2, 15, true},
  };
  for (const Row& r : rows) {
    const FormatInfo info = format_info(r.t);
    SCOPED_TRACE(std::string(info.name));
    EXPECT_EQ(info.dtype, r.t);
    EXPECT_EQ(info.max, r.max);
    EXPECT_EQ(info.min_normal, r.min_normal);
    EXPECT_EQ(info.min_subnormal, r.min_sub);
    EXPECT_EQ(info.epsilon, r.eps);
    EXPECT_EQ(info.exponent_bits, r.e);
    EXPECT_EQ(info.mantissa_bits, r.m);
    EXPECT_EQ(info.bias, r.bias);
    EXPECT_EQ(info.has_infinity, r.inf);
    EXPECT_DOUBLE_EQ(info.decimal_digits, std::log10(std::ldexp(1.0, r.m + 1)));
  }
  EXPECT_EQ(format_info(DType::kF16).name, "fp16");
  EXPECT_THROW(format_info(DType::kF64), std::invalid_argument);
}

TEST(Numerics, RoundToAnswersWhatAValueBecomes) {
  EXPECT_EQ(round_to(DType::kF16, 3.14159f), 3.140625f);
  EXPECT_EQ(round_to(DType::kBF16, 3.14159f), 3.140625f);
  EXPECT_EQ(round_to(DType::kE4M3, 1000.0f), 448.0f);
  EXPECT_TRUE(std::isnan(round_to(DType::kE4M3, 1000.0f, Saturation::kNoSat)));
  EXPECT_EQ(round_to(DType::kE5M2, 1e6f, Saturation::kNoSat), kInf);
  EXPECT_EQ(round_to(DType::kF32, 3.14159f), 3.14159f);
  EXPECT_EQ(round_to(DType::kF64, 3.14159f), 3.14159f);
}

// FP64 -> 16/8-bit rounds the double once. Rounding to FP32 first lands exactly on the
// midpoint 1 + 2^-11 and then ties down to 1.0: the classic double-rounding error.
TEST(Numerics, Float64RoundsOnceNotTwice) {
  const double d = 1.0 + 0x1p-11 + 0x1p-40;
  EXPECT_EQ(float_to_half_bits(static_cast<float>(d)), 0x3C00);  // the double-rounding answer
  EXPECT_EQ(double_to_half_bits(d), 0x3C01);
  std::uint16_t out = 0;
  convert(&d, DType::kF64, &out, DType::kF16, 1);
  EXPECT_EQ(out, 0x3C01);
  EXPECT_EQ(double_to_bf16_bits(1.0 + 0x1p-8 + 0x1p-40), 0x3F81);
  EXPECT_EQ(double_to_e4m3_bits(1.0 + 0x1p-4 + 0x1p-40), 0x39);
  EXPECT_EQ(double_to_e5m2_bits(1.0 + 0x1p-3 + 0x1p-40), 0x3D);
  EXPECT_EQ(double_to_e4m3_bits(1e300, Saturation::kNoSat), 0x7F);
  EXPECT_EQ(double_to_e5m2_bits(-1e300, Saturation::kSatFinite), 0xFB);
  EXPECT_EQ(double_to_half_bits(1e-300), 0x0000);
}

// Values every format can round: all FP16 patterns decoded, the E4M3/E5M2 extremes, and FP32
// specials; then each bulk pair is checked element by element against scalar composition.
std::vector<float> bulk_inputs() {
  std::vector<float> v;
  for (std::uint32_t b = 0; b < 65536; b += 7)
    v.push_back(half_bits_to_float(static_cast<std::uint16_t>(b)));
  for (float f : {0.0f, -0.0f, 464.0f, 465.0f, 61440.0f, 1e30f, -1e30f, kInf, -kInf, kNaN})
    v.push_back(f);
  return v;  // 9363 + 10 elements: several chunks and a ragged tail
}

float scalar_round(DType t, float f, Saturation sat) { return round_to(t, f, sat); }

TEST(Convert, EveryPairOfDTypesMatchesTheScalarPath) {
  const std::vector<float> in = bulk_inputs();
  const std::size_t n = in.size();
  for (Saturation sat : {Saturation::kSatFinite, Saturation::kNoSat}) {
    for (DType s : kAllDTypes) {
      // Source buffer: the inputs stored in s.
      std::vector<std::byte> src(n * dtype_size(s));
      convert(in.data(), DType::kF32, src.data(), s, n, sat);
      std::vector<float> src_f(n);
      convert(src.data(), s, src_f.data(), DType::kF32, n, sat);
      for (DType d : kAllDTypes) {
        std::vector<std::byte> dst(n * dtype_size(d));
        convert(src.data(), s, dst.data(), d, n, sat);
        std::vector<double> got(n);
        convert(dst.data(), d, got.data(), DType::kF64, n, sat);
        std::size_t bad = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const double want = scalar_round(d, src_f[i], sat);
          const bool same = std::isnan(want) ? std::isnan(got[i]) : got[i] == want;
          if (!same && ++bad <= 3)
            ADD_FAILURE() << dtype_name(s) << "->" << dtype_name(d) << " [" << i << "] " << src_f[i]
                          << ": got " << got[i] << ", want " << want;
        }
        EXPECT_EQ(bad, 0u) << dtype_name(s) << " -> " << dtype_name(d);
      }
    }
  }
}

TEST(Convert, SpansMatchScalarsAndRejectSizeMismatch) {
  const std::vector<float> in = bulk_inputs();
  std::vector<Half> h(in.size());
  std::vector<BFloat16> b(in.size());
  std::vector<Float8E4M3> e4(in.size());
  std::vector<Float8E5M2> e5(in.size());
  convert(in, std::span<Half>(h));
  convert(in, std::span<BFloat16>(b));
  convert(in, std::span<Float8E4M3>(e4), Saturation::kNoSat);
  convert(in, std::span<Float8E5M2>(e5), Saturation::kNoSat);
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(h[i].bits, float_to_half_bits(in[i])) << i;
    ASSERT_EQ(b[i].bits, float_to_bf16_bits(in[i])) << i;
    ASSERT_EQ(e4[i].bits, float_to_e4m3_bits(in[i], Saturation::kNoSat)) << i;
    ASSERT_EQ(e5[i].bits, float_to_e5m2_bits(in[i], Saturation::kNoSat)) << i;
  }
  std::vector<float> back(in.size());
  convert(std::span<const Half>(h), std::span<float>(back));
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(testing::float_bits(back[i]), testing::float_bits(h[i].to_float())) << i;
  }
  std::vector<Half> short_out(in.size() - 1);
  EXPECT_THROW(convert(in, std::span<Half>(short_out)), std::invalid_argument);
}

}  // namespace
}  // namespace mixpar
