// The ch02 table: one training loop (FP32 masters + AdamW, a working-format model, a
// LossScaler) run for every format x scheme, with the FP32 gradient at the same weights
// computed beside each step to count what the 16-bit backward lost to underflow.
#include "scaling_lesson.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "model/mlp.h"
#include "ops/fixed_order.h"
#include "report/format.h"
#include "optim/adamw.h"

namespace mixpar::ch02 {

MlpConfig student_config(const StudentSetup& s, DType dtype) {
  MlpConfig m;
  m.sizes = s.sizes;
  m.activation = ops::Activation::kGelu;  // GELU's gradient is never exactly 0 (ReLU's is)
  m.loss = LossKind::kMse;
  m.dtype = dtype;
  m.seed = s.model_seed;
  return m;
}

TeacherTaskConfig teacher_config(const StudentSetup& s) {
  TeacherTaskConfig t;
  t.sizes = {s.sizes.front(), 64, s.sizes.back()};
  t.seed = s.task_seed;
  return t;
}

namespace {

// dst[i] <- src[i] (rounded into dst's dtype): re-casting masters into a working copy.
void copy_all(const std::vector<Tensor>& src, const std::vector<Tensor>& dst) {
  for (std::size_t i = 0; i < src.size(); ++i) {
    Tensor d = dst[i];
    d.copy_from(src[i]);
  }
}

std::vector<Tensor> fp32_copies(const std::vector<Tensor>& ts, MemCategory category) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) {
    Tensor c = Tensor::empty(t.shape(), DType::kF32, category);
    c.copy_from(t);
    out.push_back(std::move(c));
  }
  return out;
}

// Counts reference-nonzero elements and those of them that are zero in `got`.
void count_underflow(const std::vector<Tensor>& reference, const std::vector<Tensor>& got,
                     RowResult& row) {
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const std::vector<float> r = reference[i].to_floats();
    const std::vector<float> g = got[i].to_floats();
    for (std::size_t k = 0; k < r.size(); ++k) {
      if (r[k] == 0.0f) continue;
      ++row.reference_nonzero;
      if (g[k] == 0.0f) ++row.underflowed;
    }
  }
}

