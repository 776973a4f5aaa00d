#include "ch05_zero/zero_stage3.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>

#include "trace/chrome_trace.h"

namespace mixpar::ch05 {
namespace {

constexpr const char* kPhaseName[] = {"forward", "backward"};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// One bucket per unit: a bucket (taken in reverse registration order) closes after ln_f's
// first entry, after each block's first entry (h.l.ln_1.weight) and at wte; the cap never
// closes one.
ZeroConfig with_block_buckets(ZeroConfig c, const GptModel& model) {
  const auto entries = model.registry().entries();
  std::vector<bool> first;
  for (const ParamEntry& e : entries) {
    first.push_back(e.name == "ln_f.weight" || (e.name.rfind("h.", 0) == 0 &&
                                                ends_with(e.name, ".ln_1.weight")));
  }
  c.bucket_cap_bytes = std::numeric_limits<std::size_t>::max();
  c.close_after = [first](std::size_t k) { return first[k]; };
  // ZeRO-3's own thread carries the reduce-scatters with the gathers; the reducer of stage 2
  // is never opened.
  c.overlap = false;
  return c;
}

// The whole stack of blocks: its units are the model's (embedding, blocks, head). A tp rank's
// shard of it is one too (its registry holds that rank's held elements, which the partition
// splits over the rank's dp group; the block's tp collectives run on the tp group between the
// gathers). Pipeline stages are refused before (DeepSpeed's reason, trainer_config.cpp).
const GptModel& whole_model(const GptModel& m) {
  if (!m.stage().whole()) {
    throw std::invalid_argument(
        "ZeroStage3: the model must be the whole stack of blocks (pipeline stages are not "
        "built)");
  }
  return m;
}

}  // namespace

ZeroStage3::ZeroStage3(Communicator& dp, GptModel& model, ZeroConfig config,
                       Zero3Options options)
    : ZeroStage2(dp, model.registry(), with_block_buckets(config, whole_model(model))),
      model_(model),
      options_(std::move(options)),
      gather_comm_(dp.split(0, dp.rank())),
      ledger_(&current_ledger()) {
  if (options_.prefetch < 0) {
    throw std::invalid_argument("ZeroStage3: prefetch " + std::to_string(options_.prefetch));
  }
  // A tp shard's blocks call the tp group's collectives on the compute thread. The local
  // backend keeps one call per rank and group lane in its bookkeeping (its deadlock check
  // reads it), and gather_comm_ shares dp's lane (a split, not a dup: Communicator::dup), so
  // a rank must not talk from two threads while a tp collective may be waiting: under tp the
  // gathers and reduce-scatters run on the compute thread, in the same program order, between
  // the block's tp collectives, and nothing is prefetched (the bits are the same). So too
  // under context parallelism, whose attention talks to the cp group (chapter 6, part 2), and
  // beside a feed-forward seam (chapter 9's MoE blocks), whose layer talks to its expert groups.
  // Over a dup (options.dp_is_a_dup) the local backend gives dp a lane of its own, and the
  // thread talks there while the compute thread talks to the others.
  on_compute_thread_ = !options_.dp_is_a_dup &&
                       (model.options().tp.size > 1 || model.options().attention != nullptr ||
                        model.options().feed_forward != nullptr);
  if (on_compute_thread_) options_.prefetch = 0;
  map_units(model.config().n_layer);
  count_entries_per_bucket();
  take_param_shard();
  make_gathered_buckets();
  model.rebind_params();
  registry_.flat_params().release_storage(
      "the full working copy, released by ZeRO-3 (param_shard() holds this rank's shard; "
      "each unit's parameters are gathered before use)");
  model.set_block_param_hook(this);
  if (!on_compute_thread_) thread_ = std::thread([this] { thread_main(); });
}

// The units the model announces (BlockParamHook) and the buckets each gathers: 0 the
// embedding, 1 .. L the blocks, L + 1 the head (with wte again, for the tied weight); and the
// order the units come in, forward and backward.
void ZeroStage3::map_units(std::int64_t L) {
  const auto& buckets = partition_.buckets();
  auto bucket_of = [&](const std::string& name) {
    const std::int64_t at = registry_.at(name).offset;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      if (buckets[b].begin <= at && at < buckets[b].begin + buckets[b].count) return b;
    }
    throw std::logic_error("ZeroStage3: no bucket holds " + name);
  };
  units_.push_back({bucket_of("wte.weight")});
  for (std::int64_t l = 0; l < L; ++l) {
    units_.push_back({bucket_of("h." + std::to_string(l) + ".ln_1.weight")});
  }
  units_.push_back({bucket_of("ln_f.weight")});
  if (options_.head_gathers_wte) units_.back().push_back(bucket_of("wte.weight"));
  acquired_.assign(units_.size(), false);
  order_[0].push_back(kEmbedding);
  for (std::int64_t l = 0; l <= L; ++l) order_[0].push_back(l);
  for (std::int64_t l = L; l >= 0; --l) order_[1].push_back(l);
  if (!options_.backward_order.empty()) order_[1] = options_.backward_order;
}

