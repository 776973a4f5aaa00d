// GEMMs against an FP64 reference (every dtype, transpose, alpha, beta) with per-element bounds:
// FP32 sums of K products err by at most K 2^-24 sum|a b| (TF32 adds 2^-10 per product), then
// the output rounds. The linear layers, fused and unfused, against ops::linear_* and the GELU
// layers. Each test skips, saying why, where no CUDA device is visible.
#include <gtest/gtest.h>

#include "gpu.h"

#if MIXPAR_HAVE_CUDA

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/linear.h"
#include "cuda/stream.h"
#include "cuda_test_util.h"
#include "model/layers.h"
#include "ops/linear.h"
#include "ops/matmul.h"

namespace mixpar::cuda {
namespace {

using cuda_testing::all_close;
using cuda_testing::random_host;
using cuda_testing::sum_tolerance;
using cuda_testing::Tolerance;
using cuda_testing::tolerance_for;

double unit_roundoff(DType dt) {
  switch (dt) {
    case DType::kF32: return std::ldexp(1.0, -24);
    case DType::kF16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -8);
  }
}

struct Case {
  DType in, out;
  MathMode math;
};

int sm_major() {
  int v = 0;
  MIXPAR_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0));
  return v;
}

// A fused call ran epilogue e exactly `calls` times since `before` where the architecture
// fuses it (epilogue_expected), and an unfused call never asked cuBLASLt at all: a "fused"
// test cannot pass on the unfused path unnoticed.
::testing::AssertionResult epilogue_ran(const Blas& blas, const EpilogueStats::Counts& before,
                                        Epilogue e, DType dt, bool fuse, std::int64_t calls = 1) {
  const EpilogueStats::Counts now = blas.epilogue_stats();
  const std::int64_t fused = now.total_fused() - before.total_fused();
  const std::int64_t asked = fused + now.total_declined() - before.total_declined();
  if (!fuse) {
    if (asked == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "the unfused path called cuBLASLt " << asked << " times";
  }
  if (!epilogue_expected(e, dt, sm_major())) return ::testing::AssertionSuccess();
  if (now.fused_of(e) - before.fused_of(e) == calls) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << epilogue_name(e) << " on " << dtype_name(dt) << " (sm " << sm_major() << "): "
         << now.fused_of(e) - before.fused_of(e) << " fused calls, expected " << calls
         << "; first decline: " << (now.first_decline.empty() ? "none" : now.first_decline);
}

TEST(CudaGemm, MatmulMatchesAnFp64ReferenceForEveryDtypeAndTranspose) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  Blas blas(stream.get());
  const Case cases[] = {{DType::kF32, DType::kF32, MathMode::kFp32},
                        {DType::kF32, DType::kF32, MathMode::kTf32},
                        {DType::kBF16, DType::kBF16, MathMode::kFp32},
                        {DType::kBF16, DType::kF32, MathMode::kFp32},
                        {DType::kF16, DType::kF16, MathMode::kFp32}};
  const std::int64_t M = 37, N = 45, K = 72;
  std::uint64_t seed = 200;
  for (const Case& c : cases) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.0f, 0.5f}) {
          const Tensor a = random_host(ta ? Shape{K, M} : Shape{M, K}, c.in, ++seed);
          const Tensor b = random_host(tb ? Shape{N, K} : Shape{K, N}, c.in, ++seed);
          const Tensor c0 = random_host({M, N}, c.out, ++seed);
          DeviceTensor out = DeviceTensor::from_host(c0);
          if (beta == 0.0f) out.poison();  // beta 0 must never read out (NaN would spread)
          matmul(blas, DeviceTensor::from_host(a), DeviceTensor::from_host(b), out, ta, tb, 1.5f,
                 beta, c.math);
          const mixpar::testing::GemmRef ref = mixpar::testing::reference_gemm(
              mixpar::testing::to_doubles(a), mixpar::testing::to_doubles(b),
              mixpar::testing::to_doubles(c0), M, N, K, ta, tb, 1.5, beta);
          std::vector<float> want(ref.value.begin(), ref.value.end());
          const double per_product = c.math == MathMode::kTf32 ? std::ldexp(1.0, -10) : 0.0;
          const Tolerance tol{static_cast<double>(K) * std::ldexp(1.0, -24) + per_product,
                              2 * unit_roundoff(c.out)};
          const std::string tag = std::string(dtype_name(c.in)) + "->" +
                                  std::string(dtype_name(c.out)) +
                                  (c.math == MathMode::kTf32 ? " tf32" : "") + " ta " +
                                  std::to_string(ta) + " tb " + std::to_string(tb) + " beta " +
                                  std::to_string(beta);
          EXPECT_TRUE(all_close(out.to_floats(stream.get()), want, tol, tag, &ref.magnitude));
        }
      }
    }
  }
}

