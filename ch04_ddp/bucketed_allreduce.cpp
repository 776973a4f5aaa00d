#include "ch04_ddp/bucketed_allreduce.h"

#include <cstdio>


namespace mixpar::ch04 {

BucketedAllReduce::BucketedAllReduce(Communicator& dp, const ParamRegistry& registry,
                                     ReducerConfig config, bool model_reports_ready)
    : dp_(dp),
      config_(config),
      model_reports_ready_(model_reports_ready),
      reducer_(std::make_unique<BucketReducer>(dp, registry, config)) {}

std::string BucketedAllReduce::describe() const {
  char cap[32];
  std::snprintf(cap, sizeof cap, "%g", static_cast<double>(config_.bucket_cap_bytes) / (1 << 20));
  return "gradients in " + std::to_string(reducer_->buckets().size()) + " bucket(s) of <= " +
         cap + " MiB, all-reduced (" + algo_name(config_.algo) + ") " +
         (overlaps() ? "during backward, on a communication thread" : "after backward") +
         ", averaged over the global batch";
}

void BucketedAllReduce::last_backward_starts(int micro_batches) {
  reducer_->begin(static_cast<double>(dp_.size()) * micro_batches);
  open_ = true;
}

void BucketedAllReduce::grad_ready(std::size_t entry) {
  if (open_) reducer_->mark_ready(entry);
}

double BucketedAllReduce::finish() {
  open_ = false;
  return reducer_->finish();  // marks what the model did not report, waits for the last buckets
}

}  // namespace mixpar::ch04
