// GpuGptModel's parameters: the device layout (registry order, each parameter 128-element
// aligned, wte padded to the vocabulary multiple), transfers to and from CPU models, and the
// optimizer's two halves (the step's sequence is chapter 3's mixed_precision_step). Forward
// and backward are in gpt_gpu_step.cpp.
#include "cuda/gpt_gpu.h"

#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/launch.h"
#include "util/errors.h"

namespace mixpar::cuda {

namespace {

constexpr std::int64_t kParamAlign = 128;  // elements: 256 B in 16-bit, 512 B in f32

DType checked_dtype(DType dt) {
  if (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16) {
    throw InputError("GpuGptModel: working dtype " + std::string(dtype_name(dt)) +
                     " is not one of f32, f16, bf16");
  }
  return dt;
}

// Validates the config first: this runs in the constructor's initialiser list.
std::int64_t vocab_rows(const GptConfig& c, std::int64_t multiple) {
  c.validate();
  if (multiple <= 0) throw InputError("GpuGptModel: vocab_multiple must be positive");
  return ceil_div(c.vocab_size, multiple) * multiple;
}

}  // namespace

GpuGptModel::GpuGptModel(GptConfig config, GpuGptOptions options)
    : config_(config),
      options_(options),
      vocab_padded_(vocab_rows(config_, options_.vocab_multiple)),
      blas_(stream_.get()) {
  const DType dt = checked_dtype(options_.dtype);
  const ParamRegistry registry = make_gpt2_registry(config_);
  for (const ParamEntry& e : registry.entries()) {
    Shape device_shape = e.shape;
    if (e.name == "wte.weight") device_shape[0] = vocab_padded_;
    params_.push_back({e.name, e.shape, device_shape, flat_numel_, e.weight_decay});
    flat_numel_ += ceil_div(shape_numel(device_shape), kParamAlign) * kParamAlign;
  }
  cudaStream_t s = stream_.get();
  // Zeroed whole: the alignment gaps and wte's padding rows must hold 0 forever after.
  params_flat_ = DeviceTensor::empty({flat_numel_}, dt, MemCategory::kParameters);
  params_flat_.zero(s);
  grads_flat_ = DeviceTensor::empty({flat_numel_}, dt, MemCategory::kGradients);
  grads_flat_.zero(s);
  if (options_.offload_optimizer) {
    make_host_optimizer();  // the masters on the host; the device keeps no FP32 copy
  } else if (dt != DType::kF32) {
    master_ = DeviceTensor::empty({flat_numel_}, DType::kF32, MemCategory::kMasterParams);
    master_.zero(s);
  }
  scalars_ = DeviceTensor::empty({2}, DType::kF64, MemCategory::kOther);
  for (std::int64_t l = 0; l < config_.n_layer; ++l) {
    w_.push_back(block_view(params_flat_, l));
    dw_.push_back(block_view(grads_flat_, l));
  }
}

const GpuParam& GpuGptModel::param(std::string_view name) const {
  for (const GpuParam& p : params_) {
    if (p.name == name) return p;
  }
  throw InputError("GpuGptModel: no parameter named '" + std::string(name) + "'");
}

DeviceTensor GpuGptModel::view(const DeviceTensor& flat, std::string_view name) const {
  const GpuParam& p = param(name);
  return flat.flat_slice(p.offset, shape_numel(p.device_shape)).view(p.device_shape);
}

GpuGptModel::BlockWeights GpuGptModel::block_view(const DeviceTensor& flat,
                                                  std::int64_t layer) const {
  const std::string h = "h." + std::to_string(layer) + ".";
  auto get = [&](const char* suffix) { return view(flat, h + suffix); };
  return {get("ln_1.weight"),      get("ln_1.bias"),          get("attn.c_attn.weight"),
          get("attn.c_attn.bias"), get("attn.c_proj.weight"), get("attn.c_proj.bias"),
          get("ln_2.weight"),      get("ln_2.bias"),          get("mlp.c_fc.weight"),
          get("mlp.c_fc.bias"),    get("mlp.c_proj.weight"),  get("mlp.c_proj.bias")};
}

void GpuGptModel::initialize(std::uint64_t seed) {
  GptOptions cpu_options;
  cpu_options.dtype = DType::kF32;
  cpu_options.seed = seed;
  const GptModel cpu(config_, cpu_options);  // the same Philox draws as any GptModel
  upload_from(cpu);
}

void GpuGptModel::upload_from(const GptModel& cpu) {
  if (!(cpu.config() == config_)) {
    throw InputError("GpuGptModel::upload_from: the CPU model's config differs");
  }
  cudaStream_t s = stream_.get();
  for (const GpuParam& p : params_) {
    const Tensor& host = cpu.param(p.name);
    const std::int64_t n = shape_numel(p.shape);
    // Rows beyond the vocabulary (wte's padding) stay as constructed: zero.
    DeviceTensor working = params_flat_.flat_slice(p.offset, n);
    if (master_.defined()) {
      // FP32 master from the host, the 16-bit copy rounded from it on the device.
      DeviceTensor master = master_.flat_slice(p.offset, n);
      master.copy_from_host(host, s);
      working.copy_from(master, s);
    } else {
      working.copy_from_host(host, s);
    }
  }
  zero_grad();
  if (exp_avg_.defined()) {
    exp_avg_.zero(s);
    exp_avg_sq_.zero(s);
  }
  if (host_) upload_host_masters(cpu);
  step_ = 0;
  stream_.synchronize();
}

void GpuGptModel::download_to(GptModel& cpu) const {
  if (!(cpu.config() == config_)) {
    throw InputError("GpuGptModel::download_to: the CPU model's config differs");
  }
  for (const GpuParam& p : params_) {
    Tensor dst = cpu.registry().at(p.name).param;  // a handle on the CPU model's storage
    dst.copy_from(param_to_host(p.name));         // rounded to the CPU model's dtype
  }
}

Tensor GpuGptModel::param_to_host(std::string_view name) const {
  const GpuParam& p = param(name);
  return view(params_flat_, name).rows(0, p.shape[0]).to_host(stream_.get()).view(p.shape);
}

Tensor GpuGptModel::grad_to_host(std::string_view name) const {
  const GpuParam& p = param(name);
  return view(grads_flat_, name).rows(0, p.shape[0]).to_host(stream_.get()).view(p.shape);
}

void GpuGptModel::zero_grad() { grads_flat_.zero(stream_.get()); }

void GpuGptModel::ensure_optimizer_state() {
  if (exp_avg_.defined()) return;
  cudaStream_t s = stream_.get();
  exp_avg_ = DeviceTensor::empty({flat_numel_}, DType::kF32, MemCategory::kOptimizerState);
  exp_avg_sq_ = DeviceTensor::empty({flat_numel_}, DType::kF32, MemCategory::kOptimizerState);
  exp_avg_.zero(s);
  exp_avg_sq_.zero(s);
}

double GpuGptModel::grad_sum_of_squares() {
  if (host_) return host_sum_of_squares();
  cudaStream_t s = stream_.get();
  {
    TimedRegion t(timer_, "grad norm + inf check");
    DeviceTensor sumsq = scalars_.flat_slice(0, 1);
    sum_of_squares(grads_flat_, sumsq, s);
  }
  double sumsq = 0;
  MIXPAR_CUDA_CHECK(cudaMemcpyAsync(&sumsq, scalars_.f64(), sizeof(double),
                                    cudaMemcpyDeviceToHost, s));
  stream_.synchronize();
  return sumsq;
}

void GpuGptModel::adamw_step(const AdamWConfig& config, float inv_scale, double clip_coef) {
  if (host_) return host_adamw_step(config, inv_scale, clip_coef);
  cudaStream_t s = stream_.get();
  ensure_optimizer_state();
  ++step_;
  AdamWConfig no_decay = config;
  no_decay.weight_decay = 0.0;
  const AdamScalars with_wd = adam_scalars(config, step_),
                    without_wd = adam_scalars(no_decay, step_);
  TimedRegion t(timer_, "adamw");
  // One launch per run of consecutive parameters with the same weight-decay flag (the
  // alignment gaps between them are zeros, which AdamW leaves zero).
  for (std::size_t i = 0; i < params_.size();) {
    std::size_t j = i + 1;
    while (j < params_.size() && params_[j].weight_decay == params_[i].weight_decay) ++j;
    const std::int64_t begin = params_[i].offset;
    const std::int64_t end = params_[j - 1].offset + shape_numel(params_[j - 1].device_shape);
    DeviceTensor master =
        (master_.defined() ? master_ : params_flat_).flat_slice(begin, end - begin);
    DeviceTensor m = exp_avg_.flat_slice(begin, end - begin);
    DeviceTensor v = exp_avg_sq_.flat_slice(begin, end - begin);
    DeviceTensor working = params_flat_.flat_slice(begin, end - begin);
    adamw_update(master, grads_flat_.flat_slice(begin, end - begin), m, v,
                 master_.defined() ? &working : nullptr,
                 params_[i].weight_decay ? with_wd : without_wd, inv_scale,
                 static_cast<float>(clip_coef), nullptr, s);
    i = j;
  }
}

}  // namespace mixpar::cuda
