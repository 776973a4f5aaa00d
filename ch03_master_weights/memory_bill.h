// memory_bill: the memory bill measured, not estimated. One training step of the chapter's MLP
// runs under its own MemoryLedger; the live bytes per category are set beside the calculator's
// prediction (mem::model_states) and beside the extra FP32 gradient buffer this implementation
// keeps for unscaling, which the ZeRO paper's 2 + 2 + 12 bytes per parameter leave out.
#pragma once

#include <cstdint>
#include <vector>

#include "ch02_loss_scaling/scaling_lesson.h"
#include "memory_calculator.h"
#include "mixed_precision_optimizer.h"
#include "report/claim_table.h"

namespace mixpar::ch03 {

struct MeasuredBytes {
  std::int64_t parameters = 0, gradients = 0, master_params = 0, optimizer_state = 0;
  std::int64_t activations = 0;
  std::int64_t other_live = 0, other_peak = 0;  // the batch, backward's temporaries
};

struct MemoryBillRow {
  mem::Precision precision = mem::Precision::kFp32;
  mem::Optimizer optimizer = mem::Optimizer::kAdamW;
  std::int64_t params = 0;                 // P, from the model
  mem::ModelStates predicted;              // mem::model_states(P, precision, optimizer)
  std::int64_t fp32_grad_buffer = 0;       // 4P with a 16-bit working copy, else 0
  std::int64_t predicted_activations = 0;  // B x (in + 2 x hidden... + out) x working bytes
  MeasuredBytes measured;                  // live bytes after the step
};

// Builds chapter 2's student MLP (its sizes and batch: all a bill needs of the lesson's setup)
// in the precision's working dtype and runs one full step (forward, backward,
// MixedPrecisionOptimizer::step) with everything charged to a fresh ledger.
MemoryBillRow measure_memory_bill(const ch02::StudentSetup& c, mem::Precision p, mem::Optimizer o);
// The demo's table: fp32, fp16, bf16 x AdamW, SGD with momentum.
std::vector<MemoryBillRow> lesson_memory_bills(const ch02::StudentSetup& c);

// What the MLP keeps for backward: its input, and each layer's pre-activation and (hidden
// layers) activation, in the working dtype: B x (in + 2 x sum(hidden) + out) x bytes.
std::int64_t mlp_activation_bytes(const std::vector<std::int64_t>& sizes, std::int64_t batch,
                                  DType dtype);

// The lesson's claims about the bills: measured == predicted (+ the FP32 gradient buffer).
std::vector<Claim> memory_claims(const std::vector<MemoryBillRow>& rows);

}  // namespace mixpar::ch03
