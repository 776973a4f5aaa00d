// Causal attention on the GPU, materialised and fused, against layers::attention_forward /
// _backward at lengths on and off the 32-row tiles; the fused log-sum-exp against FP64; the
// ledger showing the fused path never holds a T x T matrix. Each test skips, saying why, where
// no CUDA device is visible.
#include <gtest/gtest.h>

#include "gpu.h"

#if MIXPAR_HAVE_CUDA

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/attention.h"
#include "cuda/stream.h"
#include "cuda_test_util.h"
#include "model/layers.h"

namespace mixpar::cuda {
namespace {

using cuda_testing::all_close;
using cuda_testing::max_abs;
using cuda_testing::random_host;
using cuda_testing::Tolerance;

constexpr std::int64_t kB = 2, kH = 2, kD = 64, kC = kH * kD;

// FP32 pipelines differ by FP32 noise; 16-bit ones also round P (or dS) at different points
// (the CPU keeps some in FP32, the GPU in the working dtype): an allowance of a few units of
// rounding times the output's magnitude, on top of two ulps per element.
Tolerance attention_tolerance(DType dt, const std::vector<float>& want) {
  const double scale = max_abs(want);
  switch (dt) {
    case DType::kF32: return {2e-5 * scale, 1e-4};
    case DType::kF16: return {8 * std::ldexp(1.0, -11) * scale, 2e-3};
    default: return {8 * std::ldexp(1.0, -8) * scale, 1.6e-2};
  }
}

struct CpuAttention {
  Tensor out, att, dqkv;
};
CpuAttention cpu_attention(const Tensor& qkv, const Tensor& dout) {
  const std::int64_t T = qkv.dim(1);
  const DType dt = qkv.dtype();
  CpuAttention r{Tensor::empty({kB, T, kC}, dt), Tensor::empty({kB, kH, T, T}, dt),
                 Tensor::empty(qkv.shape(), dt)};
  Tensor datt = Tensor::empty({kB, kH, T, T}, dt);
  layers::attention_forward(qkv, kH, r.out, r.att);
  layers::attention_backward(dout, qkv, r.att, kH, r.dqkv, datt);
  return r;
}

TEST(CudaAttention, MaterialisedMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  Blas blas(stream.get());
  cudaStream_t s = stream.get();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (std::int64_t T : {37, 64}) {
      const Tensor qkv = random_host({kB, T, 3 * kC}, dt, 700 + T);
      const Tensor dout = random_host({kB, T, kC}, dt, 800 + T);
      const CpuAttention want = cpu_attention(qkv, dout);
      DeviceTensor out = DeviceTensor::empty({kB, T, kC}, dt);
      DeviceTensor att = DeviceTensor::empty({kB, kH, T, T}, dt);
      DeviceTensor dqkv = DeviceTensor::empty(qkv.shape(), dt);
      for (DeviceTensor* t : {&out, &att, &dqkv}) t->poison(s);
      const DeviceTensor d_qkv = DeviceTensor::from_host(qkv, MemCategory::kOther, s);
      attention_forward(blas, d_qkv, kH, out, att);
      attention_backward(blas, DeviceTensor::from_host(dout, MemCategory::kOther, s), d_qkv, att,
                         kH, dqkv);
      const std::string tag = std::string(dtype_name(dt)) + " T " + std::to_string(T);
      const std::vector<float> w_out = want.out.to_floats(), w_att = want.att.to_floats();
      const std::vector<float> w_dqkv = want.dqkv.to_floats();
      EXPECT_TRUE(all_close(out.to_floats(s), w_out, attention_tolerance(dt, w_out), "out " + tag));
      EXPECT_TRUE(all_close(att.to_floats(s), w_att, attention_tolerance(dt, w_att), "att " + tag));
      EXPECT_TRUE(all_close(dqkv.to_floats(s), w_dqkv, attention_tolerance(dt, w_dqkv),
                            "dqkv " + tag));
    }
  }
}

// lse[b, h, i] = log sum_{j <= i} exp(q_i . k_j / sqrt(D)), in FP64 from the rounded inputs.
std::vector<float> reference_lse(const Tensor& qkv) {
  const std::int64_t T = qkv.dim(1);
  const std::vector<double> x = mixpar::testing::to_doubles(qkv);
  std::vector<float> out;
  for (std::int64_t b = 0; b < kB; ++b) {
    for (std::int64_t h = 0; h < kH; ++h) {
      for (std::int64_t i = 0; i < T; ++i) {
        std::vector<double> s;
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < kD; ++d) {
            dot += x[static_cast<std::size_t>((b * T + i) * 3 * kC + h * kD + d)] *
                   x[static_cast<std::size_t>((b * T + j) * 3 * kC + kC + h * kD + d)];
          }
          s.push_back(dot / std::sqrt(double(kD)));
        }
        double mx = s[0], sum = 0;
        for (double v : s) mx = std::fmax(mx, v);
        for (double v : s) sum += std::exp(v - mx);
        out.push_back(static_cast<float>(mx + std::log(sum)));
      }
    }
  }
  return out;
}

