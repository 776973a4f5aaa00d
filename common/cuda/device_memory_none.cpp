// device_allocator() in a build without CUDA: there is no device to allocate on.
#include <stdexcept>

#include "cuda/caching_allocator.h"

namespace mixpar::cuda {

CachingAllocator& device_allocator() {
  throw std::runtime_error("device_allocator: mixpar was built without CUDA");
}

}  // namespace mixpar::cuda
