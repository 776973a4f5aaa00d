// Our float -> FP16/BF16/FP8 rounding against independent references, bit for bit: the CUDA
// toolkit's host conversions (cuda_fp16.hpp, cuda_bf16.hpp, cuda_fp8.hpp, compiled by g++)
// where the headers exist, Eigen::half / Eigen::bfloat16 where they do not, and always a
// nearest-by-search rounding, on every tie and boundary plus ten million random floats.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "numerics/formats.h"
#include "numerics_test_util.h"

#if MIXPAR_HAVE_CUDA_HEADERS
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#else
#include <Eigen/Core>
#endif

namespace mixpar {
namespace {

using testing::Codec;
using testing::count_mismatches;
using testing::Grid;
constexpr Saturation kModes[] = {Saturation::kSatFinite, Saturation::kNoSat};

const Grid& grid_of(const Codec& c) {
  static const Grid half = testing::make_grid(testing::kHalfCodec);
  static const Grid bf16 = testing::make_grid(testing::kBf16Codec);
  static const Grid e4m3 = testing::make_grid(testing::kE4M3Codec);
  static const Grid e5m2 = testing::make_grid(testing::kE5M2Codec);
  switch (c.dtype) {
    case DType::kF16: return half;
    case DType::kBF16: return bf16;
    case DType::kE4M3: return e4m3;
    default: return e5m2;
  }
}

std::string label(const Codec& c, Saturation sat, const char* what) {
  return std::string(c.name) + (sat == Saturation::kSatFinite ? " satfinite " : " nosat ") + what;
}

// ---- The independent search reference: every tie and boundary, every format and mode.
void expect_matches_search(const Codec& c) {
  const Grid& g = grid_of(c);
  const std::vector<float> inputs = testing::boundary_floats(g);
  for (Saturation sat : kModes) {
    const std::size_t bad = count_mismatches(
        inputs, [&](float x) { return c.encode(x, sat); },
        [&](float x) { return testing::search_round(c, g, x, sat); }, label(c, sat, "search"));
    EXPECT_EQ(bad, 0u) << label(c, sat, "boundaries");
  }
}
TEST(Half, MatchesNearestSearchOnEveryTie) { expect_matches_search(testing::kHalfCodec); }
TEST(BFloat16, MatchesNearestSearchOnEveryTie) { expect_matches_search(testing::kBf16Codec); }
TEST(Float8E4M3, MatchesNearestSearchOnEveryTie) { expect_matches_search(testing::kE4M3Codec); }
TEST(Float8E5M2, MatchesNearestSearchOnEveryTie) { expect_matches_search(testing::kE5M2Codec); }

// FP64 inputs a hair off each midpoint must round as the double says, not as its FP32 would.
void expect_double_matches_search(const Codec& c) {
  const Grid& g = grid_of(c);
  const std::vector<double> inputs = testing::double_rounding_traps(g);
  for (Saturation sat : kModes) {
    const std::size_t bad = count_mismatches(
        inputs, [&](double x) { return c.encode_double(x, sat); },
        [&](double x) { return testing::search_round(c, g, x, sat); }, label(c, sat, "f64"));
    EXPECT_EQ(bad, 0u) << label(c, sat, "double rounding");
  }
}
TEST(Half, Float64MatchesNearestSearchNextToEveryTie) {
  expect_double_matches_search(testing::kHalfCodec);
}
TEST(BFloat16, Float64MatchesNearestSearchNextToEveryTie) {
  expect_double_matches_search(testing::kBf16Codec);
}
TEST(Float8E4M3, Float64MatchesNearestSearchNextToEveryTie) {
  expect_double_matches_search(testing::kE4M3Codec);
}
TEST(Float8E5M2, Float64MatchesNearestSearchNextToEveryTie) {
  expect_double_matches_search(testing::kE5M2Codec);
}

#if MIXPAR_HAVE_CUDA_HEADERS
// ---- The CUDA toolkit's host code, the conversions every GPU kernel in the field uses.
std::uint32_t cuda_encode(const Codec& c, float x, Saturation sat) {
  const __nv_saturation_t s = sat == Saturation::kSatFinite ? __NV_SATFINITE : __NV_NOSAT;
  switch (c.dtype) {
    case DType::kF16: return __half_raw(__float2half_rn(x)).x;
    case DType::kBF16: return __nv_bfloat16_raw(__float2bfloat16_rn(x)).x;
    case DType::kE4M3: return __nv_cvt_float_to_fp8(x, s, __NV_E4M3);
    default: return __nv_cvt_float_to_fp8(x, s, __NV_E5M2);
  }
}
std::uint32_t cuda_encode_double(const Codec& c, double x, Saturation sat) {
  const __nv_saturation_t s = sat == Saturation::kSatFinite ? __NV_SATFINITE : __NV_NOSAT;
  switch (c.dtype) {
    case DType::kF16: return __half_raw(__double2half(x)).x;
    case DType::kBF16: return __nv_bfloat16_raw(__double2bfloat16(x)).x;
    case DType::kE4M3: return __nv_cvt_double_to_fp8(x, s, __NV_E4M3);
    default: return __nv_cvt_double_to_fp8(x, s, __NV_E5M2);
  }
}
float cuda_decode(const Codec& c, std::uint32_t b) {
  switch (c.dtype) {
    case DType::kF16: {
      __half_raw r;
      r.x = static_cast<unsigned short>(b);
      return __half2float(__half(r));
    }
    case DType::kBF16: {
      __nv_bfloat16_raw r;
      r.x = static_cast<unsigned short>(b);
      return __bfloat162float(__nv_bfloat16(r));
    }
    case DType::kE4M3:
      return __half2float(
          __half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3)));
    default:
      return __half2float(
          __half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E5M2)));
  }
}

