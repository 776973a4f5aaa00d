// The FP32 GEMM (ops/fma_gemm.h): every kernel this CPU has computes, bit for bit, the plain
// loop that defines it (one std::fma chain over k per element, then alpha, bias, beta), on
// shapes that cross every blocking edge (micro-tile, MC, NC, and k-panels of 384), for each
// transpose and epilogue; the threaded entry point too, on any thread count; and the matmul and
// linear layer take it for FP32. A kernel the CPU lacks is skipped, saying why. The reference
// here shares no code with common/ops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/formats.h"
#include "ops/fma_gemm.h"
#include "ops/linear.h"
#include "ops/matmul.h"
#include "tensor/tensor.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace mixpar {
namespace {

using ops::GemmKernel;

constexpr GemmKernel kKernels[] = {GemmKernel::kPortable, GemmKernel::kAvx2Fma,
                                   GemmKernel::kAvx512};

struct Case {
  std::int64_t m, n, k;
  bool ta, tb;
  float alpha, beta;
  bool bias;
};

struct Operands {
  std::vector<float> a, b, bias, o;
};

// Values of mixed magnitudes and signs (so that roundings happen at every step and their order
// shows), seeded.
std::vector<float> values(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-6, 6);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(normal(g), exponent(g));
  return v;
}

Operands operands(const Case& c, unsigned seed) {
  return {values(static_cast<std::size_t>(c.m * c.k), seed),
          values(static_cast<std::size_t>(c.k * c.n), seed + 1),
          values(static_cast<std::size_t>(c.n), seed + 2),
          values(static_cast<std::size_t>(c.m * c.n), seed + 3)};
}

// The definition in fma_gemm.h, written out. Compiled with -ffp-contract=off (mixpar_ops's
// public options), so the epilogue's multiplies and adds are separate roundings here too.
std::vector<float> reference(const Case& c, const Operands& x) {
  std::vector<float> out = x.o;
  for (std::int64_t i = 0; i < c.m; ++i) {
    for (std::int64_t j = 0; j < c.n; ++j) {
      float acc = 0.0f;
      for (std::int64_t p = 0; p < c.k; ++p) {
        const float av = c.ta ? x.a[p * c.m + i] : x.a[i * c.k + p];
        const float bv = c.tb ? x.b[j * c.k + p] : x.b[p * c.n + j];
        acc = std::fma(av, bv, acc);
      }
      float t = c.alpha == 1.0f ? acc : c.alpha * acc;
      if (c.bias) t = t + x.bias[j];
      if (c.beta != 0.0f) t = t + c.beta * x.o[i * c.n + j];
      out[i * c.n + j] = t;
    }
  }
  return out;
}

// First differing element as "(i, j): got vs want", or "" when the bits agree.
std::string first_difference(const std::vector<float>& got, const std::vector<float>& want,
                             std::int64_t n) {
  for (std::size_t e = 0; e < want.size(); ++e) {
    if (std::memcmp(&got[e], &want[e], sizeof(float)) != 0) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "(%lld, %lld): %.9g vs %.9g",
                    static_cast<long long>(e / n), static_cast<long long>(e % n),
                    static_cast<double>(got[e]), static_cast<double>(want[e]));
      return buf;
    }
  }
  return "";
}

// Shapes crossing each blocking edge: micro-tiles of 4/6/12 rows and 16/32 columns, row blocks
// of 288, column blocks of 768, k-panels of 384 (k 384, 385, 600, 800), and the empty sum (k 0).
std::vector<Case> cases() {
  std::vector<Case> out;
  const std::int64_t shapes[][3] = {{1, 1, 1},     {5, 7, 3},      {13, 33, 1},
                                    {12, 32, 384},  {25, 70, 385},  {300, 800, 40},
                                    {31, 47, 600},  {9, 20, 800},   {3, 5, 0}};
  int variant = 0;
  for (const auto& s : shapes) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        // The epilogues in turn: plain, scaled and accumulating, bias, all three.
        const int e = variant++ % 4;
        out.push_back({s[0], s[1], s[2], ta, tb, e == 1 || e == 3 ? -1.25f : 1.0f,
                       e == 1 ? 1.0f : e == 3 ? 0.75f : 0.0f, e >= 2});
      }
    }
  }
  return out;
}

bool run_kernel(GemmKernel kernel, const Case& c, const Operands& x, std::vector<float>& out,
                std::string* why) {
  out = x.o;
  return ops::detail::fma_gemm_with(kernel, x.a.data(), x.b.data(),
                                    c.bias ? x.bias.data() : nullptr, out.data(), c.m, c.n, c.k,
                                    c.ta, c.tb, c.alpha, c.beta, why);
}

