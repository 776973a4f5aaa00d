// The cudaMalloc backend of the caching allocator, and the process's device allocator.
#include <cuda_runtime_api.h>

#include <vector>

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

  // Events without timing (the cheapest kind), pooled: a training step frees thousands of
  // blocks. Called with the allocator's lock held, so the pool needs none of its own.
  EventHandle record_event(StreamHandle stream) override {
    cudaEvent_t e = nullptr;
    if (pool_.empty()) {
      MIXPAR_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    } else {
      e = pool_.back();
      pool_.pop_back();
    }
    const cudaError_t err = cudaEventRecord(e, static_cast<cudaStream_t>(stream));
    if (err != cudaSuccess) {
      pool_.push_back(e);
      MIXPAR_CUDA_CHECK(err);
    }
    return e;
  }
  void wait_event(StreamHandle stream, EventHandle event) override {
    MIXPAR_CUDA_CHECK(
        cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
  }
  // The wait captured the event's state when it was enqueued: the event may be recorded again.
  void release_event(EventHandle event) override {
    pool_.push_back(static_cast<cudaEvent_t>(event));
  }

 private:
  std::vector<cudaEvent_t> pool_;
};

}  // namespace

CachingAllocator& device_allocator() {
  // Never destroyed: see the header.
  static CachingAllocator* const allocator =
      new CachingAllocator(std::make_unique<CudaMallocBackend>());
  return *allocator;
}

}  // namespace mixpar::cuda
