// One GPT-2 transformer block (pre-LN) as a forward/backward pair, with the buffers it keeps:
//   x -> ln_1 -> c_attn -> attention -> c_proj -> (+x) = res2 -> ln_2 -> c_fc -> gelu -> c_proj
//   -> (+res2) = out.
// GptModel runs the stack of them; a pipeline stage (chapter 7) runs a range of layers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "model/attention_seam.h"
#include "model/block_feed_forward.h"
#include "model/block_gemms.h"
#include "model/block_linear.h"
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
};
GptBlockWeights gpt_block_params(const ParamRegistry& r, std::int64_t layer);
GptBlockWeights gpt_block_grads(const ParamRegistry& r, std::int64_t layer);

// The block's four linear layers, in forward order, held by the block for the model's
// lifetime (block_linear.h). Column: attn.c_attn and mlp.c_fc; Row: attn.c_proj and mlp.c_proj.
template <class Column, class Row>
struct LinearsOf {
  std::unique_ptr<Column> attn;
  std::unique_ptr<Row> attn_proj;
  std::unique_ptr<Column> fc;
  std::unique_ptr<Row> fc_proj;
  // The weight and bias handles read again from w (GptModel::rebind_params).
  void rebind(const GptBlockWeights& w) {
    attn->rebind(w.attn_w, w.attn_b);
    attn_proj->rebind(w.attn_proj_w, w.attn_proj_b);
    fc->rebind(w.fc_w, w.fc_b);
    fc_proj->rebind(w.fc_proj_w, w.fc_proj_b);
  }
};
// On one rank DenseLinear's; with tensor parallelism chapter 6's column- and row-parallel
// layers, from the tp group (tp not null).
using BlockLinears = LinearsOf<BlockLinear, BlockLinear>;
// With sequence parallelism the same layers of chapter 6, with their sequence-parallel forms.
using SpBlockLinears = LinearsOf<TpColumnLinear, TpRowLinear>;
// Layer `layer` of the model: w its parameters, g their gradients, gemms the seam of its
// products (null: common/ops').
BlockLinears make_block_linears(const GptBlockWeights& w, const GptBlockWeights& g,
                                std::int64_t layer, BlockGemms* gemms, TensorParallelGroup* tp);
SpBlockLinears make_sp_block_linears(const GptBlockWeights& w, const GptBlockWeights& g,
                                     std::int64_t layer, BlockGemms* gemms,
                                     TensorParallelGroup& tp);

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
  // Not null: the MLP branch runs through it (block_feed_forward.h; chapter 9's MoE layer):
  // fch and fch_gelu are not read, d(out) reaches it whole. Set before forward, with the
  // slot (micro-batch in flight) whose state the branch keeps for this forward's backward.
  BlockFeedForward* ffn = nullptr;
  int ffn_slot = 0;

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
  // gradients of the blocks' replicated parameters, 6 C a block, and then the head's ln_f's,
  // 2 C, summed over tp in one call [blocks x 6 C + 2 C].
  Tensor gathered, dlocal, replicated;

  // tp > 1: dbig and datt hold this rank's share (4 C / tp columns, H / tp heads); sp: dres
  // holds this rank's rows [1, B T / tp, C], and the three above are allocated, replicated for
  // `blocks` blocks.
  void ensure(std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t H, DType dtype,
              std::int64_t tp = 1, bool sp = false, std::int64_t blocks = 1);
  void release();
};

// Runs the block on x [B, T, C]; fills a. out [B, T, C] = the block's output; when out is null
// (recompute before backward) the MLP's c_proj and residual add are skipped: backward does not
// read their output. proj is the c_proj scratch [B, T, C]. heads: this rank's attention heads
// (n_head / tp; with tensor parallelism w holds this rank's shards and l chapter 6's layers,
// so the rank runs its share of the attention and of the MLP).
void gpt_block_forward(const GptBlockWeights& w, const BlockLinears& l, std::int64_t heads,
                       const Tensor& x, GptBlockActs& a, Tensor* out, Tensor& proj);
// Sequence parallel (with tp): x, out and the LayerNorm activations are this rank's rows; the
// workspace's gathered and dlocal hold the gathered rows and this rank's rows of each
// row-parallel sum, its proj the partial products.
void gpt_block_forward_sp(const GptBlockWeights& w, const SpBlockLinears& l, std::int64_t heads,
                          const Tensor& x, GptBlockActs& a, Tensor* out, GptBlockWorkspace& ws);

// Backward of the block given its input x and the activations of its forward. On entry ws.dres
// holds d(out); on return d(x). Gradients go to g and to the layers' (overwritten, or added
// when accumulate). With tp, f's all-reduce of each column-parallel layer's input gradient
// comes before each LayerNorm backward. This is gpt_block_backward_input, then
// gpt_block_backward_weight (d(out) kept in ws.proj): bit for bit the joint backward, as every
// product has the same operands. a's fch, qkv and res2 hold gradients afterwards.
void gpt_block_backward(const GptBlockWeights& w, GptBlockWeights& g, BlockLinears& l,
                        std::int64_t heads, const Tensor& x, GptBlockActs& a,
                        GptBlockWorkspace& ws, bool accumulate);
// Sequence parallel: the same on this rank's rows (ws.dres [1, B T / tp, C]). The replicated
// parameters' gradients come from this rank's rows alone, into `parts` [6 C]:
// [ln_1 w | ln_1 b | attn.c_proj b | ln_2 w | ln_2 b | mlp.c_proj b]. With sum_now they are
// completed by one sum over tp and added to g here; without, the caller sums several blocks'
// parts in one call and adds each block's with add_sp_replicated_grads: the same sums and the
// same additions, so the same bits, in one call instead of one per block.
void gpt_block_backward_sp(const GptBlockWeights& w, GptBlockWeights& g, SpBlockLinears& l,
                           std::int64_t heads, const Tensor& x, const GptBlockActs& a,
                           GptBlockWorkspace& ws, bool accumulate, TensorParallelGroup& tp,
                           Tensor& parts, bool sum_now);
// g (+)= summed: one replicated parameter's gradient of a sequence-parallel region (a block's
// LayerNorms and row-parallel biases, the head's ln_f) from the tp sum of its parts.
void add_replicated(const Tensor& summed, Tensor& g, bool accumulate);
// g's six replicated gradients (+)= summed [6 C], the tp sum of gpt_block_backward_sp's parts.
void add_sp_replicated_grads(const Tensor& summed, GptBlockWeights& g, bool accumulate);

// The backward split for zero-bubble pipelines (chapter 7, ZB-H1; Qi et al. 2023): B, the
// input gradient (d(out) in ws.dres -> d(x) in ws.dres), with the LayerNorms' weight
// gradients; it leaves what W needs in the block's own buffers: d(out) in out_grad [B, T, C],
// d(fch) over a.fch, d(res2) over a.res2, d(qkv) over a.qkv (activations B has consumed).
// No sequence parallelism (its gathered rows live in the shared workspace).
void gpt_block_backward_input(const GptBlockWeights& w, GptBlockWeights& g,
                              const BlockLinears& l, std::int64_t heads, const Tensor& x,
                              GptBlockActs& a, GptBlockWorkspace& ws, Tensor& out_grad,
                              bool accumulate);
// W, any time after B and before the block's next forward: the four layers' weight and bias
// gradients from their inputs (a.fch_gelu, a.ln2, a.atty, a.ln1) and the gradients B kept
// (with tp, chapter 6's layers; none communicates).
void gpt_block_backward_weight(BlockLinears& l, const GptBlockActs& a, const Tensor& out_grad,
                               bool accumulate);

}  // namespace mixpar
