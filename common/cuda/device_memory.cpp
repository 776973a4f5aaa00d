// The cudaMalloc backend of the caching allocator, and the process's device allocator.
#include <cuda_runtime_api.h>

#include "cuda/caching_allocator.h"
#include "cuda/check.h"

namespace mixpar::cuda {

namespace {

// Plain cudaMalloc / cudaFree: no managed memory (it can hang a GPU when oversubscribed).
class CudaMallocBackend final : public MemoryBackend {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it: the allocator empties its cache and retries
      return nullptr;
    }
    MIXPAR_CUDA_CHECK(err);
    return p;
  }
  void release(void* p, std::size_t /*bytes*/) override { MIXPAR_CUDA_CHECK(cudaFree(p)); }
};

}  // namespace

CachingAllocator& device_allocator() {
  // Never destroyed: see the header.
  static CachingAllocator* const allocator =
      new CachingAllocator(std::make_unique<CudaMallocBackend>());
  return *allocator;
}

}  // namespace mixpar::cuda
