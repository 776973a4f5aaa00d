// GpuGptModel with offload_optimizer (ZeRO-Offload): the masters and moments in pinned host
// memory on the ledger's host side, the device holding only the working parameters and
// gradients (the host step against the device step: tests/ch03/cuda_mixed_precision_step_test.cpp).
// Compiled wherever the CUDA toolkit is; each test skips, saying why, where no GPU is visible.
#include <gtest/gtest.h>

#include "gpu.h"

#if MIXPAR_HAVE_CUDA

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/gpt_gpu.h"
#include "cuda_test_util.h"

namespace mixpar::cuda {
namespace {

constexpr std::int64_t kB = cuda_testing::kGptBatch, kT = cuda_testing::kGptSeq;

GptConfig small_config() { return cuda_testing::small_gpt_config(); }

std::vector<std::int32_t> ids(std::uint32_t seed) { return cuda_testing::gpt_token_ids(seed, 7); }

GpuGptOptions options(DType dt, bool offload) {
  GpuGptOptions o;
  o.dtype = dt;
  o.offload_optimizer = offload;
  return o;
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
    gpu.grad_sum_of_squares();  // brings the gradients down
    gpu.adamw_step(AdamWConfig{}, 1.0f, 1.0);
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
