// device_api without CUDA: every device call explains that the build has no GPU engine.
#include <stdexcept>

#include "tensor/device_api.h"

namespace mixpar {

namespace {
[[noreturn]] void no_cuda() { throw std::runtime_error("mixpar was built without CUDA"); }
}  // namespace

bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return "mixpar was built without CUDA"; }
void* cuda_malloc(std::size_t) { no_cuda(); }
void cuda_free(void*) { no_cuda(); }
void* cuda_host_alloc(std::size_t) { no_cuda(); }
void cuda_host_free(void*) { no_cuda(); }
void cuda_memcpy(void*, const void*, std::size_t, CopyKind) { no_cuda(); }
void cuda_memset(void*, int, std::size_t) { no_cuda(); }
void cuda_synchronize() { no_cuda(); }

}  // namespace mixpar
