// A GPT-2 block's forward and backward, written out layer by layer; the linear layers are the
// ones the block holds (block_linear.h: DenseLinear on one rank, chapter 6's column- and
// row-parallel layers with tensor parallelism), everything else common/model/layers.h.
#include "model/gpt_block.h"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/layers.h"
#include "ops/elementwise.h"

namespace mixpar {
namespace {

GptBlockWeights block_tensors(const ParamRegistry& r, std::int64_t layer, bool grads) {
  const std::string h = "h." + std::to_string(layer) + ".";
  auto get = [&](const char* suffix) {
    const ParamEntry& e = r.at(h + suffix);
    return grads ? e.grad : e.param;
  };
  return {get("ln_1.weight"),      get("ln_1.bias"),          get("attn.c_attn.weight"),
          get("attn.c_attn.bias"), get("attn.c_proj.weight"), get("attn.c_proj.bias"),
          get("ln_2.weight"),      get("ln_2.bias"),          get("mlp.c_fc.weight"),
          get("mlp.c_fc.bias"),    get("mlp.c_proj.weight"),  get("mlp.c_proj.bias")};
}

DType stats_dtype(DType working) { return working == DType::kF64 ? DType::kF64 : DType::kF32; }

// [B, T, n] as the 2-D [B*T, n] the linear layers take (a view: same storage).
Tensor rows2d(const Tensor& t) { return t.view({t.dim(0) * t.dim(1), t.dim(2)}); }

// Layer `which` of block `layer`: its parameters and gradients, and its GEMM site.
LinearParams params(const Tensor& w, const Tensor& b, const Tensor& dw, const Tensor& db,
                    std::int64_t layer, BlockGemms* gemms, BlockGemms::Linear which) {
  return {w, b, dw, db, GemmSite{gemms, layer, which}};
}

// The block's four layers in forward order, from make's column() and row().
template <class Linears, class Make>
Linears make_linears(const GptBlockWeights& w, const GptBlockWeights& g, std::int64_t layer,
                     BlockGemms* gemms, Make make) {
  using L = BlockGemms::Linear;
  Linears l;
  l.attn = make.column(params(w.attn_w, w.attn_b, g.attn_w, g.attn_b, layer, gemms, L::kAttn));
  l.attn_proj = make.row(params(w.attn_proj_w, w.attn_proj_b, g.attn_proj_w, g.attn_proj_b,
                                layer, gemms, L::kAttnProj));
  l.fc = make.column(params(w.fc_w, w.fc_b, g.fc_w, g.fc_b, layer, gemms, L::kFc));
  l.fc_proj = make.row(
      params(w.fc_proj_w, w.fc_proj_b, g.fc_proj_w, g.fc_proj_b, layer, gemms, L::kFcProj));
  return l;
}

// Where the layers come from: the tp group (chapter 6's), or DenseLinear on one rank.
struct FromGroup {
  TensorParallelGroup& tp;
  std::unique_ptr<TpColumnLinear> column(const LinearParams& p) const {
    return tp.column_parallel(p);
  }
  std::unique_ptr<TpRowLinear> row(const LinearParams& p) const { return tp.row_parallel(p); }
};
struct Dense {
  static std::unique_ptr<BlockLinear> column(LinearParams p) {
    return std::make_unique<DenseLinear>(std::move(p));
  }
  static std::unique_ptr<BlockLinear> row(LinearParams p) {
    return std::make_unique<DenseLinear>(std::move(p));
  }
};

// Causal attention of this rank's heads: the unsplit kernel, or the seam's (context parallel).
void attention_forward(GptBlockActs& a, std::int64_t heads) {
  if (a.seam != nullptr) {
    a.seam->forward(a.qkv, heads, a.atty, a.att);
  } else {
    layers::attention_forward(a.qkv, heads, a.atty, a.att);
  }
}
void attention_backward(const Tensor& datty, const GptBlockActs& a, std::int64_t heads,
                        Tensor& dqkv, Tensor& datt) {
  if (a.seam != nullptr) {
    a.seam->backward(datty, a.qkv, a.atty, a.att, heads, dqkv);
  } else {
    layers::attention_backward(datty, a.qkv, a.att, heads, dqkv, datt);
  }
}

}  // namespace

void ensure_tensor(Tensor& t, const Shape& shape, DType dtype, MemCategory category) {
  if (t.defined() && t.shape() == shape && t.dtype() == dtype && t.category() == category) return;
  t = Tensor();  // free first: the ledger's peak never holds the old and new buffer at once
  t = Tensor::empty(shape, dtype, category);
}

GptBlockWeights gpt_block_params(const ParamRegistry& r, std::int64_t layer) {
  return block_tensors(r, layer, false);
}
GptBlockWeights gpt_block_grads(const ParamRegistry& r, std::int64_t layer) {
  return block_tensors(r, layer, true);
}

void GptBlockActs::ensure(std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t H,
                          DType dtype, std::int64_t tp, bool sp) {
  constexpr MemCategory kAct = MemCategory::kActivations;
  const DType st = stats_dtype(dtype);
  const Shape rows = sp ? Shape{1, B * T / tp, C} : Shape{B, T, C};  // the LayerNorm regions
  for (Tensor* t : {&ln1, &res2, &ln2}) ensure_tensor(*t, rows, dtype, kAct);
  ensure_tensor(atty, {B, T, C / tp}, dtype, kAct);
  for (Tensor* t : {&ln1_mean, &ln1_rstd, &ln2_mean, &ln2_rstd})
    ensure_tensor(*t, {sp ? B * T / tp : B * T}, st, kAct);
  ensure_tensor(qkv, {B, T, 3 * C / tp}, dtype, kAct);
  if (seam != nullptr) {
    ensure_tensor(att, seam->saved_shape(B, T, H / tp, C / tp), seam->saved_dtype(dtype), kAct);
  } else {
    ensure_tensor(att, {B, H / tp, T, T}, dtype, kAct);
  }
  ensure_tensor(fch, {B, T, 4 * C / tp}, dtype, kAct);
  ensure_tensor(fch_gelu, {B, T, 4 * C / tp}, dtype, kAct);
}

void GptBlockActs::release() {
  AttentionSeam* keep = seam;
  BlockFeedForward* branch = ffn;
  const int branch_slot = ffn_slot;
  *this = GptBlockActs{};
  seam = keep;
  ffn = branch;
  ffn_slot = branch_slot;
}

std::size_t GptBlockActs::bytes(std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t H,
                                DType dtype, std::int64_t tp, bool sp) {
  // ln1, atty, res2, ln2: C each; qkv 3C; fch, fch_gelu 4C each: 15 C per token. Split by tp:
  // atty, qkv, fch, fch_gelu (12 C) and the H attention maps; by sp also ln1, res2, ln2 (3 C)
  // and the statistics.
  const std::int64_t whole = sp ? 3 * C / tp : 3 * C, stats = sp ? 4 * B * T / tp : 4 * B * T;
  const std::int64_t values = B * T * (whole + 12 * C / tp) + B * (H / tp) * T * T;
  return static_cast<std::size_t>(values) * dtype_size(dtype) +
         static_cast<std::size_t>(stats) * dtype_size(stats_dtype(dtype));
}

void GptBlockWorkspace::ensure(std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t H,
                               DType dtype, std::int64_t tp, bool sp, std::int64_t blocks) {
  constexpr MemCategory kWs = MemCategory::kOther;
  for (Tensor* t : {&proj, &dsmall}) ensure_tensor(*t, {B, T, C}, dtype, kWs);
  ensure_tensor(dres, sp ? Shape{1, B * T / tp, C} : Shape{B, T, C}, dtype, kWs);
  ensure_tensor(dbig, {B, T, 4 * C / tp}, dtype, kWs);
  ensure_tensor(datt, {B, H / tp, T, T}, dtype, kWs);
  if (sp) {
    ensure_tensor(gathered, {B, T, C}, dtype, kWs);
    ensure_tensor(dlocal, {1, B * T / tp, C}, dtype, kWs);
    ensure_tensor(replicated, {std::max<std::int64_t>(blocks, 1) * 6 * C + 2 * C}, dtype, kWs);
  }
}

void GptBlockWorkspace::release() { *this = GptBlockWorkspace{}; }

BlockLinears make_block_linears(const GptBlockWeights& w, const GptBlockWeights& g,
                                std::int64_t layer, BlockGemms* gemms, TensorParallelGroup* tp) {
  if (tp == nullptr) return make_linears<BlockLinears>(w, g, layer, gemms, Dense{});
  return make_linears<BlockLinears>(w, g, layer, gemms, FromGroup{*tp});
}

SpBlockLinears make_sp_block_linears(const GptBlockWeights& w, const GptBlockWeights& g,
                                     std::int64_t layer, BlockGemms* gemms,
                                     TensorParallelGroup& tp) {
  return make_linears<SpBlockLinears>(w, g, layer, gemms, FromGroup{tp});
}

void gpt_block_forward(const GptBlockWeights& w, const BlockLinears& l, std::int64_t heads,
                       const Tensor& x, GptBlockActs& a, Tensor* out, Tensor& proj) {
  Tensor qkv2d = rows2d(a.qkv), proj2d = rows2d(proj), fch2d = rows2d(a.fch);
  // Attention branch: res2 = x + c_proj(attention(c_attn(ln_1(x)))).
  layers::layernorm_forward(x, w.ln1_w, w.ln1_b, a.ln1, a.ln1_mean, a.ln1_rstd);  // [B, T, C]
  // qkv [B*T, 3C / tp], atty [B, T, C / tp], proj [B*T, C].
  l.attn->forward(rows2d(a.ln1), qkv2d);
  attention_forward(a, heads);
  l.attn_proj->forward(rows2d(a.atty), proj2d);
  layers::residual_forward(x, proj, a.res2);
  // MLP branch: out = res2 + c_proj(gelu(c_fc(ln_2(res2)))).
  layers::layernorm_forward(a.res2, w.ln2_w, w.ln2_b, a.ln2, a.ln2_mean, a.ln2_rstd);
  if (a.ffn != nullptr) {  // the branch in place of the MLP: out = res2 + branch(ln_2(res2))
    if (out == nullptr) return;
    a.ffn->forward(rows2d(a.ln2), proj2d, a.ffn_slot);
    layers::residual_forward(a.res2, proj, *out);
    return;
  }
  l.fc->forward(rows2d(a.ln2), fch2d);  // [B*T, 4C / tp]
  layers::gelu_forward(a.fch, a.fch_gelu);
  if (out == nullptr) return;
  l.fc_proj->forward(rows2d(a.fch_gelu), proj2d);
  layers::residual_forward(a.res2, proj, *out);
}

void gpt_block_forward_sp(const GptBlockWeights& w, const SpBlockLinears& l, std::int64_t heads,
                          const Tensor& x, GptBlockActs& a, Tensor* out, GptBlockWorkspace& ws) {
  Tensor qkv2d = rows2d(a.qkv), proj2d = rows2d(ws.proj), fch2d = rows2d(a.fch);
  // f-bar gathers the LayerNorm output's rows into ws.gathered before each column-parallel
  // layer; g-bar leaves this rank's rows of each row-parallel sum in ws.dlocal.
  Tensor gathered = rows2d(ws.gathered), mine = rows2d(ws.dlocal);
  layers::layernorm_forward(x, w.ln1_w, w.ln1_b, a.ln1, a.ln1_mean, a.ln1_rstd);
  l.attn->forward_sp(rows2d(a.ln1), gathered, qkv2d);
  attention_forward(a, heads);
  l.attn_proj->forward_sp(rows2d(a.atty), proj2d, mine);
  layers::residual_forward(x, ws.dlocal, a.res2);
  layers::layernorm_forward(a.res2, w.ln2_w, w.ln2_b, a.ln2, a.ln2_mean, a.ln2_rstd);
  l.fc->forward_sp(rows2d(a.ln2), gathered, fch2d);
  layers::gelu_forward(a.fch, a.fch_gelu);
  if (out == nullptr) return;
  l.fc_proj->forward_sp(rows2d(a.fch_gelu), proj2d, mine);
  layers::residual_forward(a.res2, ws.dlocal, *out);
}

// Sequence-parallel backward: on entry ws.dres [1, N / tp, C] holds d(out) of this rank's rows;
// on return d(x) of them. g-bar's backward gathers the rows of the gradient before each
// row-parallel layer, f-bar's reduce-scatters the partial LayerNorm-output gradients after
// each column-parallel one, and the LayerNorm outputs are gathered again for the weight
// gradients (kept as rows only: the region's activations are divided by tp). The replicated
// parameters' gradients come from this rank's rows alone: one sum over tp completes them,
// here (sum_now) or, for all of a stage's blocks at once, in the caller.
void gpt_block_backward_sp(const GptBlockWeights& w, GptBlockWeights& g, SpBlockLinears& l,
                           std::int64_t heads, const Tensor& x, const GptBlockActs& a,
                           GptBlockWorkspace& ws, bool accumulate, TensorParallelGroup& tp,
                           Tensor& parts, bool sum_now) {
  const bool acc = accumulate;
  const std::int64_t C = x.dim(2);
  Tensor dres = rows2d(ws.dres), dsmall = rows2d(ws.dsmall), dbig = rows2d(ws.dbig);
  Tensor dqkv = ws.dbig.flat_slice(0, a.qkv.numel()).view(a.qkv.shape());
  Tensor datty = ws.dsmall.flat_slice(0, a.atty.numel()).view(a.atty.shape());
  Tensor datty2d = rows2d(datty);
  // [ln_1 w | ln_1 b | attn.c_proj b | ln_2 w | ln_2 b | mlp.c_proj b], this rank's rows' part:
  // the row-parallel biases act on the rows, their gradients are parts too.
  if (parts.numel() != 6 * C) {
    throw std::invalid_argument("gpt_block_backward_sp: parts holds " +
                                std::to_string(parts.numel()) + " elements, not 6 C = " +
                                std::to_string(6 * C));
  }
  std::vector<Tensor> part;
  for (std::int64_t k = 0; k < 6; ++k) part.push_back(parts.flat_slice(k * C, C));
  Tensor gathered = rows2d(ws.gathered), mine = rows2d(ws.dlocal);
  // MLP branch.
  l.fc_proj->backward_sp(rows2d(a.fch_gelu), dres, gathered, dbig, part[5], acc);
  layers::gelu_backward(a.fch, ws.dbig, ws.dbig);
  l.fc->backward_sp(rows2d(a.ln2), gathered, dbig, dsmall, mine, acc);
  layers::layernorm_backward(ws.dlocal, a.res2, w.ln2_w, a.ln2_mean, a.ln2_rstd, ws.dres,
                             part[3], part[4]);  // dres = d(res2)
  // Attention branch.
  l.attn_proj->backward_sp(rows2d(a.atty), dres, gathered, datty2d, part[2], acc);
  attention_backward(datty, a, heads, dqkv, ws.datt);
  l.attn->backward_sp(rows2d(a.ln1), gathered, rows2d(dqkv), dsmall, mine, acc);
  layers::layernorm_backward(ws.dlocal, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, ws.dres, part[0],
                             part[1]);  // dres = d(x)
  if (!sum_now) return;
  tp.sum_replicated_grads(parts);
  add_sp_replicated_grads(parts, g, acc);
}

void add_replicated(const Tensor& summed, Tensor& g, bool accumulate) {
  if (accumulate) {
    ops::axpy(1.0, summed, g);
  } else {
    g.copy_from(summed);
  }
}

void add_sp_replicated_grads(const Tensor& summed, GptBlockWeights& g, bool accumulate) {
  Tensor* whole[6] = {&g.ln1_w, &g.ln1_b, &g.attn_proj_b, &g.ln2_w, &g.ln2_b, &g.fc_proj_b};
  const std::int64_t C = g.ln1_w.numel();
  if (summed.numel() != 6 * C) {
    throw std::invalid_argument("add_sp_replicated_grads: " + std::to_string(summed.numel()) +
                                " elements, not 6 C = " + std::to_string(6 * C));
  }
  for (std::int64_t k = 0; k < 6; ++k) {
    add_replicated(summed.flat_slice(k * C, C), *whole[k], accumulate);
  }
}

void gpt_block_backward(const GptBlockWeights& w, GptBlockWeights& g, BlockLinears& l,
                        std::int64_t heads, const Tensor& x, GptBlockActs& a,
                        GptBlockWorkspace& ws, bool accumulate) {
  // B, then W at once: d(out) kept in proj, which nothing reads during a backward.
  gpt_block_backward_input(w, g, l, heads, x, a, ws, ws.proj, accumulate);
  gpt_block_backward_weight(l, a, ws.proj, accumulate);
}

// B: the chain of input gradients, d(out) -> d(x). Each GEMM's dx = dy w^T here; its dy is kept
// for W in a buffer whose activation B no longer needs: d(fch) over fch (read by GELU's
// backward only), d(res2) over res2 (read by ln_2's backward only), d(qkv) over qkv (read by
// attention's backward only), d(out) in the caller's out_grad. So a micro-batch waiting for
// its W holds no more than it held after its forward (Qi et al. 2023: the W pass needs the
// layer inputs and output gradients, not the rest of the activations).
void gpt_block_backward_input(const GptBlockWeights& w, GptBlockWeights& g,
                              const BlockLinears& l, std::int64_t heads, const Tensor& x,
                              GptBlockActs& a, GptBlockWorkspace& ws, Tensor& out_grad,
                              bool accumulate) {
  const bool acc = accumulate;
  Tensor dres = rows2d(ws.dres), dsmall = rows2d(ws.dsmall), dbig = rows2d(ws.dbig);
  // dqkv [B, T, 3C] borrows dbig's storage: d(fch) is dead by the time dqkv is written.
  Tensor dqkv = ws.dbig.flat_slice(0, a.qkv.numel()).view(a.qkv.shape());
  // d(atty) [B, T, C / tp] in dsmall's storage (all of it when tp = 1).
  Tensor datty = ws.dsmall.flat_slice(0, a.atty.numel()).view(a.atty.shape());
  Tensor datty2d = rows2d(datty);
  // MLP branch. dres = d(out) flows to res2 unchanged (skip path); ln_2 adds its share.
  if (a.ffn != nullptr) {
    // The branch's backward is whole (its weight gradients too): W has no MLP products left.
    a.ffn->backward(dres, dsmall, accumulate, a.ffn_slot);
  } else {
    out_grad.copy_from(ws.dres);  // W's dy of mlp.c_proj
    // d(fch_gelu) = d(out) w^T (g's backward: the identity).
    l.fc_proj->backward_input(dres, dbig);
    layers::gelu_backward(a.fch, ws.dbig, ws.dbig);  // d(fch) [B, T, 4C]
    a.fch.copy_from(ws.dbig);                        // W's dy of mlp.c_fc
    // d(ln2); with tp f's backward sums each rank's share (its c_fc columns gave a partial one).
    l.fc->backward_input(dbig, dsmall);
  }
  // The LayerNorms' weight gradients (2 C each, O(B T C)) are taken here, where their inputs
  // are: W keeps the GEMMs' weight gradients, the work that fills the bubble.
  layers::layernorm_backward(ws.dsmall, a.res2, w.ln2_w, a.ln2_mean, a.ln2_rstd, ws.dres, g.ln2_w,
                             g.ln2_b, acc);  // dres = d(res2)
  a.res2.copy_from(ws.dres);                 // W's dy of attn.c_proj
  // Attention branch. dres flows to x unchanged; ln_1 adds its share.
  l.attn_proj->backward_input(dres, datty2d);
  attention_backward(datty, a, heads, dqkv, ws.datt);
  a.qkv.copy_from(dqkv);  // W's dy of attn.c_attn
  // d(ln1); with tp the sum of each rank's heads' partial one.
  l.attn->backward_input(rows2d(dqkv), dsmall);
  layers::layernorm_backward(ws.dsmall, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, ws.dres, g.ln1_w,
                             g.ln1_b, acc);  // dres = d(x)
}

// W: dw (+)= x^T dy and db (+)= sum_rows(dy) of the four GEMMs, from the layer inputs (fch_gelu,
// ln2, atty, ln1) and the output gradients B kept: the two products the joint backward takes
// after its dx, with the same operands, hence the same rounding.
void gpt_block_backward_weight(BlockLinears& l, const GptBlockActs& a, const Tensor& out_grad,
                               bool accumulate) {
  // mlp.c_proj: dy = d(out); mlp.c_fc: d(fch); attn.c_proj: d(res2); attn.c_attn: d(qkv).
  // A block whose branch replaced the MLP has no MLP products (the branch's ran in B).
  if (a.ffn == nullptr) {
    l.fc_proj->backward_weight(rows2d(a.fch_gelu), rows2d(out_grad), accumulate);
    l.fc->backward_weight(rows2d(a.ln2), rows2d(a.fch), accumulate);
  }
  l.attn_proj->backward_weight(rows2d(a.atty), rows2d(a.res2), accumulate);
  l.attn->backward_weight(rows2d(a.ln1), rows2d(a.qkv), accumulate);
}

}  // namespace mixpar
