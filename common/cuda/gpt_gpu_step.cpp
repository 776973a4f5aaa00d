// GpuGptModel's forward and backward: GptModel::forward / backward and gpt_block_forward /
// gpt_block_backward (common/model) with every layer replaced by its GPU kernel, in the same
// order and with the same buffer reuse (dqkv borrows dbig, dlogits overwrite the logits).
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/gpt_gpu.h"
#include "util/errors.h"

namespace mixpar::cuda {

namespace {

// [B, T, n] as the [B*T, n] the linear layers take (a view).
DeviceTensor rows2d(const DeviceTensor& t) { return t.view({t.dim(0) * t.dim(1), t.dim(2)}); }

void check_batch(const GptConfig& c, std::span<const std::int32_t> tokens,
                 std::span<const std::int32_t> targets, std::int64_t B, std::int64_t T) {
  if (B <= 0 || T <= 0 || T > c.n_positions) {
    throw InputError("GpuGptModel: batch B = " + std::to_string(B) + ", T = " + std::to_string(T) +
                     " needs B >= 1 and 1 <= T <= n_positions = " + std::to_string(c.n_positions));
  }
  const auto n = static_cast<std::size_t>(B * T);
  if (tokens.size() != n || (!targets.empty() && targets.size() != n)) {
    throw InputError("GpuGptModel: " + std::to_string(tokens.size()) + " tokens and " +
                     std::to_string(targets.size()) + " targets for B*T = " + std::to_string(n));
  }
  for (std::span<const std::int32_t> ids : {tokens, targets}) {
    for (std::int32_t id : ids) {
      if (id < 0 || id >= c.vocab_size) {
        throw InputError("GpuGptModel: token id " + std::to_string(id) + " is outside [0, " +
                         std::to_string(c.vocab_size) + ")");
      }
    }
  }
}

}  // namespace

void GpuGptModel::ensure_buffers(std::int64_t B, std::int64_t T) {
  const std::int64_t C = config_.n_embd, H = config_.n_head, L = config_.n_layer;
  const DType dt = options_.dtype, f32 = DType::kF32;
  constexpr MemCategory kAct = MemCategory::kActivations, kWs = MemCategory::kOther;
  const bool fused = options_.attention == GpuAttention::kFused;
  resid_.resize(static_cast<std::size_t>(L + 1));
  for (DeviceTensor& t : resid_) ensure_device_tensor(t, {B, T, C}, dt, kAct);
  acts_.resize(static_cast<std::size_t>(L));
  for (BlockActs& a : acts_) {
    for (DeviceTensor* t : {&a.ln1, &a.atty, &a.res2, &a.ln2}) {
      ensure_device_tensor(*t, {B, T, C}, dt, kAct);
    }
    for (DeviceTensor* t : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd}) {
      ensure_device_tensor(*t, {B * T}, f32, kAct);
    }
    ensure_device_tensor(a.qkv, {B, T, 3 * C}, dt, kAct);
    ensure_device_tensor(a.fch, {B, T, 4 * C}, dt, kAct);
    ensure_device_tensor(a.fch_gelu, {B, T, 4 * C}, dt, kAct);
    if (fused) {
      a.att = DeviceTensor();
      ensure_device_tensor(a.lse, {B, H, T}, f32, kAct);
    } else {
      a.lse = DeviceTensor();
      ensure_device_tensor(a.att, {B, H, T, T}, dt, kAct);
    }
  }
  ensure_device_tensor(lnf_, {B, T, C}, dt, kAct);
  ensure_device_tensor(lnf_mean_, {B * T}, f32, kAct);
  ensure_device_tensor(lnf_rstd_, {B * T}, f32, kAct);
  ensure_device_tensor(logits_, {B * T, vocab_padded_}, dt, kAct);
  ensure_device_tensor(lse_, {B * T}, f32, kAct);
  ensure_device_tensor(target_logit_, {B * T}, f32, kAct);
  for (DeviceTensor* t : {&proj_, &dres_, &dsmall_}) ensure_device_tensor(*t, {B, T, C}, dt, kWs);
  ensure_device_tensor(dbig_, {B, T, 4 * C}, dt, kWs);
}

