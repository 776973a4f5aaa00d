#include "moe_blocks.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "ch09_expert_parallel/aux_loss_scale.h"
#include "ch09_expert_parallel/load_balance.h"
#include "ops/elementwise.h"
#include "parallel/count_once.h"

namespace mixpar::ch08 {
namespace {

// The layer's sizes and seed are the model's: GPT-2's MLP shape (H = 4 C) for every expert.
ch09::MoeConfig layer_config(const TrainerConfig& c, std::int64_t layer) {
  ch09::MoeConfig m = c.moe;
  m.d_model = c.model.n_embd;
  m.d_hidden = 4 * c.model.n_embd;
  // Each block's router and experts from their own Philox streams (ch09 experts.h draws
  // expert e from stream 1000 + e of this seed): the block's index keeps the blocks apart.
  m.seed = c.seed * 1000003ULL + static_cast<std::uint64_t>(layer);
  // The experts compute in the run's dtype, as the dense MLP they replace; the router in FP32
  // whatever it is: top-k is a discontinuous choice on logit differences a 16-bit rounding
  // erases, and the gates and the balance losses inherit its error (ch09 router.h, README).
  m.dtype = c.dtype;
  return m;
}

std::uint64_t sent(const std::unique_ptr<Communicator>& c) {
  return c ? c->traffic().total().bytes_sent : 0;
}

}  // namespace

// One MoE block's branch: the layer, and the step's sums of what its forwards measured.
class MoeBlocks::Branch final : public BlockFeedForward {
 public:
  Branch(const ch09::MoeConfig& c, ch09::MoeParallel par, MoeBlocks* owner, std::size_t index)
      : layer(c, par), owner_(owner), index_(index) {
    reset();
  }

  void forward(const Tensor& x, Tensor& y, int slot) override {
    // ZeRO-3: the experts whole for this forward only (gathered over edp, released after).
    owner_->gather_block(index_);
    Tensor out = layer.forward(x, slot);
    owner_->release_block(index_);
    // Rounded once into the working dtype, overflowing to inf as the dense MLP's output does
    // (the fp16 scaler must see it).
    y.copy_from(out, Saturation::kNoSat);
    const ch09::MoeStats& s = layer.stats();
    for (std::size_t e = 0; e < counts.size(); ++e) counts[e] += s.balance.counts[e];
    assignments += s.assignments;
    dropped += s.dropped;
    expert_rows += s.expert_rows;
    aux_loss += s.aux_loss;
    z_loss += s.z_loss;
    ++forwards;
    // The all-to-all's bytes by the formula: the counts (El FP64 per other rank), then each
    // row this rank sends to or receives from another rank crosses twice in the forward
    // (dispatch, return) and twice in the backward, C FP32 values each.
    const int ep = layer.ep_size(), El = layer.config().n_experts / ep;
    const int first = layer.experts().first;
    std::int64_t own = 0, to_others = 0;
    for (int e = 0; e < layer.config().n_experts; ++e) {
      const bool mine = e >= first && e < first + El;
      (mine ? own : to_others) += s.kept[std::size_t(e)];
    }
    if (ep > 1) {
      a2a_formula += 8.0 * (ep - 1) * El +
                     4.0 * 2 * double(layer.config().d_model) * double(to_others + s.expert_rows - own);
    }
  }
  void backward(const Tensor& dy, Tensor& dx, bool accumulate, int slot) override {
    ch09::MoeBackwardOptions o;
    o.aux_seed = aux_seed;
    o.z_seed = z_seed;
    o.accumulate = accumulate;
    owner_->gather_block(index_);
    owner_->restore_block_grads(index_);
    // A 16-bit dy widened (exactly) for the layer, which takes FP32.
    Tensor d = layer.backward(dy.dtype() == DType::kF32 ? dy : dy.to(DType::kF32), o, slot);
    owner_->release_block(index_);
    dx.copy_from(d, Saturation::kNoSat);
  }
  void reset() {
    counts.assign(static_cast<std::size_t>(layer.config().n_experts), 0.0);
    assignments = dropped = expert_rows = 0;
    aux_loss = z_loss = a2a_formula = 0;
    forwards = 0;
  }

