// The FP32 GEMM's kernels and their driver (fma_gemm.h). Each vector kernel is compiled for its
// ISA with a target attribute and called only where CPUID and XGETBV say the CPU and OS have it
// (util/cpu_features.h), so the default x86-64-v3 build carries the AVX-512 kernel and an
// AVX-512 build the AVX2 one; which one runs never changes a bit of the result.
#include "ops/fma_gemm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "ops/parallel_gemm.h"
#include "util/cpu_features.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MIXPAR_FMA_GEMM_X86 1
#endif

namespace mixpar::ops {
namespace {

struct Gemm {
  const void* a;  // FP32, or BF16 when a_bf16 (widened while packed)
  const void* b;
  const float* bias;
  float* o;
  std::int64_t m, n, k;
  bool ta, tb;
  float alpha, beta;
  bool a_bf16, b_bf16;
};

// An element of an operand as FP32: a float as it is, a bf16 pattern as the FP32 number whose
// top half it is (exact: the same widening as formats.h and convert16.h).
inline float widen(float x) { return x; }
inline float widen(std::uint16_t bf16) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bf16) << 16);
}

// The epilogue of one element, in fma_gemm.h's order. The vector kernels do the same
// operations on whole rows of a tile; mixpar_ops is compiled with -ffp-contract=off, so neither
// fuses the multiply and the add here into an FMA.
inline float finish(const Gemm& g, float acc, std::int64_t i, std::int64_t j) {
  float t = g.alpha == 1.0f ? acc : g.alpha * acc;
  if (g.bias != nullptr) t = t + g.bias[j];
  if (g.beta != 0.0f) t = t + g.beta * g.o[i * g.n + j];
  return t;
}

// An edge tile (fewer than MR rows or NR columns are real): the kernel leaves its accumulators
// in tile [MR][NR] and the real elements are finished one by one.
void finish_tile(const Gemm& g, const float* tile, int nr_tile, std::int64_t i0, std::int64_t j0,
                 int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      g.o[(i0 + r) * g.n + j0 + c] = finish(g, tile[r * nr_tile + c], i0 + r, j0 + c);
    }
  }
}

// Blocking (BLIS's loops around the micro-kernel, with BLIS's names): output columns in blocks
// of NC, k in panels of KC, output rows in blocks of MC. One KC x NR panel of packed B (24 KiB
// on AVX2, 48 KiB on AVX-512) is reused from L1/L2 by the MC / MR micro-panels of A (an MC x KC
// block, 432 KiB, in L2). An element's chain crosses the k-panels unbroken: between panels its
// accumulator is stored as an FP32 number and loaded back, which changes nothing (fma_gemm.h).
// The sizes therefore set only the speed. On the Sapphire Rapids Xeon of
// ch08_full_3d/PERFORMANCE.md (2 MiB L2) a config-S step was fastest on both kernels with KC
// 384 (of 256, 384, 512) and MC 288 or more (of 96-576); MC 288 is the largest whose A block
// also fits the 512 KiB L2 of AMD's Zen 2 and 3 (not measured there).
constexpr std::int64_t kKc = 384, kMc = 288, kNc = 768;

