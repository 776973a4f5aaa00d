// DistributedDataParallel over GptModel: identical replicas (rank 0's weights broadcast, or one
// seed trusted and checked), gradients all-reduced bucket by bucket while backward still runs,
// no communication on the micro-steps of gradient accumulation, the mean over the global
// batch, and the loss-scaler decision agreed by every rank. Data and optimizer stay the caller's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ch04_ddp/bucket_reducer.h"
#include "ch04_ddp/bucketed_allreduce.h"
#include "trace/chrome_trace.h"
#include "comm/communicator.h"
#include "model/gpt.h"
#include "parallel/grad_sync.h"
#include "parallel/replicas.h"

namespace mixpar::ch04 {

// The replica machinery and the step's time split are common/parallel's (the trainer uses
// them without this class); chapter 4's names for them:
using mixpar::InitSync;
using mixpar::ReplicaCheck;
using mixpar::ReplicaMismatch;
using mixpar::StepTimes;
using mixpar::weights_hash;

struct DdpConfig {
  InitSync init = InitSync::kBroadcast;
  bool check_at_init = true;  // verify_replicas() at the end of the constructor
  ReducerConfig reducer;
};

// Whether the model reports each parameter's gradient as final during backward, which is
// what lets buckets go before backward ends. The hook, as GptModel declares it:
//   void set_grad_ready_hook(std::function<void(std::size_t entry)> hook);
// called on the backward thread once per parameter, with its index in registry().entries(),
// as soon as that parameter's gradient for this backward is written (or accumulated) for good:
// ln_f after the head, block L-1 .. 0 after each block's backward, then wpe and wte (tied: it is
// final only after the embedding's backward). Without it, buckets are reduced after backward.
bool model_reports_grad_ready();

class DistributedDataParallel {
 public:
  // Collective over comm (every rank constructs together). Syncs the initial weights as
  // config.init says and, when asked, checks them (ReplicaMismatch naming the ranks).
  DistributedDataParallel(GptModel& model, Communicator& comm, DdpConfig config = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // The model's forward on this rank's micro-batch (its rows of the global batch).
  double forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                 std::int64_t B, std::int64_t T);
  // Backward of the last forward. sync = false: a non-final micro-step, gradients accumulate
  // locally and nothing is sent. sync = true: the last micro-step; buckets are all-reduced as
  // backward finishes them and, when this returns, every rank holds the mean gradient over
  // the global batch (N ranks x the micro-steps since the last sync). The first micro-step
  // after a sync overwrites the gradients, the next ones add to them.
  void backward(float loss_scale = 1.0f, bool sync = true);
  // After backward(sync = false) calls: the same averaging all-reduce, now, with no overlap.
  // For callers that must touch their local gradients before the reduction.
  void reduce_gradients();

  // Collectives for the training loop: the mean of a per-rank value (the logged loss), and
  // found-inf agreed by every rank (all-reduce max: one rank's overflow skips everyone's step).
  double global_mean(double local);
  bool agree_found_inf(bool local_found_inf);

  // Collective: every rank's weights hash, compared. verify_replicas throws ReplicaMismatch.
  ReplicaCheck check_replicas();
  void verify_replicas();

  StepTimes take_step_times();          // since the last call
  std::vector<TraceSpan> take_spans();  // compute thread (0) and communication thread (1)
  const std::vector<Bucket>& buckets() const { return sync_->buckets(); }
  // Buckets of the last synchronising backward that went out while backward still ran (all
  // of them with the model's hook, none on the post-backward path).
  std::size_t buckets_sent_during_backward() const {
    return sync_->buckets_sent_during_backward();
  }
  bool overlaps() const { return sync_->overlaps(); }
  // The gradient sync this class drives (the trainer drives one like it directly).
  BucketedAllReduce& grad_sync() { return *sync_; }
  GptModel& model() { return model_; }
  Communicator& comm() { return comm_; }

 private:
  void span(const char* name, const char* cat, double start_us);
  GptModel& model_;
  Communicator& comm_;
  DdpConfig config_;
  std::unique_ptr<BucketedAllReduce> sync_;
  bool hooked_ = false;   // the model reports gradient readiness
  int micro_steps_ = 0;   // backward calls since the last synchronisation
  StepTimes times_;
  std::vector<TraceSpan> spans_;
};

}  // namespace mixpar::ch04
