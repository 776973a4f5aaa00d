// Software FP16/BF16/FP8: bit-level rounding (nearest, ties to even; IEEE 754-2019 §4.3.1),
// decoding, bulk conversion and format_info(). Special cases follow the CUDA host code in
// cuda_fp16.hpp, cuda_bf16.hpp and cuda_fp8.hpp (CUDA 13.0) bit for bit, NaN patterns included.
// Branch-free per element (integer ops and one FP add), so the span loops auto-vectorise.
#include "numerics/formats.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace mixpar {
namespace {

// A binary floating-point layout narrower than FP32. `ieee`: the all-ones exponent holds
// inf/NaN (FP16, E5M2); otherwise only the all-ones pattern is NaN (OCP E4M3FN, §5.3.1).
struct Spec {
  std::uint32_t exp_bits;
  std::uint32_t man_bits;
  std::uint32_t bias;
  bool ieee;
};
constexpr Spec kHalfSpec{5, 10, 15, true};
constexpr Spec kE4M3Spec{4, 3, 7, false};
constexpr Spec kE5M2Spec{5, 2, 15, true};

template <Spec S>
constexpr std::uint32_t kNanBits = (1u << (S.exp_bits + S.man_bits)) - 1;
template <Spec S>
constexpr std::uint32_t kInfBits = ((1u << S.exp_bits) - 1) << S.man_bits;
// Largest finite: below inf for IEEE-like layouts, below the NaN pattern for E4M3FN (0x7E).
template <Spec S>
constexpr std::uint32_t kMaxBits = S.ieee ? kInfBits<S> - 1 : kNanBits<S> - 1;

// Rounds |x| (FP32 bits `a`, finite) to S with an unbounded exponent: the result may exceed
// kMaxBits<S>, which is how the caller detects overflow. Rounding is monotone, so "rounds
// above max" is exactly CUDA's overflow threshold (max + ulp/2 ties down to an even max for
// E4M3: 464 -> 448; ties up to an odd one for FP16/E5M2: 65520 -> inf, 61440 -> inf).
template <Spec S>
inline std::uint32_t round_magnitude(std::uint32_t a) {
  constexpr std::uint32_t kDrop = 23 - S.man_bits;            // FP32 bits rounded off
  constexpr std::uint32_t kMinNormal = (128 - S.bias) << 23;  // FP32 bits of 2^(1-bias)
  // Normal: rebias the exponent, then add half an ulp minus one plus the kept lsb (RNE).
  const std::uint32_t lsb = (a >> kDrop) & 1u;
  const std::uint32_t normal =
      (a - ((127 - S.bias) << 23) + ((1u << (kDrop - 1)) - 1) + lsb) >> kDrop;
  // Subnormal: add 2^(24-bias-man_bits), whose FP32 ulp is the target's smallest subnormal;
  // the FPU's own round-to-nearest-even leaves |x| rounded in the low mantissa bits (the
  // trick of F. Giesen's float_to_half_fast3_rtne). It needs only the default rounding mode,
  // which mixpar never changes; FTZ/DAZ cannot matter, as the sum is normal and subnormal
  // FP32 inputs round to zero in every target here.
  constexpr std::uint32_t kMagicBits = (151 - S.bias - S.man_bits) << 23;
  constexpr float kMagic = std::bit_cast<float>(kMagicBits);
  const float shifted = std::bit_cast<float>(a) + kMagic;
  const std::uint32_t sub = std::bit_cast<std::uint32_t>(shifted) - kMagicBits;
  return a >= kMinNormal ? normal : sub;
}

// FP32 -> S. NaN gives the positive all-ones pattern (CUDA drops the sign: cuda_fp16.hpp
// __internal_float2half returns 0x7fff, __nv_cvt_float_to_fp8 canonicalises to 0x7F).
// Overflow, +-inf included: +-max when saturating, else +-inf (IEEE-like) or NaN (E4M3FN).
template <Spec S>
inline std::uint32_t encode(float f, bool saturate) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t a = x & 0x7FFFFFFFu;
  const std::uint32_t sign = (x >> 31) << (S.exp_bits + S.man_bits);
  const std::uint32_t overflow = saturate ? kMaxBits<S> : (S.ieee ? kInfBits<S> : kNanBits<S>);
  const std::uint32_t rounded = round_magnitude<S>(a);
  const std::uint32_t r = (rounded > kMaxBits<S> ? overflow : rounded) | sign;
  return a > 0x7F800000u ? kNanBits<S> : r;
}

