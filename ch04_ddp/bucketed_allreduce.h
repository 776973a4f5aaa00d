// Chapter 4's gradient synchronisation as the trainer's GradSync: the gradients of the dp
// replicas all-reduced bucket by bucket (bucket_reducer.h) while the step's last backward still
// runs, and divided by dp x micro-batches, so every replica ends the step holding the mean
// gradient of the global batch. DistributedDataParallel (ddp.h) drives one of these; so does
// chapter 8's trainer, through the GradSync interface alone.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ch04_ddp/bucket_reducer.h"
#include "comm/communicator.h"
#include "model/gpt_params.h"
#include "parallel/grad_sync.h"

namespace mixpar::ch04 {

// A replica: every rank owns every parameter whole (ReplicatedGradSync).
class BucketedAllReduce final : public ReplicatedGradSync {
 public:
  // dp: the replicas' communicator, used by the communication thread between
  // last_backward_starts() and finish() only. model_reports_ready: the model calls
  // grad_ready() during backward (GptModel does), so buckets can leave before backward ends.
  BucketedAllReduce(Communicator& dp, const ParamRegistry& registry, ReducerConfig config,
                    bool model_reports_ready = true);

  std::string describe() const override;
  bool averages() const override { return true; }
  void begin_step() override {}
  void last_backward_starts(int micro_batches) override;
  void grad_ready(std::size_t entry) override;
  double finish() override;
  double take_comm_seconds() override { return reducer_->take_comm_seconds(); }
  std::vector<TraceSpan> take_spans() override { return reducer_->take_spans(); }
  std::uint64_t own_bytes_sent() const override { return 0; }  // dp's bytes only

  const std::vector<Bucket>& buckets() const { return reducer_->buckets(); }
  std::size_t buckets_sent_during_backward() const { return reducer_->ready_before_finish(); }
  bool overlaps() const { return model_reports_ready_ && config_.overlap; }

 private:
  Communicator& dp_;
  ReducerConfig config_;
  bool model_reports_ready_;
  bool open_ = false;  // between last_backward_starts() and finish()
  std::unique_ptr<BucketReducer> reducer_;
};

}  // namespace mixpar::ch04
