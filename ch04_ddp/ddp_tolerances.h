// How closely N-rank DDP in FP32 matches one rank with N times the batch. The runs differ only
// in the order of FP32 additions (the loss gradient summed per rank, then over ranks),
// amplified by the optimizer's steps; these bounds hold over 10 AdamW steps. Chapter 4's
// equivalence scenario and chapter 8's data-parallel trainer tests judge their runs by them.
#pragma once

namespace mixpar::ch04 {

inline constexpr double kLossTolerance = 1e-5;     // relative, every step's loss (and grad norm)
inline constexpr double kWeightsTolerance = 1e-4;  // max |w_N - w_1| / max(1, |w_1|)

}  // namespace mixpar::ch04