// x [R, in], w [in, out], b [out] in dt; the CPU layer's result; tolerances from the sums of
// `in` products (inputs are in [-1, 1]: terms of magnitude 1).
struct LinearData {
  Tensor x, w, b, dy;
};
LinearData linear_data(DType dt, std::int64_t R, std::int64_t in, std::int64_t out,
                       std::uint64_t seed) {
  return {random_host({R, in}, dt, seed), random_host({in, out}, dt, seed + 1),
          random_host({out}, dt, seed + 2), random_host({R, out}, dt, seed + 3)};
}

TEST(CudaGemm, LinearForwardFusedAndUnfusedMatchCpu) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  Blas blas(stream.get());
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const LinearData d = linear_data(dt, 50, 96, 128, 300);
    Tensor y = Tensor::empty({50, 128}, dt);
    ops::linear_forward(d.x, d.w, &d.b, y);
    for (bool fuse : {true, false}) {
      DeviceTensor dy_out = DeviceTensor::empty({50, 128}, dt);
      dy_out.poison(stream.get());
      const DeviceTensor b = DeviceTensor::from_host(d.b);
      const EpilogueStats::Counts before = blas.epilogue_stats();
      linear_forward(blas, DeviceTensor::from_host(d.x), DeviceTensor::from_host(d.w), &b, dy_out,
                     {fuse, MathMode::kFp32});
      EXPECT_TRUE(epilogue_ran(blas, before, Epilogue::kBias, dt, fuse));
      // Unfused 16-bit rounds x w before adding b: one more rounding than the CPU's.
      const double extra = !fuse && dt != DType::kF32 ? 2.0 : 1.0;
      Tolerance tol = tolerance_for(dt, 96.0);
      tol.rtol *= extra;
      tol.atol += dt == DType::kF32 ? 0.0 : extra * unit_roundoff(dt) * 8.0;  // |x w| <~ 8
      EXPECT_TRUE(all_close(dy_out.to_floats(stream.get()), y.to_floats(), tol,
                            std::string("linear ") + std::string(dtype_name(dt)) +
                                (fuse ? " fused" : " unfused")));
    }
  }
}

TEST(CudaGemm, LinearGeluForwardMatchesCpuLinearThenGelu) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  Blas blas(stream.get());
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const LinearData d = linear_data(dt, 40, 64, 256, 400);
    Tensor pre = Tensor::empty({40, 256}, dt), act = Tensor::empty({40, 256}, dt);
    ops::linear_forward(d.x, d.w, &d.b, pre);
    layers::gelu_forward(pre, act);
    for (bool fuse : {true, false}) {
      DeviceTensor g_pre = DeviceTensor::empty({40, 256}, dt);
      DeviceTensor g_act = DeviceTensor::empty({40, 256}, dt);
      g_pre.poison(stream.get());
      g_act.poison(stream.get());
      const EpilogueStats::Counts before = blas.epilogue_stats();
      linear_gelu_forward(blas, DeviceTensor::from_host(d.x), DeviceTensor::from_host(d.w),
                          DeviceTensor::from_host(d.b), g_pre, g_act, {fuse, MathMode::kFp32});
      EXPECT_TRUE(epilogue_ran(blas, before, Epilogue::kGeluAuxBias, dt, fuse));
      // pre is the same sum rounded once. Fused, GELU sees the FP32 sum where the CPU sees its
      // rounded value (a 16-bit ulp of |pre| <~ 8), and cuBLASLt may evaluate tanh with the
      // hardware approximation (~2^-11 relative): allowances for both on the fused GELU.
      const Tolerance tol = tolerance_for(dt, 64.0);
      Tolerance tol_act = tol;
      if (dt != DType::kF32) tol_act.atol += 2 * unit_roundoff(dt) * 8.0;
      if (fuse) tol_act.atol += 8.0 * std::ldexp(1.0, -10);
      const std::string tag = std::string(dtype_name(dt)) + (fuse ? " fused" : " unfused");
      EXPECT_TRUE(all_close(g_pre.to_floats(stream.get()), pre.to_floats(), tol, "pre " + tag));
      EXPECT_TRUE(
          all_close(g_act.to_floats(stream.get()), act.to_floats(), tol_act, "gelu " + tag));
    }
  }
}

