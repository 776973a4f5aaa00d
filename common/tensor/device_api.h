// The thin layer between tensors and the CUDA runtime. Built against cudart when the toolkit
// is present (device_api_cuda.cpp), otherwise against a stub that says why there is no GPU.
// Keeping it this narrow lets common/ compile and test identically with or without CUDA.
#pragma once

#include <cstddef>
#include <string>

namespace mixpar {

// True when mixpar was built with CUDA and at least one device is visible.
bool cuda_available();
int cuda_device_count();
// One line for a skipped test: "no CUDA device (cudaGetDeviceCount: ...)" or
// "mixpar was built without CUDA".
std::string cuda_unavailable_reason();

// Plain cudaMalloc/cudaFree (no managed memory); throws std::runtime_error naming the call.
void* cuda_malloc(std::size_t bytes);
void cuda_free(void* p);
// Pinned (page-locked) host memory, cudaHostAlloc / cudaFreeHost: what the GPU copies to and
// from asynchronously (HostMemoryScope(pinned), optimizer offload). Throws std::runtime_error
// naming the call, or saying that the build has no CUDA.
void* cuda_host_alloc(std::size_t bytes);
void cuda_host_free(void* p);

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
void cuda_memcpy(void* dst, const void* src, std::size_t bytes, CopyKind kind);
void cuda_memset(void* dst, int value, std::size_t bytes);
void cuda_synchronize();

}  // namespace mixpar