void GpuGptModel::block_forward(std::int64_t layer, const DeviceTensor& x, DeviceTensor& out) {
  const BlockWeights& w = w_[static_cast<std::size_t>(layer)];
  BlockActs& a = acts_[static_cast<std::size_t>(layer)];
  cudaStream_t s = stream_.get();
  const LinearOptions lo = linear_options();
  DeviceTensor qkv2 = rows2d(a.qkv), proj2 = rows2d(proj_), fch2 = rows2d(a.fch);
  DeviceTensor gelu2 = rows2d(a.fch_gelu);
  // Attention branch: res2 = x + c_proj(attention(c_attn(ln_1(x)))).
  {
    TimedRegion t(timer_, "layernorm fwd");
    layernorm_forward(x, w.ln1_w, w.ln1_b, a.ln1, a.ln1_mean, a.ln1_rstd, s);
  }
  {
    TimedRegion t(timer_, "gemm attn.c_attn fwd");
    linear_forward(blas_, rows2d(a.ln1), w.attn_w, &w.attn_b, qkv2, lo);
  }
  {
    TimedRegion t(timer_, "attention fwd");
    if (options_.attention == GpuAttention::kFused) {
      flash_attention_forward(a.qkv, config_.n_head, a.atty, a.lse, s);
    } else {
      attention_forward(blas_, a.qkv, config_.n_head, a.atty, a.att);
    }
  }
  {
    TimedRegion t(timer_, "gemm attn.c_proj fwd");
    linear_forward(blas_, rows2d(a.atty), w.proj_w, &w.proj_b, proj2, lo);
  }
  {
    TimedRegion t(timer_, "residual fwd");
    residual_forward(x, proj_, a.res2, s);
  }
  // MLP branch: out = res2 + c_proj(gelu(c_fc(ln_2(res2)))).
  {
    TimedRegion t(timer_, "layernorm fwd");
    layernorm_forward(a.res2, w.ln2_w, w.ln2_b, a.ln2, a.ln2_mean, a.ln2_rstd, s);
  }
  {
    TimedRegion t(timer_, "gemm mlp.c_fc + gelu fwd");
    linear_gelu_forward(blas_, rows2d(a.ln2), w.fc_w, w.fc_b, fch2, gelu2, lo);
  }
  {
    TimedRegion t(timer_, "gemm mlp.c_proj fwd");
    linear_forward(blas_, gelu2, w.fcproj_w, &w.fcproj_b, proj2, lo);
  }
  TimedRegion t(timer_, "residual fwd");
  residual_forward(a.res2, proj_, out, s);
}

double GpuGptModel::forward(std::span<const std::int32_t> tokens,
                            std::span<const std::int32_t> targets, std::int64_t B,
                            std::int64_t T) {
  check_batch(config_, tokens, targets, B, T);
  tokens_.assign(tokens.begin(), tokens.end());
  targets_.assign(targets.begin(), targets.end());
  B_ = B;
  T_ = T;
  ready_for_backward_ = false;
  ensure_buffers(B, T);
  cudaStream_t s = stream_.get();
  d_tokens_ = DeviceIds::upload(tokens_, s);
  d_targets_ = targets_.empty() ? DeviceIds() : DeviceIds::upload(targets_, s);
  const DeviceTensor wte = view(params_flat_, "wte.weight");  // [Vp, C]
  {
    TimedRegion t(timer_, "embedding fwd");
    embedding_forward(d_tokens_, wte, view(params_flat_, "wpe.weight"), resid_[0], s);
  }
  for (std::int64_t l = 0; l < config_.n_layer; ++l) {
    const auto i = static_cast<std::size_t>(l);
    block_forward(l, resid_[i], resid_[i + 1]);
  }
  {
    TimedRegion t(timer_, "layernorm fwd");
    layernorm_forward(resid_.back(), view(params_flat_, "ln_f.weight"),
                      view(params_flat_, "ln_f.bias"), lnf_, lnf_mean_, lnf_rstd_, s);
  }
  {
    TimedRegion t(timer_, "gemm lm head fwd");
    matmul(blas_, rows2d(lnf_), wte, logits_, false, true, 1.0f, 0.0f, options_.math);
  }
  if (targets_.empty()) return std::numeric_limits<double>::quiet_NaN();
  ready_for_backward_ = true;
  DeviceTensor loss = scalars_.flat_slice(1, 1);
  {
    TimedRegion t(timer_, "crossentropy fwd");
    crossentropy_forward(logits_, config_.vocab_size, d_targets_, lse_, target_logit_, s);
    crossentropy_mean(lse_, target_logit_, loss, s);
  }
  double value = 0;
  MIXPAR_CUDA_CHECK(
      cudaMemcpyAsync(&value, loss.f64(), sizeof(double), cudaMemcpyDeviceToHost, s));
  stream_.synchronize();
  return value;
}