// Packing: indices [first, first + count) of one operand's non-k dimension (op(A)'s rows or
// op(B)'s columns) and steps [p0, p0 + kc) as panels of W, each [kc][W] (the W values the
// kernel reads at one step side by side); indices past the end are zero. Element (index x,
// step kk) is src[kk * ld + x] when the operand is stored k-major (a transposed A, a plain B)
// and src[x * ld + kk] otherwise (a plain A, a transposed B).
template <int W, class S>
void pack_panels(const S* src, std::int64_t ld, bool k_major, std::int64_t first,
                 std::int64_t count, std::int64_t p0, std::int64_t kc, float* dst) {
  const std::int64_t panels = (count + W - 1) / W;
  if (k_major) {
    // One step's values for the whole block are a contiguous run of one stored row, read in
    // order and dealt out to the panels (reading W values per row and panel instead jumps from
    // row to far-apart row, which the hardware prefetcher does not follow).
    const std::int64_t full = count / W;  // panels without padding: no test per element
    for (std::int64_t kk = 0; kk < kc; ++kk) {
      const S* row = src + (p0 + kk) * ld + first;
      for (std::int64_t p = 0; p < full; ++p) {
        float* out = dst + p * W * kc + kk * W;
        for (int x = 0; x < W; ++x) out[x] = widen(row[p * W + x]);
      }
      if (full < panels) {
        float* out = dst + full * W * kc + kk * W;
        const int real = static_cast<int>(count - full * W);
        for (int x = 0; x < W; ++x) out[x] = x < real ? widen(row[full * W + x]) : 0.0f;
      }
    }
    return;
  }
  // The W stored rows of a panel read side by side, each in order, one step's W values written
  // together.
  for (std::int64_t p = 0; p < panels; ++p) {
    float* out = dst + p * W * kc;
    const int real = static_cast<int>(std::min<std::int64_t>(W, count - p * W));
    const S* rows[W];
    for (int x = 0; x < W; ++x) rows[x] = src + (first + p * W + std::min(x, real - 1)) * ld + p0;
    if (real == W) {  // a whole panel: no test per element
      for (std::int64_t kk = 0; kk < kc; ++kk) {
        for (int x = 0; x < W; ++x) out[kk * W + x] = widen(rows[x][kk]);
      }
    } else {
      for (std::int64_t kk = 0; kk < kc; ++kk) {
        for (int x = 0; x < W; ++x) out[kk * W + x] = x < real ? widen(rows[x][kk]) : 0.0f;
      }
    }
  }
}

// op(A)'s rows [i0, i0 + rows) as micro-panels of MR rows; op(B)'s columns [j0, j0 + cols) as
// panels of NR columns; both over steps [p0, p0 + kc).
template <int MR, class S>
void pack_a(const Gemm& g, std::int64_t i0, std::int64_t rows, std::int64_t p0, std::int64_t kc,
            float* ap) {
  pack_panels<MR>(static_cast<const S*>(g.a), g.ta ? g.m : g.k, g.ta, i0, rows, p0, kc, ap);
}
template <int NR, class S>
void pack_b(const Gemm& g, std::int64_t j0, std::int64_t cols, std::int64_t p0, std::int64_t kc,
            float* bp) {
  pack_panels<NR>(static_cast<const S*>(g.b), g.tb ? g.k : g.n, !g.tb, j0, cols, p0, kc, bp);
}

// What one micro-kernel call computes: an MR x NR tile of the output over the steps of one
// k-panel. Its accumulators start at zero (first panel) or at the partial sums the previous
// panel left in part[r * ldp + c]; after the last panel the tile is finished into o (only its
// rows x cols real elements), otherwise its partial sums go back to part.
struct Tile {
  const float* ap;
  const float* bp;
  std::int64_t kc;
  float* part;
  std::int64_t ldp;
  bool first, last;
  std::int64_t i0, j0;
  int rows, cols;
};

// ---- Portable: plain C++ with std::fma, 4 x 16 accumulators (the compiler may vectorise the
// c loop; each element's chain is the same whatever it does, fma being one rounding).
constexpr int kPortableMr = 4, kPortableNr = 16;

void kernel_portable(const Gemm& g, const Tile& t) {
  float acc[kPortableMr * kPortableNr];
  for (int r = 0; r < kPortableMr; ++r) {
    for (int c = 0; c < kPortableNr; ++c) {
      acc[r * kPortableNr + c] = t.first ? 0.0f : t.part[r * t.ldp + c];
    }
  }
  for (std::int64_t kk = 0; kk < t.kc; ++kk) {
    const float* av = t.ap + kk * kPortableMr;
    const float* bv = t.bp + kk * kPortableNr;
    for (int r = 0; r < kPortableMr; ++r) {
      for (int c = 0; c < kPortableNr; ++c) {
        acc[r * kPortableNr + c] = std::fma(av[r], bv[c], acc[r * kPortableNr + c]);
      }
    }
  }
  if (!t.last) {
    for (int r = 0; r < kPortableMr; ++r) {
      for (int c = 0; c < kPortableNr; ++c) t.part[r * t.ldp + c] = acc[r * kPortableNr + c];
    }
    return;
  }
  finish_tile(g, acc, kPortableNr, t.i0, t.j0, t.rows, t.cols);
}

