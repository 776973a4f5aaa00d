// The learning rate of each training step: linear warmup from lr/warmup to lr, then constant or
// a cosine from lr down to min_lr at the last step (llm.c's and nanoGPT's schedule). A pure
// function of the step, so a resumed run needs only the step number to continue it exactly.
#pragma once

#include <cstdint>
#include <string_view>

namespace mixpar::ch08 {

enum class LrScheduleKind : std::uint8_t { kConstant, kCosine };
LrScheduleKind parse_lr_schedule(std::string_view name);  // "constant" | "cosine", else InputError
std::string_view lr_schedule_name(LrScheduleKind kind);

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kCosine;
  double lr = 1e-3;               // the peak, reached at the end of warmup
  double min_lr = 1e-4;           // cosine only: the value at the last step
  std::int64_t warmup_steps = 0;  // steps 0 .. warmup-1 ramp linearly
  std::int64_t total_steps = 1;   // the cosine ends at step total_steps - 1

  // step counts from 0. Warmup: lr (step + 1) / warmup (never 0, so step 0 already learns).
  // Cosine after warmup: min_lr + (lr - min_lr) (1 + cos(pi r)) / 2, r = (step - warmup) /
  // (total - 1 - warmup) clamped to [0, 1], so the last step gets min_lr exactly.
  double at(std::int64_t step) const;
};

}  // namespace mixpar::ch08
