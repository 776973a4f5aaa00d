#include "ch05_zero/zero_sync.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "ops/elementwise.h"
#include "parallel/count_once.h"

namespace mixpar::ch05 {
namespace {

constexpr int kNormTag = 0x5e50;  // the norm chain's messages

std::int64_t max_of(const std::vector<ZeroBucket>& buckets, bool padded) {
  std::int64_t m = 1;
  for (const ZeroBucket& b : buckets) m = std::max(m, padded ? b.padded : b.shard);
  return m;
}

// acc <- acc + x^2 over t's elements in order, in FP64: ops::sum_of_squares' fold, continued
// from acc instead of restarted at 0 (so a parameter cut between two owners sums as one).
double fold_squares(double acc, const Tensor& t) {
  const float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const double x = p[i];
    acc = acc + x * x;
  }
  return acc;
}

}  // namespace

ZeroStage1::ZeroStage1(Communicator& dp, ParamRegistry& registry, ZeroConfig config)
    : ZeroStage1(dp, registry, config, false) {}

ZeroStage1::ZeroStage1(Communicator& dp, ParamRegistry& registry, ZeroConfig config, bool stage2)
    : dp_(dp),
      registry_(registry),
      config_(config),
      partition_(registry.entries(), registry.flat_grads().dtype(), config.bucket_cap_bytes,
                 dp.size(), dp.rank(), config.align, config.close_after) {
  const DType g = registry.flat_grads().dtype();
  const DType work = dtype_size(g) < 4 ? DType::kF32 : g;  // chapter 4's FP32 staging
  const auto& buckets = partition_.buckets();
  rs_in_ = Tensor::zeros({max_of(buckets, true)}, work, MemCategory::kCommBuffers);
  rs_out_ = Tensor::zeros({max_of(buckets, false)}, work, MemCategory::kCommBuffers);
  const DType p = registry.flat_params().dtype();
  ag_in_ = Tensor::zeros({max_of(buckets, false)}, p, MemCategory::kCommBuffers);
  ag_out_ = Tensor::zeros({max_of(buckets, true)}, p, MemCategory::kCommBuffers);
  release_scratch_ = stage2;
  if (release_scratch_) {
    for (Tensor* t : {&rs_in_, &rs_out_, &ag_in_, &ag_out_}) {
      t->release_storage("ZeRO's collective scratch, outside a collective");
    }
  }
  ch04::ReducerConfig rc;
  rc.bucket_cap_bytes = config.bucket_cap_bytes;
  rc.overlap = config.overlap;
  rc.close_after = config.close_after;
  rc.release_staging = stage2;
  rc.bucket_op = [this](std::size_t b, Tensor& w, double divisor) {
    reduce_scatter_bucket(b, w, divisor);
  };
  reducer_ = std::make_unique<ch04::BucketReducer>(dp, registry, rc);
  if (reducer_->buckets().size() != buckets.size()) {
    throw std::logic_error("ZeroStage1: the reducer's buckets are not the partition's");
  }
}

std::string ZeroStage1::describe() const {
  char cap[32];
  std::snprintf(cap, sizeof cap, "%g", static_cast<double>(config_.bucket_cap_bytes) / (1 << 20));
  return "ZeRO stage 1: gradients in " + std::to_string(partition_.buckets().size()) +
         " bucket(s) of <= " + cap + " MiB reduce-scattered " +
         (config_.overlap ? "during backward" : "after backward") + ", masters and moments in " +
         std::to_string(dp_.size()) + " shards, parameters all-gathered after each step";
}

void ZeroStage1::last_backward_starts(int micro_batches) {
  reducer_->begin(static_cast<double>(dp_.size()) * micro_batches);
  open_ = true;
}

void ZeroStage1::grad_ready(std::size_t entry) {
  if (open_) reducer_->mark_ready(entry);
}

double ZeroStage1::finish() {
  open_ = false;
  return reducer_->finish();
}

double ZeroStage1::take_comm_seconds() { return reducer_->take_comm_seconds(); }
std::vector<TraceSpan> ZeroStage1::take_spans() { return reducer_->take_spans(); }

// The bucket's sum over ranks lands in this rank's shard, is divided like DDP's, and is
// written back over the owned range of `work` (the rest of the bucket stays unreduced and is
// never read: the optimizer reads only the pieces).
// Stage 2: the scratch exists only while a bucket is reduce-scattered.
void ZeroStage1::reduce_scatter_bucket(std::size_t b, Tensor& work, double divisor) {
  if (release_scratch_) {
    rs_in_.restore_storage();
    rs_out_.restore_storage();
  }
  reduce_scatter_into_shard(b, work, divisor);
  if (release_scratch_) {
    rs_in_.release_storage("ZeRO's collective scratch, outside a collective");
    rs_out_.release_storage("ZeRO's collective scratch, outside a collective");
  }
}

