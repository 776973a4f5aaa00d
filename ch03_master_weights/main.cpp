// ch03_master_weights: the one correct mixed-precision step against its three classic
// mistakes (--bug shows one of them step by step), and the memory bill of the chapter's MLP
// measured by the ledger beside the calculator's prediction. Every claim is checked; a
// failed claim exits with 1, a bad flag with 2. --bug NAME also checks the buggy run by the
// claim the correct run passes: it FAILs, as expected (report/claim_table.h), exit code 0.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "fp8_lesson.h"
#include "master_weights_demo_flags.h"
#include "memory_bill.h"
#include "order_lesson.h"
#include "report/claim_table.h"
#include "report/format.h"
#include "report/text_table.h"
#include "util/errors.h"
#include "util/json_file.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch03;

using Checks = ClaimTable;

std::string steps_taken(const RunResult& r) {
  return fmt("%lld/%lld", (long long)r.steps_taken, (long long)r.steps);
}

void add_run(TextTable& t, const RunResult& r) {
  t.add({r.name, fmt("%.4f -> %.4g", r.initial_loss, r.final_loss), fmt("%.4g", r.weight_change),
         fmt("%.1f%%", 100 * r.frozen_fraction), fmt("%lld", (long long)r.steps_clipped),
         fmt("%.4g", r.mean_clip_norm), steps_taken(r)});
}

TextTable run_table() {
  return TextTable({"run", "loss start -> end", "|w_end - w_0|", "frozen", "clipped",
                    "mean norm seen", "steps taken"});
}

std::string norm_text(double n) { return std::isnan(n) ? "-" : fmt("%.4g", n); }

// Every tenth step of both runs: what the bug does, step by step.
void print_trace(const ScenarioResult& r) {
  TextTable t({"step", "loss (correct)", "loss (bug)", "norm seen (correct)", "norm seen (bug)",
               "clip coef (bug)", "bug step taken"});
  const std::size_t n = r.correct.reports.size();
  for (std::size_t i = 0; i < n; i += n >= 10 ? n / 10 : 1) {
    const StepReport& b = r.buggy.reports[i];
    t.add({std::to_string(i), fmt("%.4g", r.correct.train_losses[i]),
           fmt("%.4g", r.buggy.train_losses[i]), norm_text(r.correct.reports[i].grad_norm),
           norm_text(b.grad_norm), fmt("%.3g", b.clip_coef), b.taken ? "yes" : "no (inf/NaN)"});
  }
  std::printf("%s", t.str().c_str());
}

void run_scenarios(const LessonConfig& c, const std::string& only, Checks& checks,
                   std::vector<ScenarioResult>& results) {
  std::printf(
      "\n== The correct order vs each mistake (FP16 working copy, static loss scale 1024)\n");
  for (const Scenario& s : lesson_scenarios(c)) {
    if (only != "all" && only != bug_name(s.buggy.opt.bug)) continue;
    const ScenarioResult r = run_scenario(c, s);
    TextTable t = run_table();
    add_run(t, r.correct);
    add_run(t, r.buggy);
    std::printf("\n%s\n  symptom: %s\n%s", s.title.c_str(), s.symptom.c_str(), t.str().c_str());
    if (only != "all") print_trace(r);
    checks.add(scenario_claims(r));
    results.push_back(r);
  }
}

// "4" or "6 = 2 + 4": measured bytes per parameter, with the FP32 unscale buffer shown apart.
std::string per_param(std::int64_t bytes, std::int64_t p, std::int64_t extra = 0) {
  if (extra == 0) return fmt("%g", double(bytes) / double(p));
  return fmt("%g = %g + %g", double(bytes) / double(p), double(bytes - extra) / double(p),
             double(extra) / double(p));
}

std::vector<MemoryBillRow> print_memory_bill(const LessonConfig& c, Checks& checks) {
  std::vector<MemoryBillRow> rows = lesson_memory_bills(c);
  TextTable t({"run", "params", "grads", "masters", "optimizer", "model states", "predicted",
               "activations (predicted)"});
  for (const MemoryBillRow& r : rows) {
    const MeasuredBytes& m = r.measured;
    const std::int64_t total = m.parameters + m.gradients + m.master_params + m.optimizer_state;
    t.add({std::string(mem::name(r.precision)) + " " + std::string(mem::name(r.optimizer)),
           per_param(m.parameters, r.params), per_param(m.gradients, r.params, r.fp32_grad_buffer),
           per_param(m.master_params, r.params), per_param(m.optimizer_state, r.params),
           per_param(total, r.params, r.fp32_grad_buffer),
           fmt("%g", double(r.predicted.total()) / double(r.params)),
           fmt("%lld B (%lld)", (long long)m.activations, (long long)r.predicted_activations)});
  }
  std::printf(
      "\n== The memory bill of the MLP (%lld parameters, batch %lld), bytes per parameter\n"
      "   measured by the ledger after one step; 'predicted' is mem::model_states\n%s",
      (long long)rows.front().params, (long long)c.batch, t.str().c_str());
  std::printf(
      "  16-bit runs hold one more FP32 gradient copy (the '+ 4'): the unscaled gradients\n"
      "  need FP32's range, as Megatron's main_grad; the ZeRO paper's 2 + 2 + 12 omits it.\n");
  checks.add(memory_claims(rows));
  return rows;
}