// S -> FP32, exact. NaN gives the canonical 0x7FFFFFFF, as CUDA's host __half2float does
// (fp8 decodes go through half in cuda_fp8.hpp, so they do too).
template <Spec S>
inline float decode(std::uint32_t b) {
  constexpr std::uint32_t kExpMax = (1u << S.exp_bits) - 1;
  // 2^(1-bias-man_bits): the value of the mantissa lsb in the subnormal range.
  constexpr float kSubUnit = std::bit_cast<float>((128 - S.bias - S.man_bits) << 23);
  const std::uint32_t sign = (b >> (S.exp_bits + S.man_bits)) & 1u;
  const std::uint32_t e = (b >> S.man_bits) & kExpMax;
  const std::uint32_t m = b & ((1u << S.man_bits) - 1);
  const std::uint32_t normal = ((e + 127 - S.bias) << 23) | (m << (23 - S.man_bits));
  const std::uint32_t sub =
      std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<std::int32_t>(m)) * kSubUnit);
  std::uint32_t mag = e == 0 ? sub : normal;
  bool nan = false;
  if constexpr (S.ieee) {
    mag = e == kExpMax ? 0x7F800000u : mag;
    nan = e == kExpMax && m != 0;
  } else {
    nan = (b & kNanBits<S>) == kNanBits<S>;
  }
  return std::bit_cast<float>(nan ? 0x7FFFFFFFu : (mag | (sign << 31)));
}

// FP32 -> BF16 keeps the top half of the pattern, rounded: the encodings are contiguous, so
// adding 0x7FFF plus the kept lsb carries correctly through subnormals and into inf.
inline std::uint16_t encode_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
  return static_cast<std::uint16_t>((x & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FFFu : rounded);
}

// FP64 -> FP32 rounding to odd (truncate, then set the lsb if anything was lost). FP32 keeps
// 24 bits, at least two more than any target here, and covers their exponent ranges, so
// rounding the result once more to nearest-even equals rounding the double directly
// (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using
// rounding to odd", 2008). CUDA's host __double2bfloat16 (cuda_bf16.hpp) does the same.
inline float round_to_odd_float(double d) {
  const float f = static_cast<float>(d);
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const double back = static_cast<double>(f);
  if (std::isnan(d) || back == d) return f;
  if (std::fabs(back) > std::fabs(d)) --u;  // rounded away from zero (or to inf): step back
  return std::bit_cast<float>(u | 1u);
}

bool saturating(Saturation sat) { return sat == Saturation::kSatFinite; }

void check_sizes(std::size_t in, std::size_t out) {
  if (in != out) {
    throw std::invalid_argument("mixpar::convert: input has " + std::to_string(in) +
                                " elements, output " + std::to_string(out));
  }
}

}  // namespace

std::uint16_t float_to_half_bits(float f) {
  return static_cast<std::uint16_t>(encode<kHalfSpec>(f, false));
}
float half_bits_to_float(std::uint16_t h) { return decode<kHalfSpec>(h); }
std::uint16_t float_to_bf16_bits(float f) { return encode_bf16(f); }
float bf16_bits_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);  // exact, NaN payload kept
}
std::uint8_t float_to_e4m3_bits(float f, Saturation sat) {
  return static_cast<std::uint8_t>(encode<kE4M3Spec>(f, saturating(sat)));
}
float e4m3_bits_to_float(std::uint8_t b) { return decode<kE4M3Spec>(b); }
std::uint8_t float_to_e5m2_bits(float f, Saturation sat) {
  return static_cast<std::uint8_t>(encode<kE5M2Spec>(f, saturating(sat)));
}
float e5m2_bits_to_float(std::uint8_t b) { return decode<kE5M2Spec>(b); }

std::uint16_t double_to_half_bits(double d) { return float_to_half_bits(round_to_odd_float(d)); }
std::uint16_t double_to_bf16_bits(double d) { return float_to_bf16_bits(round_to_odd_float(d)); }
std::uint8_t double_to_e4m3_bits(double d, Saturation sat) {
  return float_to_e4m3_bits(round_to_odd_float(d), sat);
}
std::uint8_t double_to_e5m2_bits(double d, Saturation sat) {
  return float_to_e5m2_bits(round_to_odd_float(d), sat);
}

float round_to(DType t, float f, Saturation sat) {
  switch (t) {
    case DType::kF32:
    case DType::kF64: return f;
    case DType::kF16: return half_bits_to_float(float_to_half_bits(f));
    case DType::kBF16: return bf16_bits_to_float(float_to_bf16_bits(f));
    case DType::kE4M3: return e4m3_bits_to_float(float_to_e4m3_bits(f, sat));
    case DType::kE5M2: return e5m2_bits_to_float(float_to_e5m2_bits(f, sat));
  }
  return f;
}

// ---- Typed span loops: one scalar kernel per element, no calls, no branches that the
// vectoriser cannot turn into selects.