  ch09::MoeLayer layer;
  float aux_seed = 0, z_seed = 0;
  std::vector<double> counts;  // [E] the step's choices, reduced over dp x cp
  std::int64_t assignments = 0, dropped = 0, expert_rows = 0;  // this rank's
  double aux_loss = 0, z_loss = 0, a2a_formula = 0;
  int forwards = 0;

 private:
  MoeBlocks* owner_;
  std::size_t index_;  // this block's place among the MoE blocks
};

bool MoeBlocks::is_moe_block(const TrainerConfig& c, std::int64_t layer) {
  return c.uses_moe() && (layer + 1) % c.moe_every == 0;
}

MoeBlocks::MoeBlocks(const TrainerConfig& c, Communicator* world, const DeviceMesh* mesh,
                     const std::vector<std::int64_t>& model_blocks, CommClock* clock)
    : config_(c) {
  if (!c.uses_moe()) throw std::logic_error("MoeBlocks without --n-experts");
  if (world != nullptr && mesh != nullptr) {
    groups_ = ch09::split_expert_groups(*world, *mesh, c.ep);
    if (mesh->size("pp") > 1) {  // the stages of this rank's pipeline
      pp_ = world->split(mesh->group_index(world->rank(), {"pp"}), world->rank());
    }
    if (clock != nullptr) {  // the same bits and bytes, their seconds in the grid's clock
      const auto timed = [&](std::unique_ptr<Communicator>& g, const char* name) {
        if (g) g = std::make_unique<TimedCommunicator>(std::move(g), *clock, name);
      };
      timed(groups_.ep, "ep");
      timed(groups_.edp, "edp");
      timed(groups_.dense, "dp.moe");
      timed(pp_, "pp.moe");
    }
    // With tp every tp rank of a place runs the same MoE layer on the same tokens (the
    // blocks' ln_2 output is whole there): its tensors are replicated over tp too, and tp
    // rank 0 counts them.
    const bool tp0 = mesh->coord(world->rank(), "tp") == 0;
    shard_ = c.zero_stage >= 1 && groups_.edp->size() > 1;
    count_router_ = tp0 && groups_.dense->rank() == 0;
    // Sharded, every edp rank counts the range it owns.
    count_experts_ = tp0 && (shard_ || groups_.edp->rank() == 0);
    stage3_ = shard_ && c.zero_stage == 3;
  }
  const ch09::MoeParallel par{groups_.ep.get(), groups_.dense.get(), c.moe_dispatch};
  std::vector<std::int64_t> mine = model_blocks;
  std::sort(mine.begin(), mine.end());
  for (std::int64_t l : mine) {
    if (!is_moe_block(c, l)) continue;
    layers_.push_back(std::make_unique<Branch>(layer_config(c, l), par, this, layers_.size()));
    layer_of_.push_back(l);
  }
  if (stage3_) take_expert_shards();
  find_owners();
}

namespace {
Tensor range_of(const Tensor& t, std::pair<std::int64_t, std::int64_t> r) {
  return t.view({t.numel()}).flat_slice(r.first, r.second);
}
constexpr const char* kReleasedExperts =
    "an MoE block's experts, released by ZeRO-3 (each edp rank holds its range; gathered "
    "before the block's forward and backward)";
constexpr const char* kReleasedExpertGrads =
    "an MoE block's whole expert gradients, released by ZeRO-3 after their reduce-scatter";
}  // namespace

// ZeRO-3 over edp: each expert tensor's owned range copied into a tensor of its own (what the
// optimizer steps in place), the whole tensors and their gradients released until used.
void MoeBlocks::take_expert_shards() {
  const std::vector<Tensor> whole = whole_params();
  const std::vector<Tensor> grads = whole_grads();
  shards_.assign(whole.size(), Tensor());
  grad_shards_.assign(whole.size(), Tensor());
  for (std::size_t j = 0; j < whole.size(); ++j) {
    if (!is_expert_tensor(j)) continue;
    const auto r = owned_range(j);
    shards_[j] = Tensor::empty({r.second}, DType::kF32, MemCategory::kParameters);
    shards_[j].copy_from(range_of(whole[j], r));
    grad_shards_[j] = Tensor::zeros({r.second}, DType::kF32, MemCategory::kGradients);
    whole[j].release_storage(kReleasedExperts);
    grads[j].release_storage(kReleasedExpertGrads);
  }
}

void MoeBlocks::gather_block(std::size_t i) {
  if (!stage3_) return;
  std::vector<Tensor> whole = whole_params();
  for (std::size_t j = 5 * i + 1; j < 5 * i + 5; ++j) {
    whole[j].restore_storage();
    whole[j].copy_from(gather_over_edp(shards_[j], j));
  }
}

void MoeBlocks::release_block(std::size_t i) {
  if (!stage3_) return;
  const std::vector<Tensor> whole = whole_params();
  for (std::size_t j = 5 * i + 1; j < 5 * i + 5; ++j) whole[j].release_storage(kReleasedExperts);
}

void MoeBlocks::restore_block_grads(std::size_t i) {
  if (!stage3_) return;
  std::vector<Tensor> grads = whole_grads();
  for (std::size_t j = 5 * i + 1; j < 5 * i + 5; ++j) {
    if (grads[j].resident()) continue;
    grads[j].restore_storage();  // the step's first backward: zeros to accumulate into
    grads[j].zero();
  }
}

void MoeBlocks::gather_whole() {
  for (std::size_t i = 0; i < layers_.size(); ++i) gather_block(i);
}

void MoeBlocks::release_whole() {
  for (std::size_t i = 0; i < layers_.size(); ++i) release_block(i);
}

void MoeBlocks::find_owners() {
  // Every MoE block of the model, in model order, and the pp rank holding it (collective over
  // pp: each rank's flags of the blocks it holds, gathered).
  std::vector<std::int64_t> all;
  for (std::int64_t l = 0; l < config_.model.n_layer; ++l) {
    if (is_moe_block(config_, l)) all.push_back(l);
  }
  const int n = static_cast<int>(all.size()), pp = pp_ ? pp_->size() : 1;
  Tensor held = Tensor::zeros({n}, DType::kF64, MemCategory::kCommBuffers);
  for (std::int64_t l : layer_of_) {
    held.data_as<double>()[std::find(all.begin(), all.end(), l) - all.begin()] = 1;
  }
  Tensor every = held;
  if (pp_) {
    every = Tensor::empty({pp * n}, DType::kF64, MemCategory::kCommBuffers);
    pp_->all_gather(held, every);
  }
  owners_.clear();
  for (int b = 0; b < n; ++b) {
    int owner = -1;
    for (int r = 0; r < pp; ++r) {
      if (every.data_as<double>()[r * n + b] != 0) owner = r;
    }
    if (owner < 0) {
      throw std::logic_error("MoeBlocks: no pp rank holds MoE block " +
                             std::to_string(all[std::size_t(b)]));
    }
    owners_.push_back({all[std::size_t(b)], owner});
  }
}

MoeBlocks::MoeBlocks(const TrainerConfig& c) : config_(c) {
  for (std::int64_t l = 0; l < c.model.n_layer; ++l) {
    if (!is_moe_block(c, l)) continue;
    layers_.push_back(
        std::make_unique<Branch>(layer_config(c, l), ch09::MoeParallel{}, this, layers_.size()));
    layer_of_.push_back(l);
  }
  find_owners();
}

MoeBlocks::~MoeBlocks() = default;

BlockFeedForward* MoeBlocks::at(std::int64_t layer) {
  for (std::size_t i = 0; i < layer_of_.size(); ++i) {
    if (layer_of_[i] == layer) return layers_[i].get();
  }
  return nullptr;
}

ch09::MoeLayer& MoeBlocks::layer(std::size_t i) { return layers_.at(i)->layer; }

void MoeBlocks::begin_step(float backward_seed, bool sync_averages) {
  // aux_loss_scale.h: coef x the main loss's seed (its loss scale, and 1 / m unless the sync
  // divides the sum by m itself), times dp x cp when the sync averages over the replicas the
  // statistics were reduced over (module comment); times cp alone when it does not, as the cp
  // ranks' sum is divided by cp whatever the dp sync does (ch06 cp_grad_sync.h).
  const double group = !groups_.dense ? 1.0
                        : sync_averages ? double(groups_.dense->size())
                                        : double(config_.cp);
  const ch09::LossFactors f{backward_seed, 1};
  ep_bytes_at_step_ = ep_bytes_sent();
  for (auto& b : layers_) {
    b->aux_seed = static_cast<float>(ch09::aux_grad_seed(config_.moe.aux_loss_coef, f) * group);
    b->z_seed = static_cast<float>(ch09::aux_grad_seed(config_.moe.z_loss_coef, f) * group);
  }
}

std::vector<Tensor> MoeBlocks::whole_params() {
  std::vector<Tensor> out;
  for (auto& b : layers_) {
    ch09::ExpertWeights& w = b->layer.experts();
    for (Tensor* t : {&b->layer.router_weight(), &w.fc_w, &w.fc_b, &w.proj_w, &w.proj_b}) {
      out.push_back(*t);
    }
  }
  return out;
}

std::pair<std::int64_t, std::int64_t> MoeBlocks::owned_range(std::size_t j) const {
  const std::int64_t n = local_shape_numel(j);
  if (!shard_ || !is_expert_tensor(j)) return {0, n};
  // ring_chunk's split: rank r of edp owns [n r / edp, n (r + 1) / edp).
  const std::int64_t r = groups_.edp->rank(), size = groups_.edp->size();
  const std::int64_t begin = n * r / size, end = n * (r + 1) / size;
  return {begin, end - begin};
}

std::vector<Tensor> MoeBlocks::params() {
  std::vector<Tensor> out = whole_params();
  for (std::size_t j = 0; j < out.size(); ++j) {
    out[j] = stage3_ && is_expert_tensor(j) ? shards_[j] : range_of(out[j], owned_range(j));
  }
  return out;
}

std::vector<Tensor> MoeBlocks::whole_grads() {
  std::vector<Tensor> out;
  for (auto& b : layers_) {
    ch09::ExpertWeights& g = b->layer.expert_grads();
    for (Tensor* t : {&b->layer.router_grad(), &g.fc_w, &g.fc_b, &g.proj_w, &g.proj_b}) {
      out.push_back(*t);
    }
  }
  return out;
}

std::vector<Tensor> MoeBlocks::grads() {
  std::vector<Tensor> out = whole_grads();
  for (std::size_t j = 0; j < out.size(); ++j) {
    out[j] = stage3_ && is_expert_tensor(j) ? grad_shards_[j] : range_of(out[j], owned_range(j));
  }
  return out;
}

Tensor MoeBlocks::gather_over_edp(const Tensor& range, std::size_t j) const {
  Shape shape = global_shape(j);
  if (is_expert_tensor(j)) shape[0] /= ep();
  Tensor whole = Tensor::empty(shape, DType::kF32, MemCategory::kCommBuffers);
  if (!shard_ || !is_expert_tensor(j)) {
    whole.copy_from(range.view(shape));
    return whole;
  }
  // Equal blocks for the all-gather: each rank's range padded to the largest.
  const std::int64_t n = whole.numel(), size = groups_.edp->size();
  const std::int64_t block = (n + size - 1) / size;
  Tensor padded = Tensor::zeros({block}, DType::kF32, MemCategory::kCommBuffers);
  padded.flat_slice(0, range.numel()).copy_from(range.view({range.numel()}));
  Tensor all = Tensor::empty({block * size}, DType::kF32, MemCategory::kCommBuffers);
  groups_.edp->all_gather(padded, all);
  Tensor flat = whole.view({n});
  for (std::int64_t r = 0; r < size; ++r) {
    const std::int64_t begin = n * r / size, end = n * (r + 1) / size;
    flat.flat_slice(begin, end - begin).copy_from(all.flat_slice(r * block, end - begin));
  }
  return whole;
}

void MoeBlocks::gather_sharded() {
  if (!shard_ || stage3_) return;  // ZeRO-3: the next forward gathers
  std::vector<Tensor> whole = whole_params();
  for (std::size_t j = 0; j < whole.size(); ++j) {
    if (!is_expert_tensor(j)) continue;
    const Tensor full = gather_over_edp(range_of(whole[j], owned_range(j)), j);
    whole[j].copy_from(full);
  }
}

std::vector<bool> MoeBlocks::weight_decay() const {
  std::vector<bool> out;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    for (bool d : {true, true, false, true, false}) out.push_back(d);
  }
  return out;
}