// The figure's data (scripts/figures.py: the bill as stacked bars, measured beside the
// formula) and the loss of every run, step by step.
Json figure_data(const std::vector<ScenarioResult>& runs, const std::vector<MemoryBillRow>& bills) {
  Json out = Json::object();
  out.set("chapter", "ch03_master_weights");
  Json memory = Json::array();
  for (const MemoryBillRow& r : bills) {
    Json j = Json::object();
    j.set("run", std::string(mem::name(r.precision)) + " " + std::string(mem::name(r.optimizer)));
    j.set("params", r.params);
    Json measured = Json::object();
    measured.set("parameters", r.measured.parameters);
    measured.set("gradients", r.measured.gradients - r.fp32_grad_buffer);
    measured.set("fp32_grad_buffer", r.fp32_grad_buffer);
    measured.set("master_params", r.measured.master_params);
    measured.set("optimizer_state", r.measured.optimizer_state);
    measured.set("activations", r.measured.activations);
    j.set("measured", std::move(measured));
    Json predicted = Json::object();
    predicted.set("parameters", r.predicted.parameters);
    predicted.set("gradients", r.predicted.gradients);
    predicted.set("fp32_grad_buffer", std::int64_t{0});
    predicted.set("master_params", r.predicted.master_params);
    predicted.set("optimizer_state", r.predicted.optimizer_state);
    predicted.set("activations", r.predicted_activations);
    j.set("predicted", std::move(predicted));
    memory.push_back(std::move(j));
  }
  out.set("memory", std::move(memory));
  Json list = Json::array();
  for (const ScenarioResult& sr : runs) {
    for (const RunResult* r : {&sr.correct, &sr.buggy}) {
      Json j = Json::object();
      j.set("run", r->name);
      Json losses = Json::array();
      for (double l : r->train_losses) losses.push_back(std::isfinite(l) ? Json(l) : Json());
      j.set("train_loss", std::move(losses));
      list.push_back(std::move(j));
    }
  }
  out.set("runs", std::move(list));
  return out;
}