void expect_matches_cuda(const Codec& c, const std::vector<float>& inputs, const char* what) {
  for (Saturation sat : kModes) {
    const std::size_t bad = count_mismatches(
        inputs, [&](float x) { return c.encode(x, sat); },
        [&](float x) { return cuda_encode(c, x, sat); }, label(c, sat, what));
    EXPECT_EQ(bad, 0u) << label(c, sat, what);
    if (c.bits == 16) break;  // one mode: FP16/BF16 have no saturation switch
  }
}
void expect_ties_match_cuda(const Codec& c) {
  expect_matches_cuda(c, testing::boundary_floats(grid_of(c)), "boundaries");
}
void expect_random_match_cuda(const Codec& c) {
  expect_matches_cuda(c, testing::random_floats(), "random");
}

TEST(Half, MatchesCudaOnEveryTie) { expect_ties_match_cuda(testing::kHalfCodec); }
TEST(BFloat16, MatchesCudaOnEveryTie) { expect_ties_match_cuda(testing::kBf16Codec); }
TEST(Float8E4M3, MatchesCudaOnEveryTieInBothModes) { expect_ties_match_cuda(testing::kE4M3Codec); }
TEST(Float8E5M2, MatchesCudaOnEveryTieInBothModes) { expect_ties_match_cuda(testing::kE5M2Codec); }
TEST(Half, MatchesCudaOnTenMillionRandomFloats) { expect_random_match_cuda(testing::kHalfCodec); }
TEST(BFloat16, MatchesCudaOnTenMillionRandomFloats) {
  expect_random_match_cuda(testing::kBf16Codec);
}
TEST(Float8E4M3, MatchesCudaOnTenMillionRandomFloats) {
  expect_random_match_cuda(testing::kE4M3Codec);
}
TEST(Float8E5M2, MatchesCudaOnTenMillionRandomFloats) {
  expect_random_match_cuda(testing::kE5M2Codec);
}

// All 2^32 FP32 patterns, every format and mode (minutes): the full proof, too slow
// for every run. `test_common --gtest_also_run_disabled_tests --gtest_filter='*EveryFloat*'`.
void expect_every_float_matches_cuda(const Codec& c) {
  for (Saturation sat : kModes) {
    std::uint64_t bad = 0;
    for (std::uint64_t u = 0; u < (1ull << 32); ++u) {
      const float x = std::bit_cast<float>(static_cast<std::uint32_t>(u));
      const std::uint32_t got = c.encode(x, sat), want = cuda_encode(c, x, sat);
      if (got != want && ++bad <= 8)
        ADD_FAILURE() << label(c, sat, "") << std::hex << "0x" << u << " -> 0x" << got
                      << ", want 0x" << want;
    }
    EXPECT_EQ(bad, 0u) << label(c, sat, "every float");
    if (c.bits == 16) break;
  }
}
TEST(Half, DISABLED_MatchesCudaOnEveryFloat) {
  expect_every_float_matches_cuda(testing::kHalfCodec);
}
TEST(BFloat16, DISABLED_MatchesCudaOnEveryFloat) {
  expect_every_float_matches_cuda(testing::kBf16Codec);
}
TEST(Float8E4M3, DISABLED_MatchesCudaOnEveryFloat) {
  expect_every_float_matches_cuda(testing::kE4M3Codec);
}
TEST(Float8E5M2, DISABLED_MatchesCudaOnEveryFloat) {
  expect_every_float_matches_cuda(testing::kE5M2Codec);
}

// Decoding: every pattern gives CUDA's float exactly (NaN included: both canonicalise).
void expect_decode_matches_cuda(const Codec& c) {
  std::vector<std::uint32_t> patterns(c.patterns());
  for (std::uint32_t b = 0; b < c.patterns(); ++b) patterns[b] = b;
  const std::size_t bad = count_mismatches(
      patterns, [&](std::uint32_t b) { return testing::float_bits(c.decode(b)); },
      [&](std::uint32_t b) { return testing::float_bits(cuda_decode(c, b)); },
      std::string(c.name) + " decode");
  EXPECT_EQ(bad, 0u);
}
TEST(Half, DecodeMatchesCudaOnEveryPattern) { expect_decode_matches_cuda(testing::kHalfCodec); }
TEST(BFloat16, DecodeMatchesCudaOnEveryPattern) { expect_decode_matches_cuda(testing::kBf16Codec); }
TEST(Float8E4M3, DecodeMatchesCudaOnEveryPattern) {
  expect_decode_matches_cuda(testing::kE4M3Codec);
}
TEST(Float8E5M2, DecodeMatchesCudaOnEveryPattern) {
  expect_decode_matches_cuda(testing::kE5M2Codec);
}

