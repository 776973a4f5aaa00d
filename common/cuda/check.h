// Every CUDA runtime, cuBLAS and cuBLASLt call of the engine goes through one of these macros;
// a failure throws CudaError naming the call, the library's own message, the code, file and
// line. Kernel launches are checked with MIXPAR_CUDA_CHECK_LAUNCH() right after the <<<>>>
// (launch errors are only visible through cudaGetLastError). NCCL: cuda/nccl_check.h.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace mixpar::cuda {

class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& message, int code) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }  // the library's status code

 private:
  int code_;
};

// "<call> failed: <library message> (<library> <code>) at <file>:<line>"
std::string format_error(const char* library, const char* call, const char* message, int code,
                         const char* file, int line);
[[noreturn]] void throw_error(const char* library, const char* call, const char* message, int code,
                              const char* file, int line);

inline void check_cuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) {
    throw_error("cuda", call, cudaGetErrorString(err), static_cast<int>(err), file, line);
  }
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw_error("cublas", call, cublasGetStatusString(status), static_cast<int>(status), file,
                line);
  }
}

}  // namespace mixpar::cuda

#define MIXPAR_CUDA_CHECK(call) ::mixpar::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define MIXPAR_CUBLAS_CHECK(call) ::mixpar::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// cuBLASLt reports through cublasStatus_t as well; the separate name says which API failed.
#define MIXPAR_CUBLASLT_CHECK(call) ::mixpar::cuda::check_cublas((call), #call, __FILE__, __LINE__)
#define MIXPAR_CUDA_CHECK_LAUNCH() \
  ::mixpar::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