#if defined(MIXPAR_FMA_GEMM_X86)

// The vector kernels, one per ISA: MR rows x NR columns, two registers of W floats per row.
// Their accumulators are named only with constant indices (every loop over them unrolled), so
// the compiler keeps all of them in registers for the whole k-panel.
#define MIXPAR_FMA_GEMM_KERNEL(NAME, TARGET, VEC, P, W, MR, NV, BROADCAST)                        \
  __attribute__((target(TARGET))) void NAME(const Gemm& g, const Tile& t) {                       \
    constexpr int NR = NV * W;                                                                    \
    VEC acc[MR][NV];                                                                              \
    _Pragma("GCC unroll 16") for (int r = 0; r < MR; ++r) {                                       \
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {                                      \
        acc[r][v] = t.first ? P##_setzero_ps() : P##_loadu_ps(t.part + r * t.ldp + v * W);       \
      }                                                                                           \
    }                                                                                             \
    if (t.last) {                                                                                 \
      /* The output rows the epilogue will write, fetched while the tile is computed. */          \
      for (int r = 0; r < t.rows; ++r) {                                                          \
        const char* row = reinterpret_cast<const char*>(g.o + (t.i0 + r) * g.n + t.j0);           \
        _mm_prefetch(row, _MM_HINT_T0);                                                           \
        _mm_prefetch(row + NR * 4 - 4, _MM_HINT_T0);                                              \
      }                                                                                           \
    }                                                                                             \
    const float* ap = t.ap;                                                                       \
    const float* bp = t.bp;                                                                       \
    for (std::int64_t kk = t.kc; kk > 0; --kk, ap += MR, bp += NR) {                              \
      VEC b[NV];                                                                                  \
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) b[v] = P##_loadu_ps(bp + v * W);       \
      _Pragma("GCC unroll 16") for (int r = 0; r < MR; ++r) {                                     \
        const VEC x = BROADCAST(ap + r);                                                          \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {                                    \
          acc[r][v] = P##_fmadd_ps(x, b[v], acc[r][v]);                                           \
        }                                                                                         \
      }                                                                                           \
    }                                                                                             \
    if (!t.last) {                                                                                \
      _Pragma("GCC unroll 16") for (int r = 0; r < MR; ++r) {                                     \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {                                    \
          P##_storeu_ps(t.part + r * t.ldp + v * W, acc[r][v]);                                   \
        }                                                                                         \
      }                                                                                           \
      return;                                                                                     \
    }                                                                                             \
    alignas(64) float tile[MR * NR];                                                              \
    _Pragma("GCC unroll 16") for (int r = 0; r < MR; ++r) {                                       \
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {                                      \
        P##_storeu_ps(tile + r * NR + v * W, acc[r][v]);                                          \
      }                                                                                           \
    }                                                                                             \
    if (t.rows < MR || t.cols < NR) {                                                             \
      finish_tile(g, tile, NR, t.i0, t.j0, t.rows, t.cols);                                       \
      return;                                                                                     \
    }                                                                                             \
    /* The epilogue of fma_gemm.h on whole registers: the same operations as finish(). */        \
    const VEC alpha = P##_set1_ps(g.alpha), beta = P##_set1_ps(g.beta);                           \
    for (int r = 0; r < MR; ++r) {                                                                \
      float* out = g.o + (t.i0 + r) * g.n + t.j0;                                                 \
      for (int h = 0; h < NR; h += W) {                                                           \
        VEC v = P##_loadu_ps(tile + r * NR + h);                                                  \
        if (g.alpha != 1.0f) v = P##_mul_ps(alpha, v);                                            \
        if (g.bias != nullptr) v = P##_add_ps(v, P##_loadu_ps(g.bias + t.j0 + h));                \
        if (g.beta != 0.0f) v = P##_add_ps(v, P##_mul_ps(beta, P##_loadu_ps(out + h)));           \
        P##_storeu_ps(out + h, v);                                                                \
      }                                                                                           \
    }                                                                                             \
  }

