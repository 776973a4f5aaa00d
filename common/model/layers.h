// The layers of GPT-2 as forward/backward pairs in the style of llm.c: LayerNorm, causal
// multi-head attention, GELU, residual add, token + position embedding, and cross-entropy fused
// with softmax. (Linear layers are common/ops/linear.h.) Tensors may be f32, f16, bf16 (f64 for
// gradient checks); the math runs in FP32 (f64) and each output is rounded once into its dtype.
//
// Shape letters: B batch, T time, C channels, H heads, V vocabulary. Every layer takes the part
// of the model it computes, so the later chapters shard without new kernels: attention runs any
// number of heads on its slice of the qkv projection (tensor parallel), embedding and
// cross-entropy take a vocabulary row range (vocab parallel). Gradients w.r.t. parameters are
// overwritten, or added to when `accumulate` (micro-batches); activation gradients as stated.
// Rows, heads and element blocks run on OpenMP threads; each output element is computed by
// one thread in a fixed order, so results do not depend on the number of threads.
#pragma once

#include <cstdint>
#include <span>

#include "tensor/tensor.h"

namespace mixpar::layers {

inline constexpr double kLayerNormEps = 1e-5;  // GPT-2 (docs/REFERENCE.md, GPT-2 layout)

// ---- LayerNorm over the last dimension (C = w.numel()), biased variance like torch.
// x, out: any shape [..., C] (N rows). mean, rstd [N] hold the statistics backward needs; they
// are FP32 (f64 in reference mode) whatever the working dtype, as mixed-precision LayerNorms
// keep them. out [N, C] = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps).
void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out, Tensor& mean,
                       Tensor& rstd, double eps = kLayerNormEps);
// dx [N, C] += the gradient w.r.t. x (always added: x is the residual stream, whose gradient
// buffer already holds the skip path's share). dw, db [C] (+)= sum over rows.
void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dw, Tensor& db,
                        bool accumulate = false);

// ---- Causal self-attention of n_head heads of size hd = Ch / n_head, scaled by 1/sqrt(hd).
// qkv [B, T, 3 Ch] is the c_attn output laid out [q | k | v] (head h owns columns h*hd ..
// (h+1)*hd - 1 of each third), so a tensor-parallel rank passes its own [q_r | k_r | v_r]
// slice and n_head / tp. out [B, T, Ch]: the heads' outputs side by side.
// att [B, n_head, T, T] keeps the softmax probabilities (zeros above the diagonal).
void attention_forward(const Tensor& qkv, std::int64_t n_head, Tensor& out, Tensor& att);
// dqkv [B, T, 3 Ch] is overwritten. datt [B, n_head, T, T] is a workspace (the gradient of the
// scores on return).
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        std::int64_t n_head, Tensor& dqkv, Tensor& datt);

// ---- GELU, tanh form (docs/REFERENCE.md, GPT-2 layout), any shape; out may be x, dx may be
// dout. Vectorised and threaded; common/ops/activations.h holds the scalar reference it is
// tested against.
void gelu_forward(const Tensor& x, Tensor& out);
void gelu_backward(const Tensor& x, const Tensor& dout, Tensor& dx);

// ---- Residual add: out = a + b (out may be a or b). Its backward hands dout to both
// branches: da += dout, db += dout (the GPT model instead lets one buffer serve both).
void residual_forward(const Tensor& a, const Tensor& b, Tensor& out);
void residual_backward(const Tensor& dout, Tensor& da, Tensor& db);

// ---- Token + position embedding. tokens [B, T] (B*T ids), out [B, T, C]. wte [Vs, C] holds the
// ids [vocab_begin, vocab_begin + Vs): a token outside that range contributes zeros (its owner
// adds it; a vocab-parallel sum completes the row). wpe [P, C] (T <= P) may be null (only one
// vocab-parallel rank adds positions). Token ids must be non-negative.
void embedding_forward(std::span<const std::int32_t> tokens, const Tensor& wte,
                       std::int64_t vocab_begin, const Tensor* wpe, Tensor& out);
// dwte [Vs, C] (+)= scatter-add of dout rows to their tokens' rows; dwpe [P, C] (+)= sum over b
// (rows t >= T untouched when accumulating, zero otherwise). Sequential: deterministic.
void embedding_backward(std::span<const std::int32_t> tokens, const Tensor& dout,
                        std::int64_t vocab_begin, Tensor& dwte, Tensor* dwpe,
                        bool accumulate = false);

// ---- Cross-entropy fused with softmax, mean over the N = B*T rows.
// Per-row statistics of a vocabulary slice logits [N, Vs] holding ids [vocab_begin, +Vs):
// row_max, sum_exp = sum_j exp(l_j - row_max), target_logit (0 when the target lies outside
// the slice), all [N], FP32 (f64 in reference mode). Vocab-parallel ranks combine theirs with
// crossentropy_merge_stats (what max / sum all-reduces compute); one rank needs no merge.
struct CrossEntropyStats {
  Tensor row_max, sum_exp, target_logit;
};
void crossentropy_stats(const Tensor& logits, std::span<const std::int32_t> targets,
                        std::int64_t vocab_begin, CrossEntropyStats& stats);
// a <- the statistics of the union of a's and b's (disjoint) vocabulary slices.
void crossentropy_merge_stats(CrossEntropyStats& a, const CrossEntropyStats& b);
// lse [N] = row_max + log(sum_exp); returns mean_n (lse_n - target_logit_n) in double.
double crossentropy_loss(const CrossEntropyStats& stats, Tensor& lse);
// Both steps for an unsharded vocabulary: the mean loss, and lse [N] for backward.
double crossentropy_forward(const Tensor& logits, std::span<const std::int32_t> targets,
                            Tensor& lse);
// dlogits [N, Vs] = grad_scale * (exp(logits - lse) - onehot(target)) / N. dlogits may be the
// logits tensor itself (in place, as llm.c does, saving a [N, V] buffer). grad_scale is the
// loss scale: the gradient is rounded into dlogits' dtype only after it is applied.
void crossentropy_backward(const Tensor& logits, std::span<const std::int32_t> targets,
                           std::int64_t vocab_begin, const Tensor& lse, float grad_scale,
                           Tensor& dlogits);

}  // namespace mixpar::layers
