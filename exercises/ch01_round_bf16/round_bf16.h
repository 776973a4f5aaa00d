// Exercise (chapter 1): round an FP32 value to BF16, round to nearest, ties to even.
// BF16 is FP32's upper 16 bits (1 sign, 8 exponent, 7 mantissa bits). Cutting the low 16 bits
// truncates; rounding adds half of the cut-off unit first, and on an exact tie keeps the
// neighbour whose last kept bit is 0. Infinities stay infinities, a NaN must stay a NaN (cutting
// the mantissa may leave it all zeros, which would make it an infinity), and a finite value
// that rounds past BF16's largest becomes inf. See ch01_fp_formats/README.md, section 3.
#pragma once

#include <cstdint>

namespace mixpar::exercises {

// The 16 bits of the BF16 value nearest to x (ties to even).
std::uint16_t round_to_bf16(float x);

}  // namespace mixpar::exercises
