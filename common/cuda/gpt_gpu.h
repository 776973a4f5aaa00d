// GpuGptModel: GptModel (common/model) on one GPU: parameters, gradients and activations in the
// working dtype (f32, bf16, f16), FP32 masters and AdamW moments, the CPU's layers in the CPU's
// order, each a kernel tested against it. Parameters keep the registry's names and shapes, and
// upload_from / download_to move them to and from a CPU GptModel (checkpoints load either way).
// With offload_optimizer the masters and moments live in pinned host memory and the step runs
// on the CPU (ZeRO-Offload, Ren et al. 2021; docs/REFERENCE.md, ZeRO memory and traffic).
// The step's sequence (found-inf, unscale, norm, clip, the scaler's verdict) is not here:
// chapter 3's mixed_precision_step, the CPU optimizer's too, runs it over GpuAdamWStep
// (optim/step_engine.h says why).
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/attention.h"
#include "cuda/blas.h"
#include "cuda/device_tensor.h"
#include "cuda/kernels.h"
#include "cuda/linear.h"
#include "cuda/stream.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/step_engine.h"

namespace mixpar::cuda {

enum class GpuAttention : std::uint8_t {
  kMaterialized,  // cuBLAS batched GEMMs + softmax kernel; keeps att [B, H, T, T]
  kFused,         // flash_attention_*: keeps lse [B, H, T] only (head size 64)
};

struct GpuGptOptions {
  DType dtype = DType::kBF16;  // working dtype of parameters, gradients, activations
  GpuAttention attention = GpuAttention::kMaterialized;
  bool fuse_epilogues = true;       // cuBLASLt bias / GELU / bias-gradient epilogues
  MathMode math = MathMode::kFp32;  // f32 models only: kTf32 puts the GEMMs on tensor cores
  // wte gets rows up to a multiple of this (GPT-2: 50257 -> 50304): the LM-head GEMM's N then
  // tiles evenly. The extra rows are zero, take no part in the loss and stay zero.
  std::int64_t vocab_multiple = 128;
  // ZeRO-Offload (Ren et al. 2021): the FP32 masters and AdamW moments in pinned host buffers
  // (the ledger's host side), and step() on the CPU: the gradients copied device-to-host on
  // the model's stream, unscaled, checked and clipped there, common/optim's AdamW, and the
  // updated working copy copied host-to-device. The device keeps the working parameters and
  // gradients only: 2P + 2P bytes in 16-bit (4P + 4P in f32).
  bool offload_optimizer = false;
};

// A parameter as the device holds it: a view of the flat buffers at an offset aligned to 128
// elements (so every GEMM operand and bias is 256-byte aligned, as cuBLASLt prefers).
struct GpuParam {
  std::string name;       // the registry name: "h.3.attn.c_attn.weight"
  Shape shape;            // the registry (CPU) shape
  Shape device_shape;     // the same, except wte: [padded vocab, C]
  std::int64_t offset;    // first element in the flat device buffers
  bool weight_decay;
};

class GpuGptModel {
 public:
  // Allocates everything on the device; parameters are set by initialize() or upload_from().
  // InputError on an invalid config or a dtype other than f32, f16, bf16.
  GpuGptModel(GptConfig config, GpuGptOptions options = {});
  GpuGptModel(const GpuGptModel&) = delete;
  GpuGptModel& operator=(const GpuGptModel&) = delete;

  const GptConfig& config() const { return config_; }
  const GpuGptOptions& options() const { return options_; }
  std::int64_t padded_vocab() const { return vocab_padded_; }
  std::int64_t num_parameters() const { return config_.num_parameters(); }
  const std::vector<GpuParam>& params() const { return params_; }

