// order_lesson: the correct mixed-precision step against each classic mistake, on the
// chapter's MLP. Each scenario trains a correct run and a buggy twin from the same weights on
// the same batches and reports what the lesson claims about them. Nothing here prints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ch02_loss_scaling/scaling_lesson.h"
#include "mixed_precision_optimizer.h"
#include "report/claim_table.h"

namespace mixpar::ch03 {

// Chapter 2's student MLP and teacher task, trained for `steps` steps per run.
struct LessonConfig : ch02::StudentSetup {
  std::int64_t steps = 100;
};

// One training run: the working format and the optimizer wrapper's configuration.
struct RunSpec {
  std::string name;
  DType dtype = DType::kF16;
  MixedPrecisionConfig opt;
};

struct RunResult {
  std::string name;
  Bug bug = Bug::kNone;
  double initial_loss = 0, final_loss = 0;  // FP32 MSE of the stepped weights, held-out batch
  double weight_change = 0;    // ||theta_end - theta_0||_2 of what the optimizer stepped
  double frozen_fraction = 0;  // working-copy elements bit-identical to their initial value
  std::int64_t steps = 0, steps_taken = 0, steps_clipped = 0;
  double mean_clip_norm = 0;  // mean of the measured StepReport::grad_norm values
  std::vector<StepReport> reports;
  std::vector<double> train_losses;  // the working copy's loss on each step's batch
  std::vector<float> final_weights;  // the stepped weights at the end, flattened (FP32)
};

// Trains `spec` for c.steps steps from the lesson's initial weights.
RunResult train(const LessonConfig& c, const RunSpec& spec);

// A correct run and its buggy twin, and the symptom the lesson asserts.
struct Scenario {
  std::string title;
  RunSpec correct, buggy;
  std::string symptom;
};
// The scenarios of the demo: fp16-weights, clip-before-unscale, no-unscale with SGD, and
// no-unscale with AdamW (where the bug hides).
std::vector<Scenario> lesson_scenarios(const LessonConfig& c);
// The first scenario whose buggy run has this bug.
const Scenario& scenario_for(const std::vector<Scenario>& all, Bug bug);

struct ScenarioResult {
  const Scenario* scenario = nullptr;
  RunResult correct, buggy;
};
ScenarioResult run_scenario(const LessonConfig& c, const Scenario& s);

// The lesson's claims about one scenario's pair of runs.
std::vector<Claim> scenario_claims(const ScenarioResult& r);

}  // namespace mixpar::ch03
