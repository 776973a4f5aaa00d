// The MLP's forward and its hand-written backward (layer_forward / layer_backward pairs in
// the style of llm.c), and the teacher task. All math goes through common/ops.
#include "model/mlp.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "ops/linear.h"
#include "ops/loss.h"
#include "random/philox.h"
#include "util/errors.h"

namespace mixpar {

std::vector<Tensor> tensors_of(std::span<const NamedTensor> named) {
  std::vector<Tensor> out;
  out.reserve(named.size());
  for (const NamedTensor& n : named) out.push_back(n.tensor);
  return out;
}

namespace {

void check_config(const MlpConfig& c) {
  if (c.sizes.size() < 2) {
    throw InputError("Mlp: sizes needs at least an input and an output size, got " +
                     std::to_string(c.sizes.size()) + " entries");
  }
  for (std::int64_t s : c.sizes) {
    if (s <= 0) throw InputError("Mlp: layer size " + std::to_string(s) + " is not positive");
  }
  if (c.dtype != DType::kF32 && c.dtype != DType::kF16 && c.dtype != DType::kBF16 &&
      c.dtype != DType::kF64) {
    throw InputError("Mlp: working dtype " + std::string(dtype_name(c.dtype)) +
                     " is not one of f32, f16, bf16, f64");
  }
}

// Keeps t if it already has this shape, dtype and category; else allocates it anew.
void ensure(Tensor& t, const Shape& shape, DType dtype, MemCategory category) {
  if (t.defined() && t.shape() == shape && t.dtype() == dtype && t.category() == category) return;
  t = Tensor::empty(shape, dtype, category);
}

}  // namespace

Mlp::Mlp(MlpConfig config) : config_(std::move(config)) {
  check_config(config_);
  const std::size_t layers = config_.sizes.size() - 1;
  Philox gen(config_.seed);
  for (std::size_t l = 0; l < layers; ++l) {
    const std::int64_t in = config_.sizes[l], out = config_.sizes[l + 1];
    Tensor w = Tensor::empty({in, out}, config_.dtype, MemCategory::kParameters);
    // N(0, gain^2 / fan_in) keeps activations O(1) through the layers (LeCun-style scaling).
    fill_normal(w, gen, 0.0f, static_cast<float>(config_.init_gain / std::sqrt(double(in))));
    w_.push_back(std::move(w));
    b_.push_back(Tensor::zeros({out}, config_.dtype, MemCategory::kParameters));
    dw_.push_back(Tensor::zeros({in, out}, config_.dtype, MemCategory::kGradients));
    db_.push_back(Tensor::zeros({out}, config_.dtype, MemCategory::kGradients));
  }
  acts_.resize(layers);
  pre_.resize(layers);
}

std::int64_t Mlp::num_parameters() const {
  std::int64_t n = 0;
  for (std::size_t l = 0; l < w_.size(); ++l) n += w_[l].numel() + b_[l].numel();
  return n;
}

const Tensor& Mlp::forward(const Tensor& x) {
  if (x.ndim() != 2 || x.dim(1) != config_.sizes[0]) {
    throw std::invalid_argument("Mlp::forward: x has shape " + shape_str(x.shape()) +
                                ", expected [B, " + std::to_string(config_.sizes[0]) + "]");
  }
  const std::int64_t batch = x.dim(0);
  const DType dt = config_.dtype;
  ensure(acts_[0], {batch, config_.sizes[0]}, dt, MemCategory::kActivations);
  acts_[0].copy_from(x);  // the input in the working dtype, kept for dW of layer 0
  for (std::size_t l = 0; l < w_.size(); ++l) {
    ensure(pre_[l], {batch, config_.sizes[l + 1]}, dt, MemCategory::kActivations);
    ops::linear_forward(acts_[l], w_[l], &b_[l], pre_[l]);  // pre_l [B, out_l] = a_l W_l + b_l
    if (l + 1 < w_.size()) {
      ensure(acts_[l + 1], pre_[l].shape(), dt, MemCategory::kActivations);
      ops::activation_forward(config_.activation, pre_[l], acts_[l + 1]);
    }
  }
  return pre_.back();
}

Tensor Mlp::infer(const Tensor& x) const {
  Tensor a = Tensor::empty(x.shape(), config_.dtype, MemCategory::kOther);
  a.copy_from(x);
  for (std::size_t l = 0; l < w_.size(); ++l) {
    Tensor z = Tensor::empty({x.dim(0), config_.sizes[l + 1]}, config_.dtype, MemCategory::kOther);
    ops::linear_forward(a, w_[l], &b_[l], z);
    if (l + 1 < w_.size()) ops::activation_forward(config_.activation, z, z);
    a = std::move(z);
  }
  return a;
}

double Mlp::loss(const Batch& batch) const {
  const Tensor& out = output();
  if (!out.defined()) throw std::logic_error("Mlp::loss before any forward");
  if (config_.loss == LossKind::kMse) return ops::mse_loss(out, batch.y);
  return ops::cross_entropy_loss(out, batch.labels);
}

void Mlp::backward(const Batch& batch, float loss_scale, bool accumulate) {
  const Tensor& out = output();
  if (!out.defined()) throw std::logic_error("Mlp::backward before any forward");
  // dL/dout * loss_scale [B, out], rounded once into the working dtype.
  Tensor dz = Tensor::empty(out.shape(), config_.dtype, MemCategory::kOther);
  if (config_.loss == LossKind::kMse) ops::mse_loss(out, batch.y, &dz, loss_scale);
  else ops::cross_entropy_loss(out, batch.labels, &dz, loss_scale);
  for (std::size_t l = w_.size(); l-- > 0;) {
    // dx_l [B, in_l] = dz W_l^T; dW_l = a_l^T dz; db_l = sum_rows dz. Layer 0 needs no dx.
    Tensor dx;
    if (l > 0) dx = Tensor::empty(acts_[l].shape(), config_.dtype, MemCategory::kOther);
    ops::linear_backward(acts_[l], w_[l], dz, l > 0 ? &dx : nullptr, dw_[l], &db_[l], accumulate);
    if (l == 0) break;
    // Through the activation that produced a_l from pre_{l-1}: dz_{l-1} = dx * act'(pre_{l-1}).
    ops::activation_backward(config_.activation, pre_[l - 1], dx, dx);
    dz = std::move(dx);
  }
}

std::vector<NamedTensor> Mlp::parameters() const {
  std::vector<NamedTensor> out;
  for (std::size_t l = 0; l < w_.size(); ++l) {
    out.push_back({"fc" + std::to_string(l) + ".weight", w_[l]});
    out.push_back({"fc" + std::to_string(l) + ".bias", b_[l]});
  }
  return out;
}

std::vector<NamedTensor> Mlp::gradients() const {
  std::vector<NamedTensor> out;
  for (std::size_t l = 0; l < w_.size(); ++l) {
    out.push_back({"fc" + std::to_string(l) + ".weight", dw_[l]});
    out.push_back({"fc" + std::to_string(l) + ".bias", db_[l]});
  }
  return out;
}

void Mlp::zero_grad() {
  for (Tensor& t : dw_) t.zero();
  for (Tensor& t : db_) t.zero();
}

// ---- The teacher task.

namespace {
// The teacher, allocated while `ledger` is this thread's ledger.
Mlp make_teacher(const TeacherTaskConfig& c, MemoryLedger& ledger) {
  LedgerScope scope(ledger);
  MlpConfig m;
  m.sizes = c.sizes;
  m.activation = c.activation;
  m.loss = c.loss;
  m.dtype = DType::kF32;
  m.seed = c.seed;
  m.init_gain = c.init_gain;
  return Mlp(m);
}
}  // namespace

TeacherTask::TeacherTask(TeacherTaskConfig config)
    : config_(std::move(config)),
      ledger_(std::make_unique<MemoryLedger>()),
      teacher_(make_teacher(config_, *ledger_)) {}

Batch TeacherTask::samples(std::int64_t first, std::int64_t count) const {
  const std::int64_t in = config_.sizes.front();
  Batch b;
  b.x = Tensor::empty({count, in}, DType::kF32, MemCategory::kOther);
  // fill_normal takes 2 draws per element: sample i starts at draw 2 * i * in of stream 1.
  Philox gen(config_.seed, /*stream=*/1, static_cast<std::uint64_t>(2 * first * in));
  fill_normal(b.x, gen);
  Tensor y = teacher_.infer(b.x);  // [count, out]
  if (config_.loss == LossKind::kMse) {
    b.y = std::move(y);
    return b;
  }
  const std::vector<float> logits = y.to_floats();
  const std::int64_t classes = config_.sizes.back();
  b.labels.resize(static_cast<std::size_t>(count));
  for (std::int64_t r = 0; r < count; ++r) {
    std::int64_t best = 0;
    for (std::int64_t j = 1; j < classes; ++j) {
      if (logits[r * classes + j] > logits[r * classes + best]) best = j;
    }
    b.labels[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(best);
  }
  return b;
}

}  // namespace mixpar