// The fixed pieces of one row: teacher, models, held-out batch.
struct RowSetup {
  TeacherTask task;
  Mlp ref;    // FP32: the initial masters, and the gradient at the working copy's weights
  Mlp model;  // the working format
  Batch eval;
  RowSetup(const LessonConfig& c, DType dtype)
      : task(teacher_config(c)),
        ref(student_config(c, DType::kF32)),
        model(student_config(c, dtype)),
        eval(task.samples(1'000'000'000, c.eval_batch)) {}  // far from every training batch
};

}  // namespace

double eval_loss(Mlp& ref, const std::vector<Tensor>& weights, const Batch& batch) {
  copy_all(weights, tensors_of(ref.parameters()));
  return ref.forward_loss(batch);
}

bool master_weight_step(LossScaler& scaler, AdamW& opt, const std::vector<Tensor>& grads,
                        const std::vector<Tensor>& grads32, const std::vector<Tensor>& masters,
                        const std::vector<Tensor>& params) {
  copy_all(grads, grads32);  // 16-bit -> FP32: the unscaled values need FP32's range
  const bool inf = scaler.unscale_and_check(grads32);
  if (!scaler.update(inf)) return false;  // skipped: masters, moments and t stay as they were
  opt.step(grads32);
  copy_all(masters, params);
  return true;
}

double RowResult::underflow_fraction() const {
  return reference_nonzero == 0 ? 0.0 : static_cast<double>(underflowed) / reference_nonzero;
}

std::vector<Scheme> lesson_schemes(const LessonConfig& c) {
  LossScalerConfig dynamic = pytorch_config();
  dynamic.growth_interval = c.dynamic_growth_interval;
  char too_large[32];
  std::snprintf(too_large, sizeof too_large, "static 2^%d",
                static_cast<int>(std::lround(std::log2(c.too_large_scale))));
  char fixed[32];
  std::snprintf(fixed, sizeof fixed, "static %g", c.static_scale);
  return {{"none", no_scaling_config()},
          {fixed, static_config(c.static_scale)},
          {too_large, static_config(c.too_large_scale)},
          {"dynamic", dynamic}};
}

std::vector<DType> lesson_formats() { return {DType::kF32, DType::kF16, DType::kBF16}; }

RowResult run_row(const LessonConfig& c, DType dtype, const Scheme& scheme) {
  const ops::FixedOrderScope fixed_order;
  RowSetup s(c, dtype);
  const std::vector<Tensor> params = tensors_of(s.model.parameters());
  const std::vector<Tensor> grads = tensors_of(s.model.gradients());
  const std::vector<Tensor> ref_params = tensors_of(s.ref.parameters());
  const std::vector<Tensor> ref_grads = tensors_of(s.ref.gradients());
  // The masters start as the FP32 model (PyTorch: build in FP32, then cast the working copy).
  const std::vector<Tensor> masters = fp32_copies(ref_params, MemCategory::kMasterParams);
  const std::vector<Tensor> grads32 = fp32_copies(grads, MemCategory::kGradients);
  copy_all(masters, params);
  AdamWConfig adam;
  adam.lr = c.lr;
  adam.eps = 1e-8 * c.loss_weight;
  adam.weight_decay = 0.0;  // a zero gradient then means exactly no update
  AdamW opt(masters, adam);
  LossScaler scaler(scheme.scaler);

  RowResult row{.dtype = dtype, .scheme = scheme.name, .steps = c.steps};
  row.initial_loss = eval_loss(s.ref, masters, s.eval);
  row.max_scale_seen = scaler.scale();
  for (std::int64_t step = 0; step < c.steps; ++step) {
    const Batch b = s.task.batch(step, c.batch);
    s.model.forward(b.x);
    s.model.backward(b, static_cast<float>(c.loss_weight * scaler.scale()));
    // The FP32 gradient at exactly the working copy's weights, unscaled.
    copy_all(params, ref_params);
    s.ref.forward(b.x);
    s.ref.backward(b, static_cast<float>(c.loss_weight));
    count_underflow(ref_grads, grads, row);
    if (LossScaler::found_inf(grads)) ++row.overflow_steps;
    row.scale_per_step.push_back(scaler.scale());
    const bool stepped = master_weight_step(scaler, opt, grads, grads32, masters, params);
    row.skipped_per_step.push_back(!stepped);
    row.max_scale_seen = std::max(row.max_scale_seen, scaler.scale());
  }
  row.skipped_steps = scaler.state().steps_skipped;
  row.final_scale = scaler.scale();
  row.final_loss = eval_loss(s.ref, masters, s.eval);
  return row;
}

std::vector<RowResult> run_table(const LessonConfig& c) {
  std::vector<RowResult> rows;
  for (DType d : lesson_formats()) {
    for (const Scheme& s : lesson_schemes(c)) rows.push_back(run_row(c, d, s));
  }
  return rows;
}

const RowResult& find_row(const std::vector<RowResult>& rows, DType dtype,
                          const std::string& scheme) {
  for (const RowResult& r : rows) {
    if (r.dtype == dtype && r.scheme == scheme) return r;
  }
  throw std::out_of_range("find_row: no row " + std::string(dtype_name(dtype)) + " / " + scheme);
}

GradientCensus census_at_init(const LessonConfig& c) {
  const ops::FixedOrderScope fixed_order;
  const TeacherTask task(teacher_config(c));
  Mlp ref(student_config(c, DType::kF32));
  const Batch b = task.batch(0, c.batch);
  ref.forward(b.x);
  ref.backward(b, static_cast<float>(c.loss_weight));
  std::vector<double> mags;
  for (const Tensor& g : tensors_of(ref.gradients())) {
    for (float v : g.to_floats()) mags.push_back(std::fabs(static_cast<double>(v)));
  }
  std::sort(mags.begin(), mags.end());
  GradientCensus out;
  out.count = static_cast<std::int64_t>(mags.size());
  if (mags.empty()) return out;
  out.median_abs = mags[mags.size() / 2];
  out.max_abs = mags.back();
  const auto below = [&](double x) {
    return static_cast<double>(std::lower_bound(mags.begin(), mags.end(), x) - mags.begin()) /
           static_cast<double>(mags.size());
  };
  out.below_min_subnormal = below(0x1p-24);
  out.below_min_normal = below(0x1p-14);
  return out;
}

// ---- The lesson's claims, expected vs measured.

namespace {

std::string count(std::int64_t n, std::int64_t of) {
  return std::to_string(n) + " of " + std::to_string(of);
}
// |a - b| <= tol * |b|: "trains as well as FP32".
bool close(double a, double b, double tol) { return std::fabs(a - b) <= tol * std::fabs(b); }

// Claims about one format's rows of the table.
void fp32_and_bf16_claims(const std::vector<RowResult>& rows, const Scheme& too_large,
                          std::vector<Claim>& out) {
  const RowResult& f32 = find_row(rows, DType::kF32, "none");
  std::int64_t f32_bad = 0;
  for (const RowResult& r : rows) {
    if (r.dtype == DType::kF32) f32_bad += r.underflowed + r.overflow_steps + r.skipped_steps;
  }
  out.push_back({"FP32, every scheme: nothing underflows, overflows or is skipped", "0",
                 std::to_string(f32_bad), f32_bad == 0});
  const RowResult& bf = find_row(rows, DType::kBF16, "none");
  out.push_back({"BF16 without scaling keeps its gradients (FP32's exponent range)", "< 0.1%",
                 pct(bf.underflow_fraction()), bf.underflow_fraction() < 1e-3});
  out.push_back({"BF16 without scaling trains like FP32 (final loss within 5%)",
                 num(f32.final_loss, 4), num(bf.final_loss, 4),
                 close(bf.final_loss, f32.final_loss, 0.05)});
  const RowResult& bf_big = find_row(rows, DType::kBF16, too_large.name);
  out.push_back({"BF16 with " + too_large.name + ": no overflow (range ~3.4e38)", "0 steps",
                 std::to_string(bf_big.overflow_steps), bf_big.overflow_steps == 0});
}

void fp16_claims(const std::vector<RowResult>& rows, const std::vector<Scheme>& schemes,
                 std::vector<Claim>& out) {
  const RowResult& f32 = find_row(rows, DType::kF32, "none");
  const RowResult& none = find_row(rows, DType::kF16, schemes[0].name);
  const RowResult& fixed = find_row(rows, DType::kF16, schemes[1].name);
  const RowResult& big = find_row(rows, DType::kF16, schemes[2].name);
  const RowResult& dyn = find_row(rows, DType::kF16, schemes[3].name);
  out.push_back({"FP16 without scaling loses most gradients to zero", "> 50%",
                 pct(none.underflow_fraction()), none.underflow_fraction() > 0.5});
  out.push_back({"... and trains worse than FP32 (final loss > 2x)",
                 "> " + num(2 * f32.final_loss, 4), num(none.final_loss, 4),
                 none.final_loss > 2 * f32.final_loss});
  out.push_back({"FP16 with " + fixed.scheme + " keeps almost all of them", "< 1%",
                 pct(fixed.underflow_fraction()), fixed.underflow_fraction() < 0.01});
  out.push_back({"... and trains like FP32 (final loss within 5%)", num(f32.final_loss, 4),
                 num(fixed.final_loss, 4), close(fixed.final_loss, f32.final_loss, 0.05)});
  out.push_back({"FP16 with " + big.scheme + " overflows on every step",
                 count(big.steps, big.steps), count(big.overflow_steps, big.steps),
                 big.overflow_steps == big.steps});
  out.push_back(
      {"... so every step is skipped and the weights never move",
       "skipped " + count(big.steps, big.steps) + ", loss " + num(big.initial_loss, 4),
       "skipped " + count(big.skipped_steps, big.steps) + ", loss " + num(big.final_loss, 4),
       big.skipped_steps == big.steps && big.final_loss == big.initial_loss});
  out.push_back({"FP16 dynamic: fewer lost gradients than " + fixed.scheme,
                 "< " + pct(fixed.underflow_fraction()), pct(dyn.underflow_fraction()),
                 dyn.underflow_fraction() < fixed.underflow_fraction() || dyn.underflowed == 0});
  out.push_back({"FP16 dynamic: finds the overflow edge, skips few steps", "1 .. 10% of steps",
                 count(dyn.skipped_steps, dyn.steps),
                 dyn.skipped_steps >= 1 && dyn.skipped_steps * 10 <= dyn.steps});
  out.push_back({"FP16 dynamic trains like FP32 (final loss within 5%)", num(f32.final_loss, 4),
                 num(dyn.final_loss, 4), close(dyn.final_loss, f32.final_loss, 0.05)});
}

}  // namespace

std::vector<Claim> check_claims(const LessonConfig& c, const GradientCensus& census,
                                const std::vector<RowResult>& rows) {
  const std::vector<Scheme> schemes = lesson_schemes(c);
  std::vector<Claim> out;
  out.push_back({"Most FP32 gradients lie below FP16's smallest subnormal 2^-24", "> 50%",
                 pct(census.below_min_subnormal), census.below_min_subnormal > 0.5});
  fp32_and_bf16_claims(rows, schemes[2], out);
  fp16_claims(rows, schemes, out);
  return out;
}

}  // namespace mixpar::ch02
