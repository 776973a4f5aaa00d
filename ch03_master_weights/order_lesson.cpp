// The scenarios of the order lesson and their claims. Every run starts from the same MLP
// weights and sees the same batches; only the optimizer wrapper's configuration differs.
#include "order_lesson.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "model/mlp.h"
#include "optim/clip.h"
#include "ops/fixed_order.h"
#include "report/format.h"

namespace mixpar::ch03 {
namespace {

std::vector<float> flatten(const std::vector<Tensor>& ts) {
  std::vector<float> out;
  for (const Tensor& t : ts) {
    const std::vector<float> v = t.to_floats();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

double l2_distance(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    s += d * d;
  }
  return std::sqrt(s);
}

double unchanged_fraction(const std::vector<float>& a, const std::vector<float>& b) {
  std::size_t same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == b[i] ? 1 : 0;
  return a.empty() ? 0.0 : static_cast<double>(same) / static_cast<double>(a.size());
}

// FP16 working copy with a static scale of 1024: the factor every bug multiplies by is exact.
RunSpec fp16_run(const std::string& name, MixedPrecisionConfig opt) {
  opt.scaler = ch02::static_config(1024.0);
  return {name, DType::kF16, opt};
}

MixedPrecisionConfig adamw(double lr) {
  MixedPrecisionConfig m;
  m.optimizer = OptimizerKind::kAdamW;
  m.adamw.lr = lr;
  return m;
}

MixedPrecisionConfig sgd(double lr, double max_norm) {
  MixedPrecisionConfig m;
  m.optimizer = OptimizerKind::kSgd;
  m.sgd.lr = lr;
  m.sgd.momentum = 0.9;
  m.max_grad_norm = max_norm;
  return m;
}

Scenario make_scenario(std::string title, const std::string& what, MixedPrecisionConfig opt,
                       Bug bug, std::string symptom) {
  MixedPrecisionConfig buggy = opt;
  buggy.bug = bug;
  return {std::move(title), fp16_run("correct, " + what, opt),
          fp16_run(std::string(bug_name(bug)) + ", " + what, buggy), std::move(symptom)};
}

std::string of_steps(std::int64_t n, std::int64_t steps) {
  return std::to_string(n) + " of " + std::to_string(steps);
}

void fp16_weights_claims(const RunResult& ok, const RunResult& bug, std::vector<Claim>& out) {
  out.push_back({"pure FP16: most working weights never change", "> 50% frozen",
                 num(100 * bug.frozen_fraction, 4) + "% frozen", bug.frozen_fraction > 0.5});
  out.push_back({"with FP32 masters the working copy keeps moving", "< 10% frozen",
                 num(100 * ok.frozen_fraction, 4) + "% frozen", ok.frozen_fraction < 0.1});
  const double drop_ok = ok.initial_loss - ok.final_loss;
  const double drop_bug = bug.initial_loss - bug.final_loss;
  out.push_back({"masters learn at least 2x more (loss drop)", "> 2 x " + num(drop_bug, 4),
                 num(drop_ok, 4), drop_ok > 2 * drop_bug});
  out.push_back(claim_broken_by(
      "fp16-weights", {"fp16-weights run: the working copy keeps moving", "< 10% frozen",
                       num(100 * bug.frozen_fraction, 4) + "% frozen", bug.frozen_fraction < 0.1}));
}

void clip_claims(const Scenario& s, const RunResult& ok, const RunResult& bug,
                 std::vector<Claim>& out) {
  const double scale = s.buggy.opt.scaler.init_scale;
  const double seen = bug.reports.front().grad_norm, truth = ok.reports.front().grad_norm;
  // Same weights and batch at step 0; scaling by a power of two is exact, so is the ratio.
  out.push_back({"step 0: clipping measures scale x the true norm",
                 num(scale, 4) + " x " + num(truth, 4), num(seen, 4),
                 std::fabs(seen - scale * truth) <= 1e-9 * seen});
  // The steps whose true (unscaled) norm exceeds max_norm, as the clip coefficient decides it:
  // exactly those, however few or many (early steps of a short run have the largest norms).
  const double max_norm = s.correct.opt.max_grad_norm;
  std::int64_t over = 0;
  for (const StepReport& r : ok.reports) {
    over += r.taken && clip_coefficient(r.grad_norm, max_norm) < 1.0 ? 1 : 0;
  }
  out.push_back({"correct order clips only steps whose true norm > max_norm",
                 of_steps(over, ok.steps), of_steps(ok.steps_clipped, ok.steps),
                 ok.steps_clipped == over && over < ok.steps});
  out.push_back(claim_broken_by(
      "clip-before-unscale",
      {"clip-before-unscale run: clips only steps whose true norm > max_norm",
       of_steps(over, bug.steps), of_steps(bug.steps_clipped, bug.steps),
       bug.steps_clipped == over}));
  out.push_back({"clip-before-unscale clips every step", of_steps(bug.steps, bug.steps),
                 of_steps(bug.steps_clipped, bug.steps), bug.steps_clipped == bug.steps});
  out.push_back({"... to max_norm / scale: weights move < 1/10 as far",
                 "< " + num(ok.weight_change / 10, 4), num(bug.weight_change, 4),
                 bug.weight_change < ok.weight_change / 10});
}

void no_unscale_claims(const Scenario& s, const RunResult& ok, const RunResult& bug,
                       std::vector<Claim>& out) {
  if (s.buggy.opt.optimizer == OptimizerKind::kAdamW) {
    out.push_back({"AdamW hides a missing unscale (final loss within 1%)", num(ok.final_loss, 4),
                   num(bug.final_loss, 4),
                   std::fabs(bug.final_loss - ok.final_loss) <= 0.01 * ok.final_loss});
    // Hidden from the loss, not from the optimizer: it still steps on scale x the gradient.
    // Same weights and batch at step 0, so the correct run's norm is the true one.
    const double seen = bug.reports.front().grad_norm, truth = ok.reports.front().grad_norm;
    out.push_back(claim_broken_by(
        "no-unscale", {"no-unscale run, AdamW: step 0's gradient norm is the true one",
                       num(truth, 4), num(seen, 4), std::fabs(seen - truth) <= 1e-6 * truth}));
    return;
  }
  out.push_back({"correct order converges (loss halves at least)",
                 "< " + num(ok.initial_loss / 2, 4), num(ok.final_loss, 4),
                 ok.final_loss < ok.initial_loss / 2});
  out.push_back(claim_broken_by(
      "no-unscale", {"no-unscale run, SGD: converges (loss halves at least)",
                     "< " + num(bug.initial_loss / 2, 4), num(bug.final_loss, 4),
                     bug.final_loss < bug.initial_loss / 2}));
  out.push_back({"no-unscale diverges (loss > 100x, or inf/NaN)",
                 "> " + num(100 * bug.initial_loss, 4), num(bug.final_loss, 4),
                 !std::isfinite(bug.final_loss) || bug.final_loss > 100 * bug.initial_loss});
}

}  // namespace

RunResult train(const LessonConfig& c, const RunSpec& spec) {
  // Fixed-order GEMMs: the run, and so every digit the demo prints, is the same on any machine.
  const ops::FixedOrderScope fixed_order;
  const TeacherTask task(ch02::teacher_config(c));
  Mlp model(ch02::student_config(c, spec.dtype));
  Mlp ref(ch02::student_config(c, DType::kF32));
  const Batch eval = task.samples(1'000'000'000, c.eval_batch);  // far from the training batches
  MixedPrecisionOptimizer opt(tensors_of(model.parameters()), tensors_of(model.gradients()),
                              spec.opt);
  const std::vector<Tensor> working = tensors_of(model.parameters());
  const std::vector<float> theta0 = flatten(opt.stepped_params());
  const std::vector<float> work0 = flatten(working);
  RunResult r;
  r.name = spec.name;
  r.bug = spec.opt.bug;
  r.steps = c.steps;
  r.initial_loss = ch02::eval_loss(ref, opt.stepped_params(), eval);
  double norm_sum = 0;
  std::int64_t norms = 0;
  for (std::int64_t step = 0; step < c.steps; ++step) {
    const Batch b = task.batch(step, c.batch);
    r.train_losses.push_back(model.forward_loss(b));
    model.backward(b, opt.loss_scale());
    const StepReport rep = opt.step();
    r.steps_taken += rep.taken ? 1 : 0;
    r.steps_clipped += rep.clip_coef < 1.0 ? 1 : 0;
    if (!std::isnan(rep.grad_norm)) {
      norm_sum += rep.grad_norm;
      ++norms;
    }
    r.reports.push_back(rep);
  }
  r.mean_clip_norm = norms > 0 ? norm_sum / static_cast<double>(norms) : 0.0;
  r.final_weights = flatten(opt.stepped_params());
  r.weight_change = l2_distance(r.final_weights, theta0);
  r.frozen_fraction = unchanged_fraction(flatten(working), work0);
  r.final_loss = ch02::eval_loss(ref, opt.stepped_params(), eval);
  return r;
}

std::vector<Scenario> lesson_scenarios(const LessonConfig&) {
  return {
      make_scenario("Pure FP16 weights (no masters), AdamW lr 1e-5", "AdamW lr 1e-5", adamw(1e-5),
                    Bug::kFp16Weights,
                    "updates below half an FP16 ulp vanish: most weights never change"),
      make_scenario("Clipping before unscaling, SGD lr 0.05 momentum 0.9, max_norm 3",
                    "SGD, clip 3", sgd(0.05, 3.0), Bug::kClipBeforeUnscale,
                    "the norm is 1024x too large: every step is clipped to 1/1024 of max_norm"),
      make_scenario("Forgetting to unscale, SGD lr 0.05 momentum 0.9, no clipping", "SGD, no clip",
                    sgd(0.05, 0.0), Bug::kNoUnscale,
                    "the step is 1024x too large: the loss explodes"),
      make_scenario(
          "Forgetting to unscale, AdamW lr 1e-3", "AdamW lr 1e-3", adamw(1e-3), Bug::kNoUnscale,
          "Adam's m/sqrt(v) cancels the scale (only eps shrinks 1024x): it hides the bug"),
  };
}

const Scenario& scenario_for(const std::vector<Scenario>& all, Bug bug) {
  for (const Scenario& s : all) {
    if (s.buggy.opt.bug == bug) return s;
  }
  throw std::out_of_range("scenario_for: no scenario with bug " + std::string(bug_name(bug)));
}

ScenarioResult run_scenario(const LessonConfig& c, const Scenario& s) {
  return {&s, train(c, s.correct), train(c, s.buggy)};
}

std::vector<Claim> scenario_claims(const ScenarioResult& r) {
  std::vector<Claim> out;
  switch (r.scenario->buggy.opt.bug) {
    case Bug::kFp16Weights: fp16_weights_claims(r.correct, r.buggy, out); break;
    case Bug::kClipBeforeUnscale: clip_claims(*r.scenario, r.correct, r.buggy, out); break;
    case Bug::kNoUnscale: no_unscale_claims(*r.scenario, r.correct, r.buggy, out); break;
    case Bug::kNone: break;
  }
  return out;
}

}  // namespace mixpar::ch03
