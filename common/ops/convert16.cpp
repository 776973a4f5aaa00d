// The vector kernels of convert16.h. Each is compiled for its ISA with a target attribute and
// called only where CPUID (and XGETBV) say the CPU and OS have it (util/cpu_features.h), so the
// default x86-64-v3 build carries the AVX-512 kernels and a Sapphire Rapids build the AVX2
// ones; tails shorter than a vector take the scalar conversions of formats.h.
#include "ops/convert16.h"

#include <cstdint>
#include <cstring>

#include "ops/chunked.h"
#include "util/cpu_features.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MIXPAR_CONVERT16_X86 1
#endif

namespace mixpar::ops {
namespace {

using u16 = std::uint16_t;

#if defined(MIXPAR_CONVERT16_X86)

void bf16_encode_tail(const float* s, u16* d, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = float_to_bf16_bits(s[i]);
}
void bf16_decode_tail(const u16* s, float* d, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = bf16_bits_to_float(s[i]);
}
void f16_encode_tail(const float* s, u16* d, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = float_to_half_bits(s[i]);
}
void f16_decode_tail(const u16* s, float* d, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = half_bits_to_float(s[i]);
}

// ---- AVX2 + F16C: 8 floats per register.
#define MIXPAR_AVX2 __attribute__((target("avx2,f16c")))

// Round-to-nearest-even into the top 16 bits, as formats.cpp's encode_bf16: x + 0x7FFF + lsb,
// shifted; NaN (|x| above inf's pattern) becomes 0x7FFF.
MIXPAR_AVX2 inline __m256i bf16_round8(__m256i x) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m256i a = _mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FFF), nan);
}

MIXPAR_AVX2 void bf16_encode_avx2(const float* s, u16* d, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = bf16_round8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    const __m256i hi =
        bf16_round8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 8)));
    // packus works within 128-bit lanes: [lo0 hi0 lo1 hi1] -> reorder the 64-bit quarters.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), packed);
  }
  bf16_encode_tail(s + i, d + i, n - i);
}

MIXPAR_AVX2 void bf16_decode_avx2(const u16* s, float* d, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm256_slli_epi32(w, 16));
  }
  bf16_decode_tail(s + i, d + i, n - i);
}

MIXPAR_AVX2 void f16_encode_avx2(const float* s, u16* d, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(s + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m128i nan16 =
        _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm_blendv_epi8(h, _mm_set1_epi16(0x7FFF), nan16));
  }
  f16_encode_tail(s + i, d + i, n - i);
}

MIXPAR_AVX2 void f16_decode_avx2(const u16* s, float* d, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
    const __m256i a = _mm256_and_si256(_mm256_cvtepu16_epi32(h), _mm256_set1_epi32(0x7FFF));
    const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7C00));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm256_blendv_epi8(f, _mm256_set1_epi32(0x7FFFFFFF), nan));
  }
  f16_decode_tail(s + i, d + i, n - i);
}

// ---- AVX-512 (F, BW, VL): 16 floats per register, masks for the NaN replacements.
#define MIXPAR_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
// GCC 12's AVX-512 intrinsics pass an _mm512_undefined_*() operand to their masked builtins,
// which -Wmaybe-uninitialized reports at every inlined call (GCC bug 105593): not ours.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

MIXPAR_AVX512 void bf16_encode_avx512(const float* s, u16* d, std::size_t n) {
  std::size_t i = 0;
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7FFF);
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(s + i);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, half), lsb), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    r = _mm512_mask_mov_epi32(r, nan, half);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm512_cvtepi32_epi16(r));
  }
  bf16_encode_tail(s + i, d + i, n - i);
}

MIXPAR_AVX512 void bf16_decode_avx512(const u16* s, float* d, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    _mm512_storeu_si512(d + i, _mm512_slli_epi32(w, 16));
  }
  bf16_decode_tail(s + i, d + i, n - i);
}

MIXPAR_AVX512 void f16_encode_avx512(const float* s, u16* d, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(s + i);
    const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm256_mask_mov_epi16(h, nan, _mm256_set1_epi16(0x7FFF)));
  }
  f16_encode_tail(s + i, d + i, n - i);
}

MIXPAR_AVX512 void f16_decode_avx512(const u16* s, float* d, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __mmask16 nan = _mm256_cmpgt_epu16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7FFF)),
                                                  _mm256_set1_epi16(0x7C00));
    const __m512i f = _mm512_castps_si512(_mm512_cvtph_ps(h));
    _mm512_storeu_si512(d + i, _mm512_mask_mov_epi32(f, nan, _mm512_set1_epi32(0x7FFFFFFF)));
  }
  f16_decode_tail(s + i, d + i, n - i);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // MIXPAR_CONVERT16_X86

