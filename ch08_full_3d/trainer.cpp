// One training step in chapter 3's order: forward and backward of each micro-batch (loss scale on
// the seed gradient), then unscale -> inf check -> clip -> AdamW on the FP32 masters -> re-cast.
// Data parallel, chapter 4's DDP wraps forward and backward: the last micro-batch's backward
// all-reduces the gradients bucket by bucket, and the inf check is agreed by every rank.
#include "trainer.h"

#include <Eigen/Core>
#include <chrono>
#include <stdexcept>
#include <utility>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "model/gpt_hf.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace {

TrainerConfig validated(TrainerConfig c) {
  validate(c);
  return c;
}

GptOptions model_options(const TrainerConfig& c) {
  GptOptions o;
  o.dtype = c.dtype;
  o.seed = c.seed;
  o.recompute = c.recompute;
  return o;
}

ch03::MixedPrecisionConfig optimizer_config(const TrainerConfig& c, const GptModel& model) {
  ch03::MixedPrecisionConfig m;
  m.optimizer = ch03::OptimizerKind::kAdamW;
  m.adamw = AdamWConfig{c.schedule.lr, c.beta1, c.beta2, c.eps, c.weight_decay};
  // GPT-2's two param groups: 2-D weights decay, biases and LayerNorm gains do not.
  for (const ParamEntry& e : model.registry().entries()) {
    m.weight_decay_mask.push_back(e.weight_decay);
  }
  m.max_grad_norm = c.grad_clip;
  // Only fp16 needs a scaler: bf16 has FP32's exponent range, so small gradients survive.
  m.scaler = c.dtype == DType::kF16 ? ch02::pytorch_config() : ch02::no_scaling_config();
  if (c.dtype == DType::kF16) m.scaler.init_scale = c.loss_scale;
  return m;
}

ch04::DdpConfig ddp_config(const TrainerConfig& c) {
  ch04::DdpConfig d;
  d.init = c.init_sync;
  d.reducer.bucket_cap_bytes = static_cast<std::size_t>(c.bucket_mb * 1024.0 * 1024.0);
  d.reducer.algo = c.allreduce;
  d.reducer.overlap = c.overlap;
  return d;
}

std::unique_ptr<ch04::DistributedDataParallel> make_ddp(GptModel& model, Communicator* comm,
                                                         const TrainerConfig& c) {
  if (comm == nullptr) return nullptr;
  if (comm->size() != c.dp) {
    throw std::invalid_argument("Trainer: a communicator of " + std::to_string(comm->size()) +
                                " ranks for dp " + std::to_string(c.dp));
  }
  return std::make_unique<ch04::DistributedDataParallel>(model, *comm, ddp_config(c));
}

}  // namespace

void set_cpu_threads(int threads) {
  if (threads <= 0) return;
#if defined(_OPENMP)
  omp_set_num_threads(threads);
#endif
  Eigen::setNbThreads(threads);
}

Trainer::Trainer(TrainerConfig config, TrainingData data, Communicator* comm)
    : config_(validated(std::move(config))),
      data_(std::move(data)),
      comm_(comm),
      model_(config_.model, model_options(config_)),
      ddp_(make_ddp(model_, comm_, config_)),
      optimizer_(tensors_of(model_.parameters()), tensors_of(model_.gradients()),
                 optimizer_config(config_, model_)),
      // Rank r reads rows r*B .. (r+1)*B-1 of each global window of dp*B*T+1 tokens.
      loader_(data_.tokens, config_.batch, config_.seq, config_.data_order, config_.seed, rank(),
              world()) {
  if (ddp_ && optimizer_.scaler().mode() != ch02::ScaleMode::kNone) {
    // One rank's overflow must skip every rank's step, or the replicas and scales part ways.
    optimizer_.set_found_inf_reducer([this](bool found) { return ddp_->agree_found_inf(found); });
  }
  if (!config_.init_from.empty()) {
    load_initial_weights();  // every rank reads the same directory
    if (ddp_) ddp_->verify_replicas();
  }
}

std::vector<ch04::TraceSpan> Trainer::take_spans() {
  return ddp_ ? ddp_->take_spans() : std::vector<ch04::TraceSpan>{};
}

std::vector<NamedTensor> Trainer::master_weights() const {
  std::vector<NamedTensor> out;
  const auto entries = model_.registry().entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    out.push_back({entries[i].name, optimizer_.stepped_params()[i]});
  }
  return out;
}

void Trainer::save_hf(const std::string& dir) const {
  save_gpt_hf(dir, config_.model, master_weights());
}

void Trainer::recast_working_copy() {
  if (!optimizer_.has_masters()) return;  // fp32: the masters are the model's own tensors
  const std::vector<NamedTensor> params = model_.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor p = params[i].tensor;
    p.copy_from(optimizer_.stepped_params()[i]);
  }
}

void Trainer::load_initial_weights() {
  // Into the FP32 masters, so a 16-bit run starting from FP32 weights keeps all their bits.
  load_gpt_hf_into(config_.init_from, config_.model, master_weights());
  recast_working_copy();
}

ch03::StepReport Trainer::optimizer_step(double lr) {
  optimizer_.set_lr(lr);
  return optimizer_.step();
}

StepStats Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  StepStats s;
  s.step = step_ + 1;
  s.loss_scale = optimizer_.loss_scale();
  // Each micro-batch's gradient is of its own mean loss; dividing the seed by grad_accum
  // makes the sum the gradient of the mean over the whole step. DDP divides the all-reduced
  // sum by dp x grad_accum itself, so its seed is the loss scale alone.
  const float seed = ddp_ ? s.loss_scale : s.loss_scale / static_cast<float>(config_.grad_accum);
  for (std::int64_t k = 0; k < config_.grad_accum; ++k) {
    const TokenBatch b = loader_.next();
    if (k == 0) {
      s.data_position = b.position;  // rank 0's rows start the global window
      s.epoch = b.epoch;
    }
    if (ddp_) {
      s.loss += ddp_->forward(b.inputs, b.targets, b.B, b.T);
      ddp_->backward(seed, /*sync=*/k + 1 == config_.grad_accum);  // no traffic before the last
    } else {
      s.loss += model_.forward(b.inputs, b.targets, b.B, b.T);
      model_.backward(seed, /*accumulate=*/k > 0);
    }
  }
  s.loss /= static_cast<double>(config_.grad_accum);
  // The logged loss is the global batch's: the same number on every rank.
  if (ddp_) s.loss = ddp_->global_mean(s.loss);
  s.lr = config_.schedule.at(step_);
  const ch03::StepReport r = optimizer_step(s.lr);
  s.skipped = !r.taken;
  s.grad_norm = r.grad_norm;
  s.clip_coef = r.clip_coef;
  s.tokens = config_.tokens_per_step();
  if (ddp_) {
    s.ranks = world();
    s.times = ddp_->take_step_times();
  }
  ++step_;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace mixpar::ch08
