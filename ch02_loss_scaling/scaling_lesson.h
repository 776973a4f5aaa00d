// scaling_lesson: the computations behind the ch02 demo's table, as functions returning plain
// structs, so tests assert exactly what the demo prints. One row = one working format x one
// loss-scaling scheme, trained with FP32 master weights + AdamW, so only the gradients'
// format differs; each step's 16-bit gradients are compared with FP32 ones at the same weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loss_scaler.h"
#include "model/mlp.h"
#include "numerics/dtype.h"
#include "optim/adamw.h"
#include "report/claim_table.h"

namespace mixpar::ch02 {

// The student MLP (GELU, MSE) and the teacher task it learns: what this lesson trains in every
// format, and chapter 3's lesson too.
struct StudentSetup {
  std::vector<std::int64_t> sizes = {32, 64, 64, 10};  // the student MLP
  std::int64_t batch = 64;
  std::int64_t eval_batch = 512;  // held-out samples for the loss columns
  std::uint64_t model_seed = 1;
  std::uint64_t task_seed = 1234;
};
MlpConfig student_config(const StudentSetup& s, DType dtype);  // the student in `dtype`
TeacherTaskConfig teacher_config(const StudentSetup& s);
// The FP32 loss (unweighted) of `weights` on `batch`, computed by the FP32 student `ref`.
double eval_loss(Mlp& ref, const std::vector<Tensor>& weights, const Batch& batch);

struct LessonConfig : StudentSetup {
  std::int64_t steps = 200;
  // The loss is multiplied by this weight so that the true gradients are ~1e-9..1e-7, like
  // those of a deep model's lower layers, mostly below FP16's smallest subnormal 2^-24.
  double loss_weight = 0x1p-20;
  // AdamW on the masters, eps scaled with the loss weight: Adam ignores a constant factor on
  // the gradients except through eps, so every row sees the unweighted problem's dynamics.
  double lr = 3e-3;
  double static_scale = 1024.0;              // a typical hand-picked static scale
  double too_large_scale = 0x1p40;           // a static scale that overflows FP16 every step
  std::int64_t dynamic_growth_interval = 5;  // PyTorch's 2000 never fires in a short demo
};

// One step of the lesson's loop after backward: the working-format grads [per parameter] into
// the FP32 buffers grads32, unscale and check, and only if the scaler takes the step, AdamW on
// the FP32 masters and the re-cast of the working copy `params`. Returns whether it stepped.
// (Chapter 3 turns this into MixedPrecisionOptimizer, with clipping.)
bool master_weight_step(LossScaler& scaler, AdamW& opt, const std::vector<Tensor>& grads,
                        const std::vector<Tensor>& grads32, const std::vector<Tensor>& masters,
                        const std::vector<Tensor>& params);

// A named loss-scaling scheme: "none", "static 1024", "static 2^40", "dynamic".
struct Scheme {
  std::string name;
  LossScalerConfig scaler;
};
std::vector<Scheme> lesson_schemes(const LessonConfig& c);
std::vector<DType> lesson_formats();  // f32, f16, bf16

struct RowResult {
  DType dtype = DType::kF32;
  std::string scheme;
  // Gradient elements nonzero in FP32 at the same weights, summed over all steps, and how
  // many of them were exactly zero in this row's (scaled) working-format gradients.
  std::int64_t reference_nonzero = 0;
  std::int64_t underflowed = 0;
  std::int64_t overflow_steps = 0;  // steps whose working-format gradients held inf/NaN
  std::int64_t skipped_steps = 0;   // steps the scaler skipped
  std::int64_t steps = 0;
  double initial_loss = 0;  // MSE (unweighted) of the FP32 masters on the held-out batch
  double final_loss = 0;
  float final_scale = 1.0f;
  float max_scale_seen = 1.0f;
  // Step by step (the figure of the chapter): the scale the step's backward used, and
  // whether the scaler skipped the step.
  std::vector<float> scale_per_step{};
  std::vector<bool> skipped_per_step{};
  double underflow_fraction() const;
};

// Trains one row from the same initial weights and batches as every other row. Its GEMMs run
// in fixed order (ops::FixedOrderScope), so the row is the same on every machine and thread
// count: the README's table reproduces digit for digit.
RowResult run_row(const LessonConfig& c, DType dtype, const Scheme& scheme);
// Every format x every scheme, formats outermost.
std::vector<RowResult> run_table(const LessonConfig& c);
const RowResult& find_row(const std::vector<RowResult>& rows, DType dtype,
                          const std::string& scheme);

// The premise, measured: FP32 gradients of the initial model on the first batch.
struct GradientCensus {
  std::int64_t count = 0;
  double median_abs = 0, max_abs = 0;
  double below_min_subnormal = 0;  // fraction with |g| < 2^-24 (FP16's smallest subnormal)
  double below_min_normal = 0;     // fraction with |g| < 2^-14 (FP16's smallest normal)
};
GradientCensus census_at_init(const LessonConfig& c);

std::vector<Claim> check_claims(const LessonConfig& c, const GradientCensus& census,
                                const std::vector<RowResult>& rows);

}  // namespace mixpar::ch02
