// The GPU engine's FP8 (common/cuda/fp8.h) against chapter 3's CPU emulation
// (ch03_master_weights/fp8_scaling.h, fp8_gemm.h):
//  * the quantize kernel gives the CPU cast's codes bit for bit: every one of the 256 codes of
//    E4M3 and E5M2 decoded and cast back, every midpoint between neighbouring codes and the
//    floats just either side of it (round to nearest even, the saturation boundary), infinities
//    and NaN, scaled random values, and bf16 sources;
//  * the amax kernel gives fp8::amax, NaN included;
//  * the cuBLASLt FP8 GEMM equals fp8::gemm (tensorwise: FP32 accumulation, no promotion)
//    bit for bit where every partial sum is exact in any accumulator (small integers), and
//    within the accumulation bound derived below on random tensorwise-scaled inputs;
//  * its amax output is max |out|.
// Each test skips, saying why, where no CUDA device is visible; on a device without FP8
// tensor cores (below sm_89) the GEMM tests check the error that names it instead.
#include <gtest/gtest.h>

#include "gpu.h"

#if MIXPAR_HAVE_CUDA

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ch03_master_weights/fp8_gemm.h"
#include "ch03_master_weights/fp8_scaling.h"
#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/device_tensor.h"
#include "cuda/fp8.h"
#include "numerics/formats.h"
#include "tensor/tensor.h"

namespace mixpar::cuda {
namespace {

float decode(std::uint8_t code, DType f) {
  return f == DType::kE4M3 ? e4m3_bits_to_float(code) : e5m2_bits_to_float(code);
}

DeviceTensor upload(const std::vector<float>& x, DType dtype = DType::kF32) {
  const Tensor host = Tensor::from_floats(x, {static_cast<std::int64_t>(x.size())}, dtype);
  return DeviceTensor::from_host(host);
}

DeviceTensor upload_codes(const std::vector<std::uint8_t>& codes, DType format) {
  DeviceTensor t = DeviceTensor::empty({static_cast<std::int64_t>(codes.size())}, format);
  MIXPAR_CUDA_CHECK(cudaMemcpy(t.data(), codes.data(), codes.size(), cudaMemcpyHostToDevice));
  return t;
}

std::vector<std::uint8_t> download_codes(const DeviceTensor& t) {
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(t.numel()));
  MIXPAR_CUDA_CHECK(cudaDeviceSynchronize());
  MIXPAR_CUDA_CHECK(cudaMemcpy(codes.data(), t.data(), codes.size(), cudaMemcpyDeviceToHost));
  return codes;
}

float download_scalar(const float* p) {
  float v = 0;
  MIXPAR_CUDA_CHECK(cudaDeviceSynchronize());
  MIXPAR_CUDA_CHECK(cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

// GPU codes of x * scale against fp8::quantize_with_scale's; NaN codes compare as NaN.
void expect_same_codes(const std::vector<float>& x, DType format, float scale,
                       DType source = DType::kF32) {
  const DeviceTensor dx = upload(x, source);
  const DeviceTensor ds = upload({scale});
  DeviceTensor codes = DeviceTensor::empty({dx.numel()}, format);
  fp8_quantize(dx, ds.f32(), codes, nullptr);
  const std::vector<std::uint8_t> got = download_codes(codes);
  // The CPU casts the source's values: a bf16 source is rounded to bf16 first, as uploaded.
  std::vector<float> src = x;
  if (source == DType::kBF16) {
    for (float& v : src) v = bf16_bits_to_float(float_to_bf16_bits(v));
  }
  const fp8::Fp8Matrix want = fp8::quantize_with_scale(src, 1, std::ssize(src), format, scale);
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bool both_nan = std::isnan(decode(got[i], format)) && std::isnan(decode(want.codes[i], format));
    if (got[i] != want.codes[i] && !both_nan && bad++ < 8) {
      ADD_FAILURE() << dtype_name(format) << " x = " << src[i] << " (scale " << scale
                    << "): GPU code 0x" << std::hex << int(got[i]) << ", CPU 0x"
                    << int(want.codes[i]) << std::dec;
    }
  }
  EXPECT_EQ(bad, 0) << "of " << x.size() << " values";
}

TEST(CudaFp8, QuantizeEqualsTheCpuCastOnEveryCodeAndRoundingBoundary) {
  SKIP_WITHOUT_GPU();
  for (DType f : {DType::kE4M3, DType::kE5M2}) {
    std::vector<float> x;
    std::vector<float> finite;  // non-negative finite code values, ascending
    for (int c = 0; c < 256; ++c) {
      const float v = decode(static_cast<std::uint8_t>(c), f);
      x.push_back(v);  // every code, NaN and (E5M2) infinities included
      if (std::isfinite(v) && !std::signbit(v)) finite.push_back(v);
    }
    std::sort(finite.begin(), finite.end());
    const float inf = std::numeric_limits<float>::infinity();
    for (std::size_t i = 0; i + 1 < finite.size(); ++i) {
      const float mid = finite[i] + (finite[i + 1] - finite[i]) / 2;  // exact in FP32
      for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, inf)}) {
        x.push_back(v);
        x.push_back(-v);
      }
    }
    // Past the largest code: the half-step above max (rounds to max, or beyond: saturates),
    // far beyond, infinities, NaN; and the smallest subnormal's half and below (flush to 0).
    const float max = finite.back(), step = max - finite[finite.size() - 2];
    for (float v : {max + step / 2, std::nextafter(max + step / 2, inf), max + step, 2 * max,
                    inf, std::numeric_limits<float>::quiet_NaN(), finite[1] / 2,
                    std::nextafter(finite[1] / 2, inf), finite[1] / 4}) {
      x.push_back(v);
      x.push_back(-v);
    }
    expect_same_codes(x, f, 1.0f);
    // Random values through a scale that is not a power of two: the product rounds in FP32
    // before the cast, on both sides.
    std::mt19937 g(7);
    std::normal_distribution<float> d(0, 3);
    std::vector<float> r(4099);  // not a multiple of the block: the tail
    for (float& v : r) v = d(g);
    expect_same_codes(r, f, f == DType::kE4M3 ? 37.3f : 4011.7f);
    expect_same_codes(r, f, 0.37f, DType::kBF16);
  }
}

