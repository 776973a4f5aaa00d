// Chapter 3's mixed_precision_step over the GPU engine (cuda/gpt_gpu.h's GpuAdamWStep), with
// chapter 2's scaler: the step on the device is the CPU's AdamW on the same gradients, unscaled
// and clipped; the offloaded step on the host equals the step on the device; an inf gradient
// skips either and leaves the weights alone. Small model: 2 layers, 2 heads of 64, vocabulary 300, T 33.
// Compiled wherever the CUDA toolkit is; each test skips, saying why, where no GPU is visible.
#include <gtest/gtest.h>

#include "gpu.h"

#if MIXPAR_HAVE_CUDA

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ch02_loss_scaling/loss_scaler.h"
#include "ch03_master_weights/mixed_precision_step.h"
#include "cuda/gpt_gpu.h"
#include "cuda_test_util.h"
#include "ops/elementwise.h"
#include "optim/adamw.h"
#include "optim/clip.h"

namespace mixpar::ch03 {
namespace {

using cuda::GpuAdamWStep;
using cuda::GpuAttention;
using cuda::GpuGptModel;
using cuda::GpuGptOptions;
using cuda::GpuParam;
using cuda_testing::all_close;
using cuda_testing::kExact;

constexpr std::int64_t kB = cuda_testing::kGptBatch, kT = cuda_testing::kGptSeq;

GptConfig small_config() { return cuda_testing::small_gpt_config(); }

std::vector<std::int32_t> ids(std::uint32_t seed) { return cuda_testing::gpt_token_ids(seed, 1); }

GpuGptOptions options(DType dt, bool offload) {
  GpuGptOptions o;
  o.dtype = dt;
  o.attention = GpuAttention::kMaterialized;
  o.offload_optimizer = offload;
  return o;
}

// The device step against the CPU's AdamW (two groups: decay and none) fed the GPU's own
// gradients, unscaled and clipped with FP32 multiplies as LossScaler and clip_grad_norm do.
TEST(CudaMixedPrecisionStep, DeviceStepIsTheCpuAdamWOnTheSameGradients) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    GptOptions cpu_options;
    cpu_options.dtype = DType::kF32;
    cpu_options.seed = 10;
    const GptModel start(small_config(), cpu_options);
    GpuGptModel gpu(small_config(), options(dt, false));
    gpu.upload_from(start);
    gpu.forward(ids(7), ids(8), kB, kT);
    ch02::LossScaler scaler(ch02::static_config(256.0));
    gpu.backward(scaler.scale());
    std::vector<Tensor> grads;
    for (const GpuParam& p : gpu.params()) {
      grads.push_back(gpu.grad_to_host(p.name).to(DType::kF32));
    }
    AdamWConfig cfg;
    cfg.lr = 1e-3;
    cfg.weight_decay = 0.1;
    GpuAdamWStep engine(gpu, cfg);
    const StepReport r = mixed_precision_step(engine, scaler, {.max_grad_norm = 0.5});
    ASSERT_TRUE(r.taken);
    for (Tensor& g : grads) ops::scale(g, scaler.inv_scale());
    EXPECT_NEAR(r.grad_norm, global_grad_norm(grads), 1e-5 * r.grad_norm) << dtype_name(dt);
    ASSERT_LT(r.clip_coef, 1.0) << "the test means to clip";
    EXPECT_EQ(r.clip_coef, clip_coefficient(r.grad_norm, 0.5));
    std::vector<Tensor> expected, decay_p, decay_g, plain_p, plain_g;
    std::size_t i = 0;
    for (const GpuParam& p : gpu.params()) {
      Tensor g = grads[i++];
      ops::scale(g, r.clip_coef);
      expected.push_back(start.param(p.name).clone());
      (p.weight_decay ? decay_p : plain_p).push_back(expected.back());
      (p.weight_decay ? decay_g : plain_g).push_back(g);
    }
    AdamWConfig no_decay = cfg;
    no_decay.weight_decay = 0.0;
    AdamW(decay_p, cfg).step(decay_g);
    AdamW(plain_p, no_decay).step(plain_g);
    i = 0;
    for (const GpuParam& p : gpu.params()) {
      EXPECT_TRUE(all_close(gpu.param_to_host(p.name).to_floats(),
                            expected[i++].to(dt).to_floats(), kExact,
                            std::string(dtype_name(dt)) + " " + p.name));
    }
    EXPECT_EQ(gpu.step_count(), 1);
  }
}

