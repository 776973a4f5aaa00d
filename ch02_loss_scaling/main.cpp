// ch02_loss_scaling: trains the chapter's MLP with FP32 master weights in FP32, FP16 and BF16
// under no / static / too-large static / dynamic loss scaling, and prints what the 16-bit
// gradients lost to underflow, how often they overflowed and which steps were skipped.
// Every claim of the lesson is checked (expected vs measured); a failure exits with 1.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "loss_scaling_demo_flags.h"
#include "report/claim_table.h"
#include "report/format.h"
#include "report/text_table.h"
#include "scaling_lesson.h"
#include "util/errors.h"
#include "util/json_file.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch02;

// "2^36" for powers of two, else "%g".
std::string scale_text(double s) {
  int e = 0;
  if (s > 0 && std::frexp(s, &e) == 0.5) return fmt("2^%d", e - 1);
  return fmt("%g", s);
}

void print_census(const LessonConfig& c, const GradientCensus& g) {
  std::string shape;
  std::int64_t params = 0;
  for (std::size_t i = 0; i < c.sizes.size(); ++i) {
    if (i > 0) shape += '-';
    shape += std::to_string(c.sizes[i]);
    if (i + 1 < c.sizes.size()) params += (c.sizes[i] + 1) * c.sizes[i + 1];
  }
  std::printf(
      "MLP %s (%lld parameters, GELU, MSE), batch %lld, %lld steps, loss x %s, "
      "AdamW lr %g on FP32 masters\n",
      shape.c_str(), (long long)params, (long long)c.batch, (long long)c.steps,
      scale_text(c.loss_weight).c_str(), c.lr);
  std::printf(
      "FP32 gradients at init: median |g| %.3g, max %.3g; %.1f%% below 2^-24 (FP16's "
      "smallest subnormal), %.1f%% below 2^-14 (its smallest normal)\n\n",
      g.median_abs, g.max_abs, 100 * g.below_min_subnormal, 100 * g.below_min_normal);
}

void print_table(const std::vector<RowResult>& rows) {
  TextTable t({"format", "scaling", "lost to underflow", "overflow steps", "skipped",
               "scale end (max)", "loss start -> end"});
  for (const RowResult& r : rows) {
    t.add({std::string(dtype_name(r.dtype)), r.scheme,
           fmt("%.3g%% (%lld)", 100 * r.underflow_fraction(), (long long)r.underflowed),
           std::to_string(r.overflow_steps), std::to_string(r.skipped_steps),
           scale_text(r.final_scale) + " (" + scale_text(r.max_scale_seen) + ")",
           fmt("%.4f -> %.4f", r.initial_loss, r.final_loss)});
  }
  std::printf("%s", t.str().c_str());
}

// The figure's data (scripts/figures.py: the loss-scale trajectory with its skipped steps).
Json figure_data(const LessonConfig& c, const std::vector<RowResult>& rows) {
  Json out = Json::object();
  out.set("chapter", "ch02_loss_scaling");
  out.set("steps", c.steps);
  out.set("growth_interval", c.dynamic_growth_interval);
  Json list = Json::array();
  for (const RowResult& r : rows) {
    Json j = Json::object();
    j.set("format", std::string(dtype_name(r.dtype)));
    j.set("scheme", r.scheme);
    j.set("underflowed", r.underflowed);
    j.set("underflow_fraction", r.underflow_fraction());
    j.set("skipped_steps", r.skipped_steps);
    j.set("initial_loss", r.initial_loss);
    j.set("final_loss", r.final_loss);
    Json scale = Json::array(), skipped = Json::array();
    for (float v : r.scale_per_step) scale.push_back(static_cast<double>(v));
    for (bool v : r.skipped_per_step) skipped.push_back(v);
    j.set("scale", std::move(scale));
    j.set("skipped", std::move(skipped));
    list.push_back(std::move(j));
  }
  out.set("rows", std::move(list));
  return out;
}

void print_defaults() {
  TextTable t({"framework", "initial", "growth", "after", "backoff", "hysteresis", "min", "max"});
  const auto row = [&](const char* name, const LossScalerConfig& c) {
    t.add({name, scale_text(c.init_scale), fmt("x%g", c.growth_factor),
           fmt("%lld clean", (long long)c.growth_interval), fmt("x%g", c.backoff_factor),
           std::to_string(c.hysteresis), c.min_scale > 0 ? fmt("%g", c.min_scale) : "-",
           std::isinf(c.max_scale) ? "-" : scale_text(c.max_scale)});
  };
  row("PyTorch GradScaler", pytorch_config());
  row("DeepSpeed fp16", deepspeed_config());
  row("Megatron-LM", megatron_config());
  std::printf("\n== Dynamic loss-scaling defaults (the presets of loss_scaler.h)\n%s",
              t.str().c_str());
}

int run(int argc, char** argv) {
  const LossScalingDemoFlags flags = parse_loss_scaling_demo_flags(argc, argv);
  const LessonConfig& c = flags.lesson;
  std::printf("== ch02: keeping small gradients alive\n");
  const GradientCensus census = census_at_init(c);
  print_census(c, census);
  const std::vector<RowResult> rows = run_table(c);
  print_table(rows);
  print_defaults();
  ClaimTable checks;
  checks.add(check_claims(c, census, rows));
  if (!flags.json_path.empty()) write_json_file(flags.json_path, figure_data(c, rows));
  return checks.print() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, run); }
