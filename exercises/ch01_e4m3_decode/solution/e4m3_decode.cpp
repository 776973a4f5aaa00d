#include "ch01_e4m3_decode/e4m3_decode.h"

#include <cmath>
#include <limits>

namespace mixpar::exercises {

float decode_e4m3(std::uint8_t bits) {
  const bool negative = (bits & 0x80u) != 0;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  float magnitude = 0.0f;
  if (exponent == 0xf && mantissa == 0x7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();  // the only NaN; no infinity
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa) / 8.0f, 1 - 7);  // subnormal
  } else {
    magnitude = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  }
  return negative ? -magnitude : magnitude;
}

}  // namespace mixpar::exercises
