// GpuGptModel's offloaded optimizer (GpuGptOptions::offload_optimizer; ZeRO-Offload, Ren et al.
// 2021, docs/REFERENCE.md "ZeRO memory and traffic"): the FP32 masters and AdamW moments live
// in pinned host memory, billed to the ledger's host side, and the step runs on the CPU:
//
//   device -> host   the working-dtype gradients, one async copy on the model's stream (pinned
//                    memory: a DMA at full PCIe/NVLink-C2C bandwidth), then a wait
//   host             widen to FP32; found-inf and the norm in one FP64 pass over the scaled
//                    gradients, as GpuGptModel::step measures them; unscale by 1/scale and clip
//                    by the same coefficient; common/optim's AdamW on the masters (the very
//                    adamw_element the device kernel runs, optim/adamw_math.h)
//   host -> device   the masters rounded to the working dtype (or, f32, the masters), one copy
//
// The device then holds only the working parameters and gradients, 2P + 2P bytes in 16-bit.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/gpt_gpu.h"
#include "ops/elementwise.h"
#include "ops/reductions.h"
#include "optim/clip.h"

namespace mixpar::cuda {

void GpuGptModel::make_host_optimizer() {
  const DType dt = options_.dtype;
  auto h = std::make_unique<HostOptimizer>();
  // Pinned (page-locked) and on the host side of the ledger: cudaMemcpyAsync from and to
  // pageable memory would stage through a driver buffer and block the stream.
  const HostMemoryScope host(/*pinned=*/true);
  h->master = Tensor::zeros({flat_numel_}, DType::kF32, MemCategory::kMasterParams);
  if (dt == DType::kF32) {
    h->grads = Tensor::zeros({flat_numel_}, dt, MemCategory::kGradients);
    h->grads32 = h->grads;
    h->working = h->master;
  } else {
    h->grads = Tensor::zeros({flat_numel_}, dt, MemCategory::kGradients);
    h->grads32 = Tensor::zeros({flat_numel_}, DType::kF32, MemCategory::kGradients);
    h->working = Tensor::zeros({flat_numel_}, dt, MemCategory::kParameters);
  }
  for (const GpuParam& p : params_) {
    const std::int64_t n = shape_numel(p.device_shape);
    h->master_views.push_back(h->master.flat_slice(p.offset, n));
    h->grad_views.push_back(h->grads32.flat_slice(p.offset, n));
  }
  host_ = std::move(h);
}

void GpuGptModel::upload_host_masters(const GptModel& cpu) {
  for (const GpuParam& p : params_) {
    // The CPU values rounded to FP32, as the device master takes them (upload_from); wte's
    // padding rows and the alignment gaps stay zero.
    Tensor master = host_->master.flat_slice(p.offset, shape_numel(p.shape));
    master.copy_from(cpu.param(p.name));
  }
  host_->adamw.reset();  // moments made again, zero, at the next step
}

GpuStepResult GpuGptModel::step_on_host(const AdamWConfig& config, float loss_scale,
                                        double max_norm) {
  HostOptimizer& h = *host_;
  cudaStream_t s = stream_.get();
  GpuStepResult result;
  {
    TimedRegion t(timer_, "offload: gradients to host");
    MIXPAR_CUDA_CHECK(cudaMemcpyAsync(h.grads.data(), grads_flat_.data(), grads_flat_.nbytes(),
                                      cudaMemcpyDeviceToHost, s));
    stream_.synchronize();
  }
  TimedRegion t(timer_, "offload: adamw on host");
  if (h.grads32.data() != h.grads.data()) h.grads32.copy_from(h.grads);  // widened exactly
  // The scaled gradients' squares in FP64: a non-finite sum is an inf or NaN gradient.
  const double sumsq = ops::sum_of_squares(h.grads32);
  result.found_inf = !std::isfinite(sumsq);
  if (result.found_inf) {
    result.grad_norm = std::numeric_limits<double>::infinity();
    return result;
  }
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(loss_scale));
  result.grad_norm = std::sqrt(sumsq) * static_cast<double>(inv_scale);
  const double coef = max_norm > 0 ? clip_coefficient(result.grad_norm, max_norm) : 1.0;
  if (inv_scale != 1.0f) ops::scale(h.grads32, inv_scale);
  if (coef != 1.0) ops::scale(h.grads32, coef);
  if (!h.adamw) {
    std::vector<bool> decays;
    for (const GpuParam& p : params_) decays.push_back(p.weight_decay);
    const HostMemoryScope host(/*pinned=*/true);  // m and v: host memory, on the host side
    h.adamw = std::make_unique<AdamW>(h.master_views, config, std::move(decays));
  }
  const AdamWConfig& kept = h.adamw->config();
  if (kept.beta1 != config.beta1 || kept.beta2 != config.beta2 || kept.eps != config.eps ||
      kept.weight_decay != config.weight_decay) {
    throw std::invalid_argument(
        "GpuGptModel::step: the offloaded AdamW keeps the first step's betas, eps and weight "
        "decay; only lr may change between steps");
  }
  h.adamw->set_lr(config.lr);
  h.adamw->set_step_count(step_);
  h.adamw->step(h.grad_views);
  ++step_;
  if (h.working.data() != h.master.data()) h.working.copy_from(h.master);  // round to 16 bits
  MIXPAR_CUDA_CHECK(cudaMemcpyAsync(params_flat_.data(), h.working.data(), params_flat_.nbytes(),
                                    cudaMemcpyHostToDevice, s));
  // The next forward reads the parameters on this stream; the host buffer is reused only by
  // the next step, after its own synchronisation.
  result.stepped = true;
  return result;
}

}  // namespace mixpar::cuda