Tensor GpuGptModel::logits_to_host() const {
  if (!logits_.defined()) throw std::logic_error("GpuGptModel::logits_to_host before forward");
  const Tensor padded = logits_.to_host(stream_.get());  // [B*T, Vp]
  const std::int64_t V = config_.vocab_size, Vp = vocab_padded_;
  Tensor out = Tensor::empty({B_, T_, V}, padded.dtype());
  const std::size_t row = static_cast<std::size_t>(V) * dtype_size(padded.dtype());
  for (std::int64_t r = 0; r < B_ * T_; ++r) {
    std::memcpy(static_cast<char*>(out.data()) + static_cast<std::size_t>(r) * row,
                static_cast<const char*>(padded.data()) +
                    static_cast<std::size_t>(r * Vp) * dtype_size(padded.dtype()),
                row);
  }
  return out;
}

void GpuGptModel::backward(float loss_scale, bool accumulate) {
  if (!ready_for_backward_) {
    throw std::logic_error(
        "GpuGptModel::backward needs a forward with targets since the last backward");
  }
  ready_for_backward_ = false;  // d(logits) now overwrite the logits
  backward_head(loss_scale, accumulate);
  for (std::int64_t l = config_.n_layer - 1; l >= 0; --l) {
    block_backward(l, resid_[static_cast<std::size_t>(l)], accumulate);
  }
  TimedRegion t(timer_, "embedding bwd");
  cudaStream_t s = stream_.get();
  DeviceTensor dwte = view(grads_flat_, "wte.weight"), dwpe = view(grads_flat_, "wpe.weight");
  if (!accumulate) dwpe.zero(s);
  // dwte already holds the LM head's gradient: the embedding's share is always added.
  const EmbeddingBuckets buckets = make_embedding_buckets(tokens_, s);
  embedding_backward(buckets, dres_, dwte, &dwpe, /*accumulate=*/true, s);
}

void GpuGptModel::backward_head(float loss_scale, bool accumulate) {
  cudaStream_t s = stream_.get();
  {
    TimedRegion t(timer_, "crossentropy bwd");
    crossentropy_backward(logits_, config_.vocab_size, d_targets_, lse_, loss_scale, logits_, s);
  }
  const DeviceTensor wte = view(params_flat_, "wte.weight");
  DeviceTensor dwte = view(grads_flat_, "wte.weight"), dlnf = rows2d(dsmall_);
  {
    TimedRegion t(timer_, "gemm lm head bwd");
    matmul(blas_, logits_, wte, dlnf, false, false, 1.0f, 0.0f, options_.math);  // dlogits wte
    matmul(blas_, logits_, rows2d(lnf_), dwte, true, false, 1.0f, accumulate ? 1.0f : 0.0f,
           options_.math);  // d(wte) [Vp, C] (+)= dlogits^T lnf
  }
  TimedRegion t(timer_, "layernorm bwd");
  dres_.zero(s);  // layernorm_backward adds into it
  DeviceTensor dw = view(grads_flat_, "ln_f.weight"), db = view(grads_flat_, "ln_f.bias");
  layernorm_backward(dsmall_, resid_.back(), view(params_flat_, "ln_f.weight"), lnf_mean_,
                     lnf_rstd_, dres_, dw, db, accumulate, s);
}