TEST(CudaAttention, FusedMatchesCpuAndItsLogSumExpMatchesFp64) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  cudaStream_t s = stream.get();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (std::int64_t T : {1, 37, 64, 100}) {
      const Tensor qkv = random_host({kB, T, 3 * kC}, dt, 900 + T);
      const Tensor dout = random_host({kB, T, kC}, dt, 1000 + T);
      const CpuAttention want = cpu_attention(qkv, dout);
      DeviceTensor out = DeviceTensor::empty({kB, T, kC}, dt);
      DeviceTensor lse = DeviceTensor::empty({kB, kH, T}, DType::kF32);
      DeviceTensor dqkv = DeviceTensor::empty(qkv.shape(), dt);
      for (DeviceTensor* t : {&out, &lse, &dqkv}) t->poison(s);
      const DeviceTensor d_qkv = DeviceTensor::from_host(qkv, MemCategory::kOther, s);
      flash_attention_forward(d_qkv, kH, out, lse, s);
      flash_attention_backward(DeviceTensor::from_host(dout, MemCategory::kOther, s), d_qkv, out,
                               lse, kH, dqkv, s);
      const std::string tag = std::string(dtype_name(dt)) + " T " + std::to_string(T);
      const std::vector<float> w_out = want.out.to_floats(), w_dqkv = want.dqkv.to_floats();
      EXPECT_TRUE(all_close(out.to_floats(s), w_out, attention_tolerance(dt, w_out), "out " + tag));
      EXPECT_TRUE(all_close(dqkv.to_floats(s), w_dqkv, attention_tolerance(dt, w_dqkv),
                            "dqkv " + tag));
      // Inputs in [-1, 1]; T keys at most, in 32-key tiles.
      EXPECT_TRUE(all_close(lse.to_floats(s), reference_lse(qkv),
                            cuda_testing::lse_tolerance(kD, T, (T + 31) / 32), "lse " + tag));
    }
  }
}

// The whole point of the fused kernels: extra device memory O(B H T), not O(B H T^2).
TEST(CudaAttention, FusedNeverHoldsATimesTMatrix) {
  SKIP_WITHOUT_GPU();
  const std::int64_t T = 512;
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  Stream stream;
  cudaStream_t s = stream.get();
  const DeviceTensor qkv = DeviceTensor::from_host(random_host({kB, T, 3 * kC}, DType::kBF16, 1100),
                                                   MemCategory::kOther, s);
  const DeviceTensor dout =
      DeviceTensor::from_host(random_host({kB, T, kC}, DType::kBF16, 1101), MemCategory::kOther, s);
  DeviceTensor out = DeviceTensor::empty({kB, T, kC}, DType::kBF16);
  DeviceTensor lse = DeviceTensor::empty({kB, kH, T}, DType::kF32);
  DeviceTensor dqkv = DeviceTensor::empty(qkv.shape(), DType::kBF16);
  const std::size_t before = ledger.live_total(Device::kCUDA);
  ledger.reset_peaks();
  flash_attention_forward(qkv, kH, out, lse, s);
  flash_attention_backward(dout, qkv, out, lse, kH, dqkv, s);
  stream.synchronize();
  const std::size_t extra = ledger.peak_total(Device::kCUDA) - before;
  EXPECT_LE(extra, static_cast<std::size_t>(kB * kH * T) * sizeof(float));  // dsum only
  // The materialised path, for contrast, holds FP32 scores of B H T^2.
  Blas blas(s);
  DeviceTensor att = DeviceTensor::empty({kB, kH, T, T}, DType::kBF16);
  const std::size_t before2 = ledger.live_total(Device::kCUDA);
  ledger.reset_peaks();
  attention_forward(blas, qkv, kH, out, att);
  stream.synchronize();
  EXPECT_GE(ledger.peak_total(Device::kCUDA) - before2,
            static_cast<std::size_t>(kB * kH * T * T) * sizeof(float));
}

