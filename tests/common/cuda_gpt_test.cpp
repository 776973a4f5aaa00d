// GpuGptModel against GptModel: parameters round-trip bit for bit, forward and backward agree
// in f32 and bf16 (both attention paths, epilogues on and off), gradients accumulate and repeat
// exactly (the step, chapter 3's mixed_precision_step over this engine, is tested in
// tests/ch03/cuda_mixed_precision_step_test.cpp). Small model: 2 layers, 2 heads of 64,
// vocabulary 300 (384 padded on the device), T 33.
#include <gtest/gtest.h>

#include "gpu.h"

#if MIXPAR_HAVE_CUDA

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/gpt_gpu.h"
#include "cuda_test_util.h"
#include "optim/adamw.h"
#include "util/errors.h"

namespace mixpar::cuda {
namespace {

using cuda_testing::all_close;
using cuda_testing::kExact;
using cuda_testing::max_abs;

constexpr std::int64_t kB = cuda_testing::kGptBatch, kT = cuda_testing::kGptSeq;

GptConfig small_config() { return cuda_testing::small_gpt_config(); }

std::vector<std::int32_t> ids(std::uint32_t seed) { return cuda_testing::gpt_token_ids(seed, 1); }

GptModel cpu_model(DType dt, std::uint64_t seed) {
  GptOptions o;
  o.dtype = dt;
  o.seed = seed;
  return GptModel(small_config(), o);
}

GpuGptOptions gpu_options(DType dt, GpuAttention attention, bool fuse) {
  GpuGptOptions o;
  o.dtype = dt;
  o.attention = attention;
  o.fuse_epilogues = fuse;
  return o;
}

// ||got - want|| / ||want||: the bf16 comparisons' summary, alongside the elementwise check.
double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

TEST(CudaGpt, UploadThenDownloadKeepsEveryBit) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const GptModel src = cpu_model(dt, 5);
    GpuGptModel gpu(small_config(), gpu_options(dt, GpuAttention::kMaterialized, true));
    gpu.upload_from(src);
    GptModel dst = cpu_model(dt, 6);
    gpu.download_to(dst);
    const Tensor& a = src.registry().flat_params();
    const Tensor& b = dst.registry().flat_params();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << dtype_name(dt);
    EXPECT_EQ(gpu.param_to_host("wte.weight").shape(), (Shape{300, 128}));
    EXPECT_EQ(gpu.padded_vocab(), 384);
  }
}

TEST(CudaGpt, InitializeGivesTheCpuModelsInitialWeights) {
  SKIP_WITHOUT_GPU();
  GpuGptModel gpu(small_config(), gpu_options(DType::kF32, GpuAttention::kMaterialized, true));
  gpu.initialize(7);
  const GptModel cpu = cpu_model(DType::kF32, 7);
  for (const GpuParam& p : gpu.params()) {
    const Tensor got = gpu.param_to_host(p.name);
    EXPECT_EQ(std::memcmp(got.data(), cpu.param(p.name).data(), got.nbytes()), 0) << p.name;
  }
}

// Compares every gradient by name; `rel` scales the absolute part to the tensor's largest value.
void expect_grads_close(const GpuGptModel& gpu, const GptModel& cpu, double rel, double rtol,
                        double max_rel_l2, const std::string& tag) {
  for (const GpuParam& p : gpu.params()) {
    const std::vector<float> got = gpu.grad_to_host(p.name).to_floats();
    const std::vector<float> want = cpu.grad(p.name).to_floats();
    EXPECT_TRUE(all_close(got, want, {rel * max_abs(want), rtol}, tag + " d" + p.name));
    EXPECT_LT(relative_l2(got, want), max_rel_l2) << tag << " d" << p.name;
  }
}

