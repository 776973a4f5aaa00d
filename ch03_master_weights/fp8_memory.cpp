// FP8 model-state bytes per parameter (fp8_memory.h): chapter 3's BF16 bill plus the FP8
// weight copy and each recipe's scaling state, all counted, none typed in.
#include "ch03_master_weights/fp8_memory.h"

namespace mixpar::mem {

Fp8Gemms fp8_gemms(const TrainingSetup& setup, std::int64_t params) {
  Fp8Gemms g;
  if (!setup.shape) {
    g.weight_params = params;
    return g;
  }
  const GptShape& s = *setup.shape;
  const std::int64_t c = s.n_embd, blocks_c = (c + 127) / 128;
  g.weight_params = s.n_layer * 12 * c * c;
  g.count = 4 * s.n_layer;
  // QKV C x 3C, output C x C, up C x 4C, down 4C x C: 3 + 1 + 4 + 4 (C/128)^2 blocks when 128
  // divides C; edge blocks otherwise.
  const std::int64_t blocks_3c = (3 * c + 127) / 128, blocks_4c = (4 * c + 127) / 128;
  g.blocks = s.n_layer * (blocks_c * blocks_3c + blocks_c * blocks_c + 2 * blocks_c * blocks_4c);
  return g;
}

double Fp8StateBytes::total() const {
  return parameters + fp8_weights + gradients + fp32_grad_buffer + master_params +
         optimizer_state + scaling_state.value_or(0);
}

Fp8StateBytes fp8_state_bytes(std::optional<fp8::Recipe> recipe, Optimizer o,
                              std::int64_t params, const Fp8Gemms& gemms, int amax_history) {
  const StateBytesPerParam b = state_bytes_per_param(Precision::kBf16, o);
  const double n = static_cast<double>(params);
  Fp8StateBytes r;
  r.run = recipe ? "fp8 " + std::string(fp8::name(*recipe)) : "bf16";
  r.parameters = b.parameters;
  r.gradients = b.gradients;
  r.fp32_grad_buffer = 4;  // the ledger's FP32 unscale buffer (the demo's "+ 4")
  r.master_params = b.master_params;
  r.optimizer_state = b.optimizer_state;
  if (!recipe) {
    r.scaling_state = 0;
    return r;
  }
  r.fp8_weights = static_cast<double>(gemms.weight_params) / n;
  switch (*recipe) {
    case fp8::Recipe::kDelayed:
      if (gemms.count) r.scaling_state = double(*gemms.count) * 3 * (amax_history + 2) * 4 / n;
      break;
    case fp8::Recipe::kTensorwise:
      if (gemms.count) r.scaling_state = double(*gemms.count) * 4 / n;
      break;
    case fp8::Recipe::kBlockwise:
      if (gemms.blocks) r.scaling_state = double(*gemms.blocks) * 4 / n;
      break;
  }
  return r;
}

}  // namespace mixpar::mem