double MoeBlocks::counted_sum_of_squares(std::span<const Tensor> grads) const {
  std::vector<bool> counted;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    counted.push_back(count_router_);
    for (int k = 0; k < 4; ++k) counted.push_back(count_experts_);
  }
  return mixpar::counted_sum_of_squares(grads, counted);
}

void MoeBlocks::sync_grads(double divisor) {
  if (stage3_) {
    reduce_scatter_grads(divisor);
    return;
  }
  for (auto& b : layers_) {
    ch09::sync_moe_grads(b->layer, groups_.dense.get(), groups_.edp.get());
    if (divisor == 1.0) continue;
    ch09::ExpertWeights& g = b->layer.expert_grads();
    for (Tensor* t : {&b->layer.router_grad(), &g.fc_w, &g.fc_b, &g.proj_w, &g.proj_b}) {
      ops::scale(*t, 1.0 / divisor);
    }
  }
}

// ZeRO-3: the router's gradient summed over dp x cp as before; each expert tensor's
// reduce-scattered over edp into this rank's range (the ranges padded to equal blocks for the
// collective), the same sums in the same rank order as the all-reduce's (common/comm/
// communicator.h), then the whole gradient released.
void MoeBlocks::reduce_scatter_grads(double divisor) {
  std::vector<Tensor> grads = whole_grads();
  for (std::size_t j = 0; j < grads.size(); ++j) {
    if (!is_expert_tensor(j)) {
      if (groups_.dense) groups_.dense->all_reduce(grads[j]);
      if (divisor != 1.0) ops::scale(grads[j], 1.0 / divisor);
      continue;
    }
    const std::int64_t n = grads[j].numel(), size = groups_.edp->size();
    const std::int64_t block = (n + size - 1) / size;
    Tensor padded = Tensor::zeros({block * size}, DType::kF32, MemCategory::kCommBuffers);
    const Tensor flat = grads[j].view({n});
    for (std::int64_t r = 0; r < size; ++r) {
      const std::int64_t begin = n * r / size, end = n * (r + 1) / size;
      padded.flat_slice(r * block, end - begin).copy_from(flat.flat_slice(begin, end - begin));
    }
    Tensor mine = Tensor::empty({block}, DType::kF32, MemCategory::kCommBuffers);
    groups_.edp->reduce_scatter(padded, mine);
    grad_shards_[j].copy_from(mine.flat_slice(0, grad_shards_[j].numel()));
    if (divisor != 1.0) ops::scale(grad_shards_[j], 1.0 / divisor);
    grads[j].release_storage(kReleasedExpertGrads);
  }
}

