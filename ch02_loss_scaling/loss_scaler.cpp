// LossScaler: the update rule is Megatron's DynamicGradScaler.update (PyTorch's
// _amp_update_scale_ when hysteresis is 1), with the optional cap and DeepSpeed's
// consecutive_hysteresis. Unscaling is PyTorch's _amp_foreach_non_finite_check_and_unscale_.
#include "loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

#include "ops/elementwise.h"
#include "ops/reductions.h"
#include "util/errors.h"

namespace mixpar::ch02 {

std::string_view mode_name(ScaleMode m) {
  switch (m) {
    case ScaleMode::kNone: return "none";
    case ScaleMode::kStatic: return "static";
    case ScaleMode::kDynamic: return "dynamic";
  }
  return "?";
}

LossScalerConfig pytorch_config() { return LossScalerConfig{}; }

LossScalerConfig deepspeed_config() {
  LossScalerConfig c;
  c.growth_interval = 1000;  // loss_scale_window
  c.min_scale = 1.0;         // min_loss_scale
  c.hysteresis = 2;
  return c;
}

LossScalerConfig megatron_config() {
  LossScalerConfig c;
  c.init_scale = 4294967296.0;  // --initial-loss-scale 2**32
  c.growth_interval = 1000;     // --loss-scale-window
  c.min_scale = 1.0;            // --min-loss-scale
  c.hysteresis = 2;             // --hysteresis
  return c;
}

LossScalerConfig static_config(double scale) {
  LossScalerConfig c;
  c.mode = ScaleMode::kStatic;
  c.init_scale = scale;
  return c;
}

LossScalerConfig no_scaling_config() {
  LossScalerConfig c;
  c.mode = ScaleMode::kNone;
  c.init_scale = 1.0;
  return c;
}

float min_loss_scale() {
  return std::nextafter(std::ldexp(1.0f, -128), std::numeric_limits<float>::infinity());
}

bool has_finite_inverse(float scale) {
  return std::isfinite(static_cast<float>(1.0 / static_cast<double>(scale)));
}

void validate(const LossScalerConfig& c) {
  auto fail = [](const std::string& what) { throw InputError("LossScaler: " + what); };
  const double s = c.init_scale;
  // The scale lives in FP32 (GradScaler's _scale): it must stay a finite positive float.
  if (!(s > 0) || !std::isfinite(static_cast<float>(s))) {
    fail("init_scale " + std::to_string(s) + " is not a positive finite FP32 value");
  }
  if (!has_finite_inverse(static_cast<float>(s))) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "init_scale %g is below %g: its inverse is not a finite FP32 value", s,
                  static_cast<double>(min_loss_scale()));
    fail(text);
  }
  if (c.mode == ScaleMode::kNone && s != 1.0) fail("mode none needs init_scale 1");
  if (!(c.growth_factor > 1.0)) fail("growth_factor must be > 1");  // PyTorch asserts both
  if (!(c.backoff_factor > 0.0 && c.backoff_factor < 1.0)) fail("backoff_factor must be in (0, 1)");
  if (c.growth_interval < 1) fail("growth_interval must be >= 1");
  if (c.hysteresis < 1) fail("hysteresis must be >= 1");
  if (!(c.min_scale >= 0.0) || !(c.max_scale > 0.0)) fail("min_scale/max_scale out of range");
  if (c.mode == ScaleMode::kDynamic && !(c.min_scale <= s && s <= c.max_scale)) {
    fail("init_scale must lie in [min_scale, max_scale]");  // Megatron asserts min <= initial
  }
}

Json state_to_json(const LossScalerState& s) {
  Json j = Json::object();
  j.set("scale", static_cast<double>(s.scale));
  j.set("growth_tracker", s.growth_tracker);
  j.set("hysteresis_left", s.hysteresis_left);
  j.set("steps_taken", s.steps_taken);
  j.set("steps_skipped", s.steps_skipped);
  return j;
}

LossScalerState state_from_json(const Json& j) {
  LossScalerState s;
  const double scale = j.at("scale").as_double();
  s.scale = static_cast<float>(scale);
  if (static_cast<double>(s.scale) != scale) {
    throw InputError("loss scaler state: scale " + std::to_string(scale) + " is not an FP32 value");
  }
  s.growth_tracker = j.at("growth_tracker").as_int();
  const std::int64_t h = j.at("hysteresis_left").as_int();
  if (h < 0 || h > 1000000) throw InputError("loss scaler state: hysteresis_left out of range");
  s.hysteresis_left = static_cast<int>(h);
  s.steps_taken = j.at("steps_taken").as_int();
  s.steps_skipped = j.at("steps_skipped").as_int();
  return s;
}

LossScaler::LossScaler(LossScalerConfig config) : config_(config) {
  validate(config_);
  state_.scale = static_cast<float>(config_.init_scale);
  state_.hysteresis_left = config_.hysteresis;
}

float LossScaler::inv_scale() const {
  // "FP32 division can be imprecise for certain compile options, so we carry out the
  // reciprocal in FP64" (torch/amp/grad_scaler.py).
  return static_cast<float>(1.0 / static_cast<double>(state_.scale));
}

