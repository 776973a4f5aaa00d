// The reducer's bookkeeping (which entries are final, which buckets may go) lives under one
// mutex; the communication thread takes the next complete bucket, reduces it without the lock,
// and records its span. Buckets are reduced strictly in index order on every rank.
#include "bucket_reducer.h"

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

#include "ops/elementwise.h"

namespace mixpar::ch04 {

std::vector<Bucket> make_buckets(std::span<const ParamEntry> entries, DType dtype,
                                 std::size_t cap_bytes, const BucketBoundary& close_after) {
  std::vector<Bucket> buckets;
  Bucket current;
  for (std::size_t k = entries.size(); k-- > 0;) {
    const ParamEntry& e = entries[k];
    const std::int64_t n = shape_numel(held_shape(e.shape, e.holding));  // a tp shard's own
    if (current.entries.empty()) current.begin = e.offset + n;
    if (e.offset + n != current.begin) {
      throw std::invalid_argument("make_buckets: '" + e.name +
                                  "' is not laid out right before the previous parameter");
    }
    current.begin = e.offset;
    current.count += n;
    current.entries.push_back(k);
    if (static_cast<std::size_t>(current.count) * dtype_size(dtype) >= cap_bytes ||
        (close_after && close_after(k))) {
      buckets.push_back(std::move(current));
      current = Bucket{};
    }
  }
  if (!current.entries.empty()) buckets.push_back(std::move(current));
  return buckets;
}

BucketReducer::BucketReducer(Communicator& comm, const ParamRegistry& registry,
                             ReducerConfig config)
    : comm_(comm),
      config_(config),
      flat_grads_(registry.flat_grads()),
      buckets_(make_buckets(registry.entries(), flat_grads_.dtype(), config.bucket_cap_bytes,
                            config.close_after)),
      bucket_of_(registry.entries().size()),
      ledger_(&current_ledger()),
      marked_(registry.entries().size(), false),
      pending_(buckets_.size(), 0) {
  const bool stage = config_.reduce_in_fp32 && dtype_size(flat_grads_.dtype()) < 4;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    for (std::size_t e : buckets_[b].entries) bucket_of_[e] = b;
    staging_.push_back(stage ? Tensor::empty({buckets_[b].count}, DType::kF32,
                                             MemCategory::kCommBuffers, flat_grads_.device())
                             : Tensor());
    if (staging_.back().defined() && config_.release_staging) {
      staging_.back().release_storage("FP32 staging of bucket " + std::to_string(b));
    }
  }
  if (config_.overlap) thread_ = std::thread([this] { thread_main(); });
}

BucketReducer::~BucketReducer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BucketReducer::begin(double divisor) {
  std::lock_guard lock(mu_);
  rethrow_if_failed();
  if (open_) throw std::logic_error("BucketReducer::begin: the previous backward never finished");
  open_ = true;
  divisor_ = divisor;
  marked_.assign(marked_.size(), false);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b] = static_cast<int>(buckets_[b].entries.size());
  }
  launchable_ = 0;
  done_ = 0;
}

void BucketReducer::advance_launchable() {
  while (launchable_ < buckets_.size() && pending_[launchable_] == 0) ++launchable_;
}

void BucketReducer::rethrow_if_failed() {
  if (error_) std::rethrow_exception(error_);
}

void BucketReducer::mark_ready(std::size_t entry) {
  {
    std::lock_guard lock(mu_);
    if (!open_) throw std::logic_error("BucketReducer::mark_ready outside begin()/finish()");
    if (entry >= marked_.size() || marked_[entry]) {
      throw std::logic_error("BucketReducer::mark_ready: entry " + std::to_string(entry) +
                             " is unknown or already marked");
    }
    marked_[entry] = true;
    --pending_[bucket_of_[entry]];
    advance_launchable();
  }
  cv_.notify_all();
}

double BucketReducer::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  if (!open_) throw std::logic_error("BucketReducer::finish without begin()");
  ready_before_finish_ = launchable_;
  for (std::size_t e = marked_.size(); e-- > 0;) {
    if (!marked_[e]) {
      marked_[e] = true;
      --pending_[bucket_of_[e]];
    }
  }
  advance_launchable();
  if (config_.overlap) {
    cv_.notify_all();
    cv_.wait(lock, [&] { return done_ == buckets_.size() || error_; });
  } else {
    lock.unlock();
    for (std::size_t b = 0; b < buckets_.size(); ++b) reduce_bucket(b);
    lock.lock();
    done_ = buckets_.size();
  }
  open_ = false;
  rethrow_if_failed();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BucketReducer::wait_for_bucket(std::size_t i) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_ > i || error_ || !config_.overlap; });
  rethrow_if_failed();
}

void BucketReducer::thread_main() {
  LedgerScope scope(*ledger_);
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || (open_ && !error_ && done_ < launchable_); });
    if (stop_) return;
    const std::size_t b = done_;
    lock.unlock();
    try {
      reduce_bucket(b);
    } catch (...) {
      lock.lock();
      error_ = std::current_exception();
      cv_.notify_all();
      continue;
    }
    lock.lock();
    ++done_;
    cv_.notify_all();
  }
}

// Sum over ranks, then the mean: FP32 staging for 16-bit gradients unless asked otherwise.
void BucketReducer::reduce_bucket(std::size_t i) {
  const double start = trace_now_us();
  Tensor grads = flat_grads_.flat_slice(buckets_[i].begin, buckets_[i].count);
  Tensor work = staging_[i].defined() ? staging_[i] : grads;
  if (staging_[i].defined()) {
    work.restore_storage();  // no-op unless release_staging
    work.copy_from(grads);
  }
  if (config_.bucket_op) {
    config_.bucket_op(i, work, divisor_);
  } else {
    all_reduce_with(config_.algo, comm_, work, ReduceOp::kSum, config_.ring);
    if (divisor_ != 1.0) ops::scale(work, 1.0 / divisor_);
  }
  if (staging_[i].defined()) grads.copy_from(work, Saturation::kNoSat);
  const std::size_t work_bytes = work.nbytes();
  if (staging_[i].defined() && config_.release_staging) {
    work.release_storage("FP32 staging of bucket " + std::to_string(i));
  }
  const double end = trace_now_us();
  std::lock_guard lock(mu_);
  comm_seconds_ += (end - start) * 1e-6;
  spans_.push_back({std::string(config_.bucket_op ? "reduce_scatter" : "all_reduce") +
                        " bucket " + std::to_string(i) + " (" +
                        format_bytes(work_bytes) + ")",
                    "comm", comm_.rank(), config_.overlap ? 1 : 0, start, end - start});
}

double BucketReducer::take_comm_seconds() {
  std::lock_guard lock(mu_);
  const double s = comm_seconds_;
  comm_seconds_ = 0;
  return s;
}

std::vector<TraceSpan> BucketReducer::take_spans() {
  std::lock_guard lock(mu_);
  return std::exchange(spans_, {});
}

}  // namespace mixpar::ch04