void MoeBlocks::after_step(bool taken) {
  for (auto& b : layers_) {
    // The counts are reduced over dp x cp already (the balance group): every replica takes
    // the same step, so the bias stays replicated (ch09's failure mode: local counts part it).
    if (taken && config_.moe.bias_update_rate > 0) {
      ch09::update_expert_bias(b->layer.expert_bias(), b->counts,
                               static_cast<float>(config_.moe.bias_update_rate));
    }
    b->reset();
  }
}

Json MoeBlocks::step_stats() {
  const std::uint64_t a2a = ep_bytes_sent() - ep_bytes_at_step_;  // before the gathers below
  double formula = 0;
  for (const auto& b : layers_) formula += b->a2a_formula;
  const std::size_t E = static_cast<std::size_t>(config_.moe.n_experts);
  // Per block: [E counts, dropped fraction, load max / mean, aux loss, z-loss].
  std::vector<std::vector<double>> records;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Branch& b = *layers_[i];
    std::vector<double> r(b.counts);
    // Dropped assignments and rows run per rank, over the replicas and the ep ranks.
    Tensor d = Tensor::empty({2}, DType::kF64, MemCategory::kCommBuffers);
    d.data_as<double>()[0] = double(b.dropped);
    d.data_as<double>()[1] = double(b.assignments);
    if (groups_.dense) groups_.dense->all_reduce(d);
    const double* dd = d.data_as<double>();
    r.push_back(dd[1] > 0 ? dd[0] / dd[1] : 0.0);
    double mx = double(b.expert_rows), mean = double(b.expert_rows);
    if (groups_.ep && groups_.ep->size() > 1) {
      Tensor mine = Tensor::empty({1}, DType::kF64, MemCategory::kCommBuffers);
      mine.data_as<double>()[0] = double(b.expert_rows);
      const int n = groups_.ep->size();
      Tensor all = Tensor::empty({n}, DType::kF64, MemCategory::kCommBuffers);
      groups_.ep->all_gather(mine, all);
      mx = 0;
      mean = 0;
      for (int k = 0; k < n; ++k) {
        mx = std::max(mx, all.data_as<double>()[k]);
        mean += all.data_as<double>()[k] / n;
      }
    }
    r.push_back(mean > 0 ? mx / mean : 1.0);
    const double m = std::max(1, b.forwards);
    r.push_back(b.aux_loss / m);
    r.push_back(b.z_loss / m);
    records.push_back(std::move(r));
  }
  std::vector<std::int64_t> block_of = layer_of_;
  std::int64_t a2a_total = static_cast<std::int64_t>(a2a);
  if (pp_) {
    // A pipeline: each stage measured its own blocks; every rank reports the model's, each
    // block's record broadcast from the pp rank holding it, and the ep bytes of the whole
    // pipeline (this rank's and its other stages', by measure and by formula alike).
    std::vector<std::vector<double>> all;
    block_of.clear();
    for (const auto& [block, owner] : owners_) {
      Tensor t = Tensor::empty({std::int64_t(E) + 4}, DType::kF64, MemCategory::kCommBuffers);
      if (owner == pp_->rank()) {
        const auto i = std::find(layer_of_.begin(), layer_of_.end(), block) - layer_of_.begin();
        std::copy_n(records[std::size_t(i)].data(), E + 4, t.data_as<double>());
      }
      pp_->broadcast(t, owner);
      all.emplace_back(t.data_as<double>(), t.data_as<double>() + E + 4);
      block_of.push_back(block);
    }
    records = std::move(all);
    Tensor bytes = Tensor::empty({2}, DType::kF64, MemCategory::kCommBuffers);
    bytes.data_as<double>()[0] = double(a2a);
    bytes.data_as<double>()[1] = formula;
    pp_->all_reduce(bytes);
    a2a_total = static_cast<std::int64_t>(bytes.data_as<double>()[0]);
    formula = bytes.data_as<double>()[1];
  }
  Json blocks = Json::array();
  for (std::size_t i = 0; i < records.size(); ++i) {
    const std::vector<double>& r = records[i];
    Json j = Json::object();
    j.set("block", block_of[i]);
    Json counts = Json::array();
    for (std::size_t e = 0; e < E; ++e) counts.push_back(static_cast<std::int64_t>(r[e]));
    j.set("expert_tokens", std::move(counts));
    j.set("dropped_frac", r[E]);
    j.set("load_max_over_mean", r[E + 1]);
    j.set("aux_loss", r[E + 2]);
    j.set("z_loss", r[E + 3]);
    blocks.push_back(std::move(j));
  }
  Json out = Json::object();
  out.set("blocks", std::move(blocks));
  out.set("a2a_bytes", a2a_total);
  const bool a2a_dispatch = config_.moe_dispatch == ch09::DispatchKind::kAllToAll;
  out.set("a2a_bytes_formula", a2a_dispatch ? Json(static_cast<std::int64_t>(formula)) : Json());
  return out;
}