void convert(std::span<const float> in, std::span<Half> out) {
  check_sizes(in.size(), out.size());
  const float* src = in.data();
  std::uint16_t* dst = reinterpret_cast<std::uint16_t*>(out.data());
  for (std::size_t i = 0; i < in.size(); ++i) {
    dst[i] = static_cast<std::uint16_t>(encode<kHalfSpec>(src[i], false));
  }
}

void convert(std::span<const float> in, std::span<BFloat16> out) {
  check_sizes(in.size(), out.size());
  const float* src = in.data();
  std::uint16_t* dst = reinterpret_cast<std::uint16_t*>(out.data());
  for (std::size_t i = 0; i < in.size(); ++i) dst[i] = encode_bf16(src[i]);
}

namespace {
template <Spec S, class Out>
void encode_span(std::span<const float> in, std::span<Out> out, Saturation sat) {
  check_sizes(in.size(), out.size());
  const float* src = in.data();
  std::uint8_t* dst = reinterpret_cast<std::uint8_t*>(out.data());
  // Two loops with the mode fixed keep the select out of the inner loop.
  if (saturating(sat)) {
    for (std::size_t i = 0; i < in.size(); ++i)
      dst[i] = static_cast<std::uint8_t>(encode<S>(src[i], true));
  } else {
    for (std::size_t i = 0; i < in.size(); ++i)
      dst[i] = static_cast<std::uint8_t>(encode<S>(src[i], false));
  }
}

template <Spec S, class In, class Bits>
void decode_span(std::span<const In> in, std::span<float> out) {
  check_sizes(in.size(), out.size());
  const Bits* src = reinterpret_cast<const Bits*>(in.data());
  float* dst = out.data();
  for (std::size_t i = 0; i < in.size(); ++i) dst[i] = decode<S>(src[i]);
}
}  // namespace

void convert(std::span<const float> in, std::span<Float8E4M3> out, Saturation sat) {
  encode_span<kE4M3Spec>(in, out, sat);
}
void convert(std::span<const float> in, std::span<Float8E5M2> out, Saturation sat) {
  encode_span<kE5M2Spec>(in, out, sat);
}
void convert(std::span<const Half> in, std::span<float> out) {
  decode_span<kHalfSpec, Half, std::uint16_t>(in, out);
}
void convert(std::span<const BFloat16> in, std::span<float> out) {
  check_sizes(in.size(), out.size());
  const std::uint16_t* src = reinterpret_cast<const std::uint16_t*>(in.data());
  float* dst = out.data();
  for (std::size_t i = 0; i < in.size(); ++i) dst[i] = bf16_bits_to_float(src[i]);
}
void convert(std::span<const Float8E4M3> in, std::span<float> out) {
  decode_span<kE4M3Spec, Float8E4M3, std::uint8_t>(in, out);
}
void convert(std::span<const Float8E5M2> in, std::span<float> out) {
  decode_span<kE5M2Spec, Float8E5M2, std::uint8_t>(in, out);
}

// ---- Any dtype to any dtype: through FP32 in cache-sized chunks, so every pair reuses the
// span loops above. FP64 sources are rounded to odd (one correct rounding to a narrow
// target, see round_to_odd_float) or to nearest (FP32 target); FP32 values widen exactly.

namespace {
constexpr std::size_t kChunk = 1024;

// Reads n elements of type t as floats. `odd`: FP64 sources round to odd, not to nearest.
void load_floats(const std::byte* src, DType t, float* out, std::size_t n, bool odd) {
  std::span<float> o(out, n);
  switch (t) {
    case DType::kF32: std::memcpy(out, src, n * sizeof(float)); return;
    case DType::kF16: convert({reinterpret_cast<const Half*>(src), n}, o); return;
    case DType::kBF16: convert({reinterpret_cast<const BFloat16*>(src), n}, o); return;
    case DType::kE4M3: convert({reinterpret_cast<const Float8E4M3*>(src), n}, o); return;
    case DType::kE5M2: convert({reinterpret_cast<const Float8E5M2*>(src), n}, o); return;
    case DType::kF64: {
      const double* d = reinterpret_cast<const double*>(src);
      for (std::size_t i = 0; i < n; ++i) {
        out[i] = odd ? round_to_odd_float(d[i]) : static_cast<float>(d[i]);
      }
      return;
    }
  }
}

void store_floats(const float* in, DType t, std::byte* dst, std::size_t n, Saturation sat) {
  std::span<const float> s(in, n);
  switch (t) {
    case DType::kF32: std::memcpy(dst, in, n * sizeof(float)); return;
    case DType::kF16: convert(s, {reinterpret_cast<Half*>(dst), n}); return;
    case DType::kBF16: convert(s, {reinterpret_cast<BFloat16*>(dst), n}); return;
    case DType::kE4M3: convert(s, {reinterpret_cast<Float8E4M3*>(dst), n}, sat); return;
    case DType::kE5M2: convert(s, {reinterpret_cast<Float8E5M2*>(dst), n}, sat); return;
    case DType::kF64: {
      double* d = reinterpret_cast<double*>(dst);
      for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<double>(in[i]);
      return;
    }
  }
}
}  // namespace

