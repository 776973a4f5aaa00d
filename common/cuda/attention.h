// Causal multi-head self-attention on the GPU (layers::attention_forward / _backward), two ways:
// materialised (batched cuBLAS GEMMs, FP32 [B, H, T, T] scores, a softmax kernel; att kept like
// the CPU) and fused (flash-attention style: online softmax over key tiles, only the log-sum-exp
// kept, no T x T matrix anywhere). qkv [B, T, 3C] is laid out [q | k | v].
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/blas.h"
#include "cuda/device_tensor.h"

namespace mixpar::cuda {

// out [B, T, C] and att [B, H, T, T] (softmax probabilities, zeros above the diagonal), both
// in qkv's dtype. Scratch (q, k, v by head and the FP32 scores) comes from the allocator.
void attention_forward(Blas& blas, const DeviceTensor& qkv, std::int64_t n_head,
                       DeviceTensor& out, DeviceTensor& att);
// dqkv [B, T, 3C] is overwritten.
void attention_backward(Blas& blas, const DeviceTensor& dout, const DeviceTensor& qkv,
                        const DeviceTensor& att, std::int64_t n_head, DeviceTensor& dqkv);

// The fused kernels are compiled for head sizes 64 (every GPT-2 model) and 128.
bool flash_attention_supported(std::int64_t head_dim);
// Dynamic shared memory per block of the fused kernels at a supported head size, in bytes:
// above 48 KiB a kernel needs the opt-in (and a device that offers it, 227 KiB on Hopper).
struct FlashSmem {
  std::size_t forward = 0, dkdv = 0, dq = 0;
};
FlashSmem flash_attention_smem(std::int64_t head_dim);
// out [B, T, C] in qkv's dtype; lse [B, H, T] f32: each row's log-sum-exp of the scaled scores,
// all backward needs besides qkv and out.
void flash_attention_forward(const DeviceTensor& qkv, std::int64_t n_head, DeviceTensor& out,
                             DeviceTensor& lse, cudaStream_t stream);
// dqkv [B, T, 3C] is overwritten. Two kernels (dk/dv per key tile, dq per query tile), each
// recomputing P: no atomics, so the gradients are deterministic.
void flash_attention_backward(const DeviceTensor& dout, const DeviceTensor& qkv,
                              const DeviceTensor& out, const DeviceTensor& lse,
                              std::int64_t n_head, DeviceTensor& dqkv, cudaStream_t stream);

}  // namespace mixpar::cuda