  // The values GptModel(config, {.seed = seed}) starts from (made on the CPU, uploaded).
  void initialize(std::uint64_t seed);
  // Every parameter from a CPU model of the same config (any dtype: rounded to ours); the
  // FP32 master copy takes the CPU values rounded to FP32. Gradients and moments are zeroed.
  void upload_from(const GptModel& cpu);
  // Every parameter (the working copy) into a CPU model of the same config, in its dtype.
  void download_to(GptModel& cpu) const;
  Tensor param_to_host(std::string_view name) const;  // registry shape, working dtype
  Tensor grad_to_host(std::string_view name) const;

  // tokens, targets [B, T] (host). Returns the mean loss (NaN without targets); waits for it.
  double forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                 std::int64_t B, std::int64_t T);
  // logits [B, T, V] of the last forward (padding dropped), in the working dtype.
  Tensor logits_to_host() const;
  // GptModel::backward: the mean loss's gradient times loss_scale, (+)= into the gradients.
  void backward(float loss_scale = 1.0f, bool accumulate = false);
  void zero_grad();

  // The optimizer's two halves, which chapter 3's mixed_precision_step drives with chapter 2's
  // loss scaler (through GpuAdamWStep below: the engine holds no copy of the step's decisions).
  // grad_sum_of_squares: FP64 sum of g^2 over the gradients as backward left them (scaled);
  // non-finite iff one of them is inf or NaN. offload_optimizer: the gradients are copied to
  // the host first and summed there.
  double grad_sum_of_squares();
  // AdamW on the FP32 masters with the gradients times inv_scale, then times clip_coef,
  // re-casting the working copy in the same kernel. offload_optimizer: the same on the host,
  // on the gradients the last grad_sum_of_squares brought down (std::logic_error without
  // one), with config's betas, eps and weight decay those of the first step (only lr may
  // change; std::invalid_argument otherwise).
  void adamw_step(const AdamWConfig& config, float inv_scale, double clip_coef);
  std::int64_t step_count() const { return step_; }

  Stream& stream() { return stream_; }
  Blas& blas() { return blas_; }
  // When set, every layer's kernels are timed by name (the benchmark's per-kernel table).
  void set_timer(RegionTimer* timer) { timer_ = timer; }

 private:
  struct BlockWeights {
    DeviceTensor ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b;
    DeviceTensor ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  };
  struct BlockActs {
    DeviceTensor ln1, ln1_mean, ln1_rstd, qkv, att, lse, atty, res2;
    DeviceTensor ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  };
  BlockWeights block_view(const DeviceTensor& flat, std::int64_t layer) const;
  DeviceTensor view(const DeviceTensor& flat, std::string_view name) const;
  const GpuParam& param(std::string_view name) const;
  void ensure_buffers(std::int64_t B, std::int64_t T);
  void ensure_optimizer_state();
  // offload_optimizer: the host side of the step (gpt_gpu_offload.cpp).
  void make_host_optimizer();
  void upload_host_masters(const GptModel& cpu);
  double host_sum_of_squares();
  void host_adamw_step(const AdamWConfig& config, float inv_scale, double clip_coef);
  LinearOptions linear_options() const { return {options_.fuse_epilogues, options_.math}; }

  void block_forward(std::int64_t layer, const DeviceTensor& x, DeviceTensor& out);
  void block_backward(std::int64_t layer, const DeviceTensor& x, bool accumulate);
  void mlp_backward(const BlockWeights& w, BlockWeights& g, BlockActs& a, bool accumulate);
  void backward_head(float loss_scale, bool accumulate);

  GptConfig config_;
  GpuGptOptions options_;
  std::int64_t vocab_padded_;
  std::vector<GpuParam> params_;
  std::int64_t flat_numel_ = 0;
  Stream stream_;
  Blas blas_;
  RegionTimer* timer_ = nullptr;

