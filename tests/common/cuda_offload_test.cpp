// GpuGptModel with offload_optimizer (ZeRO-Offload): the masters and moments in pinned host
// memory on the ledger's host side, the device holding only the working parameters and
// gradients, and the step on the CPU equal to the on-device step. Compiled wherever the CUDA
// toolkit is; each test skips, saying why, where no GPU is visible.
#include <gtest/gtest.h>

#include "gpu.h"

#if MIXPAR_HAVE_CUDA

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/gpt_gpu.h"
#include "cuda_test_util.h"

namespace mixpar::cuda {
namespace {

using cuda_testing::all_close;

constexpr std::int64_t kB = 2, kT = 33;

GptConfig small_config() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 128;
  c.n_positions = 64;
  c.vocab_size = 300;
  return c;
}

std::vector<std::int32_t> ids(std::uint32_t seed) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(kB * kT));
  std::uint32_t x = seed * 2654435761u + 7;
  for (std::int32_t& id : v) {
    x = x * 1664525u + 1013904223u;
    id = static_cast<std::int32_t>((x >> 8) % 300);
  }
  return v;
}

GpuGptOptions options(DType dt, bool offload) {
  GpuGptOptions o;
  o.dtype = dt;
  o.offload_optimizer = offload;
  return o;
}

// Three steps of the same batches, clipped, with a loss scale, on a model that steps on the
// device and one that steps on the host. The gradients of a step are computed by the same
// kernels from the same parameters; the two steps differ only in the order the FP64 sum of
// squares is added (the device's block tree, the host's chunks), so the norms agree to about
// 1e-12 relative and the clip coefficient to its last FP32 bits. Tolerance: f32 parameters
// within 1e-6 relative (+1e-7 absolute), bf16 within one bf16 ulp (2^-7 relative).
TEST(CudaGptOffload, TheHostStepEqualsTheDeviceStep) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    GpuGptModel device(small_config(), options(dt, false));
    GpuGptModel host(small_config(), options(dt, true));
    device.initialize(21);
    host.initialize(21);
    AdamWConfig cfg;
    cfg.lr = 1e-3;
    cfg.weight_decay = 0.1;
    int clipped = 0;
    for (int s = 0; s < 3; ++s) {
      cfg.lr = 1e-3 * (s + 1);  // a schedule: only lr changes between steps
      const std::vector<std::int32_t> tokens = ids(30 + s), targets = ids(40 + s);
      const double loss_d = device.forward(tokens, targets, kB, kT);
      const double loss_h = host.forward(tokens, targets, kB, kT);
      EXPECT_NEAR(loss_h, loss_d, 1e-5 * std::fabs(loss_d)) << dtype_name(dt) << " step " << s;
      device.backward(128.0f);
      host.backward(128.0f);
      const GpuStepResult a = device.step(cfg, 128.0f, 0.5);
      const GpuStepResult b = host.step(cfg, 128.0f, 0.5);
      ASSERT_TRUE(a.stepped && b.stepped);
      EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-9 * a.grad_norm) << dtype_name(dt);
      clipped += a.grad_norm > 0.5;
    }
    EXPECT_EQ(host.step_count(), 3);
    EXPECT_GT(clipped, 0) << "the test means to clip";
    const cuda_testing::Tolerance tol =
        dt == DType::kF32 ? cuda_testing::Tolerance{1e-7, 1e-6} : cuda_testing::Tolerance{0, 1.0 / 128};
    for (const GpuParam& p : device.params()) {
      EXPECT_TRUE(all_close(host.param_to_host(p.name).to_floats(),
                            device.param_to_host(p.name).to_floats(), tol,
                            std::string(dtype_name(dt)) + " " + p.name));
    }
  }
}

TEST(CudaGptOffload, AnInfGradientSkipsTheHostStep) {
  SKIP_WITHOUT_GPU();
  GpuGptModel gpu(small_config(), options(DType::kF16, true));
  gpu.initialize(11);
  gpu.forward(ids(9), ids(10), kB, kT);
  gpu.backward(1e9f);  // overflows FP16
  const std::vector<float> before = gpu.param_to_host("h.0.mlp.c_fc.weight").to_floats();
  const GpuStepResult r = gpu.step(AdamWConfig{}, 1e9f);
  EXPECT_TRUE(r.found_inf);
  EXPECT_FALSE(r.stepped);
  EXPECT_EQ(gpu.step_count(), 0);
  EXPECT_EQ(gpu.param_to_host("h.0.mlp.c_fc.weight").to_floats(), before);
}

// bf16: the device holds 2P + 2P (parameters and gradients, aligned); the host side holds the
// FP32 masters (4P), the moments after the first step (8P, each parameter's elements), and the transfer buffers (the
// gradients down, 2P + their FP32 widening 4P; the working copy up, 2P), all pinned.
TEST(CudaGptOffload, MastersAndMomentsAreOnTheLedgersHostSide) {
  SKIP_WITHOUT_GPU();
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  {
    GpuGptModel gpu(small_config(), options(DType::kBF16, true));
    const std::size_t params = ledger.live(MemCategory::kParameters, Device::kCUDA);
    EXPECT_EQ(ledger.live(MemCategory::kMasterParams, Device::kCUDA), 0u);
    EXPECT_EQ(ledger.host_live(MemCategory::kMasterParams), 2 * params);
    gpu.initialize(12);
    gpu.forward(ids(11), ids(12), kB, kT);
    gpu.backward();
    gpu.step(AdamWConfig{});
    EXPECT_EQ(ledger.live(MemCategory::kOptimizerState, Device::kCUDA), 0u);
    std::size_t stepped = 0;  // AdamW's moments cover each parameter, not the alignment gaps
    for (const GpuParam& p : gpu.params()) stepped += static_cast<std::size_t>(shape_numel(p.device_shape));
    EXPECT_EQ(ledger.host_live(MemCategory::kOptimizerState), 8 * stepped);
    EXPECT_EQ(ledger.host_live(MemCategory::kGradients), 3 * params);
    EXPECT_EQ(ledger.host_live(MemCategory::kParameters), params);
  }
  EXPECT_EQ(ledger.live_total(Device::kCUDA), 0u);
  EXPECT_EQ(ledger.host_live_total(), 0u);
}

}  // namespace
}  // namespace mixpar::cuda

#endif  // MIXPAR_HAVE_CUDA
