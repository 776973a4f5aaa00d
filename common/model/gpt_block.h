// One GPT-2 transformer block (pre-LN) as a forward/backward pair, with the buffers it keeps:
//   x -> ln_1 -> c_attn -> attention -> c_proj -> (+x) = res2 -> ln_2 -> c_fc -> gelu -> c_proj
//   -> (+res2) = out.
// GptModel runs the stack of them; a pipeline stage (chapter 7) runs a range of layers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/attention_seam.h"
#include "model/block_gemms.h"
#include "model/gpt_params.h"
#include "model/tensor_parallel.h"
#include "tensor/tensor.h"

namespace mixpar {

// t becomes an uninitialised tensor of this shape, dtype and category unless it already is one
// (the old buffer is freed first, so a reallocation never holds both on the ledger).
void ensure_tensor(Tensor& t, const Shape& shape, DType dtype, MemCategory category);

// Handles on one block's tensors in the registry: its parameters, or (same names) gradients.
struct GptBlockWeights {
  Tensor ln1_w, ln1_b;              // [C]
  Tensor attn_w, attn_b;            // [C, 3C], [3C]
  Tensor attn_proj_w, attn_proj_b;  // [C, C], [C]
  Tensor ln2_w, ln2_b;              // [C]
  Tensor fc_w, fc_b;                // [C, 4C], [4C]
  Tensor fc_proj_w, fc_proj_b;      // [4C, C], [C]
  // The model's layer index and the GEMM seam its linear layers run through (null: common/ops).
  std::int64_t layer = 0;
  BlockGemms* gemms = nullptr;
};
GptBlockWeights gpt_block_params(const ParamRegistry& r, std::int64_t layer);
GptBlockWeights gpt_block_grads(const ParamRegistry& r, std::int64_t layer);

// What a block's backward reads, in the working dtype (statistics in FP32, f64 for f64), all
// MemCategory::kActivations. Per token: 15 C values + H T attention probabilities (+ 4 stats).
// A tensor-parallel rank (tp > 1) holds its share of the split ones: qkv, atty, fch, fch_gelu
// and att are divided by tp; ln1, res2, ln2 and the statistics are whole (3 C + 12 C / tp),
// or with sequence parallelism (sp) this rank's B T / tp rows of them, [1, B T / tp, C].
struct GptBlockActs {
  Tensor ln1, ln1_mean, ln1_rstd;  // [B, T, C], [B*T], [B*T]
  Tensor qkv;                      // [B, T, 3C]
  Tensor att;                      // [B, H, T, T] softmax probabilities (or what seam keeps)
  Tensor atty;                     // [B, T, C] attention output (input of attn.c_proj)
  Tensor res2;                     // [B, T, C] x + attention branch
  Tensor ln2, ln2_mean, ln2_rstd;  // [B, T, C], [B*T], [B*T]
  Tensor fch;                      // [B, T, 4C] c_fc output (GELU input)
  Tensor fch_gelu;                 // [B, T, 4C] GELU output (input of mlp.c_proj)
  // Not null: attention runs through it (context parallelism), and att holds what its
  // forward keeps (saved_shape) instead of the probabilities. Set before ensure().
  AttentionSeam* seam = nullptr;

  // (Re)allocates unless already of this shape and dtype.
  void ensure(std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t H, DType dtype,
              std::int64_t tp = 1, bool sp = false);
  void release();
  bool allocated() const { return ln1.defined(); }
  // Bytes held for (B, T, C, H) in dtype: what ensure() charges to the ledger.
  static std::size_t bytes(std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t H,
                           DType dtype, std::int64_t tp = 1, bool sp = false);
};

// Scratch of forward and backward, MemCategory::kOther: nothing in it outlives a call.
struct GptBlockWorkspace {
  Tensor proj;    // [B, T, C] output of a c_proj before its residual add
  Tensor dres;    // [B, T, C] gradient of the residual stream, flowing down the stack
  Tensor dsmall;  // [B, T, C] gradient of ln_2 / attention output / ln_1 outputs
  Tensor dbig;    // [B, T, 4C] gradient of the MLP hidden layer; its first 3C columns' worth
                  // of elements also serve as dqkv [B, T, 3C]
  Tensor datt;    // [B, H, T, T] gradient of the attention scores

