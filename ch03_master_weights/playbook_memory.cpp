// The Playbook's FP8 memory rows (playbook_memory.h) and their bytes, from formats.
#include "ch03_master_weights/playbook_memory.h"

namespace mixpar::mem {

namespace {

constexpr DType kFp32 = DType::kF32, kBf16 = DType::kBF16, kFp16 = DType::kF16,
                kFp8 = DType::kE4M3;

double bytes(const std::optional<DType>& t) {
  return t ? static_cast<double>(dtype_size(*t)) : 0.0;
}

}  // namespace

std::vector<PlaybookRow> playbook_fp8_rows() {
  // name, FP8 GEMMs, master weights, accumulated gradients, model weights, gradients,
  // optimizer states: the Playbook's table, column by column.
  return {
      {"BF16 with FP32 mixed precision baseline", false, kFp32, kFp32, kBf16, kBf16, kFp32, kFp32},
      {"the above without FP32 grad accumulation", false, kFp32, std::nullopt, kBf16, kBf16,
       kFp32, kFp32},
      {"Transformer Engine", true, std::nullopt, std::nullopt, kFp32, kFp32, kFp32, kFp32},
      {"FP8-LM's O3 level", true, kFp16, kFp16, kFp8, kFp8, kFp8, kFp16},
      {"DeepSeek-V3", true, kFp32, kFp32, kFp8, kBf16, kBf16, kBf16},
      {"Nanotron's FP8", true, kBf16, kFp32, kFp8, kFp8, kFp8, kFp8},
  };
}

double ComponentBytes::total() const {
  return master_weights + accumulated_gradients + model_weights + gradients + optimizer + extra;
}

ComponentBytes component_bytes(const PlaybookRow& r) {
  ComponentBytes b;
  b.master_weights = bytes(r.master_weights);
  b.accumulated_gradients = bytes(r.accumulated_gradients);
  b.model_weights = bytes(r.model_weights);
  b.gradients = bytes(r.gradients);
  b.optimizer = bytes(r.optimizer_first) + bytes(r.optimizer_second);
  return b;
}

ComponentBytes component_bytes(const Fp8StateBytes& s) {
  ComponentBytes b;
  b.master_weights = s.master_params;
  b.accumulated_gradients = s.fp32_grad_buffer;
  b.model_weights = s.parameters + s.fp8_weights;
  b.gradients = s.gradients;
  b.optimizer = s.optimizer_state;
  b.extra = s.scaling_state.value_or(0);
  return b;
}

std::string playbook_format_name(const std::optional<DType>& t) {
  if (!t) return "n/a";
  switch (*t) {
    case DType::kF32: return "FP32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "FP16";
    case DType::kE4M3:
    case DType::kE5M2: return "FP8";
    default: return std::string(dtype_name(*t));
  }
}

}  // namespace mixpar::mem
