// The optimizer-side kernels against the CPU: AdamW (AdamW::step, bit for bit), the fused
// 16-bit re-cast, the device-side skip, the loss scaler's unscale + inf/NaN check
// (LossScaler::unscale_and_check semantics) and the FP64 sum of squares (ops::sum_of_squares).
// Each test skips, saying why, where no CUDA device is visible.
#include <gtest/gtest.h>

#include "gpu.h"

#if MIXPAR_HAVE_CUDA

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cuda/kernels.h"
#include "cuda_test_util.h"
#include "ops/elementwise.h"
#include "ops/reductions.h"
#include "optim/adamw.h"

namespace mixpar::cuda {
namespace {

using cuda_testing::all_close;
using cuda_testing::kExact;
using cuda_testing::random_host;

DeviceTensor flag(float value) {
  DeviceTensor f = DeviceTensor::empty({1}, DType::kF32);
  f.copy_from_host(Tensor::from_floats(std::vector<float>{value}, {1}));
  return f;
}

// Three AdamW steps on the GPU and on the CPU from the same start; the GPU keeps the CPU's
// operation order without fused multiply-adds, so masters and moments agree bit for bit.
TEST(CudaOptim, AdamWMatchesTheCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  for (DType grad_type : {DType::kF32, DType::kBF16}) {
    const std::int64_t n = 1031;
    const Tensor init = random_host({n}, DType::kF32, 81, -0.5f, 0.5f);
    Tensor cpu_param = init.clone();
    AdamWConfig cfg;
    cfg.lr = 3e-3;
    cfg.weight_decay = 0.1;
    AdamW cpu(std::vector<Tensor>{cpu_param}, cfg);
    DeviceTensor master = DeviceTensor::from_host(init);
    DeviceTensor m = DeviceTensor::from_host(Tensor::zeros({n}, DType::kF32));
    DeviceTensor v = DeviceTensor::from_host(Tensor::zeros({n}, DType::kF32));
    DeviceTensor p16 = DeviceTensor::empty({n}, DType::kBF16);
    for (int t = 1; t <= 3; ++t) {
      const Tensor g = random_host({n}, grad_type, 90 + t, -1e-2f, 1e-2f);
      cpu.step(std::vector<Tensor>{g});
      p16.poison();
      adamw_update(master, DeviceTensor::from_host(g), m, v, &p16, adam_scalars(cfg, t), 1.0f,
                   1.0f, nullptr, nullptr);
    }
    const std::string tag(dtype_name(grad_type));
    EXPECT_TRUE(all_close(master.to_floats(), cpu_param.to_floats(), kExact, "master " + tag));
    EXPECT_TRUE(all_close(m.to_floats(), cpu.exp_avg(0).to_floats(), kExact, "m " + tag));
    EXPECT_TRUE(all_close(v.to_floats(), cpu.exp_avg_sq(0).to_floats(), kExact, "v " + tag));
    // The 16-bit working copy is the new master rounded once.
    EXPECT_TRUE(all_close(p16.to_floats(), cpu_param.to(DType::kBF16).to_floats(), kExact,
                          "bf16 re-cast " + tag));
  }
}

// Unscale then clip, each an FP32 multiply as LossScaler::unscale_and_check and
// clip_grad_norm (ops::scale) do them on the CPU.
TEST(CudaOptim, AdamWAppliesUnscaleAndClipLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::int64_t n = 517;
  const Tensor init = random_host({n}, DType::kF32, 101);
  const Tensor scaled = random_host({n}, DType::kF32, 102, -300.0f, 300.0f);
  const float inv_scale = 1.0f / 1024.0f, coef = 0.37f;
  Tensor g = scaled.clone();
  ops::scale(g, inv_scale);
  ops::scale(g, coef);
  Tensor cpu_param = init.clone();
  AdamW cpu(std::vector<Tensor>{cpu_param}, AdamWConfig{});
  cpu.step(std::vector<Tensor>{g});
  DeviceTensor master = DeviceTensor::from_host(init);
  DeviceTensor m = DeviceTensor::from_host(Tensor::zeros({n}, DType::kF32));
  DeviceTensor v = DeviceTensor::from_host(Tensor::zeros({n}, DType::kF32));
  adamw_update(master, DeviceTensor::from_host(scaled), m, v, nullptr, adam_scalars({}, 1),
               inv_scale, coef, nullptr, nullptr);
  EXPECT_TRUE(all_close(master.to_floats(), cpu_param.to_floats(), kExact, "master"));
}

TEST(CudaOptim, AdamWSkipsOnTheDeviceWhenFoundInfIsSet) {
  SKIP_WITHOUT_GPU();
  const Tensor init = random_host({300}, DType::kF32, 111);
  DeviceTensor master = DeviceTensor::from_host(init);
  DeviceTensor m = DeviceTensor::from_host(random_host({300}, DType::kF32, 112));
  DeviceTensor v = DeviceTensor::from_host(random_host({300}, DType::kF32, 113, 0.0f, 1.0f));
  const Tensor m0 = m.to_host(), v0 = v.to_host();
  const DeviceTensor found = flag(1.0f);
  adamw_update(master, DeviceTensor::from_host(random_host({300}, DType::kF32, 114)), m, v,
               nullptr, adam_scalars({}, 1), 1.0f, 1.0f, &found, nullptr);
  EXPECT_TRUE(all_close(master.to_floats(), init.to_floats(), kExact, "master"));
  EXPECT_TRUE(all_close(m.to_floats(), m0.to_floats(), kExact, "m"));
  EXPECT_TRUE(all_close(v.to_floats(), v0.to_floats(), kExact, "v"));
}

TEST(CudaOptim, UnscaleAndCheckFollowsTheLossScaler) {
  SKIP_WITHOUT_GPU();
  const Tensor g = random_host({2049}, DType::kF32, 121, -5e4f, 5e4f);
  DeviceTensor d = DeviceTensor::from_host(g);
  DeviceTensor found = flag(0.0f);
  unscale_and_check(d, 1.0f / 65536.0f, found, nullptr);
  Tensor want = g.clone();
  ops::scale(want, 1.0 / 65536.0);  // an FP32 multiply by the FP32 inverse
  EXPECT_TRUE(all_close(d.to_floats(), want.to_floats(), kExact, "unscaled"));
  EXPECT_EQ(found.to_floats()[0], 0.0f);
  // inv_scale exactly 1 leaves every bit alone; an inf anywhere sets the flag.
  Tensor bad = g.clone();
  bad.data_as<float>()[1234] = std::numeric_limits<float>::infinity();
  DeviceTensor d_bad = DeviceTensor::from_host(bad);
  unscale_and_check(d_bad, 1.0f, found, nullptr);
  EXPECT_EQ(found.to_floats()[0], 1.0f);
  EXPECT_EQ(std::memcmp(d_bad.to_host().data(), bad.data(), bad.nbytes()), 0);
}

TEST(CudaOptim, CheckFiniteSeesInfAndNanInEveryWorkingDtype) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor x = random_host({777}, dt, 131);
    DeviceTensor found = flag(0.0f);
    check_finite(DeviceTensor::from_host(x), found, nullptr);
    EXPECT_EQ(found.to_floats()[0], 0.0f) << dtype_name(dt);
    for (float poison : {std::numeric_limits<float>::infinity(), std::nanf(""), 1e6f}) {
      if (poison == 1e6f && dt != DType::kF16) continue;  // 1e6 overflows FP16 only
      Tensor y = x.clone();
      y.flat_slice(500, 1).copy_from(Tensor::from_floats(std::vector<float>{poison}, {1}),
                                     Saturation::kNoSat);
      DeviceTensor f = flag(0.0f);
      check_finite(DeviceTensor::from_host(y), f, nullptr);
      EXPECT_EQ(f.to_floats()[0], 1.0f) << dtype_name(dt) << " " << poison;
    }
  }
}