// AVX2 + FMA: 6 x 16, 12 of the 16 ymm registers hold accumulators, 2 the step's row of B (a
// 4 x 24 tile, Eigen's shape, measured slower on config S, whose widths of 256 leave 24-column
// panels part empty).
constexpr int kAvx2Mr = 6, kAvx2Nr = 16;
MIXPAR_FMA_GEMM_KERNEL(kernel_avx2, "avx2,fma", __m256, _mm256, 8, kAvx2Mr, 2,
                       _mm256_broadcast_ss)

// AVX-512 F: 12 x 32, 24 of the 32 zmm registers hold accumulators.
constexpr int kAvx512Mr = 12, kAvx512Nr = 32;
__attribute__((target("avx512f"))) inline __m512 broadcast512(const float* p) {
  return _mm512_set1_ps(*p);
}
MIXPAR_FMA_GEMM_KERNEL(kernel_avx512, "avx512f", __m512, _mm512, 16, kAvx512Mr, 2,
                       broadcast512)

#undef MIXPAR_FMA_GEMM_KERNEL

#endif  // MIXPAR_FMA_GEMM_X86

using Kernel = void (*)(const Gemm&, const Tile&);

// One output block [i0, i0 + rows) x [j0, j0 + cols) on one thread, in BLIS's loop order:
// columns by NC, k by KC (B packed once per pair), rows by MC (A packed), then every NR-column
// panel of B with every MR-row micro-panel of A. The partial sums between k-panels live in
// part (the block's rows x NC), which a product with k <= KC never touches.
template <int MR, int NR>
void run_block(const Gemm& g, Kernel kernel, std::int64_t i0, std::int64_t rows, std::int64_t j0,
               std::int64_t cols) {
  static_assert(kMc % MR == 0 && kNc % NR == 0, "blocks are whole micro-tiles");
  static thread_local std::vector<float> apack, bpack, part;
  const std::int64_t kpanels = std::max<std::int64_t>(1, (g.k + kKc - 1) / kKc);
  const std::int64_t kc_max = std::min(g.k, kKc);
  apack.resize(static_cast<std::size_t>(kMc * kc_max));
  bpack.resize(static_cast<std::size_t>(kNc * kc_max));
  if (kpanels > 1) part.resize(static_cast<std::size_t>((rows + MR - 1) / MR * MR * kNc));
  for (std::int64_t jc = j0; jc < j0 + cols; jc += kNc) {
    const std::int64_t nc = std::min(kNc, j0 + cols - jc);
    for (std::int64_t kp = 0; kp < kpanels; ++kp) {
      const std::int64_t p0 = kp * kKc;
      const std::int64_t kc = std::min(kKc, g.k - p0);
      (g.b_bf16 ? pack_b<NR, std::uint16_t> : pack_b<NR, float>)(g, jc, nc, p0, kc, bpack.data());
      for (std::int64_t ic = i0; ic < i0 + rows; ic += kMc) {
        const std::int64_t mc = std::min(kMc, i0 + rows - ic);
        (g.a_bf16 ? pack_a<MR, std::uint16_t> : pack_a<MR, float>)(g, ic, mc, p0, kc,
                                                                  apack.data());
        for (std::int64_t jr = 0; jr < nc; jr += NR) {
          for (std::int64_t ir = 0; ir < mc; ir += MR) {
            const Tile t{apack.data() + ir * kc,
                         bpack.data() + jr * kc,
                         kc,
                         part.data() + (ic - i0 + ir) * kNc + jr,
                         kNc,
                         kp == 0,
                         kp + 1 == kpanels,
                         ic + ir,
                         jc + jr,
                         static_cast<int>(std::min<std::int64_t>(MR, mc - ir)),
                         static_cast<int>(std::min<std::int64_t>(NR, nc - jr))};
            kernel(g, t);
          }
        }
      }
    }
  }
}

