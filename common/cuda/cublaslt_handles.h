// cuBLASLt's descriptors as owned handles, and the two calls every cublasLtMatmul caller makes
// on them: a matrix layout and a descriptor attribute, each checked. Shared by the GEMM of
// blas.cpp and the FP8 GEMM of fp8_gemm.cpp.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <memory>

#include "cuda/check.h"

namespace mixpar::cuda::lt {

// RAII for the three cuBLASLt descriptor kinds.
struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* d) const { cublasLtMatrixLayoutDestroy(d); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* d) const { cublasLtMatmulPreferenceDestroy(d); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter>;

// A column-major rows x cols matrix of `type` with leading dimension ld.
inline Layout make_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols,
                          std::int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  MIXPAR_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(
      &l, type, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols), ld));
  return Layout(l);
}

template <class V>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& value) {
  MIXPAR_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof(value)));
}

}  // namespace mixpar::cuda::lt
