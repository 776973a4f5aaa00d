// The lesson's training loop. One optimizer step: micro-batches through DDP, the global loss,
// the loss scaler's check (agreed or not, before or after the all-reduce), AdamW, then the
// weights hash and the replica check that the failure modes are judged by.
#include "ddp_lesson.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "comm/local_backend.h"
#include "io/addition_data.h"
#include "io/token_loader.h"
#include "ops/compute_threads.h"
#include "optim/clip.h"

namespace mixpar::ch04 {
namespace {

// Everything one rank trains with (owned by train_rank's frame).
struct RankState {
  const LessonConfig& c;
  Communicator& comm;
  GptModel& model;
  DistributedDataParallel& ddp;
  TokenLoader& loader;
  std::vector<Tensor>& grads;
  AdamW& opt;
  ch02::LossScaler& scaler;
};

GptOptions model_options(const LessonConfig& c, int rank) {
  GptOptions o;
  o.dtype = c.dtype;
  o.seed = c.seed + (c.seed_per_rank ? static_cast<std::uint64_t>(rank) : 0);
  return o;
}

std::vector<Tensor> tensors(const std::vector<NamedTensor>& named) {
  std::vector<Tensor> out;
  for (const NamedTensor& n : named) out.push_back(n.tensor);
  return out;
}

// Forward and backward of every micro-batch; returns this rank's mean loss.
double micro_steps(RankState& s, int step, StepLog& log) {
  const LessonConfig& c = s.c;
  const bool sync_in_backward = c.order == ScalerOrder::kReduceThenUnscale;
  double local = 0;
  for (int m = 0; m < c.accum; ++m) {
    const TokenBatch b = s.loader.next();
    for (std::int64_t row = 0; row < b.B; ++row) log.rows.push_back(b.position + row * b.T);
    local += s.ddp.forward(b.inputs, b.targets, b.B, b.T);
    float scale = s.scaler.scale();
    // A forced overflow on one rank: its scaled gradients become inf/NaN in backward.
    if (step == c.overflow_step && s.comm.rank() == c.overflow_rank) {
      scale = std::numeric_limits<float>::infinity();
    }
    s.ddp.backward(scale, sync_in_backward && m == c.accum - 1);
  }
  return local / c.accum;
}

StepLog train_step(RankState& s, int step) {
  const LessonConfig& c = s.c;
  StepLog log;
  log.scale = s.scaler.scale();
  log.local_loss = micro_steps(s, step, log);
  log.loss = s.ddp.global_mean(log.local_loss);
  // kReduceThenUnscale: the gradients are already averaged (and identical on every rank);
  // kUnscaleThenReduce: they are still this rank's own.
  bool found_inf = s.scaler.unscale_and_check(s.grads);
  if (c.agree_found_inf) found_inf = s.ddp.agree_found_inf(found_inf);
  if (c.order == ScalerOrder::kUnscaleThenReduce) s.ddp.reduce_gradients();
  log.taken = s.scaler.update(found_inf);
  log.grad_norm = std::numeric_limits<double>::quiet_NaN();
  if (log.taken) {
    log.grad_norm = global_grad_norm(s.grads);
    s.opt.step(s.grads);
  }
  log.weights_hash = weights_hash(s.model.registry().flat_params());
  if (c.check_replicas_each_step) log.replicas_agree = s.ddp.check_replicas().ok;
  log.times = s.ddp.take_step_times();
  return log;
}

}  // namespace

Tokens lesson_tokens(std::uint64_t data_seed) {
  AdditionConfig a;
  a.train_tokens = std::int64_t{1} << 15;
  a.seed = data_seed;
  return std::make_shared<const std::vector<std::uint16_t>>(
      make_addition_dataset(a).train_tokens);
}

RankRun train_rank(Communicator& comm, const LessonConfig& c, const Tokens& tokens) {
  if (c.threads_per_rank > 0) ops::set_compute_threads(c.threads_per_rank);
  else ops::share_cores(comm.backend() == "local" ? comm.size() : 1);
  GptModel model(c.model, model_options(c, comm.rank()));
  DistributedDataParallel ddp(model, comm, c.ddp);
  // The same-data bug: every rank takes rank 0's rows of a one-rank global batch.
  TokenLoader loader(tokens, c.B, c.T, DataOrder::kSequential, c.data_seed,
                     c.same_data ? 0 : comm.rank(), c.same_data ? 1 : comm.size());
  std::vector<Tensor> grads = tensors(model.gradients());
  AdamW opt(tensors(model.parameters()), c.adamw);
  ch02::LossScaler scaler(c.scaler);
  RankState s{c, comm, model, ddp, loader, grads, opt, scaler};
  RankRun run;
  run.rank = comm.rank();
  for (int step = 0; step < c.steps; ++step) run.steps.push_back(train_step(s, step));
  run.final_weights = model.registry().flat_params().to_floats();
  run.spans = ddp.take_spans();
  run.buckets = static_cast<int>(ddp.buckets().size());
  return run;
}

RankRun train_rank(Communicator& comm, const LessonConfig& c) {
  return train_rank(comm, c, lesson_tokens(c.data_seed));
}

std::vector<RankRun> run_local_ddp(int ranks, const LessonConfig& c) {
  const Tokens tokens = lesson_tokens(c.data_seed);
  std::vector<RankRun> runs(static_cast<std::size_t>(ranks));
  run_local(ranks, [&](Communicator& comm) {
    runs[static_cast<std::size_t>(comm.rank())] = train_rank(comm, c, tokens);
  });
  return runs;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a[i]) - double(b[i])) / std::max(1.0, std::abs(double(b[i])));
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

std::vector<double> losses(const RankRun& r) {
  std::vector<double> out;
  for (const StepLog& s : r.steps) out.push_back(s.loss);
  return out;
}

}  // namespace mixpar::ch04
