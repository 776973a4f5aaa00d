// ch02_loss_scaling: trains the chapter's MLP with FP32 master weights in FP32, FP16 and BF16
// under no / static / too-large static / dynamic loss scaling, and prints what the 16-bit
// gradients lost to underflow, how often they overflowed and which steps were skipped.
// Every claim of the lesson is checked (expected vs measured); a failure exits with 1.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "report/claim_table.h"
#include "report/format.h"
#include "report/text_table.h"
#include "scaling_lesson.h"
#include "util/cli.h"
#include "util/errors.h"
#include "util/json_file.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch02;

ArgParser make_parser() {
  ArgParser a("ch02_loss_scaling",
              "Loss scaling on a small MLP whose gradients mostly underflow FP16: the share of\n"
              "gradients lost, overflow steps and skipped steps for each format and scheme.");
  a.option("steps", "200", "training steps per row")
      .option("loss-weight", "2^-20", "the loss is multiplied by this (makes gradients tiny)")
      .option("static-scale", "1024", "the hand-picked static scale")
      .option("too-large-scale", "2^40", "a static scale meant to overflow FP16")
      .option("growth-interval", "5",
              "clean steps before the dynamic scale doubles (PyTorch: 2000)")
      .option("lr", "3e-3", "AdamW learning rate on the FP32 masters")
      .option("json", "", "also write each row's scale and skipped steps, step by step, here");
  return a;
}

// "2^-20" or a plain number; positive and finite (nan and inf are refused, naming the flag).
double parse_scale(const std::string& flag, const std::string& text) {
  const double v = text.rfind("2^", 0) == 0
                       ? std::ldexp(1.0, static_cast<int>(parse_int(flag, text.substr(2))))
                       : parse_double(flag, text);
  if (!(v > 0) || !std::isfinite(v)) {
    throw InputError(flag + " must be a positive finite number, got '" + text + "'");
  }
  return v;
}

// "2^36" for powers of two, else "%g".
std::string scale_text(double s) {
  int e = 0;
  if (s > 0 && std::frexp(s, &e) == 0.5) return fmt("2^%d", e - 1);
  return fmt("%g", s);
}

LessonConfig read_config(const ArgParser& a) {
  LessonConfig c;
  c.steps = a.get_int("steps");
  c.loss_weight = parse_scale("--loss-weight", a.get("loss-weight"));
  c.static_scale = parse_scale("--static-scale", a.get("static-scale"));
  c.too_large_scale = parse_scale("--too-large-scale", a.get("too-large-scale"));
  c.dynamic_growth_interval = a.get_int("growth-interval");
  c.lr = a.get_double("lr");
  if (c.steps < 1 || c.steps > 100000) throw InputError("--steps must be in [1, 100000]");
  if (!(c.lr > 0) || !std::isfinite(c.lr)) {
    throw InputError("--lr must be a positive finite number, got '" + a.get("lr") + "'");
  }
  // The schemes themselves are validated by LossScaler (InputError on a bad scale).
  for (const Scheme& s : lesson_schemes(c)) validate(s.scaler);
  return c;
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
  ArgParser args = make_parser();
  args.parse(argc, argv);
  const LessonConfig c = read_config(args);
  const std::string json_path =
      args.given("json") ? checked_output_path("--json", args.get("json")) : std::string();
  std::printf("== ch02: keeping small gradients alive\n");
  const GradientCensus census = census_at_init(c);
  print_census(c, census);
  const std::vector<RowResult> rows = run_table(c);
  print_table(rows);
  print_defaults();
  ClaimTable checks;
  checks.add(check_claims(c, census, rows));
  if (!json_path.empty()) write_json_file(json_path, figure_data(c, rows));
  return checks.print() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, run); }