// Three steps of the same batches, clipped, with a loss scale, on a model that steps on the
// device and one that steps on the host. The gradients of a step are computed by the same
// kernels from the same parameters; the two steps differ only in the order the FP64 sum of
// squares is added (the device's block tree, the host's chunks), so the norms agree to about
// 1e-12 relative and the clip coefficient to its last FP32 bits. Tolerance: f32 parameters
// within 1e-6 relative (+1e-7 absolute), bf16 within one bf16 ulp (2^-7 relative).
TEST(CudaMixedPrecisionStep, OffloadedStepEqualsTheDeviceStep) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    GpuGptModel device(small_config(), options(dt, false));
    GpuGptModel host(small_config(), options(dt, true));
    device.initialize(21);
    host.initialize(21);
    ch02::LossScaler device_scaler(ch02::static_config(128.0));
    ch02::LossScaler host_scaler(ch02::static_config(128.0));
    AdamWConfig cfg;
    cfg.weight_decay = 0.1;
    int clipped = 0;
    for (int s = 0; s < 3; ++s) {
      cfg.lr = 1e-3 * (s + 1);  // a schedule: only lr changes between steps
      const std::vector<std::int32_t> tokens = ids(30 + s), targets = ids(40 + s);
      const double loss_d = device.forward(tokens, targets, kB, kT);
      const double loss_h = host.forward(tokens, targets, kB, kT);
      EXPECT_NEAR(loss_h, loss_d, 1e-5 * std::fabs(loss_d)) << dtype_name(dt) << " step " << s;
      device.backward(device_scaler.scale());
      host.backward(host_scaler.scale());
      GpuAdamWStep on_device(device, cfg), on_host(host, cfg);
      const StepReport a = mixed_precision_step(on_device, device_scaler, {.max_grad_norm = 0.5});
      const StepReport b = mixed_precision_step(on_host, host_scaler, {.max_grad_norm = 0.5});
      ASSERT_TRUE(a.taken && b.taken);
      EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-9 * a.grad_norm) << dtype_name(dt);
      clipped += a.grad_norm > 0.5;
    }
    EXPECT_EQ(host.step_count(), 3);
    EXPECT_GT(clipped, 0) << "the test means to clip";
    const cuda_testing::Tolerance tol = dt == DType::kF32 ? cuda_testing::Tolerance{1e-7, 1e-6}
                                                          : cuda_testing::Tolerance{0, 1.0 / 128};
    for (const GpuParam& p : device.params()) {
      EXPECT_TRUE(all_close(host.param_to_host(p.name).to_floats(),
                            device.param_to_host(p.name).to_floats(), tol,
                            std::string(dtype_name(dt)) + " " + p.name));
    }
  }
}

// 1e9 / (B T) on the target logits overflows FP16 (max 65504): the scaler skips the step on
// the device and on the host alike, backs off, and the weights, moments and t stay.
TEST(CudaMixedPrecisionStep, AnInfGradientSkipsTheStepOnTheDeviceAndOnTheHost) {
  SKIP_WITHOUT_GPU();
  for (bool offload : {false, true}) {
    GpuGptModel gpu(small_config(), options(DType::kF16, offload));
    gpu.initialize(11);
    gpu.forward(ids(9), ids(10), kB, kT);
    ch02::LossScalerConfig c = ch02::pytorch_config();
    c.init_scale = 1e9;
    ch02::LossScaler scaler(c);
    gpu.backward(scaler.scale());
    const Tensor before = gpu.param_to_host("h.0.mlp.c_fc.weight");
    GpuAdamWStep engine(gpu, AdamWConfig{});
    const StepReport r = mixed_precision_step(engine, scaler, {.max_grad_norm = 1.0});
    EXPECT_TRUE(r.found_inf) << "offload " << offload;
    EXPECT_FALSE(r.taken);
    EXPECT_EQ(scaler.scale(), 5e8f) << "the scaler backed off";
    EXPECT_EQ(gpu.step_count(), 0);
    const Tensor after = gpu.param_to_host("h.0.mlp.c_fc.weight");
    EXPECT_EQ(std::memcmp(before.data(), after.data(), before.nbytes()), 0);
  }
}

}  // namespace
}  // namespace mixpar::ch03

#endif  // MIXPAR_HAVE_CUDA