TEST(CudaOptim, SumOfSquaresMatchesTheCpuAndIsDeterministic) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Tensor x = random_host({300007}, dt, 141, -3.0f, 3.0f);
    const DeviceTensor d = DeviceTensor::from_host(x);
    DeviceTensor out = DeviceTensor::empty({1}, DType::kF64);
    out.poison();
    sum_of_squares(d, out, nullptr);
    const double first = out.to_host().data_as<double>()[0];
    sum_of_squares(d, out, nullptr);
    const double second = out.to_host().data_as<double>()[0];
    const double want = ops::sum_of_squares(x);
    EXPECT_NEAR(first, want, 1e-12 * want) << dtype_name(dt);  // FP64 sums, another order
    EXPECT_EQ(std::memcmp(&first, &second, sizeof(double)), 0) << "not bit-reproducible";
  }
  Tensor x = random_host({1000}, DType::kF32, 142);
  x.data_as<float>()[999] = std::nanf("");
  DeviceTensor out = DeviceTensor::empty({1}, DType::kF64);
  sum_of_squares(DeviceTensor::from_host(x), out, nullptr);
  EXPECT_TRUE(std::isnan(out.to_host().data_as<double>()[0]));
}

}  // namespace
}  // namespace mixpar::cuda

#endif  // MIXPAR_HAVE_CUDA
