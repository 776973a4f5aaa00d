// The small model of chapters 2 and 3: a multi-layer perceptron of linear layers (Conv1D
// layout, with bias) and GELU or ReLU, its backward pass written out, and a deterministic
// teacher task to train it on. Parameters, activations and gradients are stored in one working
// dtype (f32, f16, bf16; f64 for gradient checks); every GEMM accumulates in FP32.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ops/activations.h"
#include "tensor/tensor.h"

namespace mixpar {

// A tensor handle with its name ("fc0.weight"): what optimizers, master-weight wrappers and
// checkpoints iterate over.
struct NamedTensor {
  std::string name;
  Tensor tensor;
};
std::vector<Tensor> tensors_of(std::span<const NamedTensor> named);

enum class LossKind : std::uint8_t {
  kMse,           // regression against y [B, out]
  kCrossEntropy,  // classification against labels [B] in [0, out)
};

// One mini-batch. x is FP32 (the model rounds it into its working dtype).
struct Batch {
  Tensor x;                           // [B, in]
  Tensor y;                           // [B, out] FP32 regression targets; undefined for kCrossEntropy
  std::vector<std::int32_t> labels;   // [B] class ids; empty for kMse
  std::int64_t size() const { return x.dim(0); }
};

struct MlpConfig {
  std::vector<std::int64_t> sizes = {32, 64, 64, 10};  // in, hidden..., out (>= 2 entries)
  ops::Activation activation = ops::Activation::kGelu;  // between layers, not after the last
  LossKind loss = LossKind::kMse;
  DType dtype = DType::kF32;      // the working dtype: parameters, activations, gradients
  std::uint64_t seed = 1;         // Philox seed of the initial weights
  double init_gain = 1.0;         // weights ~ N(0, (init_gain / sqrt(fan_in))^2), biases 0
};

class Mlp {
 public:
  // Weights drawn in FP32 from Philox(seed) layer by layer and rounded to the working dtype,
  // so the same config in another dtype holds exactly the rounded FP32 model. Parameters are
  // MemCategory::kParameters, gradients (zero) kGradients. Throws InputError on bad sizes.
  explicit Mlp(MlpConfig config);
  // Copying would share storage between two models (tensors are handles): moves only.
  Mlp(const Mlp&) = delete;
  Mlp& operator=(const Mlp&) = delete;
  Mlp(Mlp&&) = default;
  Mlp& operator=(Mlp&&) = default;

  const MlpConfig& config() const { return config_; }
  int num_layers() const { return static_cast<int>(w_.size()); }
  std::int64_t num_parameters() const;

  // out [B, out] = the network on x [B, in] (any float dtype), in the working dtype. Keeps
  // each layer's input and pre-activation as MemCategory::kActivations for backward.
  const Tensor& forward(const Tensor& x);
  // The loss of the last forward's output against the batch's targets (no gradient).
  double loss(const Batch& batch) const;
  double forward_loss(const Batch& batch) { forward(batch.x); return loss(batch); }

  // Backward of the last forward (which must have been on batch.x). The loss gradient is
  // multiplied by loss_scale and rounded into the working dtype (FP16 overflow or underflow
  // happens here first), then propagated layer by layer. Gradients are overwritten, or added
  // to when accumulate (micro-batches). Temporaries are MemCategory::kOther.
  void backward(const Batch& batch, float loss_scale = 1.0f, bool accumulate = false);

  // The network without caching anything (evaluation; const, so threads may share a model).
  Tensor infer(const Tensor& x) const;

  // "fc{i}.weight" [in_i, out_i], "fc{i}.bias" [out_i], layer by layer; handles on the
  // model's storage. gradients() has the same names, order and shapes.
  std::vector<NamedTensor> parameters() const;
  std::vector<NamedTensor> gradients() const;
  void zero_grad();

  const Tensor& weight(int layer) const { return w_.at(static_cast<std::size_t>(layer)); }
  const Tensor& bias(int layer) const { return b_.at(static_cast<std::size_t>(layer)); }
  const Tensor& grad_weight(int layer) const { return dw_.at(static_cast<std::size_t>(layer)); }
  const Tensor& grad_bias(int layer) const { return db_.at(static_cast<std::size_t>(layer)); }
  const Tensor& output() const { return pre_.back(); }  // the last forward's out [B, out]

 private:
  MlpConfig config_;
  std::vector<Tensor> w_, b_, dw_, db_;  // per layer: [in, out], [out]
  std::vector<Tensor> acts_;             // layer inputs: acts_[l] [B, in_l] (acts_[0] = x)
  std::vector<Tensor> pre_;              // pre-activations: pre_[l] [B, out_l]
};

// A regression or classification problem with a known answer: a fixed random teacher MLP
// (FP32, its own seed) maps x ~ N(0, 1) to y = teacher(x) (kMse) or to labels =
// argmax teacher(x) (kCrossEntropy). Sample i is a pure function of (seed, i), so batches can
// be drawn in any order, by any rank.
struct TeacherTaskConfig {
  std::vector<std::int64_t> sizes = {32, 64, 10};  // the teacher; in and out match the student
  ops::Activation activation = ops::Activation::kGelu;
  LossKind loss = LossKind::kMse;
  std::uint64_t seed = 1234;
  double init_gain = 2.0;  // a teacher with larger weights gives a less linear target
};

class TeacherTask {
 public:
  // The teacher's weights are charged to the task's own ledger, not the current one: they
  // are not part of the trained model, so a chapter's memory bill shows only the student.
  explicit TeacherTask(TeacherTaskConfig config);
  const TeacherTaskConfig& config() const { return config_; }

  // Samples [first, first + count) (tensors MemCategory::kOther on the current ledger):
  // x [count, in] FP32 from Philox(seed, stream 1) at draw
  // offset 2 * first * in, and their targets. samples(a, n) and samples(a + n, m) together are
  // exactly samples(a, n + m): a DDP rank's share of a global batch is a sub-range.
  Batch samples(std::int64_t first, std::int64_t count) const;
  // Batch number `index` of size b: samples(index * b, b).
  Batch batch(std::int64_t index, std::int64_t b) const { return samples(index * b, b); }

 private:
  TeacherTaskConfig config_;
  std::unique_ptr<MemoryLedger> ledger_;  // declared before teacher_: outlives its tensors
  Mlp teacher_;
};

}  // namespace mixpar