void ZeroStage1::reduce_scatter_into_shard(std::size_t b, Tensor& work, double divisor) {
  const ZeroBucket& z = partition_.buckets()[b];
  Tensor in = rs_in_.flat_slice(0, z.padded);
  Tensor head = in.flat_slice(0, z.count);
  head.copy_from(work);
  if (z.padded > z.count) {
    // The padding contributes zeros (it may hold an earlier, longer bucket's values).
    float* p = in.data_as<float>();
    std::fill(p + z.count, p + z.padded, 0.0f);
  }
  Tensor out = rs_out_.flat_slice(0, z.shard);
  dp_.reduce_scatter(in, out, ReduceOp::kSum);
  const std::int64_t n = z.owned_count(dp_.rank());
  if (n == 0) return;  // this rank's shard of the bucket is padding only
  Tensor mine = out.flat_slice(0, n);
  if (divisor != 1.0) ops::scale(mine, 1.0 / divisor);
  keep_mean(b, mine, work);
}

void ZeroStage1::keep_mean(std::size_t b, const Tensor& mean, Tensor& work) {
  const ZeroBucket& z = partition_.buckets()[b];
  Tensor dst = work.flat_slice(z.owned_begin(dp_.rank()) - z.begin, mean.numel());
  dst.copy_from(mean);
}

std::vector<Tensor> ZeroStage1::shard_params() const {
  std::vector<Tensor> out;
  for (const ShardPiece& p : partition_.pieces()) {
    out.push_back(registry_.flat_params().flat_slice(p.flat, p.count));
  }
  return out;
}

std::vector<Tensor> ZeroStage1::shard_grads() const {
  std::vector<Tensor> out;
  for (const ShardPiece& p : partition_.pieces()) {
    out.push_back(registry_.flat_grads().flat_slice(p.flat, p.count));
  }
  return out;
}

std::vector<bool> ZeroStage1::shard_weight_decay() const {
  std::vector<bool> out;
  for (const ShardPiece& p : partition_.pieces()) {
    out.push_back(registry_.entries()[p.entry].weight_decay);
  }
  return out;
}

double ZeroStage1::counted_sum_of_squares(std::span<const Tensor> grads32,
                                          const std::vector<bool>& counted) const {
  const auto& pieces = partition_.pieces();
  const auto& runs = partition_.runs();
  const auto entries = registry_.entries();
  if (grads32.size() != pieces.size() || counted.size() != entries.size()) {
    throw std::invalid_argument("ZeroStage1::counted_sum_of_squares: " +
                                std::to_string(grads32.size()) + " gradients for " +
                                std::to_string(pieces.size()) + " pieces");
  }
  const int me = dp_.rank();
  // state[0]: the current parameter's running fold; state[1]: the sum of finished parameters.
  Tensor state = Tensor::zeros({2}, DType::kF64, MemCategory::kCommBuffers);
  double* s = state.data_as<double>();
  std::size_t next = 0;  // this rank's next piece
  for (std::size_t k = 0; k < runs.size(); ++k) {
    if (runs[k].owner != me) continue;
    if (k > 0) dp_.recv(state, runs[k - 1].owner, kNormTag);
    const std::int64_t end = runs[k].begin + runs[k].count;
    for (; next < pieces.size() && pieces[next].flat < end; ++next) {
      const ShardPiece& p = pieces[next];
      if (!counted[p.entry]) continue;
      if (p.entry_offset == 0) s[0] = 0.0;
      s[0] = fold_squares(s[0], grads32[next]);
      const ParamEntry& e = entries[p.entry];
      if (p.entry_offset + p.count == shape_numel(held_shape(e.shape, e.holding))) s[1] += s[0];
    }
    if (k + 1 < runs.size()) dp_.send(state, runs[k + 1].owner, kNormTag);
  }
  return !runs.empty() && runs.back().owner == me ? s[1] : 0.0;
}

std::vector<OwnedPiece> ZeroStage1::owned_pieces(const ParamRegistry& /*params*/) const {
  std::vector<OwnedPiece> out;
  for (const ShardPiece& p : partition_.pieces()) out.push_back({p.entry, p.entry_offset, p.count});
  return out;
}

std::vector<bool> ZeroStage1::norm_counted(const ParamRegistry& params, const GridCoord& coord) const {
  GridCoord at = coord;
  at.dp = 0;  // every dp rank counts the pieces it owns (counted_sum_of_squares' chain)
  return mixpar::norm_counted(params.entries(), at);
}

