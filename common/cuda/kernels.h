// The GPU kernels of a GPT step besides GEMMs and attention, each naming the CPU function it must
// match (tests/common/cuda_*_test.cpp hold them to it). Tensors f32, f16 or bf16, statistics f32;
// math in FP32, each output rounded once. Calls are asynchronous on `stream`; shapes and dtypes
// are checked on the host (std::invalid_argument).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "cuda/device_tensor.h"
#include "optim/adamw.h"
#include "optim/adamw_math.h"

namespace mixpar::cuda {

// ---- LayerNorm over the last dimension C = w.numel(), N rows: layers::layernorm_forward.
// out [N, C] = (x - mean) * rstd * w + b; mean, rstd [N] f32.
void layernorm_forward(const DeviceTensor& x, const DeviceTensor& w, const DeviceTensor& b,
                       DeviceTensor& out, DeviceTensor& mean, DeviceTensor& rstd,
                       cudaStream_t stream, float eps = 1e-5f);
// layers::layernorm_backward: dx += d/dx (always added), dw, db (+)= column sums (two-pass,
// fixed order: deterministic).
void layernorm_backward(const DeviceTensor& dout, const DeviceTensor& x, const DeviceTensor& w,
                        const DeviceTensor& mean, const DeviceTensor& rstd, DeviceTensor& dx,
                        DeviceTensor& dw, DeviceTensor& db, bool accumulate, cudaStream_t stream);

// ---- Elementwise. layers::gelu_forward / gelu_backward (tanh form); out may be x, dx may be dout.
void gelu_forward(const DeviceTensor& x, DeviceTensor& out, cudaStream_t stream);
void gelu_backward(const DeviceTensor& x, const DeviceTensor& dout, DeviceTensor& dx,
                   cudaStream_t stream);
// layers::residual_forward: out = a + b (out may be a or b).
void residual_forward(const DeviceTensor& a, const DeviceTensor& b, DeviceTensor& out,
                      cudaStream_t stream);
// ops::bias_add: y [R, N] += b [N] on every row (one rounding per element).
void bias_add(DeviceTensor& y, const DeviceTensor& b, cudaStream_t stream);
// ops::bias_grad: db [N] (+)= column sums of dy [R, N] (fixed order: deterministic).
void bias_grad(const DeviceTensor& dy, DeviceTensor& db, bool accumulate, cudaStream_t stream);

// ---- Embedding. layers::embedding_forward with vocab_begin 0: out [B, T, C] = wte[token] +
// wpe[t]. wte may have more rows than the vocabulary (padding); tokens must be in range.
void embedding_forward(const DeviceIds& tokens, const DeviceTensor& wte, const DeviceTensor& wpe,
                       DeviceTensor& out, cudaStream_t stream);
// The positions of each distinct token, grouped by token and in increasing order within a
// group (built on the host from the host's copy of the tokens): what makes the scatter-add of
// embedding_backward deterministic, and in the same order as the CPU's.
struct EmbeddingBuckets {
  DeviceIds token;      // [U] distinct tokens, increasing
  DeviceIds offset;     // [U + 1] into position
  DeviceIds position;   // [B*T] row indices grouped by token
  std::int64_t distinct = 0;
};
EmbeddingBuckets make_embedding_buckets(std::span<const std::int32_t> tokens,
                                        cudaStream_t stream);
// layers::embedding_backward with vocab_begin 0: dwte (+)= scatter-add of dout rows (one thread
// per (token, channel) adds its rows in order); dwpe (+)= sum over b (may be null).
void embedding_backward(const EmbeddingBuckets& buckets, const DeviceTensor& dout,
                        DeviceTensor& dwte, DeviceTensor* dwpe, bool accumulate,
                        cudaStream_t stream);

// ---- Cross-entropy fused with softmax over the first V columns of logits [N, Vp] (Vp >= V:
// padded vocabulary; the padding is never read). layers::crossentropy_stats + _loss:
// lse [N] = max + log(sum exp(l - max)) and target_logit [N], both f32, one online pass.
void crossentropy_forward(const DeviceTensor& logits, std::int64_t V, const DeviceIds& targets,
                          DeviceTensor& lse, DeviceTensor& target_logit, cudaStream_t stream);
// loss [1] f64 = mean_n (lse_n - target_logit_n), summed in FP64 in a fixed order.
void crossentropy_mean(const DeviceTensor& lse, const DeviceTensor& target_logit,
                       DeviceTensor& loss, cudaStream_t stream);
// layers::crossentropy_backward: dlogits = grad_scale (softmax - onehot) / N in the working
// dtype; dlogits may be logits (in place: no [N, V] FP32 buffer ever). Padding columns -> 0.
void crossentropy_backward(const DeviceTensor& logits, std::int64_t V, const DeviceIds& targets,
                           const DeviceTensor& lse, float grad_scale, DeviceTensor& dlogits,
                           cudaStream_t stream);

// ---- Optimizer and loss-scaling support.
// The per-step constants of AdamW, the ones AdamW::step uses (optim/adamw_math.h).
using mixpar::AdamScalars;
using mixpar::adam_scalars;
// AdamW::step on one tensor, in its operation order with no fused multiply-adds (bit-for-bit
// the CPU update). master, m, v f32 [n]; grad [n] any working dtype, read as
// g = (grad * grad_scale1) * grad_scale2 (unscale, then clip; each skipped when exactly 1).
// param16 [n] (may be null): the 16-bit working copy, re-cast from the new master in the same
// kernel. skip (may be null): f32 [1] found_inf flag; the update is skipped on the device when
// it is non-zero, so no host round trip is needed to honour it.
void adamw_update(DeviceTensor& master, const DeviceTensor& grad, DeviceTensor& m,
                  DeviceTensor& v, DeviceTensor* param16, const AdamScalars& s,
                  float grad_scale1, float grad_scale2, const DeviceTensor* skip,
                  cudaStream_t stream);
// LossScaler::unscale_and_check on f32 grads: found_inf [1] f32 becomes 1 when any element is
// inf/NaN (never reset here); grads *= inv_scale unless inv_scale is exactly 1. One pass.
void unscale_and_check(DeviceTensor& grads, float inv_scale, DeviceTensor& found_inf,
                       cudaStream_t stream);
// LossScaler::found_inf on any working dtype, without changing the tensor.
void check_finite(const DeviceTensor& x, DeviceTensor& found_inf, cudaStream_t stream);
// ops::sum_of_squares: out [1] f64 = sum x^2, squares and sums in FP64 (a non-finite element
// makes it non-finite), over a fixed grid in a fixed order: deterministic.
void sum_of_squares(const DeviceTensor& x, DeviceTensor& out, cudaStream_t stream);

}  // namespace mixpar::cuda
