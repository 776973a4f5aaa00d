// GptModel: the embedding, the stack of blocks (gpt_block.cpp), the final LayerNorm, the tied
// LM head and the loss, forward and backward, with activation recompute and buffer reuse.
#include "model/gpt.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/layers.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "util/errors.h"

namespace mixpar {
namespace {

// Context parallel: rows `positions` of a [P, C] table, and the scatter-add back (dst rows at
// positions += src rows, in row order: deterministic).
Tensor gather_rows(const Tensor& table, const std::vector<std::int64_t>& positions) {
  Tensor out = Tensor::empty({static_cast<std::int64_t>(positions.size()), table.dim(1)},
                             table.dtype());
  for (std::size_t i = 0; i < positions.size(); ++i) {
    Tensor row = out.rows(static_cast<std::int64_t>(i), 1);
    row.copy_from(table.rows(positions[i], 1));
  }
  return out;
}
void scatter_add_rows(const Tensor& src, const std::vector<std::int64_t>& positions, Tensor& dst) {
  for (std::size_t i = 0; i < positions.size(); ++i) {
    Tensor row = dst.rows(positions[i], 1);
    ops::axpy(1.0, src.rows(static_cast<std::int64_t>(i), 1), row);
  }
}

void check_dtype(DType dt) {
  if (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16 && dt != DType::kF64) {
    throw InputError("GptModel: working dtype " + std::string(dtype_name(dt)) +
                     " is not one of f32, f16, bf16, f64");
  }
}

// tokens may be empty on a stage without the embedding (need_tokens false).
void check_batch(const GptConfig& c, std::span<const std::int32_t> tokens,
                 std::span<const std::int32_t> targets, std::int64_t B, std::int64_t T,
                 bool need_tokens = true) {
  if (B <= 0 || T <= 0 || T > c.n_positions) {
    throw InputError("GptModel: batch B = " + std::to_string(B) + ", T = " + std::to_string(T) +
                     " needs B >= 1 and 1 <= T <= n_positions = " + std::to_string(c.n_positions));
  }
  const auto n = static_cast<std::size_t>(B * T);
  if ((need_tokens && tokens.size() != n) || (!targets.empty() && targets.size() != n)) {
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

// The stage with its end resolved: a default GptStage means the whole stack.
GptStage resolved(const GptConfig& c, GptStage s) {
  if (s.end_block < 0) s.end_block = c.n_layer;
  return s;
}

}  // namespace

GptModel::GptModel(GptConfig config, GptOptions options)
    : config_(config),
      options_(options),
      registry_(make_gpt2_registry(config_, options_.stage, options_.tp)) {
  check_dtype(options_.dtype);
  if (options_.tp.size > 1 && (options_.tp_ops == nullptr ||
                               options_.tp_ops->size() != options_.tp.size ||
                               options_.tp_ops->rank() != options_.tp.rank)) {
    throw std::invalid_argument("GptModel: tp rank " + std::to_string(options_.tp.rank) +
                                " of " + std::to_string(options_.tp.size) +
                                " needs the tp group's collectives (GptOptions::tp_ops)");
  }
  options_.stage = resolved(config_, options_.stage);
  if (options_.params == nullptr) {
    registry_.allocate(options_.dtype);
    registry_.initialize(options_.seed);
  } else {
    for (ParamEntry& e : registry_.entries()) {
      const ParamEntry& shared = options_.params->at(e.name);
      if (shared.shape != e.shape || shared.holding.split != e.holding.split ||
          shared.holding.shard != e.holding.shard || !shared.param.defined() ||
          shared.param.dtype() != options_.dtype) {
        throw std::invalid_argument("GptModel: the shared registry's " + e.name +
                                    " is not this stage's (shape, holding or dtype)");
      }
      e.param = shared.param;
      e.grad = shared.grad;
    }
  }
  if (options_.feed_forward != nullptr && (options_.recompute || sp())) {
    throw std::invalid_argument("GptModel: a feed-forward branch (GptOptions::feed_forward) "
                                "with recompute or sequence parallelism");
  }
  for (std::int64_t l = first_block(); l < options_.stage.end_block; ++l) {
    ffn_.push_back(options_.feed_forward ? options_.feed_forward->at(l) : nullptr);
    w_.push_back(gpt_block_params(registry_, l));
    dw_.push_back(gpt_block_grads(registry_, l));
    if (sp()) {
      sp_linears_.push_back(
          make_sp_block_linears(w_.back(), dw_.back(), l, options_.gemms, *tp()));
    } else {
      linears_.push_back(make_block_linears(w_.back(), dw_.back(), l, options_.gemms, tp()));
    }
  }
}

void GptModel::rebind_params() {
  for (std::int64_t l = first_block(); l < options_.stage.end_block; ++l) {
    const auto i = static_cast<std::size_t>(l - first_block());
    w_[i] = gpt_block_params(registry_, l);
    if (sp()) {
      sp_linears_[i].rebind(w_[i]);
    } else {
      linears_[i].rebind(w_[i]);
    }
  }
}

void GptModel::ensure_buffers(std::int64_t B, std::int64_t T) {
  const std::int64_t C = config_.n_embd, H = config_.n_head, V = vocab_shard();
  const std::int64_t tp = options_.tp.size;
  const DType dt = options_.dtype, st = stats_dtype(dt);
  constexpr MemCategory kAct = MemCategory::kActivations;
  const auto n = static_cast<std::size_t>(local_blocks());
  // Sequence parallel: the residual stream and the LayerNorms hold this rank's rows only.
  const Shape rows = sp() ? Shape{1, B * T / tp, C} : Shape{B, T, C};
  const std::int64_t nrows = sp() ? B * T / tp : B * T;
  cur().resid.resize(n + 1);
  for (Tensor& t : cur().resid) ensure_tensor(t, rows, dt, kAct);
  cur().acts.resize(options_.recompute ? std::min<std::size_t>(n, 1) : n);
  for (std::size_t i = 0; i < cur().acts.size(); ++i) {
    GptBlockActs& a = cur().acts[i];
    a.seam = options_.attention;
    a.ffn = ffn_[i];
    a.ffn_slot = slot_;
    a.ensure(B, T, C, H, dt, tp, sp());
  }
  if (options_.stage.is_last()) {  // the head's buffers: the last stage's only
    ensure_tensor(cur().lnf, rows, dt, kAct);
    ensure_tensor(cur().lnf_mean, {nrows}, st, kAct);
    ensure_tensor(cur().lnf_rstd, {nrows}, st, kAct);
    ensure_tensor(cur().logits, {B, T, V}, dt, kAct);
    ensure_tensor(cur().lse, {B * T}, st, kAct);
  }
  ws_.ensure(B, T, C, H, dt, tp, sp(), local_blocks());
}

GptBlockActs& GptModel::acts_of(std::int64_t layer) {
  return cur().acts[options_.recompute ? 0 : static_cast<std::size_t>(layer)];
}

void GptModel::select_slot(int slot) {
  if (slot < 0) throw std::invalid_argument("GptModel: slot " + std::to_string(slot));
  if (static_cast<std::size_t>(slot) >= slots_.size()) slots_.resize(std::size_t(slot) + 1);
  slot_ = slot;
}

void GptModel::Slot::release() {
  resid.clear();
  acts.clear();
  for (Tensor* t : {&lnf, &lnf_mean, &lnf_rstd, &logits, &lse}) *t = Tensor();
  ce_stats = {};
  ready_for_backward = false;
  weight_pending = false;
}

Tensor& GptModel::stage_input(int slot) {
  const auto i = static_cast<std::size_t>(slot);
  if (slot < 0 || i >= slots_.size() || slots_[i].resid.empty()) {
    throw std::logic_error("GptModel::stage_input before prepare(B, T) of slot " +
                           std::to_string(slot));
  }
  return slots_[i].resid.front();
}
const Tensor& GptModel::stage_output(int slot) const {
  const auto i = static_cast<std::size_t>(slot);
  if (slot < 0 || i >= slots_.size() || slots_[i].resid.empty()) {
    throw std::logic_error("GptModel::stage_output before forward of slot " +
                           std::to_string(slot));
  }
  return slots_[i].resid.back();
}

void GptModel::release_slot(int slot) {
  if (slot >= 0 && static_cast<std::size_t>(slot) < slots_.size()) {
    slots_[static_cast<std::size_t>(slot)].release();
  }
}
Tensor& GptModel::output_grad() {
  if (!ws_.dres.defined()) throw std::logic_error("GptModel::output_grad before prepare(B, T)");
  return ws_.dres;
}
const Tensor& GptModel::input_grad() const {
  if (!ws_.dres.defined()) throw std::logic_error("GptModel::input_grad before backward");
  return ws_.dres;
}

double GptModel::forward(std::span<const std::int32_t> tokens,
                         std::span<const std::int32_t> targets, std::int64_t B, std::int64_t T,
                         int slot) {
  const GptStage& stage = options_.stage;
  check_batch(config_, stage.is_first() ? tokens : std::span<const std::int32_t>(),
              stage.is_last() ? targets : std::span<const std::int32_t>(), B, T,
              stage.is_first());
  select_slot(slot);
  if (cur().weight_pending) {
    throw std::logic_error("GptModel::forward into slot " + std::to_string(slot) +
                           ", whose backward_weight has not run (it needs the slot's buffers)");
  }
  cur().tokens.assign(tokens.begin(), tokens.end());
  cur().targets.assign(targets.begin(), targets.end());
  cur().ready_for_backward = false;
  if (sp() && (B * T) % options_.tp.size != 0) {
    throw InputError("sequence parallel: B x T = " + std::to_string(B * T) +
                     " rows do not split over tp " + std::to_string(options_.tp.size));
  }
  ensure_buffers(B, T);
  if (stage.is_first()) {
    // Vocab parallel: each rank embeds the tokens of its rows (zeros for the others) and tp
    // rank 0 alone adds the positions; one all-reduce SUM completes every row.
    const bool positions = tp() == nullptr || options_.tp.rank == 0;
    // Sequence parallel: a reduce-scatter instead, leaving each rank its rows.
    Tensor& embedded = sp() ? ws_.proj : cur().resid[0];
    params_before(BlockParamHook::kEmbedding, BlockParamHook::Phase::kForward);
    // Context parallel: the rows' true positions' wpe rows (gathered, T of them).
    const Tensor wpe = options_.attention != nullptr && positions
                           ? gather_rows(param("wpe.weight"), options_.attention->positions(T))
                           : param("wpe.weight");
    layers::embedding_forward(cur().tokens, param("wte.weight"), vocab_begin(),
                              positions ? &wpe : nullptr, embedded);  // [B, T, C]
    if (sp()) {
      tp()->reduce_scatter_rows(embedded, cur().resid[0], "embedding");
    } else if (tp() != nullptr) {
      tp()->embedding_sum(cur().resid[0]);
    }
    params_after(BlockParamHook::kEmbedding, BlockParamHook::Phase::kForward);
  }
  for (std::int64_t l = 0; l < local_blocks(); ++l) {
    const auto i = static_cast<std::size_t>(l);
    params_before(first_block() + l, BlockParamHook::Phase::kForward);
    if (sp()) {
      gpt_block_forward_sp(w_[i], sp_linears_[i], local_heads(), cur().resid[i], acts_of(l),
                           &cur().resid[i + 1], ws_);
    } else {
      gpt_block_forward(w_[i], linears_[i], local_heads(), cur().resid[i], acts_of(l),
                        &cur().resid[i + 1], ws_.proj);
    }
    params_after(first_block() + l, BlockParamHook::Phase::kForward);
  }
  if (!stage.is_last()) {
    cur().ready_for_backward = true;  // from output_grad(), which the next stage sends back
    return std::numeric_limits<double>::quiet_NaN();
  }
  params_before(config_.n_layer, BlockParamHook::Phase::kForward);
  const Tensor& wte = param("wte.weight");
  layers::layernorm_forward(cur().resid.back(), param("ln_f.weight"), param("ln_f.bias"),
                            cur().lnf, cur().lnf_mean, cur().lnf_rstd);
  Tensor logits2d = rows2d(cur().logits);  // [B*T, V]
  // Sequence parallel: the head reads every row of ln_f's output, gathered (f-bar).
  if (sp()) tp()->all_gather_rows(cur().lnf, ws_.gathered, "head forward");
  const Tensor& lnf = sp() ? ws_.gathered : cur().lnf;
  ops::matmul(rows2d(lnf), wte, logits2d, false, true);  // lnf wte^T: the tied LM head
  if (tp() != nullptr) mask_vocab_padding(logits2d, config_.vocab_size - vocab_begin(), *tp());
  params_after(config_.n_layer, BlockParamHook::Phase::kForward);
  if (cur().targets.empty()) return std::numeric_limits<double>::quiet_NaN();
  cur().ready_for_backward = true;
  if (tp() != nullptr) {  // this rank's [B*T, V / tp] logits, never the whole row
    return vocab_parallel_loss(logits2d, cur().targets, vocab_begin(), *tp(), cur().ce_stats,
                               cur().lse);
  }
  // The two steps of crossentropy_forward, with statistics buffers kept between steps.
  layers::crossentropy_stats(logits2d, cur().targets, 0, cur().ce_stats);
  return layers::crossentropy_loss(cur().ce_stats, cur().lse);
}

void GptModel::backward(float loss_scale, bool accumulate, int slot) {
  select_slot(slot);
  if (!cur().ready_for_backward) {
    throw std::logic_error(
        "GptModel::backward needs a forward with targets since the last backward");
  }
  cur().ready_for_backward = false;  // d(logits) now overwrites the logits
  if (options_.stage.is_last()) {    // else: output_grad()
    params_before(config_.n_layer, BlockParamHook::Phase::kBackward);
    backward_head_input(loss_scale, accumulate);
    backward_head_weight(accumulate);
    params_after(config_.n_layer, BlockParamHook::Phase::kBackward);
  }
  backward_blocks(accumulate);
  if (options_.stage.is_first()) backward_embedding(ws_.dres, accumulate);
  release_after_backward();
}

void GptModel::check_split(const char* what) const {
  if (param_hook_ != nullptr) {
    throw std::invalid_argument(std::string("GptModel::") + what +
                                ": the split backward with a block parameter hook (ZeRO-3)");
  }
  if (options_.recompute || sp()) {
    throw std::invalid_argument(std::string("GptModel::") + what +
                                ": the split backward keeps each block's activations until W; "
                                "recompute and sequence parallelism share them between blocks");
  }
}

void GptModel::backward_input(float loss_scale, bool accumulate, int slot) {
  check_split("backward_input");
  select_slot(slot);
  if (!cur().ready_for_backward) {
    throw std::logic_error(
        "GptModel::backward_input needs a forward with targets since the last backward");
  }
  cur().ready_for_backward = false;
  if (options_.stage.is_last()) backward_head_input(loss_scale, accumulate);
  for (std::int64_t l = local_blocks() - 1; l >= 0; --l) {
    const auto i = static_cast<std::size_t>(l);
    // d(out) of block i is kept in its output resid[i + 1], which the blocks above have read.
    gpt_block_backward_input(w_[i], dw_[i], linears_[i], local_heads(), cur().resid[i],
                             acts_of(l), ws_, cur().resid[i + 1], accumulate);
  }
  // The embedding's W reads d(resid[0]); the workspace's copy is the next backward's.
  if (options_.stage.is_first()) cur().resid[0].copy_from(ws_.dres);
  cur().weight_pending = true;
}

void GptModel::backward_weight(bool accumulate, int slot) {
  check_split("backward_weight");
  select_slot(slot);
  if (!cur().weight_pending) {
    throw std::logic_error("GptModel::backward_weight of slot " + std::to_string(slot) +
                           " needs its backward_input first");
  }
  cur().weight_pending = false;
  if (options_.stage.is_last()) backward_head_weight(accumulate);
  for (std::int64_t l = local_blocks() - 1; l >= 0; --l) {
    const auto i = static_cast<std::size_t>(l);
    GptBlockActs& a = acts_of(l);
    gpt_block_backward_weight(linears_[i], a, cur().resid[i + 1], accumulate);
    report_ready(entry_index("h." + std::to_string(first_block() + l) + ".ln_1.weight"), 12);
    if (!options_.keep_buffers) a.release();
  }
  if (options_.stage.is_first()) backward_embedding(cur().resid[0], accumulate);
  release_after_backward();
}

void GptModel::release_after_backward() {
  if (options_.keep_buffers) return;
  cur().release();  // this micro-batch's activations; the workspace once none are held
  bool any_held = false;
  for (const Slot& sl : slots_) any_held = any_held || !sl.resid.empty();
  if (!any_held) ws_.release();
}

// B of the head: d(logits) in place, d(lnf) = dlogits wte, and ln_f's backward (its two
// weight gradients with it, where its inputs are).
void GptModel::backward_head_input(float loss_scale, bool accumulate) {
  Tensor logits2d = rows2d(cur().logits), dlnf = rows2d(ws_.dsmall);
  layers::crossentropy_backward(logits2d, cur().targets, vocab_begin(), cur().lse, loss_scale,
                                logits2d);  // in place; no communication
  ops::matmul(logits2d, param("wte.weight"), dlnf);  // d(lnf) [B*T, C] = dlogits wte
  if (sp()) {  // f-bar's backward: this rank's rows of the vocab shards' sum; lnf regathered
    tp()->reduce_scatter_rows(ws_.dsmall, ws_.dlocal, "head backward");
    tp()->all_gather_rows(cur().lnf, ws_.gathered, "head backward re-gather");
  } else if (tp() != nullptr) {
    tp()->head_backward(ws_.dsmall);  // the head's f: sum the vocab shards
  }
  ws_.dres.zero();  // layernorm_backward adds into it
  Tensor dw = grad("ln_f.weight"), db = grad("ln_f.bias");
  if (sp()) {  // ln_f's gradient from this rank's rows, summed over tp (now or with the blocks')
    Tensor part = ln_f_parts();
    const std::int64_t C = config_.n_embd;
    Tensor pw = part.flat_slice(0, C), pb = part.flat_slice(C, C);
    layers::layernorm_backward(ws_.dlocal, cur().resid.back(), param("ln_f.weight"),
                               cur().lnf_mean, cur().lnf_rstd, ws_.dres, pw, pb);
    if (!batch_sp_grads()) {
      tp()->sum_replicated_grads(part);
      add_ln_f_parts(part, accumulate);
    }
  } else {
    layers::layernorm_backward(ws_.dsmall, cur().resid.back(), param("ln_f.weight"),
                               cur().lnf_mean, cur().lnf_rstd, ws_.dres, dw, db, accumulate);
  }
}

// Sequence parallel: where ln_f's two partial gradients wait [2 C], after the blocks' [6 C each]
// when the sums are batched (GptBlockWorkspace::replicated).
Tensor GptModel::ln_f_parts() {
  const std::int64_t C = config_.n_embd;
  return ws_.replicated.flat_slice(batch_sp_grads() ? local_blocks() * 6 * C : 0, 2 * C);
}

// ln_f's gradients (+)= their tp sum [2 C].
void GptModel::add_ln_f_parts(const Tensor& summed, bool accumulate) {
  const std::int64_t C = config_.n_embd;
  Tensor dw = grad("ln_f.weight"), db = grad("ln_f.bias");
  add_replicated(summed.flat_slice(0, C), dw, accumulate);
  add_replicated(summed.flat_slice(C, C), db, accumulate);
}

// W of the head: d(wte) (+)= dlogits^T lnf, from the d(logits) B left in the slot's logits.
void GptModel::backward_head_weight(bool accumulate) {
  Tensor logits2d = rows2d(cur().logits);
  Tensor lnf2d = rows2d(sp() ? ws_.gathered : cur().lnf);
  Tensor dwte = grad("wte.weight");
  const bool add = accumulate || options_.wte_grad_shared;
  ops::matmul(logits2d, lnf2d, dwte, true, false, ops::Accumulation::kFP32, 1.0f,
              add ? 1.0f : 0.0f);  // d(wte) [V, C] (+)= dlogits^T lnf
  if (!batch_sp_grads()) report_ready(entry_index("ln_f.weight"), 2);  // else with the blocks'
  // A last stage without the embedding holds wte only as the head: final already.
  if (!options_.stage.is_first()) report_ready(entry_index("wte.weight"), 1);
}

void GptModel::backward_blocks(bool accumulate) {
  // Sequence parallel: each block's replicated gradients (its LayerNorms' and row-parallel
  // biases', from this rank's rows) need a sum over tp, 6 C values a block: a call each would
  // be local_blocks() latency-bound all-reduces of a few KiB. They wait instead, each block's
  // in its own 6 C of the workspace, for one all-reduce after the stage's last block: the same
  // sums and additions, so the same bits. (Megatron-LM coalesces them into one all-reduce too,
  // once a step after gradient accumulation, which sums in another order.) Not under a block
  // parameter hook (ZeRO-3), which hands each block's gradients on as soon as it is done.
  const bool batch_sp = batch_sp_grads();
  const std::int64_t parts_per_block = 6 * config_.n_embd;
  const auto parts_of = [&](std::int64_t l) {
    return ws_.replicated.flat_slice(batch_sp ? l * parts_per_block : 0, parts_per_block);
  };
  const auto report_block = [&](std::int64_t l) {  // the block's 12 parameters
    report_ready(entry_index("h." + std::to_string(first_block() + l) + ".ln_1.weight"), 12);
  };
  for (std::int64_t l = local_blocks() - 1; l >= 0; --l) {
    const auto i = static_cast<std::size_t>(l);
    GptBlockActs& a = acts_of(l);
    params_before(first_block() + l, BlockParamHook::Phase::kBackward);
    // Recompute: the same function on the same input gives bit-identical activations.
    if (sp()) {
      if (options_.recompute) {
        gpt_block_forward_sp(w_[i], sp_linears_[i], local_heads(), cur().resid[i], a, nullptr,
                             ws_);
      }
      Tensor parts = parts_of(l);
      gpt_block_backward_sp(w_[i], dw_[i], sp_linears_[i], local_heads(), cur().resid[i], a, ws_,
                            accumulate, *tp(), parts, /*sum_now=*/!batch_sp);
    } else {
      if (options_.recompute) {
        gpt_block_forward(w_[i], linears_[i], local_heads(), cur().resid[i], a, nullptr,
                          ws_.proj);
      }
      gpt_block_backward(w_[i], dw_[i], linears_[i], local_heads(), cur().resid[i], a, ws_,
                         accumulate);
    }
    params_after(first_block() + l, BlockParamHook::Phase::kBackward);
    if (!batch_sp) report_block(l);
    if (!options_.keep_buffers && !options_.recompute) a.release();  // the ledger falls here
  }
  if (batch_sp) {  // the last stage's ln_f parts wait after the blocks'
    const bool head = options_.stage.is_last();
    Tensor all = ws_.replicated.flat_slice(
        0, local_blocks() * parts_per_block + (head ? 2 * config_.n_embd : 0));
    if (all.numel() > 0) tp()->sum_replicated_grads(all);  // a stage of no blocks, no head
    if (head) {
      add_ln_f_parts(ln_f_parts(), accumulate);
      report_ready(entry_index("ln_f.weight"), 2);
    }
    for (std::int64_t l = local_blocks() - 1; l >= 0; --l) {
      add_sp_replicated_grads(parts_of(l), dw_[static_cast<std::size_t>(l)], accumulate);
      report_block(l);
    }
  }
}

// The embedding's gradients (a weight gradient only: W) from dx0 = d(resid[0]).
void GptModel::backward_embedding(const Tensor& dx0, bool accumulate) {
  Tensor dwte = grad("wte.weight"), dwpe = grad("wpe.weight");
  if (!accumulate) dwpe.zero();
  // On the whole model wte already holds the LM head's gradient: the embedding's share is
  // added. A first stage without the head holds the embedding's share alone (the last stage's
  // head gradient is summed in by the pipeline).
  const bool onto_head = options_.stage.is_last();
  if (!onto_head && !accumulate && !options_.wte_grad_shared) dwte.zero();
  // Sequence parallel: every row's gradient, gathered (the reduce-scatter's backward).
  if (sp()) tp()->all_gather_rows(dx0, ws_.gathered, "embedding backward");
  if (options_.attention != nullptr) {  // context parallel: each row's gradient to its position
    const std::int64_t T = (sp() ? ws_.gathered : dx0).dim(1);
    Tensor mine = Tensor::zeros({T, dwpe.dim(1)}, dwpe.dtype());
    layers::embedding_backward(cur().tokens, sp() ? ws_.gathered : dx0, vocab_begin(), dwte,
                               &mine, /*accumulate=*/true);
    scatter_add_rows(mine, options_.attention->positions(T), dwpe);
  } else {
    layers::embedding_backward(cur().tokens, sp() ? ws_.gathered : dx0, vocab_begin(), dwte,
                               &dwpe, /*accumulate=*/true);
  }
  report_ready(entry_index("wpe.weight"), 1);
  report_ready(entry_index("wte.weight"), 1);
}

void GptModel::report_ready(std::size_t first, std::size_t count) const {
  if (!grad_ready_) return;
  for (std::size_t i = first; i < first + count; ++i) grad_ready_(i);
}

std::size_t GptModel::entry_index(std::string_view name) const {
  return registry_.index_of(name);
}

void GptModel::release_buffers() {
  for (Slot& sl : slots_) sl.release();
  ws_.release();
}

}  // namespace mixpar