bool LossScaler::found_inf(std::span<const Tensor> grads) {
  for (const Tensor& g : grads) {
    if (ops::has_inf_or_nan(g)) return true;
  }
  return false;
}

bool LossScaler::unscale_and_check(std::span<const Tensor> grads) {
  if (config_.mode == ScaleMode::kNone) return false;
  if (unscaled_) {
    throw std::logic_error(
        "LossScaler::unscale_and_check: already called since the last update() (PyTorch: "
        "\"unscale_() has already been called on this optimizer since the last update()\")");
  }
  for (const Tensor& g : grads) {
    if (g.dtype() != DType::kF32) {
      throw std::invalid_argument("LossScaler::unscale_and_check: gradient is " +
                                  std::string(dtype_name(g.dtype())) +
                                  ", not f32: unscale the FP32 copy on the master weights");
    }
  }
  // The check reads the unscaled values, the optimizer's: an inf or NaN stays one whatever
  // it is multiplied by (inv_scale is finite and positive: every scale has a finite
  // inverse), and a finite value that overflows once unscaled is caught as well.
  const float inv = inv_scale();
  if (inv != 1.0f) {
    for (const Tensor& g : grads) {
      Tensor handle = g;  // same storage: unscaled in place
      ops::scale(handle, inv);
    }
  }
  unscaled_ = true;
  return found_inf(grads);
}

void LossScaler::backoff() {
  // Megatron: torch.max(scale * backoff_factor, min_scale); DeepSpeed: max(cur / 2, min).
  const double next =
      std::max(static_cast<double>(state_.scale) * config_.backoff_factor, config_.min_scale);
  const float rounded = static_cast<float>(next);
  // Below min_loss_scale() the inverse is infinite and unscaling would turn zeros into NaN:
  // a long run of overflows stops there.
  state_.scale = std::max(rounded, min_loss_scale());
}

void LossScaler::grow() {
  const double next =
      std::min(static_cast<double>(state_.scale) * config_.growth_factor, config_.max_scale);
  const float rounded = static_cast<float>(next);
  // PyTorch: "Do not grow the scale past fp32 bounds to inf."
  if (std::isfinite(rounded)) state_.scale = rounded;
}

bool LossScaler::update(bool found_inf) {
  unscaled_ = false;
  if (config_.mode == ScaleMode::kNone) {
    ++state_.steps_taken;  // GradScaler(enabled=False).step always steps
    return true;
  }
  if (config_.mode == ScaleMode::kStatic) {
    ++(found_inf ? state_.steps_skipped : state_.steps_taken);
    return !found_inf;
  }
  if (found_inf) {
    // Megatron DynamicGradScaler.update: growth tracker to 0, hysteresis tracker down by one,
    // and the scale drops once it is exhausted. It is NOT refilled by clean steps (unless
    // consecutive_hysteresis), only by growth: with hysteresis 2, two overflows 500 clean
    // steps apart still drop the scale, and after the first drop every overflow drops it.
    state_.growth_tracker = 0;
    state_.hysteresis_left = std::max(state_.hysteresis_left - 1, 0);
    if (state_.hysteresis_left == 0) backoff();
    ++state_.steps_skipped;  // skipped even when hysteresis holds the scale (DeepSpeed logs it)
    return false;
  }
  if (config_.consecutive_hysteresis) state_.hysteresis_left = config_.hysteresis;
  // PyTorch's kernel: successful = tracker + 1; grow when it reaches growth_interval.
  if (++state_.growth_tracker == config_.growth_interval) {
    state_.growth_tracker = 0;
    state_.hysteresis_left = config_.hysteresis;
    grow();
  }
  ++state_.steps_taken;
  return true;
}

void LossScaler::load_state(const LossScalerState& s) {
  if (!(s.scale > 0.0f) || !std::isfinite(s.scale) || !has_finite_inverse(s.scale)) {
    throw InputError("LossScaler::load_state: scale must be finite, positive and have a finite "
                     "FP32 inverse");
  }
  if (s.growth_tracker < 0 || s.growth_tracker >= config_.growth_interval) {
    throw InputError("LossScaler::load_state: growth_tracker " + std::to_string(s.growth_tracker) +
                     " is outside [0, growth_interval)");
  }
  if (s.hysteresis_left < 0 || s.hysteresis_left > config_.hysteresis) {
    throw InputError("LossScaler::load_state: hysteresis_left outside [0, hysteresis]");
  }
  if (s.steps_taken < 0 || s.steps_skipped < 0) {
    throw InputError("LossScaler::load_state: negative step counts");
  }
  if (config_.mode != ScaleMode::kDynamic && s.scale != static_cast<float>(config_.init_scale)) {
    throw InputError("LossScaler::load_state: a " + std::string(mode_name(config_.mode)) +
                     " scaler's scale cannot change");
  }
  state_ = s;
  unscaled_ = false;
}

}  // namespace mixpar::ch02
