// The Ultra-Scale Playbook's FP8 memory table (Hugging Face, "The Ultra-Scale Playbook:
// Training LLMs on GPU Clusters", section "FP8 pretraining"; docs/SOURCES.md) reproduced from
// its own per-component formats, and mixpar's bill laid out in the same components.
//
// The Playbook counts, per parameter: master weights, accumulated gradients, model weights,
// gradients and the two optimizer states, each in the format it names, a byte per FP8 value,
// nothing else (no FP8 weight cache beside a higher-precision copy, no scales). Its rows, as
// it states them (format per component; "n/a": not kept):
//   BF16 with FP32 mixed precision baseline  FP32  FP32  BF16  BF16  FP32 + FP32   = 20
//   the above without FP32 grad accumulation FP32  n/a   BF16  BF16  FP32 + FP32   = 16
//   Transformer Engine                       n/a   n/a   FP32  FP32  FP32 + FP32   = 16
//   FP8-LM's O3 level                        FP16  FP16  FP8   FP8   FP8 + FP16    =  9
//   DeepSeek-V3                              FP32  FP32  FP8   BF16  BF16 + BF16   = 15
//   Nanotron's FP8                           BF16  FP32  FP8   FP8   FP8 + FP8     = 10
// The bytes and totals below are computed from those formats (dtype_size), not typed in.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ch03_master_weights/fp8_memory.h"
#include "numerics/dtype.h"

namespace mixpar::mem {

// One row: each component's format, nullopt where the recipe keeps none. FP8 is counted as
// E4M3 (one byte; the Playbook does not split E4M3 and E5M2).
struct PlaybookRow {
  std::string name;
  bool fp8_gemms = false;
  std::optional<DType> master_weights, accumulated_gradients, model_weights, gradients,
      optimizer_first, optimizer_second;
};
std::vector<PlaybookRow> playbook_fp8_rows();  // the six rows above, in the Playbook's order

// Bytes per parameter of the same components (what print and JSON show).
struct ComponentBytes {
  double master_weights = 0, accumulated_gradients = 0, model_weights = 0, gradients = 0,
         optimizer = 0;
  double extra = 0;  // what the Playbook's columns do not hold (mixpar's scaling state)
  double total() const;
};
ComponentBytes component_bytes(const PlaybookRow& r);
// mixpar's bill in the Playbook's columns: masters -> master weights, the FP32 unscale buffer
// -> accumulated gradients, the BF16 working copy plus the FP8 copy of the GEMM weights ->
// model weights, BF16 gradients -> gradients, FP32 moments -> optimizer states, the scales ->
// extra (an unknown scaling state counts 0).
ComponentBytes component_bytes(const Fp8StateBytes& s);

// "FP32", "BF16", "FP16", "FP8" (E4M3/E5M2), "n/a".
std::string playbook_format_name(const std::optional<DType>& t);

}  // namespace mixpar::mem