std::vector<Tensor> ZeroStage1::whole_params(const ParamRegistry& /*params*/,
                                             std::span<const Tensor> owned) const {
  // Every piece copied into zeros and the dp group sums them: each element has one owner, so
  // its sum is its value exactly.
  Tensor flat = Tensor::zeros({registry_.numel()}, DType::kF32, MemCategory::kCommBuffers);
  const std::vector<ShardPiece>& pieces = partition_.pieces();
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    Tensor dst = flat.flat_slice(pieces[k].flat, pieces[k].count);
    dst.copy_from(owned[k].view({pieces[k].count}));
  }
  dp_.all_reduce(flat, ReduceOp::kSum);
  std::vector<Tensor> out;
  for (const ParamEntry& e : registry_.entries()) {
    out.push_back(flat.flat_slice(e.offset, e.param.numel()).view(held_shape(e.shape, e.holding)));
  }
  return out;
}

double ZeroStage1::local_sum_of_squares(std::span<const Tensor> grads32,
                                        const std::vector<bool>& counted) const {
  double sum = 0.0;
  for (std::size_t i = 0; i < grads32.size(); ++i) {
    if (counted[partition_.pieces()[i].entry]) sum = fold_squares(sum, grads32[i]);
  }
  return sum;
}

void ZeroStage1::gather_params() {
  const Tensor& flat = registry_.flat_params();
  const int me = dp_.rank();
  if (release_scratch_) {
    ag_in_.restore_storage();
    ag_out_.restore_storage();
  }
  for (const ZeroBucket& z : partition_.buckets()) {
    Tensor in = ag_in_.flat_slice(0, z.shard);
    const std::int64_t n = z.owned_count(me);
    if (n > 0) {
      Tensor head = in.flat_slice(0, n);
      head.copy_from(flat.flat_slice(z.owned_begin(me), n));
    }
    if (n < z.shard) in.flat_slice(n, z.shard - n).zero();  // the padding sends zeros
    Tensor out = ag_out_.flat_slice(0, z.padded);
    dp_.all_gather(in, out);
    Tensor dst = flat.flat_slice(z.begin, z.count);
    dst.copy_from(out.flat_slice(0, z.count));
  }
  if (release_scratch_) {
    ag_in_.release_storage("ZeRO's collective scratch, outside a collective");
    ag_out_.release_storage("ZeRO's collective scratch, outside a collective");
  }
}

ZeroStage2::ZeroStage2(Communicator& dp, ParamRegistry& registry, ZeroConfig config)
    : ZeroStage1(dp, registry, config, true) {
  std::int64_t total = 0;
  for (const ZeroBucket& z : partition_.buckets()) {
    shard_offset_.push_back(total);
    total += z.shard;
  }
  grad_shard_ = Tensor::zeros({total}, registry.flat_grads().dtype(), MemCategory::kGradients,
                              registry.flat_grads().device());
  release_full_grads();  // between steps only the shard is held
}

void ZeroStage2::release_full_grads() {
  registry_.flat_grads().release_storage(
      "the full gradients, released by ZeRO-2 after the reduce-scatter (grad_shard() holds "
      "this rank's shard)");
}

std::string ZeroStage2::describe() const {
  std::string s = ZeroStage1::describe();
  const std::string from = "ZeRO stage 1: gradients";
  s.replace(0, from.size(),
            "ZeRO stage 2: gradients kept in " + std::to_string(dp_.size()) +
                " shards (the full buffer released after the step's last bucket),");
  return s;
}

void ZeroStage2::begin_step() {
  Tensor full = registry_.flat_grads();  // a handle on the registry's storage
  full.restore_storage();
  full.zero();
}

double ZeroStage2::finish() {
  const double waited = ZeroStage1::finish();
  release_full_grads();
  return waited;
}

// The mean is rounded into the working dtype here exactly as the reducer rounds stage 1's
// staging back into the gradients (no saturation), so both stages hold the same bits.
void ZeroStage2::keep_mean(std::size_t b, const Tensor& mean, Tensor&) {
  Tensor dst = grad_shard_.flat_slice(shard_offset_[b], mean.numel());
  dst.copy_from(mean, Saturation::kNoSat);
}

std::vector<Tensor> ZeroStage2::piece_slices(const Tensor& shard) const {
  const auto& buckets = partition_.buckets();
  const int me = dp_.rank();
  std::vector<Tensor> out;
  for (const ShardPiece& p : partition_.pieces()) {
    std::size_t b = 0;
    while (!(buckets[b].begin <= p.flat && p.flat < buckets[b].begin + buckets[b].count)) ++b;
    out.push_back(shard.flat_slice(shard_offset_[b] + p.flat - buckets[b].owned_begin(me),
                                   p.count));
  }
  return out;
}

std::vector<Tensor> ZeroStage2::shard_grads() const { return piece_slices(grad_shard_); }

}  // namespace mixpar::ch05
