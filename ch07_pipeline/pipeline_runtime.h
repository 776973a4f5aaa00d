// The pipeline runtime: executes one rank's action list, in order, over the pp communicator.
// It knows no schedule by name: a compute action calls the rank's StageWork, a transfer action
// sends and receives the tensors StageWork names (one send or receive alone; a send and a
// receive together as one sendrecv, posted at once, where sends wait for their receiver, and
// as a buffered send then the receive elsewhere, as the pre-flight play assumes). Every
// action becomes a trace span.
//
// GptStageWork runs the actions on GPT-2 chunks (GptModel stages, one per virtual stage of the
// rank): micro-batch k's activations live in slot k of its chunk from its forward to its
// backward (to its W when the backward is split); a received gradient waits in a buffer of its own until its backward, and an input
// gradient is copied out of the model's shared workspace as soon as its backward ends, so
// any order the pre-flight check accepts runs.
//
// PipelineSchedule is the trainer's Schedule (common/parallel/schedule.h) for pp > 1: the plan
// checked before any compute, the step's micro-batches read on every rank (the pp ranks of one
// replica read the same rows), the loss seed divided by m exactly once (on the last stage,
// where the loss is), and after the gradient sync the tied wte's two copies (first and last
// stage) summed over the grid's embedding group, so both hold the gradient of the whole model
// (unless the sync sums them before it reduces: leave_tied_copies_to_sync).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "ch07_pipeline/pipeline_schedule.h"
#include "comm/communicator.h"
#include "comm/parallel_grid.h"
#include "io/token_loader.h"
#include "model/gpt.h"
#include "parallel/grad_sync.h"
#include "parallel/schedule.h"
#include "trace/chrome_trace.h"

namespace mixpar::ch07 {

class StageWork {
 public:
  virtual ~StageWork() = default;
  virtual void forward(int micro_batch, int chunk) = 0;
  virtual void backward(int micro_batch, int chunk) = 0;
  virtual void backward_input(int micro_batch, int chunk) = 0;
  virtual void backward_weight(int micro_batch, int chunk) = 0;
  // The tensor a transfer of this rank's `chunk` receives into or sends from.
  virtual Tensor& receive_buffer(Payload what, int micro_batch, int chunk) = 0;
  virtual const Tensor& send_buffer(Payload what, int micro_batch, int chunk) = 0;
  // After a transfer's message has left (send) or arrived (receive).
  virtual void transferred(const Transfer&, int /*chunk*/) {}
};

// Runs `program` (this rank's list of `layout`) over `pp`, whose rank is this pipeline rank.
// Spans (thread 0 of trace_rank): "F mb0", "B mb0", ... ("compute") and each transfer
// ("exposed": the compute thread waits for it). Returns the seconds spent in compute actions.
double execute(const RankProgram& program, const PipelineLayout& layout, Communicator& pp,
               StageWork& work, std::vector<TraceSpan>& spans, int trace_rank);

// The rank's model chunks (chunk c of rank r runs virtual stage c p + r), the step's batches
// (one per micro-batch, the same on every rank) and the seed of the last stage's backward.
class GptStageWork final : public StageWork {
 public:
  // chunks[c] must run GptStage layout.stage_of(rank, c) of layout.stages(). A split
  // backward (B, then W later) runs GptModel::backward_input and backward_weight: the slot
  // of a micro-batch is kept from its forward to its W.
  GptStageWork(std::vector<GptModel*> chunks, const PipelinePlan& plan, int rank,
               const std::vector<TokenBatch>& batches, float loss_seed);

  void forward(int micro_batch, int chunk) override;
  void backward(int micro_batch, int chunk) override;
  void backward_input(int micro_batch, int chunk) override;
  void backward_weight(int micro_batch, int chunk) override;
  Tensor& receive_buffer(Payload what, int micro_batch, int chunk) override;
  const Tensor& send_buffer(Payload what, int micro_batch, int chunk) override;
  void transferred(const Transfer& t, int chunk) override;

  // Sum of the micro-batches' mean losses (the last stage; 0 elsewhere).
  double loss_sum() const { return loss_sum_; }
  // Called right before the rank's last backward (or W) of the step: the gradient sync's cue.
  void on_last_backward(std::function<void()> f) { last_backward_ = std::move(f); }

 private:
  GptModel& chunk(int c) { return *chunks_[static_cast<std::size_t>(c)]; }
  void start_backward(int micro_batch, int chunk);  // the received gradient into output_grad()
  void keep_input_grad(int micro_batch, int chunk);  // input_grad() out of the workspace
  bool local(int stage) const;  // a stage this rank runs (the V: p - 1 and p on rank p - 1)
  std::vector<GptModel*> chunks_;
  PipelineLayout layout_;
  int rank_;
  const std::vector<TokenBatch>& batches_;
  float loss_seed_;
  double loss_sum_ = 0;
  int backwards_left_;  // backward or W actions still to run this step
  // By chunk, the backwards (or B's) and the W's run: the first of a step overwrites the
  // gradients it writes, the later ones add to them.
  std::vector<int> inputs_done_, weights_done_;
  std::map<std::pair<int, int>, Tensor> grad_in_, grad_out_;  // (micro-batch, chunk)
  std::function<void()> last_backward_;
};

// Sums the tied wte gradient over the embedding group (first and last stage). A no-op when
// the group is this rank alone or the model (chunk) holds no wte.
void sum_tied_embedding_grads(GptModel& model, Communicator* embedding);

class PipelineSchedule final : public Schedule {
 public:
  // make_plan + preflight (InputError, ScheduleRefused) before any compute. `grid` must
  // outlive the schedule; its pp degree is the plan's.
  PipelineSchedule(ScheduleKind kind, const PipelineLayout& layout, const ParallelGrid& grid);
  // v > 1 (interleaved, zb-v, dualpipev): the rank's model chunks, chunk c running virtual
  // stage layout.stage_of(r, c) (loop: c p + r; V: r, 2p - 1 - r)
  // (model_chunks.h); chunks[0] is the model run_step and after_sync are handed. They must
  // outlive the schedule. With v = 1 nothing is set: the model handed is the rank's one chunk.
  void set_chunks(std::vector<GptModel*> chunks) { chunks_ = std::move(chunks); }
  // The gradient sync sums the tied wte's two stage copies itself, before it reduces (a
  // reduce-scatter leaves each dp rank only its shard: chapter 8's TiedEmbeddingFirst):
  // after_sync then has nothing to sum. Whoever builds both says so (ch08's factory).
  void leave_tied_copies_to_sync() { sums_tied_copies_ = false; }
  std::string describe() const override;
  int micro_batches() const override { return plan_.layout.micro_batches; }
  ScheduleResult run_step(GptModel& model, const std::function<TokenBatch()>& next_batch,
                          StepSync& sync, float loss_scale, int rank,
                          std::vector<TraceSpan>& spans) override;
  void after_sync(GptModel& model) override;
  const PipelinePlan& plan() const { return plan_; }

 private:
  std::vector<GptModel*> chunks_of(GptModel& model) const;
  PipelinePlan plan_;
  const ParallelGrid* grid_;
  std::vector<GptModel*> chunks_;
  bool sums_tied_copies_ = true;  // in after_sync
};

// The pre-flight summary line of a plan: the schedule, its warm-up, the unit-cost bubble
// beside the formula, and the cost of fewer micro-batches than stages when m < p.
std::string preflight_summary(const PipelinePlan& plan);

}  // namespace mixpar::ch07