std::uint64_t MoeBlocks::ep_bytes_sent() const { return sent(groups_.ep); }
std::uint64_t MoeBlocks::edp_bytes_sent() const { return sent(groups_.edp); }
std::uint64_t MoeBlocks::dense_bytes_sent() const { return sent(groups_.dense); }
std::uint64_t MoeBlocks::pp_bytes_sent() const { return sent(pp_); }

std::string MoeBlocks::key(std::size_t j) const {
  static constexpr const char* kNames[] = {"router.weight", "experts.c_fc.weight",
                                           "experts.c_fc.bias", "experts.c_proj.weight",
                                           "experts.c_proj.bias"};
  return "h." + std::to_string(layer_of_.at(j / 5)) + ".moe." + kNames[j % 5];
}

Shape MoeBlocks::global_shape(std::size_t j) const {
  const std::int64_t C = config_.model.n_embd, H = 4 * C, E = config_.moe.n_experts;
  const Shape shapes[] = {{C, E}, {E, C, H}, {E, H}, {E, H, C}, {E, C}};
  return shapes[j % 5];
}

std::int64_t MoeBlocks::local_shape_numel(std::size_t j) const {
  const std::int64_t n = shape_numel(global_shape(j));
  return is_expert_tensor(j) ? n / ep() : n;
}