TEST(CudaFp8, AmaxIsTheCpusLargestMagnitudeAndNaNPropagates) {
  SKIP_WITHOUT_GPU();
  std::mt19937 g(3);
  std::normal_distribution<float> d(0, 2);
  std::vector<float> x(100003);
  for (float& v : x) v = d(g);
  x[77777] = -91.5f;  // the largest magnitude is negative, far from the first block
  const DeviceTensor out = upload({0.0f});
  for (DType source : {DType::kF32, DType::kBF16}) {
    std::vector<float> src = x;
    if (source == DType::kBF16) {
      for (float& v : src) v = bf16_bits_to_float(float_to_bf16_bits(v));
    }
    fp8_amax(upload(x, source), out.f32(), nullptr);
    EXPECT_EQ(download_scalar(out.f32()), fp8::amax(src)) << dtype_name(source);
  }
  x[5] = std::numeric_limits<float>::quiet_NaN();
  fp8_amax(upload(x), out.f32(), nullptr);
  EXPECT_TRUE(std::isnan(download_scalar(out.f32())));
  EXPECT_TRUE(std::isnan(fp8::amax(x)));
}

// ---- GEMM.

bool fp8_device() {
  int device = 0, major = 0, minor = 0;
  MIXPAR_CUDA_CHECK(cudaGetDevice(&device));
  MIXPAR_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  MIXPAR_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return fp8_gemm_supported(major, minor);
}

struct GpuResult {
  std::vector<float> out;  // [M, N], widened from out_type
  float amax = 0;
};

