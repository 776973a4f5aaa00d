// The CUDA runtime check of the layers below the GPU engine (numerics' device conversions,
// tensor's device_api): a failed call throws std::runtime_error "<call> failed: <CUDA's
// message> (<file>:<line>)". The engine itself (common/cuda) has cuda/check.h, whose CudaError
// also carries the library's status code. Included only by files compiled with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace mixpar::detail {

inline void check_cudart(cudaError_t err, const char* what, const char* file, int line) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(err) + " (" +
                             file + ":" + std::to_string(line) + ")");
  }
}

}  // namespace mixpar::detail

#define MIXPAR_CUDART(call) ::mixpar::detail::check_cudart((call), #call, __FILE__, __LINE__)