// Each entry's bucket, and how many gradients each bucket waits for before it can leave.
void ZeroStage3::count_entries_per_bucket() {
  const auto& buckets = partition_.buckets();
  const auto entries = registry_.entries();
  bucket_of_.assign(entries.size(), 0);
  pending_.assign(buckets.size(), 0);
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    for (std::size_t e = 0; e < entries.size(); ++e) {
      if (entries[e].offset >= buckets[b].begin &&
          entries[e].offset < buckets[b].begin + buckets[b].count) {
        bucket_of_[e] = b;
        ++pending_[b];
      }
    }
  }
  marked_.assign(entries.size(), false);
}

// This rank's shard of the working copy, from the replicas' weights (bucket by bucket, in
// stage 2's gradient-shard layout; the padding zeros).
void ZeroStage3::take_param_shard() {
  const auto& buckets = partition_.buckets();
  const std::vector<std::int64_t>& off = shard_offsets();
  const int me = dp_.rank();
  std::int64_t total = 0;
  for (const ZeroBucket& z : buckets) total += z.shard;
  const Tensor& flat = registry_.flat_params();
  param_shard_ = Tensor::zeros({total}, flat.dtype(), MemCategory::kParameters, flat.device());
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const std::int64_t n = buckets[b].owned_count(me);
    if (n == 0) continue;
    Tensor dst = param_shard_.flat_slice(off[b], n);
    dst.copy_from(flat.flat_slice(buckets[b].owned_begin(me), n));
  }
}

// Each bucket's own gathered buffer, released until a unit gathers it; the registry's
// entries become views of these buffers.
void ZeroStage3::make_gathered_buckets() {
  const auto& buckets = partition_.buckets();
  const auto entries = registry_.entries();
  const Tensor& flat = registry_.flat_params();
  state_.resize(buckets.size());
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    BucketState& s = state_[b];
    s.gathered = Tensor::zeros({buckets[b].padded}, flat.dtype(), MemCategory::kParameters,
                               flat.device());
    std::string names;
    for (ParamEntry& e : entries) {
      if (e.offset < buckets[b].begin || e.offset >= buckets[b].begin + buckets[b].count) continue;
      const Shape held = held_shape(e.shape, e.holding);
      e.param = s.gathered.flat_slice(e.offset - buckets[b].begin, shape_numel(held)).view(held);
      if (names.empty()) names = e.name;
    }
    s.what = "the parameters of the bucket starting at " + names +
             ", released by ZeRO-3 outside the units that gather them";
    s.gathered.release_storage(s.what);
  }
}