void run(GemmKernel which, const Gemm& g, std::int64_t i0, std::int64_t rows, std::int64_t j0,
         std::int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  switch (which) {
#if defined(MIXPAR_FMA_GEMM_X86)
    case GemmKernel::kAvx512:
      run_block<kAvx512Mr, kAvx512Nr>(g, kernel_avx512, i0, rows, j0, cols);
      return;
    case GemmKernel::kAvx2Fma:
      run_block<kAvx2Mr, kAvx2Nr>(g, kernel_avx2, i0, rows, j0, cols);
      return;
#endif
    default:
      run_block<kPortableMr, kPortableNr>(g, kernel_portable, i0, rows, j0, cols);
      return;
  }
}

bool kernel_available_now(GemmKernel which, std::string* why_not) {
  switch (which) {
    case GemmKernel::kPortable:
      return true;
    case GemmKernel::kAvx2Fma:
#if defined(MIXPAR_FMA_GEMM_X86)
      if (cpu_has("avx2") && cpu_has("fma")) return true;
#endif
      if (why_not != nullptr) *why_not = "this CPU has no AVX2 with FMA";
      return false;
    case GemmKernel::kAvx512:
#if defined(MIXPAR_FMA_GEMM_X86)
      if (cpu_has("avx512f")) return true;
#endif
      if (why_not != nullptr) *why_not = "this CPU has no AVX-512 F";
      return false;
  }
  return false;
}

// CPUID once per kernel and process (the answer cannot change while it runs).
bool kernel_available(GemmKernel which, std::string* why_not) {
  struct Answer {
    bool ok;
    std::string why;
  };
  static const Answer answers[] = {
      [] { Answer a; a.ok = kernel_available_now(GemmKernel::kPortable, &a.why); return a; }(),
      [] { Answer a; a.ok = kernel_available_now(GemmKernel::kAvx2Fma, &a.why); return a; }(),
      [] { Answer a; a.ok = kernel_available_now(GemmKernel::kAvx512, &a.why); return a; }()};
  const Answer& a = answers[static_cast<int>(which)];
  if (!a.ok && why_not != nullptr) *why_not = a.why;
  return a.ok;
}

}  // namespace

std::string_view gemm_kernel_name(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::kPortable: return "portable (std::fma) 4x16";
    case GemmKernel::kAvx2Fma: return "avx2+fma 6x16";
    case GemmKernel::kAvx512: return "avx512f 12x32";
  }
  return "?";
}

GemmKernel gemm_kernel() {
  static const GemmKernel chosen = [] {
    for (GemmKernel k : {GemmKernel::kAvx512, GemmKernel::kAvx2Fma}) {
      if (kernel_available(k, nullptr)) return k;
    }
    return GemmKernel::kPortable;
  }();
  return chosen;
}

namespace detail {

void fma_gemm(const void* a, GemmOperand a_type, const void* b, GemmOperand b_type,
              const float* bias, float* o, std::int64_t m, std::int64_t n, std::int64_t k, bool ta,
              bool tb, float alpha, float beta) {
  const Gemm g{a,  b,  bias, o,     m,    n, k, ta, tb, alpha, beta, a_type == GemmOperand::kBF16,
               b_type == GemmOperand::kBF16};
  const GemmKernel which = gemm_kernel();
  for_gemm_blocks(m, n, k, [&](std::int64_t i0, std::int64_t rows, std::int64_t j0,
                               std::int64_t cols) { run(which, g, i0, rows, j0, cols); });
}

void fma_gemm(const float* a, const float* b, const float* bias, float* o, std::int64_t m,
              std::int64_t n, std::int64_t k, bool ta, bool tb, float alpha, float beta) {
  fma_gemm(a, GemmOperand::kF32, b, GemmOperand::kF32, bias, o, m, n, k, ta, tb, alpha, beta);
}

bool fma_gemm_with(GemmKernel kernel, const float* a, const float* b, const float* bias, float* o,
                   std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, float alpha,
                   float beta, std::string* why_not) {
  if (!kernel_available(kernel, why_not)) return false;
  const Gemm g{a, b, bias, o, m, n, k, ta, tb, alpha, beta, false, false};
  run(kernel, g, 0, m, 0, n);
  return true;
}

}  // namespace detail
}  // namespace mixpar::ops