int MoeBlocks::first_expert() const {
  return groups_.ep ? groups_.ep->rank() * (config_.moe.n_experts / groups_.ep->size()) : 0;
}

std::string MoeBlocks::bias_key(std::size_t block) const {
  return "h." + std::to_string(layer_of_.at(block)) + ".moe.expert_bias";
}

Tensor MoeBlocks::gather_experts(const Tensor& t) const {
  if (!groups_.ep || groups_.ep->size() == 1) return t;
  Shape s = t.shape();
  s[0] *= groups_.ep->size();
  Tensor all = Tensor::empty(s, DType::kF32, MemCategory::kCommBuffers);
  groups_.ep->all_gather(t, all);
  return all;
}

void MoeBlocks::gather_for_eval(MoeBlocks* into) {
  const std::int64_t C = config_.model.n_embd, H = 4 * C, E = config_.moe.n_experts;
  const int my_pp = pp_ ? pp_->rank() : 0;
  for (std::size_t b = 0; b < owners_.size(); ++b) {
    const auto [block, owner] = owners_[b];
    // The router, the expert bias and every expert (rank r of ep holds experts [r El,
    // (r + 1) El): the gather's rank order is the global one), whole on the stage holding
    // the block; a pipeline broadcasts them from it over pp.
    std::vector<Tensor> whole = {Tensor::empty({C, E}, DType::kF32, MemCategory::kOther),
                                 Tensor::empty({E}, DType::kF32, MemCategory::kOther),
                                 Tensor::empty({E, C, H}, DType::kF32, MemCategory::kOther),
                                 Tensor::empty({E, H}, DType::kF32, MemCategory::kOther),
                                 Tensor::empty({E, H, C}, DType::kF32, MemCategory::kOther),
                                 Tensor::empty({E, C}, DType::kF32, MemCategory::kOther)};
    if (owner == my_pp) {
      const auto i = std::find(layer_of_.begin(), layer_of_.end(), block) - layer_of_.begin();
      gather_block(std::size_t(i));  // ZeRO-3: over edp first, released below
      ch09::MoeLayer& src = layers_[std::size_t(i)]->layer;
      whole[0].copy_from(src.router_weight());
      whole[1].copy_from(Tensor::from_floats(src.expert_bias(), {E}));
      ch09::ExpertWeights& w = src.experts();
      const Tensor* from[] = {&w.fc_w, &w.fc_b, &w.proj_w, &w.proj_b};
      for (std::size_t k = 0; k < 4; ++k) {
        if (!groups_.ep || groups_.ep->size() == 1) {
          whole[k + 2].copy_from(*from[k]);
        } else {
          groups_.ep->all_gather(*from[k], whole[k + 2]);
        }
      }
      release_block(std::size_t(i));
    }
    if (pp_) {
      for (Tensor& t : whole) pp_->broadcast(t, owner);
    }
    if (into == nullptr) continue;
    ch09::MoeLayer& dst = into->layer(b);
    dst.router_weight().copy_from(whole[0]);
    dst.expert_bias() = whole[1].to_floats();
    ch09::ExpertWeights& e = dst.experts();
    Tensor* to[] = {&e.fc_w, &e.fc_b, &e.proj_w, &e.proj_b};
    for (std::size_t k = 0; k < 4; ++k) to[k]->copy_from(whole[k + 2]);
  }
}

}  // namespace mixpar::ch08