ZeroStage3::~ZeroStage3() {
  model_.set_block_param_hook(nullptr);
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string ZeroStage3::describe() const {
  return "ZeRO stage 3: parameters, gradients, masters and moments in " +
         std::to_string(dp_.size()) + " shards; " + std::to_string(partition_.buckets().size()) +
         " units (each block, ln_f, wte with wpe) all-gathered before each forward and "
         "backward that reads them and released after, " +
         (on_compute_thread_ ? std::string("gathered on the compute thread between the tp, cp or "
                                           "MoE collectives, no prefetch")
          : options_.prefetch == 0 ? std::string("no prefetch")
                                 : "prefetching " + std::to_string(options_.prefetch) +
                                       " unit(s) ahead") +
         "; gradients reduce-scattered per unit during backward";
}

void ZeroStage3::begin_step() {
  ZeroStage2::begin_step();
  waited_s_ = 0;
}

void ZeroStage3::last_backward_starts(int micro_batches) {
  divisor_ = static_cast<double>(dp_.size()) * micro_batches;
  std::fill(marked_.begin(), marked_.end(), false);
  for (std::size_t b = 0; b < pending_.size(); ++b) pending_[b] = 0;
  for (std::size_t e = 0; e < marked_.size(); ++e) ++pending_[bucket_of_[e]];
  next_reduce_ = 0;
  open_grads_ = true;
}

void ZeroStage3::grad_ready(std::size_t entry) {
  if (!open_grads_ || marked_[entry]) return;
  marked_[entry] = true;
  --pending_[bucket_of_[entry]];
  queue_complete_buckets();
}

void ZeroStage3::queue_complete_buckets() {
  {
    std::lock_guard lock(mu_);
    while (next_reduce_ < pending_.size() && pending_[next_reduce_] == 0) {
      queue_.push_back({true, next_reduce_++});
    }
    cv_.notify_all();
  }
  if (on_compute_thread_) run_queued_here();
}

double ZeroStage3::finish() {
  const double t0 = trace_now_us();
  reduced_during_backward_ = next_reduce_;
  if (open_grads_) {
    for (std::size_t e = marked_.size(); e-- > 0;) grad_ready(e);  // the post-backward path
    open_grads_ = false;
  }
  drain();
  {
    std::lock_guard lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }
  release_full_grads();
  const double grads = (trace_now_us() - t0) * 1e-6;
  return grads + std::exchange(waited_s_, 0.0);
}

double ZeroStage3::take_comm_seconds() {
  double s = ZeroStage2::take_comm_seconds();
  std::lock_guard lock(mu_);
  s += std::exchange(comm_seconds_, 0.0);
  return s;
}

std::vector<TraceSpan> ZeroStage3::take_spans() {
  std::vector<TraceSpan> all = ZeroStage2::take_spans();
  for (TraceSpan& s : wait_spans_) all.push_back(std::move(s));
  wait_spans_.clear();
  std::lock_guard lock(mu_);
  for (TraceSpan& s : spans_) all.push_back(std::move(s));
  spans_.clear();
  return all;
}

std::vector<Tensor> ZeroStage3::shard_params() const { return piece_slices(param_shard_); }

const std::vector<std::size_t>& ZeroStage3::unit_buckets(std::int64_t block) const {
  return units_[unit_index(block)];
}

std::size_t ZeroStage3::gathered_bytes() const {
  std::size_t n = 0;
  for (const BucketState& s : state_) n += s.gathered.resident() ? s.gathered.nbytes() : 0;
  return n;
}

std::size_t ZeroStage3::unit_index(std::int64_t block) const {
  const std::int64_t i = block + 1;
  if (i < 0 || static_cast<std::size_t>(i) >= units_.size()) {
    throw std::invalid_argument("ZeroStage3: no unit " + std::to_string(block));
  }
  return static_cast<std::size_t>(i);
}

std::string ZeroStage3::unit_name(std::int64_t block) const {
  if (block == kEmbedding) return "the embedding";
  if (block == model_.config().n_layer) return "the head";
  return "block " + std::to_string(block);
}

void ZeroStage3::acquire(std::int64_t block) {
  const std::size_t u = unit_index(block);
  if (acquired_[u]) return;
  acquired_[u] = true;
  {
    std::lock_guard lock(mu_);
    for (std::size_t b : units_[u]) {
      BucketState& s = state_[b];
      if (s.holders++ > 0) continue;  // gathered (or being gathered) for another unit
      s.gathered.restore_storage();   // charged here, on the compute thread's ledger
      s.done = false;
      queue_.push_back({false, b});
    }
    cv_.notify_all();
  }
  if (on_compute_thread_) run_queued_here();
}

void ZeroStage3::release_unit(std::int64_t block) {
  const std::size_t u = unit_index(block);
  if (!acquired_[u]) return;
  acquired_[u] = false;
  for (std::size_t b : units_[u]) {
    BucketState& s = state_[b];
    if (--s.holders == 0) s.gathered.release_storage(s.what);
  }
}

void ZeroStage3::wait_unit(std::int64_t block) {
  const double t0 = trace_now_us();
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] {
      if (error_) return true;
      for (std::size_t b : units_[unit_index(block)]) {
        if (!state_[b].done) return false;
      }
      return true;
    });
    if (error_) std::rethrow_exception(error_);
  }
  const double t1 = trace_now_us();
  waited_s_ += (t1 - t0) * 1e-6;
  if (t1 - t0 >= 1.0) {
    wait_spans_.push_back({"wait for " + unit_name(block) + "'s parameters", "exposed",
                           dp_.rank(), 0, t0, t1 - t0});
  }
}

void ZeroStage3::drain() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() || error_; });
  cv_.wait(lock, [&] {
    return error_ || std::all_of(state_.begin(), state_.end(),
                                 [](const BucketState& s) { return s.done; });
  });
}

