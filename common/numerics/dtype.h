// DType: the element formats mixpar stores tensors in, and their sizes and names.
// f64 exists only for references (finite differences, accumulation ground truth).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace mixpar {

enum class DType : std::uint8_t { kF32, kF16, kBF16, kE4M3, kE5M2, kF64 };

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16,
                                       DType::kE4M3, DType::kE5M2, DType::kF64};

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kE4M3: return 1;
    case DType::kE5M2: return 1;
    case DType::kF64: return 8;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kE4M3: return "e4m3";
    case DType::kE5M2: return "e5m2";
    case DType::kF64: return "f64";
  }
  return "?";
}

// Parses "f32"/"fp32"/"float32", "f16"/"fp16"/"half", "bf16", "e4m3", "e5m2", "f64".
std::optional<DType> parse_dtype(std::string_view name);

}  // namespace mixpar