bool has_path(ConvertPath p, std::string* why_not) {
  auto missing = [&](const char* what) {
    if (why_not != nullptr) *why_not = std::string("this CPU (or OS) has no ") + what;
    return false;
  };
  switch (p) {
    case ConvertPath::kPortable: return true;
    case ConvertPath::kAvx2F16c:
#if defined(MIXPAR_CONVERT16_X86)
      return cpu_has("avx2") && cpu_has("f16c") ? true : missing("AVX2 with F16C");
#else
      return missing("x86-64 vector path in this build");
#endif
    case ConvertPath::kAvx512:
#if defined(MIXPAR_CONVERT16_X86)
      return cpu_has("avx512f") && cpu_has("avx512bw") && cpu_has("avx512vl")
                 ? true
                 : missing("AVX-512 F, BW and VL");
#else
      return missing("x86-64 vector path in this build");
#endif
  }
  return false;
}

ConvertPath best_path() {
  static const ConvertPath p = has_path(ConvertPath::kAvx512, nullptr)     ? ConvertPath::kAvx512
                               : has_path(ConvertPath::kAvx2F16c, nullptr) ? ConvertPath::kAvx2F16c
                                                                           : ConvertPath::kPortable;
  return p;
}

bool is16(DType t) { return t == DType::kBF16 || t == DType::kF16; }

// Converts with path p, which the CPU has; the pair is f32 <-> bf16 / f16.
void run(ConvertPath p, const void* src, DType st, void* dst, DType dt, std::size_t n) {
#if defined(MIXPAR_CONVERT16_X86)
  if (p != ConvertPath::kPortable) {
    const bool avx512 = p == ConvertPath::kAvx512;
    if (st == DType::kF32) {
      const auto* s = static_cast<const float*>(src);
      auto* d = static_cast<u16*>(dst);
      if (dt == DType::kBF16) avx512 ? bf16_encode_avx512(s, d, n) : bf16_encode_avx2(s, d, n);
      else avx512 ? f16_encode_avx512(s, d, n) : f16_encode_avx2(s, d, n);
    } else {
      const auto* s = static_cast<const u16*>(src);
      auto* d = static_cast<float*>(dst);
      if (st == DType::kBF16) avx512 ? bf16_decode_avx512(s, d, n) : bf16_decode_avx2(s, d, n);
      else avx512 ? f16_decode_avx512(s, d, n) : f16_decode_avx2(s, d, n);
    }
    return;
  }
#endif
  (void)p;
  convert(src, st, dst, dt, n);
}

}  // namespace

std::string_view convert_path_name(ConvertPath p) {
  switch (p) {
    case ConvertPath::kPortable: return "portable";
    case ConvertPath::kAvx2F16c: return "avx2+f16c";
    case ConvertPath::kAvx512: return "avx512bw";
  }
  return "?";
}

ConvertPath convert16_path() { return best_path(); }

void convert16(const void* src, DType src_type, void* dst, DType dst_type, std::size_t n) {
  const bool pair = (src_type == DType::kF32 && is16(dst_type)) ||
                    (is16(src_type) && dst_type == DType::kF32);
  if (!pair || best_path() == ConvertPath::kPortable) {
    convert(src, src_type, dst, dst_type, n);
    return;
  }
  const std::size_t ss = dtype_size(src_type), ds = dtype_size(dst_type);
  // Each element's result is its own: the split over threads changes nothing.
  parallel_for_chunk_ranges(static_cast<std::int64_t>(n), [&](std::int64_t b, std::int64_t e) {
    const auto first = static_cast<std::size_t>(b), count = static_cast<std::size_t>(e - b);
    run(best_path(), static_cast<const char*>(src) + first * ss, src_type,
        static_cast<char*>(dst) + first * ds, dst_type, count);
  });
}

namespace detail {
bool convert16_with(ConvertPath p, const void* src, DType src_type, void* dst, DType dst_type,
                    std::size_t n, std::string* why_not) {
  const bool pair = (src_type == DType::kF32 && is16(dst_type)) ||
                    (is16(src_type) && dst_type == DType::kF32);
  if (!pair) {
    if (why_not != nullptr) *why_not = "only f32 <-> bf16 / f16 have vector paths";
    return false;
  }
  if (!has_path(p, why_not)) return false;
  run(p, src, src_type, dst, dst_type, n);
  return true;
}
}  // namespace detail

}  // namespace mixpar::ops