  // Sequence parallel only: the gathered rows of a LayerNorm output or of a gradient
  // [B, T, C]; a reduce-scattered gradient of this rank's rows [1, B T / tp, C]; the partial
  // gradients of the block's replicated parameters, summed over tp in one call [6 C].
  Tensor gathered, dlocal, replicated;

  // tp > 1: dbig and datt hold this rank's share (4 C / tp columns, H / tp heads); sp: dres
  // holds this rank's rows [1, B T / tp, C], and the three above are allocated.
  void ensure(std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t H, DType dtype,
              std::int64_t tp = 1, bool sp = false);
  void release();
};

// Runs the block on x [B, T, C]; fills a. out [B, T, C] = the block's output; when out is null
// (recompute before backward) the MLP's c_proj and residual add are skipped: backward does not
// read their output. proj is the c_proj scratch [B, T, C].
// tp (tensor parallel, chapter 6): w holds this rank's shards (registry with a TensorShard),
// n_head is the model's; the rank runs n_head / tp heads and its share of the MLP, its four
// linear layers as chapter 6's column-parallel (c_attn, c_fc) and row-parallel (the
// projections: g's sum, then the bias once) layers, through tp.
// sp (sequence parallel, with tp): x, out and the LayerNorm activations are this rank's rows;
// sp's gathered and dlocal are the block's scratch.
void gpt_block_forward(const GptBlockWeights& w, std::int64_t n_head, const Tensor& x,
                       GptBlockActs& a, Tensor* out, Tensor& proj,
                       TensorParallelOps* tp = nullptr, GptBlockWorkspace* sp = nullptr);

// Backward of the block given its input x and the activations of its forward. On entry ws.dres
// holds d(out); on return d(x). Gradients go to g (overwritten, or added when accumulate).
// tp: the split layers' backward through tp (f's all-reduce of each column-parallel layer's
// input gradient before each LayerNorm backward). Without sp this is gpt_block_backward_input,
// then gpt_block_backward_weight (d(out) kept in ws.proj): bit for bit the joint backward, as
// every product has the same operands. a's fch, qkv and res2 hold gradients afterwards.
void gpt_block_backward(const GptBlockWeights& w, GptBlockWeights& g, std::int64_t n_head,
                        const Tensor& x, GptBlockActs& a, GptBlockWorkspace& ws,
                        bool accumulate, TensorParallelOps* tp = nullptr, bool sp = false);

// The backward split for zero-bubble pipelines (chapter 7, ZB-H1; Qi et al. 2023): B, the
// input gradient (d(out) in ws.dres -> d(x) in ws.dres), with the LayerNorms' weight
// gradients; it leaves what W needs in the block's own buffers: d(out) in out_grad [B, T, C],
// d(fch) over a.fch, d(res2) over a.res2, d(qkv) over a.qkv (activations B has consumed).
// No sequence parallelism (its gathered rows live in the shared workspace).
void gpt_block_backward_input(const GptBlockWeights& w, GptBlockWeights& g, std::int64_t n_head,
                              const Tensor& x, GptBlockActs& a, GptBlockWorkspace& ws,
                              Tensor& out_grad, bool accumulate, TensorParallelOps* tp = nullptr);
// W, any time after B and before the block's next forward: the four GEMMs' weight and bias
// gradients from their inputs (a.fch_gelu, a.ln2, a.atty, a.ln1) and the gradients B kept
// (with tp, through chapter 6's layers; none communicates).
void gpt_block_backward_weight(const GptBlockWeights& w, GptBlockWeights& g,
                               const GptBlockActs& a, const Tensor& out_grad, bool accumulate,
                               TensorParallelOps* tp = nullptr);

}  // namespace mixpar
