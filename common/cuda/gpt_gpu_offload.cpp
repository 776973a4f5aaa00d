// GpuGptModel's offloaded optimizer (GpuGptOptions::offload_optimizer; ZeRO-Offload, Ren et al.
// 2021, docs/REFERENCE.md "ZeRO memory and traffic"): the FP32 masters and AdamW moments live
// in pinned host memory, billed to the ledger's host side, and the step runs on the CPU:
//
//   device -> host   the working-dtype gradients, one async copy on the model's stream (pinned
//                    memory: a DMA at full PCIe/NVLink-C2C bandwidth), then a wait
//   host             widen to FP32; the FP64 sum of squares of the scaled gradients, as the
//                    device sums them (GpuAdamWStep makes found-inf and the norm of it for
//                    chapter 3's mixed_precision_step); unscale by 1/scale and clip by the
//                    factors the step recorded; common/optim's AdamW on the masters (the very
//                    adamw_element the device kernel runs, optim/adamw_math.h)
//   host -> device   the masters rounded to the working dtype (or, f32, the masters), one copy
//
// The device then holds only the working parameters and gradients, 2P + 2P bytes in 16-bit.
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/gpt_gpu.h"
#include "ops/elementwise.h"
#include "ops/reductions.h"

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

double GpuGptModel::host_sum_of_squares() {
  HostOptimizer& h = *host_;
  {
    TimedRegion t(timer_, "offload: gradients to host");
    MIXPAR_CUDA_CHECK(cudaMemcpyAsync(h.grads.data(), grads_flat_.data(), grads_flat_.nbytes(),
                                      cudaMemcpyDeviceToHost, stream_.get()));
    stream_.synchronize();
  }
  TimedRegion t(timer_, "offload: grad norm + inf check on host");
  if (h.grads32.data() != h.grads.data()) h.grads32.copy_from(h.grads);  // widened exactly
  h.grads_down = true;
  return ops::sum_of_squares(h.grads32);  // of the scaled gradients, as the device sums them
}

void GpuGptModel::host_adamw_step(const AdamWConfig& config, float inv_scale, double clip_coef) {
  HostOptimizer& h = *host_;
  if (!h.grads_down) {
    throw std::logic_error(
        "GpuGptModel::adamw_step: the offloaded step reads the gradients grad_sum_of_squares "
        "brought to the host; call it first");
  }
  h.grads_down = false;
  TimedRegion t(timer_, "offload: adamw on host");
  if (inv_scale != 1.0f) ops::scale(h.grads32, inv_scale);
  if (clip_coef != 1.0) ops::scale(h.grads32, clip_coef);
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
        "GpuGptModel::adamw_step: the offloaded AdamW keeps the first step's betas, eps and "
        "weight decay; only lr may change between steps");
  }
  h.adamw->set_lr(config.lr);
  h.adamw->set_step_count(step_);
  h.adamw->step(h.grad_views);
  ++step_;
  if (h.working.data() != h.master.data()) h.working.copy_from(h.master);  // round to 16 bits
  MIXPAR_CUDA_CHECK(cudaMemcpyAsync(params_flat_.data(), h.working.data(), params_flat_.nbytes(),
                                    cudaMemcpyHostToDevice, stream_.get()));
  // The next forward reads the parameters on this stream; the host buffer is reused only by
  // the next step, after its own synchronisation.
}

}  // namespace mixpar::cuda