// fp8_gemm on a [M x K] and b [N x K] as chapter 3 quantized them.
GpuResult run_gpu(const fp8::Fp8Matrix& a, const fp8::Fp8Matrix& b, DType out_type,
                  bool fast_accum) {
  Blas blas(nullptr);
  const DeviceTensor da = upload_codes(a.codes, a.format), db = upload_codes(b.codes, b.format);
  const DeviceTensor sa = upload({a.scale_inv[0]}), sb = upload({b.scale_inv[0]});
  DeviceTensor out = DeviceTensor::empty({a.rows, b.rows}, out_type);
  const DeviceTensor amax = upload({-1.0f});
  Fp8GemmCall c;
  c.shape = {a.rows, b.rows, a.cols, a.format, b.format, out_type};
  c.a = da.data();
  c.b = db.data();
  c.a_scale_inv = sa.f32();
  c.b_scale_inv = sb.f32();
  c.out = out.data();
  c.amax_out = amax.f32();
  c.fast_accum = fast_accum;
  fp8_gemm(blas, c);
  GpuResult r;
  r.out = out.to_floats();
  r.amax = download_scalar(amax.f32());
  return r;
}

// fn(out_type, fast, result) for each output type (f32, bf16) and accumulation mode of the
// FP8 GEMM of a and b; on a GPU without FP8 tensor cores, each call must refuse instead.
template <class F>
void for_each_gpu_gemm(const fp8::Fp8Matrix& a, const fp8::Fp8Matrix& b, F&& fn) {
  for (DType out_type : {DType::kF32, DType::kBF16}) {
    for (bool fast : {false, true}) {
      if (!fp8_device()) {
        EXPECT_THROW(run_gpu(a, b, out_type, fast), CudaError);
        continue;
      }
      fn(out_type, fast, run_gpu(a, b, out_type, fast));
    }
  }
}

// Integers in [-4, 4] (exact in E4M3 and E5M2) with power-of-two dequantization scales: every
// product is an integer of magnitude <= 16, so with K = 128 every partial sum, in any order,
// is an integer below 2^11 -- exact in FP32 and in a 14-bit tensor-core accumulator alike. The
// GPU's result, whatever its summation order, promotion interval or fast-accumulation mode,
// must then be the CPU emulation's bit for bit (rounded once to bf16 for a bf16 output).
TEST(CudaFp8, GemmEqualsTheCpuEmulationBitForBitWhereEverySumIsExact) {
  SKIP_WITHOUT_GPU();
  const std::int64_t M = 32, N = 48, K = 128;  // M != N: a transposed result cannot pass
  std::mt19937 g(11);
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<float> xa(M * K), xb(N * K);
  for (float& v : xa) v = static_cast<float>(d(g));
  for (float& v : xb) v = static_cast<float>(d(g));
  for (auto [fa, fb] : {std::pair{DType::kE4M3, DType::kE4M3},
                        std::pair{DType::kE5M2, DType::kE4M3},  // dgrad: gradient x weight
                        std::pair{DType::kE4M3, DType::kE5M2}}) {
    fp8::Fp8Matrix a = fp8::quantize_with_scale(xa, M, K, fa, 1.0f);
    fp8::Fp8Matrix b = fp8::quantize_with_scale(xb, N, K, fb, 1.0f);
    a.scale_inv[0] = 0.125f;   // as if scaled by 8 and 1/32: the result is integer x 2^-3 x 2^5
    b.scale_inv[0] = 32.0f;
    const std::vector<float> want =
        fp8::gemm(a, b, fp8::recipe_gemm(fp8::Recipe::kTensorwise));
    for_each_gpu_gemm(a, b, [&](DType out_type, bool fast, const GpuResult& got) {
      float want_amax = 0;
      for (std::int64_t i = 0; i < M * N; ++i) {
        const float w = round_to(out_type, want[static_cast<std::size_t>(i)]);
        ASSERT_EQ(got.out[static_cast<std::size_t>(i)], w)
            << dtype_name(fa) << " x " << dtype_name(fb) << " -> " << dtype_name(out_type)
            << (fast ? ", fast accumulation" : "") << ", element (" << i / N << ", " << i % N
            << ")";
        want_amax = std::max(want_amax, std::fabs(want[static_cast<std::size_t>(i)]));
      }
      // The amax of D before its rounding to out_type (or, where cuBLASLt refuses it, of
      // the stored output): for an f32 output both are the CPU's.
      if (out_type == DType::kF32) EXPECT_EQ(got.amax, want_amax);
      else EXPECT_EQ(round_to(DType::kBF16, got.amax), round_to(DType::kBF16, want_amax));
    });
  }
}