TEST(FmaGemm, EveryKernelComputesTheFmaChainLoopBitForBit) {
  unsigned seed = 100;
  for (const GemmKernel kernel : kKernels) {
    std::string why;
    std::vector<float> out;
    if (!ops::detail::fma_gemm_with(kernel, nullptr, nullptr, nullptr, nullptr, 0, 0, 0, false,
                                    false, 1.0f, 0.0f, &why)) {
      std::printf("[ SKIPPED  ] kernel %s: %s\n", std::string(ops::gemm_kernel_name(kernel)).c_str(),
                  why.c_str());
      continue;
    }
    for (const Case& c : cases()) {
      const Operands x = operands(c, seed += 4);
      ASSERT_TRUE(run_kernel(kernel, c, x, out, nullptr));
      EXPECT_EQ(first_difference(out, reference(c, x), c.n), "")
          << ops::gemm_kernel_name(kernel) << " m " << c.m << " n " << c.n << " k " << c.k
          << " ta " << c.ta << " tb " << c.tb << " alpha " << c.alpha << " beta " << c.beta
          << " bias " << c.bias;
    }
  }
}

// The same test on the kernel this CPU takes, so a machine that lacks the other kernels still
// checks the one it runs; it also says which one that is.
TEST(FmaGemm, TheKernelThisCpuTakesComputesTheLoop) {
  const GemmKernel kernel = ops::gemm_kernel();
  std::printf("FP32 GEMM kernel on this CPU: %s\n",
              std::string(ops::gemm_kernel_name(kernel)).c_str());
  const Case c{37, 75, 300, false, true, 1.0f, 1.0f, true};
  const Operands x = operands(c, 7);
  std::vector<float> out;
  ASSERT_TRUE(run_kernel(kernel, c, x, out, nullptr));
  EXPECT_EQ(first_difference(out, reference(c, x), c.n), "");
}

TEST(FmaGemm, AKernelThisCpuLacksSaysWhy) {
  for (const GemmKernel kernel : kKernels) {
    std::string why;
    std::vector<float> out(1, 3.0f);
    const float one = 1.0f;
    if (!ops::detail::fma_gemm_with(kernel, &one, &one, nullptr, out.data(), 1, 1, 1, false,
                                    false, 1.0f, 0.0f, &why)) {
      EXPECT_NE(why.find("this CPU has no"), std::string::npos) << why;
      EXPECT_EQ(out[0], 3.0f) << "a refused call leaves the output alone";
    } else {
      EXPECT_EQ(out[0], 1.0f);
    }
  }
}

// What makes the bitwise comparison meaningful: on these operands the fused chain, the same
// chain with separately rounded multiplies and adds (the fixed-order lessons), and two
// interleaved partial sums (what a kernel keeping several accumulators per element computes,
// as Eigen's did) all give other bits, so a kernel summing in any of those orders fails the
// tests above.
TEST(FmaGemm, OtherSummationOrdersGiveOtherBitsOnTheseOperands) {
  const Case c{12, 32, 600, false, false, 1.0f, 0.0f, false};
  const Operands x = operands(c, 11);
  const std::vector<float> fused = reference(c, x);
  int unfused_differs = 0, split_differs = 0;
  for (std::int64_t i = 0; i < c.m; ++i) {
    for (std::int64_t j = 0; j < c.n; ++j) {
      float unfused = 0.0f, even = 0.0f, odd = 0.0f;
      for (std::int64_t p = 0; p < c.k; ++p) {
        const float prod = x.a[i * c.k + p] * x.b[p * c.n + j];
        unfused = unfused + prod;
        float& half = p % 2 == 0 ? even : odd;
        half = std::fma(x.a[i * c.k + p], x.b[p * c.n + j], half);
      }
      const float f = fused[i * c.n + j];
      unfused_differs += unfused != f;
      split_differs += even + odd != f;
    }
  }
  EXPECT_GT(unfused_differs, 12 * 32 / 4);
  EXPECT_GT(split_differs, 12 * 32 / 4);
}

TEST(FmaGemm, ZeroBetaNeverReadsTheOutput) {
  const Case c{20, 40, 30, false, false, 1.0f, 0.0f, false};
  Operands x = operands(c, 3);
  for (float& v : x.o) v = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out = x.o;
  ops::detail::fma_gemm(x.a.data(), x.b.data(), nullptr, out.data(), c.m, c.n, c.k, false, false,
                        1.0f, 0.0f);
  for (const float v : out) ASSERT_TRUE(std::isfinite(v));
}

