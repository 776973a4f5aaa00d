// GptModel: the embedding, the stack of blocks (gpt_block.cpp), the final LayerNorm, the tied
// LM head and the loss, forward and backward, with activation recompute and buffer reuse.
#include "model/gpt.h"

#include <limits>
#include <stdexcept>
#include <string>

#include "model/layers.h"
#include "ops/matmul.h"
#include "util/errors.h"

namespace mixpar {
namespace {

void check_dtype(DType dt) {
  if (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16 && dt != DType::kF64) {
    throw InputError("GptModel: working dtype " + std::string(dtype_name(dt)) +
                     " is not one of f32, f16, bf16, f64");
  }
}

void check_batch(const GptConfig& c, std::span<const std::int32_t> tokens,
                 std::span<const std::int32_t> targets, std::int64_t B, std::int64_t T) {
  if (B <= 0 || T <= 0 || T > c.n_positions) {
    throw InputError("GptModel: batch B = " + std::to_string(B) + ", T = " + std::to_string(T) +
                     " needs B >= 1 and 1 <= T <= n_positions = " + std::to_string(c.n_positions));
  }
  const auto n = static_cast<std::size_t>(B * T);
  if (tokens.size() != n || (!targets.empty() && targets.size() != n)) {
    throw InputError("GptModel: " + std::to_string(tokens.size()) + " tokens and " +
                     std::to_string(targets.size()) + " targets for B*T = " + std::to_string(n));
  }
  for (std::span<const std::int32_t> ids : {tokens, targets}) {
    for (std::int32_t id : ids) {
      if (id < 0 || id >= c.vocab_size) {
        throw InputError("GptModel: token id " + std::to_string(id) + " is outside [0, " +
                         std::to_string(c.vocab_size) + ")");
      }
    }
  }
}

DType stats_dtype(DType working) { return working == DType::kF64 ? DType::kF64 : DType::kF32; }

Tensor rows2d(const Tensor& t) { return t.view({t.dim(0) * t.dim(1), t.dim(2)}); }

}  // namespace

GptModel::GptModel(GptConfig config, GptOptions options)
    : config_(config), options_(options), registry_(make_gpt2_registry(config_)) {
  check_dtype(options_.dtype);
  registry_.allocate(options_.dtype);
  registry_.initialize(options_.seed);
  for (std::int64_t l = 0; l < config_.n_layer; ++l) {
    w_.push_back(gpt_block_params(registry_, l));
    dw_.push_back(gpt_block_grads(registry_, l));
  }
}

void GptModel::ensure_buffers(std::int64_t B, std::int64_t T) {
  const std::int64_t C = config_.n_embd, H = config_.n_head, V = config_.vocab_size;
  const DType dt = options_.dtype, st = stats_dtype(dt);
  constexpr MemCategory kAct = MemCategory::kActivations;
  resid_.resize(static_cast<std::size_t>(config_.n_layer + 1));
  for (Tensor& t : resid_) ensure_tensor(t, {B, T, C}, dt, kAct);
  acts_.resize(options_.recompute ? 1 : static_cast<std::size_t>(config_.n_layer));
  for (GptBlockActs& a : acts_) a.ensure(B, T, C, H, dt);
  ensure_tensor(lnf_, {B, T, C}, dt, kAct);
  ensure_tensor(lnf_mean_, {B * T}, st, kAct);
  ensure_tensor(lnf_rstd_, {B * T}, st, kAct);
  ensure_tensor(logits_, {B, T, V}, dt, kAct);
  ensure_tensor(lse_, {B * T}, st, kAct);
  ws_.ensure(B, T, C, H, dt);
}

GptBlockActs& GptModel::acts_of(std::int64_t layer) {
  return acts_[options_.recompute ? 0 : static_cast<std::size_t>(layer)];
}

double GptModel::forward(std::span<const std::int32_t> tokens,
                         std::span<const std::int32_t> targets, std::int64_t B, std::int64_t T) {
  check_batch(config_, tokens, targets, B, T);
  tokens_.assign(tokens.begin(), tokens.end());
  targets_.assign(targets.begin(), targets.end());
  ready_for_backward_ = false;
  ensure_buffers(B, T);
  const Tensor& wte = param("wte.weight");
  layers::embedding_forward(tokens_, wte, 0, &param("wpe.weight"), resid_[0]);  // [B, T, C]
  for (std::int64_t l = 0; l < config_.n_layer; ++l) {
    const auto i = static_cast<std::size_t>(l);
    gpt_block_forward(w_[i], config_.n_head, resid_[i], acts_of(l), &resid_[i + 1], ws_.proj);
  }
  layers::layernorm_forward(resid_.back(), param("ln_f.weight"), param("ln_f.bias"), lnf_,
                            lnf_mean_, lnf_rstd_);
  Tensor logits2d = rows2d(logits_);                      // [B*T, V]
  ops::matmul(rows2d(lnf_), wte, logits2d, false, true);  // lnf wte^T: the tied LM head
  if (targets_.empty()) return std::numeric_limits<double>::quiet_NaN();
  ready_for_backward_ = true;
  // The two steps of crossentropy_forward, with statistics buffers kept between steps.
  layers::crossentropy_stats(logits2d, targets_, 0, ce_stats_);
  return layers::crossentropy_loss(ce_stats_, lse_);
}

void GptModel::backward(float loss_scale, bool accumulate) {
  if (!ready_for_backward_) {
    throw std::logic_error(
        "GptModel::backward needs a forward with targets since the last backward");
  }
  ready_for_backward_ = false;  // d(logits) now overwrites the logits
  backward_head(loss_scale, accumulate);
  backward_blocks(accumulate);
  backward_embedding(accumulate);
  if (!options_.keep_buffers) release_buffers();
}

void GptModel::backward_head(float loss_scale, bool accumulate) {
  Tensor logits2d = rows2d(logits_), dlnf = rows2d(ws_.dsmall), lnf2d = rows2d(lnf_);
  layers::crossentropy_backward(logits2d, targets_, 0, lse_, loss_scale, logits2d);  // in place
  Tensor dwte = grad("wte.weight");
  ops::matmul(logits2d, param("wte.weight"), dlnf);  // d(lnf) [B*T, C] = dlogits wte
  ops::matmul(logits2d, lnf2d, dwte, true, false, ops::Accumulation::kFP32, 1.0f,
              accumulate ? 1.0f : 0.0f);  // d(wte) [V, C] (+)= dlogits^T lnf
  ws_.dres.zero();                        // layernorm_backward adds into it
  Tensor dw = grad("ln_f.weight"), db = grad("ln_f.bias");
  layers::layernorm_backward(ws_.dsmall, resid_.back(), param("ln_f.weight"), lnf_mean_, lnf_rstd_,
                             ws_.dres, dw, db, accumulate);
  report_ready(entry_index("ln_f.weight"), 2);
}

void GptModel::backward_blocks(bool accumulate) {
  for (std::int64_t l = config_.n_layer - 1; l >= 0; --l) {
    const auto i = static_cast<std::size_t>(l);
    GptBlockActs& a = acts_of(l);
    // Recompute: the same function on the same input gives bit-identical activations.
    if (options_.recompute) {
      gpt_block_forward(w_[i], config_.n_head, resid_[i], a, nullptr, ws_.proj);
    }
    gpt_block_backward(w_[i], dw_[i], config_.n_head, resid_[i], a, ws_, accumulate);
    report_ready(entry_index("h." + std::to_string(l) + ".ln_1.weight"), 12);  // the block's 12
    if (!options_.keep_buffers && !options_.recompute) a.release();  // the ledger falls here
  }
}

void GptModel::backward_embedding(bool accumulate) {
  Tensor dwte = grad("wte.weight"), dwpe = grad("wpe.weight");
  if (!accumulate) dwpe.zero();
  // wte already holds the LM head's gradient: the embedding's share is always added.
  layers::embedding_backward(tokens_, ws_.dres, 0, dwte, &dwpe, /*accumulate=*/true);
  report_ready(entry_index("wpe.weight"), 1);
  report_ready(entry_index("wte.weight"), 1);
}

void GptModel::report_ready(std::size_t first, std::size_t count) const {
  if (!grad_ready_) return;
  for (std::size_t i = first; i < first + count; ++i) grad_ready_(i);
}

std::size_t GptModel::entry_index(std::string_view name) const {
  return static_cast<std::size_t>(&registry_.at(name) - registry_.entries().data());
}

void GptModel::release_buffers() {
  resid_.clear();
  acts_.clear();
  for (Tensor* t : {&lnf_, &lnf_mean_, &lnf_rstd_, &logits_, &lse_}) *t = Tensor();
  ce_stats_ = {};
  ws_.release();
  ready_for_backward_ = false;
}

}  // namespace mixpar
