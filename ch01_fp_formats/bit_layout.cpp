// bit_layout: field extraction and one-rounding encoding for the lesson's five formats.
// Field widths and biases come from format_info (the numerics library), so this file holds
// no typed-in constants about any format.
#include "bit_layout.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace mixpar::ch01 {

std::string_view format_key(DType t) {
  switch (t) {
    case DType::kF32:
      return "fp32";
    case DType::kF16:
      return "fp16";
    case DType::kBF16:
      return "bf16";
    case DType::kE4M3:
      return "e4m3";
    case DType::kE5M2:
      return "e5m2";
    case DType::kF64:
      break;
  }
  throw std::invalid_argument("ch01: FP64 is not one of the lesson's formats");
}

namespace {
std::size_t lesson_index(DType t) {
  for (std::size_t i = 0; i < std::size(kLessonFormats); ++i) {
    if (kLessonFormats[i] == t) return i;
  }
  throw std::invalid_argument("ch01: FP64 is not one of the lesson's formats");
}
}  // namespace

const FormatInfo& info(DType t) {
  static const std::array<FormatInfo, std::size(kLessonFormats)> cache = [] {
    std::array<FormatInfo, std::size(kLessonFormats)> all{};
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = format_info(kLessonFormats[i]);
    return all;
  }();
  return cache[lesson_index(t)];
}

std::string_view class_name(ValueClass c) {
  switch (c) {
    case ValueClass::kZero:
      return "zero";
    case ValueClass::kSubnormal:
      return "subnormal";
    case ValueClass::kNormal:
      return "normal";
    case ValueClass::kInfinity:
      return "inf";
    case ValueClass::kNaN:
      return "nan";
  }
  return "?";
}

namespace {
ValueClass classify(const FormatInfo& fi, std::uint32_t exponent, std::uint32_t mantissa) {
  const std::uint32_t exp_ones = (1u << fi.exponent_bits) - 1;
  const std::uint32_t man_ones = (1u << fi.mantissa_bits) - 1;
  if (exponent == 0) return mantissa == 0 ? ValueClass::kZero : ValueClass::kSubnormal;
  if (exponent != exp_ones) return ValueClass::kNormal;
  if (fi.has_infinity) return mantissa == 0 ? ValueClass::kInfinity : ValueClass::kNaN;
  // No infinity (E4M3FN): the top binade holds numbers, and only S.1111.111 is NaN.
  return mantissa == man_ones ? ValueClass::kNaN : ValueClass::kNormal;
}
}  // namespace

BitFields decompose(DType t, std::uint32_t bits) {
  const FormatInfo& fi = info(t);
  BitFields f{};
  f.dtype = t;
  f.bits = bits;
  f.exponent_bits = fi.exponent_bits;
  f.mantissa_bits = fi.mantissa_bits;
  f.bias = fi.bias;
  f.mantissa = bits & ((1u << fi.mantissa_bits) - 1);
  f.exponent = (bits >> fi.mantissa_bits) & ((1u << fi.exponent_bits) - 1);
  f.sign = (bits >> (fi.mantissa_bits + fi.exponent_bits)) & 1u;
  f.value_class = classify(fi, f.exponent, f.mantissa);
  if (f.value_class == ValueClass::kNormal)
    f.unbiased_exponent = static_cast<int>(f.exponent) - fi.bias;
  // Subnormals share the smallest normal exponent; they just lose the implicit leading 1.
  if (f.value_class == ValueClass::kSubnormal) f.unbiased_exponent = 1 - fi.bias;
  return f;
}

double significand(const BitFields& f) {
  const double fraction = std::ldexp(static_cast<double>(f.mantissa), -f.mantissa_bits);
  return f.value_class == ValueClass::kNormal ? 1.0 + fraction : fraction;
}

double value_from_fields(const BitFields& f) {
  const double sign = f.sign ? -1.0 : 1.0;
  switch (f.value_class) {
    case ValueClass::kZero:
      return sign * 0.0;
    case ValueClass::kInfinity:
      return sign * INFINITY;
    case ValueClass::kNaN:
      return NAN;
    case ValueClass::kSubnormal:
    case ValueClass::kNormal:
      break;
  }
  return sign * std::ldexp(significand(f), f.unbiased_exponent);
}

std::string bit_string(std::uint32_t v, int width) {
  std::string s(static_cast<std::size_t>(width), '0');
  for (int i = 0; i < width; ++i) {
    if ((v >> (width - 1 - i)) & 1u) s[static_cast<std::size_t>(i)] = '1';
  }
  return s;
}

std::string hex_bits(DType t, std::uint32_t bits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*x", static_cast<int>(2 * dtype_size(t)), bits);
  return buf;
}

double decode(DType t, std::uint32_t bits) {
  switch (t) {
    case DType::kF32:
      return std::bit_cast<float>(bits);
    case DType::kF16:
      return half_bits_to_float(static_cast<std::uint16_t>(bits));
    case DType::kBF16:
      return bf16_bits_to_float(static_cast<std::uint16_t>(bits));
    case DType::kE4M3:
      return e4m3_bits_to_float(static_cast<std::uint8_t>(bits));
    case DType::kE5M2:
      return e5m2_bits_to_float(static_cast<std::uint8_t>(bits));
    case DType::kF64:
      break;
  }
  throw std::invalid_argument("ch01: FP64 is not one of the lesson's formats");
}

Encoded encode(DType t, double x, Saturation sat) {
  std::uint32_t bits = 0;
  if (t == DType::kF32) {
    bits = std::bit_cast<std::uint32_t>(static_cast<float>(x));  // the C++ cast is RNE
  } else if (dtype_size(t) == 2) {
    std::uint16_t out = 0;
    convert(&x, DType::kF64, &out, t, 1, sat);
    bits = out;
  } else {
    std::uint8_t out = 0;
    convert(&x, DType::kF64, &out, t, 1, sat);
    bits = out;
  }
  return Encoded{t, sat, x, bits, decode(t, bits)};
}

double Encoded::error() const {
  if (!std::isfinite(input) || !std::isfinite(stored)) return NAN;
  return stored - input;
}

double Encoded::abs_error() const { return std::fabs(error()); }

double Encoded::rel_error() const {
  if (input == 0.0) return stored == 0.0 ? 0.0 : NAN;
  return abs_error() / std::fabs(input);
}

std::string power_of_two(double v) {
  if (!(v > 0) || !std::isfinite(v)) return "";
  int e = 0;
  if (std::frexp(v, &e) != 0.5) return "";
  return "2^" + std::to_string(e - 1);
}

}  // namespace mixpar::ch01