void print_calculator(Checks& checks) {
  const mem::ModelStates b7 =
      mem::model_states(7'000'000'000, mem::Precision::kBf16, mem::Optimizer::kAdamW);
  const mem::ModelStates g3 =
      mem::model_states(175'000'000'000, mem::Precision::kFp32, mem::Optimizer::kAdamW);
  std::printf(
      "\n== The same calculator at scale (mixpar-mem)\n"
      "  7B, mixed precision AdamW: %g GB (article A: 98 GB, taking 7e9 x 2 B as 7 GB twice)\n"
      "  GPT-3 175B, FP32 AdamW: params %g + grads %g + m,v %g = %g GB\n",
      b7.total() / 1e9, g3.parameters / 1e9, g3.gradients / 1e9, g3.optimizer_state / 1e9,
      g3.total() / 1e9);
  checks.add({{"7B mixed-precision AdamW = 16 B/param", "112 GB", fmt("%g GB", b7.total() / 1e9),
               b7.total() == 112'000'000'000},
              {"175B FP32 AdamW = 700 + 700 + 1400 GB", "2800 GB", fmt("%g GB", g3.total() / 1e9),
               g3.parameters == 700'000'000'000 && g3.optimizer_state == 1'400'000'000'000}});
}

// The FP8 part (--fp8, or one FP8 --bug): the accumulation lesson and the recipes' failure
// modes, each measured on the correct configuration and on its mistake (fp8_lesson.h).
Json run_fp8(const std::string& bug, Checks& checks) {
  const auto wanted = [&](const char* name) { return bug == "all" || bug == name; };
  Json out = Json::object();
  if (wanted("no-promotion")) {
    const AccumulationResult r = accumulation_lesson();
    TextTable t({"accumulator", "max |C - exact| / max |exact|"});
    t.add({"FP32 (cuBLASLt, per-tensor recipes)", fmt("%.2e", r.fp32_error)});
    t.add({"14-bit tensor core, promoted to FP32 every 128 (blockwise)",
           fmt("%.2e", r.promoted_error)});
    t.add({"14-bit tensor core alone (no promotion)", fmt("%.2e", r.unpromoted_error)});
    std::printf("\n== FP8 accumulation: a K=%lld GEMM of E4M3 inputs, %lld outputs\n%s"
                "  (DeepSeek-V3 reports nearly 2%% at K=4096 without promotion on H800)\n",
                (long long)r.k, (long long)r.outputs, t.str().c_str());
    checks.add(accumulation_claims(r));
  }
  if (wanted("stale-amax")) {
    const SpikeResult r = spike_lesson();
    TextTable t({"step", "amax", "delayed: history max", "scale", "saturated", "underflow",
                 "tensorwise: scale", "saturated", "underflow"});
    Json steps = Json::array();
    for (std::size_t i = 0; i < r.steps.size(); ++i) {
      const SpikeStep& s = r.steps[i];
      const int d = int(i) - r.spike_step;
      if ((d >= -1 && d <= 2) || (d >= r.history - 1 && d <= r.history + 1)) {
        t.add({std::to_string(i), fmt("%.4g", s.amax), fmt("%.4g", s.history_max),
               fmt("%.4g", s.delayed_scale), fmt("%lld", (long long)s.delayed.saturated),
               fmt("%lld", (long long)(s.delayed.subnormal + s.delayed.flushed)),
               fmt("%.4g", s.tensorwise_scale), fmt("%lld", (long long)s.tensorwise.saturated),
               fmt("%lld", (long long)(s.tensorwise.subnormal + s.tensorwise.flushed))});
      }
      Json j = Json::object();
      j.set("amax", double(s.amax));
      j.set("history_max", double(s.history_max));
      j.set("delayed_scale", double(s.delayed_scale));
      j.set("tensorwise_scale", double(s.tensorwise_scale));
      j.set("delayed_saturated", s.delayed.saturated);
      j.set("delayed_underflow", s.delayed.subnormal + s.delayed.flushed);
      steps.push_back(std::move(j));
    }
    std::printf("\n== FP8 stale amax: one row of a 16x256 activation spikes 100x at step %d;\n"
                "   delayed scaling (amax history %d, margin 0) vs tensorwise, E4M3, %lld values "
                "per step\n%s",
                r.spike_step, r.history, (long long)r.steps.front().delayed.values,
                t.str().c_str());
    Json spike = Json::object();
    spike.set("history", std::int64_t{r.history});
    spike.set("spike_step", std::int64_t{r.spike_step});
    spike.set("steps", std::move(steps));
    out.set("stale_amax", std::move(spike));
    checks.add(spike_claims(r));
  }
  if (wanted("grads-e4m3")) {
    const GradFormatResult r = grad_format_lesson();
    TextTable t({"format", "flushed to zero", "subnormal"});
    for (const auto& [name, s] : {std::pair{"E5M2 (hybrid)", r.e5m2}, {"E4M3", r.e4m3}}) {
      t.add({name, fmt("%lld", (long long)s.flushed), fmt("%lld", (long long)s.subnormal)});
    }
    std::printf("\n== FP8 gradients: an output gradient whose 64 rows span 6 decades, one "
                "scale, %lld values\n%s",
                (long long)r.e5m2.values, t.str().c_str());
    checks.add(grad_format_claims(r));
  }
  if (wanted("per-tensor-outlier")) {
    const OutlierResult r = outlier_lesson();
    TextTable t({"scales", "underflow (subnormal or 0)", "flushed to zero"});
    t.add({"one per tensor (tensorwise)", fmt("%lld", (long long)r.tensorwise_underflow),
           fmt("%lld", (long long)r.tensorwise_flushed)});
    t.add({"one per 1x128 tile (blockwise)", fmt("%lld", (long long)r.blockwise_underflow),
           fmt("%lld", (long long)r.blockwise_flushed)});
    std::printf("\n== FP8 outlier: a 64x512 N(0,1) activation with one value 100x its amax,\n"
                "   E4M3, counted over the %lld values outside the outlier's tile\n%s",
                (long long)r.rest, t.str().c_str());
    checks.add(outlier_claims(r));
  }
  return out;
}

int run(int argc, char** argv) {
  const MasterWeightsDemoFlags flags = parse_master_weights_demo_flags(argc, argv);
  const std::string& bug = flags.bug;
  const LessonConfig& c = flags.lesson;
  std::string shape;
  for (std::int64_t s : c.sizes) {
    if (!shape.empty()) shape += '-';
    shape += std::to_string(s);
  }
  Checks checks(bug);
  if (flags.fp8) {
    std::printf("== ch03, last part: FP8 GEMMs and their scales\n");
    Json out = Json::object();
    out.set("chapter", "ch03_master_weights");
    out.set("fp8", run_fp8(bug, checks));
    if (!flags.json_path.empty()) write_json_file(flags.json_path, out);
    return checks.print() == 0 ? 0 : 1;
  }
  std::printf(
      "== ch03: the FP32 ledger\nMLP %s (GELU, MSE), batch %lld, %lld steps. One step: "
      "unscale -> check inf/NaN (skip) -> clip -> step the FP32 masters -> re-cast\n",
      shape.c_str(), (long long)c.batch, (long long)c.steps);
  std::vector<ScenarioResult> results;
  std::vector<MemoryBillRow> bills;
  run_scenarios(c, bug, checks, results);
  if (bug == "all") {
    bills = print_memory_bill(c, checks);
    print_calculator(checks);
  }
  if (!flags.json_path.empty()) write_json_file(flags.json_path, figure_data(results, bills));
  return checks.print() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, run); }
