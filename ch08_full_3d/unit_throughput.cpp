// The throughput kernels of unit_throughput.h. Each kernel is compiled for its own ISA (a
// function target attribute), whatever the build's MIXPAR_ISA, and called only where the CPU
// has that ISA (util/cpu_features.h).
#include "unit_throughput.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "util/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mixpar::ch08 {
namespace {

constexpr int kIterations = 1 << 14;
constexpr int kAccumulators = 12;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Inputs the compiler cannot see as constants, so that no loop is folded away.
volatile float g_a = 0.999999f, g_b = 1e-7f;
volatile float g_sink = 0;

#if defined(__x86_64__)

// One run of each kernel: returns its FLOPs and leaves the time to the caller.
__attribute__((target("avx512f"))) double run_avx512_fma() {
  const __m512 a = _mm512_set1_ps(g_a), b = _mm512_set1_ps(g_b);
  __m512 acc[kAccumulators];
  for (auto& x : acc) x = _mm512_set1_ps(1.0f);
  for (int i = 0; i < kIterations; ++i) {
    for (auto& x : acc) x = _mm512_fmadd_ps(x, a, b);
  }
  __m512 s = acc[0];
  for (int j = 1; j < kAccumulators; ++j) s = _mm512_add_ps(s, acc[j]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  g_sink = out[0];
  return 2.0 * 16 * kAccumulators * static_cast<double>(kIterations);
}

__attribute__((target("avx2,fma"))) double run_avx2_fma() {
  const __m256 a = _mm256_set1_ps(g_a), b = _mm256_set1_ps(g_b);
  __m256 acc[kAccumulators];
  for (auto& x : acc) x = _mm256_set1_ps(1.0f);
  for (int i = 0; i < kIterations; ++i) {
    for (auto& x : acc) x = _mm256_fmadd_ps(x, a, b);
  }
  __m256 s = acc[0];
  for (int j = 1; j < kAccumulators; ++j) s = _mm256_add_ps(s, acc[j]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  g_sink = out[0];
  return 2.0 * 8 * kAccumulators * static_cast<double>(kIterations);
}

double run_sse() {
  const __m128 a = _mm_set1_ps(g_a), b = _mm_set1_ps(g_b);
  __m128 acc[kAccumulators];
  for (auto& x : acc) x = _mm_set1_ps(1.0f);
  for (int i = 0; i < kIterations; ++i) {
    for (auto& x : acc) x = _mm_add_ps(_mm_mul_ps(x, a), b);
  }
  __m128 s = acc[0];
  for (int j = 1; j < kAccumulators; ++j) s = _mm_add_ps(s, acc[j]);
  g_sink = _mm_cvtss_f32(s);
  return 2.0 * 4 * kAccumulators * static_cast<double>(kIterations);
}

__attribute__((target("avx512f,avx512bf16"))) double run_avx512_bf16() {
  // bf16 pairs of (about) 1e-3: the FP32 sums grow slowly and stay normal.
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3a83), b = (__m512bh)_mm512_set1_epi16(0x3a83);
  __m512 acc[kAccumulators];
  for (auto& x : acc) x = _mm512_set1_ps(g_a);
  for (int i = 0; i < kIterations; ++i) {
    for (auto& x : acc) x = _mm512_dpbf16_ps(x, a, b);
  }
  __m512 s = acc[0];
  for (int j = 1; j < kAccumulators; ++j) s = _mm512_add_ps(s, acc[j]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  g_sink = out[0];
  return 2.0 * 32 * kAccumulators * static_cast<double>(kIterations);
}

// Linux hands a process the AMX tile state only when asked (arch_prctl, kernel 5.16+).
constexpr long kArchReqXcompPerm = 0x1023;
constexpr long kXfeatureXtiledata = 18;
bool amx_permission() {
  static const bool granted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return granted;
}

// The tile configuration of ldtilecfg: palette 1, tiles 0-5 of 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

constexpr int kAmxIterations = 1 << 12;

double run_amx_bf16() {
  TileConfig cfg;
  for (int t = 0; t < 6; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  alignas(64) static std::uint16_t src[16 * 32];
  std::fill(std::begin(src), std::end(src), std::uint16_t{0x3a83});  // bf16 of about 1e-3
  const long stride = 64;
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm4\n\t"
                   "tileloadd (%0,%1,1), %%tmm5\n\t"
                   "tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3"
                   :
                   : "r"(src), "r"(stride)
                   : "memory");
  for (int i = 0; i < kAmxIterations; ++i) {
    // tmm0..3 += tmm4 x tmm5: four independent accumulators.
    __asm__ volatile(
        "tdpbf16ps %%tmm5, %%tmm4, %%tmm0\n\t"
        "tdpbf16ps %%tmm5, %%tmm4, %%tmm1\n\t"
        "tdpbf16ps %%tmm5, %%tmm4, %%tmm2\n\t"
        "tdpbf16ps %%tmm5, %%tmm4, %%tmm3" ::);
  }
  __asm__ volatile("tilerelease" ::);
  return 4.0 * 16 * 16 * 32 * 2 * static_cast<double>(kAmxIterations);
}

#endif  // __x86_64__

}  // namespace

std::string unit_name(ComputeUnit u) {
  switch (u) {
    case ComputeUnit::kSse: return "SSE mul+add (4 FP32 lanes)";
    case ComputeUnit::kAvx2Fma: return "AVX2 FMA (8 FP32 lanes)";
    case ComputeUnit::kAvx512Fma: return "AVX-512 FMA (16 FP32 lanes)";
    case ComputeUnit::kAvx512Bf16: return "AVX512-BF16 dot products (32 bf16 products into 16 FP32 lanes)";
    case ComputeUnit::kAmxBf16: return "AMX-BF16 tiles (16x16x32 bf16 products into FP32)";
  }
  return "?";
}

ComputeUnit widest_fp32_unit() {
  if (cpu_has("avx512f")) return ComputeUnit::kAvx512Fma;
  if (cpu_has("avx2") && cpu_has("fma")) return ComputeUnit::kAvx2Fma;
  return ComputeUnit::kSse;
}

bool unit_usable(ComputeUnit u, std::string* why_not) {
  const auto no = [&](const std::string& why) {
    if (why_not != nullptr) *why_not = why;
    return false;
  };
#if defined(__x86_64__)
  switch (u) {
    case ComputeUnit::kSse: return true;
    case ComputeUnit::kAvx2Fma:
      return cpu_has("avx2") && cpu_has("fma") ? true : no("this CPU has no AVX2 FMA");
    case ComputeUnit::kAvx512Fma: return cpu_has("avx512f") ? true : no("this CPU has no AVX-512");
    case ComputeUnit::kAvx512Bf16:
      return cpu_has("avx512bf16") ? true : no("this CPU has no AVX512-BF16");
    case ComputeUnit::kAmxBf16:
      if (!cpu_has("amx-tile") || !cpu_has("amx-bf16")) return no("this CPU has no AMX-BF16");
      return amx_permission() ? true : no("Linux did not grant the AMX tile state (arch_prctl)");
  }
  return no("unknown unit");
#else
  (void)u;
  return no("the throughput kernels are x86-64 code");
#endif
}

double measure_core_flops_per_s(ComputeUnit u, int repeats) {
  if (!unit_usable(u)) return 0;
#if defined(__x86_64__)
  double best = 0;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const auto t0 = Clock::now();
    double flops = 0;
    switch (u) {
      case ComputeUnit::kSse: flops = run_sse(); break;
      case ComputeUnit::kAvx2Fma: flops = run_avx2_fma(); break;
      case ComputeUnit::kAvx512Fma: flops = run_avx512_fma(); break;
      case ComputeUnit::kAvx512Bf16: flops = run_avx512_bf16(); break;
      case ComputeUnit::kAmxBf16: flops = run_amx_bf16(); break;
    }
    best = std::max(best, flops / seconds_since(t0));
  }
  return best;
#else
  (void)repeats;
  return 0;
#endif
}

double measure_flops_per_s(ComputeUnit u, int cores, int repeats) {
  const int n = std::max(1, cores);
  std::vector<double> rate(static_cast<std::size_t>(n), 0.0);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] { rate[static_cast<std::size_t>(i)] = measure_core_flops_per_s(u, repeats); });
  }
  for (std::thread& t : threads) t.join();
  double sum = 0;
  for (double r : rate) sum += r;
  return sum;
}

}  // namespace mixpar::ch08