void ZeroStage3::before_block(std::int64_t block, Phase phase) {
  const int ph = phase == Phase::kForward ? 0 : 1;
  const std::vector<std::int64_t>& order = order_[ph];
  if (ph != phase_ || pos_ >= order.size()) {  // a new pass
    phase_ = ph;
    pos_ = 0;
  }
  if (order[pos_] != block) {
    // Every rank runs the same model, so every rank stops here: the gathers already queued
    // come back first (each rank issued the same ones), then the error.
    const std::int64_t expected = order[pos_];
    drain();
    for (std::size_t u = 0; u < acquired_.size(); ++u) {
      if (acquired_[u]) release_unit(static_cast<std::int64_t>(u) - 1);
    }
    ahead_.clear();
    phase_ = -1;
    throw std::logic_error("ZeRO-3 prefetch order: the " + std::string(kPhaseName[ph]) +
                           " pass asked for " + unit_name(block) + " (unit " +
                           std::to_string(block) + ") but the prefetch order expected " +
                           unit_name(expected) + " (unit " + std::to_string(expected) +
                           ") at position " + std::to_string(pos_) + " of the pass");
  }
  ++pos_;
  if (!ahead_.empty() && ahead_.front() == block) ahead_.pop_front();
  acquire(block);
  // The next units of this pass, started now so they run under this unit's compute.
  for (std::size_t k = pos_; k < order.size() && k < pos_ + std::size_t(options_.prefetch); ++k) {
    if (acquired_[unit_index(order[k])]) continue;
    acquire(order[k]);
    ahead_.push_back(order[k]);
    ++prefetched_;
  }
  wait_unit(block);
}

void ZeroStage3::after_block(std::int64_t block, Phase) { release_unit(block); }

void ZeroStage3::gather_bucket(std::size_t b) {
  const ZeroBucket& z = partition_.buckets()[b];
  Tensor in = param_shard_.flat_slice(shard_offsets()[b], z.shard);
  Tensor out = state_[b].gathered;
  gather_comm_->all_gather(in, out);
}

// Stage 2's reduce-scatter of bucket b, from an FP32 copy of 16-bit gradients (chapter 4's
// staging, alive for this bucket only) or the FP32 gradients themselves.
void ZeroStage3::reduce_bucket(std::size_t b) {
  const ZeroBucket& z = partition_.buckets()[b];
  Tensor grads = registry_.flat_grads().flat_slice(z.begin, z.count);
  Tensor work = grads;
  if (dtype_size(grads.dtype()) < 4) {
    work = Tensor::empty({z.count}, DType::kF32, MemCategory::kCommBuffers, grads.device());
    work.copy_from(grads);
  }
  reduce_scatter_bucket(b, work, divisor_);
}

void ZeroStage3::gather_full(Tensor& flat) {
  drain();
  const auto& buckets = partition_.buckets();
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    Tensor out = Tensor::empty({buckets[b].padded}, param_shard_.dtype(),
                               MemCategory::kCommBuffers);
    Tensor in = param_shard_.flat_slice(shard_offsets()[b], buckets[b].shard);
    gather_comm_->all_gather(in, out);
    Tensor dst = flat.flat_slice(buckets[b].begin, buckets[b].count);
    dst.copy_from(out.flat_slice(0, buckets[b].count));
  }
}

void ZeroStage3::thread_main() {
  LedgerScope scope(*ledger_);
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || (!queue_.empty() && !error_); });
    if (stop_) return;
    run_front(lock);
  }
}

// Under tp: the queued jobs, in order, on the calling (compute) thread; an error is thrown here.
void ZeroStage3::run_queued_here() {
  std::unique_lock lock(mu_);
  while (!queue_.empty() && !error_) run_front(lock);
  if (error_) std::rethrow_exception(error_);
}

// The queue's first job, with mu_ held by `lock` on entry and on return (released meanwhile).
void ZeroStage3::run_front(std::unique_lock<std::mutex>& lock) {
  {
    const Job job = queue_.front();
    const std::size_t b = job.bucket;
    lock.unlock();
    const double start = trace_now_us();
    try {
      if (job.reduce) {
        reduce_bucket(b);
      } else {
        gather_bucket(b);
      }
    } catch (...) {
      lock.lock();
      error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    const double end = trace_now_us();
    lock.lock();
    queue_.pop_front();
    if (!job.reduce) state_[b].done = true;
    comm_seconds_ += (end - start) * 1e-6;
    spans_.push_back({(job.reduce ? "reduce_scatter grads bucket " : "all_gather params bucket ") +
                          std::to_string(b) + " (" + format_bytes(state_[b].gathered.nbytes()) +
                          ")",
                      "comm", dp_.rank(), 2, start, end - start});
    cv_.notify_all();
  }
}

}  // namespace mixpar::ch05
