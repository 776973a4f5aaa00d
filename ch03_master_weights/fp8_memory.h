// The model-state bill of FP8 training, per parameter, beside the BF16 bill it builds on.
// FP8 here casts the GEMMs' inputs; the model keeps what chapter 3 keeps (a BF16 working copy,
// BF16 gradients and the FP32 buffer they are unscaled into, FP32 masters, FP32 AdamW state),
// and adds, per recipe:
//   * the FP8 copy of each GEMM weight (1 B per GEMM-weight parameter), cast in the forward
//     and kept for the data-gradient GEMM of the backward (Transformer Engine caches it across
//     micro-batches);
//   * the scaling state: delayed keeps, per GEMM, an amax history of H steps, the scale and
//     the amax pending for the update for each of its three tensors (input, weight, output
//     gradient): 3 x (H + 2) FP32 values; tensorwise keeps the weight copy's scale (one FP32
//     per GEMM); blockwise one FP32 scale per 128 x 128 weight block.
// FP8 does not shrink these states: it speeds the GEMMs and shrinks what they read. Recipes
// that store less (DeepSeek-V3 keeps AdamW's m and v in BF16, §3.3.3) change the optimizer,
// not the GEMM; the notes of mixpar-mem say so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ch03_master_weights/fp8_scaling.h"
#include "ch03_master_weights/memory_calculator.h"

namespace mixpar::mem {

// The GEMMs whose inputs are cast: of a GPT-2 shape, the four per layer (QKV, attention
// output, MLP up and down: 12 C^2 weights; the tied LM head and the embeddings stay BF16, as
// in Transformer Engine and DeepSeek-V3); with --params alone, every parameter (an upper
// bound) and no count of GEMMs.
struct Fp8Gemms {
  std::int64_t weight_params = 0;
  std::optional<std::int64_t> count;     // GEMMs (nullopt: unknown, --params alone)
  std::optional<std::int64_t> blocks;    // 128 x 128 weight blocks (nullopt: unknown)
};
Fp8Gemms fp8_gemms(const TrainingSetup& setup, std::int64_t params);

// Bytes per parameter of one run: recipe nullopt is the BF16 bill itself.
struct Fp8StateBytes {
  std::string run;  // "bf16", "fp8 delayed", "fp8 tensorwise", "fp8 blockwise"
  double parameters = 0, fp8_weights = 0, gradients = 0, fp32_grad_buffer = 0,
         master_params = 0, optimizer_state = 0;
  std::optional<double> scaling_state;  // nullopt: unknown without a shape (delayed, blockwise)
  double total() const;  // without an unknown scaling state
};
Fp8StateBytes fp8_state_bytes(std::optional<fp8::Recipe> recipe, Optimizer o,
                              std::int64_t params, const Fp8Gemms& gemms, int amax_history);

}  // namespace mixpar::mem
