#include "numerics/dtype.h"

namespace mixpar {

std::optional<DType> parse_dtype(std::string_view n) {
  if (n == "f32" || n == "fp32" || n == "float32" || n == "float") return DType::kF32;
  if (n == "f16" || n == "fp16" || n == "float16" || n == "half") return DType::kF16;
  if (n == "bf16" || n == "bfloat16") return DType::kBF16;
  if (n == "e4m3" || n == "fp8_e4m3" || n == "float8_e4m3fn") return DType::kE4M3;
  if (n == "e5m2" || n == "fp8_e5m2" || n == "float8_e5m2") return DType::kE5M2;
  if (n == "f64" || n == "fp64" || n == "float64" || n == "double") return DType::kF64;
  return std::nullopt;
}

}  // namespace mixpar