TEST(CudaGpt, ForwardAndBackwardMatchTheCpuInFp32) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::int32_t> tokens = ids(1), targets = ids(2);
  for (GpuAttention attn : {GpuAttention::kMaterialized, GpuAttention::kFused}) {
    for (bool fuse : {false, true}) {
      GptModel cpu = cpu_model(DType::kF32, 3);
      GpuGptModel gpu(small_config(), gpu_options(DType::kF32, attn, fuse));
      gpu.upload_from(cpu);
      const double want = cpu.forward(tokens, targets, kB, kT);
      const double got = gpu.forward(tokens, targets, kB, kT);
      const std::string tag = std::string(attn == GpuAttention::kFused ? "fused" : "materialised") +
                              (fuse ? " + epilogues" : "");
      // cuBLASLt's GELU may use the hardware tanh (~2^-11 relative, up to ~1e-3 of an
      // activation): the runs with epilogues get more room than FP32 noise needs.
      const double rel = fuse ? 5e-3 : 1e-4;
      EXPECT_NEAR(got, want, rel * 0.1 * std::fabs(want)) << tag;
      const std::vector<float> want_logits = cpu.logits().to_floats();
      EXPECT_TRUE(all_close(gpu.logits_to_host().to_floats(), want_logits,
                            {rel * max_abs(want_logits), 1e-4}, "logits " + tag));
      cpu.backward(1.0f);
      gpu.backward(1.0f);
      expect_grads_close(gpu, cpu, rel, 1e-3, 10 * rel, tag);
    }
  }
}

// The largest |got - want| and ||got - want|| / ||want||.
struct Deviation {
  double max_abs = 0, rel_l2 = 0;
};
Deviation deviation(const std::vector<float>& got, const std::vector<float>& want) {
  Deviation d;
  for (std::size_t i = 0; i < got.size(); ++i) {
    d.max_abs = std::fmax(d.max_abs, std::fabs(double(got[i]) - want[i]));
  }
  d.rel_l2 = relative_l2(got, want);
  return d;
}

// BF16 rounds every activation to 8 bits: the CPU and GPU models round at slightly different
// points, so they are not compared with each other at some loose per-element bound (one that
// a wrong kernel could hide in), but each with the exact arithmetic's stand-in, the FP32 CPU
// model on the same (bf16-valued) weights. The CPU bf16 model's own distance from it is the
// rounding noise of this network in bf16; the GPU's may be at most three times that (it rounds
// at more points: attention's P and dS, the unfused sums' outputs), plus one bf16 rounding
// (2^-8) of the tensor's scale, per element and in relative L2, for the loss, the logits and
// every gradient. A wrong kernel is off by O(1) of the scale.
TEST(CudaGpt, ForwardAndBackwardMatchTheCpuInBf16) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::int32_t> tokens = ids(3), targets = ids(4);
  const double u = std::ldexp(1.0, -8);
  for (GpuAttention attn : {GpuAttention::kMaterialized, GpuAttention::kFused}) {
    GptModel cpu = cpu_model(DType::kBF16, 8);
    GptModel ref = cpu_model(DType::kF32, 8);
    for (ParamEntry& e : ref.registry().entries()) {
      Tensor dst = e.param;  // shares the model's storage
      dst.copy_from(cpu.param(e.name));
    }
    GpuGptModel gpu(small_config(), gpu_options(DType::kBF16, attn, true));
    gpu.upload_from(cpu);
    const double want = ref.forward(tokens, targets, kB, kT);
    const double cpu_loss = cpu.forward(tokens, targets, kB, kT);
    const double got = gpu.forward(tokens, targets, kB, kT);
    const std::string tag = attn == GpuAttention::kFused ? "bf16 fused" : "bf16 materialised";
    EXPECT_LE(std::fabs(got - want), 3 * std::fabs(cpu_loss - want) + u * std::fabs(want))
        << tag << ": loss " << got << ", FP32 " << want << ", CPU bf16 " << cpu_loss;
    const auto check = [&](const std::vector<float>& g, const std::vector<float>& c,
                           const std::vector<float>& w, const std::string& what) {
      const Deviation dg = deviation(g, w), dc = deviation(c, w);
      const double scale = max_abs(w);
      EXPECT_LE(dg.max_abs, 3 * dc.max_abs + u * scale)
          << tag << " " << what << ": largest error " << dg.max_abs << ", CPU bf16's "
          << dc.max_abs;
      EXPECT_LE(dg.rel_l2, 3 * dc.rel_l2 + u)
          << tag << " " << what << ": relative L2 " << dg.rel_l2 << ", CPU bf16's " << dc.rel_l2;
    };
    check(gpu.logits_to_host().to_floats(), cpu.logits().to_floats(), ref.logits().to_floats(),
          "logits");
    ref.backward(1024.0f);
    cpu.backward(1024.0f);
    gpu.backward(1024.0f);
    for (const GpuParam& p : gpu.params()) {
      check(gpu.grad_to_host(p.name).to_floats(), cpu.grad(p.name).to_floats(),
            ref.grad(p.name).to_floats(), "d" + p.name);
    }
  }
}

