// hop_combine is the local backend's element-wise kernel (comm/local_kernels.h) on tensors:
// the ring and the backends' all-reduce share one combine loop, so they round the same way.
#include "ring_kernels.h"

#include <stdexcept>
#include <string>

#include "comm/local_kernels.h"

namespace mixpar::ch04 {
namespace {

std::byte* bytes(const Tensor& t) { return static_cast<std::byte*>(t.data()); }

}  // namespace

void hop_combine(const Tensor& incoming, const Tensor& own, Tensor& out, ReduceOp op) {
  if (incoming.numel() != out.numel() || own.numel() != out.numel()) {
    throw std::invalid_argument("hop_combine: " + std::to_string(incoming.numel()) + " + " +
                                std::to_string(own.numel()) + " -> " +
                                std::to_string(out.numel()) + " elements");
  }
  if (out.numel() == 0) return;
  local::combine_elements(bytes(incoming), incoming.dtype(), bytes(own), own.dtype(), bytes(out),
                          out.dtype(), out.numel(), op);
}

}  // namespace mixpar::ch04
