// One GPU, GPT-2 124M (12 layers, 12 heads, 768 wide, vocabulary 50257 padded to 50304,
// T 1024) training in BF16 with FP32 masters and AdamW: ms per step, tokens/s, MFU against the
// 989 TFLOP/s dense BF16 datasheet peak and against a measured large cuBLAS BF16 GEMM, and the
// device time of the largest kernels. Without CUDA (or without a GPU) it says so and exits 0.
#include <cstdio>

#include "tensor/device_api.h"
#include "util/errors.h"

#if MIXPAR_HAVE_CUDA

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ch02_loss_scaling/loss_scaler.h"
#include "ch03_master_weights/mixed_precision_step.h"
#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/gpt_gpu.h"
#include "cuda/stream.h"
#include "random/philox.h"
#include "util/cli.h"

namespace {

using namespace mixpar;
using namespace mixpar::cuda;

constexpr double kPeakBf16 = 989e12;  // H100 / H200 SXM dense BF16, datasheet

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// A large square BF16 GEMM through the engine's cuBLAS path: the practical ceiling the model's
// GEMMs are measured against. Random inputs (a 1 Mi-element random block tiled), never zeros.
double measured_gemm_tflops(std::int64_t n) {
  Stream stream;
  Blas blas(stream.get());
  const std::int64_t block = std::int64_t{1} << 20;
  Tensor host = Tensor::empty({block}, DType::kBF16);
  Philox g(42);
  fill_uniform(host, g, -1.0f, 1.0f);
  DeviceTensor a = DeviceTensor::empty({n, n}, DType::kBF16);
  DeviceTensor b = DeviceTensor::empty({n, n}, DType::kBF16);
  DeviceTensor c = DeviceTensor::empty({n, n}, DType::kBF16);
  for (DeviceTensor* t : {&a, &b}) {
    const DeviceTensor flat = t->view({n * n});
    for (std::int64_t i = 0; i < n * n; i += block) {
      const std::int64_t len = std::min(block, n * n - i);
      flat.flat_slice(i, len).copy_from_host(host.flat_slice(0, len), stream.get());
    }
  }
  std::vector<double> ms;
  Event start, stop;
  for (int i = 0; i < 13; ++i) {
    start.record(stream.get());
    matmul(blas, a, b, c);
    stop.record(stream.get());
    stop.synchronize();
    if (i >= 3) ms.push_back(Event::elapsed_ms(start, stop));  // 3 warm-ups
  }
  return 2.0 * double(n) * double(n) * double(n) / (median(ms) * 1e-3) / 1e12;
}

struct RunResult {
  double ms_per_step = 0, loss = 0;
};

RunResult run_model(GpuAttention attention, bool fuse, std::int64_t B, std::int64_t T,
                    int warmup, int steps, bool profile, bool offload) {
  // Each run's peak is its own: the previous run's cached blocks go back to the driver and
  // the high-water mark restarts (otherwise the second run reports the larger of the two).
  MIXPAR_CUDA_CHECK(cudaDeviceSynchronize());
  device_allocator().empty_cache();
  device_allocator().reset_peak();
  const GptConfig config = GptConfig::gpt2_small();
  GpuGptOptions options;
  options.dtype = DType::kBF16;
  options.attention = attention;
  options.fuse_epilogues = fuse;
  options.offload_optimizer = offload;  // masters and moments on the host, the step on the CPU
  GpuGptModel model(config, options);
  model.initialize(1);
  std::vector<std::int32_t> data(static_cast<std::size_t>(B * T + 1));
  std::uint32_t x = 12345;
  for (std::int32_t& id : data) {
    x = x * 1664525u + 1013904223u;
    id = static_cast<std::int32_t>((x >> 8) % static_cast<std::uint32_t>(config.vocab_size));
  }
  const std::span<const std::int32_t> tokens(data.data(), static_cast<std::size_t>(B * T));
  const std::span<const std::int32_t> targets(data.data() + 1, static_cast<std::size_t>(B * T));
  AdamWConfig adam;
  adam.lr = 1e-4;
  adam.weight_decay = 0.1;
  // bf16 needs no loss scaling; the step is chapter 3's, clipping at norm 1.
  ch02::LossScaler scaler(ch02::no_scaling_config());
  GpuAdamWStep optimizer(model, adam);
  cudaStream_t s = model.stream().get();
  Event start, stop;
  std::vector<double> ms;
  RunResult r;
  for (int i = 0; i < warmup + steps; ++i) {
    start.record(s);
    r.loss = model.forward(tokens, targets, B, T);
    model.backward();
    ch03::mixed_precision_step(optimizer, scaler, {.max_grad_norm = 1.0});
    stop.record(s);
    stop.synchronize();
    if (i >= warmup) ms.push_back(Event::elapsed_ms(start, stop));
  }
  r.ms_per_step = median(ms);
  if (profile) {
    RegionTimer timer(s);
    model.set_timer(&timer);
    model.forward(tokens, targets, B, T);
    model.backward();
    ch03::mixed_precision_step(optimizer, scaler, {.max_grad_norm = 1.0});
    const auto totals = timer.report();
    model.set_timer(nullptr);
    std::vector<std::pair<double, std::string>> rows;
    double sum = 0;
    for (const auto& [name, t] : totals) {
      rows.emplace_back(t.ms, name + " (x" + std::to_string(t.count) + ")");
      sum += t.ms;
    }
    std::sort(rows.rbegin(), rows.rend());
    std::printf("  per-kernel device time, one profiled step (%.2f ms in timed regions):\n", sum);
    for (std::size_t i = 0; i < rows.size() && i < 16; ++i) {
      std::printf("    %8.3f ms  %5.1f%%  %s\n", rows[i].first, 100.0 * rows[i].first / sum,
                  rows[i].second.c_str());
    }
  }
  const AllocatorStats a = device_allocator().stats();
  std::printf("  device memory: %.2f GiB reserved at peak (this run)\n",
              double(a.peak_reserved) / double(std::size_t{1} << 30));
  // Whether the epilogues ran: a declined one silently costs the unfused kernels' time.
  const EpilogueStats::Counts e = model.blas().epilogue_stats();
  std::printf("  cuBLASLt epilogues: %lld fused calls, %lld declined%s%s\n",
              static_cast<long long>(e.total_fused()), static_cast<long long>(e.total_declined()),
              e.first_decline.empty() ? "" : "; first: ", e.first_decline.c_str());
  return r;
}

int bench(int argc, char** argv) {
  ArgParser args("bench_gpu_gpt", "GPT-2 124M BF16 training step on one GPU");
  args.option("batch", "16", "sequences per step (B)")
      .option("seq", "1024", "sequence length (T)")
      .option("steps", "10", "timed steps (the median is reported)")
      .option("warmup", "3", "untimed steps first")
      .option("attention", "both", "materialized | fused | both")
      .option("gemm", "8192", "size of the square BF16 GEMM measured for the peak (0: skip)")
      .flag("no-fuse", "run without cuBLASLt epilogues")
      .flag("offload-optimizer",
            "ZeRO-Offload: FP32 masters and AdamW moments in pinned host memory, the step on the "
            "CPU (gradients down, parameters up each step)");
  args.parse(argc, argv);
  const std::int64_t B = args.get_int("batch"), T = args.get_int("seq");
  const std::string which = args.get_choice("attention", {"materialized", "fused", "both"});
  if (B <= 0 || T <= 0 || T > 1024) throw InputError("--batch must be >= 1 and --seq in [1, 1024]");
  cudaDeviceProp prop{};
  MIXPAR_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount,
              double(prop.totalGlobalMem) / double(std::size_t{1} << 30));
  double gemm_peak = 0;
  if (args.get_int("gemm") > 0) {
    gemm_peak = measured_gemm_tflops(args.get_int("gemm"));
    std::printf("cuBLAS BF16 GEMM %lld^3: %.0f TFLOP/s (%.0f%% of 989)\n",
                static_cast<long long>(args.get_int("gemm")), gemm_peak,
                100 * gemm_peak * 1e12 / kPeakBf16);
  }
  const GptConfig config = GptConfig::gpt2_small();
  const double flops_per_token = double(config.flops_per_token(T));
  std::printf("GPT-2 124M: N = %lld parameters, FLOPs/token = 6N + 6LCT = %.3g (causal half)\n",
              static_cast<long long>(config.num_parameters()), flops_per_token);
  for (GpuAttention attention : {GpuAttention::kMaterialized, GpuAttention::kFused}) {
    const bool fused = attention == GpuAttention::kFused;
    if (which != "both" && (which == "fused") != fused) continue;
    std::printf("[%s attention, %s%s] B %lld, T %lld:\n", fused ? "fused" : "materialized",
                args.get_flag("no-fuse") ? "no epilogues" : "cuBLASLt epilogues",
                args.get_flag("offload-optimizer") ? ", optimizer offloaded" : "",
                static_cast<long long>(B), static_cast<long long>(T));
    const RunResult r = run_model(attention, !args.get_flag("no-fuse"), B, T,
                                  static_cast<int>(args.get_int("warmup", 0, 100000)),
                                  static_cast<int>(args.get_int("steps", 1, 100000)), true,
                                  args.get_flag("offload-optimizer"));
    const double tokens_per_s = double(B * T) / (r.ms_per_step * 1e-3);
    const double achieved = flops_per_token * tokens_per_s;
    std::printf("  %.2f ms/step, %.0f tokens/s, %.1f TFLOP/s, MFU %.1f%% of 989", r.ms_per_step,
                tokens_per_s, achieved / 1e12, 100 * achieved / kPeakBf16);
    if (gemm_peak > 0)
      std::printf(" (%.1f%% of the measured GEMM)", 100 * achieved / (gemm_peak * 1e12));
    std::printf(", loss %.4f\n", r.loss);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (!mixpar::cuda_available()) {
    std::printf("%s: nothing to measure\n", mixpar::cuda_unavailable_reason().c_str());
    return 0;
  }
  return mixpar::run_main(argc, argv, bench);
}

#else  // !MIXPAR_HAVE_CUDA

int main() {
  std::printf("no CUDA device: mixpar was built without CUDA, nothing to measure\n");
  return 0;
}

#endif
