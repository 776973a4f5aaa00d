// fp8_gemm: one cublasLtMatmul in the TN format cuBLASLt's FP8 kernels take (fp8_gemm_args.h),
// per-tensor dequantization scales as device pointers, FP32 accumulation, optional amax of D.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/cublaslt_handles.h"
#include "cuda/fp8.h"

namespace mixpar::cuda {

namespace {

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::kE4M3: return CUDA_R_8F_E4M3;
    case DType::kE5M2: return CUDA_R_8F_E5M2;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF32: return CUDA_R_32F;
    default: throw std::invalid_argument("fp8 gemm: no cuBLASLt type for " +
                                         std::string(dtype_name(t)));
  }
}

using lt::Layout;
using lt::MatmulDesc;
using lt::Preference;
using lt::set_attr;

Layout layout(DType t, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return lt::make_layout(lt_type(t), rows, cols, ld);
}

// Runs the GEMM once; `with_amax` asks the epilogue for max |D|. Returns cuBLASLt's status
// for the heuristic or the matmul (the caller decides what is an error).
cublasStatus_t run_once(Blas& blas, const Fp8GemmCall& c, const Fp8LtArgs& g, bool with_amax) {
  cublasLtMatmulDesc_t raw = nullptr;
  MIXPAR_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const MatmulDesc desc(raw);
  set_attr(raw, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);  // the TN rule
  set_attr(raw, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  // cuBLASLt's A is the row-major b, its B the row-major a (fp8_gemm_args.h).
  set_attr(raw, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(c.b_scale_inv));
  set_attr(raw, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(c.a_scale_inv));
  const std::int8_t fast = c.fast_accum ? 1 : 0;
  set_attr(raw, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast);
  if (with_amax) {
    set_attr(raw, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, static_cast<void*>(c.amax_out));
  }
  const Layout la = layout(g.first_format, g.first_rows, g.first_cols, g.ld_first);
  const Layout lb = layout(g.second_format, g.second_rows, g.second_cols, g.ld_second);
  const Layout ld = layout(c.shape.out_type, g.m, g.n, g.ld_out);  // C (unread: beta 0) and D

  cublasLtMatmulPreference_t pref_raw = nullptr;
  MIXPAR_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref_raw));
  const Preference pref(pref_raw);
  const std::size_t ws = Blas::kWorkspaceBytes;
  MIXPAR_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(blas.lt_handle(), raw, la.get(), lb.get(),
                                                    ld.get(), ld.get(), pref_raw, 1, &result,
                                                    &returned);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  if (returned == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(blas.lt_handle(), raw, &alpha, c.b, la.get(), c.a, lb.get(), &beta, c.out,
                        ld.get(), c.out, ld.get(), &result.algo, blas.workspace(),
                        Blas::kWorkspaceBytes, blas.stream());
}

}  // namespace

void require_fp8_device() {
  static std::mutex mutex;  // ranks may be threads of one process (the local backend)
  static std::map<int, std::string> reason_by_device;  // "" = supported
  const std::lock_guard<std::mutex> lock(mutex);
  int device = 0;
  MIXPAR_CUDA_CHECK(cudaGetDevice(&device));
  auto it = reason_by_device.find(device);
  if (it == reason_by_device.end()) {
    int major = 0, minor = 0;
    MIXPAR_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    MIXPAR_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    it = reason_by_device.emplace(device, fp8_gemm_unsupported_reason(major, minor)).first;
  }
  if (!it->second.empty()) {
    throw CudaError("fp8_gemm: " + it->second, static_cast<int>(CUBLAS_STATUS_ARCH_MISMATCH));
  }
}

void fp8_gemm(Blas& blas, const Fp8GemmCall& c) {
  const Fp8LtArgs g = fp8_lt_args(c.shape);
  check_fp8_alignment(c.a, "a");
  check_fp8_alignment(c.b, "b");
  check_fp8_alignment(c.out, "out");
  if (c.a_scale_inv == nullptr || c.b_scale_inv == nullptr) {
    throw std::invalid_argument("fp8 gemm: a_scale_inv and b_scale_inv are device pointers to "
                                "one FP32 each; null given");
  }
  require_fp8_device();
  cublasStatus_t s = run_once(blas, c, g, c.amax_out != nullptr);
  if (s == CUBLAS_STATUS_INVALID_VALUE && c.amax_out != nullptr) {
    // Refused with the amax: if it runs without, the amax was the refused part.
    s = run_once(blas, c, g, false);
    MIXPAR_CUBLASLT_CHECK(s);
    fp8_amax(c.out, c.shape.out_type, c.shape.M * c.shape.N, c.amax_out, blas.stream());
    return;
  }
  MIXPAR_CUBLASLT_CHECK(s);
}

}  // namespace mixpar::cuda
