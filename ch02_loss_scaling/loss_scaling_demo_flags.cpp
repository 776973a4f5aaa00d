#include "loss_scaling_demo_flags.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "util/cli.h"
#include "util/errors.h"
#include "util/json_file.h"

namespace mixpar::ch02 {
namespace {

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
      .option("json", "", "also write each row's scale and skipped steps, step by step, here")
      .flag("overwrite", "replace an existing --json file (without it, an existing one is refused)");
  return a;
}

// "2^-20" or a plain number; positive and finite (nan and inf are refused, naming the flag).
double parse_scale(const std::string& flag, const std::string& text) {
  double v = 0;
  if (text.rfind("2^", 0) == 0) {
    // Every exponent past a double's range (2^-1074 .. 2^1023) gives 0 or inf, refused below:
    // clamped first, so that none is cut to an int on the way (2^4294967297 is not 2^1).
    const std::int64_t e = std::clamp<std::int64_t>(parse_int(flag, text.substr(2)), -2000, 2000);
    v = std::ldexp(1.0, static_cast<int>(e));
  } else {
    v = parse_double(flag, text);
  }
  if (!(v > 0) || !std::isfinite(v)) {
    throw InputError(flag + " must be a positive finite number, got '" + text + "'");
  }
  return v;
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

}  // namespace

LossScalingDemoFlags parse_loss_scaling_demo_flags(int argc, char** argv) {
  ArgParser args = make_parser();
  args.parse(argc, argv);
  LossScalingDemoFlags f;
  f.lesson = read_config(args);
  refuse_overwrite_without_output(args.get_flag("overwrite"), args.given("json"), "--json");
  f.json_path = args.given("json")
                    ? checked_output_path("--json", args.get("json"), args.get_flag("overwrite"))
                    : std::string();
  return f;
}

}  // namespace mixpar::ch02
