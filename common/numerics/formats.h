// The 16- and 8-bit floating-point formats of mixed-precision training, done in software.
// Half = IEEE binary16 (1-5-10), BFloat16 = 1-8-7, Float8E4M3 = OCP E4M3FN (1-4-3, no inf,
// NaN only 0x7F/0xFF, max 448), Float8E5M2 = 1-5-2 (IEEE-like, max 57344).
// Every float -> format conversion rounds to nearest, ties to even, and is bit-identical to
// the CUDA toolkit's host conversions (__float2half_rn, __float2bfloat16_rn,
// __nv_cvt_float_to_fp8). Arithmetic on these types happens in FP32 (convert, compute, round).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "numerics/dtype.h"

namespace mixpar {

// FP8 casts come in two flavours (docs/REFERENCE.md, Number formats): saturating clamps
// out-of-range finite values to +-max (CUDA __NV_SATFINITE); non-saturating gives NaN for
// E4M3 and +-inf for E5M2 (CUDA __NV_NOSAT, PyTorch's .to(float8_*)). NaN input gives NaN in
// both modes; an infinite input saturates to +-max only in kSatFinite mode.
enum class Saturation : std::uint8_t { kSatFinite, kNoSat };

// Bit-level conversions: the single source of truth every type and bulk path below uses.
std::uint16_t float_to_half_bits(float f);
float half_bits_to_float(std::uint16_t h);
std::uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(std::uint16_t b);
std::uint8_t float_to_e4m3_bits(float f, Saturation sat = Saturation::kSatFinite);
float e4m3_bits_to_float(std::uint8_t b);
std::uint8_t float_to_e5m2_bits(float f, Saturation sat = Saturation::kSatFinite);
float e5m2_bits_to_float(std::uint8_t b);

// FP64 -> 16/8-bit with a single rounding of the double (no double rounding through FP32):
// bit-identical to CUDA's host __double2half, __double2bfloat16 and __nv_cvt_double_to_fp8
// except that every NaN gives the format's canonical NaN, as the float versions do.
std::uint16_t double_to_half_bits(double d);
std::uint16_t double_to_bf16_bits(double d);
std::uint8_t double_to_e4m3_bits(double d, Saturation sat = Saturation::kSatFinite);
std::uint8_t double_to_e5m2_bits(double d, Saturation sat = Saturation::kSatFinite);

struct Half {
  std::uint16_t bits = 0;
  Half() = default;
  explicit Half(float f) : bits(float_to_half_bits(f)) {}
  static Half from_bits(std::uint16_t b) { Half h; h.bits = b; return h; }
  float to_float() const { return half_bits_to_float(bits); }
  explicit operator float() const { return to_float(); }
};

struct BFloat16 {
  std::uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(float_to_bf16_bits(f)) {}
  static BFloat16 from_bits(std::uint16_t b) { BFloat16 x; x.bits = b; return x; }
  float to_float() const { return bf16_bits_to_float(bits); }
  explicit operator float() const { return to_float(); }
};

struct Float8E4M3 {
  std::uint8_t bits = 0;
  Float8E4M3() = default;
  explicit Float8E4M3(float f, Saturation sat = Saturation::kSatFinite)
      : bits(float_to_e4m3_bits(f, sat)) {}
  static Float8E4M3 from_bits(std::uint8_t b) { Float8E4M3 x; x.bits = b; return x; }
  float to_float() const { return e4m3_bits_to_float(bits); }
  explicit operator float() const { return to_float(); }
};

struct Float8E5M2 {
  std::uint8_t bits = 0;
  Float8E5M2() = default;
  explicit Float8E5M2(float f, Saturation sat = Saturation::kSatFinite)
      : bits(float_to_e5m2_bits(f, sat)) {}
  static Float8E5M2 from_bits(std::uint8_t b) { Float8E5M2 x; x.bits = b; return x; }
  float to_float() const { return e5m2_bits_to_float(bits); }
  explicit operator float() const { return to_float(); }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);
static_assert(sizeof(Float8E4M3) == 1 && sizeof(Float8E5M2) == 1);

// Rounds f to the nearest value representable in t and returns it as a float
// (for t == kF64 / kF32: f itself). "What does this number become in format t?"
float round_to(DType t, float f, Saturation sat = Saturation::kSatFinite);

// Bulk conversions between raw buffers of n elements. Any pair of dtypes is allowed; values
// pass through FP32 (FP64 -> 16/8-bit rounds once, from the double, where that differs).
// `sat` applies to FP8 targets only; FP16/BF16 overflow to +-inf as __float2half_rn does.
void convert(const void* src, DType src_type, void* dst, DType dst_type, std::size_t n,
             Saturation sat = Saturation::kSatFinite);

// Typed span conveniences for the hot paths (benchmarked in bench/).
void convert(std::span<const float> in, std::span<Half> out);
void convert(std::span<const float> in, std::span<BFloat16> out);
void convert(std::span<const float> in, std::span<Float8E4M3> out,
             Saturation sat = Saturation::kSatFinite);
void convert(std::span<const float> in, std::span<Float8E5M2> out,
             Saturation sat = Saturation::kSatFinite);
void convert(std::span<const Half> in, std::span<float> out);
void convert(std::span<const BFloat16> in, std::span<float> out);
void convert(std::span<const Float8E4M3> in, std::span<float> out);
void convert(std::span<const Float8E5M2> in, std::span<float> out);

// A format's shape and range, computed from the implementation (decoding bit patterns),
// never typed in: this is what `fpx --table` prints.
struct FormatInfo {
  DType dtype;
  std::string_view name;       // "fp32", "fp16", "bf16", "e4m3", "e5m2"
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool has_infinity;
  double max;                  // largest finite value
  double min_normal;           // smallest positive normal
  double min_subnormal;        // smallest positive subnormal
  double epsilon;              // gap between 1 and the next representable value
  double decimal_digits;       // log10(2^(mantissa_bits+1))
};
FormatInfo format_info(DType t);  // t in {kF32, kF16, kBF16, kE4M3, kE5M2}

}  // namespace mixpar
