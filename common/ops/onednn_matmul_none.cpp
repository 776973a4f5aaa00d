// A build without oneDNN (libdnnl not found, or MIXPAR_WITH_ONEDNN=OFF): every GEMM takes the
// software path, and the queries of onednn_matmul.h say so.
#include "ops/onednn_matmul.h"

namespace mixpar::ops {

bool onednn_built() { return false; }

bool onednn_matmul_available(DType, std::string* why_not) {
  if (why_not != nullptr) {
    *why_not = "this build has no oneDNN (libdnnl-dev not found, or -DMIXPAR_WITH_ONEDNN=OFF)";
  }
  return false;
}

std::string onednn_matmul_kernel(DType) { return {}; }

void set_onednn_matmul(bool) {}
bool onednn_matmul_enabled() { return false; }

namespace detail {
bool onednn_matmul(const Tensor&, const Tensor&, Tensor&, bool, bool, float, float) { return false; }
bool onednn_gemm(const Tensor&, const Tensor&, Tensor&, bool, bool, float, float) { return false; }
bool onednn_linear(const Tensor&, const Tensor&, const Tensor&, Tensor&) { return false; }
bool onednn_gemm_bias(const Tensor&, const Tensor&, const Tensor&, Tensor&) { return false; }
}  // namespace detail

}  // namespace mixpar::ops
