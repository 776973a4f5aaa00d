// The cuBLASLt epilogues the linear layers ask for, and the book of what became of each call:
// fused (the epilogue ran) or declined (cuBLASLt offered no algorithm, and the caller ran the
// unfused GEMM + kernel sequence). A decline is legitimate (a dtype or alignment the library
// does not fuse) but must never be silent: the first one is kept with its cuBLAS status, and
// the tests assert that the epilogue ran wherever the architecture supports it. Plain C++, so
// the bookkeeping is tested without a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

#include "numerics/dtype.h"

namespace mixpar::cuda {

// Epilogues in row-major terms (out [M, N] = op(a) op(b)):
enum class Epilogue : std::uint8_t {
  kNone,
  kBias,          // out = acc + bias[col]                          (CUBLASLT_EPILOGUE_BIAS)
  kGeluAuxBias,   // aux = acc + bias[col]; out = gelu(aux)         (GELU_AUX_BIAS)
  kDGeluBGrad,    // out = acc * gelu'(aux); bias_grad = sum over rows of out (DGELU_BGRAD)
  kBiasGradOfB,   // bias_grad [N] = sum over K of op(b): for dW = x^T dy it is db = colsum(dy).
                  // cuBLASLt's BGRADA: the row-major b is the library's first operand.
};
inline constexpr int kEpilogueCount = 5;
const char* epilogue_name(Epilogue e);

// Whether cuBLASLt fuses epilogue e for operands of dtype `in` on a device of compute
// capability `sm_major`.x: every epilogue here with f16/bf16 operands from Ampere (8.x) on
// (cuBLASLt's epilogue table), the bias epilogue with f32 operands too. Elsewhere a decline is
// allowed; here it is a failure of the fused tests.
bool epilogue_expected(Epilogue e, DType in, int sm_major);

class EpilogueStats {
 public:
  struct Counts {
    std::array<std::int64_t, kEpilogueCount> fused{}, declined{};
    std::string first_decline;  // "" until one: what, where, and cuBLAS's status
    std::int64_t fused_of(Epilogue e) const { return fused[static_cast<std::size_t>(e)]; }
    std::int64_t declined_of(Epilogue e) const { return declined[static_cast<std::size_t>(e)]; }
    std::int64_t total_fused() const;
    std::int64_t total_declined() const;
  };

  void on_fused(Epilogue e);
  // Returns true for the first decline of this book: the caller logs it (once).
  bool on_declined(Epilogue e, const std::string& why);
  Counts counts() const;
  void reset();

 private:
  mutable std::mutex mu_;
  Counts c_;
};

}  // namespace mixpar::cuda
