// convert_on_device for builds without CUDA: there is no device memory to convert, so any
// call is a caller bug; it throws with the reason (tests skip before reaching it).
#include <stdexcept>

#include "numerics/convert_cuda.h"

namespace mixpar {

void convert_on_device(const void*, DType, void*, DType, std::size_t, Saturation) {
  throw std::runtime_error("mixpar::convert_on_device: mixpar was built without CUDA");
}

}  // namespace mixpar
