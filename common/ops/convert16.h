// FP32 <-> BF16 and FP32 <-> FP16 conversions on the CPU's vector units, bit-identical to
// mixpar::convert (numerics/formats.h), which stays the specification. Every 16-bit layer
// widens its inputs and rounds its outputs (matrix_view.h, chunked.h), and in a bf16 step of
// config S those conversions took a quarter of the time: numerics is compiled for the
// baseline x86-64 (SSE2), and its any-to-any path copies through an FP32 buffer.
//
// Chosen at run time from CPUID, whatever the build's -march: AVX-512 (BW, VL) where the CPU
// and OS have it, else AVX2 with F16C, else the portable loops of formats.cpp. BF16 is the top
// half of the FP32 pattern rounded with integer adds (the same ones formats.cpp uses). FP16
// uses F16C's vcvtps2ph / vcvtph2ps, which round to nearest even and convert subnormals and
// infinities as IEEE 754 says; only NaN differs (the instructions keep sign and payload), so
// NaNs are replaced by formats.h's canonical ones (0x7FFF; 0x7FFFFFFF when widening).
// AVX512-BF16's vcvtneps2bf16 is not used: it flushes FP32 subnormals to zero, which the
// software rounding (and CUDA's __float2bfloat16_rn) keeps as BF16 subnormals.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "numerics/formats.h"

namespace mixpar::ops {

// dst = src converted, n elements, for any pair of dtypes (as mixpar::convert, and with its
// results bit for bit); f32 <-> bf16 and f32 <-> f16 on the fastest path this CPU has, split
// over the OpenMP threads when large and outside any parallel region.
void convert16(const void* src, DType src_type, void* dst, DType dst_type, std::size_t n);

enum class ConvertPath : unsigned char { kPortable, kAvx2F16c, kAvx512 };
std::string_view convert_path_name(ConvertPath p);  // "portable", "avx2+f16c", "avx512bw"

// The path convert16 takes on this CPU.
ConvertPath convert16_path();

namespace detail {
// One path, single-threaded, for tests: false (nothing converted) when the CPU lacks it, with
// *why_not saying so, or when the pair is not f32 <-> bf16 / f16.
bool convert16_with(ConvertPath p, const void* src, DType src_type, void* dst, DType dst_type,
                    std::size_t n, std::string* why_not = nullptr);
}  // namespace detail

}  // namespace mixpar::ops
