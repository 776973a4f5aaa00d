// bit_layout: where the bits of a number go in each training format. Splits a raw pattern
// into sign / exponent / mantissa fields, rebuilds the value from those fields alone (the
// textbook formula, checked against the real decoders), and rounds any double into any
// format exactly once. Shared by the demo, fpx and the tests.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "numerics/dtype.h"
#include "numerics/formats.h"

namespace mixpar::ch01 {

// The five formats of the lesson, in the order every table prints them.
inline constexpr DType kLessonFormats[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kE4M3,
                                           DType::kE5M2};

// "fp32", "fp16", "bf16", "e4m3", "e5m2": the names fpx prints and its JSON keys.
std::string_view format_key(DType t);

// format_info(t), computed once: it decodes bit patterns, and tables ask for it often.
const FormatInfo& info(DType t);

enum class ValueClass { kZero, kSubnormal, kNormal, kInfinity, kNaN };
std::string_view class_name(ValueClass c);  // "zero", "subnormal", "normal", "inf", "nan"

struct BitFields {
  DType dtype;
  std::uint32_t bits;  // the raw pattern, right-aligned
  int exponent_bits;
  int mantissa_bits;
  int bias;
  std::uint32_t sign;      // 0 or 1
  std::uint32_t exponent;  // the biased exponent field as stored
  std::uint32_t mantissa;  // the fraction field (the leading 1 is implicit, not stored)
  ValueClass value_class;
  int unbiased_exponent;  // field - bias for normals, 1 - bias for subnormals, else 0
};

// Splits `bits` of format t. E4M3 (OCP E4M3FN) has no infinity: its all-ones exponent is an
// ordinary binade except for the mantissa 111, which is NaN; that is how it reaches 448.
BitFields decompose(DType t, std::uint32_t bits);

// (-1)^sign * 2^E * (1.mantissa for normals, 0.mantissa for subnormals), evaluated in
// double from the fields alone. Equals decode(t, bits) for every pattern (tested).
double value_from_fields(const BitFields& f);

// The significand as a number: 1 + mantissa/2^m (normal) or mantissa/2^m (subnormal).
double significand(const BitFields& f);

// The low `width` bits of v as '0'/'1' characters, most significant first: "10010".
std::string bit_string(std::uint32_t v, int width);

// "0x4248": two hex digits per byte of the format (FP32 gets 8).
std::string hex_bits(DType t, std::uint32_t bits);

// The value of pattern `bits` in format t, via the numerics library's decoders.
double decode(DType t, std::uint32_t bits);

// A double rounded into format t: what gets stored and how far it is from the input.
struct Encoded {
  DType dtype;
  Saturation sat;
  double input;
  std::uint32_t bits;
  double stored;
  double error() const;      // stored - input; NaN when either is inf or NaN
  double abs_error() const;  // |stored - input|
  double rel_error() const;  // |stored - input| / |input|; NaN for input 0, inf or NaN
  bool operator==(const Encoded&) const = default;
};

// Rounds x into t once (round to nearest, ties to even; FP64 -> 16/8-bit goes through the
// numerics library's double path, so there is no double rounding via FP32). `sat` matters
// only for FP8: out-of-range values become +-max (kSatFinite) or NaN/inf (kNoSat).
Encoded encode(DType t, double x, Saturation sat = Saturation::kSatFinite);

// "2^-14" when v is a power of two, else "".
std::string power_of_two(double v);

}  // namespace mixpar::ch01