void convert(const void* src, DType src_type, void* dst, DType dst_type, std::size_t n,
             Saturation sat) {
  if (n == 0) return;
  if (src_type == dst_type) {
    std::memcpy(dst, src, n * dtype_size(src_type));
    return;
  }
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(dst);
  // From or to FP32 no buffer is needed: the same span loops, run on the buffers themselves.
  if (src_type == DType::kF32) {
    store_floats(static_cast<const float*>(src), dst_type, d, n, sat);
    return;
  }
  if (dst_type == DType::kF32) {
    load_floats(s, src_type, static_cast<float*>(dst), n, false);  // FP64 rounds to nearest
    return;
  }
  const bool odd = dst_type != DType::kF32;  // only FP64 -> FP32 rounds to nearest directly
  float buf[kChunk];
  for (std::size_t i = 0; i < n; i += kChunk) {
    const std::size_t m = std::min(kChunk, n - i);
    load_floats(s + i * dtype_size(src_type), src_type, buf, m, odd);
    store_floats(buf, dst_type, d + i * dtype_size(dst_type), m, sat);
  }
}

// ---- format_info: read off the implementation by decoding bit patterns.

namespace {
FormatInfo info_from_patterns(DType t, std::string_view name, int exp_bits, int man_bits,
                              double (*decode_bits)(std::uint32_t), std::uint32_t n_patterns) {
  FormatInfo info{};
  info.dtype = t;
  info.name = name;
  info.exponent_bits = exp_bits;
  info.mantissa_bits = man_bits;
  const std::uint32_t positive = n_patterns / 2;  // sign bit clear
  for (std::uint32_t b = 0; b < positive; ++b) {
    const double v = decode_bits(b);
    if (std::isinf(v)) info.has_infinity = true;
    if (std::isfinite(v)) info.max = std::max(info.max, v);
  }
  info.min_subnormal = decode_bits(1);
  info.min_normal = decode_bits(1u << man_bits);  // smallest non-zero exponent field
  info.bias = 1 - std::ilogb(info.min_normal);    // min normal = 2^(1-bias)
  // The pattern after 1.0's (the encodings of positive values are ordered).
  std::uint32_t one = 0;
  while (decode_bits(one) != 1.0) ++one;
  info.epsilon = decode_bits(one + 1) - 1.0;
  info.decimal_digits = (man_bits + 1) * std::log10(2.0);
  return info;
}

double dec_half(std::uint32_t b) { return half_bits_to_float(static_cast<std::uint16_t>(b)); }
double dec_bf16(std::uint32_t b) { return bf16_bits_to_float(static_cast<std::uint16_t>(b)); }
double dec_e4m3(std::uint32_t b) { return e4m3_bits_to_float(static_cast<std::uint8_t>(b)); }
double dec_e5m2(std::uint32_t b) { return e5m2_bits_to_float(static_cast<std::uint8_t>(b)); }

// FP32 has 2^32 patterns: decode the few that matter instead of scanning them all.
FormatInfo fp32_info() {
  auto dec = [](std::uint32_t b) { return static_cast<double>(std::bit_cast<float>(b)); };
  FormatInfo info{};
  info.dtype = DType::kF32;
  info.name = "fp32";
  info.exponent_bits = 8;
  info.mantissa_bits = 23;
  info.has_infinity = std::isinf(dec(0x7F800000u));
  info.max = dec(0x7F7FFFFFu);  // all-ones mantissa under the inf exponent
  info.min_normal = dec(0x00800000u);
  info.min_subnormal = dec(0x00000001u);
  info.bias = 1 - std::ilogb(info.min_normal);
  const std::uint32_t one = std::bit_cast<std::uint32_t>(1.0f);
  info.epsilon = dec(one + 1) - 1.0;
  info.decimal_digits = 24 * std::log10(2.0);
  return info;
}
}  // namespace

FormatInfo format_info(DType t) {
  switch (t) {
    case DType::kF32: return fp32_info();
    case DType::kF16: return info_from_patterns(t, "fp16", 5, 10, dec_half, 1u << 16);
    case DType::kBF16: return info_from_patterns(t, "bf16", 8, 7, dec_bf16, 1u << 16);
    case DType::kE4M3: return info_from_patterns(t, "e4m3", 4, 3, dec_e4m3, 1u << 8);
    case DType::kE5M2: return info_from_patterns(t, "e5m2", 5, 2, dec_e5m2, 1u << 8);
    case DType::kF64: break;
  }
  throw std::invalid_argument("mixpar::format_info: no table entry for " +
                              std::string(dtype_name(t)));
}

}  // namespace mixpar