TEST(FmaGemm, InfinitiesAndNansReachTheElementsTheyTouchOnly) {
  const Case c{14, 35, 270, false, false, 1.0f, 0.0f, false};
  Operands x = operands(c, 5);
  x.a[3 * c.k + 260] = std::numeric_limits<float>::infinity();  // row 3, past the first panel
  x.b[7 * c.n + 33] = std::numeric_limits<float>::quiet_NaN();   // column 33
  std::vector<float> out = x.o;
  ops::detail::fma_gemm(x.a.data(), x.b.data(), nullptr, out.data(), c.m, c.n, c.k, false, false,
                        1.0f, 0.0f);
  const std::vector<float> want = reference(c, x);
  for (std::int64_t i = 0; i < c.m; ++i) {
    for (std::int64_t j = 0; j < c.n; ++j) {
      const float got = out[i * c.n + j], ref = want[i * c.n + j];
      ASSERT_EQ(std::isnan(got), std::isnan(ref)) << i << ", " << j;
      if (!std::isnan(ref)) {
        ASSERT_EQ(got, ref) << i << ", " << j;
      }
      ASSERT_EQ(std::isnan(got), j == 33 || (i == 3 && std::isinf(ref * 0.0f))) << i << ", " << j;
    }
  }
}

// Threads take whole output blocks (parallel_gemm.h), so the bits are those of one thread.
TEST(FmaGemm, ThreadCountDoesNotChangeABit) {
  const Case c{300, 260, 520, true, false, 1.0f, 1.0f, false};
  const Operands x = operands(c, 9);
  const std::vector<float> want = reference(c, x);
#if defined(_OPENMP)
  const int before = omp_get_max_threads();
  for (const int threads : {1, 2, 3, 4}) {
    omp_set_num_threads(threads);
#else
  for (const int threads : {1}) {
#endif
    std::vector<float> out = x.o;
    ops::detail::fma_gemm(x.a.data(), x.b.data(), nullptr, out.data(), c.m, c.n, c.k, c.ta, c.tb,
                          c.alpha, c.beta);
    EXPECT_EQ(first_difference(out, want, c.n), "") << threads << " threads";
  }
#if defined(_OPENMP)
  omp_set_num_threads(before);
#endif
}

// BF16 operands go to the kernels as they are and are widened while packed: the result has the
// bits of the FP32 GEMM on the widened values, for each transpose and across k-panels.
TEST(FmaGemm, Bf16OperandsWidenedInThePackingGiveTheWidenedGemmsBits) {
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      const Case c{29, 45, 300, ta, tb, 1.0f, 1.0f, false};
      Operands x = operands(c, 41);
      std::vector<std::uint16_t> a16(x.a.size()), b16(x.b.size());
      for (std::size_t i = 0; i < a16.size(); ++i) {
        a16[i] = float_to_bf16_bits(x.a[i]);
        x.a[i] = bf16_bits_to_float(a16[i]);
      }
      for (std::size_t i = 0; i < b16.size(); ++i) {
        b16[i] = float_to_bf16_bits(x.b[i]);
        x.b[i] = bf16_bits_to_float(b16[i]);
      }
      const std::vector<float> want = reference(c, x);
      for (const int which : {1, 2, 3}) {  // a bf16, b bf16, both
        std::vector<float> out = x.o;
        const bool a_is16 = which & 1, b_is16 = which & 2;
        ops::detail::fma_gemm(a_is16 ? static_cast<const void*>(a16.data()) : x.a.data(),
                              a_is16 ? ops::GemmOperand::kBF16 : ops::GemmOperand::kF32,
                              b_is16 ? static_cast<const void*>(b16.data()) : x.b.data(),
                              b_is16 ? ops::GemmOperand::kBF16 : ops::GemmOperand::kF32, nullptr,
                              out.data(), c.m, c.n, c.k, ta, tb, c.alpha, c.beta);
        EXPECT_EQ(first_difference(out, want, c.n), "")
            << "ta " << ta << " tb " << tb << " bf16 operands " << which;
      }
    }
  }
}

Tensor tensor_of(const std::vector<float>& v, Shape shape) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}

std::vector<float> values_of(const Tensor& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  std::memcpy(v.data(), t.data(), v.size() * sizeof(float));
  return v;
}

TEST(FmaGemm, Fp32MatmulAndLinearLayerComputeTheFmaChain) {
  const Case mm{40, 70, 290, true, false, 0.5f, 1.0f, false};
  const Operands x = operands(mm, 21);
  Tensor out = tensor_of(x.o, {mm.m, mm.n});
  ops::matmul(tensor_of(x.a, {mm.k, mm.m}), tensor_of(x.b, {mm.k, mm.n}), out, true, false,
              ops::Accumulation::kFP32, mm.alpha, mm.beta);
  EXPECT_EQ(first_difference(values_of(out), reference(mm, x), mm.n), "") << "matmul";

  const Case lin{33, 50, 300, false, false, 1.0f, 0.0f, true};
  const Operands y = operands(lin, 31);
  const Tensor bias = tensor_of(y.bias, {lin.n});
  Tensor yout = Tensor::empty({lin.m, lin.n}, DType::kF32);
  ops::linear_forward(tensor_of(y.a, {lin.m, lin.k}), tensor_of(y.b, {lin.k, lin.n}), &bias, yout);
  EXPECT_EQ(first_difference(values_of(yout), reference(lin, y), lin.n), "") << "linear";
}

}  // namespace
}  // namespace mixpar
