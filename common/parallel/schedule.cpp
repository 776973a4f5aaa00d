#include "parallel/schedule.h"

#include <stdexcept>

namespace mixpar {

SingleStage::SingleStage(int micro_batches) : m_(micro_batches) {
  if (m_ < 1) throw std::invalid_argument("SingleStage: micro_batches < 1");
}

std::string SingleStage::describe() const {
  return "one stage: " + std::to_string(m_) + " micro-batch(es) per step, forward then backward";
}

ScheduleResult SingleStage::run_step(GptModel& model,
                                     const std::function<TokenBatch()>& next_batch,
                                     StepSync& sync, float loss_scale, int rank,
                                     std::vector<TraceSpan>& spans) {
  if (!model.stage().whole()) {
    throw std::logic_error("SingleStage runs a whole model, not pipeline stage " +
                           std::to_string(model.stage().index));
  }
  ScheduleResult r;
  const float seed = backward_seed(sync, loss_scale, m_);
  auto span = [&](const char* name, double t0) {
    const double dur = trace_now_us() - t0;
    r.compute_s += dur * 1e-6;
    spans.push_back({name, "compute", rank, 0, t0, dur});
  };
  for (int k = 0; k < m_; ++k) {
    const TokenBatch b = next_batch();
    if (k == 0) {
      r.position = b.position;
      r.epoch = b.epoch;
    }
    const double t0 = trace_now_us();
    r.loss_sum += model.forward(b.inputs, b.targets, b.B, b.T);
    span("forward", t0);
    if (k + 1 == m_) sync.last_backward_starts(m_);
    const double t1 = trace_now_us();
    model.backward(seed, /*accumulate=*/k > 0);
    span("backward", t1);
  }
  return r;
}

}  // namespace mixpar
