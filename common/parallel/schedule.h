// Schedule: who runs a step's micro-batches, in which order, on this rank's model stage. The
// trainer asks it for one optimizer step and knows nothing of the order: chapter 7's
// pipeline schedules (GPipe, 1F1B, interleaved, zero-bubble) are other implementations of the
// same call. SingleStage is the one a model held whole on every rank needs: forward and
// backward of each micro-batch in turn, gradients accumulating, the gradient sync told when
// the last backward starts so it can send buckets while that backward still runs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/token_loader.h"
#include "model/gpt.h"
#include "parallel/grad_sync.h"
#include "trace/chrome_trace.h"

namespace mixpar {

// What a step's schedule did on this rank.
struct ScheduleResult {
  double loss_sum = 0;  // sum of the micro-batches' mean losses (last stage; 0 elsewhere)
  std::int64_t position = 0, epoch = 0;  // where the step's first micro-batch starts
  double compute_s = 0;                  // forward and backward
};

class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual std::string describe() const = 0;
  // Micro-batches per optimizer step.
  virtual int micro_batches() const = 0;
  // One step: every micro-batch's forward and backward on `model`, each batch from
  // next_batch(); sync.last_backward_starts() right before the step's last backward on this
  // rank. The seed of each backward is backward_seed(sync, loss_scale, micro_batches()).
  // Compute spans go to spans (thread 0 of `rank`).
  virtual ScheduleResult run_step(GptModel& model, const std::function<TokenBatch()>& next_batch,
                                  StepSync& sync, float loss_scale, int rank,
                                  std::vector<TraceSpan>& spans) = 0;
  // After the gradient sync's finish(): what the schedule still combines across its stages
  // (chapter 7: the tied wte's copies on the first and last stage). Nothing by default.
  virtual void after_sync(GptModel& /*model*/) {}
};

class SingleStage final : public Schedule {
 public:
  explicit SingleStage(int micro_batches);
  std::string describe() const override;
  int micro_batches() const override { return m_; }
  ScheduleResult run_step(GptModel& model, const std::function<TokenBatch()>& next_batch,
                          StepSync& sync, float loss_scale, int rank,
                          std::vector<TraceSpan>& spans) override;

 private:
  int m_;
};

}  // namespace mixpar