// The kernels' shared memory, without a GPU: head size 64 fits the 48 KiB every device gives
// without asking; 128 needs the opt-in for dK/dV (and the forward) and fits Hopper's 227 KiB.
TEST(CudaAttentionLogic, HeadSize128NeedsTheSharedMemoryOptInAndFitsHopper) {
  const FlashSmem s64 = flash_attention_smem(64), s128 = flash_attention_smem(128);
  constexpr std::size_t kKiB = 1024;
  EXPECT_EQ(s64.dkdv, 4 * (4 * 32 * 65 + 2 * 32 * 33 + 2 * 32));  // floats of the tiles
  EXPECT_LE(std::max({s64.forward, s64.dkdv, s64.dq}), 48 * kKiB);
  EXPECT_GT(s128.dkdv, 48 * kKiB);
  EXPECT_GT(s128.forward, 48 * kKiB);
  EXPECT_LE(std::max({s128.forward, s128.dkdv, s128.dq}), 227 * kKiB);
  EXPECT_THROW(flash_attention_smem(32), std::invalid_argument);
}

TEST(CudaAttention, FusedRejectsOtherHeadSizes) {
  SKIP_WITHOUT_GPU();
  EXPECT_TRUE(flash_attention_supported(64));
  EXPECT_TRUE(flash_attention_supported(128));
  EXPECT_FALSE(flash_attention_supported(32));
  const DeviceTensor qkv = DeviceTensor::empty({1, 8, 3 * 64}, DType::kF32);  // 2 heads of 32
  DeviceTensor out = DeviceTensor::empty({1, 8, 64}, DType::kF32);
  DeviceTensor lse = DeviceTensor::empty({1, 2, 8}, DType::kF32);
  EXPECT_THROW(flash_attention_forward(qkv, 2, out, lse, nullptr), std::invalid_argument);
}

// Head size 128: the backward's tiles need more than the 48 KiB of static shared memory.
TEST(CudaAttention, FusedHeadSize128MatchesCpu) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  cudaStream_t s = stream.get();
  const std::int64_t B = 1, H = 2, D = 128, C = H * D, T = 70;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const Tensor qkv = random_host({B, T, 3 * C}, dt, 1300);
    const Tensor dout = random_host({B, T, C}, dt, 1301);
    Tensor w_out = Tensor::empty({B, T, C}, dt), att = Tensor::empty({B, H, T, T}, dt);
    Tensor w_dqkv = Tensor::empty(qkv.shape(), dt), datt = Tensor::empty({B, H, T, T}, dt);
    layers::attention_forward(qkv, H, w_out, att);
    layers::attention_backward(dout, qkv, att, H, w_dqkv, datt);
    DeviceTensor out = DeviceTensor::empty({B, T, C}, dt);
    DeviceTensor lse = DeviceTensor::empty({B, H, T}, DType::kF32);
    DeviceTensor dqkv = DeviceTensor::empty(qkv.shape(), dt);
    for (DeviceTensor* t : {&out, &lse, &dqkv}) t->poison(s);
    const DeviceTensor d_qkv = DeviceTensor::from_host(qkv, MemCategory::kOther, s);
    flash_attention_forward(d_qkv, H, out, lse, s);
    flash_attention_backward(DeviceTensor::from_host(dout, MemCategory::kOther, s), d_qkv, out, lse,
                             H, dqkv, s);
    const std::vector<float> o = w_out.to_floats(), g = w_dqkv.to_floats();
    const std::string tag = std::string(dtype_name(dt)) + " D 128";
    EXPECT_TRUE(all_close(out.to_floats(s), o, attention_tolerance(dt, o), "out " + tag));
    EXPECT_TRUE(all_close(dqkv.to_floats(s), g, attention_tolerance(dt, g), "dqkv " + tag));
  }
}

}  // namespace
}  // namespace mixpar::cuda

#endif  // MIXPAR_HAVE_CUDA