void GpuGptModel::mlp_backward(const BlockWeights& w, BlockWeights& g, BlockActs& a,
                               bool accumulate) {
  const LinearOptions lo = linear_options();
  DeviceTensor dres = rows2d(dres_), dsmall = rows2d(dsmall_), dbig = rows2d(dbig_);
  if (lo.fuse && !accumulate) {
    // d(fch) = gelu'(fch) * (dres c_proj^T) with c_fc's bias gradient in the same GEMM.
    {
      TimedRegion t(timer_, "gemm mlp.c_proj bwd");
      linear_backward_input_dgelu(blas_, w.fcproj_w, dres, rows2d(a.fch), dbig, &g.fc_b, false,
                                  lo);
      linear_backward(blas_, rows2d(a.fch_gelu), w.fcproj_w, dres, nullptr, g.fcproj_w,
                      &g.fcproj_b, false, lo);
    }
    TimedRegion t(timer_, "gemm mlp.c_fc bwd");
    linear_backward(blas_, rows2d(a.ln2), w.fc_w, dbig, &dsmall, g.fc_w, nullptr, false, lo);
    return;
  }
  {
    TimedRegion t(timer_, "gemm mlp.c_proj bwd");
    linear_backward(blas_, rows2d(a.fch_gelu), w.fcproj_w, dres, &dbig, g.fcproj_w, &g.fcproj_b,
                    accumulate, lo);
  }
  {
    TimedRegion t(timer_, "gelu bwd");
    gelu_backward(a.fch, dbig_, dbig_, stream_.get());
  }
  TimedRegion t(timer_, "gemm mlp.c_fc bwd");
  linear_backward(blas_, rows2d(a.ln2), w.fc_w, dbig, &dsmall, g.fc_w, &g.fc_b, accumulate, lo);
}

void GpuGptModel::block_backward(std::int64_t layer, const DeviceTensor& x, bool accumulate) {
  const auto i = static_cast<std::size_t>(layer);
  const BlockWeights& w = w_[i];
  BlockWeights& g = dw_[i];
  BlockActs& a = acts_[i];
  cudaStream_t s = stream_.get();
  const LinearOptions lo = linear_options();
  // MLP branch. dres = d(out) flows to res2 unchanged (skip path); ln_2 adds its share.
  mlp_backward(w, g, a, accumulate);
  {
    TimedRegion t(timer_, "layernorm bwd");
    layernorm_backward(dsmall_, a.res2, w.ln2_w, a.ln2_mean, a.ln2_rstd, dres_, g.ln2_w, g.ln2_b,
                       accumulate, s);
  }
  // Attention branch. dres flows to x unchanged; ln_1 adds its share.
  DeviceTensor dres = rows2d(dres_), dsmall = rows2d(dsmall_);
  {
    TimedRegion t(timer_, "gemm attn.c_proj bwd");
    linear_backward(blas_, rows2d(a.atty), w.proj_w, dres, &dsmall, g.proj_w, &g.proj_b,
                    accumulate, lo);
  }
  // dqkv [B, T, 3C] borrows dbig's storage: d(fch) is dead by now.
  DeviceTensor dqkv = dbig_.flat_slice(0, a.qkv.numel()).view(a.qkv.shape());
  {
    TimedRegion t(timer_, "attention bwd");
    if (options_.attention == GpuAttention::kFused) {
      flash_attention_backward(dsmall_, a.qkv, a.atty, a.lse, config_.n_head, dqkv, s);
    } else {
      attention_backward(blas_, dsmall_, a.qkv, a.att, config_.n_head, dqkv);
    }
  }
  {
    TimedRegion t(timer_, "gemm attn.c_attn bwd");
    linear_backward(blas_, rows2d(a.ln1), w.attn_w, rows2d(dqkv), &dsmall, g.attn_w, &g.attn_b,
                    accumulate, lo);
  }
  TimedRegion t(timer_, "layernorm bwd");
  layernorm_backward(dsmall_, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, dres_, g.ln1_w, g.ln1_b,
                     accumulate, s);
}

}  // namespace mixpar::cuda