TEST(CudaGpt, AccumulatedGradientsAreTheSumAndRunsAreReproducible) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::int32_t> tokens = ids(5), targets = ids(6);
  GpuGptModel gpu(small_config(), gpu_options(DType::kF32, GpuAttention::kFused, false));
  gpu.initialize(9);
  gpu.forward(tokens, targets, kB, kT);
  gpu.backward();
  std::vector<std::vector<float>> once;
  for (const GpuParam& p : gpu.params()) once.push_back(gpu.grad_to_host(p.name).to_floats());
  gpu.forward(tokens, targets, kB, kT);
  gpu.backward();  // overwrite: must reproduce `once` bit for bit
  std::size_t i = 0;
  for (const GpuParam& p : gpu.params()) {
    EXPECT_TRUE(all_close(gpu.grad_to_host(p.name).to_floats(), once[i++], kExact,
                          "rerun d" + p.name));
  }
  gpu.forward(tokens, targets, kB, kT);
  gpu.backward(1.0f, /*accumulate=*/true);
  i = 0;
  for (const GpuParam& p : gpu.params()) {
    std::vector<float> twice = once[i++];
    for (float& v : twice) v *= 2;
    EXPECT_TRUE(all_close(gpu.grad_to_host(p.name).to_floats(), twice,
                          {1e-6 * max_abs(twice), 1e-6}, "accumulated d" + p.name));
  }
  // Not only consistent with itself: the accumulated gradients are the CPU's, accumulated the
  // same way on the same weights (FP32, no epilogues: FP32 noise, as in the FP32 test).
  GptModel cpu = cpu_model(DType::kF32, 1);
  gpu.download_to(cpu);
  cpu.forward(tokens, targets, kB, kT);
  cpu.backward();
  cpu.forward(tokens, targets, kB, kT);
  cpu.backward(1.0f, /*accumulate=*/true);
  expect_grads_close(gpu, cpu, 1e-4, 1e-3, 1e-3, "accumulated vs CPU");
}

TEST(CudaGpt, DeviceMemoryIsOnTheLedger) {
  SKIP_WITHOUT_GPU();
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  {
    GpuGptModel gpu(small_config(), gpu_options(DType::kBF16, GpuAttention::kFused, true));
    const std::size_t params = ledger.live(MemCategory::kParameters, Device::kCUDA);
    EXPECT_GE(params, static_cast<std::size_t>(gpu.num_parameters()) * 2);
    EXPECT_EQ(ledger.live(MemCategory::kGradients, Device::kCUDA), params);
    EXPECT_EQ(ledger.live(MemCategory::kMasterParams, Device::kCUDA), 2 * params);
    EXPECT_EQ(ledger.live(MemCategory::kActivations, Device::kCUDA), 0u);  // none before forward
    gpu.initialize(12);
    gpu.forward(ids(11), ids(12), kB, kT);
    EXPECT_GT(ledger.live(MemCategory::kActivations, Device::kCUDA), 0u);
    gpu.backward();
    gpu.adamw_step(AdamWConfig{}, 1.0f, 1.0);  // the moments are made at the first step
    EXPECT_EQ(ledger.live(MemCategory::kOptimizerState, Device::kCUDA), 4 * params);
  }
  EXPECT_EQ(ledger.live_total(Device::kCUDA), 0u);
}

TEST(CudaGpt, BadBatchesAreInputErrors) {
  SKIP_WITHOUT_GPU();
  GpuGptModel gpu(small_config(), gpu_options(DType::kBF16, GpuAttention::kMaterialized, true));
  std::vector<std::int32_t> too_long(2 * 65, 1);
  EXPECT_THROW(gpu.forward(too_long, too_long, 2, 65), InputError);
  std::vector<std::int32_t> bad = ids(13);
  bad[5] = 300;
  EXPECT_THROW(gpu.forward(bad, ids(14), kB, kT), InputError);
  EXPECT_THROW(gpu.backward(), std::logic_error);  // no forward with targets yet
  EXPECT_THROW(GpuGptModel(small_config(), gpu_options(DType::kE4M3, GpuAttention::kFused, true)),
               InputError);
}

}  // namespace
}  // namespace mixpar::cuda

#endif  // MIXPAR_HAVE_CUDA