  DeviceTensor params_flat_, grads_flat_;   // working dtype: kParameters, kGradients
  DeviceTensor master_;                     // f32 kMasterParams (undefined for f32 models)
  DeviceTensor exp_avg_, exp_avg_sq_;       // f32 kOptimizerState, made at the first step
  DeviceTensor scalars_;                    // f64 [2]: sum of squares, loss (kOther)
  // offload_optimizer: what the host keeps, pinned and on the ledger's host side (null
  // otherwise). An f32 model's host master is the host's own copy of the parameters it steps.
  struct HostOptimizer {
    Tensor grads;    // working dtype [flat]: the device's gradients, copied down each step
    Tensor grads32;  // f32 [flat]: what AdamW reads (grads itself in an f32 model)
    Tensor master;   // f32 [flat] kMasterParams: what AdamW steps
    Tensor working;  // working dtype [flat]: the copy sent up (master itself in an f32 model)
    std::vector<Tensor> master_views, grad_views;  // by parameter: its device_shape's elements
    std::unique_ptr<AdamW> adamw;  // its moments made at the first step, as on the device
    bool grads_down = false;       // grads32 holds this step's gradients (host_sum_of_squares)
  };
  std::unique_ptr<HostOptimizer> host_;
  std::vector<BlockWeights> w_, dw_;
  std::int64_t step_ = 0;

  std::vector<std::int32_t> tokens_, targets_;
  DeviceIds d_tokens_, d_targets_;
  std::int64_t B_ = 0, T_ = 0;
  bool ready_for_backward_ = false;
  std::vector<DeviceTensor> resid_;  // [L + 1] x [B, T, C]
  std::vector<BlockActs> acts_;
  DeviceTensor lnf_, lnf_mean_, lnf_rstd_, logits_, lse_, target_logit_;
  DeviceTensor proj_, dres_, dsmall_, dbig_;  // workspaces (kOther)
};

// A GpuGptModel's AdamW, with one step's config, as the StepEngine of chapter 3's
// mixed_precision_step. It fuses: unscale and clip only record their factors, which the AdamW
// kernel applies as it reads each gradient (g * inv_scale * clip_coef), and the kernel re-casts
// the working copy. One FP64 sum of squares of the scaled gradients (one 8-byte read back, like
// GradScaler's found_inf.item()) serves both the check, as FP64 squares of finite floats cannot
// overflow a sum of any model's size, and the norm, times the factors recorded so far. The
// CPU's in-place order rounds each multiply before summing: the same step up to those roundings.
// offload_optimizer: the sum brings the gradients to the host, which the update then reads.
class GpuAdamWStep final : public StepEngine {
 public:
  GpuAdamWStep(GpuGptModel& model, const AdamWConfig& config) : model_(model), config_(config) {}
  void prepare_fp32_grads() override {
    has_sum_ = false;
    inv_scale_ = 1.0f;
    clip_coef_ = 1.0;
  }
  bool unscale_and_check(float inv_scale) override {
    inv_scale_ *= inv_scale;
    return !std::isfinite(scaled_sum_of_squares());
  }
  double grad_norm() override {
    return std::sqrt(scaled_sum_of_squares()) * static_cast<double>(inv_scale_) * clip_coef_;
  }
  void clip(double coef) override { clip_coef_ *= coef; }
  void optimizer_step() override {
    scaled_sum_of_squares();  // offloaded: the update reads the gradients the sum brought down
    model_.adamw_step(config_, inv_scale_, clip_coef_);
    prepare_fp32_grads();
  }
  void recast() override {}  // done by the AdamW kernel (offloaded: copied up after the update)

 private:
  double scaled_sum_of_squares() {
    if (!has_sum_) sum_sq_ = model_.grad_sum_of_squares();
    has_sum_ = true;
    return sum_sq_;
  }
  GpuGptModel& model_;
  AdamWConfig config_;
  bool has_sum_ = false;  // sum_sq_ is of this step's gradients
  double sum_sq_ = 0.0;
  float inv_scale_ = 1.0f;  // recorded by unscale_and_check, applied by the update
  double clip_coef_ = 1.0;  // recorded by clip, applied by the update
};

}  // namespace mixpar::cuda