// FP64 -> narrow: __double2half, __double2bfloat16, __nv_cvt_double_to_fp8 on the
// double-rounding traps and a million random doubles (half of them inside the format's
// range). CUDA keeps the sign (and, for E5M2, payload bits) of a NaN here; we give the
// canonical NaN, so NaNs only need to stay NaN.
void expect_double_matches_cuda(const Codec& c) {
  std::vector<double> inputs = testing::double_rounding_traps(grid_of(c));
  std::mt19937_64 rng(7);
  for (int i = 0; i < 500'000; ++i) inputs.push_back(std::bit_cast<double>(rng()));
  for (int i = 0; i < 500'000; ++i) {  // doubles in the format's range, where it matters
    const double mag = static_cast<double>(rng() >> 11) * 0x1p-53;
    const int exponent = static_cast<int>(rng() % 60) - 40;
    inputs.push_back(std::ldexp((rng() & 1) != 0 ? -mag : mag, exponent));
  }
  for (Saturation sat : kModes) {
    const auto canonical = [&](std::uint32_t b) {
      return std::isnan(c.decode(b)) ? c.nan_bits() : b;
    };
    const std::size_t bad = count_mismatches(
        inputs, [&](double x) { return canonical(c.encode_double(x, sat)); },
        [&](double x) { return canonical(cuda_encode_double(c, x, sat)); }, label(c, sat, "f64"));
    EXPECT_EQ(bad, 0u) << label(c, sat, "f64");
  }
}
TEST(Half, Float64MatchesCuda) { expect_double_matches_cuda(testing::kHalfCodec); }
TEST(BFloat16, Float64MatchesCuda) { expect_double_matches_cuda(testing::kBf16Codec); }
TEST(Float8E4M3, Float64MatchesCudaInBothModes) { expect_double_matches_cuda(testing::kE4M3Codec); }
TEST(Float8E5M2, Float64MatchesCudaInBothModes) { expect_double_matches_cuda(testing::kE5M2Codec); }

#else
// ---- No CUDA headers: Eigen's software half and bfloat16 are the second opinion. Eigen
// keeps a NaN's sign and quiets it differently, so NaNs need only stay NaN.
std::uint32_t eigen_encode(const Codec& c, float x) {
  if (std::isnan(x)) return c.nan_bits();
  if (c.dtype == DType::kF16) return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(x));
  return Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(x));
}
void expect_matches_eigen(const Codec& c, const std::vector<float>& inputs, const char* what) {
  const std::size_t bad = count_mismatches(
      inputs, [&](float x) { return c.encode(x, Saturation::kNoSat); },
      [&](float x) { return eigen_encode(c, x); }, std::string(c.name) + " eigen " + what);
  EXPECT_EQ(bad, 0u);
}
TEST(Half, MatchesEigenOnEveryTie) {
  expect_matches_eigen(testing::kHalfCodec, testing::boundary_floats(grid_of(testing::kHalfCodec)),
                       "boundaries");
}
TEST(BFloat16, MatchesEigenOnEveryTie) {
  expect_matches_eigen(testing::kBf16Codec, testing::boundary_floats(grid_of(testing::kBf16Codec)),
                       "boundaries");
}
TEST(Half, MatchesEigenOnTenMillionRandomFloats) {
  expect_matches_eigen(testing::kHalfCodec, testing::random_floats(), "random");
}
TEST(BFloat16, MatchesEigenOnTenMillionRandomFloats) {
  expect_matches_eigen(testing::kBf16Codec, testing::random_floats(), "random");
}
// FP8 has no library reference here: the search reference takes the random floats too.
void expect_random_match_search(const Codec& c) {
  const Grid& g = grid_of(c);
  for (Saturation sat : kModes) {
    const std::size_t bad = count_mismatches(
        testing::random_floats(), [&](float x) { return c.encode(x, sat); },
        [&](float x) { return testing::search_round(c, g, x, sat); }, label(c, sat, "random"));
    EXPECT_EQ(bad, 0u);
  }
}
TEST(Float8E4M3, MatchesNearestSearchOnTenMillionRandomFloats) {
  expect_random_match_search(testing::kE4M3Codec);
}
TEST(Float8E5M2, MatchesNearestSearchOnTenMillionRandomFloats) {
  expect_random_match_search(testing::kE5M2Codec);
}
#endif

}  // namespace
}  // namespace mixpar
