// Warmup + cosine: the values are formed in double, as PyTorch's schedulers do in Python.
#include "lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "util/errors.h"

namespace mixpar::ch08 {

LrScheduleKind parse_lr_schedule(std::string_view name) {
  if (name == "constant") return LrScheduleKind::kConstant;
  if (name == "cosine") return LrScheduleKind::kCosine;
  throw InputError("--lr-schedule: '" + std::string(name) + "' is not one of constant|cosine");
}

std::string_view lr_schedule_name(LrScheduleKind kind) {
  return kind == LrScheduleKind::kConstant ? "constant" : "cosine";
}

double LrSchedule::at(std::int64_t step) const {
  if (step < warmup_steps) {
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  if (kind == LrScheduleKind::kConstant) return lr;
  const std::int64_t span = total_steps - 1 - warmup_steps;
  if (span <= 0) return lr;  // no room to decay: warmup covers (nearly) the whole run
  const double r =
      std::clamp(static_cast<double>(step - warmup_steps) / static_cast<double>(span), 0.0, 1.0);
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * r));
}

}  // namespace mixpar::ch08
