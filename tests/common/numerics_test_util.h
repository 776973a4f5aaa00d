// Shared by the numerics tests: a description of each format as encode/decode functions, an
// independent "nearest value by search" rounding reference, the tie/boundary inputs between
// every pair of neighbouring representable values, and a fixed-seed set of random floats.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/formats.h"

namespace mixpar::testing {

// One format, seen through our implementation. `sat` is ignored by FP16/BF16.
struct Codec {
  const char* name;
  DType dtype;
  int bits;       // 16 or 8
  bool has_inf;   // FP16, BF16, E5M2
  std::uint32_t (*encode)(float, Saturation);
  std::uint32_t (*encode_double)(double, Saturation);
  float (*decode)(std::uint32_t);
  std::uint32_t patterns() const { return 1u << bits; }
  std::uint32_t sign_bit() const { return 1u << (bits - 1); }
  std::uint32_t nan_bits() const { return sign_bit() - 1; }  // canonical NaN (CUDA's)
};

inline const Codec kHalfCodec{
    "fp16", DType::kF16, 16, true,
    [](float f, Saturation) -> std::uint32_t { return float_to_half_bits(f); },
    [](double d, Saturation) -> std::uint32_t { return double_to_half_bits(d); },
    [](std::uint32_t b) { return half_bits_to_float(static_cast<std::uint16_t>(b)); }};
inline const Codec kBf16Codec{
    "bf16", DType::kBF16, 16, true,
    [](float f, Saturation) -> std::uint32_t { return float_to_bf16_bits(f); },
    [](double d, Saturation) -> std::uint32_t { return double_to_bf16_bits(d); },
    [](std::uint32_t b) { return bf16_bits_to_float(static_cast<std::uint16_t>(b)); }};
inline const Codec kE4M3Codec{
    "e4m3", DType::kE4M3, 8, false,
    [](float f, Saturation s) -> std::uint32_t { return float_to_e4m3_bits(f, s); },
    [](double d, Saturation s) -> std::uint32_t { return double_to_e4m3_bits(d, s); },
    [](std::uint32_t b) { return e4m3_bits_to_float(static_cast<std::uint8_t>(b)); }};
inline const Codec kE5M2Codec{
    "e5m2", DType::kE5M2, 8, true,
    [](float f, Saturation s) -> std::uint32_t { return float_to_e5m2_bits(f, s); },
    [](double d, Saturation s) -> std::uint32_t { return double_to_e5m2_bits(d, s); },
    [](std::uint32_t b) { return e5m2_bits_to_float(static_cast<std::uint8_t>(b)); }};

inline std::uint32_t float_bits(float f) { return std::bit_cast<std::uint32_t>(f); }

// The positive finite values of a format in increasing order, with their patterns, plus
// `beyond`: the value one ulp above max, where rounding to nearest would go if the exponent
// were unbounded (its pattern max+1 decides ties, as in IEEE 754 §4.3.1's overflow rule).
struct Grid {
  std::vector<double> values;
  std::vector<std::uint32_t> bits;
  double beyond = 0;
};

inline Grid make_grid(const Codec& c) {
  Grid g;
  for (std::uint32_t b = 0; b < c.sign_bit(); ++b) {
    const double v = c.decode(b);
    if (!std::isfinite(v)) break;  // positive patterns are ordered: inf/NaN come last
    g.values.push_back(v);
    g.bits.push_back(b);
  }
  const std::size_t n = g.values.size();
  g.beyond = g.values[n - 1] + (g.values[n - 1] - g.values[n - 2]);
  return g;
}

// Reference rounding by search, sharing no code with formats.cpp: the nearest grid value to
// x, ties to the even pattern; past max + ulp/2 (or inf) it overflows to +-max (saturating)
// or +-inf / NaN. Comparing 2|x| with lo + hi is exact for float and double x.
inline std::uint32_t search_round(const Codec& c, const Grid& g, double x, Saturation sat) {
  if (std::isnan(x)) return c.nan_bits();
  const std::uint32_t sign = std::signbit(x) ? c.sign_bit() : 0u;
  const double a = std::fabs(x);
  const std::uint32_t max_bits = g.bits.back();
  const bool saturate = c.bits == 8 && sat == Saturation::kSatFinite;  // FP8 only
  const std::uint32_t overflow = saturate ? max_bits : c.has_inf ? max_bits + 1 : c.nan_bits();
  auto it = std::lower_bound(g.values.begin(), g.values.end(), a);
  std::uint32_t r = 0;
  if (it == g.values.end()) {  // above max: nearer to max or to `beyond`?
    const double lo = g.values.back();
    const bool up = a >= g.beyond || 2 * a > lo + g.beyond ||
                    (2 * a == lo + g.beyond && (max_bits & 1u) != 0);
    if (up) return overflow | sign;  // CUDA keeps the sign: -500 -> 0xFF in E4M3 no-sat
    r = max_bits;
  } else {
    const std::size_t i = static_cast<std::size_t>(it - g.values.begin());
    if (*it == a || i == 0) {
      r = g.bits[i];
    } else {
      const double lo = g.values[i - 1], hi = g.values[i];
      const bool up = 2 * a > lo + hi || (2 * a == lo + hi && (g.bits[i - 1] & 1u) != 0);
      r = up ? g.bits[i] : g.bits[i - 1];
    }
  }
  return r | sign;
}

// Every representable value, every midpoint between neighbours (max/beyond included), the
// floats just either side of each midpoint, and both signs; plus zeros, infinities, NaNs,
// FP32 extremes. These are all the places where a rounding rule can go wrong.
inline std::vector<float> boundary_floats(const Grid& g) {
  std::vector<float> out;
  auto push_around = [&](double mid) {
    const float m = static_cast<float>(mid);
    const float inf = std::numeric_limits<float>::infinity();
    for (float v : {m, std::nextafter(m, 0.0f), std::nextafter(m, inf)}) {
      out.push_back(v);
      out.push_back(-v);
    }
  };
  for (std::size_t i = 0; i < g.values.size(); ++i) {
    out.push_back(static_cast<float>(g.values[i]));
    out.push_back(-static_cast<float>(g.values[i]));
    if (i > 0) push_around(0.5 * (g.values[i - 1] + g.values[i]));
  }
  push_around(0.5 * (g.values.back() + g.beyond));
  if (g.beyond <= std::numeric_limits<float>::max()) push_around(g.beyond);
  const float specials[] = {0.0f, std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::bit_cast<float>(0x7F800001u),  // signalling NaN
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::denorm_min(), 1e-30f, 1e30f};
  for (float s : specials) {
    out.push_back(s);
    out.push_back(-s);
  }
  return out;
}

// Doubles where rounding through FP32 first would round twice: each midpoint nudged by less
// than half an FP32 ulp, so (float)d is the midpoint itself and the tie goes the wrong way.
inline std::vector<double> double_rounding_traps(const Grid& g) {
  std::vector<double> out;
  for (std::size_t i = 1; i < g.values.size(); ++i) {
    const double mid = 0.5 * (g.values[i - 1] + g.values[i]);
    const double nudge = std::ldexp(mid, -40);
    for (double d : {mid + nudge, mid - nudge, mid}) {
      out.push_back(d);
      out.push_back(-d);
    }
  }
  return out;
}

// Random FP32 bit patterns (all exponents, NaNs included), fixed seed: the same every run.
inline const std::vector<float>& random_floats(std::size_t n = 10'000'000) {
  static const std::vector<float> values = [n] {
    std::mt19937 rng(20240520u);
    std::vector<float> v(n);
    for (float& f : v) f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    return v;
  }();
  return values;
}

// Counts mismatches between two bit-valued functions over `inputs`, reporting the first few
// with the input's bits and both results, so a failure names the exact case.
template <class In, class Got, class Want>
std::size_t count_mismatches(const std::vector<In>& inputs, Got got, Want want,
                             const std::string& what) {
  std::size_t bad = 0;
  for (const In& x : inputs) {
    const std::uint32_t g = got(x), w = want(x);
    if (g == w) continue;
    if (++bad <= 8) {
      char line[160];
      std::snprintf(line, sizeof line, "%s: input %.17g -> got 0x%X, want 0x%X", what.c_str(),
                    static_cast<double>(x), g, w);
      ADD_FAILURE() << line;
    }
  }
  return bad;
}

}  // namespace mixpar::testing