// Random tensorwise-scaled inputs: the products p_k = a_k b_k are exact on both sides (4 x 4
// significant bits); only the sums differ. With S = sum p_k and P = sum |p_k| (K terms):
//   CPU, FP32 in order, one rounding per addition:  |cpu - S| <= (K-1) 2^-24 P  (Higham, 4.2)
//   GPU, any order, an accumulator of at least 14 significant bits that may truncate (the
//   Hopper tensor core, DeepSeek-V3 §3.3.2), promoted or not:  |gpu - S| <= (K-1) 2^-13 P
// Both are then multiplied by s = scale_inv_a scale_inv_b (FP32: at most 3 roundings each
// side, 2^-24 |c| apiece) and the GPU rounds to out_type once (u_out |c|). So per element
//   |gpu - cpu| <= s (K-1) (2^-13 + 2^-24) P + (6 2^-24 + u_out) |cpu|.
// A wrong layout, operand, scale or K breaks it by orders of magnitude.
TEST(CudaFp8, GemmOnRandomTensorwiseInputsIsWithinTheAccumulationBound) {
  SKIP_WITHOUT_GPU();
  const std::int64_t M = 64, N = 32, K = 256;
  std::mt19937 g(5);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> xa(M * K), xb(N * K);
  for (float& v : xa) v = d(g);
  for (float& v : xb) v = 1e-3f * d(g);  // a gradient-sized operand: its own scale
  const fp8::Fp8Matrix a = fp8::quantize_current(xa, M, K, DType::kE4M3, M, K);
  const fp8::Fp8Matrix b = fp8::quantize_current(xb, N, K, DType::kE5M2, N, K);
  const std::vector<float> want = fp8::gemm(a, b, fp8::recipe_gemm(fp8::Recipe::kTensorwise));
  const double s = double(a.scale_inv[0]) * double(b.scale_inv[0]);
  for_each_gpu_gemm(a, b, [&](DType out_type, bool fast, const GpuResult& got) {
    const double u_out = out_type == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24);
    for (std::int64_t i = 0; i < M; ++i) {
      for (std::int64_t j = 0; j < N; ++j) {
        double P = 0;
        for (std::int64_t k = 0; k < K; ++k) {
          P += std::fabs(double(decode(a.codes[i * K + k], a.format)) *
                         double(decode(b.codes[j * K + k], b.format)));
        }
        const double w = want[static_cast<std::size_t>(i * N + j)];
        const double bound = s * double(K - 1) * (std::ldexp(1.0, -13) + std::ldexp(1.0, -24)) * P +
                             (6 * std::ldexp(1.0, -24) + u_out) * std::fabs(w);
        ASSERT_LE(std::fabs(got.out[static_cast<std::size_t>(i * N + j)] - w), bound)
            << dtype_name(out_type) << (fast ? ", fast accumulation" : "") << ", element ("
            << i << ", " << j << "): GPU " << got.out[static_cast<std::size_t>(i * N + j)]
            << ", CPU " << w;
      }
    }
  });
}

}  // namespace
}  // namespace mixpar::cuda

#endif  // MIXPAR_HAVE_CUDA

// The same tests in a build without CUDA: each one skips, saying so.
#if !MIXPAR_HAVE_CUDA
TEST(CudaFp8, QuantizeEqualsTheCpuCastOnEveryCodeAndRoundingBoundary) { SKIP_WITHOUT_GPU(); }
TEST(CudaFp8, AmaxIsTheCpusLargestMagnitudeAndNaNPropagates) { SKIP_WITHOUT_GPU(); }
TEST(CudaFp8, GemmEqualsTheCpuEmulationBitForBitWhereEverySumIsExact) { SKIP_WITHOUT_GPU(); }
TEST(CudaFp8, GemmOnRandomTensorwiseInputsIsWithinTheAccumulationBound) { SKIP_WITHOUT_GPU(); }
#endif
