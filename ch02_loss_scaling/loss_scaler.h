// LossScaler: none, static or dynamic loss scaling. Dynamic follows torch.amp.GradScaler
// (init 2^16, x2 after 2000 consecutive clean steps, x0.5 and skip on inf/NaN), with the
// optional cap, floor and Megatron/DeepSpeed hysteresis. Its state saves and restores exactly.
// It never touches weights or optimizer state: a skipped step is the caller not stepping.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

#include "tensor/tensor.h"
#include "util/json.h"

namespace mixpar::ch02 {

enum class ScaleMode : std::uint8_t {
  kNone,     // GradScaler(enabled=False): scale 1, no check, every step is taken
  kStatic,   // a fixed scale; a step with inf/NaN is skipped (Megatron ConstantGradScaler,
             // DeepSpeed static loss_scale), the scale never moves
  kDynamic,  // grows after clean streaks, backs off on inf/NaN
};
std::string_view mode_name(ScaleMode m);  // "none" | "static" | "dynamic"

struct LossScalerConfig {
  ScaleMode mode = ScaleMode::kDynamic;
  double init_scale = 65536.0;          // 2^16, PyTorch's init_scale; the fixed scale in kStatic
  double growth_factor = 2.0;           // > 1
  double backoff_factor = 0.5;          // in (0, 1)
  std::int64_t growth_interval = 2000;  // clean steps in a row before growing (>= 1)
  // PyTorch has neither bound (it only refuses to grow to inf); source article A
  // (docs/SOURCES.md) caps at ~2^24, DeepSpeed and Megatron floor at 1.
  double max_scale = std::numeric_limits<double>::infinity();
  double min_scale = 0.0;
  // Overflows tolerated before the scale drops: 1 = PyTorch (drop on every overflow);
  // DeepSpeed "hysteresis" / Megatron --hysteresis default 2. See update() for the exact rule.
  int hysteresis = 1;
  // DeepSpeed's consecutive_hysteresis: refill the hysteresis on every clean step (default
  // false in DeepSpeed; Megatron has no such option and refills only when the scale grows).
  bool consecutive_hysteresis = false;
};

// Presets with each framework's defaults (docs/REFERENCE.md, Loss scaling; sources in README.md).
LossScalerConfig pytorch_config();    // 2^16, interval 2000, no bounds, hysteresis 1
LossScalerConfig deepspeed_config();  // 2^16 (initial_scale_power 16), window 1000, min 1, hyst 2
LossScalerConfig megatron_config();   // 2^32, window 1000, min 1, hysteresis 2
LossScalerConfig static_config(double scale);
LossScalerConfig no_scaling_config();

// Throws InputError naming the first invalid field.
void validate(const LossScalerConfig& c);

// Everything that changes while training: what a checkpoint must hold to resume exactly.
struct LossScalerState {
  float scale = 1.0f;               // FP32, as GradScaler's _scale tensor
  std::int64_t growth_tracker = 0;  // clean steps since the last overflow or growth
  int hysteresis_left = 1;          // overflows still tolerated; 0: the next one drops the scale
  std::int64_t steps_taken = 0;
  std::int64_t steps_skipped = 0;
  bool operator==(const LossScalerState&) const = default;
};
Json state_to_json(const LossScalerState& s);    // the float scale is exact in a JSON double
LossScalerState state_from_json(const Json& j);  // InputError on a missing or bad field

// The smallest loss scale whose inverse is a finite FP32 value: unscaling multiplies by
// 1/scale in FP32 (GradScaler's inv_scale), and below 2^-128 (about 2.9e-39) that inverse is
// infinite, so 0 x inf = NaN gradients would reach the optimizer. Every scale this scaler
// holds, given or backed off to, is at least this: the float just above 2^-128.
float min_loss_scale();
// Whether 1/scale, computed as inv_scale() computes it, is a finite FP32 value.
bool has_finite_inverse(float scale);

class LossScaler {
 public:
  explicit LossScaler(LossScalerConfig config = {});  // validates config

  const LossScalerConfig& config() const { return config_; }
  ScaleMode mode() const { return config_.mode; }
  // The factor the loss (the backward's seed gradient) is multiplied by: 1 in kNone.
  float scale() const { return state_.scale; }
  // 1/scale computed in FP64 and rounded to FP32, as GradScaler.unscale_ computes inv_scale.
  float inv_scale() const;

  // GradScaler.unscale_: multiplies each gradient by inv_scale() in place (left alone when
  // inv_scale is exactly 1, as the PyTorch kernel does) and returns whether any unscaled
  // gradient holds inf/NaN: the check sees exactly what the optimizer would use (a finite
  // gradient that overflows once unscaled by a scale below 1 is caught too).
  // grads must be FP32 (PyTorch refuses "Attempting to unscale FP16 gradients": the unscaled
  // values would underflow again). A second call before update() throws std::logic_error,
  // as PyTorch does. In kNone mode it does nothing and returns false.
  bool unscale_and_check(std::span<const Tensor> grads);
  // The inf/NaN check alone, on any float dtype; changes nothing.
  static bool found_inf(std::span<const Tensor> grads);

  // Ends the step: adjusts the scale from found_inf and returns whether the optimizer step
  // is to be taken (false: skip it, leaving weights, moments and the step count alone).
  bool update(bool found_inf);

  const LossScalerState& state() const { return state_; }
  // Restores a saved state (validated: finite positive scale, counters in range).
  void load_state(const LossScalerState& s);

 private:
  void backoff();
  void grow();
  LossScalerConfig config_;
  LossScalerState state_;
  bool unscaled_ = false;  // unscale_and_check ran since the last update()
};

}  // namespace mixpar::ch02
