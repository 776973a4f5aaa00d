// device_api over the CUDA runtime. Every call is checked; errors name the call, file and line.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "numerics/cudart_check.h"
#include "tensor/device_api.h"

namespace mixpar {

namespace {

cudaMemcpyKind to_cuda(CopyKind k) {
  switch (k) {
    case CopyKind::kHostToDevice: return cudaMemcpyHostToDevice;
    case CopyKind::kDeviceToHost: return cudaMemcpyDeviceToHost;
    case CopyKind::kDeviceToDevice: return cudaMemcpyDeviceToDevice;
  }
  return cudaMemcpyDefault;
}
}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

std::string cuda_unavailable_reason() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(err) + ")";
  }
  return n == 0 ? "no CUDA device" : "";
}

void* cuda_malloc(std::size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  MIXPAR_CUDART(cudaMalloc(&p, bytes));
  return p;
}

void cuda_free(void* p) {
  if (p) MIXPAR_CUDART(cudaFree(p));
}

void* cuda_host_alloc(std::size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  MIXPAR_CUDART(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  return p;
}

void cuda_host_free(void* p) {
  if (p) MIXPAR_CUDART(cudaFreeHost(p));
}

void cuda_memcpy(void* dst, const void* src, std::size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  MIXPAR_CUDART(cudaMemcpy(dst, src, bytes, to_cuda(kind)));
}

void cuda_memset(void* dst, int value, std::size_t bytes) {
  if (bytes == 0) return;
  MIXPAR_CUDART(cudaMemset(dst, value, bytes));
}

void cuda_synchronize() { MIXPAR_CUDART(cudaDeviceSynchronize()); }

}  // namespace mixpar
