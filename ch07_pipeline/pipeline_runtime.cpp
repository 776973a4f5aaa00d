#include "ch07_pipeline/pipeline_runtime.h"

#include <stdexcept>

#include "ch07_pipeline/bubble.h"
#include "ch07_pipeline/schedule_simulator.h"
#include "report/format.h"

namespace mixpar::ch07 {
namespace {

int own_chunk(const Transfer& t, const PipelineLayout& l) {
  // A send comes from the producing stage; a receive lands on the stage after (activation)
  // or before (gradient) it.
  const int stage = t.send ? t.from_stage
                           : t.from_stage + (t.what == Payload::kActivation ? 1 : -1);
  return l.chunk_of(stage);
}

}  // namespace

double execute(const RankProgram& program, const PipelineLayout& layout, Communicator& pp,
               StageWork& work, std::vector<TraceSpan>& spans, int trace_rank) {
  double compute_s = 0;
  for (const Action& a : program) {
    const double t0 = trace_now_us();
    switch (a.work) {
      case Work::kForward: work.forward(a.micro_batch, a.chunk); break;
      case Work::kBackward: work.backward(a.micro_batch, a.chunk); break;
      case Work::kBackwardInput: work.backward_input(a.micro_batch, a.chunk); break;
      case Work::kBackwardWeight: work.backward_weight(a.micro_batch, a.chunk); break;
      case Work::kOverlapForwardBackward:
        // DualPipeV's pair, one after the other on a CPU (the simulator's F&B = T_F + T_B).
        work.forward(a.micro_batch, a.chunk);
        work.backward(a.bwd_micro_batch, a.bwd_chunk);
        break;
      case Work::kTransfer: {
        const Transfer* send = nullptr;
        const Transfer* recv = nullptr;
        for (const Transfer& t : a.transfers) (t.send ? send : recv) = &t;
        if (a.transfers.size() > 2 || (a.transfers.size() == 2 && (!send || !recv))) {
          throw std::invalid_argument("pipeline runtime: a transfer posts one send and one "
                                      "receive at most, got '" + describe(a, layout) + "'");
        }
        if (send && recv && pp.sends_wait_for_receiver()) {
          const Tensor& out = work.send_buffer(send->what, send->micro_batch, own_chunk(*send, layout));
          Tensor& in = work.receive_buffer(recv->what, recv->micro_batch, own_chunk(*recv, layout));
          pp.sendrecv(out, send->peer, in, recv->peer, message_tag(send->what, layout));
        } else if (send && recv) {
          // Buffered sends: the send returns at once, then the receive. Not sendrecv, whose
          // send may wait for its receiver (MPI_Sendrecv, the local backend above its eager
          // limit): the pre-flight play, with buffered sends, would not describe it.
          pp.send(work.send_buffer(send->what, send->micro_batch, own_chunk(*send, layout)),
                  send->peer, message_tag(send->what, layout));
          pp.recv(work.receive_buffer(recv->what, recv->micro_batch, own_chunk(*recv, layout)),
                  recv->peer, message_tag(recv->what, layout));
        } else if (send) {
          pp.send(work.send_buffer(send->what, send->micro_batch, own_chunk(*send, layout)),
                  send->peer, message_tag(send->what, layout));
        } else if (recv) {
          pp.recv(work.receive_buffer(recv->what, recv->micro_batch, own_chunk(*recv, layout)),
                  recv->peer, message_tag(recv->what, layout));
        }
        for (const Transfer& t : a.transfers) work.transferred(t, own_chunk(t, layout));
        break;
      }
    }
    const double dur = trace_now_us() - t0;
    const bool compute = a.work != Work::kTransfer;
    if (compute) compute_s += dur * 1e-6;
    spans.push_back({describe(a, layout), compute ? "compute" : "exposed", trace_rank, 0, t0, dur});
  }
  return compute_s;
}

GptStageWork::GptStageWork(std::vector<GptModel*> chunks, const PipelinePlan& plan, int rank,
                           const std::vector<TokenBatch>& batches, float loss_seed)
    : chunks_(std::move(chunks)),
      layout_(plan.layout),
      rank_(rank),
      batches_(batches),
      loss_seed_(loss_seed),
      backwards_left_(plan.layout.micro_batches * plan.layout.virtual_stages),
      inputs_done_(chunks_.size(), 0),
      weights_done_(chunks_.size(), 0) {
  if (static_cast<int>(chunks_.size()) != layout_.virtual_stages) {
    throw std::invalid_argument("GptStageWork: " + std::to_string(chunks_.size()) +
                                " chunks for " + std::to_string(layout_.virtual_stages) +
                                " virtual stages");
  }
  for (int c = 0; c < layout_.virtual_stages; ++c) {
    const GptStage& st = chunk(c).stage();
    if (st.index != layout_.stage_of(rank_, c) || st.count != layout_.stages()) {
      throw std::invalid_argument("GptStageWork: chunk " + std::to_string(c) + " of rank " +
                                  std::to_string(rank_) + " runs stage " +
                                  std::to_string(st.index) + " of " + std::to_string(st.count));
    }
  }
  if (static_cast<int>(batches_.size()) != layout_.micro_batches) {
    throw std::invalid_argument("GptStageWork: " + std::to_string(batches_.size()) +
                                " batches for " + std::to_string(layout_.micro_batches) +
                                " micro-batches");
  }
  // The V's rank 0: the embedding and the head add to one wte gradient (wte_grad_shared),
  // which starts the step at zero.
  for (GptModel* m : chunks_) {
    if (m->options().wte_grad_shared) {
      m->registry().at("wte.weight").grad.zero();
      break;
    }
  }
}

bool GptStageWork::local(int stage) const {
  return stage >= 0 && stage < layout_.stages() && layout_.rank_of(stage) == rank_;
}

void GptStageWork::forward(int mb, int c) {
  GptModel& model = chunk(c);
  const TokenBatch& b = batches_[static_cast<std::size_t>(mb)];
  const GptStage& st = model.stage();
  const std::span<const std::int32_t> tokens =
      st.is_first() ? std::span<const std::int32_t>(b.inputs) : std::span<const std::int32_t>();
  const std::span<const std::int32_t> targets =
      st.is_last() ? std::span<const std::int32_t>(b.targets) : std::span<const std::int32_t>();
  // Fed by a stage of this rank (the V's p - 1 -> p): its output handed over in memory.
  if (!st.is_first() && local(st.index - 1)) {
    model.prepare(b.B, b.T, mb);
    model.stage_input(mb).copy_from(chunk(layout_.chunk_of(st.index - 1)).stage_output(mb));
  }
  const double loss = model.forward(tokens, targets, b.B, b.T, mb);
  if (st.is_last()) loss_sum_ += loss;
}

void GptStageWork::start_backward(int mb, int c) {
  GptModel& model = chunk(c);
  const TokenBatch& b = batches_[static_cast<std::size_t>(mb)];
  if (model.stage().is_last()) return;  // the loss seeds it
  const int next = model.stage().index + 1;
  if (local(next)) {  // the gradient of a stage of this rank, handed over in memory
    const auto kept = grad_out_.find({mb, layout_.chunk_of(next)});
    if (kept == grad_out_.end()) {
      throw std::logic_error("pipeline runtime: backward of micro-batch " + std::to_string(mb) +
                             " on chunk " + std::to_string(c) + " before stage " +
                             std::to_string(next) + "'s on this rank");
    }
    model.prepare(b.B, b.T, mb);
    model.output_grad().copy_from(kept->second);
    grad_out_.erase(kept);
    return;
  }
  const auto it = grad_in_.find({mb, c});
  if (it == grad_in_.end()) {
    throw std::logic_error("pipeline runtime: backward of micro-batch " + std::to_string(mb) +
                           " on chunk " + std::to_string(c) + " before its gradient arrived");
  }
  model.prepare(b.B, b.T, mb);
  model.output_grad().copy_from(it->second);
  grad_in_.erase(it);
}

void GptStageWork::keep_input_grad(int mb, int c) {
  GptModel& model = chunk(c);
  if (model.stage().is_first()) return;
  Tensor g = Tensor::empty(model.input_grad().shape(), model.input_grad().dtype(),
                           MemCategory::kCommBuffers);
  g.copy_from(model.input_grad());
  grad_out_[{mb, c}] = std::move(g);
}

void GptStageWork::backward(int mb, int c) {
  GptModel& model = chunk(c);
  start_backward(mb, c);
  if (--backwards_left_ == 0 && last_backward_) last_backward_();
  const auto C = static_cast<std::size_t>(c);
  // The loss seed: loss_scale / m on the last stage, once; other stages start from the
  // gradient they received, which carries it already. The first backward of a step
  // overwrites the gradients, the others add to them.
  model.backward(loss_seed_, /*accumulate=*/inputs_done_[C] > 0, mb);
  ++inputs_done_[C];
  ++weights_done_[C];
  keep_input_grad(mb, c);
  model.release_slot(mb);
}

// B: the input gradient (sent back at once), the slot kept for W.
void GptStageWork::backward_input(int mb, int c) {
  start_backward(mb, c);
  const auto C = static_cast<std::size_t>(c);
  chunk(c).backward_input(loss_seed_, /*accumulate=*/inputs_done_[C] > 0, mb);
  ++inputs_done_[C];
  keep_input_grad(mb, c);
}

// W: the weight gradients; the step's last one is the gradient sync's cue (its hooks fire in
// W). W's run in micro-batch order on each chunk (ZB-H1 delays them first in, first out).
void GptStageWork::backward_weight(int mb, int c) {
  if (--backwards_left_ == 0 && last_backward_) last_backward_();
  const auto C = static_cast<std::size_t>(c);
  chunk(c).backward_weight(/*accumulate=*/weights_done_[C] > 0, mb);
  ++weights_done_[C];
  chunk(c).release_slot(mb);
}

Tensor& GptStageWork::receive_buffer(Payload what, int mb, int c) {
  GptModel& model = chunk(c);
  const TokenBatch& b = batches_[static_cast<std::size_t>(mb)];
  if (what == Payload::kActivation) {
    model.prepare(b.B, b.T, mb);
    return model.stage_input(mb);
  }
  Tensor& g = grad_in_[{mb, c}];
  g = Tensor::empty({b.B, b.T, model.config().n_embd}, model.options().dtype,
                    MemCategory::kCommBuffers);
  return g;
}

const Tensor& GptStageWork::send_buffer(Payload what, int mb, int c) {
  if (what == Payload::kActivation) return chunk(c).stage_output(mb);
  const auto it = grad_out_.find({mb, c});
  if (it == grad_out_.end()) {
    throw std::logic_error("pipeline runtime: sending the gradient of micro-batch " +
                           std::to_string(mb) + " before its backward");
  }
  return it->second;
}

void GptStageWork::transferred(const Transfer& t, int c) {
  if (t.send && t.what == Payload::kGradient) grad_out_.erase({t.micro_batch, c});
}

void sum_tied_embedding_grads(GptModel& model, Communicator* embedding) {
  if (embedding == nullptr || embedding->size() == 1) return;
  if (!model.registry().contains("wte.weight")) return;
  embedding->all_reduce(model.registry().at("wte.weight").grad, ReduceOp::kSum);
}

PipelineSchedule::PipelineSchedule(ScheduleKind kind, const PipelineLayout& layout,
                                   const ParallelGrid& grid)
    : plan_(make_plan(kind, layout)), grid_(&grid) {
  if (layout.pp != grid.shape().pp) {
    throw std::invalid_argument("PipelineSchedule: a plan for pp " + std::to_string(layout.pp) +
                                " on a grid with pp " + std::to_string(grid.shape().pp));
  }
  preflight(plan_, send_mode_of(grid.pp()));
}

std::vector<GptModel*> PipelineSchedule::chunks_of(GptModel& model) const {
  if (chunks_.empty()) return {&model};
  if (chunks_.front() != &model) {
    throw std::logic_error("PipelineSchedule: handed a model that is not the rank's chunk 0");
  }
  return chunks_;
}

std::string PipelineSchedule::describe() const { return preflight_summary(plan_); }

ScheduleResult PipelineSchedule::run_step(GptModel& model,
                                          const std::function<TokenBatch()>& next_batch,
                                          StepSync& sync, float loss_scale, int rank,
                                          std::vector<TraceSpan>& spans) {
  const int m = plan_.layout.micro_batches;
  std::vector<TokenBatch> batches;
  for (int k = 0; k < m; ++k) batches.push_back(next_batch());
  ScheduleResult r;
  r.position = batches.front().position;
  r.epoch = batches.front().epoch;
  // The seed of the last stage's backwards, where the loss is: divided by m there alone.
  const float seed = backward_seed(sync, loss_scale, m);
  const int stage = grid_->coord().pp;
  GptStageWork work(chunks_of(model), plan_, stage, batches, seed);
  work.on_last_backward([&sync, m] { sync.last_backward_starts(m); });
  r.compute_s = execute(plan_.ranks[static_cast<std::size_t>(stage)], plan_.layout, grid_->pp(),
                        work, spans, rank);
  r.loss_sum = work.loss_sum();
  return r;
}

// One chunk of the rank holds wte at most (chunk 0 of rank 0, chunk v - 1 of rank p - 1): one
// sum per rank of the embedding group.
void PipelineSchedule::after_sync(GptModel& model) {
  if (!sums_tied_copies_) return;  // the gradient sync summed them before reducing
  // The V: rank 0 holds the embedding and the head, one wte; no copy elsewhere to sum.
  if (plan_.layout.placement == Placement::kV) return;
  for (GptModel* chunk : chunks_of(model)) sum_tied_embedding_grads(*chunk, grid_->embedding());
}

std::string preflight_summary(const PipelinePlan& plan) {
  const PipelineLayout& l = plan.layout;
  const PlayResult unit = play(plan, SendMode::kEager);
  std::string s = std::string(schedule_name(plan.kind)) + " pipeline: " + num(l.pp) +
                  " stages x " + num(l.micro_batches) + " micro-batches";
  if (l.virtual_stages > 1) s += " x " + num(l.virtual_stages) + " virtual stages";
  s += ", warm-up " + num(warmup_forwards(plan.kind, l, 0)) + " forwards on rank 0";
  if (unit.ok) {
    s += ", bubble " + pct(bubble_fraction(unit.timeline)) + " at unit cost (formula " +
         bubble_formula_text(plan.kind) + " = " + pct(bubble_formula(plan.kind, l)) + ")";
  }
  if (l.micro_batches < l.pp) {
    s += "; fewer micro-batches than stages: each rank idles " +
         pct(bubble_formula(ScheduleKind::kOneFOneB, l)) + " of the step (--grad-accum " +
         num(l.pp) + " would leave " +
         pct(bubble_formula(ScheduleKind::kOneFOneB, {l.pp, l.pp, 1})) + ")";
  }
  return s;
}

}  // namespace mixpar::ch07