TEST(CudaGemm, LinearBackwardFusedAndUnfusedMatchCpu) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  Blas blas(stream.get());
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (bool accumulate : {false, true}) {
      const std::int64_t R = 64, in = 48, out = 80;
      const LinearData d = linear_data(dt, R, in, out, 500);
      const Tensor dw0 = random_host({in, out}, dt, 510), db0 = random_host({out}, dt, 511);
      Tensor dx = Tensor::empty({R, in}, dt), dw = dw0.clone(), db = db0.clone();
      ops::linear_backward(d.x, d.w, d.dy, &dx, dw, &db, accumulate);
      for (bool fuse : {true, false}) {
        DeviceTensor g_dx = DeviceTensor::empty({R, in}, dt);
        DeviceTensor g_dw = DeviceTensor::from_host(dw0), g_db = DeviceTensor::from_host(db0);
        g_dx.poison(stream.get());
        if (!accumulate) {
          g_dw.poison(stream.get());
          g_db.poison(stream.get());
        }
        const EpilogueStats::Counts before = blas.epilogue_stats();
        linear_backward(blas, DeviceTensor::from_host(d.x), DeviceTensor::from_host(d.w),
                        DeviceTensor::from_host(d.dy), &g_dx, g_dw, &g_db, accumulate,
                        {fuse, MathMode::kFp32});
        // Accumulating, db is added by a kernel: no epilogue is asked for.
        EXPECT_TRUE(epilogue_ran(blas, before, Epilogue::kBiasGradOfB, dt, fuse && !accumulate));
        const std::string tag = std::string(dtype_name(dt)) + (fuse ? " fused" : " unfused") +
                                (accumulate ? " accumulate" : "");
        EXPECT_TRUE(all_close(g_dx.to_floats(stream.get()), dx.to_floats(),
                              tolerance_for(dt, 80.0), "dx " + tag));
        EXPECT_TRUE(all_close(g_dw.to_floats(stream.get()), dw.to_floats(),
                              tolerance_for(dt, 64.0), "dw " + tag));
        EXPECT_TRUE(all_close(g_db.to_floats(stream.get()), db.to_floats(),
                              tolerance_for(dt, 64.0), "db " + tag));
      }
    }
  }
}

// m[r, i] = sum_k |dy[r, k]| |w[i, k]|: the magnitude of the sums of dy w^T (w [in, out]).
std::vector<double> product_magnitudes(const Tensor& dy, const Tensor& w) {
  const std::int64_t R = dy.dim(0), out = dy.dim(1), in = w.dim(0);
  const std::vector<float> a = dy.to_floats(), b = w.to_floats();
  std::vector<double> m(static_cast<std::size_t>(R * in), 0.0);
  for (std::int64_t r = 0; r < R; ++r) {
    for (std::int64_t i = 0; i < in; ++i) {
      double s = 0;
      for (std::int64_t k = 0; k < out; ++k) {
        s += std::fabs(static_cast<double>(a[static_cast<std::size_t>(r * out + k)]) *
                       b[static_cast<std::size_t>(i * out + k)]);
      }
      m[static_cast<std::size_t>(r * in + i)] = s;
    }
  }
  return m;
}

TEST(CudaGemm, LinearBackwardThroughGeluMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  Blas blas(stream.get());
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const std::int64_t R = 64, in = 256, out = 64;  // w [in, out]: c_proj after the GELU
    const LinearData d = linear_data(dt, R, in, out, 600);
    const Tensor pre = random_host({R, in}, dt, 610, -3.0f, 3.0f);
    Tensor dact = Tensor::empty({R, in}, dt), dpre = Tensor::empty({R, in}, dt);
    Tensor db = Tensor::empty({in}, dt);
    ops::matmul(d.dy, d.w, dact, false, true);  // dy w^T, rounded, then the GELU backward
    layers::gelu_backward(pre, dact, dpre);
    ops::bias_grad(dpre, db, false);
    for (bool fuse : {true, false}) {
      DeviceTensor g_dpre = DeviceTensor::empty({R, in}, dt);
      DeviceTensor g_db = DeviceTensor::empty({in}, dt);
      g_dpre.poison(stream.get());
      g_db.poison(stream.get());
      const EpilogueStats::Counts before = blas.epilogue_stats();
      linear_backward_input_dgelu(blas, DeviceTensor::from_host(d.w),
                                  DeviceTensor::from_host(d.dy), DeviceTensor::from_host(pre),
                                  g_dpre, &g_db, false, {fuse, MathMode::kFp32});
      EXPECT_TRUE(epilogue_ran(blas, before, Epilogue::kDGeluBGrad, dt, fuse));
      // Per element, from the sums |dy||w| of the dot product dy w^T (mag): the FP32 sums'
      // noise times max |gelu'| (< 1.13 on [-3, 3]); for 16-bit dtypes the CPU rounds dy w^T
      // before gelu' (fused: the GPU does not; unfused: a rounding flip), one u(dt) of mag
      // each; fused, cuBLASLt may evaluate tanh in hardware (relative error <= 2^-11), which
      // moves gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) u'(x) by at most 6 2^-11 on [-3, 3].
      const std::string tag = std::string(dtype_name(dt)) + (fuse ? " fused" : " unfused");
      const std::vector<double> m = product_magnitudes(d.dy, d.w);
      const double gelu_max = 1.2;
      double coef = sum_tolerance(dt, out).atol * gelu_max;
      if (dt != DType::kF32) coef += 2 * unit_roundoff(dt) * gelu_max;
      if (fuse) coef += 6 * std::ldexp(1.0, -11);
      std::vector<double> scale(m.size());
      for (std::size_t i = 0; i < m.size(); ++i) scale[i] = coef * m[i];
      const Tolerance tol{1.0, 2 * unit_roundoff(dt)};
      EXPECT_TRUE(all_close(g_dpre.to_floats(stream.get()), dpre.to_floats(), tol, "dpre " + tag,
                            &scale));
      // db sums R rows of dpre: their allowances add up, plus the FP32 sum over R rows of
      // |dpre| and, 16-bit, the CPU's rounding of each dpre before it sums them.
      const std::vector<float> dp = dpre.to_floats();
      std::vector<double> scale_db(static_cast<std::size_t>(in), 0.0);
      for (std::int64_t r = 0; r < R; ++r) {
        for (std::int64_t j = 0; j < in; ++j) {
          const std::size_t e = static_cast<std::size_t>(r * in + j);
          const double a = std::fabs(static_cast<double>(dp[e]));
          const double rounding = dt != DType::kF32 ? unit_roundoff(dt) * a : 0.0;
          scale_db[static_cast<std::size_t>(j)] += scale[e] + sum_tolerance(dt, R).atol * a + rounding;
        }
      }
      EXPECT_TRUE(
          all_close(g_db.to_floats(stream.get()), db.to_floats(), tol, "db " + tag, &scale_db));
    }
  }
}

}  // namespace
}  // namespace mixpar::cuda

#endif  // MIXPAR_HAVE_CUDA
